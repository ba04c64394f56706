//! The front end: each op validates its inputs, promotes dtypes, inserts explicit
//! broadcasts and casts, then records one primitive. Errors surface here, at the call site,
//! never at eval.

mod creation;
mod elementwise;
mod index;
mod indexing;
mod linalg;
mod pad;
pub mod random;
mod reduce;
mod shape;

pub use creation::{arange, full, ones, scalar, zeros};
pub use elementwise::*;
pub use index::{index, index_update, IndexItem};
pub use indexing::{
    as_strided, gather, masked_scatter, put_along_axis, scatter, scatter_add, scatter_reduce,
    slice_dynamic, slice_update_dynamic, take, take_along_axis, view,
};
pub use linalg::matmul;
pub use pad::{pad, PadMode};
pub use reduce::{argmax, argmin, max, mean, min, prod, sum};
pub use shape::{
    broadcast_arrays, broadcast_to, concatenate, expand_dims, flatten, moveaxis, repeat, reshape,
    roll, slice, split, squeeze, stack, swapaxes, tile, transpose, unflatten, SplitSpec,
};

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
