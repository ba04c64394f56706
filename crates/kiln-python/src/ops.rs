//! The free functions of `kiln.core` (`add`, `sum`, `zeros`, `eval`, ...), with MLX's
//! signatures. Each accepts arrays or anything `array(...)` accepts, applies the weak-scalar
//! rule to Python numbers, and runs under the `stream=` device.

use crate::array::PyArray;
use crate::convert::{self, operand_pair, py_scalar, scalar_dtype, to_array};
use crate::device::with_stream;
use crate::dtype::Dtype;
use crate::error::{raise, OrRaise};
use kiln::{ops as kops, Array};
use kiln_base::{DType, Scalar};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyInt, PyList, PyTuple};

/// A reduction of kiln-core (`sum`, `max`, ...).
pub type ReduceFn = fn(&Array, Option<&[i64]>, bool) -> kiln_base::Result<Array>;

type Stream<'a, 'py> = Option<&'a Bound<'py, PyAny>>;

fn arr(obj: &Bound<'_, PyAny>) -> PyResult<Array> {
    to_array(obj, None)
}

/// `axis=`: None, an int or a sequence of ints.
pub fn axes_arg(axis: Option<&Bound<'_, PyAny>>) -> PyResult<Option<Vec<i64>>> {
    match axis {
        None => Ok(None),
        Some(a) if a.is_none() => Ok(None),
        Some(a) => ints_arg("axis", a, "an int or a sequence of ints").map(Some),
    }
}

/// An int or a sequence of ints (anything with `__index__`: numpy ints too). Other types
/// are a TypeError and ints past 64 bits an OverflowError, both naming `name` and `what`
/// was expected.
fn ints_arg(name: &'static str, value: &Bound<'_, PyAny>, what: &str) -> PyResult<Vec<i64>> {
    let one = |v: &Bound<'_, PyAny>| -> PyResult<i64> {
        v.extract::<i64>().map_err(|_| {
            if v.hasattr("__index__").unwrap_or(false) {
                pyo3::exceptions::PyOverflowError::new_err(format!(
                    "[{name}] The value {v} does not fit in 64 bits."
                ))
            } else {
                let ty = v.get_type().name().map(|n| n.to_string()).unwrap_or_default();
                pyo3::exceptions::PyTypeError::new_err(format!(
                    "[{name}] Expected {what}, got {ty}."
                ))
            }
        })
    };
    if value.is_instance_of::<PyInt>()
        || value.is_none()
        || value.is_instance_of::<pyo3::types::PyString>()
    {
        return Ok(vec![one(value)?]);
    }
    match value.try_iter() {
        Ok(items) => items.map(|v| one(&v?)).collect(),
        Err(_) => Ok(vec![one(value)?]),
    }
}

/// A shape that may hold -1 (reshape): an int or a sequence of ints.
fn ishape_arg(shape: &Bound<'_, PyAny>) -> PyResult<Vec<i64>> {
    ints_arg("shape", shape, "an int or a sequence of ints")
}

/// A shape of non-negative sizes: an int or a sequence of ints.
pub(crate) fn shape_arg(op: &'static str, shape: &Bound<'_, PyAny>) -> PyResult<Vec<usize>> {
    let dims = ints_arg(op, shape, "a shape (an int or a sequence of ints)")?;
    if let Some(d) = dims.iter().find(|&&d| d < 0) {
        return Err(raise!(Value, op, "Negative dimensions are not allowed, got {d}."));
    }
    Ok(dims.into_iter().map(|d| d as usize).collect())
}

/// A reduction with `axis=None|int|sequence`, shared with the array methods.
pub fn reduce(
    f: ReduceFn,
    a: &Array,
    axis: Option<&Bound<'_, PyAny>>,
    keepdims: bool,
    stream: Stream<'_, '_>,
) -> PyResult<PyArray> {
    let axes = axes_arg(axis)?;
    with_stream(stream, || f(a, axes.as_deref(), keepdims)).map(PyArray)
}

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
            reduce(kops::$name, &arr(a)?, axis, keepdims, stream)
        }
    )*};
}

macro_rules! arg_reductions {
    ($($name:ident),* $(,)?) => {$(
        #[doc = concat!("`", stringify!($name), "` along `axis` (of the flattened array when None), uint32.")]
        #[pyfunction]
        #[pyo3(signature = (a, /, axis = None, keepdims = false, *, stream = None))]
        fn $name(a: &Bound<'_, PyAny>, axis: Option<i64>, keepdims: bool, stream: Stream<'_, '_>) -> PyResult<PyArray> {
            let a = arr(a)?;
            with_stream(stream, || kops::$name(&a, axis, keepdims)).map(PyArray)
        }
    )*};
}

reductions!(sum, prod, max, min, mean);
arg_reductions!(argmax, argmin);

/// `condition ? x : y` elementwise, with broadcasting; x and y may be Python numbers.
#[pyfunction(name = "where")]
#[pyo3(signature = (condition, x, y, /, *, stream = None))]
fn where_(
    condition: &Bound<'_, PyAny>,
    x: &Bound<'_, PyAny>,
    y: &Bound<'_, PyAny>,
    stream: Stream<'_, '_>,
) -> PyResult<PyArray> {
    let condition = arr(condition)?;
    let (x, y) = operand_pair("where", x, y)?;
    with_stream(stream, || kops::where_(&condition, &x, &y)).map(PyArray)
}

/// Converts to `dtype`.
#[pyfunction]
#[pyo3(signature = (a, dtype, /, *, stream = None))]
fn astype(a: &Bound<'_, PyAny>, dtype: Dtype, stream: Stream<'_, '_>) -> PyResult<PyArray> {
    let a = arr(a)?;
    with_stream(stream, || kops::astype(&a, dtype.0)).map(PyArray)
}

/// A new shape of the same size (one entry may be -1).
#[pyfunction]
#[pyo3(signature = (a, /, shape, *, stream = None))]
fn reshape(
    a: &Bound<'_, PyAny>,
    shape: &Bound<'_, PyAny>,
    stream: Stream<'_, '_>,
) -> PyResult<PyArray> {
    let (a, shape) = (arr(a)?, ishape_arg(shape)?);
    with_stream(stream, || kops::reshape(&a, &shape)).map(PyArray)
}

/// Permutes the axes (reverses them when `axes` is None).
#[pyfunction]
#[pyo3(signature = (a, /, axes = None, *, stream = None))]
fn transpose(
    a: &Bound<'_, PyAny>,
    axes: Option<Vec<i64>>,
    stream: Stream<'_, '_>,
) -> PyResult<PyArray> {
    let a = arr(a)?;
    with_stream(stream, || kops::transpose(&a, axes.as_deref())).map(PyArray)
}

/// Broadcasts to `shape` (numpy's rules).
#[pyfunction]
#[pyo3(signature = (a, /, shape, *, stream = None))]
fn broadcast_to(
    a: &Bound<'_, PyAny>,
    shape: &Bound<'_, PyAny>,
    stream: Stream<'_, '_>,
) -> PyResult<PyArray> {
    let (a, shape) = (arr(a)?, shape_arg("broadcast_to", shape)?);
    with_stream(stream, || kops::broadcast_to(&a, &shape)).map(PyArray)
}

/// Inserts size-1 axes at `axis` (an int or a sequence, positions in the result).
#[pyfunction]
#[pyo3(signature = (a, /, axis, *, stream = None))]
fn expand_dims(
    a: &Bound<'_, PyAny>,
    axis: &Bound<'_, PyAny>,
    stream: Stream<'_, '_>,
) -> PyResult<PyArray> {
    let a = arr(a)?;
    if axis.is_none() {
        return Err(pyo3::exceptions::PyTypeError::new_err(
            "[expand_dims] axis must be an int or a sequence of ints, not None.",
        ));
    }
    let axes = axes_arg(Some(axis))?.unwrap_or_default();
    with_stream(stream, || kops::expand_dims(&a, &axes)).map(PyArray)
}

/// Removes size-1 axes (all of them when `axis` is None).
#[pyfunction]
#[pyo3(signature = (a, /, axis = None, *, stream = None))]
fn squeeze(
    a: &Bound<'_, PyAny>,
    axis: Option<&Bound<'_, PyAny>>,
    stream: Stream<'_, '_>,
) -> PyResult<PyArray> {
    let (a, axes) = (arr(a)?, axes_arg(axis)?);
    with_stream(stream, || kops::squeeze(&a, axes.as_deref())).map(PyArray)
}

/// Joins arrays along `axis` (None: flattens them first).
#[pyfunction]
#[pyo3(signature = (arrays, axis = Some(0), *, stream = None))]
fn concatenate(
    arrays: &Bound<'_, PyAny>,
    axis: Option<i64>,
    stream: Stream<'_, '_>,
) -> PyResult<PyArray> {
    let arrays = arrays.try_iter()?.map(|a| arr(&a?)).collect::<PyResult<Vec<_>>>()?;
    with_stream(stream, || match axis {
        Some(axis) => kops::concatenate(&arrays, axis),
        None => {
            let flat =
                arrays.iter().map(|a| kops::reshape(a, &[-1])).collect::<Result<Vec<_>, _>>()?;
            kops::concatenate(&flat, 0)
        }
    })
    .map(PyArray)
}

/// Matrix product with numpy's rules for 1-d operands and batch broadcasting.
#[pyfunction]
#[pyo3(signature = (a, b, /, *, stream = None))]
fn matmul(a: &Bound<'_, PyAny>, b: &Bound<'_, PyAny>, stream: Stream<'_, '_>) -> PyResult<PyArray> {
    let (a, b) = (arr(a)?, arr(b)?);
    with_stream(stream, || kops::matmul(&a, &b)).map(PyArray)
}

/// A creation op's result as MLX makes it: its own buffer of the full size once evaluated
/// (so `get_active_memory` and `get_peak_memory` count it as MLX does), not the stride-0
/// broadcast of one element that `kops::full` records. Inside `compile` the copy is
/// dropped again (simplify treats `Copy` as a no-op), so fused kernels still read the
/// broadcast value.
pub(crate) fn materialised(x: Array) -> kiln_base::Result<Array> {
    kops::contiguous(&x, false)
}

/// An array of `shape` filled with zeros (float32 by default).
#[pyfunction]
#[pyo3(signature = (shape, dtype = None, *, stream = None))]
fn zeros(
    shape: &Bound<'_, PyAny>,
    dtype: Option<Dtype>,
    stream: Stream<'_, '_>,
) -> PyResult<PyArray> {
    let shape = shape_arg("zeros", shape)?;
    let dtype = dtype.map_or(DType::F32, |d| d.0);
    with_stream(stream, || materialised(kops::zeros(&shape, dtype)?)).map(PyArray)
}

/// An array of `shape` filled with ones (float32 by default).
#[pyfunction]
#[pyo3(signature = (shape, dtype = None, *, stream = None))]
fn ones(
    shape: &Bound<'_, PyAny>,
    dtype: Option<Dtype>,
    stream: Stream<'_, '_>,
) -> PyResult<PyArray> {
    let shape = shape_arg("ones", shape)?;
    let dtype = dtype.map_or(DType::F32, |d| d.0);
    with_stream(stream, || materialised(kops::ones(&shape, dtype)?)).map(PyArray)
}

/// An array of `shape` filled with `vals` (a scalar, or an array broadcast to `shape`).
#[pyfunction]
#[pyo3(signature = (shape, vals, dtype = None, *, stream = None))]
fn full(
    shape: &Bound<'_, PyAny>,
    vals: &Bound<'_, PyAny>,
    dtype: Option<Dtype>,
    stream: Stream<'_, '_>,
) -> PyResult<PyArray> {
    let shape = shape_arg("full", shape)?;
    let dtype = dtype.map(|d| d.0);
    if let Some(s) = py_scalar(vals)? {
        let dtype = dtype.unwrap_or_else(|| scalar_dtype(s));
        return with_stream(stream, || materialised(kops::full(&shape, s, dtype)?)).map(PyArray);
    }
    let vals = to_array(vals, dtype)?;
    with_stream(stream, || materialised(kops::broadcast_to(&vals, &shape)?)).map(PyArray)
}

/// A number argument of `arange`.
fn arange_number(obj: &Bound<'_, PyAny>) -> PyResult<Scalar> {
    match py_scalar(obj)? {
        Some(s @ (Scalar::Int(_) | Scalar::UInt(_) | Scalar::Float(_))) => Ok(s),
        _ => Err(raise!(
            Type,
            "arange",
            "Expected int or float arguments, got {}.",
            convert::type_name(obj)
        )),
    }
}

/// `arange(stop)`, `arange(start, stop[, step])` (also by keyword, and with a trailing
/// positional dtype as MLX allows). Ints give int32, any float float32.
#[pyfunction]
#[pyo3(signature = (*args, start = None, stop = None, step = None, dtype = None, stream = None))]
fn arange<'py>(
    args: &Bound<'py, PyTuple>,
    start: Option<&Bound<'py, PyAny>>,
    stop: Option<&Bound<'py, PyAny>>,
    step: Option<&Bound<'py, PyAny>>,
    dtype: Option<Dtype>,
    stream: Stream<'_, '_>,
) -> PyResult<PyArray> {
    let mut nums: Vec<Bound<'py, PyAny>> = args.iter().collect();
    let mut dtype = dtype.map(|d| d.0);
    if let Some(Ok(d)) = nums.last().map(|l| l.extract::<Dtype>()) {
        if dtype.is_some() {
            return Err(raise!(Type, "arange", "dtype given twice."));
        }
        dtype = Some(d.0);
        nums.pop();
    }
    let given = |o: Option<&Bound<'py, PyAny>>| o.filter(|v| !v.is_none()).cloned();
    let (start, stop, step) = match (nums.as_slice(), given(start), given(stop), given(step)) {
        ([], start, Some(stop), step) => (start, stop, step),
        ([stop], None, None, step) => (None, stop.clone(), step),
        ([start], None, Some(stop), step) => (Some(start.clone()), stop, step),
        ([start, stop], None, None, step) => (Some(start.clone()), stop.clone(), step),
        ([start, stop, step], None, None, None) => {
            (Some(start.clone()), stop.clone(), Some(step.clone()))
        }
        _ => {
            return Err(raise!(
                Type,
                "arange",
                "Expected arange(stop), arange(start, stop) or arange(start, stop, step)."
            ))
        }
    };
    let start = start.as_ref().map(arange_number).transpose()?.unwrap_or(Scalar::Int(0));
    let stop = arange_number(&stop)?;
    let step = step.as_ref().map(arange_number).transpose()?.unwrap_or(Scalar::Int(1));
    let any_float = [start, stop, step].iter().any(|s| matches!(s, Scalar::Float(_)));
    let dtype = dtype.unwrap_or(if any_float { DType::F32 } else { DType::I32 });
    with_stream(stream, || kops::arange(start.as_f64(), stop.as_f64(), step.as_f64(), dtype))
        .map(PyArray)
}

/// Collects the arrays of a pytree (lists, tuples, dict values, nested); other leaves are
/// ignored, as MLX does.
fn collect_arrays(obj: &Bound<'_, PyAny>, out: &mut Vec<Array>) -> PyResult<()> {
    if let Ok(a) = obj.cast::<PyArray>() {
        out.push(a.borrow().0.clone());
    } else if let Ok(list) = obj.cast::<PyList>() {
        for item in list.iter() {
            collect_arrays(&item, out)?;
        }
    } else if let Ok(tuple) = obj.cast::<PyTuple>() {
        for item in tuple.iter() {
            collect_arrays(&item, out)?;
        }
    } else if let Ok(dict) = obj.cast::<PyDict>() {
        for value in dict.values().iter() {
            collect_arrays(&value, out)?;
        }
    }
    Ok(())
}

/// Evaluates every array in the arguments (pytrees of arrays), with the GIL released.
#[pyfunction]
#[pyo3(signature = (*args))]
fn eval(py: Python<'_>, args: &Bound<'_, PyTuple>) -> PyResult<()> {
    let mut arrays = Vec::new();
    collect_arrays(args.as_any(), &mut arrays)?;
    // Values already there and none in flight on a GPU: nothing to run or to interrupt.
    let cpu = kiln_base::DeviceKind::Cpu;
    if arrays.iter().all(|a| a.is_evaluated() && a.stream().device.kind == cpu) {
        return Ok(());
    }
    crate::interrupt::detached(py, || kiln::eval(&arrays)).or_raise()
}

/// Evaluates like `eval` but returns without waiting for GPU work (and, with kiln's issuing
/// thread on, before the work is issued: see kiln-core's background.rs).
#[pyfunction]
#[pyo3(signature = (*args))]
fn async_eval(py: Python<'_>, args: &Bound<'_, PyTuple>) -> PyResult<()> {
    let mut arrays = Vec::new();
    collect_arrays(args.as_any(), &mut arrays)?;
    crate::interrupt::detached(py, || kiln::background::async_eval(&arrays)).or_raise()
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    macro_rules! add {
        ($($f:ident),* $(,)?) => {$( m.add_function(wrap_pyfunction!($f, m)?)?; )*};
    }
    add!(where_, astype, async_eval);
    add!(sum, prod, max, min, mean, argmax, argmin);
    add!(reshape, transpose, broadcast_to, expand_dims, squeeze, concatenate, matmul);
    add!(zeros, ones, full, arange, eval);
    Ok(())
}
