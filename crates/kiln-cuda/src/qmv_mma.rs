//! 4-bit decode products on the tensor cores: `x @ dequantize(W).T` for x of at most 8 rows
//! (bfloat16 or float16) and W in MLX's affine layout with groups of 32, 64 or 128. On the
//! CUDA cores (`gemv.rs`) each weight costs a shift, a mask, a subtraction and a multiply-add,
//! which bounds a 4-bit product by arithmetic at a third of the bandwidth. Here two nibbles
//! become two half floats with one mask (`0x000F000F | magic` gives `OFFSET + q` in each half
//! of a register) and `mma.sync` does the products, so the product is bound by the bytes.
//!
//! A block is 8 features and 8 warps that split the groups between them. In one group each
//! lane (`g = lane / 4`, `c = lane % 4`) holds the words of feature `g` for a quarter of the
//! group (`c`) and the values of x row `g` for the same quarter; the mma's k order is a
//! permutation of the group's (nibbles `t` and `t + 4` of a word share a register), the same
//! for x and W, so the sum is the group's dot product. The accumulator gets
//! `scale * (d - OFFSET * sum(x)) + bias * sum(x)` per group, in float32. A group whose x holds
//! an inf or NaN is summed weight by weight as dequantize rounds them (the factored form would
//! turn `0 * inf` into a NaN where the definition has `bias * inf`).
//!
//! Off by default (`KILN_QMV_MMA=1` turns it on): correct on the H200 (test_cuda_gemv's
//! products) but slower there than the CUDA-core kernel in its first form, 49.7 against
//! 35.9 us for 14336x4096 and 60.7 against 38.4 for 4096x14336 (`bench/gathered_gpu.py`, one
//! run, launch and sync included). Each lane's per-group scale and bias loads (four scalar
//! loads for one 8-byte weight load) are the first suspect; measure with ncu before tuning.

use crate::copy::empty;
use crate::launch::{launch, Args};
use crate::nvrtc::{check_grid, Function, KernelCache};
use kiln_base::{ArrayData, DType, Result};
use std::fmt::Write;

const SYMBOL: &str = "kiln_qmv_mma";
const WARPS: usize = 8;
/// Features per block: the mma's n.
const FEATURES: usize = 8;

#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
struct Key {
    dtype: DType,
    group: usize,
}

const BODY: &str = r#"
#define NT (WARPS * 32)
#define WPT (GROUP / 32) /* words per lane per group */
#define WPG (GROUP / 8)  /* words per feature per group */
#if IS_BF16
#define MAGIC 0x43004300u /* bf16 128.0 in both halves: 128 + q is exact */
#define OFFSET 128.0f
#define MMA "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32"
#else
#define MAGIC 0x64006400u /* f16 1024.0: 1024 + q is exact */
#define OFFSET 1024.0f
#define MMA "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32"
#endif

/* c += A . B with A's rows 8..15 zero (x has at most 8 rows). */
K_INLINE void k_mma(float *c, uint32_t a0, uint32_t a2, uint32_t b0, uint32_t b1) {
    asm volatile(MMA " {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a0), "r"(0u), "r"(a2), "r"(0u), "r"(b0), "r"(b1));
}

K_INLINE float k_sum8(const uint4 a) {
    const uint32_t v[4] = {a.x, a.y, a.z, a.w};
    float s = 0.0f;
    #pragma unroll
    for (int i = 0; i < 4; ++i) s += k_load((S)(v[i] & 0xffffu)) + k_load((S)(v[i] >> 16));
    return s;
}

template <int N>
K_INLINE void k_wload(const uint32_t *__restrict__ p, uint32_t *o) {
    if (N == 4) {
        const uint4 a = __ldg((const uint4 *)p);
        o[0] = a.x; o[1] = a.y; o[2] = a.z; o[3] = a.w;
    } else if (N == 2) {
        const uint2 a = __ldg((const uint2 *)p);
        o[0] = a.x; o[1] = a.y;
    } else {
        o[0] = __ldg(p);
    }
}

/* One group of one feature and one row of x, weight by weight as dequantize rounds. */
K_INLINE float k_exact_group(const S *__restrict__ xg, const uint32_t *__restrict__ wg,
                             const float sc, const float bi) {
    float a = 0.0f;
    for (int t = 0; t < GROUP; ++t) {
        const uint32_t q = (__ldg(wg + t / 8) >> (4 * (t % 8))) & 15u;
        a = fmaf(k_load(xg[t]), k_dequant(sc, (float)q, bi), a);
    }
    return a;
}

extern "C" __global__ void __launch_bounds__(NT) kiln_qmv_mma(
        const int64_t rows, const int64_t n, const int64_t k, const int64_t ldw,
        const S *__restrict__ x, const uint32_t *__restrict__ w, const S *__restrict__ scales,
        const S *__restrict__ biases, S *__restrict__ out) {
    __shared__ float red[WARPS][8][8]; /* [warp][row][feature] */
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int g = lane >> 2, c = lane & 3;
    const int64_t f0 = (int64_t)blockIdx.x * 8;
    const int64_t fb = f0 + g < n ? f0 + g : n - 1;                /* feature of my words */
    const int64_t fc0 = f0 + 2 * c < n ? f0 + 2 * c : n - 1;       /* features of my sums */
    const int64_t fc1 = f0 + 2 * c + 1 < n ? f0 + 2 * c + 1 : n - 1;
    const int64_t groups = k / GROUP;
    const bool has_row = g < rows;
    const S *xr = x + (has_row ? g : 0) * k;
    const uint32_t *wr = w + fb * ldw + c * WPT;
    float acc0 = 0.0f, acc1 = 0.0f;
    for (int64_t h0 = warp; h0 < groups; h0 += (int64_t)U * WARPS) {
        uint32_t wq[U][WPT];
        float sc[U][2], bi[U][2];
        #pragma unroll
        for (int s = 0; s < U; ++s) {
            const int64_t h = h0 + (int64_t)s * WARPS;
            if (h < groups) {
                k_wload<WPT>(wr + h * WPG, wq[s]);
                sc[s][0] = k_load(scales[fc0 * groups + h]);
                sc[s][1] = k_load(scales[fc1 * groups + h]);
                bi[s][0] = k_load(biases[fc0 * groups + h]);
                bi[s][1] = k_load(biases[fc1 * groups + h]);
            }
        }
        #pragma unroll
        for (int s = 0; s < U; ++s) {
            const int64_t h = h0 + (int64_t)s * WARPS; /* the same for the whole warp */
            if (h < groups) {
                float d[4] = {0.0f, 0.0f, 0.0f, 0.0f};
                float xs = 0.0f;
                #pragma unroll
                for (int v = 0; v < WPT; ++v) {
                    uint4 xa = make_uint4(0u, 0u, 0u, 0u);
                    if (has_row) xa = __ldg((const uint4 *)(xr + h * GROUP + (c * WPT + v) * 8));
                    xs += k_sum8(xa);
                    const uint32_t q = wq[s][v];
                    /* nibbles t and t + 4 of the word pair with x values t and t + 4 */
                    k_mma(d, __byte_perm(xa.x, xa.z, 0x5410), __byte_perm(xa.x, xa.z, 0x7632),
                          (q & 0x000F000Fu) | MAGIC, ((q >> 4) & 0x000F000Fu) | MAGIC);
                    k_mma(d, __byte_perm(xa.y, xa.w, 0x5410), __byte_perm(xa.y, xa.w, 0x7632),
                          ((q >> 8) & 0x000F000Fu) | MAGIC, ((q >> 12) & 0x000F000Fu) | MAGIC);
                }
                xs += __shfl_xor_sync(0xffffffffu, xs, 1);
                xs += __shfl_xor_sync(0xffffffffu, xs, 2);
                if (isfinite(xs)) {
                    acc0 = fmaf(sc[s][0], fmaf(-OFFSET, xs, d[0]), fmaf(bi[s][0], xs, acc0));
                    acc1 = fmaf(sc[s][1], fmaf(-OFFSET, xs, d[1]), fmaf(bi[s][1], xs, acc1));
                } else {
                    const S *xg = xr + h * GROUP;
                    acc0 += k_exact_group(xg, w + fc0 * ldw + h * WPG, sc[s][0], bi[s][0]);
                    acc1 += k_exact_group(xg, w + fc1 * ldw + h * WPG, sc[s][1], bi[s][1]);
                }
            }
        }
    }
    red[warp][g][2 * c] = acc0;
    red[warp][g][2 * c + 1] = acc1;
    __syncthreads();
    if (threadIdx.x < 64) {
        const int r = threadIdx.x >> 3, j = threadIdx.x & 7;
        if (r < rows && f0 + j < n) {
            float a = 0.0f;
            #pragma unroll
            for (int v = 0; v < WARPS; ++v) a += red[v][r][j];
            out[r * n + f0 + j] = k_store(a);
        }
    }
}
"#;

fn source(key: &Key) -> String {
    let mut s = crate::fast::header(key.dtype);
    // Groups loaded ahead per warp: about 16 words of registers.
    let ahead = (16 / (key.group / 32)).clamp(2, 8);
    let _ = write!(
        s,
        "#define GROUP {}\n#define U {ahead}\n#define WARPS {WARPS}\n#define IS_BF16 {}\n",
        key.group,
        (key.dtype == DType::BF16) as u8
    );
    s.push_str(BODY);
    s
}

static KERNELS: KernelCache<Key> = KernelCache::new();

/// Whether this kernel takes a product: 4 bits, groups of 32/64/128, half-float x, and
/// switched on (`KILN_QMV_MMA=1`; the CUDA-core kernel takes them otherwise).
pub(crate) fn applies(dtype: DType, group: usize, bits: u32) -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    bits == 4
        && matches!(dtype, DType::BF16 | DType::F16)
        && matches!(group, 32 | 64 | 128)
        && *ON.get_or_init(|| std::env::var("KILN_QMV_MMA").is_ok_and(|v| v == "1"))
}

/// The product for `rows` (<= 8) rows of x at `x` times the `n` packed rows of W (`ldw` words
/// apart) at `w`, every pointer as `gemv::quantized` checked it (16-byte aligned rows).
pub(crate) fn run(
    dtype: DType,
    group: usize,
    (rows, n, k, ldw): (usize, usize, usize, usize),
    (x, w, scales, biases): (u64, u64, u64, u64),
    shape: &[usize],
) -> Result<ArrayData> {
    let out = empty(shape, dtype)?;
    if rows == 0 || n == 0 {
        return Ok(out);
    }
    let key = Key { dtype, group };
    let function: Function = KERNELS.get(&key, SYMBOL, || source(&key))?;
    let mut args = Args::new();
    args.i64(rows as i64).i64(n as i64).i64(k as i64).i64(ldw as i64);
    args.ptr(x).ptr(w).ptr(scales).ptr(biases).ptr(out.buffer.as_ptr() as u64);
    let blocks = check_grid(SYMBOL, n.div_ceil(FEATURES) as u64)?;
    launch(SYMBOL, function, blocks, (WARPS * 32) as u32, 0, &mut args)?;
    Ok(out)
}

/// Every variant's source (the offline NVRTC check).
#[cfg(test)]
pub(crate) fn all_sources() -> Vec<(String, String)> {
    let mut out = Vec::new();
    for dtype in [DType::BF16, DType::F16] {
        for group in [32, 64, 128] {
            let key = Key { dtype, group };
            out.push((format!("qmv_mma_{key:?}"), source(&key)));
        }
    }
    out
}
