//! Raw byte access for the file formats in `kiln/core/_io.py` (.npy, .npz, .safetensors):
//! those need the exact bits of every dtype, bfloat16 included, which numpy cannot hold.

use crate::array::PyArray;
use crate::convert::host_bytes;
use crate::dtype::Dtype;
use crate::error::OrRaise;
use kiln::Array;
use pyo3::prelude::*;
use pyo3::types::PyBytes;

/// The elements of `a` in row-major order, as little-endian bytes.
#[pyfunction]
fn _raw_bytes<'py>(py: Python<'py>, a: &PyArray) -> PyResult<Bound<'py, PyBytes>> {
    let bytes = host_bytes(py, &a.0)?;
    Ok(PyBytes::new(py, &bytes))
}

/// An array of `shape` and `dtype` over a copy of row-major little-endian `data`.
#[pyfunction]
fn _from_raw_bytes(data: &[u8], shape: Vec<usize>, dtype: Dtype) -> PyResult<PyArray> {
    Array::from_bytes(data, &shape, dtype.0).map(PyArray).or_raise()
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(_raw_bytes, m)?)?;
    m.add_function(wrap_pyfunction!(_from_raw_bytes, m)?)?;
    Ok(())
}
