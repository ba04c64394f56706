//! Scaled dot-product attention, streaming: the (Lq, Lk) scores never exist in memory. Two
//! kernels:
//! - `flash` (float16 / bfloat16, one head dim for q, k and v: a multiple of 16 up to 128,
//!   64 and 128 being the tuned ones): a block of 4 warps takes 64 queries of one (batch,
//!   head); 64-key tiles of K and V stream through shared memory (`cp.async`; XOR-swizzled
//!   16-byte chunks, or padded rows, so `ldmatrix` is conflict-free; V's load overlaps the
//!   scores, the next K's the `P V` product). Each warp owns 16 query rows:
//!   `S = Q Kᵀ` and `O += P V` run on tensor cores (`mma.sync.m16n8k16`, float32
//!   accumulation), the online softmax in registers in base-2 units (scores times
//!   `scale * log2 e`).
//! - `simple` (everything else, and every case under `KILN_CUDA_ATTENTION=simple`): a warp
//!   per query row in float32, 32 keys per step (a lane each), the row's scaled query and
//!   output accumulator in shared memory. Slow but obviously correct: the reference for
//!   diagnosing the fast path on a device.
//!
//! Both follow kiln-cpu's semantics: hidden scores (causal, a false boolean mask) are the
//! lowest finite float, so a fully hidden row averages every value; the causal mask is
//! lower-right aligned (query `i` sees key `j` when `j <= i + Lk - Lq`); no keys gives
//! zeros; grouped-query attention maps query head `h` to key/value head `h / (Hq / Hk)`.

use super::{dense, dense_aligned, header, ptr};
use crate::copy::empty;
use crate::launch::{launch, Args};
use crate::nvrtc::{check_grid, Function, KernelCache};
use kiln_base::{ArrayData, AttentionMask, DType, Result};
use std::fmt::Write;

const SIMPLE: &str = "kiln_attn_simple";
const FLASH: &str = "kiln_attn_flash";

/// Queries per block and keys per tile of the flash kernel.
const BM: usize = 64;
/// Warps per block of the flash kernel (16 query rows each).
const FLASH_WARPS: u32 = 4;
/// Dynamic shared memory available without opting in.
const SHARED_LIMIT: usize = 48 * 1024;

#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub(crate) enum Variant {
    Simple,
    /// The flash kernel for this head dim.
    Flash(usize),
    /// The Hopper (`wgmma`) kernel for this head dim (`attention_hopper.rs`).
    Hopper(usize),
    /// Its warp-specialised forms (TMA loads, mbarriers): head dim and
    /// `attention_hopper::form` (1 or 2).
    HopperWs(usize, u8),
}

#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub(crate) struct Key {
    pub dtype: DType,
    pub mask: AttentionMask,
    pub variant: Variant,
    /// The flash kernel also writes the row logsumexp (`AttentionTrain`).
    pub lse: bool,
}

/// Shared floats per warp of the simple kernel: the scaled query, the output row, 32
/// probabilities.
fn simple_floats(dk: usize, dv: usize) -> usize {
    dk + dv + 32
}

/// Whether the GPU kernels take head dims `dk` (q, k) and `dv` (v): the simple kernel's
/// per-warp rows must fit in shared memory.
pub fn fits(dk: usize, dv: usize) -> bool {
    simple_floats(dk, dv).checked_mul(4).is_some_and(|b| b <= SHARED_LIMIT)
}

/// Float32 scores of at least this many bytes make the fused kernel worth it even off the
/// tensor-core path (below, cuBLAS products and a softmax beat the simple kernel).
const SCORES_LIMIT: u128 = 256 << 20;

pub(crate) fn simple_requested() -> bool {
    std::env::var("KILN_CUDA_ATTENTION").is_ok_and(|v| v == "simple")
}

/// Whether attention on q (B, Hq, Lq, D), k (B, Hk, Lk, D), v (B, Hk, Lk, Dv) of `dtype`
/// should run fused on the GPU: always on the flash path; on the simple path when the
/// (Lq, Lk) scores would be large (the composition would materialise them) or when
/// `KILN_CUDA_ATTENTION=simple` asks for it; never when the head dims do not fit.
pub fn fused(dtype: DType, q: &[usize], k: &[usize], v: &[usize]) -> bool {
    let (Ok([b, hq, lq, dk]), Ok([_, _, lk, _]), Ok([_, _, _, dv])) =
        (<[usize; 4]>::try_from(q), <[usize; 4]>::try_from(k), <[usize; 4]>::try_from(v))
    else {
        return false;
    };
    if !fits(dk, dv) {
        return false;
    }
    let simple = simple_requested();
    let scores = b as u128 * hq as u128 * lq as u128 * lk as u128 * 4;
    // Half floats off the flash path take the simple kernel (float32 math) rather than the
    // composition, whose half-precision products lose accuracy the tests measured.
    let half = matches!(dtype, DType::F16 | DType::BF16);
    simple
        || half
        || super::attention_decode::takes(dtype, q, k, v)
        || matches!(variant(dtype, dk, dv, false), Variant::Flash(_))
        || scores >= SCORES_LIMIT
}

/// Whether attention under grad takes the training forward and the fused backward
/// (`AttentionTrain`, `AttentionVjp`): the flash kernel's cases (half floats, one head dim, a
/// multiple of 16 up to 128), unless `KILN_CUDA_ATTENTION=simple` asks for the composition.
pub fn train_fused(dtype: DType, q: &[usize], k: &[usize], v: &[usize]) -> bool {
    let (Ok([_, _, _, dk]), true, Ok([_, _, _, dv])) =
        (<[usize; 4]>::try_from(q), k.len() == 4, <[usize; 4]>::try_from(v))
    else {
        return false;
    };
    !simple_requested() && matches!(variant(dtype, dk, dv, false), Variant::Flash(_))
}

/// Shared by both kernels: mask mode, the lowest float, the NaN-propagating maximum.
pub(crate) fn common(key: &Key) -> String {
    let mut s = header(key.dtype);
    let (mode, mtype) = match key.mask {
        AttentionMask::None => (0, "S"),
        AttentionMask::Causal => (1, "S"),
        AttentionMask::Additive => (2, "S"),
        AttentionMask::Boolean => (3, "uint8_t"),
    };
    let _ = write!(
        s,
        r#"
#define MASK {mode}
typedef {mtype} M;
#define LOWEST (-3.40282347e+38f)
#define LOG2E 1.4426950408889634f
struct KStrides {{ int64_t v[4]; }};
/* max(a, v) that keeps a NaN from either side (kiln-cpu's max_nan): one instruction from
   sm_80 on, three compares and a select before. */
K_INLINE float k_max_nan(float a, float v) {{
#if __CUDA_ARCH__ >= 800
    float y;
    asm("max.NaN.f32 %0, %1, %2;" : "=f"(y) : "f"(a), "f"(v));
    return y;
#else
    return (v > a || v != v) ? v : a;
#endif
}}
/* 2^x on the special-function unit alone. exp2f wraps the same instruction in a fix-up for
   results below 2^-126 (four instructions, not one); a softmax weight that small counts as 0
   either way. */
K_INLINE float k_ex2(float x) {{
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}}
"#
    );
    s
}

const SIMPLE_BODY: &str = r#"
/* One warp per query row `row` of (B, Hq, Lq); lanes take keys, then output features. */
extern "C" __global__ void kiln_attn_simple(const int64_t rows, const int64_t hq, const int64_t lq,
        const int64_t lk, const int64_t dk, const int64_t dv, const int64_t group, const int64_t hk,
        const S *__restrict__ q, const S *__restrict__ k, const S *__restrict__ v,
        const M *__restrict__ mask, S *__restrict__ out, const KStrides ms, const double scale) {
    extern __shared__ float smem[];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int64_t row = blockIdx.x * (int64_t)(blockDim.x >> 5) + warp;
    if (row >= rows) return; /* the whole warp: this kernel has no block barriers */
    float *qs = smem + (int64_t)warp * (dk + dv + 32);
    float *os = qs + dk;
    float *ps = os + dv;
    const int64_t i = row % lq, bh = row / lq, h = bh % hq, b = bh / hq;
    const int64_t kvh = b * hk + h / group;
    const S *kp = k + kvh * lk * dk;
    const S *vp = v + kvh * lk * dv;
    const float sc = (float)scale;
    for (int64_t d = lane; d < dk; d += 32) qs[d] = k_load(q[row * dk + d]) * sc;
    for (int64_t d = lane; d < dv; d += 32) os[d] = 0.0f;
    __syncwarp();
    const int64_t shift = lk - lq;
    int64_t key_end = lk;
#if MASK == 1
    /* Later keys are hidden; a row that sees none averages them all (so visits them all). */
    if (i + shift >= 0) key_end = min(lk, i + shift + 1);
#endif
#if MASK >= 2
    const M *mrow = mask + b * ms.v[0] + h * ms.v[1] + i * ms.v[2];
#endif
    float m = -INFINITY, l = 0.0f;
    for (int64_t j0 = 0; j0 < key_end; j0 += 32) {
        const int64_t j = j0 + lane;
        float s = -INFINITY;
        if (j < key_end) {
            const S *kr = kp + j * dk;
            float acc = 0.0f;
            for (int64_t d = 0; d < dk; ++d) acc = fmaf(k_load(kr[d]), qs[d], acc);
            s = acc;
#if MASK == 1
            if (j > i + shift) s = LOWEST;
#elif MASK == 2
            s = s + k_load(mrow[j * ms.v[3]]);
#elif MASK == 3
            if (!mrow[j * ms.v[3]]) s = LOWEST;
#endif
        }
        float bmax = k_max_nan(m, s);
        #pragma unroll
        for (int o = 16; o > 0; o >>= 1) bmax = k_max_nan(bmax, __shfl_xor_sync(0xffffffffu, bmax, o));
        const float corr = bmax == m ? 1.0f : expf(m - bmax);
        /* Every score so far -inf (an additive mask): exp(-inf - 0) = 0, not NaN. */
        const float base = bmax == -INFINITY ? 0.0f : bmax;
        const float p = j < key_end ? expf(s - base) : 0.0f;
        float sum = p;
        #pragma unroll
        for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
        l = l * corr + sum;
        m = bmax;
        ps[lane] = p;
        __syncwarp();
        const int kb = (int)min((int64_t)32, key_end - j0);
        for (int64_t d = lane; d < dv; d += 32) {
            float acc = os[d] * corr;
            for (int jj = 0; jj < kb; ++jj) acc = fmaf(ps[jj], k_load(vp[(j0 + jj) * dv + d]), acc);
            os[d] = acc;
        }
        __syncwarp(); /* ps is rewritten by the next step */
    }
    const float inv = lk == 0 ? 0.0f : 1.0f / l;
    for (int64_t d = lane; d < dv; d += 32) out[row * dv + d] = k_store(lk == 0 ? 0.0f : os[d] * inv);
}
"#;

/// The tensor-core helpers of the flash kernels (forward and backward): cp.async, ldmatrix,
/// mma.sync, packing, the swizzled tile layout and a tile loader. Needs `D` and `MMA_T`.
pub(crate) const FLASH_HELPERS: &str = r#"
K_INLINE uint32_t k_smem(const void *p) { return (uint32_t)__cvta_generic_to_shared(p); }
/* 16 bytes global -> shared, asynchronously; zeros when !valid (nothing is read). */
K_INLINE void k_cp16(uint32_t dst, const void *src, bool valid) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(valid ? 16 : 0));
}
K_INLINE void k_cp_commit() { asm volatile("cp.async.commit_group;\n" ::); }
K_INLINE void k_cp_wait() { asm volatile("cp.async.wait_group 0;\n" ::: "memory"); }
/* Four 8x8 b16 matrices; lanes 8m..8m+7 address the rows of matrix m. */
K_INLINE void k_ldm4(uint32_t *r, uint32_t addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr));
}
K_INLINE void k_ldm4t(uint32_t *r, uint32_t addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr));
}
/* c (16x8, f32) += a (16x16, row) b (16x8, col). */
K_INLINE void k_mma(float *c, const uint32_t *a, uint32_t b0, uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32." MMA_T "." MMA_T ".f32 "
                 "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
/* Two floats as one register of two halves: `lo` (the lower column) in the low bits. */
K_INLINE uint32_t k_pack(float lo, float hi) {
    return (uint32_t)k_store(lo) | ((uint32_t)k_store(hi) << 16);
}
#if SWIZZLE
/* Element (r, c) of a tile of D columns: the 16-byte chunk index is XORed with r % 8, so the
   8 rows one ldmatrix reads (same chunk column, row stride a multiple of 128 bytes) fall in
   distinct banks. D of 64 or 128 keeps the XOR inside the row. */
#define LD D
K_INLINE int k_sw(int r, int c) { return r * D + ((((c >> 3) ^ (r & 7))) << 3) + (c & 7); }
#else
/* Other head dims (multiples of 16): rows padded by 16 bytes, which also spreads the 8 rows
   of an ldmatrix over distinct banks. */
#define LD (D + 8)
K_INLINE int k_sw(int r, int c) { return r * LD + c; }
#endif

/* Rows [r0, r0 + R) of a row-major (rows, D) matrix into a tile by the block's T threads;
   rows past the end are zeros (so padded keys and queries hold no garbage: 0 * NaN would
   poison a product). */
template <int R, int T>
K_INLINE void k_load_rows(uint16_t *tile, const S *src, int64_t r0, int64_t rows) {
    #pragma unroll
    for (int e = threadIdx.x; e < R * (D / 8); e += T) {
        const int r = e / (D / 8), c = (e % (D / 8)) * 8;
        const bool valid = r0 + r < rows;
        k_cp16(k_smem(tile + k_sw(r, c)), src + (valid ? (r0 + r) * D + c : 0), valid);
    }
}
"#;

const FLASH_BODY: &str = r#"
#define BM 64
#define BN 64
#define WARPS 4

K_INLINE void k_load_tile(uint16_t *tile, const S *src, int64_t r0, int64_t rows) {
    k_load_rows<BM, WARPS * 32>(tile, src, r0, rows);
}

extern "C" __global__ void __launch_bounds__(WARPS * 32) kiln_attn_flash(
        const int64_t hq, const int64_t lq, const int64_t lk, const int64_t group, const int64_t hk,
        const int64_t q_blocks, const S *__restrict__ q, const S *__restrict__ k,
        const S *__restrict__ v, const M *__restrict__ mask, S *__restrict__ out,
        float *__restrict__ lse, const KStrides ms, const double scale) {
    __shared__ __align__(128) uint16_t sq[BM * LD];
    __shared__ __align__(128) uint16_t sk[BN * LD];
    __shared__ __align__(128) uint16_t sv[BN * LD];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int g = lane >> 2, tq = lane & 3; /* fragment row group, thread in group */
    /* Later query blocks first: under the causal mask they have the most keys. */
    const int64_t qb = q_blocks - 1 - (int64_t)(blockIdx.x % q_blocks);
    const int64_t bh = blockIdx.x / q_blocks, h = bh % hq, b = bh / hq;
    const int64_t kvh = b * hk + h / group;
    const int64_t i0 = qb * BM;
    const S *qp = q + bh * lq * D;
    const S *kp = k + kvh * lk * D;
    const S *vp = v + kvh * lk * D;
    const int64_t shift = lk - lq;
    int64_t key_end = lk;
#if MASK == 1
    /* Keys after the block's last query's are hidden from every row, so skipped, unless
       some row sees no key (it must average them all). */
    if (i0 + shift >= 0) key_end = min(lk, min(lq, i0 + BM) - 1 + shift + 1);
#endif
    const int n_blocks = (int)((key_end + BN - 1) / BN);

    k_load_tile(sq, qp, i0, lq);
    if (n_blocks > 0) k_load_tile(sk, kp, 0, lk);
    k_cp_commit();
    k_cp_wait();
    __syncthreads();

    /* The warp's 16 query rows as A fragments, one per 16 features. */
    uint32_t qf[D / 16][4];
    #pragma unroll
    for (int kc = 0; kc < D / 16; ++kc)
        k_ldm4(qf[kc], k_smem(sq + k_sw(warp * 16 + (lane & 15), kc * 16 + (lane >> 4) * 8)));

    float o[D / 8][4];
    #pragma unroll
    for (int n = 0; n < D / 8; ++n) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
    const float sl = (float)scale * LOG2E;
    const int64_t row0 = i0 + warp * 16 + g; /* this thread's rows: row0 and row0 + 8 */

    for (int nb = 0; nb < n_blocks; ++nb) {
        const int64_t j0 = (int64_t)nb * BN;
        k_load_tile(sv, vp, j0, lk);
        k_cp_commit();

        /* S = Q K^T: 8 tiles of 8 keys; one ldmatrix.x4 feeds two (keys 0-7 | 8-15 of 16,
           features 0-7 | 8-15 of the chunk). */
        float s[BN / 8][4];
        #pragma unroll
        for (int n = 0; n < BN / 8; ++n) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.0f;
        #pragma unroll
        for (int kc = 0; kc < D / 16; ++kc) {
            #pragma unroll
            for (int np = 0; np < BN / 16; ++np) {
                uint32_t kf[4];
                k_ldm4(kf, k_smem(sk + k_sw(np * 16 + ((lane >> 4) << 3) + (lane & 7),
                                             kc * 16 + ((lane >> 3) & 1) * 8)));
                k_mma(s[2 * np], qf[kc], kf[0], kf[1]);
                k_mma(s[2 * np + 1], qf[kc], kf[2], kf[3]);
            }
        }

        /* Scores in base-2 units with the mask; keys past the end are -inf (weight 0). */
        #pragma unroll
        for (int n = 0; n < BN / 8; ++n) {
            #pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int64_t i = row0 + (e >> 1) * 8;
                const int64_t j = j0 + n * 8 + tq * 2 + (e & 1);
                float x = s[n][e] * sl;
#if MASK == 1
                if (j > i + shift) x = LOWEST;
#elif MASK == 2
                if (i < lq && j < lk)
                    x = x + k_load(mask[b * ms.v[0] + h * ms.v[1] + i * ms.v[2] + j * ms.v[3]]) * LOG2E;
#elif MASK == 3
                if (i < lq && j < lk && !mask[b * ms.v[0] + h * ms.v[1] + i * ms.v[2] + j * ms.v[3]])
                    x = LOWEST;
#endif
                s[n][e] = j < lk ? x : -INFINITY;
            }
        }

        /* Online softmax per row; the 4 threads of a group share a row. */
        #pragma unroll
        for (int rh = 0; rh < 2; ++rh) {
            float mx = m[rh];
            #pragma unroll
            for (int n = 0; n < BN / 8; ++n)
                mx = k_max_nan(k_max_nan(mx, s[n][2 * rh]), s[n][2 * rh + 1]);
            mx = k_max_nan(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
            mx = k_max_nan(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
            const float corr = mx == m[rh] ? 1.0f : k_ex2(m[rh] - mx);
            const float base = mx == -INFINITY ? 0.0f : mx;
            float sum = 0.0f;
            #pragma unroll
            for (int n = 0; n < BN / 8; ++n) {
                s[n][2 * rh] = k_ex2(s[n][2 * rh] - base);
                s[n][2 * rh + 1] = k_ex2(s[n][2 * rh + 1] - base);
                sum += s[n][2 * rh] + s[n][2 * rh + 1];
            }
            l[rh] = l[rh] * corr + sum; /* this thread's columns; summed over the group at the end */
            m[rh] = mx;
            #pragma unroll
            for (int n = 0; n < D / 8; ++n) {
                o[n][2 * rh] *= corr;
                o[n][2 * rh + 1] *= corr;
            }
        }

        /* P as A fragments: the C fragments of key tiles 2c and 2c + 1 are exactly the
           (row g | g + 8) x (keys 2t, 2t + 1 | 2t + 8, 2t + 9) pairs A wants. */
        uint32_t pf[BN / 16][4];
        #pragma unroll
        for (int c = 0; c < BN / 16; ++c) {
            pf[c][0] = k_pack(s[2 * c][0], s[2 * c][1]);
            pf[c][1] = k_pack(s[2 * c][2], s[2 * c][3]);
            pf[c][2] = k_pack(s[2 * c + 1][0], s[2 * c + 1][1]);
            pf[c][3] = k_pack(s[2 * c + 1][2], s[2 * c + 1][3]);
        }

        k_cp_wait();
        __syncthreads(); /* V is in; every warp is done reading K */
        if (nb + 1 < n_blocks) k_load_tile(sk, kp, j0 + BN, lk);
        k_cp_commit();

        /* O += P V: ldmatrix.trans of V rows (keys) gives B fragments (keys 2t, 2t + 1 of
           feature g); one x4 feeds two 8-feature tiles. */
        #pragma unroll
        for (int c = 0; c < BN / 16; ++c) {
            #pragma unroll
            for (int dp = 0; dp < D / 16; ++dp) {
                uint32_t vf[4];
                k_ldm4t(vf, k_smem(sv + k_sw(c * 16 + ((lane >> 3) & 1) * 8 + (lane & 7),
                                              dp * 16 + (lane >> 4) * 8)));
                k_mma(o[2 * dp], pf[c], vf[0], vf[1]);
                k_mma(o[2 * dp + 1], pf[c], vf[2], vf[3]);
            }
        }
        k_cp_wait();
        __syncthreads(); /* the next K is in; every warp is done reading V */
    }

    #pragma unroll
    for (int rh = 0; rh < 2; ++rh) {
        l[rh] += __shfl_xor_sync(0xffffffffu, l[rh], 1);
        l[rh] += __shfl_xor_sync(0xffffffffu, l[rh], 2);
        const int64_t i = row0 + rh * 8;
        if (i >= lq) continue;
#if LSE
        /* The row logsumexp in natural units; a row that sees no key takes its scores as
           equal (log Lk), which keeps exp(s - lse) exact in the backward. */
        if (tq == 0) {
            float lv = lk == 0 ? -INFINITY : (m[rh] + log2f(l[rh])) * 0.6931471805599453f;
#if MASK == 1
            if (lk > 0 && i + shift < 0) lv = logf((float)lk);
#endif
            lse[bh * lq + i] = lv;
        }
#endif
        const float inv = lk == 0 ? 0.0f : 1.0f / l[rh];
        uint32_t *orow = (uint32_t *)(out + (bh * lq + i) * D);
        #pragma unroll
        for (int n = 0; n < D / 8; ++n)
            orow[n * 4 + tq] = k_pack(o[n][2 * rh] * inv, o[n][2 * rh + 1] * inv);
    }
}
"#;

pub(crate) fn source(key: &Key) -> String {
    let mut s = common(key);
    match key.variant {
        Variant::Simple => s.push_str(SIMPLE_BODY),
        Variant::Flash(d) => {
            let _ = writeln!(s, "#define LSE {}", key.lse as u8);
            s.push_str(&flash_defines(key.dtype, d));
            s.push_str(FLASH_HELPERS);
            s.push_str(FLASH_BODY);
        }
        Variant::Hopper(d) | Variant::HopperWs(d, _) => {
            let _ = writeln!(s, "#define LSE {}", key.lse as u8);
            let t = if key.dtype == DType::BF16 { "bf16" } else { "f16" };
            let form = if let Variant::HopperWs(_, f) = key.variant { f } else { 0 };
            s.push_str(&super::attention_hopper::body(d, t, form));
        }
    }
    s
}

/// `D`, `MMA_T` and `SWIZZLE` of the flash kernels for head dim `d`.
pub(crate) fn flash_defines(dtype: DType, d: usize) -> String {
    let t = if dtype == DType::BF16 { "bf16" } else { "f16" };
    let swizzle = matches!(d, 64 | 128) as u8;
    format!("#define D {d}\n#define MMA_T \"{t}\"\n#define SWIZZLE {swizzle}\n")
}

static KERNELS: KernelCache<Key> = KernelCache::new();

fn kernel(key: &Key) -> Result<Function> {
    let symbol = match key.variant {
        Variant::Simple => SIMPLE,
        Variant::Flash(_) => FLASH,
        Variant::Hopper(_) => super::attention_hopper::SYMBOL,
        Variant::HopperWs(..) => super::attention_hopper::SYMBOL_WS,
    };
    KERNELS.get(key, symbol, || source(key))
}

/// The forward's kernel: the Hopper one in `hopper` form (`attention_hopper::form`, given
/// where the GPU and head dim take it) for half floats of one head dim, else [`variant`]'s.
/// The persistent form leaves Lk = 0 (its tile loop needs keys) to pingpong, and the causal
/// mask too where `KILN_HOPPER_CAUSAL=pingpong` asks; the Hopper kernel folds the scale into its exponent,
/// which needs it non-negative (a negative or NaN one, which no model uses, takes flash).
pub(crate) fn choose(
    dtype: DType,
    (dk, dv, lk): (usize, usize, usize),
    mask: AttentionMask,
    scale: f64,
    simple: bool,
    hopper: Option<u8>,
) -> Variant {
    let half = matches!(dtype, DType::F16 | DType::BF16);
    match hopper {
        Some(f) if !simple && half && dk == dv && scale >= 0.0 => match f {
            3 if lk == 0 || (mask == AttentionMask::Causal && !causal_persistent()) => {
                Variant::HopperWs(dk, 2)
            }
            1.. => Variant::HopperWs(dk, f),
            0 => Variant::Hopper(dk),
        },
        _ => variant(dtype, dk, dv, simple),
    }
}

/// Whether the causal mask takes the persistent form (unless `KILN_HOPPER_CAUSAL=pingpong`,
/// read once). H100, (8, 16, 2048, D) bf16 forward in one call: D 128 causal 483 TFLOP/s
/// against pingpong's 436 (cuDNN 512), D 64 318 against 282 (cuDNN 370).
fn causal_persistent() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var("KILN_HOPPER_CAUSAL").as_deref() != Ok("pingpong"))
}

/// Blocks of a persistent launch: one a multiprocessor. Under the causal mask a head's
/// query tiles differ in work (later ones see more keys; each head's are walked heaviest
/// first), and block `b` takes tiles `b, b + g, b + 2g, ...`: with `g` prime to the tiles
/// per head its tiles step through every position in a head rather than a few (`g` = 132
/// with 16 tiles a head gave each block positions of one residue mod 4: work 40 against 28),
/// so the blocks finish together.
pub(crate) fn persistent_grid(sms: usize, tiles: usize, q_blocks: usize, causal: bool) -> usize {
    let most = sms.min(tiles).max(1);
    if !causal || tiles <= sms {
        return most;
    }
    let coprime = |g: usize| {
        let (mut a, mut b) = (g, q_blocks.max(1));
        while b > 0 {
            (a, b) = (b, a % b);
        }
        a == 1
    };
    (most.div_ceil(2)..=most).rev().find(|&g| coprime(g)).unwrap_or(most)
}

/// The kernel for these inputs: flash for half floats with equal head dims, a multiple of 16
/// up to 128 (its three 64-row tiles fit the 48 KiB of static shared memory).
pub(crate) fn variant(dtype: DType, dk: usize, dv: usize, simple: bool) -> Variant {
    let half = matches!(dtype, DType::F16 | DType::BF16);
    if !simple && half && dk == dv && dk.is_multiple_of(16) && (16..=128).contains(&dk) {
        Variant::Flash(dk)
    } else {
        Variant::Simple
    }
}

/// Element strides of a 4-d mask with broadcast (size-1) axes at 0.
pub(crate) fn mask_strides(m: &ArrayData) -> [i64; 4] {
    let mut s = [0i64; 4];
    for (ax, st) in s.iter_mut().enumerate() {
        if m.layout.shape[ax] > 1 {
            *st = m.layout.strides[ax] as i64;
        }
    }
    s
}

pub(crate) fn attention(
    inputs: &[ArrayData],
    mask: AttentionMask,
    scale: f64,
    shape: &[usize],
) -> Result<ArrayData> {
    run(inputs, mask, scale, shape, None)
}

/// `AttentionTrain`: the flash kernel's output and its row logsumexp (float32, (B, Hq, Lq)).
pub(crate) fn attention_train(
    inputs: &[ArrayData],
    mask: AttentionMask,
    scale: f64,
    shape: &[usize],
) -> Result<Vec<ArrayData>> {
    let op = "scaled_dot_product_attention";
    let [b, hq, lq, dk] = [0, 1, 2, 3].map(|a| inputs[0].layout.shape[a]);
    let dv = inputs[2].layout.shape[3];
    if !matches!(variant(inputs[0].dtype, dk, dv, false), Variant::Flash(_)) {
        kiln_base::bail!(Value, op, "The training forward takes half floats of one head dim.");
    }
    let lse = empty(&[b, hq, lq], DType::F32)?;
    let o = run(inputs, mask, scale, shape, Some(&lse))?;
    Ok(vec![o, lse])
}

fn run(
    inputs: &[ArrayData],
    mask: AttentionMask,
    scale: f64,
    shape: &[usize],
    lse: Option<&ArrayData>,
) -> Result<ArrayData> {
    let op = "scaled_dot_product_attention";
    let (q_shape, k_shape, v_shape) =
        (&inputs[0].layout.shape, &inputs[1].layout.shape, &inputs[2].layout.shape);
    if lse.is_none()
        && !simple_requested()
        && super::attention_decode::takes(inputs[0].dtype, q_shape, k_shape, v_shape)
    {
        return super::attention_decode::attention(inputs, mask, scale, shape);
    }
    let out = empty(shape, inputs[0].dtype)?;
    let [b_n, hq, lq, dk] = [0, 1, 2, 3].map(|a| inputs[0].layout.shape[a]);
    let (hk, lk, dv) =
        (inputs[1].layout.shape[1], inputs[1].layout.shape[2], inputs[2].layout.shape[3]);
    if out.layout.size() == 0 {
        return Ok(out);
    }
    if !fits(dk, dv) {
        kiln_base::bail!(Value, op, "Head dims {dk} and {dv} are too large for the GPU kernel.");
    }
    // The training forward always takes the flash kernel (its caller checked it can), the
    // Hopper one where the GPU and head dim allow (the simple kernel only when asked for).
    let simple = lse.is_none() && simple_requested();
    let dtype = inputs[0].dtype;
    let arch = crate::runtime::gpu()?.arch;
    let hopper_form = super::attention_hopper::form();
    let hopper = hopper_form.filter(|_| super::attention_hopper::takes(dk, arch));
    let variant = choose(dtype, (dk, dv, lk), mask, scale, simple, hopper);
    let prep = if variant == Variant::Simple { dense } else { dense_aligned };
    let (q, k, v) = (prep(&inputs[0])?, prep(&inputs[1])?, prep(&inputs[2])?);
    // The mask is read in place through its strides.
    let (mptr, mstrides) = match mask {
        AttentionMask::Additive | AttentionMask::Boolean => {
            (ptr(&inputs[3]), mask_strides(&inputs[3]))
        }
        _ => (0, [0; 4]),
    };
    let key = Key { dtype: q.dtype, mask, variant, lse: lse.is_some() };
    let group = (hq / hk.max(1)) as i64;
    let mut args = Args::new();
    match variant {
        Variant::Simple => {
            let rows = b_n * hq * lq;
            let per_warp = simple_floats(dk, dv) * 4;
            let warps = if 4 * per_warp <= SHARED_LIMIT { 4 } else { 1 };
            args.i64(rows as i64).i64(hq as i64).i64(lq as i64).i64(lk as i64);
            args.i64(dk as i64).i64(dv as i64).i64(group).i64(hk as i64);
            args.ptr(ptr(&q)).ptr(ptr(&k)).ptr(ptr(&v)).ptr(mptr);
            args.ptr(out.buffer.as_ptr() as u64).i64_struct(&mstrides);
            args.i64(scale.to_bits() as i64);
            let blocks = check_grid(op, rows.div_ceil(warps) as u64)?;
            let shared = (warps * per_warp) as u32;
            launch(SIMPLE, kernel(&key)?, blocks, 32 * warps as u32, shared, &mut args)?;
        }
        Variant::Flash(_) | Variant::Hopper(_) | Variant::HopperWs(..) => {
            use super::attention_hopper as hopper;
            // (symbol, queries per block, threads, dynamic shared memory)
            let (symbol, bm, threads, shared) = match variant {
                Variant::Hopper(d) => {
                    (hopper::SYMBOL, hopper::BM, hopper::THREADS, hopper::shared_bytes(d))
                }
                Variant::HopperWs(d, _) => {
                    (hopper::SYMBOL_WS, hopper::BM, hopper::THREADS_WS, hopper::shared_bytes(d))
                }
                _ => (FLASH, BM, 32 * FLASH_WARPS, 0),
            };
            let q_blocks = lq.div_ceil(bm);
            if let Variant::HopperWs(d, _) = variant {
                // The warp-specialised kernel reads q, k and v through TMA descriptors.
                let (dt, bn) = (q.dtype, hopper::key_tile(d));
                args.i64_struct(&hopper::tensor_map(dt, ptr(&q), (b_n * hq, lq, d), bm)?);
                args.i64_struct(&hopper::tensor_map(dt, ptr(&k), (b_n * hk, lk, d), bn)?);
                args.i64_struct(&hopper::tensor_map(dt, ptr(&v), (b_n * hk, lk, d), bn)?);
            }
            args.i64(hq as i64).i64(lq as i64).i64(lk as i64).i64(group).i64(hk as i64);
            args.i64(q_blocks as i64);
            if !matches!(variant, Variant::HopperWs(..)) {
                args.ptr(ptr(&q)).ptr(ptr(&k)).ptr(ptr(&v));
            }
            args.ptr(mptr).ptr(out.buffer.as_ptr() as u64).ptr(lse.map_or(0, ptr));
            args.i64_struct(&mstrides);
            args.i64(scale.to_bits() as i64);
            let tiles = (b_n * hq * q_blocks) as u64;
            let mut blocks = check_grid(op, tiles)?;
            if let Variant::HopperWs(_, form) = variant {
                args.i64(tiles as i64);
                if form == 3 {
                    // Persistent: one block an SM (its registers, 384 threads, allow no more).
                    let sms = crate::runtime::gpu()?.multiprocessors as usize;
                    let causal = mask == AttentionMask::Causal;
                    blocks = persistent_grid(sms, tiles as usize, q_blocks, causal) as u32;
                }
            }
            let function = kernel(&key)?;
            crate::launch::allow_shared(symbol, function, shared)?;
            launch(symbol, function, blocks, threads, shared as u32, &mut args)?;
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn variants() {
        assert_eq!(variant(DType::BF16, 128, 128, false), Variant::Flash(128));
        assert_eq!(variant(DType::F16, 64, 64, false), Variant::Flash(64));
        assert_eq!(variant(DType::F16, 64, 64, true), Variant::Simple);
        assert_eq!(variant(DType::F32, 64, 64, false), Variant::Simple);
        assert_eq!(variant(DType::BF16, 80, 80, false), Variant::Flash(80));
        assert_eq!(variant(DType::BF16, 72, 72, false), Variant::Simple);
        assert_eq!(variant(DType::BF16, 256, 256, false), Variant::Simple);
        assert_eq!(variant(DType::BF16, 128, 64, false), Variant::Simple);
        assert!(fits(128, 128) && fits(4096, 4096) && !fits(8192, 8192));
        let (q, kv) = ([2, 8, 100, 64], [2, 4, 300, 64]);
        assert!(fused(DType::BF16, &q, &kv, &kv));
        assert!(!fused(DType::F32, &q, &kv, &kv));
        let long = [1, 4, 4096, 32];
        assert!(fused(DType::F32, &long, &long, &long));
        assert!(!fused(DType::BF16, &[1, 1, 1, 9000], &[1, 1, 1, 9000], &[1, 1, 1, 9000]));
    }

    #[test]
    fn sources() {
        let key = Key {
            dtype: DType::BF16,
            mask: AttentionMask::Boolean,
            variant: Variant::Flash(128),
            lse: false,
        };
        let s = source(&key);
        assert!(s.contains("#define MASK 3\ntypedef uint8_t M;"));
        assert!(s.contains("#define D 128\n#define MMA_T \"bf16\"\n#define SWIZZLE 1"));
        let s = source(&Key {
            dtype: DType::F32,
            mask: AttentionMask::Causal,
            variant: Variant::Simple,
            lse: false,
        });
        assert!(s.contains("kiln_attn_simple") && !s.contains("kiln_attn_flash"));
        let s = source(&Key {
            dtype: DType::F16,
            mask: AttentionMask::Causal,
            variant: Variant::Hopper(64),
            lse: true,
        });
        assert!(s.contains("kiln_attn_hopper") && s.contains("#define LSE 1"));
        assert!(s.contains("m64n128k16.f32.f16.f16") && s.contains("m64n64k16.f32.f16.f16"));
        assert!(s.contains("#define WGMMA_RS_D k_wgmma_rs_64"));
    }

    #[test]
    fn the_forward_kernel_for_each_case() {
        use AttentionMask::{Additive, Causal, None as NoMask};
        let (bf, f32) = (DType::BF16, DType::F32);
        let pick = |dtype, d, lk, mask, scale, simple, form| {
            choose(dtype, (d, d, lk), mask, scale, simple, form)
        };
        // Persistent with keys (under the causal mask unless switched off); pingpong without.
        assert_eq!(pick(bf, 128, 512, NoMask, 0.1, false, Some(3)), Variant::HopperWs(128, 3));
        assert_eq!(pick(bf, 128, 512, Additive, 0.1, false, Some(3)), Variant::HopperWs(128, 3));
        let causal_form = if causal_persistent() { 3 } else { 2 };
        assert_eq!(
            pick(bf, 128, 512, Causal, 0.1, false, Some(3)),
            Variant::HopperWs(128, causal_form)
        );
        assert_eq!(pick(bf, 64, 0, NoMask, 0.1, false, Some(3)), Variant::HopperWs(64, 2));
        // The other forms as asked; cp is the plain Hopper variant.
        assert_eq!(pick(bf, 64, 9, NoMask, 0.1, false, Some(2)), Variant::HopperWs(64, 2));
        assert_eq!(pick(bf, 96, 9, Causal, 0.1, false, Some(1)), Variant::HopperWs(96, 1));
        assert_eq!(pick(bf, 256, 9, NoMask, 0.1, false, Some(0)), Variant::Hopper(256));
        // A negative or NaN scale, float32, unequal head dims, `simple` or no Hopper kernel:
        // the flash (or simple) kernel.
        assert_eq!(pick(bf, 128, 9, NoMask, -0.1, false, Some(3)), Variant::Flash(128));
        assert_eq!(pick(bf, 128, 9, NoMask, f64::NAN, false, Some(3)), Variant::Flash(128));
        assert_eq!(pick(f32, 128, 9, NoMask, 0.1, false, Some(3)), Variant::Simple);
        assert_eq!(pick(bf, 128, 9, NoMask, 0.1, true, Some(3)), Variant::Simple);
        assert_eq!(pick(bf, 128, 9, NoMask, 0.1, false, None), Variant::Flash(128));
        assert_eq!(pick(bf, 256, 9, NoMask, 0.1, false, None), Variant::Simple);
        assert_eq!(
            choose(bf, (128, 64, 9), NoMask, 0.1, false, Some(3)),
            Variant::Simple,
            "unequal head dims"
        );
    }

    #[test]
    fn causal_persistent_grids_visit_every_position_of_a_head() {
        // (8, 16, 2048) queries in 128-row tiles on 132 multiprocessors: 131 blocks.
        assert_eq!(persistent_grid(132, 2048, 16, true), 131);
        assert_eq!(persistent_grid(132, 2048, 16, false), 132);
        assert_eq!(persistent_grid(132, 100, 16, true), 100);
        for (sms, tiles, q_blocks) in
            [(132, 2048, 16), (132, 4096, 32), (114, 900, 9), (78, 640, 5)]
        {
            let g = persistent_grid(sms, tiles, q_blocks, true);
            assert!(g <= sms && g > sms / 2);
            // The busiest block's work (tile position p of a head has p + 1 key tiles' work,
            // the heaviest first) within one heavy tile of the mean (the grid of 132 on
            // 2048 tiles: 160 against a mean of 132).
            let work: Vec<usize> = (0..g)
                .map(|b| (b..tiles).step_by(g).map(|t| q_blocks - t % q_blocks).sum())
                .collect();
            let mean = work.iter().sum::<usize>() as f64 / g as f64;
            let hi = *work.iter().max().unwrap() as f64;
            assert!(hi <= mean + q_blocks as f64, "{sms} {tiles} {q_blocks}: {hi} vs {mean}");
        }
    }

    #[test]
    fn hopper_kernel_only_on_sm90_for_its_head_dims() {
        use super::super::attention_hopper::{shared_bytes, takes};
        // (On unless KILN_HOPPER_ATTN=off.)
        let on = super::super::attention_hopper::form().is_some();
        assert!([64, 96, 128, 256].iter().all(|&d| takes(d, (9, 0)) == on));
        assert!(!takes(80, (9, 0)) && !takes(128, (8, 0)) && !takes(128, (10, 0)));
        // Q, two K and two V tiles fit the H100/H200's 227 KiB: 128-key tiles up to head
        // dim 128 (96 padded to 128), 64-key tiles at 256.
        assert_eq!(shared_bytes(128), 5 * 128 * 128 * 2 + 1024 + 128);
        assert_eq!(shared_bytes(96), shared_bytes(128));
        assert_eq!(shared_bytes(256), (128 + 4 * 64) * 256 * 2 + 1024 + 128);
        assert!([64, 96, 128, 256].iter().all(|&d| shared_bytes(d) <= 227 << 10));
    }
}
