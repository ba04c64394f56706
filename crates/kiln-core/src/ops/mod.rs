//! The front end: each op validates its inputs, promotes dtypes, inserts explicit
//! broadcasts and casts, then records one primitive. Errors surface here, at the call site,
//! never at eval.

mod creation;
mod elementwise;
mod index;
mod linalg;
pub mod random;
mod reduce;
mod scan;
mod shape;
mod sort;

pub use creation::{arange, full, ones, scalar, zeros};
pub use elementwise::*;
pub use index::{index, IndexItem};
pub use linalg::matmul;
pub use reduce::{
    all, any, argmax, argmin, count_nonzero, logsumexp, max, mean, median, min, minmax, prod,
    softmax, std, sum, var,
};
pub use scan::{cummax, cummin, cumprod, cumsum, logcumsumexp};
pub use shape::{broadcast_to, concatenate, expand_dims, reshape, slice, squeeze, transpose};
pub use sort::{argpartition, argsort, partition, searchsorted, sort, topk};

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
