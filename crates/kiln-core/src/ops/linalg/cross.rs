//! `linalg.cross`: the cross product of 3-vectors along an axis (2-vectors get a zero third
//! component, as in MLX).

use crate::array::Array;
use crate::ops::{broadcast_to, concatenate, multiply, slice, subtract, zeros};
use kiln_base::shape::{broadcast_shapes, normalize_axis};
use kiln_base::{ensure, Result};

const OP: &str = "linalg::cross";

/// Pads a size-2 `axis` to size 3 with zeros.
fn to_three(x: &Array, axis: usize) -> Result<Array> {
    ensure!(
        matches!(x.shape()[axis], 2 | 3),
        Value,
        OP,
        "The specified axis must have size 2 or 3."
    );
    if x.shape()[axis] == 3 {
        return Ok(x.clone());
    }
    let mut shape = x.shape().to_vec();
    shape[axis] = 1;
    concatenate(&[x.clone(), zeros(&shape, x.dtype())?], axis as i64)
}

/// Component `i` of `x` along `axis`, keeping the axis (size 1).
fn component(x: &Array, axis: usize, i: i64) -> Result<Array> {
    let n = x.ndim();
    let (mut starts, mut stops) = (vec![None; n], vec![None; n]);
    starts[axis] = Some(i);
    stops[axis] = Some(i + 1);
    slice(x, &starts, &stops, &vec![1; n])
}

/// `a x b` along `axis` (broadcasting the other axes).
pub fn cross(a: &Array, b: &Array, axis: i64) -> Result<Array> {
    let a = to_three(a, normalize_axis(OP, axis, a.ndim())?)?;
    let b = to_three(b, normalize_axis(OP, axis, b.ndim())?)?;
    let shape = broadcast_shapes(OP, a.shape(), b.shape())?;
    let ax = normalize_axis(OP, axis, shape.len())?;
    let (a, b) = (broadcast_to(&a, &shape)?, broadcast_to(&b, &shape)?);
    let comp = |x: &Array, i| component(x, ax, i);
    let term = |i: i64, j: i64| -> Result<Array> {
        subtract(&multiply(&comp(&a, i)?, &comp(&b, j)?)?, &multiply(&comp(&a, j)?, &comp(&b, i)?)?)
    };
    concatenate(&[term(1, 2)?, term(2, 0)?, term(0, 1)?], ax as i64)
}
