//! Reverse mode: vjp, grad and value_and_grad. The function runs once on tracer copies of the
//! primals; the tape between them and the outputs is then walked backwards, each call's rule
//! turning output cotangents into input cotangents.

use super::rules::Rules;
use super::tape::{key, tape};
use super::{Transform, TransformScope};
use crate::array::Array;
use crate::ops;
use kiln_base::shape::fmt_shape;
use kiln_base::{bail, ensure, Result};
use rustc_hash::FxHashMap;

/// Adds `g` into the cotangent accumulated for `target`.
fn accumulate(cots: &mut FxHashMap<usize, Array>, target: &Array, g: Array) -> Result<()> {
    let k = key(target);
    let sum = match cots.remove(&k) {
        Some(prev) => ops::add(&prev, &g)?,
        None => g,
    };
    cots.insert(k, sum);
    Ok(())
}

/// Runs `fun` on `primals` and returns its outputs and the cotangents of the primals given
/// the outputs' `cotangents` (vector-Jacobian products).
pub fn vjp<F>(fun: F, primals: &[Array], cotangents: &[Array]) -> Result<(Vec<Array>, Vec<Array>)>
where
    F: FnOnce(&[Array]) -> Result<Vec<Array>>,
{
    let op = "vjp";
    let _scope = TransformScope::enter(Transform::Grad);
    let tracers: Vec<Array> = primals.iter().map(Array::tracer_of).collect();
    let outputs = fun(&tracers)?;
    ensure!(
        outputs.len() == cotangents.len(),
        Value,
        op,
        "Expected {} cotangents for {} outputs.",
        outputs.len(),
        outputs.len()
    );
    let mut cots: FxHashMap<usize, Array> = FxHashMap::default();
    for (o, c) in outputs.iter().zip(cotangents) {
        if o.shape() != c.shape() {
            bail!(
                Value,
                op,
                "Cotangent shape {} does not match output shape {}.",
                fmt_shape(c.shape()),
                fmt_shape(o.shape())
            );
        }
        accumulate(&mut cots, o, ops::astype(c, o.dtype())?)?;
    }
    let tape = tape(&outputs, &tracers, false);
    for entry in tape.entries.iter().rev() {
        let outs = entry.outputs_all()?;
        if outs.iter().all(|o| !cots.contains_key(&key(o))) {
            continue; // nothing flows back through this call
        }
        let out_cots = outs
            .iter()
            .map(|o| cots.remove(&key(o)).map_or_else(|| super::rules::zeros_like(o), Ok))
            .collect::<Result<Vec<_>>>()?;
        let inputs = &entry.call.inputs;
        let argnums: Vec<usize> =
            (0..inputs.len()).filter(|&i| tape.active.contains(&key(&inputs[i]))).collect();
        let grads = entry.call.prim.vjp(inputs, &out_cots, &argnums, &outs)?;
        for (&i, g) in argnums.iter().zip(grads) {
            accumulate(&mut cots, &inputs[i], g)?;
        }
    }
    let grads = tracers
        .iter()
        .map(|t| cots.remove(&key(t)).map_or_else(|| super::rules::zeros_like(t), Ok))
        .collect::<Result<Vec<_>>>()?;
    Ok((outputs, grads))
}

/// `fun`'s value and its gradient with respect to the arguments in `argnums`; `fun` must
/// return a scalar (0-d) array.
pub fn value_and_grad<F>(fun: F, args: &[Array], argnums: &[usize]) -> Result<(Array, Vec<Array>)>
where
    F: FnOnce(&[Array]) -> Result<Array>,
{
    let op = "value_and_grad";
    for &i in argnums {
        ensure!(
            i < args.len(),
            Value,
            op,
            "Can't compute the gradient of argument index {i} because the function is called \
             with only {} positional arguments.",
            args.len()
        );
    }
    let primals: Vec<Array> = argnums.iter().map(|&i| args[i].clone()).collect();
    let call = |traced: &[Array]| -> Result<Vec<Array>> {
        let mut full = args.to_vec();
        for (&i, t) in argnums.iter().zip(traced) {
            full[i] = t.clone();
        }
        let out = fun(&full)?;
        ensure!(
            out.ndim() == 0,
            Value,
            op,
            "The function whose gradient is computed must return a scalar array, got shape {}.",
            fmt_shape(out.shape())
        );
        Ok(vec![out])
    };
    let one = ops::ones(&[], kiln_base::DType::F32)?;
    let (mut outs, grads) = vjp(call, &primals, &[one])?;
    Ok((outs.swap_remove(0), grads))
}

/// The gradient of scalar-valued `fun` with respect to the arguments in `argnums`.
pub fn grad<F>(fun: F, args: &[Array], argnums: &[usize]) -> Result<Vec<Array>>
where
    F: FnOnce(&[Array]) -> Result<Array>,
{
    Ok(value_and_grad(fun, args, argnums)?.1)
}
