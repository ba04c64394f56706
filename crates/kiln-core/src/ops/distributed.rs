//! `mx.distributed`'s collectives as graph primitives: lazy like every op, so they sit
//! inside grad, vmap and compiled functions. A group is a number in kiln-base's table
//! (`distributed::register_group`); over a group of one process every collective is its
//! input, as in MLX.

use super::record;
use crate::array::Array;
use kiln_base::distributed::{group, Collective, CollectiveOp};
use kiln_base::{bail, DType, Primitive, Result, Shape};
use std::sync::atomic::{AtomicU64, Ordering};

fn collective(op: CollectiveOp, group_id: usize, inputs: Vec<Array>) -> Result<Array> {
    let g = group(group_id)?;
    match op {
        CollectiveOp::Send { .. } if g.size() == 1 => {
            bail!(Value, "send", "Cannot send to a singleton group")
        }
        CollectiveOp::Recv { .. } if g.size() == 1 => {
            bail!(Value, "recv", "Cannot recv from a singleton group")
        }
        _ => {}
    }
    let c = Collective { op, group: group_id, size: g.size(), rank: g.rank() };
    record(Primitive::Collective(c), inputs)
}

fn reduce(op: CollectiveOp, x: &Array, group_id: usize) -> Result<Array> {
    if group(group_id)?.size() == 1 {
        return Ok(x.clone());
    }
    collective(op, group_id, vec![x.clone()])
}

/// The elementwise sum of `x` over the processes of the group.
pub fn all_sum(x: &Array, group_id: usize) -> Result<Array> {
    reduce(CollectiveOp::AllSum, x, group_id)
}

/// The elementwise maximum of `x` over the processes of the group.
pub fn all_max(x: &Array, group_id: usize) -> Result<Array> {
    reduce(CollectiveOp::AllMax, x, group_id)
}

/// The elementwise minimum of `x` over the processes of the group.
pub fn all_min(x: &Array, group_id: usize) -> Result<Array> {
    reduce(CollectiveOp::AllMin, x, group_id)
}

/// Every process's `x` concatenated along the first axis, in rank order.
pub fn all_gather(x: &Array, group_id: usize) -> Result<Array> {
    reduce(CollectiveOp::AllGather, x, group_id)
}

/// The sum of `x` over the processes, of which each keeps its block of the first axis.
pub fn sum_scatter(x: &Array, group_id: usize) -> Result<Array> {
    reduce(CollectiveOp::SumScatter, x, group_id)
}

/// Sends `x` to process `dst`; the result is `x`, sent once it is evaluated.
pub fn send(x: &Array, dst: usize, group_id: usize) -> Result<Array> {
    collective(CollectiveOp::Send { dst }, group_id, vec![x.clone()])
}

/// An array of `shape` and `dtype` received from process `src` when evaluated.
pub fn recv(shape: &[usize], dtype: DType, src: usize, group_id: usize) -> Result<Array> {
    static NONCE: AtomicU64 = AtomicU64::new(0);
    let nonce = NONCE.fetch_add(1, Ordering::Relaxed);
    let op = CollectiveOp::Recv { src, shape: Shape::from(shape), dtype, nonce };
    collective(op, group_id, vec![])
}
