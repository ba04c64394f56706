//! `mx.fast`'s fused GPU kernels: layer_norm and rms_norm (`norm`), RoPE (`rope`) and
//! scaled dot-product attention (`attention`: a flash-style tensor-core kernel for half
//! floats with one head dim, a multiple of 16 up to 128, and a simple warp-per-query kernel for everything else).
//! Each computes in float32 and rounds once on the way out, as kiln-cpu's kernels do.
//! User C kernels (`CKernel`) stay on the CPU; user CUDA kernels (`CudaKernel`) are
//! `custom`'s. Quantized and gathered products with few rows per matrix are `gathered`'s.

mod attention;
mod attention_bwd;
mod attention_bwd_hopper;
mod attention_decode;
mod attention_hopper;
pub mod cuda_kernel;
mod gathered;
#[cfg(test)]
mod hopper_build_check;
pub(crate) mod norm;
mod norm_vjp;
mod quantized_prefill;
pub(crate) mod rope;

use crate::alloc::device_ptr;
use kiln_base::{bail, ArrayData, DType, FastOp, Result, Shape};

pub use attention::fused as attention_fused;
pub use attention::train_fused as attention_train_fused;

/// Whether the GPU has a fused kernel for `op` (dtype checks are the caller's).
pub fn supports(op: &FastOp) -> bool {
    !matches!(op, FastOp::CKernel(_))
}

/// The storage type, `k_load` (to float) and `k_store` (from float) of a float dtype, after
/// the common preamble: every fast kernel's source starts with this.
pub(crate) fn header(dtype: DType) -> String {
    let (storage, load, store) = match dtype {
        DType::F16 => ("uint16_t", "k_f16_to_f32(x)", "k_f32_to_f16(v)"),
        DType::BF16 => ("uint16_t", "k_bf16_to_f32(x)", "k_f32_to_bf16(v)"),
        _ => ("float", "x", "v"),
    };
    format!(
        "{}\ntypedef {storage} S;\nK_INLINE float k_load(S x) {{ return {load}; }}\n\
         K_INLINE S k_store(float v) {{ return {store}; }}\n\
         /* One weight as dequantize computes it: product and sum each rounded to S. */\n\
         K_INLINE float k_dequant(float scale, float q, float bias) {{\n\
             return k_load(k_store(__fadd_rn(k_load(k_store(__fmul_rn(scale, q))), bias))); }}\n",
        kiln_codegen::cuda::preamble()
    )
}

/// The device address of `x`'s first element.
pub(crate) fn ptr(x: &ArrayData) -> u64 {
    device_ptr(&x.buffer, x.layout.offset as isize, x.dtype.size())
}

/// `x` row-major (a copy only when it is not).
pub(crate) fn dense(x: &ArrayData) -> Result<ArrayData> {
    crate::copy::contiguous(x)
}

/// `x` row-major and 16-byte aligned (a copy into a fresh block when it is not): what vector
/// loads and `cp.async` need.
pub(crate) fn dense_aligned(x: &ArrayData) -> Result<ArrayData> {
    let d = dense(x)?;
    if ptr(&d).is_multiple_of(16) {
        return Ok(d);
    }
    let out = crate::copy::empty(&d.layout.shape, d.dtype)?;
    crate::copy::copy_into(&d, &out.buffer, &out.layout)?;
    Ok(out)
}

/// The fused forward of `op` on `inputs` (already on the GPU).
pub fn eval(
    op: &FastOp,
    inputs: &[ArrayData],
    outputs: &[(Shape, DType)],
) -> Result<Vec<ArrayData>> {
    let name = op.name();
    match op {
        FastOp::CudaKernel(spec) => return cuda_kernel::run(spec, inputs),
        FastOp::AttentionTrain { scale, mask } => {
            return attention::attention_train(inputs, *mask, scale.as_f64(), &outputs[0].0)
        }
        FastOp::AttentionVjp { scale, mask } => {
            return attention_bwd::attention_vjp(inputs, *mask, scale.as_f64())
        }
        _ => {}
    }
    let (shape, dtype) = (&outputs[0].0, outputs[0].1);
    if !matches!(dtype, DType::F32 | DType::F16 | DType::BF16) {
        bail!(Type, name, "The GPU kernel supports float32, float16 and bfloat16, got {dtype}.");
    }
    let out = match op {
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
        FastOp::LayerNorm { eps, weight, bias } => {
            let w = weight.then(|| &inputs[1]);
            let b = bias.then(|| &inputs[1 + *weight as usize]);
            norm::norm(norm::Kind::Layer, &inputs[0], w, b, eps.as_f64(), shape)?
        }
        FastOp::RmsNorm { eps, weight } => {
            let w = weight.then(|| &inputs[1]);
            norm::norm(norm::Kind::Rms, &inputs[0], w, None, eps.as_f64(), shape)?
        }
        FastOp::Rope { dims, traditional, base, scale, freqs, inverse } => {
            let p = rope::Params {
                dims: *dims,
                traditional: *traditional,
                base: base.as_f64(),
                scale: scale.as_f64(),
                inverse: *inverse,
            };
            rope::rope(&inputs[0], &inputs[1], freqs.then(|| &inputs[2]), &p, shape)?
        }
        FastOp::Attention { scale, mask } => {
            attention::attention(inputs, *mask, scale.as_f64(), shape)?
        }
        FastOp::QuantizedMatmul { group_size, bits } => {
            gathered::quantized_matmul(inputs, *group_size, *bits, shape)?
        }
        FastOp::GatherQmm { group_size, bits } => {
            gathered::gather_qmm(inputs, *group_size, *bits, shape)?
        }
        FastOp::GatherMm => gathered::gather_mm(inputs, shape)?,
        FastOp::CKernel(_) => {
            bail!(Unsupported, name, "No GPU kernel: it runs on the CPU.")
        }
        FastOp::CudaKernel(_) | FastOp::AttentionTrain { .. } | FastOp::AttentionVjp { .. } => {
            bail!(Value, name, "Dispatched above.")
        }
    };
    Ok(vec![out])
}

/// Every kernel variant's source, named: `cargo test -p kiln-cuda fast::tests::dump` with
/// `KILN_CUDA_DUMP=dir` writes them there for an offline NVRTC check (no GPU needed).
#[cfg(test)]
pub(crate) fn all_sources() -> Vec<(String, String)> {
    use kiln_base::AttentionMask as Am;
    let mut out = Vec::new();
    for dtype in [DType::F32, DType::F16, DType::BF16] {
        for kind in [norm::Kind::Layer, norm::Kind::Rms] {
            for (weight, bias) in [(false, false), (true, false), (false, true), (true, true)] {
                let vec = 16 / dtype.size();
                for (vec, items, warp, threads) in [
                    (1, 0, false, 1024),
                    (1, 3, true, 256),
                    (1, 32, true, 256),
                    (vec, 32 / vec, false, 512),
                    (vec, 4, false, 64),
                    (vec, 4, false, 128),
                    (vec, 4, false, 256),
                ] {
                    for (residual, hoist) in [(false, false), (true, false), (true, !warp)] {
                        let key = norm::Key {
                            dtype,
                            kind,
                            weight,
                            bias,
                            vec,
                            items,
                            warp,
                            threads,
                            residual,
                            hoist: hoist && items > 0,
                        };
                        out.push((format!("norm_{key:?}"), norm::source(&key)));
                    }
                }
            }
        }
        for kind in [norm_vjp::Kind::Layer, norm_vjp::Kind::Rms] {
            for (weight, bias) in [(false, false), (true, false), (false, true), (true, true)] {
                let vec = 16 / dtype.size();
                for (vec, items, warp) in [
                    (1, 0, false),
                    (vec, 0, false),
                    (1, 3, true),
                    (1, 16, true),
                    (vec, 16 / vec, true),
                    (1, 16, false),
                    (vec, 16 / vec, false),
                ] {
                    let key = norm_vjp::Key { dtype, kind, weight, bias, vec, items, warp };
                    out.push((format!("norm_vjp_{key:?}"), norm_vjp::source(&key)));
                }
            }
        }
        out.push((format!("norm_vjp_sum_{dtype:?}"), norm_vjp::sum_source(dtype)));
        for offset in [DType::I32, DType::I64] {
            for (traditional, freqs) in [(false, false), (true, true)] {
                let key = rope::Key { dtype, offset, traditional, freqs };
                out.push((format!("rope_{key:?}"), rope::source(&key)));
            }
        }
        for mask in [Am::None, Am::Causal, Am::Additive, Am::Boolean] {
            let mut variants = vec![attention::Variant::Simple];
            if dtype != DType::F32 {
                variants.extend([16, 32, 64, 80, 96, 112, 128].map(attention::Variant::Flash));
                variants.extend([64, 96, 128, 256].map(attention::Variant::Hopper));
                for form in [1, 2, 3] {
                    let dims = [64, 96, 128, 256];
                    variants.extend(dims.map(|d| attention::Variant::HopperWs(d, form)));
                }
            }
            for variant in variants {
                let lses: &[bool] = match (variant, mask) {
                    (
                        attention::Variant::Flash(_)
                        | attention::Variant::Hopper(_)
                        | attention::Variant::HopperWs(..),
                        Am::None | Am::Causal,
                    ) => &[false, true],
                    _ => &[false],
                };
                for &lse in lses {
                    let key = attention::Key { dtype, mask, variant, lse };
                    out.push((format!("attention_{key:?}"), attention::source(&key)));
                }
            }
        }
    }
    out.extend(attention_bwd::all_sources());
    out.extend(attention_decode::all_sources());
    out.extend(gathered::all_sources());
    out.extend(quantized_prefill::all_sources());
    out.extend(crate::gemv::all_sources());
    out.extend(crate::qmv_mma::all_sources());
    out.extend(crate::copy::all_sources());
    out
}

#[cfg(test)]
mod tests {
    /// A few kernels of every family (the first, middle and last variants), with the grid
    /// wait, built offline for sm_90a and for sm_80: a source that stops compiling for
    /// either fails here rather than on a GPU.
    #[test]
    fn every_kernel_family_builds_offline() {
        if !crate::nvrtc::loadable() {
            eprintln!("skipped: no libnvrtc on the library path (pip nvidia-cuda-nvrtc-cu12)");
            return;
        }
        let sources = super::all_sources();
        let family = |name: &str| name.split(['{', ' ']).next().unwrap_or("").to_string();
        let mut picked: Vec<(String, String)> = Vec::new();
        let mut i = 0;
        while i < sources.len() {
            let f = family(&sources[i].0);
            let n = sources[i..].iter().take_while(|(name, _)| family(name) == f).count();
            for j in [i, i + n / 2, i + n - 1] {
                if !picked.iter().any(|(name, _)| *name == sources[j].0) {
                    picked.push(sources[j].clone());
                }
            }
            i += n;
        }
        let failures = crate::nvrtc::problems_in_parallel(&picked, |name, src| {
            // (the Hopper forms exist for sm_90a only)
            let archs: &[&str] =
                if name.contains("Hopper") { &["sm_90a"] } else { &["sm_90a", "sm_80"] };
            let built = archs.iter().map(|&arch| (arch, crate::nvrtc::compile(src, arch)));
            built.filter_map(|(arch, r)| r.err().map(|e| format!("{name} ({arch}): {e}"))).collect()
        });
        assert!(failures.is_empty(), "{}", failures.join("\n\n"));
    }

    /// Every kernel entry of every variant gets the grid wait (an entry the transform
    /// missed would race its predecessor under an early launch).
    #[test]
    fn every_kernel_starts_with_the_grid_wait() {
        for (name, src) in super::all_sources() {
            let entries = src
                .lines()
                .filter(|l| l.trim_start().starts_with("extern \"C\" __global__"))
                .count();
            let waited = crate::nvrtc::with_grid_wait(&src);
            let waits = waited.matches("griddepcontrol.wait").count();
            assert!(entries >= 1 && waits == entries, "{name}: {entries} entries, {waits} waits");
        }
    }

    #[test]
    fn dump() {
        let sources = super::all_sources();
        assert!(sources.len() > 100);
        if let Some(dir) = std::env::var_os("KILN_CUDA_DUMP") {
            let dir = std::path::PathBuf::from(dir);
            std::fs::create_dir_all(&dir).unwrap();
            for (name, src) in &sources {
                let file: String =
                    name.chars().map(|c| if c.is_ascii_alphanumeric() { c } else { '_' }).collect();
                std::fs::write(dir.join(format!("{file}.cu")), src).unwrap();
            }
        }
    }
}
