//! Cumulative ops (one `Scan` primitive, the op a parameter). `axis: None` scans the
//! flattened array, as MLX. NaN propagates through cummax/cummin on every float dtype, as
//! numpy (MLX's float16/bfloat16 kernels turn it into 0).

use super::{astype, record, reshape};
use crate::array::Array;
use kiln_base::shape::normalize_axis;
use kiln_base::{DType, Primitive, Result, ScanOp};

fn scan(op: ScanOp, x: &Array, axis: Option<i64>, reverse: bool, inclusive: bool) -> Result<Array> {
    let name = Primitive::Scan { op, axis: 0, reverse, inclusive }.name();
    let (x, axis) = match axis {
        None => (reshape(x, &[-1])?, 0),
        Some(a) => (x.clone(), normalize_axis(name, a, x.ndim())?),
    };
    // MLX: a bool cumsum counts in int32 (cumprod/cummax/cummin of bools stay bool: and/or).
    let dtype = match (op, x.dtype()) {
        (ScanOp::Sum, DType::Bool) => DType::I32,
        (ScanOp::LogAddExp, d) => d.to_float(),
        (_, d) => d,
    };
    record(Primitive::Scan { op, axis, reverse, inclusive }, vec![astype(&x, dtype)?])
}

macro_rules! scans {
    ($($name:ident => $op:ident: $what:literal),* $(,)?) => {$(
        #[doc = concat!("Cumulative ", $what, " along `axis` (of the flattened array when `None`); ")]
        #[doc = "`reverse` runs from the end, `inclusive: false` shifts by one from the identity."]
        pub fn $name(x: &Array, axis: Option<i64>, reverse: bool, inclusive: bool) -> Result<Array> {
            scan(ScanOp::$op, x, axis, reverse, inclusive)
        }
    )*};
}

scans!(cumsum => Sum: "sum (bools count in int32)", cumprod => Prod: "product",
    cummax => Max: "maximum (NaN propagates)", cummin => Min: "minimum (NaN propagates)",
    logcumsumexp => LogAddExp: "log-sum-exp (integers give float32)");
