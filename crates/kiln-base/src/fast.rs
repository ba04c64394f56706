//! `mx.fast`'s fused primitives: their parameters and shape rules, kept in one place so the
//! ops layer and shapeless compile replay share the checks (as `conv.rs` and `linalg.rs`).
//! Front ends promote inputs to one dtype first; these rules check the promoted inputs.

use crate::shape::{fmt_shape, Shape};
use crate::{bail, ensure, DType, Result, Scalar};
use std::sync::Arc;

/// The mask input of `FastOp::Attention`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum AttentionMask {
    None,
    /// Query `i` sees key `j` when `j <= i + Lk - Lq` (lower-right aligned, as MLX).
    Causal,
    /// A fourth input added to the scaled scores (dtype of q; each dim 1 or full).
    Additive,
    /// A fourth bool input: false hides the key (each dim 1 or full).
    Boolean,
}

/// A user's C kernel (`mx.fast.c_kernel`): the complete generated source and what it makes.
#[derive(Debug, Clone, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct CKernelSpec {
    /// The kernel's name (error messages).
    pub name: String,
    /// Complete C source defining `kiln_c_kernel` (see kiln-cpu `fast/c_kernel.rs`).
    pub source: String,
    pub num_inputs: usize,
    pub output_shapes: Vec<Shape>,
    pub output_dtypes: Vec<DType>,
    /// Every output element starts at this value; zero when `None`.
    pub init_value: Option<Scalar>,
    /// Inputs are copied to row-major first; otherwise they arrive with their strides.
    pub ensure_row_contiguous: bool,
}

/// A user's CUDA kernel (`mx.fast.cuda_kernel`): the complete generated source (see kiln-cuda
/// `fast/cuda_kernel.rs`), its entry point and its launch configuration.
#[derive(Debug, Clone, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct CudaKernelSpec {
    /// The kernel's name (error messages).
    pub name: String,
    /// Complete CUDA C++ source defining `symbol` as an `extern "C" __global__` function.
    pub source: String,
    pub symbol: String,
    pub num_inputs: usize,
    pub output_shapes: Vec<Shape>,
    pub output_dtypes: Vec<DType>,
    /// Every output element starts at this value; uninitialised when `None` (as MLX).
    pub init_value: Option<Scalar>,
    /// Inputs are copied to row-major first; otherwise they arrive with their strides.
    pub ensure_row_contiguous: bool,
    /// Threads in each dimension (as MLX: blocks = ceil(grid / threadgroup)).
    pub grid: [u32; 3],
    /// Threads per block in each dimension.
    pub threadgroup: [u32; 3],
    /// Bytes of dynamic shared memory.
    pub shared_memory: u32,
}

impl CudaKernelSpec {
    /// Blocks and threads per block for MLX's (grid in threads, threadgroup) pair: a block
    /// never has more threads than the grid asks for in a dimension; the last block may
    /// overhang.
    pub fn launch_dims(&self) -> ([u32; 3], [u32; 3]) {
        let mut blocks = [1; 3];
        let mut threads = [1; 3];
        for d in 0..3 {
            threads[d] = self.threadgroup[d].min(self.grid[d]).max(1);
            blocks[d] = self.grid[d].div_ceil(threads[d]);
        }
        (blocks, threads)
    }
}

/// A template argument of a user kernel: a C++ template parameter of a CUDA kernel, a
/// `#define` in a C kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum TemplateArg {
    Int(i64),
    Bool(bool),
    DType(DType),
}

/// One fused `mx.fast` operation. Scalars are `Scalar::Float` (hashed by bit pattern).
#[derive(Debug, Clone, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum FastOp {
    /// Inputs: `x` (..., D), then `weight` (D,) and `bias` (D,) when present, one float dtype.
    LayerNorm { eps: Scalar, weight: bool, bias: bool },
    /// Inputs: `x` (..., D), then `weight` (D,) when present, one float dtype.
    RmsNorm { eps: Scalar, weight: bool },
    /// The vjp of `LayerNorm` in one kernel. Inputs: `x` (..., D), `weight` (D,) when
    /// present, then the cotangent `g` (x's shape), one float dtype. Outputs: `dx`, then
    /// `dweight` and `dbias` ((D,), sums over rows) when `weight` and `bias`. The statistics
    /// are recomputed from `x` (no saved state, so compile and vmap see a plain function).
    LayerNormVjp { eps: Scalar, weight: bool, bias: bool },
    /// The vjp of `RmsNorm`: inputs `x`, `weight` when present, `g`; outputs `dx`, then
    /// `dweight` when `weight`.
    RmsNormVjp { eps: Scalar, weight: bool },
    /// Inputs: `x` (B, ..., T, D) float, `offset` (integer, one value or one per B), then
    /// `freqs` (dims/2,) float32 when `freqs`; otherwise frequencies are `base^(-2i/dims)`.
    /// `inverse` rotates the other way (the transpose, used by the gradient).
    Rope { dims: usize, traditional: bool, base: Scalar, scale: Scalar, freqs: bool, inverse: bool },
    /// `softmax(scale q kᵀ + mask) v` over q (B, Hq, Lq, D), k (B, Hk, Lk, D), v (B, Hk, Lk, Dv)
    /// of one float dtype, `Hq` a multiple of `Hk` (grouped-query attention).
    Attention { scale: Scalar, mask: AttentionMask },
    /// Attention's training forward: `Attention`'s inputs (mask `None` or `Causal` only) and
    /// two outputs, `o` and the float32 row logsumexp `lse` (B, Hq, Lq) of the scaled,
    /// masked scores (natural log; a row that sees no key has `log(Lk)`, its scores taken
    /// as equal). What the fused backward needs.
    AttentionTrain { scale: Scalar, mask: AttentionMask },
    /// Attention's fused backward. Inputs: q, k, v, o (of one float dtype), lse (float32,
    /// from `AttentionTrain`) and `do` (o's cotangent, o's dtype); outputs dq, dk, dv. Mask
    /// `None` or `Causal` only. (lse's own cotangent is always zero: lse only ever feeds
    /// this op, whose rules give it none.)
    AttentionVjp { scale: Scalar, mask: AttentionMask },
    /// `x @ dequantize(w).T` for MLX's affine quantization without a dense copy of the
    /// weights (the decode step of a quantized model). Inputs: `x` (..., K) float, `w`
    /// (N, K * bits / 32) uint32, `scales` and `biases` (N, K / group_size) of x's dtype.
    /// Output (..., N) of x's dtype.
    QuantizedMatmul { group_size: usize, bits: u32 },
    /// `gather_mm` reading each picked matrix in place (no gathered copies). Inputs: `a`
    /// (A..., M, K) and `b` (B..., K, N) of one float dtype, then `lhs` and `rhs` (I...)
    /// uint32 flat indices over the batch axes of `a` and `b` (one shape). Output (I..., M, N).
    GatherMm,
    /// `gather_qmm` with `transpose`: `x[lhs] @ dequantize(w[rhs]).T` for MLX's affine
    /// quantization, each expert's packed rows read in place. Inputs: `x` (X..., M, K) float,
    /// `w` (E..., N, K * bits / 32) uint32, `scales` and `biases` (E..., N, K / group_size)
    /// of x's dtype, then `lhs` and `rhs` (I...) uint32. Output (I..., M, N) of x's dtype.
    GatherQmm { group_size: usize, bits: u32 },
    /// A user C kernel (several outputs).
    CKernel(Arc<CKernelSpec>),
    /// A user CUDA kernel (several outputs; GPU only).
    CudaKernel(Arc<CudaKernelSpec>),
}

impl FastOp {
    pub fn name(&self) -> &'static str {
        match self {
            FastOp::LayerNorm { .. } => "layer_norm",
            FastOp::RmsNorm { .. } => "rms_norm",
            FastOp::LayerNormVjp { .. } => "layer_norm_vjp",
            FastOp::RmsNormVjp { .. } => "rms_norm_vjp",
            FastOp::Rope { .. } => "rope",
            FastOp::Attention { .. } | FastOp::AttentionTrain { .. } => {
                "scaled_dot_product_attention"
            }
            FastOp::AttentionVjp { .. } => "scaled_dot_product_attention_vjp",
            FastOp::QuantizedMatmul { .. } => "quantized_matmul",
            FastOp::GatherMm => "gather_mm",
            FastOp::GatherQmm { .. } => "gather_qmm",
            FastOp::CKernel(_) => "c_kernel",
            FastOp::CudaKernel(_) => "cuda_kernel",
        }
    }

    pub fn num_inputs(&self) -> usize {
        match self {
            FastOp::LayerNorm { weight, bias, .. } => 1 + *weight as usize + *bias as usize,
            FastOp::RmsNorm { weight, .. } => 1 + *weight as usize,
            FastOp::LayerNormVjp { weight, .. } | FastOp::RmsNormVjp { weight, .. } => {
                2 + *weight as usize
            }
            FastOp::Rope { freqs, .. } => 2 + *freqs as usize,
            FastOp::Attention { mask, .. } => {
                3 + matches!(mask, AttentionMask::Additive | AttentionMask::Boolean) as usize
            }
            FastOp::AttentionTrain { .. } => 3,
            FastOp::AttentionVjp { .. } => 6,
            FastOp::QuantizedMatmul { .. } | FastOp::GatherMm => 4,
            FastOp::GatherQmm { .. } => 6,
            FastOp::CKernel(spec) => spec.num_inputs,
            FastOp::CudaKernel(spec) => spec.num_inputs,
        }
    }

    pub fn num_outputs(&self) -> usize {
        match self {
            FastOp::CKernel(spec) => spec.output_shapes.len(),
            FastOp::CudaKernel(spec) => spec.output_shapes.len(),
            FastOp::LayerNormVjp { weight, bias, .. } => 1 + *weight as usize + *bias as usize,
            FastOp::RmsNormVjp { weight, .. } => 1 + *weight as usize,
            FastOp::AttentionTrain { .. } => 2,
            FastOp::AttentionVjp { .. } => 3,
            _ => 1,
        }
    }

    /// Output shapes and dtypes (every check; the arity is checked by the caller).
    pub fn output_shapes(&self, inputs: &[(&[usize], DType)]) -> Result<Vec<(Shape, DType)>> {
        let op = self.name();
        match self {
            FastOp::LayerNorm { .. } | FastOp::RmsNorm { .. } => {
                let (s, d) = inputs[0];
                ensure!(d.is_float(), Type, op, "Received unsupported type {d}.");
                let Some(&last) = s.last() else {
                    bail!(
                        Value,
                        op,
                        "Input must have at least 1 dimension but got input with 0 dimensions."
                    );
                };
                for &(ws, wd) in &inputs[1..] {
                    ensure!(wd == d, Type, op, "Weight and bias must have the dtype of x.");
                    ensure!(
                        ws == [last],
                        Value,
                        op,
                        "Weight and bias must have shape ({last},), got {}.",
                        fmt_shape(ws)
                    );
                }
                Ok(vec![(Shape::from(s), d)])
            }
            FastOp::LayerNormVjp { weight, .. } | FastOp::RmsNormVjp { weight, .. } => {
                let (s, d) = inputs[0];
                ensure!(d.is_float(), Type, op, "Received unsupported type {d}.");
                let Some(&last) = s.last() else {
                    bail!(
                        Value,
                        op,
                        "Input must have at least 1 dimension but got input with 0 dimensions."
                    );
                };
                let n_in = 2 + *weight as usize;
                for &(ws, wd) in &inputs[1..n_in - 1] {
                    ensure!(wd == d, Type, op, "The weight must have the dtype of x.");
                    ensure!(
                        ws == [last],
                        Value,
                        op,
                        "The weight must have shape ({last},), got {}.",
                        fmt_shape(ws)
                    );
                }
                let (gs, gd) = inputs[n_in - 1];
                ensure!(gd == d, Type, op, "The cotangent must have the dtype of x.");
                ensure!(
                    gs == s,
                    Value,
                    op,
                    "The cotangent must have the shape of x {}, got {}.",
                    fmt_shape(s),
                    fmt_shape(gs)
                );
                let mut out = vec![(Shape::from(s), d)];
                out.extend((1..self.num_outputs()).map(|_| (Shape::from_slice(&[last]), d)));
                Ok(out)
            }
            FastOp::Rope { dims, freqs, .. } => {
                let (s, d) = inputs[0];
                ensure!(d.is_float(), Type, op, "Input must be a floating type but got {d}.");
                ensure!(
                    s.len() >= 2,
                    Value,
                    op,
                    "Input must have at least 2 dimensions, got {}.",
                    s.len()
                );
                ensure!(*dims % 2 == 0, Value, op, "dims must be even but got {dims}.");
                let last = s[s.len() - 1];
                ensure!(*dims <= last, Value, op, "dims {dims} exceeds the feature size {last}.");
                let (os, od) = inputs[1];
                ensure!(od.is_integer(), Value, op, "offset must be an integer but got type {od}.");
                let count: usize = os.iter().product();
                ensure!(
                    os.len() <= 1 && (count == 1 || count == s[0]),
                    Value,
                    op,
                    "offset must be a scalar or vector with {} elements but has shape {}.",
                    s[0],
                    fmt_shape(os)
                );
                if *freqs {
                    let (fs, fd) = inputs[2];
                    ensure!(fd == DType::F32, Type, op, "freqs must be float32.");
                    ensure!(
                        fs == [dims / 2],
                        Value,
                        op,
                        "freqs must be one dimensional with size {} but got shape {}.",
                        dims / 2,
                        fmt_shape(fs)
                    );
                }
                Ok(vec![(Shape::from(s), d)])
            }
            FastOp::Attention { mask, .. } => {
                let [(q, dq), (k, dk), (v, dv)] = [inputs[0], inputs[1], inputs[2]];
                ensure!(dq.is_float(), Type, op, "Expected float inputs, got {dq}.");
                ensure!(dq == dk && dk == dv, Type, op, "q, k and v must have one dtype.");
                for s in [q, k, v] {
                    ensure!(
                        s.len() == 4,
                        Value,
                        op,
                        "input with shape {} expected to be rank 4",
                        fmt_shape(s)
                    );
                }
                ensure!(
                    q[0] == k[0] && k[0] == v[0] && k[1] == v[1] && k[2] == v[2],
                    Value,
                    op,
                    "Incompatible shapes: q {}, k {}, v {}.",
                    fmt_shape(q),
                    fmt_shape(k),
                    fmt_shape(v)
                );
                ensure!(
                    q[3] == k[3],
                    Value,
                    op,
                    "query, keys expected to have matching last dimension; found query \
                     shape {} for keys shape {}.",
                    fmt_shape(q),
                    fmt_shape(k)
                );
                ensure!(
                    k[1] > 0 && q[1] % k[1] == 0,
                    Value,
                    op,
                    "n_heads must be a multiple of n_kv_heads, found n_heads {} for \
                     n_kv_heads {}.",
                    q[1],
                    k[1]
                );
                if matches!(mask, AttentionMask::Additive | AttentionMask::Boolean) {
                    let (m, dm) = inputs[3];
                    let want = if *mask == AttentionMask::Boolean { DType::Bool } else { dq };
                    ensure!(dm == want, Type, op, "Expected a {want} mask, got {dm}.");
                    let full = [q[0], q[1], q[2], k[2]];
                    ensure!(
                        m.len() == 4 && m.iter().zip(full).all(|(&a, b)| a == 1 || a == b),
                        Value,
                        op,
                        "Mask of shape {} does not broadcast to {}.",
                        fmt_shape(m),
                        fmt_shape(&full)
                    );
                }
                Ok(vec![(Shape::from_slice(&[q[0], q[1], q[2], v[3]]), dq)])
            }
            FastOp::AttentionTrain { scale, mask } => {
                train_mask(op, *mask)?;
                let fwd = FastOp::Attention { scale: *scale, mask: *mask };
                let (o, d) = fwd.output_shapes(inputs)?.remove(0);
                let lse = Shape::from_slice(&o[..3]);
                Ok(vec![(o, d), (lse, DType::F32)])
            }
            FastOp::AttentionVjp { scale, mask } => {
                train_mask(op, *mask)?;
                let fwd = FastOp::AttentionTrain { scale: *scale, mask: *mask };
                let outs = fwd.output_shapes(&inputs[..3])?;
                let d = inputs[0].1;
                // o, lse and do: the forward's outputs and o's cotangent.
                for (i, (want, wd)) in [3, 4, 5].into_iter().zip([&outs[0], &outs[1], &outs[0]]) {
                    let (s, sd) = inputs[i];
                    ensure!(
                        s == want.as_slice() && sd == *wd,
                        Value,
                        op,
                        "Input {i} has shape {} and dtype {sd}, expected {} and {wd}.",
                        fmt_shape(s),
                        fmt_shape(want)
                    );
                }
                Ok([0, 1, 2].map(|i| (Shape::from(inputs[i].0), d)).to_vec())
            }
            FastOp::QuantizedMatmul { group_size, bits } => {
                let x = inputs[0].0;
                let Some(&k) = x.last() else {
                    bail!(Value, op, "Expected x (..., K), got {}.", fmt_shape(x));
                };
                ensure!(inputs[1].0.len() == 2, Value, op, "Expected a 2-d w.");
                let (n, dx) = packed_matrix(op, &inputs[..4], k, *group_size, *bits)?;
                let mut out = x.to_vec();
                *out.last_mut().expect("x has an axis") = n;
                Ok(vec![(Shape::from(out.as_slice()), dx)])
            }
            FastOp::GatherMm => {
                let [(a, da), (b, db)] = [inputs[0], inputs[1]];
                ensure!(da.is_float(), Type, op, "Expected float inputs, got {da}.");
                ensure!(da == db, Type, op, "a and b must have one dtype.");
                ensure!(
                    a.len() >= 2 && b.len() >= 2 && a[a.len() - 1] == b[b.len() - 2],
                    Value,
                    op,
                    "Shapes {} and {} do not multiply.",
                    fmt_shape(a),
                    fmt_shape(b)
                );
                let idx = gather_indices(op, &inputs[2..4])?;
                Ok(vec![(matrix_batch(idx, a[a.len() - 2], b[b.len() - 1]), da)])
            }
            FastOp::GatherQmm { group_size, bits } => {
                let x = inputs[0].0;
                ensure!(x.len() >= 2, Value, op, "x must have at least 2 dimensions.");
                let w = inputs[1].0;
                ensure!(w.len() >= 2, Value, op, "w must have at least 2 dimensions.");
                let (n, dx) = packed_matrix(op, &inputs[..4], x[x.len() - 1], *group_size, *bits)?;
                let idx = gather_indices(op, &inputs[4..6])?;
                Ok(vec![(matrix_batch(idx, x[x.len() - 2], n), dx)])
            }
            FastOp::CKernel(spec) => user_outputs(op, &spec.output_shapes, &spec.output_dtypes),
            FastOp::CudaKernel(spec) => user_outputs(op, &spec.output_shapes, &spec.output_dtypes),
        }
    }
}

/// Checks MLX's affine layout of `[x, w, scales, biases]` for `x @ dequantize(w).T` with
/// `k` features: `w` (..., N, K * bits / 32) uint32, `scales` and `biases` (..., N,
/// K / group_size) of x's dtype. Returns N and x's dtype.
fn packed_matrix(
    op: &'static str,
    inputs: &[(&[usize], DType)],
    k: usize,
    group_size: usize,
    bits: u32,
) -> Result<(usize, DType)> {
    let [(x, dx), (w, dw), (s, ds), (b, db)] = [0, 1, 2, 3].map(|i| inputs[i]);
    ensure!(dx.is_float(), Type, op, "x must be floating point, got {dx}.");
    ensure!(dw == DType::U32, Type, op, "w must be uint32, got {dw}.");
    ensure!(ds == dx && db == dx, Type, op, "scales and biases must have x's dtype.");
    let nd = w.len();
    let (n, words) = (w[nd - 2], w[nd - 1]);
    let groups = k / group_size.max(1);
    let mut params = w.to_vec();
    params[nd - 1] = groups;
    ensure!(
        group_size > 0
            && (1..=8).contains(&bits)
            && k.is_multiple_of(group_size)
            && words * 32 == k * bits as usize
            && s == params.as_slice()
            && b == params.as_slice(),
        Value,
        op,
        "Shapes x {}, w {}, scales {}, biases {} do not fit group_size {group_size} and \
         bits {bits}.",
        fmt_shape(x),
        fmt_shape(w),
        fmt_shape(s),
        fmt_shape(b)
    );
    Ok((n, dx))
}

/// The two index inputs of a gathered product: uint32, one shape (returned).
fn gather_indices<'a>(op: &'static str, inputs: &[(&'a [usize], DType)]) -> Result<&'a [usize]> {
    let [(l, dl), (r, dr)] = [inputs[0], inputs[1]];
    ensure!(dl == DType::U32 && dr == DType::U32, Type, op, "Indices must be uint32.");
    ensure!(l == r, Value, op, "Indices of shapes {} and {} differ.", fmt_shape(l), fmt_shape(r));
    Ok(l)
}

/// `(batch..., rows, cols)`.
fn matrix_batch(batch: &[usize], rows: usize, cols: usize) -> Shape {
    let mut out = batch.to_vec();
    out.extend([rows, cols]);
    Shape::from(out.as_slice())
}

/// The training forward and the fused backward take no mask arrays.
fn train_mask(op: &'static str, mask: AttentionMask) -> Result<()> {
    ensure!(
        matches!(mask, AttentionMask::None | AttentionMask::Causal),
        Value,
        op,
        "The fused attention backward takes no mask array."
    );
    Ok(())
}

/// A user kernel's outputs: the shapes and dtypes it declares, one dtype per shape.
fn user_outputs(
    op: &'static str,
    shapes: &[Shape],
    dtypes: &[DType],
) -> Result<Vec<(Shape, DType)>> {
    ensure!(shapes.len() == dtypes.len(), Value, op, "Expected one output dtype per output shape.");
    Ok(shapes.iter().cloned().zip(dtypes.iter().copied()).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dims(grid: [u32; 3], threadgroup: [u32; 3]) -> ([u32; 3], [u32; 3]) {
        let spec = CudaKernelSpec {
            name: "k".into(),
            source: String::new(),
            symbol: "k".into(),
            num_inputs: 0,
            output_shapes: Vec::new(),
            output_dtypes: Vec::new(),
            init_value: None,
            ensure_row_contiguous: true,
            grid,
            threadgroup,
            shared_memory: 0,
        };
        spec.launch_dims()
    }

    #[test]
    fn grid_in_threads() {
        assert_eq!(dims([1000, 1, 1], [256, 1, 1]), ([4, 1, 1], [256, 1, 1]));
        assert_eq!(dims([10, 3, 1], [256, 4, 4]), ([1, 1, 1], [10, 3, 1]));
        assert_eq!(dims([512, 64, 2], [32, 8, 1]), ([16, 8, 2], [32, 8, 1]));
    }
}
