//! Python bindings of the creation and matrix-structure ops: `zeros_like`, `ones_like`,
//! `full_like`, `linspace`, `eye`, `identity`, `tri`, `tril`, `triu`, `meshgrid`, `diag`,
//! `diagonal`, with MLX's signatures and defaults (float32 unless a dtype is given).

use crate::array::PyArray;
use crate::convert::{py_scalar, to_array};
use crate::device::with_stream;
use crate::dtype::Dtype;
use crate::ops::materialised;
use kiln::{ops as kops, Array};
use kiln_base::DType;
use pyo3::prelude::*;
use pyo3::types::PyTuple;

type Stream<'a, 'py> = Option<&'a Bound<'py, PyAny>>;

fn arr(obj: &Bound<'_, PyAny>) -> PyResult<Array> {
    to_array(obj, None)
}

fn or_f32(dtype: Option<Dtype>) -> DType {
    dtype.map_or(DType::F32, |d| d.0)
}

/// Zeros shaped like `a` (its dtype unless `dtype` is given).
#[pyfunction]
#[pyo3(signature = (a, /, dtype = None, *, stream = None))]
fn zeros_like(
    a: &Bound<'_, PyAny>,
    dtype: Option<Dtype>,
    stream: Stream<'_, '_>,
) -> PyResult<PyArray> {
    let a = arr(a)?;
    with_stream(stream, || materialised(kops::zeros_like(&a, dtype.map(|d| d.0))?)).map(PyArray)
}

/// Ones shaped like `a` (its dtype unless `dtype` is given).
#[pyfunction]
#[pyo3(signature = (a, /, dtype = None, *, stream = None))]
fn ones_like(
    a: &Bound<'_, PyAny>,
    dtype: Option<Dtype>,
    stream: Stream<'_, '_>,
) -> PyResult<PyArray> {
    let a = arr(a)?;
    with_stream(stream, || materialised(kops::ones_like(&a, dtype.map(|d| d.0))?)).map(PyArray)
}

/// `vals` (a scalar or an array broadcastable to `a`) in `a`'s shape and dtype.
#[pyfunction]
#[pyo3(signature = (a, vals, dtype = None, *, stream = None))]
fn full_like(
    a: &Bound<'_, PyAny>,
    vals: &Bound<'_, PyAny>,
    dtype: Option<Dtype>,
    stream: Stream<'_, '_>,
) -> PyResult<PyArray> {
    let a = arr(a)?;
    let dtype = dtype.map_or(a.dtype(), |d| d.0);
    // A Python number (Err here) takes the target dtype directly (3.7 -> 3 for int8, as
    // MLX); anything else becomes an array first.
    let fill: Result<Array, kiln_base::Scalar> = match py_scalar(vals)? {
        Some(s) => Err(s),
        None => Ok(arr(vals)?),
    };
    with_stream(stream, || {
        let vals = match fill {
            Ok(v) => v,
            Err(s) => kops::scalar_checked("full_like", s, dtype)?,
        };
        materialised(kops::full_like(&a, &vals, Some(dtype))?)
    })
    .map(PyArray)
}

/// `num` evenly spaced samples from `start` to `stop`.
#[pyfunction]
#[pyo3(signature = (start, stop, num = 50, endpoint = true, dtype = None, stream = None))]
fn linspace(
    start: f64,
    stop: f64,
    num: i64,
    endpoint: bool,
    dtype: Option<Dtype>,
    stream: Stream<'_, '_>,
) -> PyResult<PyArray> {
    with_stream(stream, || kops::linspace(start, stop, num, endpoint, or_f32(dtype))).map(PyArray)
}

/// Ones on diagonal `k` of an `n x m` matrix.
#[pyfunction]
#[pyo3(signature = (n, m = None, k = 0, dtype = None, *, stream = None))]
fn eye(
    n: i64,
    m: Option<i64>,
    k: i64,
    dtype: Option<Dtype>,
    stream: Stream<'_, '_>,
) -> PyResult<PyArray> {
    with_stream(stream, || kops::eye(n, m, k, or_f32(dtype))).map(PyArray)
}

/// The `n x n` identity matrix.
#[pyfunction]
#[pyo3(signature = (n, dtype = None, *, stream = None))]
fn identity(n: i64, dtype: Option<Dtype>, stream: Stream<'_, '_>) -> PyResult<PyArray> {
    with_stream(stream, || kops::identity(n, or_f32(dtype))).map(PyArray)
}

/// Ones at and below diagonal `k` of an `n x m` matrix.
#[pyfunction]
#[pyo3(signature = (n, m = None, k = 0, dtype = None, *, stream = None))]
fn tri(
    n: i64,
    m: Option<i64>,
    k: i64,
    dtype: Option<Dtype>,
    stream: Stream<'_, '_>,
) -> PyResult<PyArray> {
    with_stream(stream, || kops::tri(n, m, k, or_f32(dtype))).map(PyArray)
}

/// The lower triangle (at and below diagonal `k`) of the last two axes.
#[pyfunction]
#[pyo3(signature = (x, k = 0, *, stream = None))]
fn tril(x: &Bound<'_, PyAny>, k: i64, stream: Stream<'_, '_>) -> PyResult<PyArray> {
    let x = arr(x)?;
    with_stream(stream, || kops::tril(&x, k)).map(PyArray)
}

/// The upper triangle (at and above diagonal `k`) of the last two axes.
#[pyfunction]
#[pyo3(signature = (x, k = 0, *, stream = None))]
fn triu(x: &Bound<'_, PyAny>, k: i64, stream: Stream<'_, '_>) -> PyResult<PyArray> {
    let x = arr(x)?;
    with_stream(stream, || kops::triu(&x, k)).map(PyArray)
}

/// Coordinate grids from coordinate vectors (a tuple of arrays).
#[pyfunction]
#[pyo3(signature = (*arrays, sparse = None, indexing = None, stream = None))]
fn meshgrid<'py>(
    arrays: &Bound<'py, PyTuple>,
    sparse: Option<bool>,
    indexing: Option<&str>,
    stream: Stream<'_, '_>,
) -> PyResult<Bound<'py, PyTuple>> {
    // MLX's defaults (None means the default there too).
    let (sparse, indexing) = (sparse.unwrap_or(false), indexing.unwrap_or("xy"));
    let py = arrays.py();
    let arrays = arrays.iter().map(|a| arr(&a)).collect::<PyResult<Vec<_>>>()?;
    let grids = with_stream(stream, || kops::meshgrid(&arrays, sparse, indexing))?;
    PyTuple::new(py, grids.into_iter().map(PyArray))
}

/// 1-d: a matrix with `a` on diagonal `k`; 2-d: diagonal `k` of `a`.
#[pyfunction]
#[pyo3(signature = (a, /, k = 0, *, stream = None))]
pub fn diag(a: &Bound<'_, PyAny>, k: i64, stream: Stream<'_, '_>) -> PyResult<PyArray> {
    let a = arr(a)?;
    with_stream(stream, || kops::diag(&a, k)).map(PyArray)
}

/// Diagonal `offset` of the planes of `axis1` and `axis2`, as the last axis.
#[pyfunction]
#[pyo3(signature = (a, offset = 0, axis1 = 0, axis2 = 1, stream = None))]
pub fn diagonal(
    a: &Bound<'_, PyAny>,
    offset: i64,
    axis1: i64,
    axis2: i64,
    stream: Stream<'_, '_>,
) -> PyResult<PyArray> {
    let a = arr(a)?;
    with_stream(stream, || kops::diagonal(&a, offset, axis1, axis2)).map(PyArray)
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    macro_rules! add {
        ($($f:ident),* $(,)?) => {$( m.add_function(wrap_pyfunction!($f, m)?)?; )*};
    }
    add!(zeros_like, ones_like, full_like, linspace, eye, identity, tri, tril, triu);
    add!(meshgrid, diag, diagonal);
    Ok(())
}
