//! complex64 functions at the top level: `real`, `imag`, `conj` and `conjugate`.

use crate::array::PyArray;
use crate::convert::to_array;
use crate::device::with_stream;
use kiln::ops;
use pyo3::prelude::*;

type Stream<'a, 'py> = Option<&'a Bound<'py, PyAny>>;

/// The real part (float32 for complex64 input; real input is returned as is).
#[pyfunction]
#[pyo3(signature = (a, /, *, stream = None))]
fn real(a: &Bound<'_, PyAny>, stream: Stream<'_, '_>) -> PyResult<PyArray> {
    let a = to_array(a, None)?;
    with_stream(stream, || ops::real(&a)).map(PyArray)
}

/// The imaginary part (float32 for complex64 input; zeros for real input).
#[pyfunction]
#[pyo3(signature = (a, /, *, stream = None))]
fn imag(a: &Bound<'_, PyAny>, stream: Stream<'_, '_>) -> PyResult<PyArray> {
    let a = to_array(a, None)?;
    with_stream(stream, || ops::imag(&a)).map(PyArray)
}

/// The complex conjugate (real input is returned as is).
#[pyfunction]
#[pyo3(signature = (a, /, *, stream = None))]
fn conjugate(a: &Bound<'_, PyAny>, stream: Stream<'_, '_>) -> PyResult<PyArray> {
    let a = to_array(a, None)?;
    with_stream(stream, || ops::conjugate(&a)).map(PyArray)
}

/// The complex conjugate (an alias of `conjugate`).
#[pyfunction]
#[pyo3(signature = (a, /, *, stream = None))]
fn conj(a: &Bound<'_, PyAny>, stream: Stream<'_, '_>) -> PyResult<PyArray> {
    conjugate(a, stream)
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(real, m)?)?;
    m.add_function(wrap_pyfunction!(imag, m)?)?;
    m.add_function(wrap_pyfunction!(conjugate, m)?)?;
    m.add_function(wrap_pyfunction!(conj, m)?)?;
    Ok(())
}
