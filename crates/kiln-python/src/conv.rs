//! `conv1d`, `conv2d`, `conv3d`, `conv_general` and `conv_transpose1d/2d/3d` with MLX's
//! signatures (channels last).

use crate::array::PyArray;
use crate::convert::to_array;
use crate::device::with_stream;
use crate::error::raise;
use kiln::ops as kops;
use pyo3::prelude::*;
use pyo3::types::PyInt;

type Stream<'a, 'py> = Option<&'a Bound<'py, PyAny>>;

/// One int for every spatial axis, or exactly `n` ints (conv2d/conv3d's tuples).
fn fixed<const N: usize>(op: &'static str, what: &str, v: &Bound<'_, PyAny>) -> PyResult<[i64; N]> {
    if v.is_instance_of::<PyInt>() {
        return Ok([v.extract()?; N]);
    }
    let values: Vec<i64> = v
        .extract()
        .map_err(|_| raise!(Type, op, "{what} must be an int or a tuple of {N} ints."))?;
    values.try_into().map_err(|_| raise!(Type, op, "{what} must be an int or a tuple of {N} ints."))
}

/// An int (repeated for each of `d` spatial axes) or a sequence of ints.
fn per_axis(d: usize, v: &Bound<'_, PyAny>) -> PyResult<Vec<i64>> {
    if v.is_instance_of::<PyInt>() {
        Ok(vec![v.extract()?; d])
    } else {
        v.extract()
    }
}

/// Sizes that must be >= 1, with MLX's message (`what` capitalised, then `plural`).
fn positive(values: &[i64], what: &str, plural: &str) -> PyResult<Vec<usize>> {
    if values.iter().any(|&v| v < 1) {
        let shown: Vec<String> = values.iter().map(|v| v.to_string()).collect();
        return Err(raise!(
            Value,
            "conv",
            "{what} sizes must be positive. Got {plural} ({}).",
            shown.join(",")
        ));
    }
    Ok(values.iter().map(|&v| v as usize).collect())
}

fn groups_arg(groups: i64) -> PyResult<usize> {
    if groups < 1 {
        return Err(raise!(Value, "conv", "Groups must be positive, got {groups}."));
    }
    Ok(groups as usize)
}

/// `padding=` of conv_general: an int, a sequence of ints (symmetric), or a pair of
/// sequences `(low, high)`.
fn padding_arg(d: usize, v: &Bound<'_, PyAny>) -> PyResult<(Vec<i64>, Vec<i64>)> {
    if v.is_instance_of::<PyInt>() {
        let p: i64 = v.extract()?;
        return Ok((vec![p; d], vec![p; d]));
    }
    if let Ok((lo, hi)) = v.extract::<(Vec<i64>, Vec<i64>)>() {
        return Ok((lo, hi));
    }
    let p: Vec<i64> = v.extract().map_err(|_| {
        raise!(Type, "conv", "padding must be an int, a list of ints or a pair of lists.")
    })?;
    Ok((p.clone(), p))
}

#[allow(clippy::too_many_arguments)]
fn run(
    input: &Bound<'_, PyAny>,
    weight: &Bound<'_, PyAny>,
    stride: &[i64],
    lo: &[i64],
    hi: &[i64],
    kernel_dilation: &[i64],
    input_dilation: &[i64],
    groups: i64,
    flip: bool,
    stream: Stream<'_, '_>,
) -> PyResult<PyArray> {
    let (x, w) = (to_array(input, None)?, to_array(weight, None)?);
    let stride = positive(stride, "Stride", "strides")?;
    let kernel_dilation = positive(kernel_dilation, "Kernel dilation", "kernel dilation")?;
    let input_dilation = positive(input_dilation, "Input dilation", "input dilation")?;
    let groups = groups_arg(groups)?;
    with_stream(stream, || {
        kops::conv_general(&x, &w, &stride, lo, hi, &kernel_dilation, &input_dilation, groups, flip)
    })
    .map(PyArray)
}

/// 1-d convolution: input `(N, L, C_in)`, weight `(C_out, K, C_in / groups)`.
#[pyfunction]
#[pyo3(signature = (input, weight, /, stride = 1, padding = 0, dilation = 1, groups = 1, *, stream = None))]
#[allow(clippy::too_many_arguments)]
fn conv1d(
    input: &Bound<'_, PyAny>,
    weight: &Bound<'_, PyAny>,
    stride: i64,
    padding: i64,
    dilation: i64,
    groups: i64,
    stream: Stream<'_, '_>,
) -> PyResult<PyArray> {
    let pad = [padding];
    run(input, weight, &[stride], &pad, &pad, &[dilation], &[1], groups, false, stream)
}

/// 2-d convolution: input `(N, H, W, C_in)`, weight `(C_out, KH, KW, C_in / groups)`.
#[pyfunction]
#[pyo3(signature = (input, weight, /, stride = None, padding = None, dilation = None, groups = 1, *, stream = None))]
#[allow(clippy::too_many_arguments)]
fn conv2d(
    input: &Bound<'_, PyAny>,
    weight: &Bound<'_, PyAny>,
    stride: Option<&Bound<'_, PyAny>>,
    padding: Option<&Bound<'_, PyAny>>,
    dilation: Option<&Bound<'_, PyAny>>,
    groups: i64,
    stream: Stream<'_, '_>,
) -> PyResult<PyArray> {
    let op = "conv2d";
    let arg = |v: Option<&Bound<'_, PyAny>>, what, default| match v {
        Some(v) => fixed::<2>(op, what, v),
        None => Ok([default; 2]),
    };
    let (s, p, d) =
        (arg(stride, "stride", 1)?, arg(padding, "padding", 0)?, arg(dilation, "dilation", 1)?);
    run(input, weight, &s, &p, &p, &d, &[1, 1], groups, false, stream)
}

/// 3-d convolution: input `(N, D, H, W, C_in)`, weight `(C_out, KD, KH, KW, C_in / groups)`.
#[pyfunction]
#[pyo3(signature = (input, weight, /, stride = None, padding = None, dilation = None, groups = 1, *, stream = None))]
#[allow(clippy::too_many_arguments)]
fn conv3d(
    input: &Bound<'_, PyAny>,
    weight: &Bound<'_, PyAny>,
    stride: Option<&Bound<'_, PyAny>>,
    padding: Option<&Bound<'_, PyAny>>,
    dilation: Option<&Bound<'_, PyAny>>,
    groups: i64,
    stream: Stream<'_, '_>,
) -> PyResult<PyArray> {
    let op = "conv3d";
    let arg = |v: Option<&Bound<'_, PyAny>>, what, default| match v {
        Some(v) => fixed::<3>(op, what, v),
        None => Ok([default; 3]),
    };
    let (s, p, d) =
        (arg(stride, "stride", 1)?, arg(padding, "padding", 0)?, arg(dilation, "dilation", 1)?);
    run(input, weight, &s, &p, &p, &d, &[1, 1, 1], groups, false, stream)
}

/// General convolution: per-axis strides, `(low, high)` padding, kernel and input
/// dilation, groups, and `flip` for a true convolution.
#[pyfunction]
#[pyo3(signature = (input, weight, /, stride = None, padding = None, kernel_dilation = None,
    input_dilation = None, groups = 1, flip = false, *, stream = None))]
#[allow(clippy::too_many_arguments)]
fn conv_general(
    input: &Bound<'_, PyAny>,
    weight: &Bound<'_, PyAny>,
    stride: Option<&Bound<'_, PyAny>>,
    padding: Option<&Bound<'_, PyAny>>,
    kernel_dilation: Option<&Bound<'_, PyAny>>,
    input_dilation: Option<&Bound<'_, PyAny>>,
    groups: i64,
    flip: bool,
    stream: Stream<'_, '_>,
) -> PyResult<PyArray> {
    let d = to_array(input, None)?.ndim().saturating_sub(2);
    let arg = |v: Option<&Bound<'_, PyAny>>, default: i64| match v {
        Some(v) => per_axis(d, v),
        None => Ok(vec![default; d]),
    };
    let (lo, hi) = match padding {
        Some(p) => padding_arg(d, p)?,
        None => (vec![0; d], vec![0; d]),
    };
    let (s, kd, id) = (arg(stride, 1)?, arg(kernel_dilation, 1)?, arg(input_dilation, 1)?);
    run(input, weight, &s, &lo, &hi, &kd, &id, groups, flip, stream)
}

/// Validated arguments of a transposed convolution.
struct Transposed {
    stride: Vec<usize>,
    dilation: Vec<usize>,
    groups: usize,
}

fn transposed(stride: &[i64], dilation: &[i64], groups: i64) -> PyResult<Transposed> {
    Ok(Transposed {
        stride: positive(stride, "Stride", "strides")?,
        dilation: positive(dilation, "Kernel dilation", "kernel dilation")?,
        groups: groups_arg(groups)?,
    })
}

/// 1-d transposed convolution: input `(N, L, C_in)`, weight `(C_out, K, C_in / groups)`.
#[pyfunction]
#[pyo3(signature = (input, weight, /, stride = 1, padding = 0, dilation = 1, output_padding = 0,
    groups = 1, *, stream = None))]
#[allow(clippy::too_many_arguments)]
fn conv_transpose1d(
    input: &Bound<'_, PyAny>,
    weight: &Bound<'_, PyAny>,
    stride: i64,
    padding: i64,
    dilation: i64,
    output_padding: i64,
    groups: i64,
    stream: Stream<'_, '_>,
) -> PyResult<PyArray> {
    let (x, w) = (to_array(input, None)?, to_array(weight, None)?);
    let t = transposed(&[stride], &[dilation], groups)?;
    with_stream(stream, || {
        kops::conv_transpose1d(
            &x,
            &w,
            t.stride[0],
            padding,
            t.dilation[0],
            output_padding,
            t.groups,
        )
    })
    .map(PyArray)
}

macro_rules! conv_transpose_nd {
    ($name:ident, $n:literal, $doc:literal) => {
        #[doc = $doc]
        #[pyfunction]
        #[pyo3(signature = (input, weight, /, stride = None, padding = None, dilation = None,
                                            output_padding = None, groups = 1, *, stream = None))]
        #[allow(clippy::too_many_arguments)]
        fn $name(
            input: &Bound<'_, PyAny>,
            weight: &Bound<'_, PyAny>,
            stride: Option<&Bound<'_, PyAny>>,
            padding: Option<&Bound<'_, PyAny>>,
            dilation: Option<&Bound<'_, PyAny>>,
            output_padding: Option<&Bound<'_, PyAny>>,
            groups: i64,
            stream: Stream<'_, '_>,
        ) -> PyResult<PyArray> {
            let op = stringify!($name);
            let arg = |v: Option<&Bound<'_, PyAny>>, what, default| match v {
                Some(v) => fixed::<$n>(op, what, v),
                None => Ok([default; $n]),
            };
            let (s, p) = (arg(stride, "stride", 1)?, arg(padding, "padding", 0)?);
            let (d, o) = (arg(dilation, "dilation", 1)?, arg(output_padding, "output_padding", 0)?);
            let (x, w) = (to_array(input, None)?, to_array(weight, None)?);
            let t = transposed(&s, &d, groups)?;
            let (stride, dilation): ([usize; $n], [usize; $n]) = (
                t.stride.try_into().expect("one per axis"),
                t.dilation.try_into().expect("one per axis"),
            );
            with_stream(stream, || kops::$name(&x, &w, stride, p, dilation, o, t.groups))
                .map(PyArray)
        }
    };
}
conv_transpose_nd!(
    conv_transpose2d,
    2,
    "2-d transposed convolution: input `(N, H, W, C_in)`, weight `(C_out, KH, KW, C_in / groups)`."
);
conv_transpose_nd!(
    conv_transpose3d,
    3,
    "3-d transposed convolution: input `(N, D, H, W, C_in)`, weight `(C_out, KD, KH, KW, C_in / groups)`."
);

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(conv1d, m)?)?;
    m.add_function(wrap_pyfunction!(conv2d, m)?)?;
    m.add_function(wrap_pyfunction!(conv3d, m)?)?;
    m.add_function(wrap_pyfunction!(conv_general, m)?)?;
    m.add_function(wrap_pyfunction!(conv_transpose1d, m)?)?;
    m.add_function(wrap_pyfunction!(conv_transpose2d, m)?)?;
    m.add_function(wrap_pyfunction!(conv_transpose3d, m)?)?;
    Ok(())
}
