//! Reductions. The primitive keeps reduced axes as size 1; the op squeezes them unless
//! `keepdims`.

use super::{astype, divide, record, reshape, scalar};
use crate::array::Array;
use kiln_base::shape::{normalize_axes, normalize_axis};
use kiln_base::{bail, ArgReduceOp, DType, Primitive, ReduceOp, Result, Scalar};

fn op_name(op: ReduceOp) -> &'static str {
    Primitive::Reduce { op, axes: vec![] }.name()
}

/// Axes to reduce: all when `None`.
fn reduce_axes(op: &'static str, x: &Array, axes: Option<&[i64]>) -> Result<Vec<usize>> {
    match axes {
        None => Ok((0..x.ndim()).collect()),
        Some(axes) => normalize_axes(op, axes, x.ndim()),
    }
}

/// Drops the reduced (size-1) axes unless `keepdims`.
fn finish(out: Array, axes: &[usize], keepdims: bool) -> Result<Array> {
    if keepdims {
        return Ok(out);
    }
    let shape: Vec<i64> =
        (0..out.ndim()).filter(|i| !axes.contains(i)).map(|i| out.shape()[i] as i64).collect();
    reshape(&out, &shape)
}

fn reduce(op: ReduceOp, x: &Array, axes: Option<&[i64]>, keepdims: bool) -> Result<Array> {
    let name = op_name(op);
    let axes = reduce_axes(name, x, axes)?;
    if axes.is_empty() {
        return Ok(x.clone());
    }
    if matches!(op, ReduceOp::Max | ReduceOp::Min) {
        if let Some(&a) = axes.iter().find(|&&a| x.shape()[a] == 0) {
            bail!(Value, name, "Cannot {name} reduce over axis {a} with size 0.");
        }
    }
    // Sums and products of small integers accumulate in 32 bits, as in MLX.
    let dtype = match (op, x.dtype()) {
        (ReduceOp::Sum | ReduceOp::Prod, DType::Bool | DType::I8 | DType::I16) => DType::I32,
        (ReduceOp::Sum | ReduceOp::Prod, DType::U8 | DType::U16) => DType::U32,
        (_, d) => d,
    };
    let out = record(Primitive::Reduce { op, axes: axes.clone() }, vec![astype(x, dtype)?])?;
    finish(out, &axes, keepdims)
}

macro_rules! reductions {
    ($($name:ident => $op:ident),*) => {$(
        #[doc = concat!("`", stringify!($name), "` over `axes` (all when `None`).")]
        pub fn $name(x: &Array, axes: Option<&[i64]>, keepdims: bool) -> Result<Array> {
            reduce(ReduceOp::$op, x, axes, keepdims)
        }
    )*};
}
reductions!(sum => Sum, prod => Prod, max => Max, min => Min);

/// Arithmetic mean over `axes`; integers give float32.
pub fn mean(x: &Array, axes: Option<&[i64]>, keepdims: bool) -> Result<Array> {
    let axes_n = reduce_axes("mean", x, axes)?;
    let count: usize = axes_n.iter().map(|&a| x.shape()[a]).product();
    let dtype = x.dtype().to_float();
    let total = sum(&astype(x, dtype)?, axes, keepdims)?;
    divide(&total, &scalar(Scalar::Float(count as f64), dtype)?)
}

fn arg_reduce(op: ArgReduceOp, x: &Array, axis: Option<i64>, keepdims: bool) -> Result<Array> {
    let name = Primitive::ArgReduce { op, axis: 0 }.name();
    if x.size() == 0 {
        bail!(Value, name, "Cannot {name} reduce zero size array.");
    }
    let Some(axis) = axis else {
        let flat = record(Primitive::ArgReduce { op, axis: 0 }, vec![reshape(x, &[-1])?])?;
        let ones = vec![1; if keepdims { x.ndim() } else { 0 }];
        return reshape(&flat, &ones);
    };
    let axis = normalize_axis(name, axis, x.ndim())?;
    let out = record(Primitive::ArgReduce { op, axis }, vec![x.clone()])?;
    finish(out, &[axis], keepdims)
}

/// Index of the first maximum along `axis` (of the flattened array when `None`), uint32.
pub fn argmax(x: &Array, axis: Option<i64>, keepdims: bool) -> Result<Array> {
    arg_reduce(ArgReduceOp::ArgMax, x, axis, keepdims)
}

/// Index of the first minimum along `axis` (of the flattened array when `None`), uint32.
pub fn argmin(x: &Array, axis: Option<i64>, keepdims: bool) -> Result<Array> {
    arg_reduce(ArgReduceOp::ArgMin, x, axis, keepdims)
}
