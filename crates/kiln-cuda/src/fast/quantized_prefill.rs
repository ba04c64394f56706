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
use crate::launch::{blocks_covering, launch, Args};
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

/// Features per block: at most `block_bytes()` of dequantized rows, in blocks of nearly
/// equal size that are whole multiples of 64 features, so that every block's output columns
/// start 128-byte aligned (cuBLAS's fast kernels need aligned pointers: a 4096x14336 product
/// split at feature 2340 ran 3.3x slower than the dense one on the H200).
fn block_features(n: usize, row_bytes: usize, budget: usize) -> usize {
    const ALIGN: usize = 64;
    let most = (budget / row_bytes).max(1);
    if most >= n {
        return n;
    }
    let blocks = n.div_ceil(most);
    let even = n.div_ceil(blocks).next_multiple_of(ALIGN);
    if even <= most {
        even
    } else {
        (most / ALIGN * ALIGN).max(ALIGN.min(most))
    }
}

/// A block per row of weights (grid-stride over the rows: no divisions). Half floats at 4
/// bits take a word (8 weights) per thread, in pairs: `OFFSET + q` by one mask (the
/// `0x000F000F | magic` trick of `qmv_mma.rs`), then the subtraction, the product and the sum
/// each in the dtype's own two-lane arithmetic, rounded once as `dequantize` rounds them (the
/// float product of two half floats is exact, and a float sum rounded to a half float equals
/// the half float's own sum); consecutive threads store consecutive 16 bytes. Other widths
/// take a unit of 32 weights (`BITS` words) per thread.
const BODY: &str = r#"
#if PAIRS
#if IS_BF16
#define MAGIC 0x43004300u /* 128.0 in both halves: 128 + q is exact */
#define ONE2 0x3F803F80u
#define NEG_ZERO2 0x80008000u
#define HFMA2 "fma.rn.bf16x2"
#else
#define MAGIC 0x64006400u /* 1024.0: 1024 + q is exact */
#define ONE2 0x3C003C00u
#define NEG_ZERO2 0x80008000u
#define HFMA2 "fma.rn.f16x2"
#endif
K_INLINE uint32_t k_hfma2(uint32_t a, uint32_t b, uint32_t c) {
    uint32_t d;
    asm(HFMA2 " %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
    return d;
}
/* Weights j and j + 4 of a word, dequantized: round(round(scale * q) + bias) in each half. */
K_INLINE uint32_t k_pair(uint32_t word, int j, uint32_t s2, uint32_t b2) {
    const uint32_t q = k_hfma2(((word >> (4 * j)) & 0x000F000Fu) | MAGIC, ONE2, MAGIC ^ NEG_ZERO2);
    return k_hfma2(k_hfma2(q, s2, NEG_ZERO2), ONE2, b2);
}
#endif

extern "C" __global__ void kiln_dequantize_rows(
    const int64_t rows, const int64_t k, const uint32_t *__restrict__ w,
    const S *__restrict__ scales, const S *__restrict__ biases, S *__restrict__ out) {
    const int64_t groups = k / GROUP;
#if PAIRS
    const int64_t words = k / 8;
    for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
        for (int64_t u = threadIdx.x; u < words; u += blockDim.x) {
            const uint32_t word = w[r * words + u];
            const int64_t g = r * groups + u * 8 / GROUP;
            const uint32_t s2 = (uint32_t)scales[g] * 0x00010001u, b2 = (uint32_t)biases[g] * 0x00010001u;
            const uint32_t p0 = k_pair(word, 0, s2, b2), p1 = k_pair(word, 1, s2, b2);
            const uint32_t p2 = k_pair(word, 2, s2, b2), p3 = k_pair(word, 3, s2, b2);
            /* p_j holds weights (j, j + 4): back to memory order */
            ((uint4 *)(out + r * k))[u] = make_uint4(__byte_perm(p0, p1, 0x5410), __byte_perm(p2, p3, 0x5410),
                                                     __byte_perm(p0, p1, 0x7632), __byte_perm(p2, p3, 0x7632));
        }
    }
#else
    const int64_t units = k / 32;
    for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
        for (int64_t u = threadIdx.x; u < units; u += blockDim.x) {
            uint32_t wv[BITS];
            k_words(w + (r * units + u) * BITS, wv);
            const int64_t g = r * groups + u * 32 / GROUP;
            const float s = k_load(scales[g]), b = k_load(biases[g]);
            __align__(16) S vals[32];
            #pragma unroll
            for (int i = 0; i < 32; ++i)
                vals[i] = k_store(__fadd_rn(k_load(k_store(__fmul_rn(s, k_value(wv, i)))), b));
            uint4 *dst = (uint4 *)(out + r * k + u * 32);
            const uint4 *src = (const uint4 *)vals;
            #pragma unroll
            for (int i = 0; i < (int)(32 * sizeof(S) / 16); ++i) dst[i] = src[i];
        }
    }
#endif
}
"#;

#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub(crate) struct Key {
    pub dtype: DType,
    pub group_size: usize,
    pub bits: u32,
}

/// Whether the two-lane half-float path dequantizes (4 bits of a half float).
fn pairs(key: &Key) -> bool {
    key.bits == 4 && matches!(key.dtype, DType::BF16 | DType::F16)
}

pub(crate) fn source(key: &Key) -> String {
    let mut s = header(key.dtype);
    let _ = writeln!(
        s,
        "#define GROUP {}\n#define BITS {}\n#define PAIRS {}\n#define IS_BF16 {}",
        key.group_size,
        key.bits,
        pairs(key) as u8,
        (key.dtype == DType::BF16) as u8
    );
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
    let block = block_features(n, k * x.dtype.size(), block_bytes());
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
        launch(SYMBOL, kernel, blocks_covering(nb as u64, 1), 256, 0, &mut args)?;
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

#[cfg(test)]
mod tests {
    use super::block_features;

    #[test]
    fn blocks_are_even_and_aligned() {
        let mib = 1 << 20;
        // 8B's down projection: 2 blocks of 2048, not 2340 + 1756.
        assert_eq!(block_features(4096, 14336 * 2, 64 * mib), 2048);
        assert_eq!(block_features(14336, 4096 * 2, 64 * mib), 7168);
        assert_eq!(block_features(4096, 4096 * 2, 64 * mib), 4096);
        // A budget that fits no even split rounds down to 64 features.
        assert_eq!(block_features(1000, 1024, 300 * 1024), 256);
        // Below 64 features a block: the budget as it is (tests of the walk).
        assert_eq!(block_features(300, 512, 7 * 512), 7);
    }
}
