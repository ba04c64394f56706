//! The `kiln.core.random` submodule: threefry keys and samplers with MLX's signatures, so
//! a key gives the same numbers as in MLX.

use crate::array::PyArray;
use crate::convert::{py_scalar, to_array};
use crate::device::with_stream;
use crate::dtype::Dtype;
use crate::error::{raise, OrRaise};
use kiln::ops::{self as kops, random};
use kiln::Array;
use kiln_base::shape::{broadcast_shapes, fmt_shape};
use kiln_base::DType;
use pyo3::prelude::*;

type Stream<'a, 'py> = Option<&'a Bound<'py, PyAny>>;

/// A seed: any Python int, taken modulo 2**64 (negative seeds wrap, as in C++).
fn seed_arg(seed: &Bound<'_, PyAny>) -> PyResult<u64> {
    if let Ok(u) = seed.extract::<u64>() {
        return Ok(u);
    }
    seed.extract::<i64>().map(|i| i as u64)
}

/// `shape=`: an int or a sequence of sizes.
fn shape_arg(shape: &Bound<'_, PyAny>) -> PyResult<Vec<usize>> {
    crate::ops::shape_arg("random", shape)
}

fn key_arg(key: Option<&Bound<'_, PyArray>>) -> Option<Array> {
    key.map(|k| k.borrow().0.clone())
}

/// A PRNG key (`(2,)` uint32) from a seed.
#[pyfunction]
fn key(seed: &Bound<'_, PyAny>) -> PyResult<PyArray> {
    random::key(seed_arg(seed)?).map(PyArray).or_raise()
}

/// Seeds the global random state.
#[pyfunction]
fn seed(seed: &Bound<'_, PyAny>) -> PyResult<()> {
    random::seed(seed_arg(seed)?);
    Ok(())
}

/// This thread's current state key (what `mx.random.state[0]` reads).
#[pyfunction]
fn _get_state_key() -> PyResult<PyArray> {
    random::current_key().map(PyArray).or_raise()
}

/// Replaces this thread's state key (what `mx.random.state[0] = key` writes).
#[pyfunction]
fn _set_state_key(key: &Bound<'_, PyArray>) -> PyResult<()> {
    random::set_current_key(&key.borrow().0).or_raise()
}

/// `num` new keys from `key`, shape `(num, 2)`.
#[pyfunction]
#[pyo3(signature = (key, num = 2, stream = None))]
fn split(key: &Bound<'_, PyArray>, num: usize, stream: Stream<'_, '_>) -> PyResult<PyArray> {
    let key = key.borrow().0.clone();
    with_stream(stream, || random::split(&key, num)).map(PyArray)
}

/// Raw random bits: `shape` elements of `width` bytes (1, 2, 4 or 8).
#[pyfunction]
#[pyo3(signature = (shape = None, width = 4, key = None, stream = None))]
fn bits(
    shape: Option<&Bound<'_, PyAny>>,
    width: u8,
    key: Option<&Bound<'_, PyArray>>,
    stream: Stream<'_, '_>,
) -> PyResult<PyArray> {
    let shape = shape.map(shape_arg).transpose()?.unwrap_or_default();
    let key = key_arg(key);
    with_stream(stream, || random::bits(&shape, width, key.as_ref())).map(PyArray)
}

/// A sampler parameter: a Python number, or an array (converted to `dtype`).
enum Param {
    Number(f64),
    Array(Array),
}

fn param(obj: &Bound<'_, PyAny>, dtype: DType) -> PyResult<Param> {
    if obj.cast::<PyArray>().is_err() {
        if let Some(s) = py_scalar(obj)? {
            return Ok(Param::Number(s.as_f64()));
        }
    }
    let array = to_array(obj, None)?;
    kops::astype(&array, dtype).map(Param::Array).or_raise()
}

/// Array parameters must broadcast to `shape` (MLX's check: the samples' shape wins).
fn check_broadcast(op: &'static str, shape: &[usize], params: &[&Param]) -> PyResult<()> {
    let mut out = shape.to_vec();
    for p in params {
        if let Param::Array(a) = p {
            out = broadcast_shapes(op, &out, a.shape()).or_raise()?.to_vec();
        }
    }
    if out != shape {
        return Err(raise!(
            Value,
            op,
            "Cannot generate random values of shape {} from broadcasted shape {}.",
            fmt_shape(shape),
            fmt_shape(&out)
        ));
    }
    Ok(())
}

fn as_array(p: &Param, dtype: DType) -> kiln_base::Result<Array> {
    match p {
        Param::Number(v) => kops::scalar(kiln_base::Scalar::Float(*v), dtype),
        Param::Array(a) => Ok(a.clone()),
    }
}

/// Uniform samples in `[low, high)`.
#[pyfunction]
#[pyo3(signature = (low = None, high = None, shape = None, dtype = None, key = None, stream = None))]
fn uniform(
    low: Option<&Bound<'_, PyAny>>,
    high: Option<&Bound<'_, PyAny>>,
    shape: Option<&Bound<'_, PyAny>>,
    dtype: Option<Dtype>,
    key: Option<&Bound<'_, PyArray>>,
    stream: Stream<'_, '_>,
) -> PyResult<PyArray> {
    let dtype = dtype.map_or(DType::F32, |d| d.0);
    let shape = shape.map(shape_arg).transpose()?.unwrap_or_default();
    let low = low.map(|l| param(l, dtype)).transpose()?.unwrap_or(Param::Number(0.0));
    let high = high.map(|h| param(h, dtype)).transpose()?.unwrap_or(Param::Number(1.0));
    check_broadcast("uniform", &shape, &[&low, &high])?;
    let key = key_arg(key);
    with_stream(stream, || match (&low, &high) {
        (Param::Number(lo), Param::Number(hi)) => {
            random::uniform(*lo, *hi, &shape, dtype, key.as_ref())
        }
        _ => {
            // The same arithmetic as kiln-core's scalar path: (high - low) * u + low.
            let unit = random::uniform(0.0, 1.0, &shape, dtype, key.as_ref())?;
            let (lo, hi) = (as_array(&low, dtype)?, as_array(&high, dtype)?);
            kops::add(&kops::multiply(&kops::subtract(&hi, &lo)?, &unit)?, &lo)
        }
    })
    .map(PyArray)
}

/// Normal samples with mean `loc` and standard deviation `scale`.
#[pyfunction]
#[pyo3(signature = (shape = None, dtype = None, loc = None, scale = None, key = None, stream = None))]
fn normal(
    shape: Option<&Bound<'_, PyAny>>,
    dtype: Option<Dtype>,
    loc: Option<&Bound<'_, PyAny>>,
    scale: Option<&Bound<'_, PyAny>>,
    key: Option<&Bound<'_, PyArray>>,
    stream: Stream<'_, '_>,
) -> PyResult<PyArray> {
    let dtype = dtype.map_or(DType::F32, |d| d.0);
    let shape = shape.map(shape_arg).transpose()?.unwrap_or_default();
    let loc = loc.filter(|l| !l.is_none()).map(|l| param(l, dtype)).transpose()?;
    let scale = scale.filter(|s| !s.is_none()).map(|s| param(s, dtype)).transpose()?;
    let params: Vec<&Param> = loc.iter().chain(scale.iter()).collect();
    check_broadcast("normal", &shape, &params)?;
    let key = key_arg(key);
    with_stream(stream, || match (&loc, &scale) {
        (None | Some(Param::Number(_)), None | Some(Param::Number(_))) => {
            let number = |p: &Option<Param>, default: f64| match p {
                Some(Param::Number(v)) => *v,
                _ => default,
            };
            random::normal(&shape, dtype, number(&loc, 0.0), number(&scale, 1.0), key.as_ref())
        }
        _ => {
            let loc = loc.as_ref().map(|l| as_array(l, dtype)).transpose()?;
            let scale = scale.as_ref().map(|s| as_array(s, dtype)).transpose()?;
            random::normal_with(&shape, dtype, loc.as_ref(), scale.as_ref(), key.as_ref())
        }
    })
    .map(PyArray)
}

/// A distribution parameter as an array of `dtype` (Python numbers become 0-d arrays).
fn param_array(obj: Option<&Bound<'_, PyAny>>, default: f64, dtype: DType) -> PyResult<Array> {
    let p = obj.map(|o| param(o, dtype)).transpose()?.unwrap_or(Param::Number(default));
    as_array(&p, dtype).or_raise()
}

/// The shape argument, or the broadcast shape of the parameters when it is None.
fn shape_or(
    shape: Option<&Bound<'_, PyAny>>,
    op: &'static str,
    params: &[&Array],
) -> PyResult<Vec<usize>> {
    if let Some(s) = shape.filter(|s| !s.is_none()) {
        return shape_arg(s);
    }
    let mut out: Vec<usize> = vec![];
    for p in params {
        out = kiln_base::shape::broadcast_shapes(op, &out, p.shape()).or_raise()?.to_vec();
    }
    Ok(out)
}

/// Random integers from `[low, high)`.
#[pyfunction]
#[pyo3(signature = (low, high, shape = None, dtype = None, key = None, stream = None))]
fn randint(
    low: &Bound<'_, PyAny>,
    high: &Bound<'_, PyAny>,
    shape: Option<&Bound<'_, PyAny>>,
    dtype: Option<Dtype>,
    key: Option<&Bound<'_, PyArray>>,
    stream: Stream<'_, '_>,
) -> PyResult<PyArray> {
    let dtype = dtype.map_or(DType::I32, |d| d.0);
    let (lo, hi) =
        (param_array(Some(low), 0.0, DType::F32)?, param_array(Some(high), 1.0, DType::F32)?);
    let shape = shape.map(shape_arg).transpose()?.unwrap_or_default();
    let key = key_arg(key);
    with_stream(stream, || random::randint(&lo, &hi, &shape, dtype, key.as_ref())).map(PyArray)
}

/// Bernoulli samples (bool) with probability `p`.
#[pyfunction]
#[pyo3(signature = (p = None, shape = None, key = None, stream = None))]
fn bernoulli(
    p: Option<&Bound<'_, PyAny>>,
    shape: Option<&Bound<'_, PyAny>>,
    key: Option<&Bound<'_, PyArray>>,
    stream: Stream<'_, '_>,
) -> PyResult<PyArray> {
    let p = param_array(p, 0.5, DType::F32)?;
    let shape = shape_or(shape, "bernoulli", &[&p])?;
    let key = key_arg(key);
    with_stream(stream, || random::bernoulli(&p, &shape, key.as_ref())).map(PyArray)
}

/// Normal samples truncated to `(lower, upper)`.
#[pyfunction]
#[pyo3(signature = (lower, upper, shape = None, dtype = None, key = None, stream = None))]
fn truncated_normal(
    lower: &Bound<'_, PyAny>,
    upper: &Bound<'_, PyAny>,
    shape: Option<&Bound<'_, PyAny>>,
    dtype: Option<Dtype>,
    key: Option<&Bound<'_, PyArray>>,
    stream: Stream<'_, '_>,
) -> PyResult<PyArray> {
    let dtype = dtype.map_or(DType::F32, |d| d.0);
    let (lo, hi) = (param_array(Some(lower), 0.0, dtype)?, param_array(Some(upper), 0.0, dtype)?);
    let shape = shape_or(shape, "truncated_normal", &[&lo, &hi])?;
    let key = key_arg(key);
    with_stream(stream, || random::truncated_normal(&lo, &hi, &shape, dtype, key.as_ref()))
        .map(PyArray)
}

/// Standard Gumbel samples.
#[pyfunction]
#[pyo3(signature = (shape = None, dtype = None, key = None, stream = None))]
fn gumbel(
    shape: Option<&Bound<'_, PyAny>>,
    dtype: Option<Dtype>,
    key: Option<&Bound<'_, PyArray>>,
    stream: Stream<'_, '_>,
) -> PyResult<PyArray> {
    let dtype = dtype.map_or(DType::F32, |d| d.0);
    let shape = shape.map(shape_arg).transpose()?.unwrap_or_default();
    let key = key_arg(key);
    with_stream(stream, || random::gumbel(&shape, dtype, key.as_ref())).map(PyArray)
}

/// Laplace samples with mean `loc` and scale `scale`.
#[pyfunction]
#[pyo3(signature = (shape = None, dtype = None, loc = 0.0, scale = 1.0, key = None, stream = None))]
fn laplace(
    shape: Option<&Bound<'_, PyAny>>,
    dtype: Option<Dtype>,
    loc: f64,
    scale: f64,
    key: Option<&Bound<'_, PyArray>>,
    stream: Stream<'_, '_>,
) -> PyResult<PyArray> {
    let dtype = dtype.map_or(DType::F32, |d| d.0);
    let shape = shape.map(shape_arg).transpose()?.unwrap_or_default();
    let key = key_arg(key);
    with_stream(stream, || random::laplace(&shape, dtype, loc, scale, key.as_ref())).map(PyArray)
}

/// Samples of the categorical distributions given by `logits` along `axis`.
#[pyfunction]
#[pyo3(signature = (logits, axis = -1, shape = None, num_samples = None, key = None, stream = None))]
fn categorical(
    logits: &Bound<'_, PyArray>,
    axis: i64,
    shape: Option<&Bound<'_, PyAny>>,
    num_samples: Option<usize>,
    key: Option<&Bound<'_, PyArray>>,
    stream: Stream<'_, '_>,
) -> PyResult<PyArray> {
    let logits = logits.borrow().0.clone();
    let shape = shape.filter(|s| !s.is_none());
    let draws = match (shape, num_samples) {
        (Some(_), Some(_)) => {
            return Err(raise!(
                Value,
                "categorical",
                "At most one of shape or num_samples can be specified."
            ))
        }
        (Some(s), None) => random::Draws::Shape(shape_arg(s)?),
        (None, Some(n)) => random::Draws::Samples(n),
        (None, None) => random::Draws::One,
    };
    let key = key_arg(key);
    with_stream(stream, || random::categorical(&logits, axis, draws, key.as_ref())).map(PyArray)
}

/// A random permutation of `range(x)` (int) or of `x` along `axis` (array).
#[pyfunction]
#[pyo3(signature = (x, axis = 0, key = None, stream = None))]
fn permutation(
    x: &Bound<'_, PyAny>,
    axis: i64,
    key: Option<&Bound<'_, PyArray>>,
    stream: Stream<'_, '_>,
) -> PyResult<PyArray> {
    let key = key_arg(key);
    if let Ok(n) = x.extract::<usize>() {
        return with_stream(stream, || random::permutation_of(n, key.as_ref())).map(PyArray);
    }
    let x = x.cast::<PyArray>()?.borrow().0.clone();
    with_stream(stream, || random::permutation(&x, axis, key.as_ref())).map(PyArray)
}

pub fn register(parent: &Bound<'_, PyModule>) -> PyResult<()> {
    let m = PyModule::new(parent.py(), "random")?;
    m.add_function(wrap_pyfunction!(key, &m)?)?;
    m.add_function(wrap_pyfunction!(seed, &m)?)?;
    m.add_function(wrap_pyfunction!(split, &m)?)?;
    m.add_function(wrap_pyfunction!(bits, &m)?)?;
    m.add_function(wrap_pyfunction!(uniform, &m)?)?;
    for f in [
        wrap_pyfunction!(randint, &m)?,
        wrap_pyfunction!(bernoulli, &m)?,
        wrap_pyfunction!(truncated_normal, &m)?,
        wrap_pyfunction!(gumbel, &m)?,
        wrap_pyfunction!(laplace, &m)?,
        wrap_pyfunction!(categorical, &m)?,
        wrap_pyfunction!(permutation, &m)?,
    ] {
        m.add_function(f)?;
    }
    m.add_function(wrap_pyfunction!(normal, &m)?)?;
    m.add_function(wrap_pyfunction!(_get_state_key, &m)?)?;
    m.add_function(wrap_pyfunction!(_set_state_key, &m)?)?;
    parent.add_submodule(&m)
}
