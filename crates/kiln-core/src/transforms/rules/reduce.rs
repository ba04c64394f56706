//! Gradients of reductions. The primitives keep reduced axes as size 1, so cotangents and
//! outputs broadcast straight back over the input.

use super::zeros_like;
use crate::array::Array;
use crate::ops;
use kiln_base::{Primitive, ReduceOp, Result};

fn axes_i64(axes: &[usize]) -> Vec<i64> {
    axes.iter().map(|&a| a as i64).collect()
}

/// Where the input equals the (broadcast) max/min, split evenly between ties.
fn extremum_weights(x: &Array, out: &Array, axes: &[usize]) -> Result<Array> {
    let hit = ops::astype(&ops::equal(x, &ops::broadcast_to(out, x.shape())?)?, x.dtype())?;
    let count = ops::sum(&hit, Some(&axes_i64(axes)), true)?;
    ops::divide(&hit, &ops::broadcast_to(&count, x.shape())?)
}

pub(super) fn vjp(
    prim: &Primitive,
    primals: &[Array],
    g: &Array,
    argnums: &[usize],
    out: &Array,
) -> Result<Vec<Array>> {
    let x = &primals[0];
    let grad = match prim {
        Primitive::Reduce { op, axes } => {
            let spread = ops::broadcast_to(g, x.shape())?;
            match op {
                ReduceOp::Sum => spread,
                ReduceOp::Prod => {
                    let ratio = ops::divide(&ops::broadcast_to(out, x.shape())?, x)?;
                    ops::multiply(&spread, &ratio)?
                }
                ReduceOp::Max | ReduceOp::Min => {
                    ops::multiply(&spread, &extremum_weights(x, out, axes)?)?
                }
                ReduceOp::And | ReduceOp::Or => zeros_like(x)?, // bool: no gradient
            }
        }
        _ => zeros_like(x)?, // arg reductions: indices carry no gradient
    };
    Ok(argnums.iter().map(|_| grad.clone()).collect())
}

pub(super) fn jvp(
    prim: &Primitive,
    primals: &[Array],
    t: &Array,
    out: &Array,
) -> Result<Vec<Array>> {
    let x = &primals[0];
    let result = match prim {
        Primitive::Reduce { op, axes } => {
            let axes = axes_i64(axes);
            match op {
                ReduceOp::Sum => ops::sum(t, Some(&axes), true)?,
                ReduceOp::Prod => {
                    let rel = ops::sum(&ops::divide(t, x)?, Some(&axes), true)?;
                    ops::multiply(out, &rel)?
                }
                ReduceOp::Max | ReduceOp::Min => {
                    let w = extremum_weights(x, out, &prim_axes(prim))?;
                    ops::sum(&ops::multiply(t, &w)?, Some(&axes), true)?
                }
                ReduceOp::And | ReduceOp::Or => zeros_like(out)?,
            }
        }
        _ => zeros_like(out)?,
    };
    Ok(vec![result])
}

fn prim_axes(prim: &Primitive) -> Vec<usize> {
    match prim {
        Primitive::Reduce { axes, .. } => axes.clone(),
        _ => vec![],
    }
}
