//! Batching rules: each primitive, given inputs whose batch axis is known (or absent),
//! produces the batched outputs with primitives of the same kind, so a vmapped graph has the
//! size of the unbatched one whatever the batch size. Most rules move the batch axis to the
//! front and let the front-end op broadcast unbatched inputs.

use crate::array::Array;
use crate::ops::{self, record, record_all};
use kiln_base::{Primitive, ReshapeDim, Result};

/// Moves axis `from` of `x` to the front.
pub(crate) fn to_front(x: &Array, from: usize) -> Result<Array> {
    if from == 0 {
        return Ok(x.clone());
    }
    let mut perm: Vec<i64> = (0..x.ndim() as i64).collect();
    let axis = perm.remove(from);
    perm.insert(0, axis);
    ops::transpose(x, Some(&perm))
}

/// The batch size: the length of any batched input's batch axis.
fn batch_size(inputs: &[Array], axes: &[Option<usize>]) -> usize {
    inputs.iter().zip(axes).find_map(|(x, a)| a.map(|a| x.shape()[a])).unwrap_or(1)
}

/// Every input with its batch axis in front; unbatched inputs broadcast to the batch.
pub(super) fn all_batched(inputs: &[Array], axes: &[Option<usize>]) -> Result<Vec<Array>> {
    let n = batch_size(inputs, axes);
    inputs
        .iter()
        .zip(axes)
        .map(|(x, a)| match a {
            Some(a) => to_front(x, *a),
            None => {
                let mut shape = vec![n];
                shape.extend_from_slice(x.shape());
                ops::broadcast_to(&ops::expand_dims(x, &[0])?, &shape)
            }
        })
        .collect()
}

/// The batched form of `prim` applied to `inputs` (batch axes `axes`); outputs are batched
/// on axis 0.
pub(super) fn vmap(
    prim: &Primitive,
    inputs: &[Array],
    axes: &[Option<usize>],
) -> Result<(Vec<Array>, Vec<Option<usize>>)> {
    let shift = |v: &[usize]| v.iter().map(|&a| a + 1).collect::<Vec<_>>();
    if let Primitive::Linalg(_) = prim {
        // Linear algebra already maps over leading axes: batch first, every output too.
        let outs = record_all(prim.clone(), all_batched(inputs, axes)?)?;
        let n = outs.len();
        return Ok((outs, vec![Some(0); n]));
    }
    let out = match prim {
        // Elementwise and per-element ops: same primitive on the batch-first inputs.
        Primitive::Unary(_)
        | Primitive::Binary(_)
        | Primitive::Where
        | Primitive::AsType(_)
        | Primitive::Copy
        | Primitive::Identity
        | Primitive::StopGradient
        | Primitive::View(_)
        | Primitive::Complex(_)
        | Primitive::Matmul
        | Primitive::RandomBits { .. }
        // Over the last axis, which stays last with the batch axis in front.
        | Primitive::Softmax { .. }
        | Primitive::LogSumExp => record(prim.clone(), all_batched(inputs, axes)?)?,
        Primitive::Reduce { op, axes: red } => {
            let x = all_batched(inputs, axes)?.remove(0);
            record(Primitive::Reduce { op: *op, axes: shift(red) }, vec![x])?
        }
        Primitive::Fft { axes: fa, inverse, kind } => {
            let x = all_batched(inputs, axes)?.remove(0);
            record(Primitive::Fft { axes: shift(fa), inverse: *inverse, kind: *kind }, vec![x])?
        }
        Primitive::ArgReduce { op, axis } => {
            let x = all_batched(inputs, axes)?.remove(0);
            record(Primitive::ArgReduce { op: *op, axis: axis + 1 }, vec![x])?
        }
        Primitive::Reshape { shape, rule } => {
            let x = all_batched(inputs, axes)?.remove(0);
            let mut new: kiln_base::Shape = [x.shape()[0]].into_iter().collect();
            new.extend_from_slice(shape);
            // The batch axis kept in front of the rule's axes (shapeless compile).
            let rule = if rule.is_empty() {
                Vec::new()
            } else {
                let shifted = rule.iter().map(|d| match *d {
                    ReshapeDim::Axes(a, b) => ReshapeDim::Axes(a + 1, b + 1),
                    d => d,
                });
                [ReshapeDim::Axes(0, 1)].into_iter().chain(shifted).collect()
            };
            ops::reshape_by_rule(&x, new, rule)?
        }
        Primitive::Transpose { perm } => {
            let x = all_batched(inputs, axes)?.remove(0);
            let mut new = vec![0i64];
            new.extend(perm.iter().map(|&p| p as i64 + 1));
            ops::transpose(&x, Some(&new))?
        }
        Primitive::BroadcastTo { shape } => {
            // Align the input's dims with the target's trailing dims, after the batch axis.
            let x = all_batched(inputs, axes)?.remove(0);
            let mut aligned: Vec<i64> = vec![x.shape()[0] as i64];
            aligned.extend(std::iter::repeat_n(1, shape.len() + 1 - x.ndim()));
            aligned.extend(x.shape()[1..].iter().map(|&d| d as i64));
            let mut target = vec![x.shape()[0]];
            target.extend_from_slice(shape);
            ops::broadcast_to(&ops::reshape(&x, &aligned)?, &target)?
        }
        Primitive::Slice { start, step, len } => {
            let x = all_batched(inputs, axes)?.remove(0);
            let prim = Primitive::Slice {
                start: [0].into_iter().chain(start.iter().copied()).collect(),
                step: [1].into_iter().chain(step.iter().copied()).collect(),
                len: [x.shape()[0]].into_iter().chain(len.iter().copied()).collect(),
            };
            record(prim, vec![x])?
        }
        Primitive::Concatenate { axis } => {
            record(Primitive::Concatenate { axis: axis + 1 }, all_batched(inputs, axes)?)?
        }
        Primitive::Conv(_) => super::conv::vmap(prim, inputs, axes)?,
        Primitive::SliceUpdate { start, step, len } => {
            let b = batch_size(inputs, axes);
            let prim = Primitive::SliceUpdate {
                start: [0].into_iter().chain(start.iter().copied()).collect(),
                step: [1].into_iter().chain(step.iter().copied()).collect(),
                len: [b].into_iter().chain(len.iter().copied()).collect(),
            };
            record(prim, all_batched(inputs, axes)?)?
        }
        Primitive::Scan { op, axis, reverse, inclusive } => {
            let x = all_batched(inputs, axes)?.remove(0);
            let prim = Primitive::Scan {
                op: *op,
                axis: axis + 1,
                reverse: *reverse,
                inclusive: *inclusive,
            };
            record(prim, vec![x])?
        }
        Primitive::Sort { axis, arg } => {
            let x = all_batched(inputs, axes)?.remove(0);
            record(Primitive::Sort { axis: axis + 1, arg: *arg }, vec![x])?
        }
        Primitive::Partition { kth, axis, arg } => {
            let x = all_batched(inputs, axes)?.remove(0);
            record(Primitive::Partition { kth: *kth, axis: axis + 1, arg: *arg }, vec![x])?
        }
        Primitive::SearchSorted { .. }
        | Primitive::Gather { .. }
        | Primitive::Scatter { .. }
        | Primitive::MaskedScatter
        | Primitive::AsStrided { .. } => super::vmap_index::vmap(prim, inputs, axes)?,
        Primitive::Fused(_) | Primitive::Fast(_) | Primitive::Collective(_) => return Err(super::missing("vmap", prim)),
        Primitive::Linalg(_) | Primitive::Custom { .. } => unreachable!("handled above"),
        Primitive::Arange { .. } => record(prim.clone(), vec![])?, // no inputs: never batched
        // A count of the per-example shape, the same for every example (the driver wants
        // a batched value for every node that depends on the batch: one per example; the
        // batch size is baked in, so shapeless compile of a vmapped mean keeps its batch).
        Primitive::NumberOfElements { axes: counted, inverted, dtype } => {
            let x = all_batched(inputs, axes)?.remove(0);
            let prim = Primitive::NumberOfElements {
                axes: shift(counted),
                inverted: *inverted,
                dtype: *dtype,
            };
            let n = ops::expand_dims(&record(prim, vec![x.clone()])?, &[0])?;
            ops::broadcast_to(&n, &[x.shape()[0]])?
        }
    };
    let batched = !matches!(prim, Primitive::Arange { .. });
    Ok((vec![out], vec![batched.then_some(0)]))
}
