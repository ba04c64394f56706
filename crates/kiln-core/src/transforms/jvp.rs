//! Forward mode: the function runs once on tracer copies of the primals, then the tape is
//! walked inputs-first, each call's rule turning input tangents into output tangents.

use super::rules::{zeros_like, Rules};
use super::tape::{key, tape};
use super::{Transform, TransformScope};
use crate::array::Array;
use crate::ops;
use kiln_base::shape::fmt_shape;
use kiln_base::{bail, ensure, Result};
use rustc_hash::FxHashMap;

/// Runs `fun` on `primals` and returns its outputs and their tangents given the primals'
/// `tangents` (Jacobian-vector products).
pub fn jvp<F>(fun: F, primals: &[Array], tangents: &[Array]) -> Result<(Vec<Array>, Vec<Array>)>
where
    F: FnOnce(&[Array]) -> Result<Vec<Array>>,
{
    let op = "jvp";
    ensure!(
        primals.len() == tangents.len(),
        Value,
        op,
        "Expected one tangent per primal, got {} for {}.",
        tangents.len(),
        primals.len()
    );
    for (p, t) in primals.iter().zip(tangents) {
        if p.shape() != t.shape() {
            bail!(
                Value,
                op,
                "Tangent shape {} does not match primal shape {}.",
                fmt_shape(t.shape()),
                fmt_shape(p.shape())
            );
        }
    }
    let _scope = TransformScope::enter(Transform::Grad);
    let tracers: Vec<Array> = primals.iter().map(Array::tracer_of).collect();
    let outputs = fun(&tracers)?;
    let mut tans: FxHashMap<usize, Array> = FxHashMap::default();
    for (t, tangent) in tracers.iter().zip(tangents) {
        tans.insert(key(t), ops::astype(tangent, t.dtype())?);
    }
    for entry in tape(&outputs, &tracers, false).entries {
        let inputs = &entry.call.inputs;
        let argnums: Vec<usize> =
            (0..inputs.len()).filter(|&i| tans.contains_key(&key(&inputs[i]))).collect();
        let given: Vec<Array> = argnums.iter().map(|&i| tans[&key(&inputs[i])].clone()).collect();
        let outs = entry.outputs_all()?;
        let results = entry.call.prim.jvp(inputs, &given, &argnums, &outs)?;
        for (o, t) in entry.outputs.iter().zip(results) {
            if let Some(o) = o {
                tans.insert(key(o), t);
            }
        }
    }
    let out_tangents = outputs
        .iter()
        .map(|o| tans.get(&key(o)).cloned().map_or_else(|| zeros_like(o), Ok))
        .collect::<Result<Vec<_>>>()?;
    Ok((outputs, out_tangents))
}
