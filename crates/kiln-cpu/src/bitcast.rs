//! View (the row-major bytes as another dtype) and AsStrided (a user-given strided view of
//! the row-major elements). Both share the input buffer when it already is row-major and
//! otherwise work on a row-major copy.

use crate::copy::copy;
use kiln_base::shape::row_major_strides;
use kiln_base::{ArrayData, DType, Layout, Result, Strides};

pub(crate) fn view(x: &ArrayData, to: DType, shape: &[usize]) -> Result<ArrayData> {
    let byte_offset = x.layout.offset * x.dtype.size();
    // Bool data must stay 0/1, so other bytes viewed as bool are normalised in a copy.
    let normalise = to == DType::Bool && x.dtype != DType::Bool;
    if x.layout.row_contiguous && byte_offset.is_multiple_of(to.size()) && !normalise {
        let layout = Layout::new(shape.into(), row_major_strides(shape), byte_offset / to.size());
        return Ok(ArrayData { buffer: x.buffer.clone(), layout, dtype: to });
    }
    let mut data = copy(x, &x.layout.shape)?;
    if normalise {
        if let Some(bytes) = data.buffer.host_slice_mut::<u8>() {
            bytes.iter_mut().for_each(|b| *b = (*b != 0) as u8);
        }
    }
    data.layout = Layout::contiguous(shape);
    data.dtype = to;
    Ok(data)
}

/// The non-row-major case (a row-major input is a view, see `Primitive::view_layout`).
pub(crate) fn as_strided(
    x: &ArrayData,
    shape: &[usize],
    strides: &Strides,
    offset: usize,
) -> Result<ArrayData> {
    let mut data = copy(x, &x.layout.shape)?;
    data.layout = Layout::new(shape.into(), strides.clone(), offset);
    Ok(data)
}
