//! The front end: each op validates its inputs, promotes dtypes, inserts explicit
//! broadcasts and casts, then records one primitive. Errors surface here, at the call site,
//! never at eval.

mod complex;
mod contiguous;
mod conv;
mod creation;
mod cuda_kernel;
mod diag;
pub mod distributed;
mod einsum;
mod elementwise;
pub mod fast;
pub mod fft;
mod gather_mm;
mod getitem;
mod indexing;
pub mod linalg;
mod math;
mod pad;
mod quantize;
pub mod random;
mod reduce;
mod scan;
mod shape;
mod sort;

pub use complex::{conjugate, imag, real};
pub use contiguous::contiguous;
pub use conv::{
    conv1d, conv2d, conv3d, conv_general, conv_transpose1d, conv_transpose2d, conv_transpose3d,
};
pub use creation::{
    arange, eye, full, full_like, identity, linspace, meshgrid, ones, ones_like, scalar,
    scalar_checked, scalar_value, tri, zeros, zeros_like,
};
pub use cuda_kernel::cuda_kernel;
pub use diag::{diag, diagonal, tril, triu};
pub use einsum::einsum;
pub use elementwise::*;
pub(crate) use gather_mm::{composed_gather_mm, composed_gather_qmm};
pub use gather_mm::{gather_mm, gather_qmm};
pub use getitem::{index, index_update, IndexItem};
pub use indexing::{
    as_strided, gather, masked_scatter, put_along_axis, scatter, scatter_add, scatter_reduce,
    slice_dynamic, slice_update_dynamic, take, take_along_axis, view,
};
pub use linalg::{addmm, inner, matmul, outer, tensordot, TensordotAxes};
pub use math::*;
pub use pad::{pad, PadMode};
pub(crate) use quantize::composed_quantized_matmul;
pub use quantize::{dequantize, quantize, quantized_matmul};
pub use reduce::{
    all, any, argmax, argmin, count_nonzero, logsumexp, max, mean, median, min, minmax, prod,
    softmax, std, sum, var,
};
pub use scan::{cummax, cummin, cumprod, cumsum, logcumsumexp};
pub(crate) use shape::reshape_by_rule;
pub use shape::{
    broadcast_arrays, broadcast_to, concatenate, expand_dims, flatten, moveaxis, repeat, reshape,
    roll, slice, split, squeeze, stack, swapaxes, tile, transpose, unflatten, SplitSpec,
};
pub use sort::{argpartition, argsort, partition, searchsorted, sort, topk};

use crate::array::Array;
use crate::device::default_stream;
use kiln_base::{Primitive, Result};

/// Records a single-output primitive on the current stream after checking its inputs.
pub(crate) fn record(prim: Primitive, inputs: Vec<Array>) -> Result<Array> {
    let mut arrays = record_all(prim, inputs)?;
    Ok(arrays.swap_remove(0))
}

/// Records a primitive and returns all its outputs (siblings), in order.
pub(crate) fn record_all(prim: Primitive, inputs: Vec<Array>) -> Result<Vec<Array>> {
    let metas: Vec<(&[usize], kiln_base::DType)> =
        inputs.iter().map(|a| (a.shape(), a.dtype())).collect();
    let outputs = prim.output_shapes(&metas)?;
    check_sizes(prim.name(), &outputs)?;
    Ok(Array::from_call(prim, inputs, outputs, default_stream()))
}

/// Every output's element count and byte size fit in memory's address range: a shape like
/// `(1 << 62, 1 << 62)` must not wrap around to a size of 0.
pub(crate) fn check_sizes(
    op: &'static str,
    outputs: &[(kiln_base::Shape, kiln_base::DType)],
) -> Result<()> {
    for (shape, dtype) in outputs {
        let bytes = kiln_base::shape::checked_size(op, shape)
            .ok()
            .and_then(|n| n.checked_mul(dtype.size().max(1)))
            .filter(|&b| b <= isize::MAX as usize);
        kiln_base::ensure!(
            bytes.is_some(),
            Value,
            op,
            "Shape {} of {dtype} has more elements than fit in memory.",
            kiln_base::shape::fmt_shape(shape)
        );
    }
    Ok(())
}
