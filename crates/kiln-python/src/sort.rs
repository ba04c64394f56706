//! Bindings of the sorting ops: `sort`, `argsort`, `partition`, `argpartition`, `topk`,
//! with MLX's signatures (`axis` defaults to -1; None works on the flattened array).

use crate::array::PyArray;
use crate::convert::to_array;
use crate::device::with_stream;
use kiln_core::ops as kops;
use pyo3::prelude::*;

type Stream<'a, 'py> = Option<&'a Bound<'py, PyAny>>;

/// A sorted copy along `axis` (stable; NaN last).
#[pyfunction]
#[pyo3(signature = (a, /, axis = Some(-1), *, stream = None))]
fn sort(a: &Bound<'_, PyAny>, axis: Option<i64>, stream: Stream<'_, '_>) -> PyResult<PyArray> {
    let a = to_array(a, None)?;
    with_stream(stream, || kops::sort(&a, axis)).map(PyArray)
}

/// The uint32 indices that stably sort along `axis`.
#[pyfunction]
#[pyo3(signature = (a, /, axis = Some(-1), *, stream = None))]
fn argsort(a: &Bound<'_, PyAny>, axis: Option<i64>, stream: Stream<'_, '_>) -> PyResult<PyArray> {
    let a = to_array(a, None)?;
    with_stream(stream, || kops::argsort(&a, axis)).map(PyArray)
}

/// A copy partitioned around the element of sorted rank `kth`.
#[pyfunction]
#[pyo3(signature = (a, /, kth, axis = Some(-1), *, stream = None))]
fn partition(
    a: &Bound<'_, PyAny>,
    kth: i64,
    axis: Option<i64>,
    stream: Stream<'_, '_>,
) -> PyResult<PyArray> {
    let a = to_array(a, None)?;
    with_stream(stream, || kops::partition(&a, kth, axis)).map(PyArray)
}

/// The uint32 indices that partition around the element of sorted rank `kth`.
#[pyfunction]
#[pyo3(signature = (a, /, kth, axis = Some(-1), *, stream = None))]
fn argpartition(
    a: &Bound<'_, PyAny>,
    kth: i64,
    axis: Option<i64>,
    stream: Stream<'_, '_>,
) -> PyResult<PyArray> {
    let a = to_array(a, None)?;
    with_stream(stream, || kops::argpartition(&a, kth, axis)).map(PyArray)
}

/// The `k` largest elements along `axis` (ascending).
#[pyfunction]
#[pyo3(signature = (a, /, k, axis = Some(-1), *, stream = None))]
fn topk(
    a: &Bound<'_, PyAny>,
    k: i64,
    axis: Option<i64>,
    stream: Stream<'_, '_>,
) -> PyResult<PyArray> {
    let a = to_array(a, None)?;
    with_stream(stream, || kops::topk(&a, k, axis)).map(PyArray)
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(sort, m)?)?;
    m.add_function(wrap_pyfunction!(argsort, m)?)?;
    m.add_function(wrap_pyfunction!(partition, m)?)?;
    m.add_function(wrap_pyfunction!(argpartition, m)?)?;
    m.add_function(wrap_pyfunction!(topk, m)?)
}
