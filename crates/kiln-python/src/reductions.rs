//! Bindings of the reductions and scans beyond `ops.rs`'s basic ones: `all`, `any`, `var`,
//! `std`, `logsumexp`, `count_nonzero`, `median`, `minmax`, `softmax`, `cumsum`, `cumprod`
//! (also as `cumulative_sum`/`cumulative_prod`), `cummax`, `cummin`, `logcumsumexp`, with
//! MLX's signatures. The array methods of the same names call the `*_of` helpers.

use crate::array::PyArray;
use crate::convert::to_array;
use crate::device::with_stream;
use crate::dtype::Dtype;
use crate::ops::{axes_arg, reduce};
use kiln::{ops as kops, Array};
use pyo3::prelude::*;

type Stream<'a, 'py> = Option<&'a Bound<'py, PyAny>>;

macro_rules! reductions {
    ($($name:ident),* $(,)?) => {$(
        #[doc = concat!("`", stringify!($name), "` over `axis` (all axes when None).")]
        #[pyfunction]
        #[pyo3(signature = (a, /, axis = None, keepdims = false, *, stream = None))]
        fn $name(
            a: &Bound<'_, PyAny>,
            axis: Option<&Bound<'_, PyAny>>,
            keepdims: bool,
            stream: Stream<'_, '_>,
        ) -> PyResult<PyArray> {
            reduce(kops::$name, &to_array(a, None)?, axis, keepdims, stream)
        }
    )*};
}

reductions!(all, any, logsumexp, count_nonzero, median);

/// `var`/`std` of an array (shared with the methods). `correction`, when given, replaces
/// `ddof` (MLX's keyword alias).
pub fn moment_of(
    std: bool,
    a: &Array,
    axis: Option<&Bound<'_, PyAny>>,
    keepdims: bool,
    ddof: i64,
    correction: Option<i64>,
    stream: Stream<'_, '_>,
) -> PyResult<PyArray> {
    let axes = axes_arg(axis)?;
    let ddof = correction.unwrap_or(ddof);
    let f = if std { kops::std } else { kops::var };
    with_stream(stream, || f(a, axes.as_deref(), keepdims, ddof)).map(PyArray)
}

/// Variance over `axis` with `ddof` delta degrees of freedom.
#[pyfunction]
#[pyo3(signature = (a, /, axis = None, keepdims = false, ddof = 0, *, correction = None, stream = None))]
fn var(
    a: &Bound<'_, PyAny>,
    axis: Option<&Bound<'_, PyAny>>,
    keepdims: bool,
    ddof: i64,
    correction: Option<i64>,
    stream: Stream<'_, '_>,
) -> PyResult<PyArray> {
    moment_of(false, &to_array(a, None)?, axis, keepdims, ddof, correction, stream)
}

/// Standard deviation over `axis` with `ddof` delta degrees of freedom.
#[pyfunction(name = "std")]
#[pyo3(signature = (a, /, axis = None, keepdims = false, ddof = 0, *, correction = None, stream = None))]
fn std_(
    a: &Bound<'_, PyAny>,
    axis: Option<&Bound<'_, PyAny>>,
    keepdims: bool,
    ddof: i64,
    correction: Option<i64>,
    stream: Stream<'_, '_>,
) -> PyResult<PyArray> {
    moment_of(true, &to_array(a, None)?, axis, keepdims, ddof, correction, stream)
}

/// `(min, max)` over `axis` (all axes when None).
#[pyfunction]
#[pyo3(signature = (a, /, axis = None, keepdims = false, *, stream = None))]
fn minmax(
    a: &Bound<'_, PyAny>,
    axis: Option<&Bound<'_, PyAny>>,
    keepdims: bool,
    stream: Stream<'_, '_>,
) -> PyResult<(PyArray, PyArray)> {
    let (a, axes) = (to_array(a, None)?, axes_arg(axis)?);
    let (lo, hi) = with_stream(stream, || kops::minmax(&a, axes.as_deref(), keepdims))?;
    Ok((PyArray(lo), PyArray(hi)))
}

/// Softmax over `axis` (all axes when None); `precise` computes half floats in float32.
#[pyfunction]
#[pyo3(signature = (a, /, axis = None, *, precise = false, stream = None))]
fn softmax(
    a: &Bound<'_, PyAny>,
    axis: Option<&Bound<'_, PyAny>>,
    precise: bool,
    stream: Stream<'_, '_>,
) -> PyResult<PyArray> {
    let (a, axes) = (to_array(a, None)?, axes_arg(axis)?);
    with_stream(stream, || kops::softmax(&a, axes.as_deref(), precise)).map(PyArray)
}

/// A scan of kiln-core (`cumsum`, ...).
pub type ScanFn = fn(&Array, Option<i64>, bool, bool) -> kiln_base::Result<Array>;

/// A scan, after converting to `dtype` when one is given (shared with the methods).
pub fn scan_of(
    f: ScanFn,
    a: &Array,
    axis: Option<i64>,
    reverse: bool,
    inclusive: bool,
    dtype: Option<Dtype>,
    stream: Stream<'_, '_>,
) -> PyResult<PyArray> {
    with_stream(stream, || {
        let a = match dtype {
            Some(d) => kops::astype(a, d.0)?,
            None => a.clone(),
        };
        f(&a, axis, reverse, inclusive)
    })
    .map(PyArray)
}

macro_rules! typed_scans {
    ($($name:ident),* $(,)?) => {$(
        #[doc = concat!("`", stringify!($name), "` along `axis` (of the flattened array when None), ")]
        #[doc = "after converting to `dtype` when given."]
        #[pyfunction]
        #[pyo3(signature = (a, /, axis = None, *, reverse = false, inclusive = true, dtype = None, stream = None))]
        fn $name(
            a: &Bound<'_, PyAny>,
            axis: Option<i64>,
            reverse: bool,
            inclusive: bool,
            dtype: Option<Dtype>,
            stream: Stream<'_, '_>,
        ) -> PyResult<PyArray> {
            scan_of(kops::$name, &to_array(a, None)?, axis, reverse, inclusive, dtype, stream)
        }
    )*};
}

macro_rules! scans {
    ($($name:ident),* $(,)?) => {$(
        #[doc = concat!("`", stringify!($name), "` along `axis` (of the flattened array when None).")]
        #[pyfunction]
        #[pyo3(signature = (a, /, axis = None, *, reverse = false, inclusive = true, stream = None))]
        fn $name(
            a: &Bound<'_, PyAny>,
            axis: Option<i64>,
            reverse: bool,
            inclusive: bool,
            stream: Stream<'_, '_>,
        ) -> PyResult<PyArray> {
            scan_of(kops::$name, &to_array(a, None)?, axis, reverse, inclusive, None, stream)
        }
    )*};
}

typed_scans!(cumsum, cumprod);
scans!(cummax, cummin, logcumsumexp);

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    macro_rules! add {
        ($($f:ident),* $(,)?) => {$( m.add_function(wrap_pyfunction!($f, m)?)?; )*};
    }
    add!(all, any, logsumexp, var, std_, softmax, count_nonzero, median, minmax);
    add!(cumsum, cumprod, cummax, cummin, logcumsumexp);
    // MLX's aliases (the same functions under a second name).
    m.add("cumulative_sum", m.getattr("cumsum")?)?;
    m.add("cumulative_prod", m.getattr("cumprod")?)?;
    crate::sort::register(m)
}
