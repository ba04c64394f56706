//! Gradients of copies and views. These ops are linear, so the jvp applies the same
//! primitive to the tangents; the vjp maps the cotangent back to the input's layout.

use super::zeros_like;
use crate::array::Array;
use crate::ops::{self, record};
use kiln_base::{Primitive, ReshapeDim, Result};

pub(super) fn vjp(
    prim: &Primitive,
    primals: &[Array],
    g: &Array,
    argnums: &[usize],
) -> Result<Vec<Array>> {
    let x = &primals[0];
    let one = |a: Array| Ok(argnums.iter().map(|_| a.clone()).collect());
    match prim {
        Primitive::Copy | Primitive::Identity => one(g.clone()),
        Primitive::Reshape { rule, .. } => {
            if let Some((inserted, dropped)) = squeeze_expand(rule, x.ndim()) {
                // Undo with squeeze and expand_dims, which shapeless compile re-infers.
                return one(ops::expand_dims(&ops::squeeze(g, Some(&inserted))?, &dropped)?);
            }
            let shape: Vec<i64> = x.shape().iter().map(|&d| d as i64).collect();
            one(ops::reshape(g, &shape)?)
        }
        Primitive::Transpose { perm } => {
            let mut inverse = vec![0i64; perm.len()];
            for (i, &p) in perm.iter().enumerate() {
                inverse[p] = i as i64;
            }
            one(ops::transpose(g, Some(&inverse))?)
        }
        Primitive::BroadcastTo { shape } => {
            // Sum over the new leading axes and over the axes that were stretched from 1.
            let lead = shape.len() - x.ndim();
            let axes: Vec<i64> = (0..shape.len())
                .filter(|&i| i < lead || (x.shape()[i - lead] == 1 && shape[i] != 1))
                .map(|i| i as i64)
                .collect();
            let summed = ops::sum(g, Some(&axes), true)?;
            let shape: Vec<i64> = x.shape().iter().map(|&d| d as i64).collect();
            one(ops::reshape(&summed, &shape)?)
        }
        Primitive::Concatenate { axis } => {
            let mut start = 0i64;
            let mut parts = Vec::with_capacity(primals.len());
            for p in primals {
                let n = p.shape()[*axis] as i64;
                let mut starts = vec![None; g.ndim()];
                let mut stops = vec![None; g.ndim()];
                starts[*axis] = Some(start);
                stops[*axis] = Some(start + n);
                parts.push(ops::slice(g, &starts, &stops, &vec![1; g.ndim()])?);
                start += n;
            }
            Ok(argnums.iter().map(|&i| parts[i].clone()).collect())
        }
        _ => unreachable!("dispatched by class"),
    }
}

/// A reshape rule that only drops and inserts size-1 axes (squeeze, expand_dims, the
/// reduced axes of a reduction): the output positions it inserts and the input axes it
/// drops.
fn squeeze_expand(rule: &[ReshapeDim], ndim: usize) -> Option<(Vec<i64>, Vec<i64>)> {
    if rule.is_empty() {
        return None;
    }
    let (mut inserted, mut kept) = (Vec::new(), Vec::new());
    for (p, d) in rule.iter().enumerate() {
        match *d {
            ReshapeDim::Fixed(1) => inserted.push(p as i64),
            ReshapeDim::Axes(a, b) if b == a + 1 && kept.last().is_none_or(|&k| k < a) => {
                kept.push(a)
            }
            _ => return None,
        }
    }
    let dropped = (0..ndim).filter(|a| !kept.contains(a)).map(|a| a as i64).collect();
    Some((inserted, dropped))
}

pub(super) fn jvp(
    prim: &Primitive,
    primals: &[Array],
    tangents: &[Array],
    argnums: &[usize],
) -> Result<Vec<Array>> {
    // Inputs without a tangent are constants: their tangent is zero.
    let inputs = (0..primals.len())
        .map(|i| match argnums.iter().position(|&a| a == i) {
            Some(k) => Ok(tangents[k].clone()),
            None => zeros_like(&primals[i]),
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(vec![record(prim.clone(), inputs)?])
}
