//! Attention's fused backward on Hopper (sm_90): `attention_bwd.rs`'s two main kernels with
//! every product on `wgmma` (`attention_hopper.rs`'s tile layout, descriptors and fragment
//! reuse), for head dims 64 and 128, no mask or causal. Same algorithm and the same
//! reproducibility (no atomics); its `delta` kernel (`Di = rowsum(dO O)`) and per-entry
//! math (`attention_bwd::ENTRIES`) are shared.
//! - `kv`: a block of two warpgroups owns 128 keys of one (batch, kv head), 64 a warpgroup,
//!   K and V in shared memory for the block's life; it walks 64-query tiles of every query
//!   head of its GQA group: `Sᵀ = K Qᵀ` and `dPᵀ = V dOᵀ` from shared memory, then
//!   `dV += Pᵀ dO` and `dK += dSᵀ Q` with `Pᵀ` and `dSᵀ` as register operands and Q and dO
//!   read MN-major (transposed).
//! - `q`: a block owns 128 queries of one (batch, head), 64 a warpgroup, Q and dO in shared
//!   memory; it walks 64-key tiles: `S = Q Kᵀ`, `dP = dO Vᵀ`, then `dQ += dS K`.
//!
//! On with the forward's kernel (`KILN_HOPPER_ATTN=off` turns both off). On an H100
//! (bench/fast_gpu.py, (8, 16, 2048, 128) bf16) the backward took 3.72 ms against 4.81 for
//! the mma.sync kernels (torch's flash backward: 2.61).

use super::attention_hopper::{wgmma_helpers, HELPERS};

/// Keys per block of the kv kernel and queries per block of the q kernel (two warpgroups).
pub(crate) const BLOCK: usize = 128;
/// Queries per step of the kv kernel, keys per step of the q kernel.
const STEP: usize = 64;
pub(crate) const THREADS: u32 = 256;
pub(crate) const KV: &str = "kiln_attn_bwd_kv_hopper";
pub(crate) const Q: &str = "kiln_attn_bwd_q_hopper";

/// Whether these kernels take head dim `d` on a GPU of compute capability `arch`.
pub(crate) fn takes(d: usize, arch: (i32, i32)) -> bool {
    matches!(d, 64 | 128) && super::attention_hopper::takes(d, arch)
}

/// Dynamic shared memory: two 128-row tiles, two stages of two 64-row tiles of `d` columns
/// (the step's tiles load while the last step's are used), two stages of 128 floats of row
/// statistics (kv kernel), and 1 KiB to align the base to the swizzle's period.
pub(crate) fn shared_bytes(d: usize) -> usize {
    2 * (BLOCK + 2 * STEP) * d * 2 + 2 * 2 * STEP * 4 + 1024
}

/// The kernel's source after `attention::common` (`kv` or `q`).
pub(crate) fn body(d: usize, dtype_mma: &str, kv: bool) -> String {
    let mut s = format!("#define D {d}\n#define DR {d}\n#define BQ {STEP}\n#define BK {STEP}\n");
    s.push_str(&wgmma_helpers(STEP, dtype_mma));
    if d != STEP {
        s.push_str(&wgmma_helpers(d, dtype_mma));
    }
    s.push_str(&format!(
        "#define WGMMA_SS_64 k_wgmma_ss_{STEP}\n#define WGMMA_RS_D k_wgmma_rs_{d}\n"
    ));
    s.push_str(HELPERS);
    s.push_str(SHARED);
    s.push_str(if kv { KV_BODY } else { Q_BODY });
    s
}

const SHARED: &str = r#"
/* 4 bytes (zeros where !valid) through cp.async, in the tiles' copy group. */
K_INLINE void k_cp4(float *dst, const float *src, bool valid) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(k_smem(dst)), "l"(src),
                 "r"(valid ? 4 : 0));
}
/* acc (64 x 64 per warpgroup) = A B^T over D: A's 64 rows at `a` (a tile of `a_rows` rows a
   panel), B's 64 rows at `b` (`b_rows` a panel), both K-major. */
K_INLINE void k_nt(float *acc, uint32_t a, int a_rows, uint32_t b, int b_rows) {
    #pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
        const uint32_t off = (kk & 3) << 5;
        WGMMA_SS_64(acc, k_desc(a + (kk >> 2) * (a_rows * 128) + off, 16, 1024),
                    k_desc(b + (kk >> 2) * (b_rows * 128) + off, 16, 1024), kk);
    }
}
/* acc (64 x D) += P B over 64 inner rows: P as register fragments (4 steps of 16), B's rows
   (64 a panel) read MN-major. */
K_INLINE void k_nn(float *acc, uint32_t (*pf)[4], uint32_t b) {
    #pragma unroll
    for (int c = 0; c < 4; ++c) WGMMA_RS_D(acc, pf[c], k_desc(b + c * 16 * 128, 64 * 128, 1024));
}
/* x = A B^T and y = C E^T (64 x 64 each, `k_nt`'s operands, A and C 128 rows a panel, B and E
   `rows`), issued together and waited for. */
K_INLINE void k_nt_pair(float *x, uint32_t a, uint32_t b, float *y, uint32_t c, uint32_t e,
                        int rows) {
    k_wg_fence();
    k_nt(x, a, 128, b, rows);
    k_nt(y, c, 128, e, rows);
    k_wg_commit();
    k_wg_wait();
    k_fence_regs(x, 32);
    k_fence_regs(y, 32);
}
/* Accumulator chunks 2c and 2c + 1 as the register A operand of step c. */
K_INLINE void k_frag(uint32_t (*f)[4], const float *x) {
    #pragma unroll
    for (int c = 0; c < 4; ++c) {
        f[c][0] = k_pack(x[8 * c + 0], x[8 * c + 1]);
        f[c][1] = k_pack(x[8 * c + 2], x[8 * c + 3]);
        f[c][2] = k_pack(x[8 * c + 4], x[8 * c + 5]);
        f[c][3] = k_pack(x[8 * c + 6], x[8 * c + 7]);
    }
}
"#;

const KV_BODY: &str = r#"
extern "C" __global__ void __launch_bounds__(256, 1) kiln_attn_bwd_kv_hopper(
        const int64_t hq, const int64_t lq, const int64_t lk, const int64_t group, const int64_t hk,
        const int64_t k_blocks, const S *__restrict__ q, const S *__restrict__ k,
        const S *__restrict__ v, const S *__restrict__ dout, const float *__restrict__ lse,
        const float *__restrict__ delta, S *__restrict__ dk, S *__restrict__ dv,
        const double scale) {
    extern __shared__ uint8_t smem_raw[];
    const uint32_t base = (k_smem(smem_raw) + 1023u) & ~1023u;
    /* Stage st's Q and dO tiles at sq + st * STAGE, sdo + st * STAGE. */
    const uint32_t STAGE = 2 * BQ * D * 2;
    const uint32_t sk = base, sv = sk + 128 * D * 2, sq = sv + 128 * D * 2, sdo = sq + BQ * D * 2;
    float *slse = (float *)(smem_raw + (sq + 2 * STAGE - k_smem(smem_raw)));
    float *sdel = slse + 2 * BQ;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, wg = warp >> 2;
    const int g = lane >> 2, tq = lane & 3;
    const int64_t kb = blockIdx.x % k_blocks, bkv = blockIdx.x / k_blocks;
    const int64_t b = bkv / hk, kvh = bkv % hk;
    const int64_t j0 = kb * 128;
    k_load_tile<128>(sk, k + bkv * lk * D, j0, lk);
    k_load_tile<128>(sv, v + bkv * lk * D, j0, lk);

    float dka[D / 2], dva[D / 2];
    #pragma unroll
    for (int n = 0; n < D / 2; ++n) dka[n] = dva[n] = 0.0f;
    const float sl = (float)scale * LOG2E;
    const int64_t shift = lk - lq;
    /* This thread's keys: jr0 and jr0 + 8 (warp w of the warpgroup owns 16). */
    const int64_t jr0 = j0 + wg * 64 + (warp & 3) * 16 + g;
    const int64_t q_tiles = (lq + BQ - 1) / BQ;
    const int64_t blind = MASK == 1 && shift < 0 ? -shift : 0; /* rows that see no key */
    const uint32_t kwg = sk + wg * 64 * 128, vwg = sv + wg * 64 * 128;

    /* Steps u = hg * q_tiles + t (query head hg of the group, query tile t), skipping under
       the causal mask the tiles whose rows all see keys, none of this block's (block-uniform). */
    const int64_t steps = group * q_tiles;
    auto next_step = [&](int64_t u) {
#if MASK == 1
        for (; u < steps; ++u) {
            const int64_t i0 = (u % q_tiles) * BQ;
            if (i0 < blind || min(lq, i0 + BQ) - 1 + shift >= j0) break;
        }
#endif
        return u;
    };
    /* Step u's Q and dO tiles and row statistics into stage st. */
    auto load_step = [&](int64_t u, int st) {
        const int64_t bh = b * hq + kvh * group + u / q_tiles, i0 = (u % q_tiles) * BQ;
        k_load_tile<BQ>(sq + st * STAGE, q + bh * lq * D, i0, lq);
        k_load_tile<BQ>(sdo + st * STAGE, dout + bh * lq * D, i0, lq);
        if (tid < BQ) {
            const bool in = i0 + tid < lq;
            k_cp4(slse + st * BQ + tid, lse + (in ? bh * lq + i0 + tid : 0), in);
            k_cp4(sdel + st * BQ + tid, delta + (in ? bh * lq + i0 + tid : 0), in);
        }
    };
    int64_t u = next_step(0);
    if (u < steps) load_step(u, 0);
    k_cp_commit();
    for (int st = 0; u < steps; st ^= 1) {
        const int64_t i0 = (u % q_tiles) * BQ, nxt = next_step(u + 1);
        k_cp_wait();
        asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
        __syncthreads(); /* step u is in; every warpgroup is done with the other stage */
        if (nxt < steps) load_step(nxt, st ^ 1);
        k_cp_commit();
        const uint32_t sqs = sq + st * STAGE, sdos = sdo + st * STAGE;
        const float *lse_s = slse + st * BQ, *del_s = sdel + st * BQ;

        /* S^T = K Q^T and dP^T = V dO^T: 64 keys x 64 queries a warpgroup. */
        float st_[32], dpt[32];
        k_nt_pair(st_, kwg, sqs, dpt, vwg, sdos, BQ);

        /* P^T and dS^T in place. A tile inside every edge and wholly seen needs no index
           test; else padded rows and columns are 0 and hidden entries pass nothing. */
        const bool full = i0 + BQ <= lq && j0 + 128 <= lk && (MASK != 1 || j0 + 127 <= i0 + shift);
        if (full) {
            #pragma unroll
            for (int n = 0; n < 8; ++n) {
                #pragma unroll
                for (int e = 0; e < 4; ++e) {
                    const int il = n * 8 + tq * 2 + (e & 1);
                    const float p = k_ex2(fmaf(st_[n * 4 + e], sl, -lse_s[il] * LOG2E));
                    dpt[n * 4 + e] = p * (dpt[n * 4 + e] - del_s[il]);
                    st_[n * 4 + e] = p;
                }
            }
        } else {
            #pragma unroll
            for (int n = 0; n < 8; ++n) {
                #pragma unroll
                for (int e = 0; e < 4; ++e) {
                    const int il = n * 8 + tq * 2 + (e & 1);
                    k_kv_entry(st_[n * 4 + e], dpt[n * 4 + e], i0 + il, jr0 + (e >> 1) * 8, lq,
                               lk, blind, shift, sl, lse_s[il] * LOG2E, del_s[il]);
                }
            }
        }
        uint32_t pf[4][4], sf[4][4];
        k_frag(pf, st_);
        k_frag(sf, dpt);
        /* dV += P^T dO and dK += dS^T Q (dO and Q read transposed). */
        k_fence_regs(dva, D / 2);
        k_fence_regs(dka, D / 2);
        k_wg_fence();
        k_nn(dva, pf, sdos);
        k_nn(dka, sf, sqs);
        k_wg_commit();
        k_wg_wait();
        k_fence_regs(dva, D / 2);
        k_fence_regs(dka, D / 2);
        u = nxt;
    }
    k_cp_wait(); /* a block that visited no tile still has its K and V copies in flight */

    const float sc = (float)scale;
    #pragma unroll
    for (int rh = 0; rh < 2; ++rh) {
        const int64_t j = jr0 + rh * 8;
        if (j >= lk) continue;
        uint32_t *krow = (uint32_t *)(dk + (bkv * lk + j) * D);
        uint32_t *vrow = (uint32_t *)(dv + (bkv * lk + j) * D);
        #pragma unroll
        for (int n = 0; n < D / 8; ++n) {
            krow[n * 4 + tq] = k_pack(dka[n * 4 + 2 * rh] * sc, dka[n * 4 + 2 * rh + 1] * sc);
            vrow[n * 4 + tq] = k_pack(dva[n * 4 + 2 * rh], dva[n * 4 + 2 * rh + 1]);
        }
    }
}
"#;

const Q_BODY: &str = r#"
extern "C" __global__ void __launch_bounds__(256, 1) kiln_attn_bwd_q_hopper(
        const int64_t hq, const int64_t lq, const int64_t lk, const int64_t group, const int64_t hk,
        const int64_t q_blocks, const S *__restrict__ q, const S *__restrict__ k,
        const S *__restrict__ v, const S *__restrict__ dout, const float *__restrict__ lse,
        const float *__restrict__ delta, S *__restrict__ dq, const double scale) {
    extern __shared__ uint8_t smem_raw[];
    const uint32_t base = (k_smem(smem_raw) + 1023u) & ~1023u;
    /* Stage st's K and V tiles at sk + st * STAGE, sv + st * STAGE. */
    const uint32_t STAGE = 2 * BK * D * 2;
    const uint32_t sq = base, sdo = sq + 128 * D * 2, sk = sdo + 128 * D * 2, sv = sk + BK * D * 2;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, wg = warp >> 2;
    const int g = lane >> 2, tq = lane & 3;
    /* Later query blocks first: under the causal mask they have the most keys. */
    const int64_t qb = q_blocks - 1 - (int64_t)(blockIdx.x % q_blocks);
    const int64_t bh = blockIdx.x / q_blocks, h = bh % hq, b = bh / hq;
    const int64_t kvh = b * hk + h / group;
    const int64_t i0 = qb * 128;
    const S *kp = k + kvh * lk * D;
    const S *vp = v + kvh * lk * D;
    const int64_t shift = lk - lq;
    int64_t key_end = lk;
#if MASK == 1
    /* Keys after the block's last row's are hidden from every row; rows that see no key
       get no gradient. */
    key_end = max((int64_t)0, min(lk, min(lq, i0 + 128) - 1 + shift + 1));
#endif
    const int n_blocks = (int)((key_end + BK - 1) / BK);
    k_load_tile<128>(sq, q + bh * lq * D, i0, lq);
    k_load_tile<128>(sdo, dout + bh * lq * D, i0, lq);
    if (n_blocks > 0) {
        k_load_tile<BK>(sk, kp, 0, lk);
        k_load_tile<BK>(sv, vp, 0, lk);
    }
    k_cp_commit();

    const int64_t row0 = i0 + wg * 64 + (warp & 3) * 16 + g; /* rows row0 and row0 + 8 */
    float lse2[2], del[2];
    #pragma unroll
    for (int rh = 0; rh < 2; ++rh) {
        const int64_t i = row0 + rh * 8;
        lse2[rh] = i < lq ? lse[bh * lq + i] * LOG2E : 0.0f;
        del[rh] = i < lq ? delta[bh * lq + i] : 0.0f;
    }
    float dqa[D / 2];
    #pragma unroll
    for (int n = 0; n < D / 2; ++n) dqa[n] = 0.0f;
    const float sl = (float)scale * LOG2E;
    const uint32_t qwg = sq + wg * 64 * 128, owg = sdo + wg * 64 * 128;

    for (int nb = 0; nb < n_blocks; ++nb) {
        const int64_t j0 = (int64_t)nb * BK;
        const uint32_t sks = sk + (nb & 1) * STAGE, svs = sv + (nb & 1) * STAGE;
        k_cp_wait(); /* (the first time, the Q and dO tiles too) */
        asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
        __syncthreads(); /* tile nb is in; every warpgroup is done with tile nb - 1 */
        if (nb + 1 < n_blocks) {
            k_load_tile<BK>(sk + ((nb + 1) & 1) * STAGE, kp, j0 + BK, lk);
            k_load_tile<BK>(sv + ((nb + 1) & 1) * STAGE, vp, j0 + BK, lk);
        }
        k_cp_commit();

        /* S = Q K^T and dP = dO V^T: 64 rows x 64 keys a warpgroup. */
        float s[32], dp[32];
        k_nt_pair(s, qwg, sks, dp, owg, svs, BK);

        /* dS in place of S: a tile inside every edge and wholly seen needs no index test;
           else hidden, padded and unseen entries are 0. */
        const bool full = i0 + 128 <= lq && j0 + BK <= lk && (MASK != 1 || j0 + BK - 1 <= i0 + shift);
        if (full) {
            #pragma unroll
            for (int n = 0; n < 8; ++n) {
                #pragma unroll
                for (int e = 0; e < 4; ++e) {
                    const int rh = e >> 1;
                    const float p = k_ex2(fmaf(s[n * 4 + e], sl, -lse2[rh]));
                    s[n * 4 + e] = p * (dp[n * 4 + e] - del[rh]);
                }
            }
        } else {
            #pragma unroll
            for (int n = 0; n < 8; ++n) {
                #pragma unroll
                for (int e = 0; e < 4; ++e) {
                    const int rh = e >> 1;
                    s[n * 4 + e] = k_q_entry(s[n * 4 + e], dp[n * 4 + e], row0 + rh * 8,
                                             j0 + n * 8 + tq * 2 + (e & 1), lq, lk, shift, sl,
                                             lse2[rh], del[rh]);
                }
            }
        }
        uint32_t sf[4][4];
        k_frag(sf, s);
        /* dQ += dS K (K read transposed). */
        k_fence_regs(dqa, D / 2);
        k_wg_fence();
        k_nn(dqa, sf, sks);
        k_wg_commit();
        k_wg_wait();
        k_fence_regs(dqa, D / 2);
    }
    k_cp_wait(); /* no block left a copy in flight (n_blocks == 0) */

    const float sc = (float)scale;
    #pragma unroll
    for (int rh = 0; rh < 2; ++rh) {
        const int64_t i = row0 + rh * 8;
        if (i >= lq) continue;
        uint32_t *qrow = (uint32_t *)(dq + (bh * lq + i) * D);
        #pragma unroll
        for (int n = 0; n < D / 8; ++n)
            qrow[n * 4 + tq] = k_pack(dqa[n * 4 + 2 * rh] * sc, dqa[n * 4 + 2 * rh + 1] * sc);
    }
}
"#;
