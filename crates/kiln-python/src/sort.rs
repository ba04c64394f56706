//! Bindings of the sorting ops: `sort`, `argsort`, `partition`, `argpartition`, `topk`,
//! `searchsorted`, with MLX's signatures (`axis` defaults to -1; None works on the
//! flattened array).

use crate::array::PyArray;
use crate::convert::to_array;
use crate::device::with_stream;
use crate::error::raise;
use kiln::ops as kops;
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

/// Insertion indices of `values` into the sorted 1-d `sorted_sequence` (uint32); `side`
/// is "left" (before equal elements) or "right" (after them).
#[pyfunction]
#[pyo3(signature = (sorted_sequence, values, /, side = "left", *, stream = None))]
fn searchsorted(
    sorted_sequence: &Bound<'_, PyAny>,
    values: &Bound<'_, PyAny>,
    side: &str,
    stream: Stream<'_, '_>,
) -> PyResult<PyArray> {
    let right = match side {
        "left" => false,
        "right" => true,
        _ => {
            return Err(raise!(
                Value,
                "searchsorted",
                "Invalid side '{side}'. Expected 'left' or 'right'."
            ))
        }
    };
    let (seq, values) = (to_array(sorted_sequence, None)?, to_array(values, None)?);
    with_stream(stream, || kops::searchsorted(&seq, &values, right)).map(PyArray)
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(sort, m)?)?;
    m.add_function(wrap_pyfunction!(argsort, m)?)?;
    m.add_function(wrap_pyfunction!(partition, m)?)?;
    m.add_function(wrap_pyfunction!(argpartition, m)?)?;
    m.add_function(wrap_pyfunction!(topk, m)?)?;
    m.add_function(wrap_pyfunction!(searchsorted, m)?)
}
