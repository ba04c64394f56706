//! MLX's quantization functions: `quantize`, `dequantize` and `quantized_matmul` (the
//! `"affine"` mode; the microscaling float modes are not implemented).

use crate::array::PyArray;
use crate::convert::to_array;
use crate::device::with_stream;
use crate::dtype::Dtype;
use crate::error::raise;
use kiln::ops as kops;
use pyo3::prelude::*;

type Stream<'a, 'py> = Option<&'a Bound<'py, PyAny>>;

/// The mode's group size and bits with MLX's defaults (affine: 64 and 4).
fn affine_params(
    op: &'static str,
    mode: &str,
    group_size: Option<usize>,
    bits: Option<u32>,
) -> PyResult<(usize, u32)> {
    match mode {
        "affine" => Ok((group_size.unwrap_or(64), bits.unwrap_or(4))),
        "mxfp4" | "mxfp8" | "nvfp4" => Err(raise!(
            Unsupported,
            op,
            "Quantization mode '{mode}' is not implemented in kiln (only 'affine')."
        )),
        _ => Err(raise!(Value, op, "Invalid quantization mode '{mode}'.")),
    }
}

/// Quantize the array `w` (at least 2-d, its last axis divisible by `group_size`): every
/// `group_size` elements of a row share a scale and a bias, and each element takes `bits`
/// bits, packed from the lower to the upper bits of uint32 words. Returns
/// `(w_q, scales, biases)`.
#[pyfunction]
#[pyo3(signature = (w, /, group_size = None, bits = None, mode = "affine", *, global_scale = None, stream = None))]
fn quantize(
    w: &Bound<'_, PyAny>,
    group_size: Option<usize>,
    bits: Option<u32>,
    mode: &str,
    global_scale: Option<&Bound<'_, PyAny>>,
    stream: Stream<'_, '_>,
) -> PyResult<(PyArray, PyArray, PyArray)> {
    let (group_size, bits) = affine_params("quantize", mode, group_size, bits)?;
    if global_scale.is_some_and(|g| !g.is_none()) {
        return Err(raise!(Value, "quantize", "global_scale is only used by 'nvfp4'."));
    }
    let w = to_array(w, None)?;
    let (q, s, b) = with_stream(stream, || kops::quantize(&w, group_size, bits))?;
    Ok((PyArray(q), PyArray(s), PyArray(b)))
}

/// Dequantize `w` with its `scales` and `biases`: `w_i = s * q_i + b`, in `dtype` (the
/// scales' dtype when None).
#[pyfunction]
#[pyo3(signature = (w, /, scales, biases = None, group_size = None, bits = None, mode = "affine", global_scale = None, dtype = None, *, stream = None))]
#[allow(clippy::too_many_arguments)] // MLX's signature
fn dequantize(
    w: &Bound<'_, PyAny>,
    scales: &Bound<'_, PyAny>,
    biases: Option<&Bound<'_, PyAny>>,
    group_size: Option<usize>,
    bits: Option<u32>,
    mode: &str,
    global_scale: Option<&Bound<'_, PyAny>>,
    dtype: Option<Dtype>,
    stream: Stream<'_, '_>,
) -> PyResult<PyArray> {
    let (group_size, bits) = affine_params("dequantize", mode, group_size, bits)?;
    let _ = global_scale; // only the nvfp4 mode reads it
    let Some(biases) = biases.filter(|b| !b.is_none()) else {
        return Err(raise!(
            Value,
            "dequantize",
            "Biases must be provided for affine quantization."
        ));
    };
    let (w, scales, biases) =
        (to_array(w, None)?, to_array(scales, None)?, to_array(biases, None)?);
    with_stream(stream, || {
        kops::dequantize(&w, &scales, &biases, group_size, bits, dtype.map(|d| d.0))
    })
    .map(PyArray)
}

/// `x @ w.T` (or `x @ w` when `transpose` is False) with `w` quantized: the matrix is
/// dequantized with its scales and biases first.
#[pyfunction]
#[pyo3(signature = (x, w, /, scales, biases = None, transpose = true, group_size = None, bits = None, mode = "affine", *, stream = None))]
#[allow(clippy::too_many_arguments)] // MLX's signature
fn quantized_matmul(
    x: &Bound<'_, PyAny>,
    w: &Bound<'_, PyAny>,
    scales: &Bound<'_, PyAny>,
    biases: Option<&Bound<'_, PyAny>>,
    transpose: bool,
    group_size: Option<usize>,
    bits: Option<u32>,
    mode: &str,
    stream: Stream<'_, '_>,
) -> PyResult<PyArray> {
    let op = "quantized_matmul";
    let (group_size, bits) = affine_params(op, mode, group_size, bits)?;
    let Some(biases) = biases.filter(|b| !b.is_none()) else {
        return Err(raise!(Value, op, "Biases must be provided for affine quantization."));
    };
    let x = to_array(x, None)?;
    let (w, scales, biases) =
        (to_array(w, None)?, to_array(scales, None)?, to_array(biases, None)?);
    with_stream(stream, || {
        kops::quantized_matmul(&x, &w, &scales, &biases, transpose, group_size, bits)
    })
    .map(PyArray)
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(quantize, m)?)?;
    m.add_function(wrap_pyfunction!(dequantize, m)?)?;
    m.add_function(wrap_pyfunction!(quantized_matmul, m)?)?;
    Ok(())
}
