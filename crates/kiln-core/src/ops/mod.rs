//! The front end: each op validates its inputs, promotes dtypes, inserts explicit
//! broadcasts and casts, then records one primitive. Errors surface here, at the call site,
//! never at eval.

mod creation;
mod diag;
mod elementwise;
mod index;
mod linalg;
mod math;
pub mod random;
mod reduce;
mod shape;

pub use creation::{
    arange, eye, full, full_like, identity, linspace, meshgrid, ones, ones_like, scalar,
    scalar_checked, tri, zeros, zeros_like,
};
pub use diag::{diag, diagonal, tril, triu};
pub use elementwise::*;
pub use index::{index, IndexItem};
pub use linalg::matmul;
pub use math::*;
pub use reduce::{argmax, argmin, max, mean, min, prod, sum};
pub use shape::{broadcast_to, concatenate, expand_dims, reshape, slice, squeeze, transpose};

use crate::array::Array;
use crate::device::default_stream;
use kiln_base::{Primitive, Result};

/// Records a single-output primitive on the current stream after checking its inputs.
pub(crate) fn record(prim: Primitive, inputs: Vec<Array>) -> Result<Array> {
    let metas: Vec<(&[usize], kiln_base::DType)> =
        inputs.iter().map(|a| (a.shape(), a.dtype())).collect();
    let outputs = prim.output_shapes(&metas)?;
    let mut arrays = Array::from_call(prim, inputs, outputs, default_stream());
    Ok(arrays.swap_remove(0))
}
