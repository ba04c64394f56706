//! `mx.fast` front ends: validate as MLX does (its messages), promote to one float dtype and
//! record one `Primitive::Fast`. The compositions of basic ops that the gradient and vmap
//! rules use live in `transforms/rules/fast.rs`.

use super::{astype, record, record_all, reshape};
use crate::array::Array;
use kiln_base::shape::{broadcast_shapes, fmt_shape};
use kiln_base::{bail, ensure, AttentionMask, CKernelSpec, DType, FastOp, Primitive, Result};
use kiln_base::{Scalar, Shape};
use std::sync::Arc;

/// Records a fast op. On the GPU, cases the fused kernels do not take (float64; attention off
/// the tensor-core path on short sequences, or with head dims too large for the kernels'
/// shared memory) record their composition of basic ops instead (GPU elementwise kernels and
/// cuBLAS, not a trip to the CPU).
///
/// Under grad (and jvp), attention where the GPU's flash kernels take the call records the
/// training forward (`AttentionTrain`: o and the row logsumexp), whose vjp is the fused
/// backward (`AttentionVjp`). Other attention calls record the composition on the GPU, which
/// autodiff differentiates directly: its forward intermediates (the probabilities) are what
/// the backward needs, and compile shares them. The norms keep their fused forward: their vjp
/// is one fused backward kernel (`LayerNormVjp`/`RmsNormVjp`), which recomputes the row
/// statistics from x in the same read.
fn record_fast(fop: FastOp, inputs: Vec<Array>) -> Result<Array> {
    let differentiating =
        || crate::transforms::active().contains(&crate::transforms::Transform::Grad);
    if let FastOp::Attention { scale, mask } = &fop {
        if differentiating() && train_fused(*mask, &inputs) {
            let train = FastOp::AttentionTrain { scale: *scale, mask: *mask };
            let mut outs = record_all(Primitive::Fast(train), inputs)?;
            return Ok(outs.swap_remove(0));
        }
    }
    let composed_under_grad = || matches!(fop, FastOp::Attention { .. }) && differentiating();
    if crate::device::default_stream().device.kind == kiln_base::DeviceKind::Gpu
        && (composed_under_grad() || !gpu_fused(&fop, &inputs))
    {
        // The primitive's checks first, so errors are the same on every device.
        let metas: Vec<(&[usize], DType)> = inputs.iter().map(|x| (x.shape(), x.dtype())).collect();
        Primitive::Fast(fop.clone()).output_shapes(&metas)?;
        if let Some(y) = crate::transforms::rules::fast::composed(&fop, &inputs) {
            return y;
        }
    }
    record(Primitive::Fast(fop), inputs)
}

/// Whether the GPU's fused kernel takes this call (its backend decides: dtypes, and for
/// attention its tensor-core path or long sequences whose scores the composition would
/// materialise).
fn gpu_fused(fop: &FastOp, inputs: &[Array]) -> bool {
    let metas: Vec<(&[usize], DType)> = inputs.iter().map(|x| (x.shape(), x.dtype())).collect();
    crate::backends::gpu().is_some_and(|b| b.fuses(fop, &metas))
}

/// Whether attention under grad takes the fused training primitives: where the default
/// device's backend says its kernels take these inputs (no mask array). On the GPU those are
/// the flash kernels; the CPU's are plain references, taken only under a testing switch.
fn train_fused(mask: AttentionMask, inputs: &[Array]) -> bool {
    if !matches!(mask, AttentionMask::None | AttentionMask::Causal) {
        return false;
    }
    let device = crate::device::default_stream().device;
    let [q, k, v] = [0, 1, 2].map(|i| inputs[i].shape());
    crate::backends::backend("scaled_dot_product_attention", device)
        .is_ok_and(|b| b.fuses_attention_training(inputs[0].dtype(), q, k, v))
}

/// Checks a norm's weight or bias and returns the dtype it promotes with.
fn check_affine(op: &'static str, what: &str, p: Option<&Array>, d: usize) -> Result<()> {
    if let Some(p) = p {
        ensure!(
            p.ndim() == 1,
            Value,
            op,
            "{what} must have 1 dimension but has {} dimensions.",
            p.ndim()
        );
        ensure!(
            p.shape()[0] == d,
            Value,
            op,
            "{what} must have the same size as the last dimension of x but has {} elements.",
            p.shape()[0]
        );
    }
    Ok(())
}

fn norm(
    op: &'static str,
    x: &Array,
    weight: Option<&Array>,
    bias: Option<&Array>,
    fop: FastOp,
) -> Result<Array> {
    ensure!(
        x.ndim() >= 1,
        Value,
        op,
        "Input must have at least 1 dimension but got input with 0 dimensions."
    );
    let d = x.shape()[x.ndim() - 1];
    check_affine(op, "weight", weight, d)?;
    check_affine(op, "bias", bias, d)?;
    let dtype = [weight, bias].iter().flatten().fold(x.dtype(), |a, p| a.promote(p.dtype()));
    ensure!(dtype.is_float(), Value, op, "Received unsupported type {dtype}.");
    let mut inputs = vec![astype(x, dtype)?];
    for p in [weight, bias].into_iter().flatten() {
        inputs.push(astype(p, dtype)?);
    }
    record_fast(fop, inputs)
}

/// `mx.fast.layer_norm`: `(x - mean) / sqrt(var + eps) * weight + bias` over the last axis.
pub fn layer_norm(
    x: &Array,
    weight: Option<&Array>,
    bias: Option<&Array>,
    eps: f64,
) -> Result<Array> {
    let fop = FastOp::LayerNorm {
        eps: Scalar::Float(eps),
        weight: weight.is_some(),
        bias: bias.is_some(),
    };
    norm("layer_norm", x, weight, bias, fop)
}

/// `mx.fast.rms_norm`: `x / sqrt(mean(x²) + eps) * weight` over the last axis.
pub fn rms_norm(x: &Array, weight: Option<&Array>, eps: f64) -> Result<Array> {
    let fop = FastOp::RmsNorm { eps: Scalar::Float(eps), weight: weight.is_some() };
    norm("rms_norm", x, weight, None, fop)
}

/// `mx.fast.rope`. `offset` is an integer array: one value, or one per batch element.
pub fn rope(
    x: &Array,
    dims: i64,
    traditional: bool,
    base: Option<f64>,
    scale: f64,
    offset: &Array,
    freqs: Option<&Array>,
) -> Result<Array> {
    let op = "rope";
    ensure!(
        x.ndim() >= 3,
        Value,
        op,
        "Input must have at least 3 dimensions but got input with {} dimensions.",
        x.ndim()
    );
    ensure!(
        x.dtype().is_float(),
        Value,
        op,
        "Input must be a floating type but got {}.",
        x.dtype()
    );
    ensure!(dims % 2 == 0, Value, op, "dims must be even but got {dims}.");
    let d = x.shape()[x.ndim() - 1];
    ensure!(
        dims > 0 && dims as u64 <= d as u64,
        Value,
        op,
        "dims must be in (0, {d}] (the last dimension of the input) but got {dims}."
    );
    let dims = dims as usize;
    match (base, freqs) {
        (Some(_), Some(_)) => bail!(Value, op, "Only one of base or freqs can have a value."),
        (None, None) => bail!(Value, op, "Neither base nor freqs has a value."),
        _ => {}
    }
    ensure!(
        offset.dtype().is_integer(),
        Value,
        op,
        "offset must be an integer but got type {}.",
        offset.dtype()
    );
    let b = x.shape()[0];
    ensure!(
        offset.ndim() <= 1 && (offset.size() == 1 || offset.size() == b),
        Value,
        op,
        "offset must be a scalar or vector with {b} elements but has shape {}.",
        fmt_shape(offset.shape())
    );
    let mut inputs = vec![x.clone(), astype(offset, DType::I32)?];
    if let Some(f) = freqs {
        ensure!(
            f.ndim() == 1 && f.shape()[0] == dims / 2,
            Value,
            op,
            "freqs must be one dimensional with size {} but got shape {}.",
            dims / 2,
            fmt_shape(f.shape())
        );
        inputs.push(astype(f, DType::F32)?);
    }
    let fop = FastOp::Rope {
        dims,
        traditional,
        base: Scalar::Float(base.unwrap_or(0.0)),
        scale: Scalar::Float(scale),
        freqs: freqs.is_some(),
        inverse: false,
    };
    record(Primitive::Fast(fop), inputs)
}

/// The mask argument of attention.
pub enum SdpaMask<'a> {
    None,
    Causal,
    Array(&'a Array),
}

/// `mx.fast.scaled_dot_product_attention` on `(B, N, T, D)` inputs.
pub fn scaled_dot_product_attention(
    q: &Array,
    k: &Array,
    v: &Array,
    scale: f64,
    mask: SdpaMask<'_>,
    sinks: Option<&Array>,
) -> Result<Array> {
    let op = "scaled_dot_product_attention";
    for x in [q, k, v] {
        ensure!(
            x.ndim() == 4,
            Value,
            op,
            "input with shape {} expected to be rank 4",
            fmt_shape(x.shape())
        );
    }
    let promoted = q.dtype().promote(k.dtype()).promote(v.dtype());
    let dtype = if promoted.is_float() { promoted } else { DType::F32 };
    let (qs, ks) = (q.shape(), k.shape());
    let full = [qs[0], qs[1], qs[2], ks[2]];
    let (fmask, mask_input) = match mask {
        SdpaMask::None => (AttentionMask::None, None),
        SdpaMask::Causal => (AttentionMask::Causal, None),
        SdpaMask::Array(m) => {
            ensure!(
                m.ndim() <= 4,
                Value,
                op,
                "the mask with shape {} expected to have at most rank 4.",
                fmt_shape(m.shape())
            );
            let b = broadcast_shapes("broadcast_shapes", m.shape(), &full)?;
            ensure!(
                b.as_slice() == full,
                Value,
                op,
                "Shapes {} and {} cannot be broadcast.",
                fmt_shape(m.shape()),
                fmt_shape(&full)
            );
            let mut shape4: Vec<i64> = vec![1; 4 - m.ndim()];
            shape4.extend(m.shape().iter().map(|&d| d as i64));
            let m4 = reshape(m, &shape4)?;
            if m.dtype() == DType::Bool {
                (AttentionMask::Boolean, Some(m4))
            } else {
                ensure!(
                    m.dtype().promote(dtype) == dtype,
                    Value,
                    op,
                    "Mask type must promote to output type {dtype}."
                );
                (AttentionMask::Additive, Some(astype(&m4, dtype)?))
            }
        }
    };
    let mut inputs = vec![astype(q, dtype)?, astype(k, dtype)?, astype(v, dtype)?];
    inputs.extend(mask_input);
    let fop = FastOp::Attention { scale: Scalar::Float(scale), mask: fmask };
    let Some(sinks) = sinks else { return record_fast(fop, inputs) };
    ensure!(
        sinks.ndim() == 1 && sinks.shape()[0] == qs[1],
        Value,
        op,
        "Received invalid shape for sinks {}.",
        fmt_shape(sinks.shape())
    );
    ensure!(
        sinks.dtype().promote(dtype) == dtype,
        Value,
        op,
        "Type of sinks must promote to output type {dtype}."
    );
    // The fused kernels have no sink column: the composition (float32 softmax).
    let attn = crate::transforms::rules::fast::Attn::new(&fop, &inputs)?;
    astype(&attn.output_with_sinks(sinks)?, dtype)
}

/// A user C kernel (`mx.fast.c_kernel`) applied to `inputs`: builds it now (so compile
/// errors surface at the call) and records one node with its outputs.
pub fn c_kernel(
    name: &str,
    source: String,
    inputs: &[Array],
    output_shapes: Vec<Shape>,
    output_dtypes: Vec<DType>,
    init_value: Option<Scalar>,
    ensure_row_contiguous: bool,
) -> Result<Vec<Array>> {
    let op = "c_kernel";
    ensure!(!output_shapes.is_empty(), Value, op, "Expected at least one output.");
    ensure!(
        output_shapes.len() == output_dtypes.len(),
        Value,
        op,
        "Got {} output shapes and {} output dtypes.",
        output_shapes.len(),
        output_dtypes.len()
    );
    let spec = CKernelSpec {
        name: name.to_string(),
        source,
        num_inputs: inputs.len(),
        output_shapes,
        output_dtypes,
        init_value,
        ensure_row_contiguous,
    };
    let fop = FastOp::CKernel(Arc::new(spec));
    crate::backends::backend(op, kiln_base::Device::CPU)?.prepare_kernel(&fop)?;
    record_all(Primitive::Fast(fop), inputs.to_vec())
}
