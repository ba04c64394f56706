//! Rules of attention's training primitives: `AttentionTrain` (o and the row logsumexp) and
//! `AttentionVjp` (the fused backward). The vjp of `AttentionTrain` is one `AttentionVjp`
//! node; everything of higher order (grad of grad, jvp) differentiates the composition of
//! basic ops in `fast.rs` instead. vmap folds the mapped axis into the batch axis.
//!
//! `AttentionVjp`'s o and lse inputs are functions of q, k and v; its rules treat dq, dk, dv
//! as functions of q, k, v and do alone (the composition's form), giving o and lse
//! zero cotangents and ignoring their tangents: the total derivative then flows through
//! q, k and v, which is exact wherever o and lse are what the forward made of them.

use super::fast::{attention_vjp, Attn};
use super::vmap::all_batched;
use crate::array::Array;
use crate::ops::{self, record_all};
use crate::transforms::{jvp as jvp_of, vjp as vjp_of};
use kiln_base::{bail, FastOp, Primitive, Result};

type Out = (Vec<Array>, Vec<Option<usize>>);

/// The plain attention op with this op's scale and mask.
fn forward_op(op: &FastOp) -> Result<FastOp> {
    match op {
        FastOp::AttentionTrain { scale, mask } | FastOp::AttentionVjp { scale, mask } => {
            Ok(FastOp::Attention { scale: *scale, mask: *mask })
        }
        _ => bail!(Value, "vjp", "Not attention."),
    }
}

/// `(o, lse)` as a composition of basic ops.
fn train_composed(op: &FastOp, qkv: &[Array]) -> Result<Vec<Array>> {
    let a = Attn::new(op, qkv)?;
    Ok(vec![ops::astype(&a.output()?, qkv[0].dtype())?, a.lse()?])
}

/// `(dq, dk, dv)` from q, k, v, do as a composition of basic ops.
fn vjp_composed(op: &FastOp, args: &[Array]) -> Result<Vec<Array>> {
    attention_vjp(op, &args[..3], &args[3], &[0, 1, 2])
}

/// The `AttentionVjp` inputs q, k, v, do (o and lse dropped).
fn vjp_args(primals: &[Array]) -> Vec<Array> {
    [0, 1, 2, 5].map(|i| primals[i].clone()).to_vec()
}

pub(super) fn vjp(
    op: &FastOp,
    primals: &[Array],
    cotangents: &[Array],
    argnums: &[usize],
    outputs: &[Array],
) -> Result<Vec<Array>> {
    let fwd = forward_op(op)?;
    match op {
        FastOp::AttentionTrain { scale, mask } => {
            let (o, lse) = (&outputs[0], &outputs[1]);
            let mut ins = primals[..3].to_vec();
            ins.push(o.clone());
            ins.push(lse.clone());
            // lse's cotangent (`cotangents[1]`) is zero: lse only feeds `AttentionVjp`,
            // whose rules below give it none.
            ins.push(ops::astype(&cotangents[0], o.dtype())?);
            let bwd = FastOp::AttentionVjp { scale: *scale, mask: *mask };
            let grads = record_all(Primitive::Fast(bwd), ins)?;
            Ok(argnums.iter().map(|&i| grads[i].clone()).collect())
        }
        _ => {
            // Grad of grad: the composition's vjp.
            let args = vjp_args(primals);
            let (_, grads) = vjp_of(|p| vjp_composed(&fwd, p), &args, cotangents)?;
            argnums
                .iter()
                .map(|&i| match i {
                    0..=2 => Ok(grads[i].clone()),
                    5 => Ok(grads[3].clone()),
                    _ => ops::zeros_like(&primals[i], None), // o, lse: see the module docs
                })
                .collect()
        }
    }
}

pub(super) fn jvp(
    op: &FastOp,
    primals: &[Array],
    tangents: &[Array],
    argnums: &[usize],
) -> Result<Vec<Array>> {
    let fwd = forward_op(op)?;
    let (args, slots): (Vec<Array>, Vec<Option<usize>>) = match op {
        FastOp::AttentionTrain { .. } => (primals[..3].to_vec(), vec![Some(0), Some(1), Some(2)]),
        _ => (vjp_args(primals), vec![Some(0), Some(1), Some(2), Some(5)]),
    };
    // A tangent for every argument of the composition (zeros where the input is constant).
    let tans = args
        .iter()
        .zip(&slots)
        .map(|(x, slot)| match argnums.iter().position(|&i| Some(i) == *slot) {
            Some(p) => ops::astype(&tangents[p], x.dtype()),
            None => ops::zeros_like(x, None),
        })
        .collect::<Result<Vec<_>>>()?;
    let (_, out) = match op {
        FastOp::AttentionTrain { .. } => jvp_of(|p| train_composed(&fwd, p), &args, &tans)?,
        _ => jvp_of(|p| vjp_composed(&fwd, p), &args, &tans)?,
    };
    Ok(out)
}

pub(super) fn vmap(op: &FastOp, inputs: &[Array], axes: &[Option<usize>]) -> Result<Out> {
    let n = inputs.iter().zip(axes).find_map(|(x, a)| a.map(|a| x.shape()[a])).unwrap_or(1);
    let batched = all_batched(inputs, axes)?;
    let b = batched[0].shape()[1];
    // Merge (N, B) into one batch axis of every input ((B, H, L, D) and (B, H, L) alike).
    let ins = batched
        .iter()
        .map(|x| {
            let s = x.shape();
            let mut shape = vec![(n * s[1]) as i64];
            shape.extend(s[2..].iter().map(|&d| d as i64));
            ops::reshape(x, &shape)
        })
        .collect::<Result<Vec<_>>>()?;
    let outs = record_all(Primitive::Fast(op.clone()), ins)?
        .iter()
        .map(|y| {
            let mut shape = vec![n as i64, b as i64];
            shape.extend(y.shape()[1..].iter().map(|&d| d as i64));
            ops::reshape(y, &shape)
        })
        .collect::<Result<Vec<_>>>()?;
    let axes = vec![Some(0); outs.len()];
    Ok((outs, axes))
}
