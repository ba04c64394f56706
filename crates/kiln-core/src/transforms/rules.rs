//! The per-primitive transform hooks. Graph walks (vjp, jvp, vmap drivers) stay generic and
//! call these; each primitive class answers for itself. Rules arrive with the transforms
//! work: until then every hook reports, as a typed error, which rule is missing.

use crate::array::Array;
use kiln_base::{Error, Primitive, Result};

/// What a primitive contributes to each transform.
pub trait Rules {
    /// Cotangents of the inputs listed in `argnums`, given the primal inputs, the cotangents
    /// of every output and the outputs themselves.
    fn vjp(
        &self,
        primals: &[Array],
        cotangents: &[Array],
        argnums: &[usize],
        outputs: &[Array],
    ) -> Result<Vec<Array>>;

    /// Tangents of every output, given the primal inputs and the tangents of the inputs
    /// listed in `argnums`.
    fn jvp(&self, primals: &[Array], tangents: &[Array], argnums: &[usize]) -> Result<Vec<Array>>;

    /// The batched outputs and their batch axes, given inputs whose batch axis is `axes[i]`
    /// (`None`: not batched).
    fn vmap(
        &self,
        inputs: &[Array],
        axes: &[Option<usize>],
    ) -> Result<(Vec<Array>, Vec<Option<usize>>)>;
}

fn missing(transform: &'static str, prim: &Primitive) -> Error {
    Error::Unsupported {
        op: transform,
        msg: format!("No {transform} rule for {} yet.", prim.name()),
    }
}

impl Rules for Primitive {
    fn vjp(&self, _: &[Array], _: &[Array], _: &[usize], _: &[Array]) -> Result<Vec<Array>> {
        Err(missing("vjp", self))
    }

    fn jvp(&self, _: &[Array], _: &[Array], _: &[usize]) -> Result<Vec<Array>> {
        Err(missing("jvp", self))
    }

    fn vmap(&self, _: &[Array], _: &[Option<usize>]) -> Result<(Vec<Array>, Vec<Option<usize>>)> {
        Err(missing("vmap", self))
    }
}
