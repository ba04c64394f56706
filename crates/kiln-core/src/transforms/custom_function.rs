//! Functions with transform rules of their own: `custom_function` (user vjp/jvp/vmap) and
//! `checkpoint` (the backward pass recomputes the forward instead of keeping it). The
//! function's outputs enter the graph through a `Custom` primitive whose inputs are the
//! primals and those outputs (stop-gradient'ed, so transforms only see the custom rules).

use super::{jvp, vjp, vmap_outputs};
use crate::array::Array;
use crate::device::default_stream;
use crate::ops;
use kiln_base::{ensure, Opaque, Primitive, Result, Shape};
use std::sync::Arc;

/// A function of arrays to arrays that can be shared across threads.
pub type Fun = Arc<dyn Fn(&[Array]) -> Result<Vec<Array>> + Send + Sync>;
/// `(primals, output cotangents, outputs) -> one cotangent per primal`.
pub type VjpFun = Arc<dyn Fn(&[Array], &[Array], &[Array]) -> Result<Vec<Array>> + Send + Sync>;
/// `(primals, one tangent per primal) -> output tangents`.
pub type JvpFun = Arc<dyn Fn(&[Array], &[Array]) -> Result<Vec<Array>> + Send + Sync>;

/// `(batched inputs, their batch axes) -> (batched outputs, their batch axes)`; `None` axes
/// are unbatched.
pub type VmapFun = Arc<
    dyn Fn(&[Array], &[Option<usize>]) -> Result<(Vec<Array>, Vec<Option<usize>>)> + Send + Sync,
>;

/// The function and the rules that replace transforming through it (`None`: transform
/// `fun` itself).
pub struct CustomRules {
    pub fun: Fun,
    pub vjp: Option<VjpFun>,
    pub jvp: Option<JvpFun>,
    pub vmap: Option<VmapFun>,
}

/// Runs `rules.fun` on `primals`; transforms of the result use the custom rules (or, where
/// one is missing, transform `fun` itself, recomputing it).
pub fn custom_call(rules: CustomRules, primals: &[Array]) -> Result<Vec<Array>> {
    let outputs = (rules.fun)(primals)?;
    let mut inputs = primals.to_vec();
    for o in &outputs {
        inputs.push(ops::stop_gradient(o)?);
    }
    let metas: Vec<(Shape, kiln_base::DType)> =
        outputs.iter().map(|o| (Shape::from(o.shape()), o.dtype())).collect();
    let prim = Primitive::Custom { rules: Opaque(Arc::new(rules)), num_primals: primals.len() };
    Ok(Array::from_call(prim, inputs, metas, default_stream()))
}

/// `fun` whose gradient recomputes its forward pass instead of keeping its intermediates.
pub fn checkpoint(fun: Fun, primals: &[Array]) -> Result<Vec<Array>> {
    custom_call(CustomRules { fun, vjp: None, jvp: None, vmap: None }, primals)
}

fn rules_of(prim: &Primitive) -> (&CustomRules, usize) {
    match prim {
        Primitive::Custom { rules, num_primals } => {
            (rules.0.downcast_ref::<CustomRules>().expect("kiln-core builds Custom"), *num_primals)
        }
        _ => unreachable!("dispatched by class"),
    }
}

pub(crate) fn custom_vjp(
    prim: &Primitive,
    primals: &[Array],
    cotangents: &[Array],
    argnums: &[usize],
    outputs: &[Array],
) -> Result<Vec<Array>> {
    let (rules, n) = rules_of(prim);
    let args = &primals[..n];
    let grads = match &rules.vjp {
        Some(f) => f(args, cotangents, outputs)?,
        None => {
            let fun = rules.fun.clone();
            vjp(move |p| fun(p), args, cotangents)?.1
        }
    };
    argnums
        .iter()
        .map(|&i| match grads.get(i) {
            Some(g) if i < n => Ok(g.clone()),
            _ => ops::zeros(primals[i].shape(), primals[i].dtype()),
        })
        .collect()
}

pub(crate) fn custom_jvp(
    prim: &Primitive,
    primals: &[Array],
    tangents: &[Array],
    argnums: &[usize],
) -> Result<Vec<Array>> {
    let (rules, n) = rules_of(prim);
    let args = &primals[..n];
    let full: Vec<Array> = (0..n)
        .map(|i| match argnums.iter().position(|&a| a == i) {
            Some(k) => Ok(tangents[k].clone()),
            None => ops::zeros(args[i].shape(), args[i].dtype()),
        })
        .collect::<Result<_>>()?;
    match &rules.jvp {
        Some(f) => f(args, &full),
        None => {
            let fun = rules.fun.clone();
            Ok(jvp(move |p| fun(p), args, &full)?.1)
        }
    }
}

pub(crate) fn custom_vmap(
    prim: &Primitive,
    inputs: &[Array],
    axes: &[Option<usize>],
) -> Result<(Vec<Array>, Vec<Option<usize>>)> {
    let (rules, n) = rules_of(prim);
    if let Some(f) = &rules.vmap {
        let (outs, out_axes) = f(&inputs[..n], &axes[..n])?;
        let expected = inputs.len() - n;
        ensure!(
            outs.len() == expected && out_axes.len() == expected,
            Value,
            "custom_function",
            "The vmap rule must return {expected} outputs and as many axes, got {} and {}.",
            outs.len(),
            out_axes.len()
        );
        for (o, a) in outs.iter().zip(&out_axes) {
            if let Some(a) = a {
                ensure!(
                    *a < o.ndim(),
                    Value,
                    "custom_function",
                    "The vmap rule returned axis {a} for an output with {} dimensions.",
                    o.ndim()
                );
            }
        }
        return Ok((outs, out_axes));
    }
    let fun = rules.fun.clone();
    let (outs, _) = vmap_outputs(move |p| fun(p), &inputs[..n], &axes[..n])?;
    Ok(outs.into_iter().unzip())
}
