//! The collectives' rules. As MLX's: the loss after an all-sum is the same on every process,
//! so an all-sum's cotangent passes through unchanged and an all-gather's is this process's
//! block of it; a sum-scatter's is every process's cotangent gathered (its outputs differ by
//! process). Max and min send the cotangent to the elements that hold the result. Sends and
//! receives have no derivative.

use super::missing;
use crate::array::Array;
use crate::ops::{self, distributed as dist, record};
use kiln_base::distributed::{Collective, CollectiveOp};
use kiln_base::{Primitive, Result};

pub(super) fn vjp(
    c: &Collective,
    primals: &[Array],
    cotangent: &Array,
    argnums: &[usize],
    output: &Array,
) -> Result<Vec<Array>> {
    let g = match c.op {
        CollectiveOp::AllSum => cotangent.clone(),
        CollectiveOp::AllMax | CollectiveOp::AllMin => {
            let holds = ops::astype(&ops::equal(&primals[0], output)?, cotangent.dtype())?;
            ops::multiply(cotangent, &holds)?
        }
        CollectiveOp::AllGather => own_block(c, cotangent, primals[0].shape())?,
        CollectiveOp::SumScatter => dist::all_gather(cotangent, c.group)?,
        CollectiveOp::Send { .. } | CollectiveOp::Recv { .. } => {
            return Err(missing("vjp", &Primitive::Collective(c.clone())))
        }
    };
    Ok(argnums.iter().map(|_| g.clone()).collect())
}

/// This process's block of a gathered array (a 0-d input was gathered as shape (1,)).
fn own_block(c: &Collective, gathered: &Array, input_shape: &[usize]) -> Result<Array> {
    let n = input_shape.first().copied().unwrap_or(1) as i64;
    let start = c.rank as i64 * n;
    let block = ops::slice(gathered, &[Some(start)], &[Some(start + n)], &[1])?;
    let shape: Vec<i64> = input_shape.iter().map(|&d| d as i64).collect();
    ops::reshape(&block, &shape)
}

pub(super) fn jvp(c: &Collective, tangent: &Array) -> Result<Vec<Array>> {
    let t = match c.op {
        CollectiveOp::AllSum => dist::all_sum(tangent, c.group)?,
        CollectiveOp::AllGather => dist::all_gather(tangent, c.group)?,
        CollectiveOp::SumScatter => dist::sum_scatter(tangent, c.group)?,
        _ => return Err(missing("jvp", &Primitive::Collective(c.clone()))),
    };
    Ok(vec![t])
}

/// Reductions are elementwise, so the batch axis stays; a gather or scatter works on the
/// first axis, so the batch axis moves to the second (a batched scalar gathers as (1, B)).
pub(super) fn vmap(
    c: &Collective,
    inputs: &[Array],
    axes: &[Option<usize>],
) -> Result<(Vec<Array>, Vec<Option<usize>>)> {
    let prim = Primitive::Collective(c.clone());
    let (Some(x), Some(Some(axis))) = (inputs.first(), axes.first().copied()) else {
        return Ok((vec![record(prim, inputs.to_vec())?], vec![None]));
    };
    match c.op {
        CollectiveOp::AllGather | CollectiveOp::SumScatter => {
            let x = if x.ndim() == 1 {
                ops::expand_dims(x, &[0])?
            } else {
                ops::moveaxis(x, axis as i64, 1)?
            };
            Ok((vec![record(prim, vec![x])?], vec![Some(1)]))
        }
        _ => Ok((vec![record(prim, vec![x.clone()])?], vec![Some(axis)])),
    }
}
