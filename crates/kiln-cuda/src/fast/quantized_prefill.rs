//! `quantized_matmul` of many rows (16 or more: a prompt's prefill): the packed weights are dequantized
//! a block of features at a time into a scratch matrix of the activations' dtype, each weight
//! rounded as `dequantize` rounds it, and cuBLAS multiplies on the tensor cores, writing the
//! block's columns of the output in place. Below `MIN_ROWS` rows the gathered kernel, which
//! reads the packed weights directly on the CUDA cores, is faster; above it the tensor cores
//! win by far (a 512-token prompt reuses each weight 512 times), and the scratch (at most
//! `block_bytes()`, reused block after block in stream order) keeps the memory bounded.

use super::gathered::UNPACK;
use super::{header, ptr};
use crate::copy::empty;
use crate::launch::{blocks_for, launch, Args};
use crate::nvrtc::KernelCache;
use kiln_base::{ArrayData, DType, Result};
use std::fmt::Write;

const SYMBOL: &str = "kiln_dequantize_rows";
/// Rows of x from which the dequantize-then-cuBLAS path takes the product.
pub(crate) const MIN_ROWS: usize = 16;

/// Bytes of dequantized weights per block (`KILN_CUDA_DEQUANT_BLOCK` bytes, read once; for
/// tests of the block walk): 64 MiB by default, 8192 features of a 4096-wide bf16 matrix.
fn block_bytes() -> usize {
    static BYTES: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *BYTES.get_or_init(|| {
        std::env::var("KILN_CUDA_DEQUANT_BLOCK")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(64 << 20)
    })
}

/// A thread per unit of 32 weights: their `BITS` words, the group's scale and bias, 32
/// values written with 16-byte stores.
const BODY: &str = r#"
extern "C" __global__ void kiln_dequantize_rows(
    const int64_t rows, const int64_t k, const uint32_t *__restrict__ w,
    const S *__restrict__ scales, const S *__restrict__ biases, S *__restrict__ out) {
    const int64_t units = k / 32, total = rows * units;
    for (int64_t t = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; t < total;
         t += (int64_t)gridDim.x * blockDim.x) {
        const int64_t r = t / units, u = t % units;
        uint32_t wv[BITS];
        k_words(w + t * BITS, wv);
        const int64_t g = r * (k / GROUP) + u * 32 / GROUP;
        const float s = k_load(scales[g]), b = k_load(biases[g]);
        __align__(16) S vals[32];
        #pragma unroll
        for (int i = 0; i < 32; ++i) vals[i] = k_store(k_dequant(s, k_value(wv, i), b));
        uint4 *dst = (uint4 *)(out + r * k + u * 32);
        const uint4 *src = (const uint4 *)vals;
        #pragma unroll
        for (int i = 0; i < (int)(32 * sizeof(S) / 16); ++i) dst[i] = src[i];
    }
}
"#;

#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub(crate) struct Key {
    pub dtype: DType,
    pub group_size: usize,
    pub bits: u32,
}

pub(crate) fn source(key: &Key) -> String {
    let mut s = header(key.dtype);
    let _ = writeln!(s, "#define GROUP {}\n#define BITS {}", key.group_size, key.bits);
    s.push_str(UNPACK);
    s.push_str(BODY);
    s
}

static KERNELS: KernelCache<Key> = KernelCache::new();

/// `x @ dequantize(w).T` (x row-major (..., K), w (N, K * bits / 32) words, scales and
/// biases (N, K / group_size), all of x's dtype, 16-byte aligned as `packed_inputs` makes
/// them), or `None` below `MIN_ROWS` rows or for another layout of dtypes.
pub(crate) fn product(
    x: &ArrayData,
    w: &ArrayData,
    scales: &ArrayData,
    biases: &ArrayData,
    group_size: usize,
    bits: u32,
    shape: &[usize],
) -> Result<Option<ArrayData>> {
    let k = *x.layout.shape.last().unwrap_or(&0);
    let n = w.layout.shape[0];
    let rows = x.layout.size().checked_div(k).unwrap_or(0);
    let same = scales.dtype == x.dtype && biases.dtype == x.dtype;
    let float = matches!(x.dtype, DType::F32 | DType::F16 | DType::BF16);
    if rows < MIN_ROWS || n == 0 || k == 0 || !k.is_multiple_of(32) || !same || !float {
        return Ok(None);
    }
    let key = Key { dtype: x.dtype, group_size, bits };
    let kernel = KERNELS.get(&key, SYMBOL, || source(&key))?;
    let out = empty(shape, x.dtype)?;
    let row_bytes = k * x.dtype.size();
    let block = (block_bytes() / row_bytes).clamp(1, n);
    let scratch = empty(&[block, k], x.dtype)?;
    let words_per_row = k * bits as usize / 32;
    let groups_per_row = k / group_size;
    let base = out.buffer.as_ptr() as u64;
    for f0 in (0..n).step_by(block) {
        let nb = block.min(n - f0);
        let mut args = Args::new();
        args.i64(nb as i64).i64(k as i64);
        args.ptr(ptr(w) + (f0 * words_per_row * 4) as u64);
        args.ptr(ptr(scales) + (f0 * groups_per_row * x.dtype.size()) as u64);
        args.ptr(ptr(biases) + (f0 * groups_per_row * x.dtype.size()) as u64);
        args.ptr(ptr(&scratch));
        launch(SYMBOL, kernel, blocks_for((nb * k / 32) as u64, 256), 256, 0, &mut args)?;
        let col = base + (f0 * x.dtype.size()) as u64;
        crate::matmul::linear_into(x.dtype, (rows, nb, k), ptr(x), ptr(&scratch), col, n)?;
    }
    Ok(Some(out))
}

#[cfg(test)]
pub(crate) fn all_sources() -> Vec<(String, String)> {
    let mut out = Vec::new();
    for dtype in [DType::F32, DType::F16, DType::BF16] {
        for bits in [2, 3, 4, 5, 6, 8] {
            for group_size in [32, 64, 128] {
                let key = Key { dtype, group_size, bits };
                out.push((format!("dequantize_rows_{key:?}"), source(&key)));
            }
        }
    }
    out
}
