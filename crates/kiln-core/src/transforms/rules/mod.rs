//! The per-primitive transform rules. Graph walks (the vjp, jvp and vmap drivers) stay
//! generic and call these; each primitive class answers in its own file.

mod complex;
mod conv;
mod distributed;
mod elementwise;
pub(crate) mod fast;
mod fast_train;
mod indexing;
mod linalg;
mod logsumexp;
mod movement;
mod reduce;
mod scan;
mod softmax;
mod vmap;
mod vmap_index;

use crate::array::Array;
use crate::ops;
use kiln_base::{DType, Error, Primitive, Result};

/// What a primitive contributes to each transform.
pub trait Rules {
    /// Cotangents of the inputs listed in `argnums` (one per entry), given the primal inputs,
    /// the cotangents of every output and the outputs themselves.
    fn vjp(
        &self,
        primals: &[Array],
        cotangents: &[Array],
        argnums: &[usize],
        outputs: &[Array],
    ) -> Result<Vec<Array>>;

    /// Tangents of every output, given the primal inputs, their outputs, and the tangents
    /// of the inputs listed in `argnums` (one per entry; other inputs are constant).
    fn jvp(
        &self,
        primals: &[Array],
        tangents: &[Array],
        argnums: &[usize],
        outputs: &[Array],
    ) -> Result<Vec<Array>>;

    /// The batched outputs and their batch axes, given inputs whose batch axis is `axes[i]`
    /// (`None`: not batched).
    fn vmap(
        &self,
        inputs: &[Array],
        axes: &[Option<usize>],
    ) -> Result<(Vec<Array>, Vec<Option<usize>>)>;
}

pub(crate) fn missing(transform: &'static str, prim: &Primitive) -> Error {
    // MLX raises ValueError for a primitive without the rule.
    Error::Value { op: transform, msg: format!("Not implemented for {}.", prim.name()) }
}

/// Zeros shaped and typed like `x`: the gradient of anything that does not flow (integer
/// outputs, indices, comparisons).
pub(crate) fn zeros_like(x: &Array) -> Result<Array> {
    ops::zeros(x.shape(), x.dtype())
}

/// Whether gradients flow through values of this dtype (integers and bool carry none).
pub(crate) fn differentiable(dtype: DType) -> bool {
    dtype.is_inexact()
}

impl Rules for Primitive {
    fn vjp(
        &self,
        primals: &[Array],
        cotangents: &[Array],
        argnums: &[usize],
        outputs: &[Array],
    ) -> Result<Vec<Array>> {
        let out = if complex::conjugated_vjp(self, primals) {
            let conj: Vec<Array> = cotangents.iter().map(ops::conjugate).collect::<Result<_>>()?;
            let raw = real_vjp(self, primals, &conj, argnums, outputs)?;
            raw.iter().map(ops::conjugate).collect::<Result<Vec<_>>>()?
        } else {
            real_vjp(self, primals, cotangents, argnums, outputs)?
        };
        // As MLX: every input's cotangent is what the rule computed, in the input's dtype
        // (an integer input's gradient is the rounded value, not zero).
        argnums.iter().zip(out).map(|(&i, g)| ops::astype(&g, primals[i].dtype())).collect()
    }

    fn jvp(
        &self,
        primals: &[Array],
        tangents: &[Array],
        argnums: &[usize],
        outputs: &[Array],
    ) -> Result<Vec<Array>> {
        let out = match self {
            Primitive::Unary(_)
            | Primitive::Binary(_)
            | Primitive::Where
            | Primitive::AsType(_) => {
                elementwise::jvp(self, primals, tangents, argnums, &outputs[0])?
            }
            Primitive::Reduce { .. } | Primitive::ArgReduce { .. } => {
                reduce::jvp(self, primals, &tangents[0], &outputs[0])?
            }
            Primitive::Copy
            | Primitive::Identity
            | Primitive::Reshape { .. }
            | Primitive::Transpose { .. }
            | Primitive::BroadcastTo { .. }
            | Primitive::Concatenate { .. } => movement::jvp(self, primals, tangents, argnums)?,
            Primitive::Slice { .. }
            | Primitive::SliceUpdate { .. }
            | Primitive::Gather { .. }
            | Primitive::Scatter { .. }
            | Primitive::MaskedScatter
            | Primitive::AsStrided { .. } => {
                indexing::jvp(self, primals, tangents, argnums, &outputs[0])?
            }
            Primitive::Softmax { .. } => vec![softmax::apply(&tangents[0], &outputs[0])?],
            Primitive::LogSumExp => vec![logsumexp::jvp(&primals[0], &tangents[0], &outputs[0])?],
            Primitive::Scan { .. }
            | Primitive::Sort { arg: false, .. }
            | Primitive::Partition { arg: false, .. }
                if !differentiable(primals[0].dtype()) =>
            {
                outputs.iter().map(zeros_like).collect::<Result<_>>()?
            }
            Primitive::Scan { .. } => vec![scan::scan_jvp(self, &primals[0], &tangents[0])?],
            Primitive::Sort { arg: true, .. }
            | Primitive::Partition { arg: true, .. }
            | Primitive::SearchSorted { .. } => {
                outputs.iter().map(zeros_like).collect::<Result<_>>()?
            }
            Primitive::Sort { .. } | Primitive::Partition { .. } => {
                vec![scan::sort_jvp(self, &primals[0], &tangents[0])?]
            }
            Primitive::Matmul => linalg::matmul_jvp(primals, tangents, argnums)?,
            Primitive::Conv(_) => conv::jvp(self, primals, tangents, argnums)?,
            Primitive::Linalg(op) => linalg::jvp(*op, primals, tangents, argnums, outputs)?,
            Primitive::Fused(_) => return Err(missing("jvp", self)),
            Primitive::Fast(op) => fast::jvp(op, primals, tangents, argnums)?,
            Primitive::Collective(c) => distributed::jvp(c, &tangents[0])?,
            Primitive::Complex(_) | Primitive::Fft { .. } => {
                vec![complex::jvp(self, &primals[0], &tangents[0], &outputs[0])?]
            }
            Primitive::Custom { .. } => {
                super::custom_function::custom_jvp(self, primals, tangents, argnums)?
            }
            Primitive::Arange { .. }
            | Primitive::NumberOfElements { .. }
            | Primitive::RandomBits { .. }
            | Primitive::StopGradient
            | Primitive::View(_) => outputs.iter().map(zeros_like).collect::<Result<_>>()?,
        };
        // As MLX: a tangent has its output's dtype, except that bool outputs (comparisons)
        // have zero tangents of the input tangents' dtype.
        let tangent_dtype = tangents.first().map_or(DType::F32, |t| t.dtype());
        outputs
            .iter()
            .zip(out)
            .map(|(o, t)| match o.dtype() {
                DType::Bool => ops::zeros(o.shape(), tangent_dtype),
                dtype => ops::astype(&t, dtype),
            })
            .collect()
    }

    fn vmap(
        &self,
        inputs: &[Array],
        axes: &[Option<usize>],
    ) -> Result<(Vec<Array>, Vec<Option<usize>>)> {
        if let Primitive::Custom { .. } = self {
            return super::custom_function::custom_vmap(self, inputs, axes);
        }
        if let Primitive::Fast(op) = self {
            return fast::vmap(op, inputs, axes);
        }
        if let Primitive::Collective(c) = self {
            return distributed::vmap(c, inputs, axes);
        }
        vmap::vmap(self, inputs, axes)
    }
}

/// The vjp rules on real values (see `complex.rs` for how complex64 reuses them).
fn real_vjp(
    prim: &Primitive,
    primals: &[Array],
    cotangents: &[Array],
    argnums: &[usize],
    outputs: &[Array],
) -> Result<Vec<Array>> {
    Ok(match prim {
        Primitive::Unary(_) | Primitive::Binary(_) | Primitive::Where | Primitive::AsType(_) => {
            elementwise::vjp(prim, primals, &cotangents[0], argnums, &outputs[0])?
        }
        Primitive::Reduce { .. } | Primitive::ArgReduce { .. } => {
            reduce::vjp(prim, primals, &cotangents[0], argnums, &outputs[0])?
        }
        Primitive::Copy
        | Primitive::Identity
        | Primitive::Reshape { .. }
        | Primitive::Transpose { .. }
        | Primitive::BroadcastTo { .. }
        | Primitive::Concatenate { .. } => movement::vjp(prim, primals, &cotangents[0], argnums)?,
        Primitive::Slice { .. }
        | Primitive::SliceUpdate { .. }
        | Primitive::Gather { .. }
        | Primitive::Scatter { .. }
        | Primitive::MaskedScatter
        | Primitive::AsStrided { .. } => {
            indexing::vjp(prim, primals, &cotangents[0], argnums, &outputs[0])?
        }
        Primitive::Scan { .. }
        | Primitive::Sort { arg: false, .. }
        | Primitive::Partition { arg: false, .. }
            if !differentiable(primals[0].dtype()) =>
        {
            argnums.iter().map(|&i| zeros_like(&primals[i])).collect::<Result<_>>()?
        }
        Primitive::Softmax { .. } => {
            let g = softmax::apply(&cotangents[0], &outputs[0])?;
            argnums.iter().map(|_| g.clone()).collect()
        }
        Primitive::LogSumExp => {
            let g = logsumexp::vjp(&primals[0], &cotangents[0], &outputs[0])?;
            argnums.iter().map(|_| g.clone()).collect()
        }
        Primitive::Scan { .. } => {
            let g = scan::scan_vjp(prim, &primals[0], &cotangents[0])?;
            argnums.iter().map(|_| g.clone()).collect()
        }
        // Indices and positions carry no gradient; sorted values need a rule of their own.
        Primitive::Sort { arg: true, .. }
        | Primitive::Partition { arg: true, .. }
        | Primitive::SearchSorted { .. } => {
            argnums.iter().map(|&i| zeros_like(&primals[i])).collect::<Result<_>>()?
        }
        Primitive::Sort { .. } | Primitive::Partition { .. } => {
            let g = scan::sort_vjp(prim, &primals[0], &cotangents[0])?;
            argnums.iter().map(|_| g.clone()).collect()
        }
        Primitive::Matmul => linalg::matmul_vjp(primals, &cotangents[0], argnums)?,
        Primitive::Conv(_) => conv::vjp(prim, primals, &cotangents[0], argnums)?,
        Primitive::Linalg(op) => linalg::vjp(*op, primals, cotangents, argnums, outputs)?,
        Primitive::Fast(op) => fast::vjp(op, primals, cotangents, argnums, outputs)?,
        Primitive::Collective(c) => {
            distributed::vjp(c, primals, &cotangents[0], argnums, &outputs[0])?
        }
        // Fused kernels exist only in compiled graphs, which transforms never walk.
        Primitive::Fused(_) => return Err(missing("vjp", prim)),
        Primitive::Complex(_) | Primitive::Fft { .. } => {
            let g = complex::vjp(prim, &primals[0], &cotangents[0], &outputs[0])?;
            argnums.iter().map(|_| g.clone()).collect()
        }
        Primitive::Custom { .. } => {
            super::custom_function::custom_vjp(prim, primals, cotangents, argnums, outputs)?
        }
        Primitive::Arange { .. }
        | Primitive::NumberOfElements { .. }
        | Primitive::RandomBits { .. }
        | Primitive::StopGradient
        | Primitive::View(_) => {
            argnums.iter().map(|&i| zeros_like(&primals[i])).collect::<Result<_>>()?
        }
    })
}
