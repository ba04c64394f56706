//! Attention for a few queries against many keys: a decode step (one query per head over a
//! long KV cache). The flash kernel gives each 64-query tile one block, so one query per head
//! leaves most of the GPU idle and reads each KV head once per query head; this kernel
//! splits the keys across blocks instead ("flash decoding"):
//!
//! - `kiln_attn_decode`: a block takes one (batch, KV head), up to `ROWS` of the query rows
//!   that share that KV head (grouped-query heads times queries, so K and V are read once for
//!   the whole group) and one span of the keys. `T`-key tiles of K and V stream through shared
//!   memory, two stages deep (`cp.async` where rows are 16-byte aligned); scores, the online
//!   softmax (base 2) and `P V` run in float32 on the CUDA cores, since a few rows leave
//!   nothing for the tensor cores to do. K and V are read in place through their strides, so
//!   the slice of a preallocated cache (mlx-lm's `KVCache`) is never copied.
//! - With more than one span, each block leaves its span's unnormalised output and (max, sum)
//!   per row in float32 buffers, and the unit's last block to finish (a counter per unit in
//!   `Gpu::counters`, reset by that block) merges the spans into the output: one kernel a
//!   step where a separate merge kernel cost a launch and its gap. With one span the block
//!   writes the output itself.
//!
//! Semantics are `attention`'s (kiln-cpu's): hidden scores are the lowest finite float (a
//! fully hidden row averages every value), causal is lower-right aligned, no keys give zeros,
//! NaN propagates.

use super::attention::common;
use super::{dense, ptr};
use crate::copy::empty;
use crate::launch::{launch, Args};
use crate::nvrtc::{check_grid, Function, KernelCache};
use crate::runtime::{gpu, COUNTERS};
use kiln_base::{ArrayData, AttentionMask, DType, Result};
use std::fmt::Write;

const DECODE: &str = "kiln_attn_decode";
const THREADS: u32 = 128;
/// Query rows (heads of a group times queries) one block holds at most.
const MAX_ROWS: usize = 8;
/// Row tiles per (batch, KV head) up to which this kernel beats the flash kernel: each tile
/// reads K and V again.
const MAX_ROW_TILES: usize = 2;
/// Static shared memory per block.
const SHARED_LIMIT: usize = 48 * 1024;
/// Largest head dim: the `P V` step gives each thread `dv / 128` output columns per row.
const MAX_DIM: usize = 256;
/// Fewest key tiles a span takes: fewer make the merge's traffic matter.
const MIN_SPAN_TILES: usize = 2;

/// `KILN_DECODE_SPAN_TILES=n` (read once) overrides [`MIN_SPAN_TILES`], for tuning on a device.
fn min_span_tiles() -> usize {
    static FORCED: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *FORCED.get_or_init(|| {
        match crate::launch::tuning_numbers("KILN_DECODE_SPAN_TILES").as_slice() {
            [n] if (1..=64).contains(n) => *n,
            _ => MIN_SPAN_TILES,
        }
    })
}
/// Most key spans (each one's partial results are merged by one block).
const MAX_SPANS: usize = 1024;

#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub(crate) struct Key {
    pub dtype: DType,
    pub mask: AttentionMask,
    pub dk: usize,
    pub dv: usize,
    pub rows: usize,
    pub tile: usize,
    /// K and V rows are 16-byte aligned: tiles load through `cp.async`.
    pub vec: bool,
    /// The merge takes every row at once (`KILN_DECODE_MERGE_ROWS=1`; off until its GPU
    /// tests have run), else a row after a row.
    pub merge_rows: bool,
}

/// `KILN_DECODE_MERGE_ROWS=1` (read once): the merge of every row at once.
fn merge_rows() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var("KILN_DECODE_MERGE_ROWS").as_deref() == Ok("1"))
}

/// Shared row lengths (elements) of the K and V tiles: padded by 16 bytes (keeps vector
/// rows aligned and puts the rows one score step reads in distinct banks).
fn padded(d: usize, esize: usize, vec: bool) -> usize {
    if vec {
        d + 16 / esize
    } else {
        d + 4 / esize
    }
}

fn shared_bytes(esize: usize, dk: usize, dv: usize, rows: usize, tile: usize, vec: bool) -> usize {
    let stages = 2 * tile * (padded(dk, esize, vec) + padded(dv, esize, vec)) * esize;
    stages + rows * dk * 4 + rows * tile * 4 + 3 * rows * 4
}

/// The largest key tile whose two stages fit the static shared memory.
fn tile_for(esize: usize, dk: usize, dv: usize, rows: usize, vec: bool) -> Option<usize> {
    [64, 32, 16, 8].into_iter().find(|&t| shared_bytes(esize, dk, dv, rows, t, vec) <= SHARED_LIMIT)
}

/// Query rows per block for `r` rows per (batch, KV head): a power of two up to `MAX_ROWS`.
fn rows_for(r: usize) -> usize {
    r.clamp(1, MAX_ROWS).next_power_of_two()
}

/// Whether q (B, Hq, Lq, Dk), k (B, Hk, Lk, Dk), v (B, Hk, Lk, Dv) is a decode shape this
/// kernel takes: few query rows per KV head, head dims up to 256, any float dtype.
pub(crate) fn takes(dtype: DType, q: &[usize], k: &[usize], v: &[usize]) -> bool {
    let (Ok([_, hq, lq, dk]), Ok([_, hk, _, _]), Ok([_, _, _, dv])) =
        (<[usize; 4]>::try_from(q), <[usize; 4]>::try_from(k), <[usize; 4]>::try_from(v))
    else {
        return false;
    };
    if hk == 0 || !hq.is_multiple_of(hk) || dk == 0 || dv == 0 || dk.max(dv) > MAX_DIM {
        return false;
    }
    let r = (hq / hk) * lq;
    let esize = dtype.size();
    matches!(dtype, DType::F32 | DType::F16 | DType::BF16)
        && r <= MAX_ROWS * MAX_ROW_TILES
        && tile_for(esize, dk, dv, rows_for(r), false).is_some()
}

const BODY: &str = r#"
#define NT 128
#define SPT ((T + 31) / 32) /* scores per lane in the softmax step */
#define DPT ((DV + NT - 1) / NT) /* output columns per thread */

/* `a`'s two halves as floats. */
K_INLINE float k_lo(uint32_t a) { return k_load((S)(a & 0xffffu)); }
K_INLINE float k_hi(uint32_t a) { return k_load((S)(a >> 16)); }

/* q . k over DK: q scaled, float32 in shared memory; k a shared tile row. With MERGE_ROWS
   (the kernel's new form, on with it until both have run on a GPU), four partial sums:
   one chain of DK dependent FMAs was the tile's longest step. */
#if MERGE_ROWS
#define K_PARTS 4
#else
#define K_PARTS 1
#endif
K_INLINE float k_dot(const float *__restrict__ qr, const S *__restrict__ kr) {
    float a[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#if VEC && S_IS_FLOAT
    #pragma unroll 4
    for (int d = 0; d < DK; d += 4) {
        const float4 u = *(const float4 *)(kr + d), b = *(const float4 *)(qr + d);
        a[0] = fmaf(u.x, b.x, a[0]); a[1 % K_PARTS] = fmaf(u.y, b.y, a[1 % K_PARTS]);
        a[2 % K_PARTS] = fmaf(u.z, b.z, a[2 % K_PARTS]); a[3 % K_PARTS] = fmaf(u.w, b.w, a[3 % K_PARTS]);
    }
#elif VEC
    #pragma unroll 4
    for (int d = 0; d < DK; d += 8) {
        const uint4 u = *(const uint4 *)(kr + d);
        const float4 b = *(const float4 *)(qr + d), c = *(const float4 *)(qr + d + 4);
        a[0] = fmaf(k_lo(u.x), b.x, a[0]); a[1 % K_PARTS] = fmaf(k_hi(u.x), b.y, a[1 % K_PARTS]);
        a[2 % K_PARTS] = fmaf(k_lo(u.y), b.z, a[2 % K_PARTS]); a[3 % K_PARTS] = fmaf(k_hi(u.y), b.w, a[3 % K_PARTS]);
        a[0] = fmaf(k_lo(u.z), c.x, a[0]); a[1 % K_PARTS] = fmaf(k_hi(u.z), c.y, a[1 % K_PARTS]);
        a[2 % K_PARTS] = fmaf(k_lo(u.w), c.z, a[2 % K_PARTS]); a[3 % K_PARTS] = fmaf(k_hi(u.w), c.w, a[3 % K_PARTS]);
    }
#else
    for (int d = 0; d < DK; ++d) a[0] = fmaf(k_load(kr[d]), qr[d], a[0]);
    return a[0];
#endif
#if VEC
    return K_PARTS == 1 ? a[0] : (a[0] + a[1]) + (a[2] + a[3]);
#endif
}

K_INLINE void k_cp16(S *dst, const S *src, bool valid) {
    const uint32_t d = (uint32_t)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(d), "l"(src), "r"(valid ? 16 : 0));
}

/* Keys [j0, j0 + T) of one head (rows `js` elements apart) into a tile of rows `ld` long;
   keys at or past `j_end` are zeros (0 * NaN would poison a product). */
template <int DIM, int LD>
K_INLINE void k_load_tile(S *tile, const S *__restrict__ src, int64_t js, int64_t j0, int64_t j_end) {
#if VEC
    const int chunks = DIM * (int)sizeof(S) / 16, per = 16 / (int)sizeof(S);
    for (int e = threadIdx.x; e < T * chunks; e += NT) {
        const int r = e / chunks, c = (e % chunks) * per;
        const bool valid = j0 + r < j_end;
        k_cp16(tile + r * LD + c, src + (valid ? (j0 + r) * js + c : 0), valid);
    }
#else
    for (int e = threadIdx.x; e < T * DIM; e += NT) {
        const int r = e / DIM, c = e % DIM;
        tile[r * LD + c] = j0 + r < j_end ? src[(j0 + r) * js + c] : (S)0;
    }
#endif
}

K_INLINE void k_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N> K_INLINE void k_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory"); }

/* Strides (elements) of q, k, v: batch, head, row; the feature stride is 1. */
struct Str3 { int64_t v[3]; };

extern "C" __global__ void __launch_bounds__(NT) kiln_attn_decode(
        const int64_t hq, const int64_t lq, const int64_t lk, const int64_t group,
        const int64_t hk, const int64_t row_tiles, const int64_t spans, const int64_t span_keys,
        const S *__restrict__ q, const S *__restrict__ k, const S *__restrict__ v,
        const Str3 qs, const Str3 ks, const Str3 vs, const M *__restrict__ mask,
        const KStrides ms, const int64_t total_rows, S *__restrict__ out, float *__restrict__ part_o,
        float *__restrict__ part_ml, const double scale, unsigned int *__restrict__ counters) {
    __shared__ __align__(16) S sk[2][T * LDK];
    __shared__ __align__(16) S sv[2][T * LDV];
    __shared__ __align__(16) float sq[ROWS * DK];
    __shared__ float sp[ROWS * T];
    __shared__ float s_m[ROWS], s_l[ROWS], s_c[ROWS];
    __shared__ bool s_last;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int64_t span = blockIdx.x % spans, t = blockIdx.x / spans;
    const int64_t rt = t % row_tiles, bkv = t / row_tiles, kvh = bkv % hk, b = bkv / hk;
    const int64_t r0 = rt * ROWS; /* the block's first row among the group's group * lq */
    const int nr = (int)min((int64_t)ROWS, group * lq - r0);
    const int64_t j_begin = span * span_keys, j_end = min(lk, j_begin + span_keys);
    const S *kp = k + b * ks.v[0] + kvh * ks.v[1];
    const S *vp = v + b * vs.v[0] + kvh * vs.v[1];
    const float sl = (float)scale * LOG2E;
    const int64_t shift = lk - lq;

    const int tiles = (int)((j_end - j_begin + T - 1) / T);
    if (tiles > 0) {
        k_load_tile<DK, LDK>(sk[0], kp, ks.v[2], j_begin, j_end);
        k_load_tile<DV, LDV>(sv[0], vp, vs.v[2], j_begin, j_end);
    }
    k_commit();
    for (int e = threadIdx.x; e < ROWS * DK; e += NT) {
        const int r = e / DK, d = e % DK;
        float x = 0.0f;
        if (r < nr) {
            const int64_t h = kvh * group + (r0 + r) / lq, i = (r0 + r) % lq;
            x = k_load(q[b * qs.v[0] + h * qs.v[1] + i * qs.v[2] + d]) * sl;
        }
        sq[e] = x;
    }
    if (threadIdx.x < ROWS) {
        s_m[threadIdx.x] = -INFINITY;
        s_l[threadIdx.x] = 0.0f;
        s_c[threadIdx.x] = 1.0f;
    }
    float acc[DPT][ROWS];
    #pragma unroll
    for (int c = 0; c < DPT; ++c)
        #pragma unroll
        for (int r = 0; r < ROWS; ++r) acc[c][r] = 0.0f;

    for (int ti = 0; ti < tiles; ++ti) {
        const int st = ti & 1;
        const int64_t j0 = j_begin + (int64_t)ti * T;
        if (ti + 1 < tiles) {
            k_load_tile<DK, LDK>(sk[st ^ 1], kp, ks.v[2], j0 + T, j_end);
            k_load_tile<DV, LDV>(sv[st ^ 1], vp, vs.v[2], j0 + T, j_end);
        }
        k_commit();
        k_wait<1>();
        __syncthreads(); /* this tile is in (and sq, s_m on the first pass) */

        /* Scores in base-2 units with the mask; keys past the span are -inf (weight 0). */
        for (int e = threadIdx.x; e < ROWS * T; e += NT) {
            const int r = e / T, jj = e % T;
            const int64_t j = j0 + jj;
            float x = -INFINITY;
            if (r < nr && j < j_end) {
                x = k_dot(sq + r * DK, sk[st] + jj * LDK);
#if MASK >= 1
                const int64_t h = kvh * group + (r0 + r) / lq, i = (r0 + r) % lq;
                (void)h;
#endif
#if MASK == 1
                if (j > i + shift) x = LOWEST;
#elif MASK == 2
                x = x + k_load(mask[b * ms.v[0] + h * ms.v[1] + i * ms.v[2] + j * ms.v[3]]) * LOG2E;
#elif MASK == 3
                if (!mask[b * ms.v[0] + h * ms.v[1] + i * ms.v[2] + j * ms.v[3]]) x = LOWEST;
#endif
            }
            sp[e] = x;
        }
        __syncthreads();

        /* Online softmax: a warp per row. */
        for (int r = warp; r < nr; r += NT / 32) {
            float x[SPT], tmax = -INFINITY;
            #pragma unroll
            for (int c = 0; c < SPT; ++c) {
                const int jj = lane + 32 * c;
                x[c] = jj < T ? sp[r * T + jj] : -INFINITY;
                tmax = k_max_nan(tmax, x[c]);
            }
            #pragma unroll
            for (int o = 16; o > 0; o >>= 1) tmax = k_max_nan(tmax, __shfl_xor_sync(0xffffffffu, tmax, o));
            const float m_old = s_m[r], m_new = k_max_nan(m_old, tmax);
            const float corr = m_new == m_old ? 1.0f : exp2f(m_old - m_new);
            /* Every score so far -inf (an additive mask): exp(-inf - 0) = 0, not NaN. */
            const float base = m_new == -INFINITY ? 0.0f : m_new;
            float sum = 0.0f;
            #pragma unroll
            for (int c = 0; c < SPT; ++c) {
                const int jj = lane + 32 * c;
                const float p = exp2f(x[c] - base);
                if (jj < T) sp[r * T + jj] = p;
                sum += jj < T ? p : 0.0f;
            }
            #pragma unroll
            for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
            __syncwarp();
            if (lane == 0) {
                s_l[r] = s_l[r] * corr + sum;
                s_m[r] = m_new;
                s_c[r] = corr;
            }
        }
        __syncthreads();

        /* O += P V: a thread per output column. */
        const int kt = (int)min((int64_t)T, j_end - j0);
        #pragma unroll
        for (int c = 0; c < DPT; ++c) {
            const int d = threadIdx.x + c * NT;
            if (d < DV) {
                #pragma unroll
                for (int r = 0; r < ROWS; ++r) acc[c][r] *= s_c[r];
                for (int jj = 0; jj < kt; ++jj) {
                    const float vv = k_load(sv[st][jj * LDV + d]);
                    #pragma unroll
                    for (int r = 0; r < ROWS; ++r) acc[c][r] = fmaf(sp[r * T + jj], vv, acc[c][r]);
                }
            }
        }
        __syncthreads(); /* sp, s_c and this stage are rewritten next */
    }
    k_wait<0>();
    __syncthreads(); /* s_m, s_l of a block with no keys */

    const int64_t row_base = (b * hq + kvh * group) * lq + r0; /* output row of local row 0 */
    #pragma unroll
    for (int r = 0; r < ROWS; ++r) {
        if (r >= nr) break;
        const int64_t row = row_base + r;
        if (spans == 1) {
            const float inv = lk == 0 ? 0.0f : 1.0f / s_l[r];
            #pragma unroll
            for (int c = 0; c < DPT; ++c) {
                const int d = threadIdx.x + c * NT;
                if (d < DV) out[row * DV + d] = k_store(lk == 0 ? 0.0f : acc[c][r] * inv);
            }
        } else {
            const int64_t slot = span * total_rows + row;
            #pragma unroll
            for (int c = 0; c < DPT; ++c) {
                const int d = threadIdx.x + c * NT;
                if (d < DV) part_o[slot * DV + d] = acc[c][r];
            }
            if (threadIdx.x == 0) {
                part_ml[2 * slot] = s_m[r];
                part_ml[2 * slot + 1] = s_l[r];
            }
        }
    }
    if (spans == 1) return;

    /* The unit's last block to arrive merges every span's partials: each block's writes are
       fenced before its arrival is counted, and the merging block reads them from L2. All
       blocks of the unit have arrived then, so it can reset the counter for the next launch. */
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) {
        const unsigned int before = atomicAdd(counters + t, 1u);
        s_last = before == (unsigned int)spans - 1;
        if (s_last) counters[t] = 0u;
    }
    __syncthreads();
    if (!s_last) return;
    __threadfence();
#if MERGE_ROWS
    /* Every row at once, the spans' loads in flight together (a row after a row, each a chain
       of dependent L2 round trips, cost more than the spans' own work). First a warp per row:
       the max over the spans and the denominator (lanes take the spans in turn, then a fixed
       shuffle tree: the same bits whichever block merges). A row whose scores are all -inf
       gets 0 / 0 (NaN), as one span would. */
    const int ns = (int)spans;
    const int64_t ml_step = 2 * total_rows;
    for (int r = warp; r < nr; r += NT / 32) {
        const float *ml = part_ml + 2 * (row_base + r);
        float mx = -INFINITY;
        for (int s = lane; s < ns; s += 32) mx = k_max_nan(mx, __ldcg(ml + s * ml_step));
        #pragma unroll
        for (int o = 16; o > 0; o >>= 1) mx = k_max_nan(mx, __shfl_xor_sync(0xffffffffu, mx, o));
        const float base = mx == -INFINITY ? 0.0f : mx;
        float den = 0.0f;
        for (int s = lane; s < ns; s += 32)
            den = fmaf(exp2f(__ldcg(ml + s * ml_step) - base), __ldcg(ml + s * ml_step + 1), den);
        #pragma unroll
        for (int o = 16; o > 0; o >>= 1) den += __shfl_xor_sync(0xffffffffu, den, o);
        if (lane == 0) {
            s_m[r] = base;
            s_l[r] = den;
        }
    }
    __syncthreads();
    /* Then each thread its columns of every row, summed in span order, `UNROLL` spans of
       every row loaded before any is used. */
    constexpr int UNROLL = ROWS >= 8 ? 4 : 8;
    const int64_t step = total_rows * DV;
    #pragma unroll
    for (int c = 0; c < DPT; ++c) {
        const int d = threadIdx.x + c * NT;
        if (d >= DV) break;
        float num[ROWS];
        #pragma unroll
        for (int r = 0; r < ROWS; ++r) num[r] = 0.0f;
        for (int s0 = 0; s0 < ns; s0 += UNROLL) {
            float pm[UNROLL][ROWS], po[UNROLL][ROWS];
            #pragma unroll
            for (int u = 0; u < UNROLL; ++u)
                #pragma unroll
                for (int r = 0; r < ROWS; ++r) {
                    const bool in = s0 + u < ns && r < nr;
                    const int64_t slot = (int64_t)(s0 + u) * total_rows + row_base + r;
                    pm[u][r] = in ? __ldcg(part_ml + 2 * slot) : -INFINITY;
                    po[u][r] = in ? __ldcg(part_o + slot * DV + d) : 0.0f;
                }
            #pragma unroll
            for (int u = 0; u < UNROLL; ++u)
                #pragma unroll
                for (int r = 0; r < ROWS; ++r)
                    if (s0 + u < ns) num[r] = fmaf(exp2f(pm[u][r] - s_m[r]), po[u][r], num[r]);
        }
        #pragma unroll
        for (int r = 0; r < ROWS; ++r)
            if (r < nr) out[(row_base + r) * DV + d] = k_store(num[r] * (1.0f / s_l[r]));
    }
#else
    /* Per row: the spans' outputs weighted by exp2(m_s - max) over the weighted sums, summed
       in span order by every thread (the same order, so the same bits, whoever merges). A
       row whose scores are all -inf gets 0 / 0 (NaN), as one span would. */
    const int ns = (int)spans;
    for (int r = 0; r < nr; ++r) {
        const int64_t row = row_base + r;
        const float *ml = part_ml + 2 * row;
        float mx = -INFINITY;
        for (int s = 0; s < ns; ++s) mx = k_max_nan(mx, __ldcg(ml + 2 * s * total_rows));
        const float base = mx == -INFINITY ? 0.0f : mx;
        #pragma unroll
        for (int c = 0; c < DPT; ++c) {
            const int d = threadIdx.x + c * NT;
            if (d >= DV) break;
            const float *po = part_o + row * DV + d;
            const int64_t step = total_rows * DV;
            float den = 0.0f, num = 0.0f;
            #pragma unroll 4
            for (int s = 0; s < ns; ++s) {
                const float w = exp2f(__ldcg(ml + 2 * s * total_rows) - base);
                den = fmaf(w, __ldcg(ml + 2 * s * total_rows + 1), den);
                num = fmaf(w, __ldcg(po + s * step), num);
            }
            out[row * DV + d] = k_store(num * (1.0f / den));
        }
    }
#endif
}
"#;

/// The kernel's source.
fn source(key: &Key) -> String {
    let mut s = common(&super::attention::Key {
        dtype: key.dtype,
        mask: key.mask,
        variant: super::attention::Variant::Simple,
        lse: false,
    });
    let esize = key.dtype.size();
    let _ = write!(
        s,
        "#define DK {}\n#define DV {}\n#define ROWS {}\n#define T {}\n#define VEC {}\n\
         #define LDK {}\n#define LDV {}\n#define S_IS_FLOAT {}\n#define MERGE_ROWS {}\n",
        key.dk,
        key.dv,
        key.rows,
        key.tile,
        key.vec as u8,
        padded(key.dk, esize, key.vec),
        padded(key.dv, esize, key.vec),
        (key.dtype == DType::F32) as u8,
        key.merge_rows as u8,
    );
    s.push_str(BODY);
    s
}

static KERNELS: KernelCache<Key> = KernelCache::new();

fn kernel(key: &Key) -> Result<Function> {
    KERNELS.get(key, DECODE, || source(key))
}

/// Strides (elements) of axes 0, 1 and 2 of a 4-d input whose last axis has unit stride (a
/// size-1 axis's stride is irrelevant: 0), or `None`.
fn strides3(x: &ArrayData) -> Option<[i64; 3]> {
    let (shape, strides) = (&x.layout.shape, &x.layout.strides);
    if shape[3] > 1 && strides[3] != 1 {
        return None;
    }
    Some([0, 1, 2].map(|a| if shape[a] > 1 { strides[a] as i64 } else { 0 }))
}

/// `x` with a unit feature stride (a copy only when it has none) and its strides.
fn in_place(x: &ArrayData) -> Result<(ArrayData, [i64; 3])> {
    if let Some(s) = strides3(x) {
        return Ok((x.clone(), s));
    }
    let d = dense(x)?;
    let s = strides3(&d).unwrap_or([0; 3]);
    Ok((d, s))
}

/// Key spans for `units` blocks' worth of (batch, KV head, row tile) over `lk` keys: enough
/// blocks to fill the GPU a few times over, each span at least `MIN_SPAN_TILES` tiles.
fn spans_for(units: usize, lk: usize, tile: usize, sms: usize) -> (usize, usize) {
    spans_with(units, lk, tile, sms, min_span_tiles())
}

fn spans_with(units: usize, lk: usize, tile: usize, sms: usize, least: usize) -> (usize, usize) {
    let tiles = lk.div_ceil(tile).max(1);
    let want = (4 * sms).div_ceil(units.max(1));
    let spans = want.min(tiles.div_ceil(least)).clamp(1, MAX_SPANS);
    let span_tiles = tiles.div_ceil(spans);
    (tiles.div_ceil(span_tiles), span_tiles * tile)
}

/// Attention through the decode kernels (the caller checked [`takes`]).
pub(crate) fn attention(
    inputs: &[ArrayData],
    mask: AttentionMask,
    scale: f64,
    shape: &[usize],
) -> Result<ArrayData> {
    let op = "scaled_dot_product_attention";
    let dtype = inputs[0].dtype;
    let out = empty(shape, dtype)?;
    if out.layout.size() == 0 {
        return Ok(out);
    }
    let [b_n, hq, lq, dk] = [0, 1, 2, 3].map(|a| inputs[0].layout.shape[a]);
    let (hk, lk, dv) =
        (inputs[1].layout.shape[1], inputs[1].layout.shape[2], inputs[2].layout.shape[3]);
    let (q, qs) = in_place(&inputs[0])?;
    let (k, ks) = in_place(&inputs[1])?;
    let (v, vs) = in_place(&inputs[2])?;
    let esize = dtype.size();
    let aligned = |x: &ArrayData, s: &[i64; 3], d: usize| {
        ptr(x).is_multiple_of(16)
            && (d * esize).is_multiple_of(16)
            && s.iter().all(|&st| (st as usize * esize).is_multiple_of(16))
    };
    let group = hq / hk;
    let rows = rows_for(group * lq);
    let vec = aligned(&k, &ks, dk) && aligned(&v, &vs, dv);
    let vec = vec && tile_for(esize, dk, dv, rows, true).is_some();
    let Some(tile) = tile_for(esize, dk, dv, rows, vec) else {
        kiln_base::bail!(Value, op, "Head dims {dk} and {dv} are too large for the GPU kernel.");
    };
    let key = Key { dtype, mask, dk, dv, rows, tile, vec, merge_rows: merge_rows() };
    let row_tiles = (group * lq).div_ceil(rows);
    let units = b_n * hk * row_tiles;
    let gpu = gpu()?;
    let (spans, span_keys) = spans_for(units, lk, tile, gpu.multiprocessors as usize);
    // A counter per unit merges its spans; more units than counters fill the GPU unsplit.
    let (spans, span_keys) = if units > COUNTERS { (1, lk.max(1)) } else { (spans, span_keys) };
    let total_rows = b_n * hq * lq;
    let (mptr, mstrides) = match mask {
        AttentionMask::Additive | AttentionMask::Boolean => {
            (ptr(&inputs[3]), super::attention::mask_strides(&inputs[3]))
        }
        _ => (0, [0; 4]),
    };
    // Each span's unnormalised output and (max, sum) per row, when there is more than one.
    let parts = if spans > 1 {
        Some((
            empty(&[spans * total_rows * dv], DType::F32)?,
            empty(&[spans * total_rows * 2], DType::F32)?,
        ))
    } else {
        None
    };
    let (po, pml) = parts.as_ref().map_or((0, 0), |(o, ml)| (ptr(o), ptr(ml)));
    let mut args = Args::new();
    args.i64(hq as i64).i64(lq as i64).i64(lk as i64).i64(group as i64).i64(hk as i64);
    args.i64(row_tiles as i64).i64(spans as i64).i64(span_keys as i64);
    args.ptr(ptr(&q)).ptr(ptr(&k)).ptr(ptr(&v));
    args.i64_struct(&qs).i64_struct(&ks).i64_struct(&vs);
    args.ptr(mptr).i64_struct(&mstrides).i64(total_rows as i64);
    args.ptr(out.buffer.as_ptr() as u64).ptr(po).ptr(pml);
    args.i64(scale.to_bits() as i64).ptr(gpu.counters);
    let blocks = check_grid(op, (units * spans) as u64)?;
    launch(DECODE, kernel(&key)?, blocks, THREADS, 0, &mut args)?;
    Ok(out)
}

/// Every variant's source the tests and the offline NVRTC check see.
#[cfg(test)]
pub(crate) fn all_sources() -> Vec<(String, String)> {
    let mut out = Vec::new();
    for dtype in [DType::F32, DType::F16, DType::BF16] {
        for mask in [
            AttentionMask::None,
            AttentionMask::Causal,
            AttentionMask::Additive,
            AttentionMask::Boolean,
        ] {
            for (dk, dv, rows, vec) in
                [(128, 128, 4, true), (64, 64, 1, true), (80, 80, 8, false), (256, 256, 8, true)]
            {
                let Some(tile) = tile_for(dtype.size(), dk, dv, rows, vec) else { continue };
                for merge_rows in [false, true] {
                    let key = Key { dtype, mask, dk, dv, rows, tile, vec, merge_rows };
                    out.push((format!("attn_decode_{key:?}"), source(&key)));
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shapes_taken() {
        let q = [1, 32, 1, 128];
        let kv = [1, 8, 4096, 128];
        assert!(takes(DType::BF16, &q, &kv, &kv));
        assert!(takes(DType::F32, &q, &kv, &kv));
        assert!(takes(DType::F16, &[2, 8, 16, 64], &[2, 8, 100, 64], &[2, 8, 100, 64]));
        assert!(!takes(DType::F16, &[2, 8, 17, 64], &[2, 8, 100, 64], &[2, 8, 100, 64]));
        assert!(!takes(DType::BF16, &[1, 32, 8, 128], &kv, &kv), "32 rows per KV head");
        assert!(!takes(DType::BF16, &[1, 4, 1, 512], &[1, 4, 9, 512], &[1, 4, 9, 512]));
        assert!(!takes(DType::F64, &q, &kv, &kv));
        assert!(!takes(DType::BF16, &[1, 6, 1, 64], &[1, 4, 9, 64], &[1, 4, 9, 64]));
    }

    #[test]
    fn tiles_and_spans() {
        assert_eq!(tile_for(2, 128, 128, 4, true), Some(32));
        assert_eq!(tile_for(2, 64, 64, 1, true), Some(64));
        assert_eq!(tile_for(4, 256, 256, 8, true), Some(8));
        for (esize, d) in [(2, 256), (4, 256), (4, 128), (2, 96)] {
            let t = tile_for(esize, d, d, 8, true).unwrap();
            assert!(shared_bytes(esize, d, d, 8, t, true) <= SHARED_LIMIT);
        }
        // 8 KV heads, 4096 keys, 132 multiprocessors: 64 spans of two 32-key tiles.
        assert_eq!(spans_with(8, 4096, 32, 132, 2), (64, 64));
        // Few keys: one span.
        assert_eq!(spans_with(8, 40, 32, 132, 2), (1, 64));
        assert_eq!(spans_with(8, 513, 32, 132, 1), (17, 32));
        // The spans cover every key and none is empty.
        for (units, lk, tile) in [(1, 1, 64), (3, 1000, 32), (64, 100_000, 16), (200, 77, 8)] {
            let (spans, keys) = spans_with(units, lk, tile, 132, 1 + units % 3);
            assert!(spans * keys >= lk && (spans - 1) * keys < lk, "{units} {lk} {tile}");
        }
    }

    #[test]
    fn sources() {
        let srcs = all_sources();
        assert!(srcs.len() >= 20);
        let (_, s) = &srcs[0];
        assert!(s.contains("kiln_attn_decode") && s.contains("atomicAdd(counters + t, 1u)"));
        assert!(s.contains("#define DK 128\n#define DV 128\n#define ROWS 4\n#define T 16"));
    }
}
