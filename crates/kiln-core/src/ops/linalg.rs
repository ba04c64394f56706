//! Matrix products.

use super::{astype, broadcast_to, expand_dims, record, squeeze};
use crate::array::Array;
use kiln_base::shape::{broadcast_shapes, fmt_shape};
use kiln_base::{bail, ensure, Primitive, Result};

/// numpy's `matmul`: 1-d operands gain and lose an axis, batch dims broadcast.
pub fn matmul(a: &Array, b: &Array) -> Result<Array> {
    let op = "matmul";
    ensure!(
        a.ndim() >= 1 && b.ndim() >= 1,
        Value,
        op,
        "Got 0-dimension input. Inputs must have at least one dimension."
    );
    let dtype = a.dtype().promote(b.dtype());
    if !dtype.is_float() {
        bail!(Value, op, "Only real floating point types are supported but {dtype} was given.");
    }
    let a1 = if a.ndim() == 1 { expand_dims(a, &[0])? } else { a.clone() };
    let b1 = if b.ndim() == 1 { expand_dims(b, &[-1])? } else { b.clone() };
    let (ra, rb) = (a1.ndim(), b1.ndim());
    ensure!(
        a1.shape()[ra - 1] == b1.shape()[rb - 2],
        Value,
        op,
        "Last dimension of first input with shape {} must match second to last dimension of \
         second input with shape {}.",
        fmt_shape(a.shape()),
        fmt_shape(b.shape())
    );
    let batch = broadcast_shapes(op, &a1.shape()[..ra - 2], &b1.shape()[..rb - 2])?;
    let with_batch = |x: &Array, r: usize| -> Result<Array> {
        let mut shape = batch.to_vec();
        shape.extend_from_slice(&x.shape()[r - 2..]);
        broadcast_to(&astype(x, dtype)?, &shape)
    };
    let mut out = record(Primitive::Matmul, vec![with_batch(&a1, ra)?, with_batch(&b1, rb)?])?;
    if b.ndim() == 1 {
        out = squeeze(&out, Some(&[-1]))?;
    }
    if a.ndim() == 1 {
        out = squeeze(&out, Some(&[if b.ndim() == 1 { -1 } else { -2 }]))?;
    }
    Ok(out)
}
