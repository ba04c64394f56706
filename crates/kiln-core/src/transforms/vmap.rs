//! Vectorising map: the function is traced once on unbatched placeholders, then the tape is
//! replayed on the real batched inputs, each primitive through its batching rule. The result
//! is one graph of batched primitives whose size does not depend on the batch size.

use super::rules::Rules;
use super::tape::{key, tape};
use super::{Transform, TransformScope};
use crate::array::Array;
use crate::ops;
use kiln_base::{bail, ensure, Result};
use rustc_hash::FxHashMap;

/// Moves axis `from` of `x` to position `to`.
fn move_axis(x: &Array, from: usize, to: usize) -> Result<Array> {
    if from == to {
        return Ok(x.clone());
    }
    let mut perm: Vec<i64> = (0..x.ndim() as i64).collect();
    let axis = perm.remove(from);
    perm.insert(to, axis);
    ops::transpose(x, Some(&perm))
}

/// Maps `fun` over axis `in_axes[i]` of each input (`None`: shared by every batch entry) and
/// stacks the results along `out_axes[j]` of each output (`None`: the output must not
/// depend on the batch).
pub fn vmap<F>(
    fun: F,
    inputs: &[Array],
    in_axes: &[Option<usize>],
    out_axes: &[Option<usize>],
) -> Result<Vec<Array>>
where
    F: FnOnce(&[Array]) -> Result<Vec<Array>>,
{
    let op = "vmap";
    let (outputs, size) = vmap_outputs(fun, inputs, in_axes)?;
    ensure!(
        out_axes.len() == outputs.len(),
        Value,
        op,
        "Got {} out_axes for {} outputs.",
        out_axes.len(),
        outputs.len()
    );
    outputs.iter().zip(out_axes).map(|((o, a), to)| place_batch(o, *a, *to, size)).collect()
}

/// Puts the batch axis `from` of `x` (`None`: `x` does not depend on the batch) at `to`.
pub fn place_batch(
    x: &Array,
    from: Option<usize>,
    to: Option<usize>,
    size: usize,
) -> Result<Array> {
    let op = "vmap";
    match (from, to) {
        (Some(a), Some(to)) => {
            ensure!(
                to < x.ndim(),
                Value,
                op,
                "out_axes {to} is out of bounds for rank {}.",
                x.ndim()
            );
            move_axis(x, a, to)
        }
        (Some(_), None) => bail!(
            Value,
            op,
            "An output depends on the mapped inputs, so its out_axes cannot be None."
        ),
        (None, Some(to)) => {
            // Constant over the batch: repeat it.
            ensure!(
                to <= x.ndim(),
                Value,
                op,
                "out_axes {to} is out of bounds for rank {}.",
                x.ndim() + 1
            );
            let mut shape = x.shape().to_vec();
            shape.insert(to, size);
            ops::broadcast_to(&ops::expand_dims(x, &[to as i64])?, &shape)
        }
        (None, None) => Ok(x.clone()),
    }
}

/// An output of a vmapped function and its batch axis (`None`: constant over the batch).
pub type Batched = (Array, Option<usize>);

/// The outputs of `fun` mapped over `in_axes`, each with its batch axis (`None` when it
/// does not depend on the batch), and the batch size.
pub fn vmap_outputs<F>(
    fun: F,
    inputs: &[Array],
    in_axes: &[Option<usize>],
) -> Result<(Vec<Batched>, usize)>
where
    F: FnOnce(&[Array]) -> Result<Vec<Array>>,
{
    let op = "vmap";
    ensure!(
        in_axes.len() == inputs.len(),
        Value,
        op,
        "Got {} in_axes for {} inputs.",
        in_axes.len(),
        inputs.len()
    );
    let mut size = None;
    for (x, axis) in inputs.iter().zip(in_axes) {
        let Some(axis) = *axis else { continue };
        ensure!(
            axis < x.ndim(),
            Value,
            op,
            "Mapped axis {axis} is out of bounds for an input with {} dimensions.",
            x.ndim()
        );
        let n = x.shape()[axis];
        if *size.get_or_insert(n) != n {
            bail!(
                Value,
                op,
                "Inconsistent sizes along the mapped axes: {} and {n}.",
                size.unwrap()
            );
        }
    }
    let Some(size) = size else {
        bail!(Value, op, "At least one input must be mapped (in_axes are all None).");
    };
    let _scope = TransformScope::enter(Transform::Vmap);
    // Batched inputs become placeholders of their per-entry shape; shared ones stay as is.
    let mut batched: FxHashMap<usize, (Array, usize)> = FxHashMap::default();
    let mut placeholders = Vec::new();
    let traced: Vec<Array> = inputs
        .iter()
        .zip(in_axes)
        .map(|(x, axis)| match axis {
            Some(a) => {
                let mut shape = x.shape().to_vec();
                shape.remove(*a);
                let p = Array::tracer_placeholder(&shape, x.dtype(), x.stream());
                batched.insert(key(&p), (x.clone(), *a));
                placeholders.push(p.clone());
                p
            }
            None => x.clone(),
        })
        .collect();
    let outputs = fun(&traced)?;
    for entry in tape(&outputs, &placeholders, true).entries {
        let (values, axes): (Vec<Array>, Vec<Option<usize>>) = entry
            .call
            .inputs
            .iter()
            .map(|i| match batched.get(&key(i)) {
                Some((b, a)) => (b.clone(), Some(*a)),
                None => (i.clone(), None),
            })
            .unzip();
        let (outs, out_batch) = entry.call.prim.vmap(&values, &axes)?;
        for ((node, out), axis) in entry.outputs.iter().zip(outs).zip(out_batch) {
            if let (Some(node), Some(axis)) = (node, axis) {
                batched.insert(key(node), (out, axis));
            }
        }
    }
    let mapped = outputs
        .iter()
        .map(|o| match batched.get(&key(o)) {
            Some((b, a)) => (b.clone(), Some(*a)),
            None => (o.clone(), None),
        })
        .collect();
    Ok((mapped, size))
}
