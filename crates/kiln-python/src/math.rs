//! Python bindings of the math ops (`floor`, `cos`, `bitwise_and`, `remainder`, `isclose`,
//! `clip`, ...) with MLX's signatures. Operands may be arrays or anything `array(...)`
//! accepts; Python numbers are weak scalars, as in the basic arithmetic.

use crate::array::PyArray;
use crate::convert::{self, arrays_of, operand, operand_pair, to_array, type_name, Operand};
use crate::device::with_stream;
use crate::error::{raise, OrRaise};
use kiln::{ops as kops, Array};
use pyo3::prelude::*;
use pyo3::types::{PyList, PyTuple};

type Stream<'a, 'py> = Option<&'a Bound<'py, PyAny>>;

fn arr(obj: &Bound<'_, PyAny>) -> PyResult<Array> {
    to_array(obj, None)
}

/// One-input ops: `f(a, /, *, stream=None)`.
macro_rules! unary_functions {
    ($($name:ident),* $(,)?) => {$(
        #[doc = concat!("Elementwise `", stringify!($name), "`.")]
        #[pyfunction]
        #[pyo3(signature = (a, /, *, stream = None))]
        fn $name(a: &Bound<'_, PyAny>, stream: Stream<'_, '_>) -> PyResult<PyArray> {
            let a = arr(a)?;
            with_stream(stream, || kops::$name(&a)).map(PyArray)
        }
    )*};
}

/// One-input ops whose MLX signature lets `a` be passed by keyword: `f(a, stream=None)`.
macro_rules! unary_keyword_functions {
    ($($name:ident),* $(,)?) => {$(
        #[doc = concat!("Elementwise `", stringify!($name), "`.")]
        #[pyfunction]
        #[pyo3(signature = (a, stream = None))]
        fn $name(a: &Bound<'_, PyAny>, stream: Stream<'_, '_>) -> PyResult<PyArray> {
            let a = arr(a)?;
            with_stream(stream, || kops::$name(&a)).map(PyArray)
        }
    )*};
}

unary_functions!(square, reciprocal, stop_gradient);
unary_keyword_functions!(isnan, isinf, isfinite, isposinf, isneginf);

/// Round half to even to `decimals` places (integers keep their dtype).
#[pyfunction]
#[pyo3(signature = (a, /, decimals = 0, stream = None))]
pub fn round(a: &Bound<'_, PyAny>, decimals: i32, stream: Stream<'_, '_>) -> PyResult<PyArray> {
    let a = arr(a)?;
    with_stream(stream, || kops::round(&a, decimals)).map(PyArray)
}

/// `[a // b, a % b]` (a list, as MLX).
#[pyfunction]
#[pyo3(signature = (a, b, stream = None))]
fn divmod<'py>(
    a: &Bound<'py, PyAny>,
    b: &Bound<'py, PyAny>,
    stream: Stream<'_, '_>,
) -> PyResult<Bound<'py, PyList>> {
    let (x, y) = operand_pair("divmod", a, b)?;
    let (q, r) = with_stream(stream, || kops::divmod(&x, &y))?;
    PyList::new(a.py(), [PyArray(q), PyArray(r)])
}

/// Replaces NaN and infinities with finite numbers (defaults: 0 and the dtype's extremes).
#[pyfunction]
#[pyo3(signature = (a, nan = 0.0, posinf = None, neginf = None, *, stream = None))]
fn nan_to_num(
    a: &Bound<'_, PyAny>,
    nan: f64,
    posinf: Option<f64>,
    neginf: Option<f64>,
    stream: Stream<'_, '_>,
) -> PyResult<PyArray> {
    let a = arr(a)?;
    with_stream(stream, || kops::nan_to_num(&a, nan, posinf, neginf)).map(PyArray)
}

/// A clip bound: None, a weak Python scalar next to `like`, or an array.
fn bound(obj: &Bound<'_, PyAny>, like: &Array) -> PyResult<Option<Array>> {
    if obj.is_none() {
        return Ok(None);
    }
    match operand(obj)? {
        Some(Operand::Array(a)) => Ok(Some(a)),
        Some(Operand::Scalar(s)) => kops::weak_scalar(s, like).map(Some).or_raise(),
        None => Err(raise!(
            Type,
            "clip",
            "Bounds must be scalars, arrays or None, got {}.",
            type_name(obj)
        )),
    }
}

/// Limits `a` to `[a_min, a_max]` (either may be None, not both).
#[pyfunction]
#[pyo3(signature = (a, /, a_min, a_max, *, stream = None))]
fn clip(
    a: &Bound<'_, PyAny>,
    a_min: &Bound<'_, PyAny>,
    a_max: &Bound<'_, PyAny>,
    stream: Stream<'_, '_>,
) -> PyResult<PyArray> {
    let a = arr(a)?;
    let (lo, hi) = (bound(a_min, &a)?, bound(a_max, &a)?);
    with_stream(stream, || kops::clip(&a, lo.as_ref(), hi.as_ref())).map(PyArray)
}

/// `|a - b| <= atol + rtol * |b|` elementwise (infinities equal only themselves).
#[pyfunction]
#[pyo3(signature = (a, b, /, rtol = 1e-5, atol = 1e-8, *, equal_nan = false, stream = None))]
fn isclose(
    a: &Bound<'_, PyAny>,
    b: &Bound<'_, PyAny>,
    rtol: f64,
    atol: f64,
    equal_nan: bool,
    stream: Stream<'_, '_>,
) -> PyResult<PyArray> {
    let (a, b) = operand_pair("isclose", a, b)?;
    with_stream(stream, || kops::isclose(&a, &b, rtol, atol, equal_nan)).map(PyArray)
}

/// `isclose` everywhere, as a 0-d bool array.
#[pyfunction]
#[pyo3(signature = (a, b, /, rtol = 1e-5, atol = 1e-8, *, equal_nan = false, stream = None))]
fn allclose(
    a: &Bound<'_, PyAny>,
    b: &Bound<'_, PyAny>,
    rtol: f64,
    atol: f64,
    equal_nan: bool,
    stream: Stream<'_, '_>,
) -> PyResult<PyArray> {
    let (a, b) = operand_pair("allclose", a, b)?;
    with_stream(stream, || kops::allclose(&a, &b, rtol, atol, equal_nan)).map(PyArray)
}

/// Same shape and equal values (0-d bool); different shapes give False.
#[pyfunction]
#[pyo3(signature = (a, b, *, equal_nan = false, stream = None))]
fn array_equal(
    a: &Bound<'_, PyAny>,
    b: &Bound<'_, PyAny>,
    equal_nan: bool,
    stream: Stream<'_, '_>,
) -> PyResult<PyArray> {
    let (a, b) = operand_pair("array_equal", a, b)?;
    with_stream(stream, || kops::array_equal(&a, &b, equal_nan)).map(PyArray)
}

/// `me` and a Python operand as arrays (weak scalars resolved), in call order; `None` when
/// the operand is of a type kiln does not know (the operator returns NotImplemented).
fn operator_pair(
    me: &Array,
    other: &Bound<'_, PyAny>,
    reflected: bool,
) -> PyResult<Option<(Array, Array)>> {
    let Some(other) = operand(other)? else {
        return Ok(None);
    };
    let me = Operand::Array(me.clone());
    let pair = if reflected { arrays_of(other, me)? } else { arrays_of(me, other)? };
    Ok(Some(pair))
}

/// `divmod(a, b)` for the array class: a tuple, as Python's protocol expects.
pub fn divmod_operator(
    me: &Array,
    other: &Bound<'_, PyAny>,
    reflected: bool,
) -> PyResult<Py<PyAny>> {
    let py = other.py();
    let Some((a, b)) = operator_pair(me, other, reflected)? else {
        return Ok(py.NotImplemented());
    };
    let (q, r) = kops::divmod(&a, &b).or_raise()?;
    Ok(PyTuple::new(py, [PyArray(q), PyArray(r)])?.into_any().unbind())
}

/// `&`, `|`, `^`, `<<`, `>>`: as MLX's operators, floats are a ValueError before the op
/// runs (MLX's message: `bitwise_and` -> "... with bitwise and.").
pub fn bitwise_operator(
    me: &Array,
    other: &Bound<'_, PyAny>,
    f: fn(&Array, &Array) -> kiln_base::Result<Array>,
    reflected: bool,
    op: &'static str,
) -> PyResult<Py<PyAny>> {
    let py = other.py();
    let what = op.replace('_', " ");
    if reflected && convert::refused_operand(other, &what).is_some() {
        return Ok(py.NotImplemented()); // `[1] | a`: MLX's TypeError
    }
    if let Some(answer) = convert::refused_operand(other, &what) {
        return answer;
    }
    let Some((a, b)) = operator_pair(me, other, reflected)? else {
        return Ok(py.NotImplemented());
    };
    if a.dtype().is_float() || b.dtype().is_float() {
        return Err(raise!(Value, op, "Floating point types not allowed with {what}."));
    }
    let out = f(&a, &b).or_raise()?;
    Ok(PyArray(out).into_pyobject(py)?.into_any().unbind())
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    macro_rules! add {
        ($($f:ident),* $(,)?) => {$( m.add_function(wrap_pyfunction!($f, m)?)?; )*};
    }
    add!(square, reciprocal, round, isnan, isinf, isfinite, isposinf, isneginf);
    add!(nan_to_num, divmod, stop_gradient);
    add!(clip, isclose, allclose, array_equal);
    Ok(())
}
