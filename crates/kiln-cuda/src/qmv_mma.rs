//! 4-bit decode products on the tensor cores: `x @ dequantize(W).T` for x of at most 8 rows
//! (bfloat16 or float16) and W in MLX's affine layout with groups of 32, 64 or 128. On the
//! CUDA cores (`gemv.rs`) each weight costs a shift, a mask, a subtraction and a multiply-add,
//! and each lane holds its x values and its prefetched words in registers, so few warps fit
//! and a 4-bit product ran at a quarter of the bandwidth (H200, ncu: 22% occupancy, 23% of
//! DRAM throughput, latency bound). Here:
//!
//! - Two nibbles become two half floats with one mask (`0x000F000F | magic` gives
//!   `OFFSET + q` in each half of a register) and `mma.sync` does the products. The weights
//!   are the mma's A (16 features by 16 k), x its B (16 k by 8 rows), so every mma does 256
//!   weights' work whatever the row count.
//! - The weights, scales and biases stream into shared memory through `cp.async`, `STAGES`
//!   chunks ahead per warp (a chunk: 128 bytes of each of the warp's 16 features, `U`
//!   groups), so the bytes in flight cost no registers; x sits in shared memory, copied
//!   once per block by `cp.async` too (loaded through registers, each block's copy waited
//!   on its own latency: 4 rows cost twice the time of 1).
//!
//! H200, ncu at the GPU's own clocks, 1 row of bf16, groups of 64: 14336x4096 15.6 us,
//! 4096x14336 14.7, 4096x4096 7.1 (the CUDA-core kernel: 24.0, 23.6, 9.9); 4 rows about the
//! same as 1 (the CUDA-core kernel: 2.5 to 3x its 1-row time).
//!
//! A block takes 16 features and its warps take the chunks in turn. In one group each lane
//! (`g = lane / 4`, `c = lane % 4`) reads the words of features `g` and `g + 8` for a
//! quarter of the group (`c`) and the values of x row `g` for the same quarter (zero past
//! the rows); the mma's k order is a permutation of the group's (nibbles `t` and `t + 4` of
//! a word share a register), the same for x and W, so each sum is a dot product over the
//! group. A second mma with A all ones gives the group's sum of x in the same fragment
//! layout. With `KILN_QMV_X_PASS=1` (off until its GPU tests run) each block instead
//! rearranges its copy of x into the mma's order once, in shared memory, and sums each group
//! of x there: every warp's four byte permutes and two ones-mma per 16 bytes of x go (SASS,
//! bf16, groups of 64: 282 instructions a chunk -> 236). The accumulator gets `scale * d + (bias - OFFSET * scale) * sum(x)` per group, in float32. Where a warp's sum is not finite (an inf or NaN in x, or a factored sum that
//! overflowed) its groups are summed again weight by weight as dequantize rounds them (the
//! factored form turns `0 * inf` into a NaN where the definition has `bias * inf`).
//!
//! On by default for 4 bits (`KILN_QMV_MMA=0`, read once, gives the CUDA-core kernel), where
//! the groups fill whole chunks and the shared memory fits.

use crate::copy::empty;
use crate::gemv::{push_sets, Weights, MAX_SETS};
use crate::launch::{launch, Args};
use crate::nvrtc::{check_grid, Function, KernelCache};
use kiln_base::{ArrayData, DType, Result};
use std::fmt::Write;

const SYMBOL: &str = "kiln_qmv_mma";
/// Features per block: the mma's m.
const FEATURES: usize = 16;
/// Warps in flight the grid aims for: blocks of few feature tiles split K between more warps.
const TARGET_WARPS: usize = 2048;
/// A chunk: this many bytes of each feature's words (`U = 256 / group` groups).
const CHUNK_BYTES: usize = 128;
/// A feature's chunk in shared memory, padded so that the lanes' 8-byte reads of 8
/// features hit distinct banks.
const ROW_BYTES: usize = 160;

#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
struct Key {
    dtype: DType,
    group: usize,
    warps: usize,
    /// Chunks each warp has in flight.
    stages: usize,
    /// Products the kernel takes: 1, or `gemv::MAX_SETS` for a group run together.
    sets: usize,
    /// Each block rearranges x and sums its groups once (`KILN_QMV_X_PASS=1`; off until
    /// its GPU tests have run), else every warp permutes x and sums it by mma per chunk.
    x_pass: bool,
}

/// `KILN_QMV_X_PASS=1` (read once): the x pass.
fn x_pass() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var("KILN_QMV_X_PASS").as_deref() == Ok("1"))
}

/// `KILN_QMV_TILING=warps,stages` (read once; 0 keeps the default) for tuning on a device.
fn forced() -> (usize, usize) {
    static FORCED: std::sync::OnceLock<(usize, usize)> = std::sync::OnceLock::new();
    *FORCED.get_or_init(|| {
        let v = crate::launch::tuning_numbers("KILN_QMV_TILING");
        match v.as_slice() {
            // Two stages at least: the prologue fills all but one.
            [w, s] if *w <= 32 && (*s == 0 || (2..=8).contains(s)) => (*w, *s),
            _ => (0, 0),
        }
    })
}

const BODY: &str = r#"
#define NT (WARPS * 32)
#define WPT (GROUP / 32) /* words per lane per feature per group */
#define WPG (GROUP / 8)  /* words per feature per group */
#define U (256 / GROUP)  /* groups per chunk: 128 bytes of each feature's words */
#define W_BYTES (16 * ROW_BYTES)
#define SB_BYTES (16 * U * 2) /* scales (or biases) of 16 features for U groups */
#define STAGE_BYTES (W_BYTES + 2 * SB_BYTES)
#if IS_BF16
#define MAGIC 0x43004300u /* bf16 128.0 in both halves: 128 + q is exact */
#define OFFSET 128.0f
#define ONES 0x3F803F80u  /* bf16 1.0 in both halves */
#define MMA "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32"
#else
#define MAGIC 0x64006400u /* f16 1024.0: 1024 + q is exact */
#define ONES 0x3C003C00u
#define OFFSET 1024.0f
#define MMA "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32"
#endif

/* `a`'s two halves as floats. */
K_INLINE float k_lo(uint32_t a) { return k_load((S)(a & 0xffffu)); }
K_INLINE float k_hi(uint32_t a) { return k_load((S)(a >> 16)); }

/* c = A . B (+ c): A's registers rows g / g + 8 at k 2c / 2c + 8, B's k 2c / 2c + 8 at
   column g. */
K_INLINE void k_mma(float *c, uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                    uint32_t b0, uint32_t b1) {
    asm volatile(MMA " {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

/* BYTES from global src to the shared address dst, in flight until a wait. */
template <int BYTES>
K_INLINE void k_cp(const uint32_t dst, const void *src) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], %2;\n" ::"r"(dst), "l"(src), "n"(BYTES));
}
K_INLINE void k_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N> K_INLINE void k_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory"); }

/* Nibbles j and j + 4 of a word as OFFSET + q in the two halves of a register: one
   three-input logic op, (q & mask) | magic (the compiler emits two). */
K_INLINE uint32_t k_pair(const uint32_t q, const int j) {
    uint32_t d;
    asm("lop3.b32 %0, %1, %2, %3, 0xEA;" : "=r"(d) : "r"(q >> (4 * j)), "r"(0x000F000Fu), "r"(MAGIC));
    return d;
}

/* A lane's WPT words of a feature's group at p (aligned to WPT words: the row is, and a
   lane's quarter of the group starts WPT words in) in one shared load. */
K_INLINE void k_words(const uint32_t *p, uint32_t *o) {
    if constexpr (WPT == 4) {
        const uint4 a = *(const uint4 *)p;
        o[0] = a.x; o[1] = a.y; o[2] = a.z; o[3] = a.w;
    } else if constexpr (WPT == 2) {
        const uint2 a = *(const uint2 *)p;
        o[0] = a.x; o[1] = a.y;
    } else {
        o[0] = *p;
    }
}

/* The U values of S at p (U * 2 bytes, aligned) as floats. */
K_INLINE void k_sload(const S *p, float *o) {
    uint32_t v[(U + 1) / 2];
    if constexpr (U == 8) {
        const uint4 a = *(const uint4 *)p;
        v[0] = a.x; v[1] = a.y; v[2] = a.z; v[3] = a.w;
    } else if constexpr (U == 4) {
        const uint2 a = *(const uint2 *)p;
        v[0] = a.x; v[1] = a.y;
    } else {
        v[0] = *(const uint32_t *)p;
    }
    #pragma unroll
    for (int i = 0; i < U; ++i) o[i] = k_load((S)((v[i / 2] >> (16 * (i & 1))) & 0xffffu));
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

extern "C" __global__ void __launch_bounds__(NT, 1) kiln_qmv_mma(
        const int64_t rows, const int64_t k, const int64_t ldw, const S *__restrict__ x,
        const KSets sets) {
    K_PICK_SET(sets);
    extern __shared__ __align__(16) unsigned char smem[];
    __shared__ float red[WARPS][16][8]; /* [warp][feature][row] */
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int g = lane >> 2, c = lane & 3;
    const int64_t f0 = tile * 16;
    const int groups = (int)(k / GROUP), chunks = groups / U;
    const int xstride = (int)(2 * k + 16); /* bytes: rows shifted 4 banks apart */
    /* smem: x's rows, then each warp's stages. */
    unsigned char *xs = smem;
    const int sums_bytes = X_PASS ? ((int)(k / GROUP) * (rows + (rows & 1)) * 4 + 15) / 16 * 16 : 0;
    unsigned char *stages =
        smem + ((rows * xstride + 15) / 16) * 16 + sums_bytes + warp * STAGES * STAGE_BYTES;

    /* The warp's chunks in turn into its stage slots: lanes copy 16 bytes of 4 features'
       words each, lanes 0-15 a feature's U scales, 16-31 its biases. The sources move on
       by WARPS chunks a call (loop-carried, so kept in registers rather than recomputed).
       Every call commits a group (perhaps empty) so that the waits count alike. */
    const unsigned char *src_w[4];
    uint32_t dst_w[4];
    #pragma unroll
    for (int m = 0; m < 4; ++m) {
        const int t = lane + 32 * m, row = t >> 3, col = t & 7;
        const int64_t f = f0 + row < n ? f0 + row : n - 1;
        src_w[m] = (const unsigned char *)(w + f * ldw) + col * 16 + warp * 128;
        dst_w[m] = row * ROW_BYTES + col * 16;
    }
    const S *src_s;
    uint32_t dst_s;
    {
        const int row = lane & 15;
        const int64_t f = f0 + row < n ? f0 + row : n - 1;
        src_s = (lane < 16 ? scales : biases) + f * groups + warp * U;
        dst_s = W_BYTES + (lane >> 4) * SB_BYTES + row * U * 2;
    }
    const uint32_t stage0 = (uint32_t)__cvta_generic_to_shared(stages);
    int next = warp, next_slot = 0;
    auto issue = [&]() {
        if (next < chunks) {
            const uint32_t st = stage0 + next_slot * STAGE_BYTES;
            #pragma unroll
            for (int m = 0; m < 4; ++m) {
                k_cp<16>(st + dst_w[m], src_w[m]);
                src_w[m] += WARPS * 128;
            }
            k_cp<U * 2>(st + dst_s, src_s);
            src_s += WARPS * U;
        }
        k_commit();
        next += WARPS;
        next_slot = next_slot == STAGES - 1 ? 0 : next_slot + 1;
    };
    const int units = (int)(k / 8);
    const uint32_t xs0 = (uint32_t)__cvta_generic_to_shared(xs);
    for (int r = 0; r < rows; ++r)
        for (int o = threadIdx.x; o < units; o += NT)
            k_cp<16>(xs0 + r * xstride + o * 16, (const uint4 *)(x + r * k) + o);
#if X_PASS
    /* x into shared memory by every thread (its own group, committed first), then the
       first chunks; once x is in, a barrier makes it visible. */
    k_commit();
    #pragma unroll
    for (int i = 0; i < STAGES - 1; ++i) issue();
    k_wait<STAGES - 1>();
    __syncthreads();
    /* While the chunks are in flight: each 8 values of x rearranged in place into the mma's
       pair order (values t and t + 4 of a word share a register, as the nibbles pair), and
       each group's sum per row into xsum (the `(bias - OFFSET * scale) * sum(x)` term), summed
       in a fixed order: the lanes of a group are consecutive (a group is UPG units). xsum
       holds float pairs, rows 2c and 2c + 1 of group h at pair `c * groups + h` (a lane's
       pairs for consecutive groups are adjacent). A pad row (rows odd) gets zero sums. */
    constexpr int UPG = GROUP / 8;
    const int rowp = rows + (rows & 1);
    float *xsum = (float *)(smem + ((rows * xstride + 15) / 16) * 16);
    for (int r = 0; r < rowp; ++r)
        for (int o0 = 0; o0 < units; o0 += NT) {
            const int o = o0 + threadIdx.x;
            const bool in = o < units && r < rows;
            uint4 *p = (uint4 *)(xs + (r < rows ? r : 0) * xstride) + (o < units ? o : 0);
            const uint4 X = in ? *p : make_uint4(0u, 0u, 0u, 0u);
            float sum = ((k_lo(X.x) + k_hi(X.x)) + (k_lo(X.y) + k_hi(X.y)))
                      + ((k_lo(X.z) + k_hi(X.z)) + (k_lo(X.w) + k_hi(X.w)));
            #pragma unroll
            for (int m = 1; m < UPG; m <<= 1) sum += __shfl_xor_sync(0xffffffffu, sum, m);
            if (in)
                *p = make_uint4(__byte_perm(X.x, X.z, 0x5410), __byte_perm(X.x, X.z, 0x7632),
                                __byte_perm(X.y, X.w, 0x5410), __byte_perm(X.y, X.w, 0x7632));
            if (o < units && (lane & (UPG - 1)) == 0)
                xsum[2 * ((r >> 1) * groups + o / UPG) + (r & 1)] = sum;
        }
    __syncthreads();
    const bool has_pair = 2 * c < rows;
    const float2 *xsum_c = (const float2 *)xsum + c * groups;
#else
    /* x into shared memory by every thread, in flight with the first chunk (its group);
       once that group is in, a barrier makes all of x visible. */
    #pragma unroll
    for (int i = 0; i < STAGES - 1; ++i) issue();
    k_wait<STAGES - 2>();
    __syncthreads();
#endif

    const bool has_row = g < rows;
    const unsigned char *xr = xs + (has_row ? g : 0) * xstride + c * WPT * 16;
    float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    int slot = 0;
    for (int j = warp; j < chunks; j += WARPS) {
        issue(); /* chunk j + (STAGES - 1) * WARPS, into the slot chunk j - WARPS left */
        k_wait<STAGES - 1>();
        __syncwarp();
        const unsigned char *st = stages + slot * STAGE_BYTES;
        float sa[U], sb[U], ba[U], bb[U];
        k_sload((const S *)(st + W_BYTES) + g * U, sa);
        k_sload((const S *)(st + W_BYTES) + (g + 8) * U, sb);
        k_sload((const S *)(st + W_BYTES + SB_BYTES) + g * U, ba);
        k_sload((const S *)(st + W_BYTES + SB_BYTES) + (g + 8) * U, bb);
        const uint32_t *wa = (const uint32_t *)(st + g * ROW_BYTES) + c * WPT;
        const uint32_t *wb = (const uint32_t *)(st + (g + 8) * ROW_BYTES) + c * WPT;
        #pragma unroll
        for (int s = 0; s < U; ++s) {
            const int h = j * U + s;
            float d[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#if !X_PASS
            float e4[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#endif
            uint32_t wua[WPT], wub[WPT];
#if X_PASS
            k_words(wa + s * WPG, wua);
            k_words(wb + s * WPG, wub);
#else
            #pragma unroll
            for (int i = 0; i < WPT; ++i) {
                wua[i] = wa[s * WPG + i];
                wub[i] = wb[s * WPG + i];
            }
#endif
            #pragma unroll
            for (int i = 0; i < WPT; ++i) {
                /* x values j and j + 4 of the word's eight in a register, as the nibbles pair */
                uint4 X = make_uint4(0u, 0u, 0u, 0u);
                if (has_row) X = *(const uint4 *)(xr + h * GROUP * 2 + i * 16);
                const uint32_t ua = wua[i], ub = wub[i];
#if X_PASS
                k_mma(d, k_pair(ua, 0), k_pair(ub, 0), k_pair(ua, 1), k_pair(ub, 1), X.x, X.y);
                k_mma(d, k_pair(ua, 2), k_pair(ub, 2), k_pair(ua, 3), k_pair(ub, 3), X.z, X.w);
#else
                const uint32_t x0 = __byte_perm(X.x, X.z, 0x5410), x1 = __byte_perm(X.x, X.z, 0x7632);
                const uint32_t x2 = __byte_perm(X.y, X.w, 0x5410), x3 = __byte_perm(X.y, X.w, 0x7632);
                k_mma(d, k_pair(ua, 0), k_pair(ub, 0), k_pair(ua, 1), k_pair(ub, 1), x0, x1);
                k_mma(d, k_pair(ua, 2), k_pair(ub, 2), k_pair(ua, 3), k_pair(ub, 3), x2, x3);
                k_mma(e4, ONES, ONES, ONES, ONES, x0, x1);
                k_mma(e4, ONES, ONES, ONES, ONES, x2, x3);
#endif
            }
#if X_PASS
            float e[2] = {0.0f, 0.0f};
            if (has_pair) {
                const float2 es = xsum_c[h];
                e[0] = es.x;
                e[1] = es.y;
            }
#else
            /* (the ones-mma: the group's sums of x rows 2c and 2c + 1 in e4[0], e4[1]) */
            const float *e = e4;
#endif
            /* d: features g (0, 1) and g + 8 (2, 3) at rows 2c and 2c + 1; e[0], e[1]: the
               group's sums of x rows 2c and 2c + 1. With d = sum(x (OFFSET + q)):
               scale * sum(x q) + bias * sum(x) = scale * d + (bias - OFFSET * scale) * sum(x). */
            const float ma = fmaf(-OFFSET, sa[s], ba[s]), mb = fmaf(-OFFSET, sb[s], bb[s]);
            acc[0] = fmaf(ma, e[0], fmaf(sa[s], d[0], acc[0]));
            acc[1] = fmaf(ma, e[1], fmaf(sa[s], d[1], acc[1]));
            acc[2] = fmaf(mb, e[0], fmaf(sb[s], d[2], acc[2]));
            acc[3] = fmaf(mb, e[1], fmaf(sb[s], d[3], acc[3]));
        }
        __syncwarp(); /* every lane is done with the slot before it is refilled */
        slot = slot == STAGES - 1 ? 0 : slot + 1;
    }
    k_wait<0>();
    /* A sum that is not finite (an inf or NaN in x, or a factored sum that overflowed):
       this warp's groups again, weight by weight, as the definition has them. */
    #pragma unroll
    for (int v = 0; v < 4; ++v) {
        const int r = 2 * c + (v & 1);
        if (!isfinite(acc[v]) && r < rows) {
            const int64_t fv = f0 + g + 8 * (v >> 1), f = fv < n ? fv : n - 1;
            float a = 0.0f;
            for (int j = warp; j < chunks; j += WARPS)
                for (int s = 0; s < U; ++s) {
                    const int64_t h = (int64_t)j * U + s;
                    a += k_exact_group(x + r * k + h * GROUP, w + f * ldw + h * WPG,
                                       k_load(scales[f * groups + h]), k_load(biases[f * groups + h]));
                }
            acc[v] = a;
        }
    }
    red[warp][g][2 * c] = acc[0];
    red[warp][g][2 * c + 1] = acc[1];
    red[warp][g + 8][2 * c] = acc[2];
    red[warp][g + 8][2 * c + 1] = acc[3];
    __syncthreads();
    for (int t = threadIdx.x; t < 128; t += NT) {
        const int j = t >> 3, r = t & 7;
        if (r < rows && f0 + j < n) {
            float a = 0.0f;
            #pragma unroll
            for (int v = 0; v < WARPS; ++v) a += red[v][j][r];
            out[r * n + f0 + j] = k_store(a);
        }
    }
}
"#;

fn source(key: &Key) -> String {
    let mut s = crate::fast::header(key.dtype);
    let _ = write!(
        s,
        "#define GROUP {}\n#define STAGES {}\n#define WARPS {}\n#define IS_BF16 {}\n\
         #define ROW_BYTES {ROW_BYTES}\n#define X_PASS {}\n",
        key.group,
        key.stages,
        key.warps,
        (key.dtype == DType::BF16) as u8,
        key.x_pass as u8
    );
    s.push_str(&crate::gemv::sets_source(key.sets));
    s.push_str(BODY);
    s
}

/// Dynamic shared memory of a launch: x's rows (each padded 16 bytes), the groups' sums of
/// x (rows rounded up to even) and every warp's stages, as the kernel lays them out.
fn shared_bytes(key: &Key, rows: usize, k: usize) -> usize {
    let u = CHUNK_BYTES * 2 / key.group;
    let stage = FEATURES * ROW_BYTES + 2 * FEATURES * u * 2;
    let sums = if key.x_pass { (k / key.group) * rows.next_multiple_of(2) * 4 } else { 0 };
    (rows * (2 * k + 16)).next_multiple_of(16)
        + sums.next_multiple_of(16)
        + key.warps * key.stages * stage
}

/// The kernel for a product. Warps per block: enough to put about `TARGET_WARPS` warps in
/// flight (a product of few features splits its K between more warps), 4 to 8, each with a
/// chunk at least; two stages. An ncu sweep on the H200 (1 row, bf16, groups of 64, us):
///
/// | warps, stages | 14336x4096 | 4096x14336 | 4096x4096 | 1024x4096 |
/// |---|---|---|---|---|
/// | 4, 2 | **15.6** | 18.6 | **7.1** | 5.8 |
/// | 8, 2 | 20.2 | **14.7** | 7.4 | **5.2** |
/// | 4 or 8, 4 | 21.5 | 17.3 | 7.7 | - |
/// | 16, 2 | 28.9 | 17.6 | 10.4 | 5.6 |
///
/// Deeper stages take shared memory that would hold more blocks; the CUDA-core kernel took
/// 24.0, 23.6, 9.9 and 5.0. More resident blocks through `__launch_bounds__` lost too (H100,
/// llama 8B q4 GPU time a step: ptxas's 106 registers 3.44 ms, 80 (6 blocks) 3.77, 64 (8
/// blocks, small spills) 3.60).
fn key(dtype: DType, group: usize, n: usize, chunks: usize, sets: usize) -> Key {
    let (forced_warps, forced_stages) = forced();
    let tiles = n.div_ceil(FEATURES).max(1);
    let warps = TARGET_WARPS
        .div_ceil(tiles)
        .next_power_of_two()
        .clamp(4, 8)
        .min(chunks.next_power_of_two().max(1));
    let warps = if forced_warps > 0 { forced_warps } else { warps };
    let stages = if forced_stages > 0 { forced_stages } else { 2 };
    Key { dtype, group, warps, stages, sets, x_pass: x_pass() }
}

static KERNELS: KernelCache<Key> = KernelCache::new();

/// Whether this kernel may take a product: 4 bits, groups of 32, 64 or 128, half-float x,
/// unless switched off (`KILN_QMV_MMA=0`; the CUDA-core kernel takes them then).
pub(crate) fn applies(dtype: DType, group: usize, bits: u32) -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    bits == 4
        && matches!(dtype, DType::BF16 | DType::F16)
        && matches!(group, 32 | 64 | 128)
        && *ON.get_or_init(|| std::env::var("KILN_QMV_MMA").as_deref() != Ok("0"))
}

/// The products of `rows` (<= 8) rows of x at `x` (k values each) times each of `sets`' W
/// (packed rows `ldw` words apart), one launch, every pointer as `gemv::quantized_together`
/// checked it (16-byte aligned rows), or `None` where the kernel cannot take them: groups
/// that do not fill whole chunks (or scales not aligned for the chunk's copies), x too
/// large for shared memory, or products whose block shapes differ.
pub(crate) fn run(
    dtype: DType,
    group: usize,
    (rows, k, ldw): (usize, usize, usize),
    x: u64,
    sets: &[Weights],
    shapes: &[&[usize]],
) -> Result<Option<Vec<ArrayData>>> {
    let u = CHUNK_BYTES * 2 / group;
    let groups = k / group;
    let aligned =
        sets.iter().all(|s| [s.scales, s.biases].iter().all(|p| p.is_multiple_of(2 * u as u64)));
    if !groups.is_multiple_of(u) || !aligned || !(ldw * 4).is_multiple_of(16) {
        return Ok(None);
    }
    let slots = if sets.len() == 1 { 1 } else { MAX_SETS };
    // Products run together only with the block shape each would have alone, so that a
    // group gives the same bits as its members one by one.
    let alone = |s: &Weights| key(dtype, group, s.n, groups / u, slots);
    let key = alone(&sets[0]);
    if sets.iter().any(|s| alone(s) != key) {
        return Ok(None);
    }
    let shared = shared_bytes(&key, rows, k);
    // The reduction's static array shares the block's limit (the default 48 KiB too).
    let fixed = key.warps * FEATURES * 8 * 4;
    let room = crate::runtime::gpu()?.shared_per_block.saturating_sub(fixed);
    if shared > room {
        return Ok(None);
    }
    let outs = shapes.iter().map(|s| empty(s, dtype)).collect::<Result<Vec<_>>>()?;
    let live: Vec<(Weights, &ArrayData)> =
        sets.iter().copied().zip(&outs).filter(|(s, _)| s.n > 0).collect();
    if rows == 0 || live.is_empty() {
        return Ok(Some(outs));
    }
    let function: Function = KERNELS.get(&key, SYMBOL, || source(&key))?;
    if shared + fixed > 48 << 10 {
        crate::launch::allow_shared(SYMBOL, function, room)?;
    }
    let mut args = Args::new();
    args.i64(rows as i64).i64(k as i64).i64(ldw as i64).ptr(x);
    let (weights, live_outs): (Vec<_>, Vec<_>) = live.into_iter().unzip();
    let blocks = push_sets(&mut args, &weights, &live_outs, FEATURES, slots);
    let blocks = check_grid(SYMBOL, blocks)?;
    launch(SYMBOL, function, blocks, (key.warps * 32) as u32, shared as u32, &mut args)?;
    Ok(Some(outs))
}

/// Every variant's source (the offline NVRTC check).
#[cfg(test)]
pub(crate) fn all_sources() -> Vec<(String, String)> {
    let mut out = Vec::new();
    for dtype in [DType::BF16, DType::F16] {
        for group in [32, 64, 128] {
            for (warps, stages) in [(4, 2), (8, 2), (8, 4)] {
                for (sets, x_pass) in [(1, false), (1, true), (MAX_SETS, false), (MAX_SETS, true)] {
                    let key = Key { dtype, group, warps, stages, sets, x_pass };
                    out.push((format!("qmv_mma_{key:?}"), source(&key)));
                }
            }
        }
    }
    out
}
