//! `mx.fast` kernels: layer_norm, rms_norm, RoPE, attention, quantized and gathered matmuls
//! and user C kernels. Each runs in
//! a compute type (`Real`): float64 for float64 inputs, float32 otherwise (half floats are
//! widened once on the way in and rounded once on the way out). Inputs are read as
//! row-major slices of the compute type (borrowed when they already are), rows or heads are
//! split over rayon, and inner loops run under `simd::run` so they vectorise.

mod attention;
mod attention_train;
mod c_kernel;
mod gather_mm;
mod norm;
mod norm_vjp;
mod quantized;
#[cfg(target_arch = "x86_64")]
mod quantized_avx512;
mod rope;
mod tile;
#[cfg(target_arch = "x86_64")]
mod tile_bf16;

pub use c_kernel::{c_kernel_check, c_kernel_source, c_type, TemplateArg};

use crate::cast;
use crate::matmul::Gemm;
use kiln_base::{bail, ArrayData, DType, FastOp, Result, Shape};

/// The float types the fast kernels compute in.
pub(crate) trait Real:
    Gemm
    + Default
    + PartialOrd
    + std::ops::Add<Output = Self>
    + std::ops::Sub<Output = Self>
    + std::ops::Mul<Output = Self>
    + std::ops::Div<Output = Self>
{
    const ZERO: Self;
    const ONE: Self;
    /// The lowest finite value: a hidden score (a fully hidden row then averages every key,
    /// as MLX's kernels do).
    const LOWEST: Self;
    const NEG_INF: Self;
    fn exp(self) -> Self;
    fn sqrt(self) -> Self;
    fn of(v: f64) -> Self;
    fn is_nan(self) -> bool;
    /// `self * b + c` rounded once (an FMA instruction inside `simd::run`'s AVX copies).
    fn mul_add(self, b: Self, c: Self) -> Self;
}

impl Real for f32 {
    const ZERO: Self = 0.0;
    const ONE: Self = 1.0;
    const LOWEST: Self = f32::MIN;
    const NEG_INF: Self = f32::NEG_INFINITY;
    #[inline(always)]
    fn exp(self) -> Self {
        crate::vecmath::exp(self)
    }
    #[inline(always)]
    fn sqrt(self) -> Self {
        f32::sqrt(self)
    }
    #[inline(always)]
    fn of(v: f64) -> Self {
        v as f32
    }
    #[inline(always)]
    fn is_nan(self) -> bool {
        f32::is_nan(self)
    }
    #[inline(always)]
    fn mul_add(self, b: Self, c: Self) -> Self {
        f32::mul_add(self, b, c)
    }
}

impl Real for f64 {
    const ZERO: Self = 0.0;
    const ONE: Self = 1.0;
    const LOWEST: Self = f64::MIN;
    const NEG_INF: Self = f64::NEG_INFINITY;
    #[inline(always)]
    fn exp(self) -> Self {
        f64::exp(self)
    }
    #[inline(always)]
    fn sqrt(self) -> Self {
        f64::sqrt(self)
    }
    #[inline(always)]
    fn of(v: f64) -> Self {
        v
    }
    #[inline(always)]
    fn is_nan(self) -> bool {
        f64::is_nan(self)
    }
    #[inline(always)]
    fn mul_add(self, b: Self, c: Self) -> Self {
        f64::mul_add(self, b, c)
    }
}

/// `x` as row-major data of dtype `to`: itself when it already is, else a converted copy.
pub(crate) fn dense_as(x: &ArrayData, to: DType) -> Result<ArrayData> {
    if x.dtype == to && x.layout.row_contiguous {
        Ok(x.clone())
    } else {
        cast::astype(x, &x.layout.shape, to)
    }
}

/// The elements of row-major `x` (from `dense_as`).
pub(crate) fn elements<T: bytemuck::Pod>(x: &ArrayData) -> &[T] {
    &x.buffer.host_slice::<T>()[x.layout.offset..][..x.layout.size()]
}

/// Rounds a compute-type result to the output dtype (no copy when it already is).
fn finish(out: ArrayData, dtype: DType) -> Result<ArrayData> {
    if out.dtype == dtype {
        Ok(out)
    } else {
        cast::astype(&out, &out.layout.shape.clone(), dtype)
    }
}

pub(crate) fn eval(
    op: &FastOp,
    inputs: &[ArrayData],
    outputs: &[(Shape, DType)],
) -> Result<Vec<ArrayData>> {
    let (shape, dtype) = (&outputs[0].0, outputs[0].1);
    // The norms' backward: several outputs, in the dtype of x (its own dispatch on dtypes).
    match op {
        FastOp::LayerNormVjp { eps, weight, bias } => {
            let w = weight.then(|| &inputs[1]);
            let g = &inputs[1 + *weight as usize];
            let kind = norm_vjp::Kind::Layer;
            return norm_vjp::norm_vjp(kind, &inputs[0], w, g, eps.as_f64(), shape, *bias);
        }
        FastOp::RmsNormVjp { eps, weight } => {
            let w = weight.then(|| &inputs[1]);
            let g = &inputs[1 + *weight as usize];
            let kind = norm_vjp::Kind::Rms;
            return norm_vjp::norm_vjp(kind, &inputs[0], w, g, eps.as_f64(), shape, false);
        }
        _ => {}
    }
    let f64_compute = dtype == DType::F64;
    macro_rules! compute {
        ($f:ident ( $($arg:expr),* )) => {
            if f64_compute { $f::<f64>($($arg),*) } else { $f::<f32>($($arg),*) }
        };
    }
    let out = match op {
        FastOp::LayerNorm { eps, weight, bias } => {
            let w = weight.then(|| &inputs[1]);
            let b = bias.then(|| &inputs[1 + *weight as usize]);
            compute!(layer_norm(&inputs[0], w, b, eps.as_f64(), shape))
        }
        FastOp::RmsNorm { eps, weight } => {
            let w = weight.then(|| &inputs[1]);
            compute!(rms_norm(&inputs[0], w, eps.as_f64(), shape))
        }
        FastOp::Rope { dims, traditional, base, scale, freqs, inverse } => {
            let f = freqs.then(|| &inputs[2]);
            let p = rope::Params {
                dims: *dims,
                traditional: *traditional,
                base: base.as_f64(),
                scale: scale.as_f64(),
                inverse: *inverse,
            };
            compute!(rope_kernel(&inputs[0], &inputs[1], f, &p, shape))
        }
        #[cfg(target_arch = "x86_64")]
        FastOp::Attention { scale, mask } if attention::bf16_products(inputs) => {
            attention::attention_bf16(inputs, *mask, scale.as_f64(), shape)
        }
        FastOp::Attention { scale, mask } => {
            compute!(attention_kernel(inputs, *mask, scale.as_f64(), shape))
        }
        FastOp::CKernel(spec) => return c_kernel::run(spec, inputs),
        FastOp::QuantizedMatmul { group_size, bits } => {
            quantized::quantized_matmul(inputs, *group_size, *bits, shape)
        }
        FastOp::GatherMm => gather_mm::gather_mm(inputs, shape),
        FastOp::GatherQmm { group_size, bits } => {
            gather_mm::gather_qmm(inputs, *group_size, *bits, shape)
        }
        FastOp::LayerNormVjp { .. } | FastOp::RmsNormVjp { .. } => {
            bail!(Runtime, op.name(), "Dispatched above.")
        }
        FastOp::AttentionTrain { scale, mask } => {
            return attention_train::forward(inputs, *mask, scale.as_f64(), outputs)
        }
        FastOp::AttentionVjp { scale, mask } => {
            return attention_train::backward(inputs, *mask, scale.as_f64(), outputs)
        }
        FastOp::CudaKernel(spec) => bail!(
            Value,
            "cuda_kernel",
            "The CUDA kernel `{}` runs on the GPU only; use mx.fast.c_kernel for a CPU kernel.",
            spec.name
        ),
    }?;
    // Computed in float32 or float64, or (the norms over half floats) already rounded.
    if out.dtype != DType::F32 && out.dtype != DType::F64 && out.dtype != dtype {
        bail!(Runtime, op.name(), "Unexpected compute dtype {}.", out.dtype);
    }
    Ok(vec![finish(out, dtype)?])
}

use attention::attention as attention_kernel;
use norm::{layer_norm, rms_norm};
use rope::rope as rope_kernel;
