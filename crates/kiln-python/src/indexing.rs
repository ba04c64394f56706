//! Shape and indexing functions of `kiln.core` (`flatten`, `stack`, `split`, `pad`, `take`,
//! `put_along_axis`, `slice_update`, `view`, ...), the parsing of index expressions behind
//! `array.__getitem__`/`__setitem__`, and the `array.at[...]` helper (`ArrayAt`).

use crate::array::PyArray;
use crate::convert::{self, py_scalar, to_array};
use crate::device::with_stream;
use crate::dtype::Dtype;
use crate::error::{raise, OrRaise};
use kiln::ops::{self as kops, IndexItem, PadMode, SplitSpec};
use kiln::Array;
use kiln_base::{DType, Scalar, ScatterReduce};
use pyo3::exceptions::PyOverflowError;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyInt, PyList, PySlice, PyTuple};

type Stream<'a, 'py> = Option<&'a Bound<'py, PyAny>>;

fn arr(obj: &Bound<'_, PyAny>) -> PyResult<Array> {
    to_array(obj, None)
}

/// An int or a sequence of ints.
fn ints(obj: &Bound<'_, PyAny>) -> PyResult<Vec<i64>> {
    if obj.is_instance_of::<PyInt>() {
        Ok(vec![obj.extract()?])
    } else {
        obj.extract()
    }
}

// ---- index expressions ----------------------------------------------------------------

/// An integer index that may exceed i64: clamped (it is out of bounds either way, or a
/// slice bound past the end).
fn saturating_index(obj: &Bound<'_, PyAny>) -> PyResult<i64> {
    match obj.extract::<i64>() {
        Ok(v) => Ok(v),
        Err(e) if e.is_instance_of::<PyOverflowError>(obj.py()) => {
            Ok(if obj.lt(0)? { i64::MIN } else { i64::MAX })
        }
        Err(e) => Err(e),
    }
}

fn optional_index(obj: Bound<'_, PyAny>) -> PyResult<Option<i64>> {
    if obj.is_none() {
        Ok(None)
    } else {
        saturating_index(&obj).map(Some)
    }
}

/// One entry of an index expression: None, `...`, a slice, an int, or an array (kiln or
/// numpy array, or a list, as an integer or bool array).
fn index_item(obj: &Bound<'_, PyAny>) -> PyResult<IndexItem> {
    let py = obj.py();
    if obj.is_none() {
        return Ok(IndexItem::NewAxis);
    }
    if obj.is(py.Ellipsis().bind(py)) {
        return Ok(IndexItem::Ellipsis);
    }
    if let Ok(s) = obj.cast::<PySlice>() {
        let start = optional_index(s.getattr("start")?)?;
        let stop = optional_index(s.getattr("stop")?)?;
        let step = optional_index(s.getattr("step")?)?;
        return Ok(IndexItem::Slice(start, stop, step));
    }
    let is_array = obj.cast::<PyArray>().is_ok()
        || obj.cast::<PyList>().is_ok()
        || obj.cast::<PyTuple>().is_ok()
        || obj.cast::<numpy::PyUntypedArray>().is_ok();
    if is_array {
        return Ok(IndexItem::Array(to_array(obj, None)?));
    }
    // Python's bool is an int, but MLX does not index with it.
    if obj.cast::<PyBool>().is_err()
        && (obj.is_instance_of::<PyInt>() || obj.hasattr("__index__")?)
    {
        return saturating_index(obj).map(IndexItem::Int);
    }
    Err(raise!(
        Value,
        "__getitem__",
        "Cannot index kiln array using the given type {}.",
        convert::type_name(obj)
    ))
}

/// A whole index expression (a tuple is several items).
pub fn index_items(key: &Bound<'_, PyAny>) -> PyResult<Vec<IndexItem>> {
    match key.cast::<PyTuple>() {
        Ok(t) => t.iter().map(|e| index_item(&e)).collect(),
        Err(_) => Ok(vec![index_item(key)?]),
    }
}

/// A value to write into `like`: Python numbers are weak (they take its dtype, and must
/// fit, as MLX checks); anything `array(...)` accepts otherwise.
fn update_value(value: &Bound<'_, PyAny>, like: &Array) -> PyResult<Array> {
    if value.cast::<PyArray>().is_err() {
        if let Some(s) = py_scalar(value)? {
            return kops::weak_scalar(s, like).or_raise();
        }
    }
    arr(value)
}

/// `x[key]`.
pub fn getitem(x: &Array, key: &Bound<'_, PyAny>) -> PyResult<Array> {
    let items = index_items(key)?;
    kops::index(x, &items).or_raise()
}

/// The array `x[key] = value` rebinds to.
pub fn setitem(x: &Array, key: &Bound<'_, PyAny>, value: &Bound<'_, PyAny>) -> PyResult<Array> {
    // As MLX: `a[True] = v` assigns everywhere, `a[False] = v` nowhere (reading `a[True]`
    // stays an error).
    if let Ok(flag) = key.cast::<pyo3::types::PyBool>() {
        if !flag.is_true() {
            return Ok(x.clone());
        }
        let value = update_value(value, x)?;
        return kops::index_update(x, &[IndexItem::Ellipsis], &value, ScatterReduce::None)
            .or_raise();
    }
    let items = index_items(key)?;
    let value = update_value(value, x)?;
    kops::index_update(x, &items, &value, ScatterReduce::None).or_raise()
}

/// `x.at[idx]`: out-of-place updates at an index, duplicates accumulating (MLX's
/// `ArrayAt`). `x.at[idx].add(v)` is `x` with `v` added at `idx`.
#[pyclass(name = "ArrayAt", module = "kiln.core", frozen)]
pub struct ArrayAt {
    array: Array,
    items: Option<Vec<IndexItem>>,
}

impl ArrayAt {
    pub fn new(array: Array) -> ArrayAt {
        ArrayAt { array, items: None }
    }

    fn apply(
        &self,
        value: &Bound<'_, PyAny>,
        reduce: ScatterReduce,
        prepare: fn(&Array) -> kiln_base::Result<Array>,
    ) -> PyResult<PyArray> {
        let Some(items) = &self.items else {
            return Err(raise!(Value, "at", "Index the array first, as in x.at[idx].add(y)."));
        };
        let x = &self.array;
        let value = update_value(value, x)?;
        let value = kops::astype(&value, x.dtype()).and_then(|v| prepare(&v)).or_raise()?;
        kops::index_update(x, items, &value, reduce).map(PyArray).or_raise()
    }
}

fn keep(v: &Array) -> kiln_base::Result<Array> {
    Ok(v.clone())
}

/// `1 / v` (float math, cast back by the update: MLX divides by multiplying).
fn reciprocal(v: &Array) -> kiln_base::Result<Array> {
    let one = kops::weak_scalar(Scalar::Int(1), v)?;
    kops::divide(&one, v)
}

#[pymethods]
impl ArrayAt {
    fn __getitem__(&self, key: &Bound<'_, PyAny>) -> PyResult<ArrayAt> {
        Ok(ArrayAt { array: self.array.clone(), items: Some(index_items(key)?) })
    }

    /// `x` with `value` added at the index (duplicates add up).
    fn add(&self, value: &Bound<'_, PyAny>) -> PyResult<PyArray> {
        self.apply(value, ScatterReduce::Add, keep)
    }

    /// `x` with `value` subtracted at the index.
    fn subtract(&self, value: &Bound<'_, PyAny>) -> PyResult<PyArray> {
        self.apply(value, ScatterReduce::Add, kops::negative)
    }

    /// `x` multiplied by `value` at the index.
    fn multiply(&self, value: &Bound<'_, PyAny>) -> PyResult<PyArray> {
        self.apply(value, ScatterReduce::Prod, keep)
    }

    /// `x` divided by `value` at the index (a multiply by the reciprocal, as MLX).
    fn divide(&self, value: &Bound<'_, PyAny>) -> PyResult<PyArray> {
        self.apply(value, ScatterReduce::Prod, reciprocal)
    }

    /// The elementwise maximum of `x` and `value` at the index.
    fn maximum(&self, value: &Bound<'_, PyAny>) -> PyResult<PyArray> {
        self.apply(value, ScatterReduce::Max, keep)
    }

    /// The elementwise minimum of `x` and `value` at the index.
    fn minimum(&self, value: &Bound<'_, PyAny>) -> PyResult<PyArray> {
        self.apply(value, ScatterReduce::Min, keep)
    }
}

// ---- shape functions ------------------------------------------------------------------

/// Flattens axes `start_axis..=end_axis` into one.
#[pyfunction]
#[pyo3(signature = (a, /, start_axis = 0, end_axis = -1, *, stream = None))]
pub fn flatten(
    a: &Bound<'_, PyAny>,
    start_axis: i64,
    end_axis: i64,
    stream: Stream<'_, '_>,
) -> PyResult<PyArray> {
    let a = arr(a)?;
    with_stream(stream, || kops::flatten(&a, start_axis, end_axis)).map(PyArray)
}

/// Splits `axis` into `shape` (one entry may be -1).
#[pyfunction]
#[pyo3(signature = (a, /, axis, shape, *, stream = None))]
fn unflatten(
    a: &Bound<'_, PyAny>,
    axis: i64,
    shape: Vec<i64>,
    stream: Stream<'_, '_>,
) -> PyResult<PyArray> {
    let a = arr(a)?;
    with_stream(stream, || kops::unflatten(&a, axis, &shape)).map(PyArray)
}

/// Exchanges two axes.
#[pyfunction]
#[pyo3(signature = (a, /, axis1, axis2, *, stream = None))]
pub fn swapaxes(
    a: &Bound<'_, PyAny>,
    axis1: i64,
    axis2: i64,
    stream: Stream<'_, '_>,
) -> PyResult<PyArray> {
    let a = arr(a)?;
    with_stream(stream, || kops::swapaxes(&a, axis1, axis2)).map(PyArray)
}

/// Moves axis `source` to `destination`.
#[pyfunction]
#[pyo3(signature = (a, /, source, destination, *, stream = None))]
pub fn moveaxis(
    a: &Bound<'_, PyAny>,
    source: i64,
    destination: i64,
    stream: Stream<'_, '_>,
) -> PyResult<PyArray> {
    let a = arr(a)?;
    with_stream(stream, || kops::moveaxis(&a, source, destination)).map(PyArray)
}

/// Broadcasts arrays against one another.
#[pyfunction]
#[pyo3(signature = (*arrays, stream = None))]
fn broadcast_arrays(arrays: &Bound<'_, PyTuple>, stream: Stream<'_, '_>) -> PyResult<Vec<PyArray>> {
    let arrays = arrays.iter().map(|a| arr(&a)).collect::<PyResult<Vec<_>>>()?;
    let out = with_stream(stream, || kops::broadcast_arrays(&arrays))?;
    Ok(out.into_iter().map(PyArray).collect())
}

/// Joins arrays along a new axis (None: flattened first).
#[pyfunction]
#[pyo3(signature = (arrays, axis = Some(0), *, stream = None))]
fn stack(
    arrays: &Bound<'_, PyAny>,
    axis: Option<i64>,
    stream: Stream<'_, '_>,
) -> PyResult<PyArray> {
    let arrays = arrays.try_iter()?.map(|a| arr(&a?)).collect::<PyResult<Vec<_>>>()?;
    with_stream(stream, || match axis {
        Some(axis) => kops::stack(&arrays, axis),
        None => {
            let flat =
                arrays.iter().map(|a| kops::reshape(a, &[-1])).collect::<Result<Vec<_>, _>>()?;
            kops::stack(&flat, 0)
        }
    })
    .map(PyArray)
}

/// Splits into equal sections (an int) or at indices (a sequence).
pub fn split_impl(
    a: &Array,
    indices_or_sections: &Bound<'_, PyAny>,
    axis: i64,
    stream: Stream<'_, '_>,
) -> PyResult<Vec<PyArray>> {
    let spec = if indices_or_sections.is_instance_of::<PyInt>() {
        SplitSpec::Sections(indices_or_sections.extract()?)
    } else if let Ok(x) = indices_or_sections.cast::<PyArray>() {
        let x = x.borrow().0.clone();
        SplitSpec::Indices(kops::astype(&x, DType::I64).and_then(|y| y.to_vec::<i64>()).or_raise()?)
    } else {
        SplitSpec::Indices(indices_or_sections.extract()?)
    };
    let parts = with_stream(stream, || kops::split(a, &spec, axis))?;
    Ok(parts.into_iter().map(PyArray).collect())
}

/// Splits an array into equal sections (an int) or at the given indices along `axis`.
#[pyfunction]
#[pyo3(signature = (a, /, indices_or_sections, axis = 0, *, stream = None))]
fn split(
    a: &Bound<'_, PyAny>,
    indices_or_sections: &Bound<'_, PyAny>,
    axis: i64,
    stream: Stream<'_, '_>,
) -> PyResult<Vec<PyArray>> {
    split_impl(&arr(a)?, indices_or_sections, axis, stream)
}

/// `pad_width` as MLX takes it: an int, `(n,)`, `(before, after)`, or one pair per axis.
fn pad_widths(obj: &Bound<'_, PyAny>) -> PyResult<Vec<(i64, i64)>> {
    let bad = || raise!(Type, "pad", "pad_width must be an int, a pair or a list of pairs.");
    if obj.is_instance_of::<PyInt>() {
        let n: i64 = obj.extract()?;
        return Ok(vec![(n, n)]);
    }
    let items: Vec<Bound<'_, PyAny>> =
        obj.try_iter().map_err(|_| bad())?.collect::<PyResult<_>>()?;
    if items.iter().all(|i| i.is_instance_of::<PyInt>()) {
        let v: Vec<i64> = items.iter().map(|i| i.extract()).collect::<PyResult<_>>()?;
        return match v.as_slice() {
            [] => Ok(vec![]),
            [n] => Ok(vec![(*n, *n)]),
            [a, b] => Ok(vec![(*a, *b)]),
            _ => Err(bad()),
        };
    }
    items
        .iter()
        .map(|p| match p.extract::<Vec<i64>>().map_err(|_| bad())?.as_slice() {
            [a, b] => Ok((*a, *b)),
            [n] => Ok((*n, *n)),
            _ => Err(bad()),
        })
        .collect()
}

/// Pads with a constant, the edge values, or a reflection.
#[pyfunction]
#[pyo3(signature = (a, pad_width, mode = "constant", constant_values = None, *, stream = None))]
fn pad(
    a: &Bound<'_, PyAny>,
    pad_width: &Bound<'_, PyAny>,
    mode: &str,
    constant_values: Option<&Bound<'_, PyAny>>,
    stream: Stream<'_, '_>,
) -> PyResult<PyArray> {
    let a = arr(a)?;
    let widths = pad_widths(pad_width)?;
    let mode = PadMode::from_name(mode).or_raise()?;
    let value = match constant_values {
        None => kops::scalar(Scalar::Int(0), a.dtype()).or_raise()?,
        Some(v) => update_value(v, &a)?,
    };
    if widths.is_empty() && a.ndim() == 0 {
        return Ok(PyArray(a));
    }
    with_stream(stream, || kops::pad(&a, &widths, mode, &value)).map(PyArray)
}

/// Repeats each element `repeats` times along `axis` (flattened when None).
#[pyfunction]
#[pyo3(signature = (array, repeats, axis = None, *, stream = None))]
fn repeat(
    array: &Bound<'_, PyAny>,
    repeats: i64,
    axis: Option<i64>,
    stream: Stream<'_, '_>,
) -> PyResult<PyArray> {
    let a = arr(array)?;
    with_stream(stream, || kops::repeat(&a, repeats, axis)).map(PyArray)
}

/// Repeats the whole array `reps` times along each axis.
#[pyfunction]
#[pyo3(signature = (a, reps, /, *, stream = None))]
fn tile(
    a: &Bound<'_, PyAny>,
    reps: &Bound<'_, PyAny>,
    stream: Stream<'_, '_>,
) -> PyResult<PyArray> {
    let (a, reps) = (arr(a)?, ints(reps)?);
    with_stream(stream, || kops::tile(&a, &reps)).map(PyArray)
}

/// Rolls elements along axes (the flattened array when `axis` is None).
#[pyfunction]
#[pyo3(signature = (a, shift, axis = None, /, *, stream = None))]
fn roll(
    a: &Bound<'_, PyAny>,
    shift: &Bound<'_, PyAny>,
    axis: Option<&Bound<'_, PyAny>>,
    stream: Stream<'_, '_>,
) -> PyResult<PyArray> {
    let a = arr(a)?;
    let shifts = ints(shift)?;
    let axes = match axis {
        Some(ax) if !ax.is_none() => Some(ints(ax)?),
        _ => None,
    };
    if let Some(axes) = &axes {
        // A shift sequence needs one entry per axis (an int applies to all).
        let multi =
            !shift.is_instance_of::<PyInt>() && !axis.is_some_and(|x| x.is_instance_of::<PyInt>());
        if multi && shifts.len() < axes.len() {
            return Err(raise!(
                Value,
                "roll",
                "At least one shift value per axis is required, {} provided for {} axes.",
                shifts.len(),
                axes.len()
            ));
        }
    }
    with_stream(stream, || kops::roll(&a, &shifts, axes.as_deref())).map(PyArray)
}

// ---- indexing functions ---------------------------------------------------------------

/// An index argument: an int (a 0-d int32 array) or an integer array.
fn index_arg(obj: &Bound<'_, PyAny>) -> PyResult<Array> {
    arr(obj)
}

/// Elements at `indices` along `axis` (of the flattened array when None).
#[pyfunction]
#[pyo3(signature = (a, /, indices, axis = None, *, stream = None))]
fn take(
    a: &Bound<'_, PyAny>,
    indices: &Bound<'_, PyAny>,
    axis: Option<i64>,
    stream: Stream<'_, '_>,
) -> PyResult<PyArray> {
    let (a, indices) = (arr(a)?, index_arg(indices)?);
    with_stream(stream, || kops::take(&a, &indices, axis)).map(PyArray)
}

/// Values at `indices` along `axis` (numpy's take_along_axis).
#[pyfunction]
#[pyo3(signature = (a, /, indices, axis = Some(-1), *, stream = None))]
fn take_along_axis(
    a: &Bound<'_, PyAny>,
    indices: &Bound<'_, PyAny>,
    axis: Option<i64>,
    stream: Stream<'_, '_>,
) -> PyResult<PyArray> {
    let (a, indices) = (arr(a)?, index_arg(indices)?);
    with_stream(stream, || kops::take_along_axis(&a, &indices, axis)).map(PyArray)
}

/// `a` with `values` put at `indices` along `axis`.
#[pyfunction]
#[pyo3(signature = (a, /, indices, values, axis = None, *, stream = None))]
fn put_along_axis(
    a: &Bound<'_, PyAny>,
    indices: &Bound<'_, PyAny>,
    values: &Bound<'_, PyAny>,
    axis: Option<i64>,
    stream: Stream<'_, '_>,
) -> PyResult<PyArray> {
    let (a, indices) = (arr(a)?, index_arg(indices)?);
    let values = update_value(values, &a)?;
    with_stream(stream, || kops::put_along_axis(&a, &indices, &values, axis)).map(PyArray)
}

/// The block of `slice_size` starting at `start_indices` on `axes` (MLX's `mx.slice`).
#[pyfunction(name = "slice")]
#[pyo3(signature = (a, start_indices, axes, slice_size, *, stream = None))]
fn slice_(
    a: &Bound<'_, PyAny>,
    start_indices: &Bound<'_, PyAny>,
    axes: Vec<i64>,
    slice_size: Vec<i64>,
    stream: Stream<'_, '_>,
) -> PyResult<PyArray> {
    let (a, start) = (arr(a)?, index_arg(start_indices)?);
    with_stream(stream, || kops::slice_dynamic(&a, &start, &axes, &slice_size)).map(PyArray)
}

/// `a` with the block at `start_indices` on `axes` replaced by `update`.
#[pyfunction]
#[pyo3(signature = (a, update, start_indices, axes, *, stream = None))]
fn slice_update(
    a: &Bound<'_, PyAny>,
    update: &Bound<'_, PyAny>,
    start_indices: &Bound<'_, PyAny>,
    axes: Vec<i64>,
    stream: Stream<'_, '_>,
) -> PyResult<PyArray> {
    let (a, start) = (arr(a)?, index_arg(start_indices)?);
    let update = update_value(update, &a)?;
    with_stream(stream, || kops::slice_update_dynamic(&a, &update, &start, &axes)).map(PyArray)
}

/// The bytes of `a` as another dtype (the last axis rescales).
#[pyfunction]
#[pyo3(signature = (a, dtype, stream = None))]
pub fn view(a: &Bound<'_, PyAny>, dtype: Dtype, stream: Stream<'_, '_>) -> PyResult<PyArray> {
    let a = arr(a)?;
    with_stream(stream, || kops::view(&a, dtype.0)).map(PyArray)
}

/// A strided view of the row-major elements of `a`.
#[pyfunction]
#[pyo3(signature = (a, /, shape = None, strides = None, offset = 0, *, stream = None))]
fn as_strided(
    a: &Bound<'_, PyAny>,
    shape: Option<Vec<i64>>,
    strides: Option<Vec<i64>>,
    offset: i64,
    stream: Stream<'_, '_>,
) -> PyResult<PyArray> {
    let a = arr(a)?;
    let shape = match shape {
        None => None,
        Some(s) => {
            if s.iter().any(|&d| d < 0) {
                return Err(raise!(Value, "as_strided", "Negative dimensions not allowed."));
            }
            Some(s.into_iter().map(|d| d as usize).collect::<Vec<_>>())
        }
    };
    with_stream(stream, || kops::as_strided(&a, shape.as_deref(), strides.as_deref(), offset))
        .map(PyArray)
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    macro_rules! add {
        ($($f:ident),* $(,)?) => {$( m.add_function(wrap_pyfunction!($f, m)?)?; )*};
    }
    m.add_class::<ArrayAt>()?;
    add!(flatten, unflatten, swapaxes, moveaxis, broadcast_arrays, stack, split, pad);
    add!(repeat, tile, roll, take, take_along_axis, put_along_axis, slice_, slice_update);
    add!(view, as_strided);
    Ok(())
}
