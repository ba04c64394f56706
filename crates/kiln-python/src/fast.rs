//! The `kiln.core.fast` extension module: fused norms, RoPE and attention with MLX's
//! signatures, and the C-kernel builder behind `mx.fast.c_kernel` (`python/kiln/core/fast.py`
//! wraps it in MLX's callable-returning API).

use crate::array::PyArray;
use crate::convert::{py_scalar, to_array};
use crate::device::with_stream;
use crate::dtype::Dtype;
use crate::error::raise;
use kiln::cpu::fast::c_kernel_source;
use kiln::cuda::fast::cuda_kernel::InputDecl;
use kiln::ops::fast::{self, SdpaMask};
use kiln::Array;
use kiln_base::{CudaKernelSpec, DType, Scalar, Shape, TemplateArg};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyInt, PyString};

type Stream<'a, 'py> = Option<&'a Bound<'py, PyAny>>;

fn opt_array(obj: Option<&Bound<'_, PyAny>>) -> PyResult<Option<Array>> {
    obj.filter(|o| !o.is_none()).map(|o| to_array(o, None)).transpose()
}

/// Layer normalization over the last axis of ``x``:
/// ``(x - mean) / sqrt(var + eps) * weight + bias`` (``weight``/``bias`` may be None).
#[pyfunction]
#[pyo3(signature = (x, weight, bias, eps, *, stream = None))]
fn layer_norm(
    x: &Bound<'_, PyAny>,
    weight: Option<&Bound<'_, PyAny>>,
    bias: Option<&Bound<'_, PyAny>>,
    eps: f64,
    stream: Stream<'_, '_>,
) -> PyResult<PyArray> {
    let (x, w, b) = (to_array(x, None)?, opt_array(weight)?, opt_array(bias)?);
    with_stream(stream, || fast::layer_norm(&x, w.as_ref(), b.as_ref(), eps)).map(PyArray)
}

/// Root Mean Square normalization over the last axis: ``x / sqrt(mean(x**2) + eps) * weight``.
#[pyfunction]
#[pyo3(signature = (x, weight, eps, *, stream = None))]
fn rms_norm(
    x: &Bound<'_, PyAny>,
    weight: Option<&Bound<'_, PyAny>>,
    eps: f64,
    stream: Stream<'_, '_>,
) -> PyResult<PyArray> {
    let (x, w) = (to_array(x, None)?, opt_array(weight)?);
    with_stream(stream, || fast::rms_norm(&x, w.as_ref(), eps)).map(PyArray)
}

/// Rotary positional encoding of ``a`` (``(B, *, T, D)``): the first ``dims`` features rotate
/// by ``(offset + t) * scale * freq`` (halves, or consecutive pairs when ``traditional``);
/// exactly one of ``base`` and ``freqs`` is given; ``offset`` is an int or an integer array
/// (a scalar or one per batch element).
#[pyfunction]
#[pyo3(signature = (a, dims, *, traditional, base, scale, offset, freqs = None, stream = None))]
#[allow(clippy::too_many_arguments)]
fn rope(
    a: &Bound<'_, PyAny>,
    dims: i64,
    traditional: bool,
    base: Option<f64>,
    scale: f64,
    offset: &Bound<'_, PyAny>,
    freqs: Option<&Bound<'_, PyAny>>,
    stream: Stream<'_, '_>,
) -> PyResult<PyArray> {
    let x = to_array(a, None)?;
    let offset = if offset.is_instance_of::<PyInt>() {
        int_offset(offset)?
    } else {
        to_array(offset, None)?
    };
    let freqs = opt_array(freqs)?;
    with_stream(stream, || fast::rope(&x, dims, traditional, base, scale, &offset, freqs.as_ref()))
        .map(PyArray)
}

/// RoPE's offset from a Python int as an int32 scalar, the same array for the same value
/// while it is among the last few used: mlx-lm's decode step passes the cache offset to the
/// queries' and the keys' RoPE of every layer, and a GPU evaluation moves a host scalar to
/// the device once per array (its mirror), so 64 copies a step of an 8B model become one.
/// Arrays are immutable, so sharing one is invisible.
fn int_offset(offset: &Bound<'_, PyAny>) -> PyResult<Array> {
    const KEPT: usize = 8;
    static RECENT: std::sync::Mutex<Vec<(i64, Array)>> = std::sync::Mutex::new(Vec::new());
    let v: i64 = offset.extract()?;
    let mut recent = RECENT.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(i) = recent.iter().position(|(k, _)| *k == v) {
        let hit = recent.remove(i);
        let array = hit.1.clone();
        recent.insert(0, hit);
        return Ok(array);
    }
    let array = to_array(&v.into_pyobject(offset.py())?.into_any(), Some(DType::I32))?;
    recent.insert(0, (v, array.clone()));
    recent.truncate(KEPT);
    Ok(array)
}

/// ``softmax(scale * q @ k.T + mask) @ v`` over ``(B, N, T, D)`` inputs, streaming over key
/// blocks. ``mask``: None, ``"causal"`` (lower-right aligned), a boolean mask or an additive
/// one broadcastable to ``(B, N_q, T_q, T_kv)``. ``k`` and ``v`` may have fewer heads
/// (grouped-query attention). Softmax runs in float32 for half-float inputs.
#[pyfunction]
#[pyo3(signature = (q, k, v, *, scale, mask = None, sinks = None, stream = None))]
#[allow(clippy::too_many_arguments)]
fn scaled_dot_product_attention(
    q: &Bound<'_, PyAny>,
    k: &Bound<'_, PyAny>,
    v: &Bound<'_, PyAny>,
    scale: f64,
    mask: Option<&Bound<'_, PyAny>>,
    sinks: Option<&Bound<'_, PyAny>>,
    stream: Stream<'_, '_>,
) -> PyResult<PyArray> {
    let op = "scaled_dot_product_attention";
    let (q, k, v) = (to_array(q, None)?, to_array(k, None)?, to_array(v, None)?);
    let sinks = sinks.filter(|s| !s.is_none()).map(|s| to_array(s, None)).transpose()?;
    let mask_array;
    let mask = match mask.filter(|m| !m.is_none()) {
        None => SdpaMask::None,
        Some(m) if m.is_instance_of::<PyString>() => {
            let s: String = m.extract()?;
            if s != "causal" {
                return Err(raise!(
                    Value,
                    op,
                    "invalid mask option '{s}'. Must be 'causal', or an array."
                ));
            }
            SdpaMask::Causal
        }
        Some(m) => {
            mask_array = to_array(m, None)?;
            SdpaMask::Array(&mask_array)
        }
    };
    with_stream(stream, || {
        fast::scaled_dot_product_attention(&q, &k, &v, scale, mask, sinks.as_ref())
    })
    .map(PyArray)
}

fn template_arg(op: &'static str, v: &Bound<'_, PyAny>) -> PyResult<TemplateArg> {
    if v.is_instance_of::<PyBool>() {
        return Ok(TemplateArg::Bool(v.extract()?));
    }
    if v.is_instance_of::<PyInt>() {
        return Ok(TemplateArg::Int(v.extract()?));
    }
    if let Ok(d) = v.extract::<Dtype>() {
        return Ok(TemplateArg::DType(d.0));
    }
    Err(raise!(Type, op, "Template arguments must be int, bool or Dtype, got {v}."))
}

/// Builds and applies a C kernel (the engine of ``mx.fast.c_kernel``'s callable).
#[pyfunction]
#[pyo3(signature = (name, input_names, output_names, source, header, ensure_row_contiguous,
                    inputs, output_shapes, output_dtypes, template, init_value, verbose,
                    stream = None))]
#[allow(clippy::too_many_arguments)]
fn _c_kernel(
    py: Python<'_>,
    name: String,
    input_names: Vec<String>,
    output_names: Vec<String>,
    source: String,
    header: String,
    ensure_row_contiguous: bool,
    inputs: Vec<Bound<'_, PyAny>>,
    output_shapes: Vec<Vec<i64>>,
    output_dtypes: Vec<Dtype>,
    template: Vec<(String, Bound<'_, PyAny>)>,
    init_value: Option<&Bound<'_, PyAny>>,
    verbose: bool,
    stream: Stream<'_, '_>,
) -> PyResult<Vec<PyArray>> {
    let op = "c_kernel";
    check_input_count(op, &input_names, inputs.len())?;
    let arrays: Vec<Array> = inputs.iter().map(|x| to_array(x, None)).collect::<PyResult<_>>()?;
    let (shapes, dtypes, template, init) =
        kernel_outputs(op, &output_names, &output_shapes, &output_dtypes, &template, init_value)?;
    let ins: Vec<(String, DType)> =
        input_names.iter().cloned().zip(arrays.iter().map(|a| a.dtype())).collect();
    let outs: Vec<(String, DType)> =
        output_names.iter().cloned().zip(dtypes.iter().copied()).collect();
    let full = c_kernel_source(&name, &ins, &outs, &template, &header, &source)
        .map_err(crate::error::to_pyerr)?;
    if verbose {
        py.import("builtins")?.call_method1("print", (full.as_str(),))?;
    }
    let out = with_stream(stream, || {
        fast::c_kernel(&name, full, &arrays, shapes, dtypes, init, ensure_row_contiguous)
    })?;
    Ok(out.into_iter().map(PyArray).collect())
}

/// Checks the output lists and converts shapes, dtypes, template and init value (the shared
/// part of `_c_kernel` and `_cuda_kernel`).
type KernelOutputs = (Vec<Shape>, Vec<DType>, Vec<(String, TemplateArg)>, Option<Scalar>);

fn kernel_outputs(
    op: &'static str,
    output_names: &[String],
    output_shapes: &[Vec<i64>],
    output_dtypes: &[Dtype],
    template: &[(String, Bound<'_, PyAny>)],
    init_value: Option<&Bound<'_, PyAny>>,
) -> PyResult<KernelOutputs> {
    if output_shapes.len() != output_names.len() || output_dtypes.len() != output_names.len() {
        return Err(raise!(
            Value,
            op,
            "Expected one output shape and dtype per output name ({}).",
            output_names.len()
        ));
    }
    let mut shapes = Vec::with_capacity(output_shapes.len());
    for s in output_shapes {
        if s.iter().any(|&d| d < 0) {
            return Err(raise!(Value, op, "Output shapes must be non-negative, got {s:?}."));
        }
        shapes.push(s.iter().map(|&d| d as usize).collect::<Shape>());
    }
    let dtypes: Vec<DType> = output_dtypes.iter().map(|d| d.0).collect();
    let template: Vec<(String, TemplateArg)> = template
        .iter()
        .map(|(n, v)| Ok((n.clone(), template_arg(op, v)?)))
        .collect::<PyResult<_>>()?;
    let init: Option<Scalar> = match init_value.filter(|v| !v.is_none()) {
        Some(v) => match py_scalar(v)? {
            Some(s) => Some(s),
            None => return Err(raise!(Type, op, "init_value must be a Python scalar.")),
        },
        None => None,
    };
    Ok((shapes, dtypes, template, init))
}

/// A launch size: three non-negative ints.
fn dims3(op: &'static str, what: &str, v: &[i64]) -> PyResult<[u32; 3]> {
    let bad = || raise!(Value, op, "{what} must be a tuple of 3 non-negative ints, got {v:?}.");
    if v.len() != 3 {
        return Err(bad());
    }
    let mut out = [0u32; 3];
    for (o, &x) in out.iter_mut().zip(v) {
        *o = u32::try_from(x).map_err(|_| bad())?;
    }
    Ok(out)
}

/// Builds and applies a CUDA kernel (the engine of ``mx.fast.cuda_kernel``'s callable).
#[pyfunction]
#[pyo3(signature = (name, input_names, output_names, source, header, ensure_row_contiguous,
                    shared_memory, inputs, output_shapes, output_dtypes, grid, threadgroup,
                    template, init_value, verbose, stream = None))]
#[allow(clippy::too_many_arguments)]
fn _cuda_kernel(
    py: Python<'_>,
    name: String,
    input_names: Vec<String>,
    output_names: Vec<String>,
    source: String,
    header: String,
    ensure_row_contiguous: bool,
    shared_memory: i64,
    inputs: Vec<Bound<'_, PyAny>>,
    output_shapes: Vec<Vec<i64>>,
    output_dtypes: Vec<Dtype>,
    grid: Vec<i64>,
    threadgroup: Vec<i64>,
    template: Vec<(String, Bound<'_, PyAny>)>,
    init_value: Option<&Bound<'_, PyAny>>,
    verbose: bool,
    stream: Stream<'_, '_>,
) -> PyResult<Vec<PyArray>> {
    let op = "cuda_kernel";
    check_input_count(op, &input_names, inputs.len())?;
    let (grid, threadgroup) = (dims3(op, "grid", &grid)?, dims3(op, "threadgroup", &threadgroup)?);
    let Ok(shared_memory) = u32::try_from(shared_memory) else {
        return Err(raise!(Value, op, "shared_memory must be non-negative, got {shared_memory}."));
    };
    let arrays: Vec<Array> = inputs.iter().map(|x| to_array(x, None)).collect::<PyResult<_>>()?;
    let (shapes, dtypes, template, init) =
        kernel_outputs(op, &output_names, &output_shapes, &output_dtypes, &template, init_value)?;
    let ins: Vec<InputDecl<'_>> = input_names
        .iter()
        .zip(&arrays)
        .map(|(n, a)| InputDecl { name: n, dtype: a.dtype(), ndim: a.ndim() })
        .collect();
    let outs: Vec<(&str, DType)> =
        output_names.iter().map(|n| n.as_str()).zip(dtypes.iter().copied()).collect();
    let (full, symbol) =
        kiln::cuda::fast::cuda_kernel::source(&name, &ins, &outs, &template, &header, &source)
            .map_err(crate::error::to_pyerr)?;
    if verbose {
        py.import("builtins")?.call_method1("print", (full.as_str(),))?;
    }
    let spec = CudaKernelSpec {
        name,
        source: full,
        symbol,
        num_inputs: arrays.len(),
        output_shapes: shapes,
        output_dtypes: dtypes,
        init_value: init,
        ensure_row_contiguous,
        grid,
        threadgroup,
        shared_memory,
    };
    let out = with_stream(stream, || kiln::ops::cuda_kernel(spec, &arrays))?;
    Ok(out.into_iter().map(PyArray).collect())
}

pub fn register(parent: &Bound<'_, PyModule>) -> PyResult<()> {
    let m = PyModule::new(parent.py(), "fast")?;
    m.add_function(wrap_pyfunction!(layer_norm, &m)?)?;
    m.add_function(wrap_pyfunction!(rms_norm, &m)?)?;
    m.add_function(wrap_pyfunction!(rope, &m)?)?;
    m.add_function(wrap_pyfunction!(scaled_dot_product_attention, &m)?)?;
    m.add_function(wrap_pyfunction!(_c_kernel, &m)?)?;
    m.add_function(wrap_pyfunction!(_cuda_kernel, &m)?)?;
    parent.add_submodule(&m)
}

/// A user kernel gets one array per declared input name.
fn check_input_count(op: &'static str, names: &[String], given: usize) -> PyResult<()> {
    if given != names.len() {
        return Err(raise!(
            Value,
            op,
            "Expected {} inputs ({:?}), got {}.",
            names.len(),
            names,
            given
        ));
    }
    Ok(())
}
