//! Gradients of gathers, scatters and slice updates. Index inputs carry no gradient; the
//! data paths are linear: a gather's cotangent scatters back (adding duplicates), a
//! scatter's splits into the kept part of the input and the gathered part of the updates.

use super::{missing, zeros_like};
use crate::array::Array;
use crate::ops::record;
use kiln_base::{Primitive, Result, ScatterReduce, Shape};

/// The cotangent or tangent of each argnum, given one per input (`None`: zeros).
fn pick(argnums: &[usize], primals: &[Array], per_input: Vec<Option<Array>>) -> Result<Vec<Array>> {
    argnums
        .iter()
        .map(|&i| per_input[i].clone().map_or_else(|| zeros_like(&primals[i]), Ok))
        .collect()
}

pub(super) fn vjp(
    prim: &Primitive,
    primals: &[Array],
    g: &Array,
    argnums: &[usize],
) -> Result<Vec<Array>> {
    let n = primals.len();
    let mut per_input: Vec<Option<Array>> = vec![None; n];
    match prim {
        Primitive::Slice { start, step, len } => {
            let update = Primitive::SliceUpdate {
                start: start.clone(),
                step: step.clone(),
                len: len.clone(),
            };
            per_input[0] = Some(record(update, vec![zeros_like(&primals[0])?, g.clone()])?);
        }
        Primitive::SliceUpdate { start, step, len } => {
            let (s, st, l) = (start.clone(), step.clone(), len.clone());
            let hole =
                Primitive::SliceUpdate { start: s.clone(), step: st.clone(), len: l.clone() };
            per_input[0] = Some(record(hole, vec![g.clone(), zeros_like(&primals[1])?])?);
            per_input[1] =
                Some(record(Primitive::Slice { start: s, step: st, len: l }, vec![g.clone()])?);
        }
        Primitive::Gather { axes, .. } => {
            let scatter = Primitive::Scatter { axes: axes.clone(), reduce: ScatterReduce::Add };
            let mut inputs = vec![zeros_like(&primals[0])?];
            inputs.extend(primals[1..].iter().cloned());
            inputs.push(g.clone());
            per_input[0] = Some(record(scatter, inputs)?);
        }
        Primitive::Scatter {
            axes,
            reduce: reduce @ (ScatterReduce::None | ScatterReduce::Add),
        } => {
            let updates = &primals[n - 1];
            let indices = &primals[1..n - 1];
            let k = indices.first().map_or(0, |i| i.ndim());
            let slice_sizes: Shape = updates.shape()[k..].into();
            let gather = Primitive::Gather { axes: axes.clone(), slice_sizes };
            let mut inputs = vec![g.clone()];
            inputs.extend(indices.iter().cloned());
            per_input[n - 1] = Some(record(gather, inputs)?);
            per_input[0] = Some(match reduce {
                ScatterReduce::Add => g.clone(),
                _ => {
                    // Overwritten positions take no gradient from the input.
                    let mut inputs = vec![g.clone()];
                    inputs.extend(indices.iter().cloned());
                    inputs.push(zeros_like(updates)?);
                    record(
                        Primitive::Scatter { axes: axes.clone(), reduce: ScatterReduce::None },
                        inputs,
                    )?
                }
            });
        }
        _ => return Err(missing("vjp", prim)),
    }
    pick(argnums, primals, per_input)
}

/// These ops are linear in their data inputs: the same primitive on the tangents, with the
/// index inputs as they are.
pub(super) fn jvp(
    prim: &Primitive,
    primals: &[Array],
    tangents: &[Array],
    argnums: &[usize],
) -> Result<Vec<Array>> {
    let n = primals.len();
    let data: Vec<usize> = match prim {
        Primitive::Slice { .. } | Primitive::Gather { .. } => vec![0],
        Primitive::SliceUpdate { .. } => vec![0, 1],
        Primitive::Scatter { reduce: ScatterReduce::None | ScatterReduce::Add, .. } => {
            vec![0, n - 1]
        }
        _ => return Err(missing("jvp", prim)),
    };
    let inputs = (0..n)
        .map(|i| match (data.contains(&i), argnums.iter().position(|&a| a == i)) {
            (true, Some(k)) => Ok(tangents[k].clone()),
            (true, None) => zeros_like(&primals[i]),
            (false, _) => Ok(primals[i].clone()),
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(vec![record(prim.clone(), inputs)?])
}
