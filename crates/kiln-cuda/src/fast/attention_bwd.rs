//! Attention's fused backward (`FastOp::AttentionVjp`), FlashAttention-2 style, for the
//! flash forward's cases (float16 / bfloat16, one head dim D, a multiple of 16 up to 128;
//! no mask or causal). The (Lq, Lk) probabilities are recomputed from the forward's row
//! logsumexp on tensor cores (`mma.sync.m16n8k16`, float32 accumulation), never stored.
//! Three kernels, no float atomics (results are reproducible bit for bit):
//! - `delta`: `Di = rowsum(dO * O)` in float32, a warp per row;
//! - `kv`: a block of 4 warps owns 64 keys of one (batch, kv head), 16 per warp, its K rows
//!   held as A fragments; it walks the query tiles of every query head of its GQA group
//!   (causal: those that can see its keys, and rows that see no key at all) and accumulates
//!   `dV += Pᵀ dO` and `dK += dSᵀ Q` in registers, with `Pᵀ = exp2(K Qᵀ scale log2e - lse)`,
//!   `dPᵀ = V dOᵀ` and `dS = P (dP - Di)`;
//! - `q`: a block owns 64 queries of one (batch, head), 16 per warp, its Q rows held as A
//!   fragments; it walks the key tiles its rows can see and accumulates `dQ += dS K`.
//!
//! A row that sees no key (causal with Lq > Lk) averages every value in the forward, with
//! lse `log Lk`: its weights are `1 / Lk` and reach dV only (hidden scores pass no gradient).

use super::attention::{common, flash_defines, Key, Variant, FLASH_HELPERS};
use super::attention_bwd_hopper as hopper;
use super::{dense, dense_aligned, ptr};
use crate::copy::empty;
use crate::launch::{launch, Args};
use crate::nvrtc::{check_grid, Function, KernelCache};
use kiln_base::{bail, ArrayData, AttentionMask, DType, Result};

const DELTA: &str = "kiln_attn_bwd_delta";
const KV: &str = "kiln_attn_bwd_kv";
const Q: &str = "kiln_attn_bwd_q";

/// Keys per block of the kv kernel, queries per block of the q kernel (16 per warp).
const BLOCK: usize = 64;
const WARPS: u32 = 4;

#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub(crate) enum Kernel {
    Delta,
    Kv,
    Q,
    /// `attention_bwd_hopper.rs`'s forms of `Kv` and `Q` (sm_90).
    KvHopper,
    QHopper,
}

#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub(crate) struct BwdKey {
    pub dtype: DType,
    pub mask: AttentionMask,
    /// The head dim (the delta kernel's source takes any).
    pub d: usize,
    pub kernel: Kernel,
}

const DELTA_BODY: &str = r#"
/* Di = sum_d dO[row, d] O[row, d]: a warp per row. */
extern "C" __global__ void kiln_attn_bwd_delta(const int64_t rows, const int64_t d,
        const S *__restrict__ o, const S *__restrict__ dout, float *__restrict__ delta) {
    const int lane = threadIdx.x & 31;
    const int64_t row = blockIdx.x * (int64_t)(blockDim.x >> 5) + (threadIdx.x >> 5);
    if (row >= rows) return; /* the whole warp */
    float acc = 0.0f;
    for (int64_t c = lane; c < d; c += 32) acc = fmaf(k_load(o[row * d + c]), k_load(dout[row * d + c]), acc);
    #pragma unroll
    for (int off = 16; off > 0; off >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, off);
    if (lane == 0) delta[row] = acc;
}
"#;

/// Both backward forms' per-entry math (after `common`).
pub(crate) const ENTRIES: &str = r#"
/* Entry (key j, query i) of the kv kernel: st (the score) becomes P^T, dpt (dP^T) becomes
   dS^T; padded entries are 0. Rows [0, blind) see no key (causal with Lq > Lk): their
   weights are 1 / Lk and pass no gradient to q or k. */
K_INLINE void k_kv_entry(float &st, float &dpt, int64_t i, int64_t j, int64_t lq, int64_t lk,
                         int64_t blind, int64_t shift, float sl, float lse2, float del) {
    float p = 0.0f, ds = 0.0f;
    if (i < lq && j < lk) {
#if MASK == 1
        if (i < blind) {
            p = k_ex2(-lse2);
        } else if (j <= i + shift) {
            p = k_ex2(fmaf(st, sl, -lse2));
            ds = p * (dpt - del);
        }
#else
        p = k_ex2(fmaf(st, sl, -lse2));
        ds = p * (dpt - del);
#endif
    }
    (void)blind;
    (void)shift;
    st = p;
    dpt = ds;
}
/* dS of entry (query i, key j) of the q kernel from its score s and dP; hidden, padded and
   unseen entries are 0. */
K_INLINE float k_q_entry(float s, float dp, int64_t i, int64_t j, int64_t lq, int64_t lk,
                         int64_t shift, float sl, float lse2, float del) {
    bool seen = i < lq && j < lk;
#if MASK == 1
    seen = seen && j <= i + shift;
#endif
    (void)shift;
    const float p = seen ? k_ex2(fmaf(s, sl, -lse2)) : 0.0f;
    return p * (dp - del);
}
"#;

const KV_BODY: &str = r#"
#define BN 64
#define WARPS 4
/* Queries per step: 32 for the large head dims keeps the accumulators in registers. */
#define BQ (D <= 64 ? 64 : 32)
#define SA_ROWS (2 * BQ > BN ? 2 * BQ : BN)

extern "C" __global__ void __launch_bounds__(WARPS * 32) kiln_attn_bwd_kv(
        const int64_t hq, const int64_t lq, const int64_t lk, const int64_t group, const int64_t hk,
        const int64_t k_blocks, const S *__restrict__ q, const S *__restrict__ k,
        const S *__restrict__ v, const S *__restrict__ dout, const float *__restrict__ lse,
        const float *__restrict__ delta, S *__restrict__ dk, S *__restrict__ dv,
        const double scale) {
    /* sa: the K tile first (read into registers), then a Q tile and a dO tile. */
    __shared__ __align__(128) uint16_t sa[SA_ROWS * LD];
    __shared__ __align__(128) uint16_t sv[BN * LD];
    __shared__ float slse[BQ], sdel[BQ];
    uint16_t *sq = sa, *sdo = sa + BQ * LD;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int g = lane >> 2, tq = lane & 3;
    const int64_t kb = blockIdx.x % k_blocks, bkv = blockIdx.x / k_blocks;
    const int64_t b = bkv / hk, kvh = bkv % hk;
    const int64_t j0 = kb * BN;
    const S *kp = k + bkv * lk * D;
    const S *vp = v + bkv * lk * D;

    k_load_rows<BN, WARPS * 32>(sa, kp, j0, lk);
    k_load_rows<BN, WARPS * 32>(sv, vp, j0, lk);
    k_cp_commit();
    k_cp_wait();
    __syncthreads();
    /* The warp's 16 keys as A fragments, one per 16 features. */
    uint32_t kf[D / 16][4];
    #pragma unroll
    for (int kc = 0; kc < D / 16; ++kc)
        k_ldm4(kf[kc], k_smem(sa + k_sw(warp * 16 + (lane & 15), kc * 16 + (lane >> 4) * 8)));
    __syncthreads(); /* sa is reused for Q and dO */

    float dka[D / 8][4], dva[D / 8][4];
    #pragma unroll
    for (int n = 0; n < D / 8; ++n) {
        #pragma unroll
        for (int e = 0; e < 4; ++e) dka[n][e] = dva[n][e] = 0.0f;
    }
    const float sl = (float)scale * LOG2E;
    const int64_t shift = lk - lq;
    const int64_t jr0 = j0 + warp * 16 + g; /* this thread's keys: jr0 and jr0 + 8 */
    const int64_t q_tiles = (lq + BQ - 1) / BQ;
    /* Rows [0, blind) see no key (causal with Lq > Lk). */
    const int64_t blind = MASK == 1 && shift < 0 ? -shift : 0;

    for (int64_t hg = 0; hg < group; ++hg) {
        const int64_t bh = b * hq + kvh * group + hg;
        const S *qp = q + bh * lq * D;
        const S *dop = dout + bh * lq * D;
        for (int64_t t = 0; t < q_tiles; ++t) {
            const int64_t i0 = t * BQ;
#if MASK == 1
            /* Skip tiles whose rows all see keys, none of them this block's (block-uniform). */
            if (i0 >= blind && min(lq, i0 + BQ) - 1 + shift < j0) continue;
#endif
            k_load_rows<BQ, WARPS * 32>(sq, qp, i0, lq);
            k_load_rows<BQ, WARPS * 32>(sdo, dop, i0, lq);
            k_cp_commit();
            if (threadIdx.x < BQ) {
                const int64_t i = i0 + threadIdx.x;
                slse[threadIdx.x] = i < lq ? lse[bh * lq + i] * LOG2E : 0.0f;
                sdel[threadIdx.x] = i < lq ? delta[bh * lq + i] : 0.0f;
            }
            k_cp_wait();
            __syncthreads();

            /* S^T = K Q^T and dP^T = V dO^T: 16 keys x BQ queries per warp. */
            float st[BQ / 8][4], dpt[BQ / 8][4];
            #pragma unroll
            for (int n = 0; n < BQ / 8; ++n) {
                #pragma unroll
                for (int e = 0; e < 4; ++e) st[n][e] = dpt[n][e] = 0.0f;
            }
            #pragma unroll
            for (int kc = 0; kc < D / 16; ++kc) {
                uint32_t va[4];
                k_ldm4(va, k_smem(sv + k_sw(warp * 16 + (lane & 15), kc * 16 + (lane >> 4) * 8)));
                #pragma unroll
                for (int np = 0; np < BQ / 16; ++np) {
                    const int r = np * 16 + ((lane >> 4) << 3) + (lane & 7);
                    const int c = kc * 16 + ((lane >> 3) & 1) * 8;
                    uint32_t qb[4], ob[4];
                    k_ldm4(qb, k_smem(sq + k_sw(r, c)));
                    k_ldm4(ob, k_smem(sdo + k_sw(r, c)));
                    k_mma(st[2 * np], kf[kc], qb[0], qb[1]);
                    k_mma(st[2 * np + 1], kf[kc], qb[2], qb[3]);
                    k_mma(dpt[2 * np], va, ob[0], ob[1]);
                    k_mma(dpt[2 * np + 1], va, ob[2], ob[3]);
                }
            }

            /* P^T and dS^T in place; padded rows and columns are 0. */
            #pragma unroll
            for (int n = 0; n < BQ / 8; ++n) {
                #pragma unroll
                for (int e = 0; e < 4; ++e) {
                    const int il = n * 8 + tq * 2 + (e & 1);
                    k_kv_entry(st[n][e], dpt[n][e], i0 + il, jr0 + (e >> 1) * 8, lq, lk, blind,
                               shift, sl, slse[il], sdel[il]);
                }
            }
            /* As A fragments (keys x queries): tiles 2c and 2c + 1 make chunk c. */
            uint32_t pf[BQ / 16][4], sf[BQ / 16][4];
            #pragma unroll
            for (int c = 0; c < BQ / 16; ++c) {
                pf[c][0] = k_pack(st[2 * c][0], st[2 * c][1]);
                pf[c][1] = k_pack(st[2 * c][2], st[2 * c][3]);
                pf[c][2] = k_pack(st[2 * c + 1][0], st[2 * c + 1][1]);
                pf[c][3] = k_pack(st[2 * c + 1][2], st[2 * c + 1][3]);
                sf[c][0] = k_pack(dpt[2 * c][0], dpt[2 * c][1]);
                sf[c][1] = k_pack(dpt[2 * c][2], dpt[2 * c][3]);
                sf[c][2] = k_pack(dpt[2 * c + 1][0], dpt[2 * c + 1][1]);
                sf[c][3] = k_pack(dpt[2 * c + 1][2], dpt[2 * c + 1][3]);
            }

            /* dV += P^T dO and dK += dS^T Q: ldmatrix.trans of query rows gives B fragments. */
            #pragma unroll
            for (int c = 0; c < BQ / 16; ++c) {
                #pragma unroll
                for (int dp = 0; dp < D / 16; ++dp) {
                    const int r = c * 16 + ((lane >> 3) & 1) * 8 + (lane & 7);
                    const int col = dp * 16 + (lane >> 4) * 8;
                    uint32_t ob[4], qb[4];
                    k_ldm4t(ob, k_smem(sdo + k_sw(r, col)));
                    k_ldm4t(qb, k_smem(sq + k_sw(r, col)));
                    k_mma(dva[2 * dp], pf[c], ob[0], ob[1]);
                    k_mma(dva[2 * dp + 1], pf[c], ob[2], ob[3]);
                    k_mma(dka[2 * dp], sf[c], qb[0], qb[1]);
                    k_mma(dka[2 * dp + 1], sf[c], qb[2], qb[3]);
                }
            }
            __syncthreads(); /* every warp is done with this tile */
        }
    }

    const float sc = (float)scale;
    #pragma unroll
    for (int rh = 0; rh < 2; ++rh) {
        const int64_t j = jr0 + rh * 8;
        if (j >= lk) continue;
        uint32_t *krow = (uint32_t *)(dk + (bkv * lk + j) * D);
        uint32_t *vrow = (uint32_t *)(dv + (bkv * lk + j) * D);
        #pragma unroll
        for (int n = 0; n < D / 8; ++n) {
            krow[n * 4 + tq] = k_pack(dka[n][2 * rh] * sc, dka[n][2 * rh + 1] * sc);
            vrow[n * 4 + tq] = k_pack(dva[n][2 * rh], dva[n][2 * rh + 1]);
        }
    }
}
"#;

const Q_BODY: &str = r#"
#define BM 64
#define BN 64
#define WARPS 4

extern "C" __global__ void __launch_bounds__(WARPS * 32) kiln_attn_bwd_q(
        const int64_t hq, const int64_t lq, const int64_t lk, const int64_t group, const int64_t hk,
        const int64_t q_blocks, const S *__restrict__ q, const S *__restrict__ k,
        const S *__restrict__ v, const S *__restrict__ dout, const float *__restrict__ lse,
        const float *__restrict__ delta, S *__restrict__ dq, const double scale) {
    /* sq: the Q tile first (read into registers), then the dO tile. */
    __shared__ __align__(128) uint16_t sq[BM * LD];
    __shared__ __align__(128) uint16_t sk[BN * LD];
    __shared__ __align__(128) uint16_t sv[BN * LD];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int g = lane >> 2, tq = lane & 3;
    /* Later query blocks first: under the causal mask they have the most keys. */
    const int64_t qb = q_blocks - 1 - (int64_t)(blockIdx.x % q_blocks);
    const int64_t bh = blockIdx.x / q_blocks, h = bh % hq, b = bh / hq;
    const int64_t kvh = b * hk + h / group;
    const int64_t i0 = qb * BM;
    const S *kp = k + kvh * lk * D;
    const S *vp = v + kvh * lk * D;
    const int64_t shift = lk - lq;
    int64_t key_end = lk;
#if MASK == 1
    /* Keys after the block's last row's are hidden from every row; rows that see no key
       get no gradient. */
    key_end = max((int64_t)0, min(lk, min(lq, i0 + BM) - 1 + shift + 1));
#endif
    const int n_blocks = (int)((key_end + BN - 1) / BN);

    k_load_rows<BM, WARPS * 32>(sq, q + bh * lq * D, i0, lq);
    k_cp_commit();
    k_cp_wait();
    __syncthreads();
    uint32_t qf[D / 16][4];
    #pragma unroll
    for (int kc = 0; kc < D / 16; ++kc)
        k_ldm4(qf[kc], k_smem(sq + k_sw(warp * 16 + (lane & 15), kc * 16 + (lane >> 4) * 8)));
    __syncthreads();
    k_load_rows<BM, WARPS * 32>(sq, dout + bh * lq * D, i0, lq);
    k_cp_commit();

    const int64_t row0 = i0 + warp * 16 + g; /* this thread's rows: row0 and row0 + 8 */
    float lse2[2], del[2];
    #pragma unroll
    for (int rh = 0; rh < 2; ++rh) {
        const int64_t i = row0 + rh * 8;
        lse2[rh] = i < lq ? lse[bh * lq + i] * LOG2E : 0.0f;
        del[rh] = i < lq ? delta[bh * lq + i] : 0.0f;
    }
    float dqa[D / 8][4];
    #pragma unroll
    for (int n = 0; n < D / 8; ++n) dqa[n][0] = dqa[n][1] = dqa[n][2] = dqa[n][3] = 0.0f;
    const float sl = (float)scale * LOG2E;

    for (int nb = 0; nb < n_blocks; ++nb) {
        const int64_t j0 = (int64_t)nb * BN;
        k_load_rows<BN, WARPS * 32>(sk, kp, j0, lk);
        k_load_rows<BN, WARPS * 32>(sv, vp, j0, lk);
        k_cp_commit();
        k_cp_wait(); /* (the first time, the dO tile too) */
        __syncthreads();

        /* S = Q K^T and dP = dO V^T: 16 rows x 64 keys per warp. */
        float s[BN / 8][4], dp[BN / 8][4];
        #pragma unroll
        for (int n = 0; n < BN / 8; ++n) {
            #pragma unroll
            for (int e = 0; e < 4; ++e) s[n][e] = dp[n][e] = 0.0f;
        }
        #pragma unroll
        for (int kc = 0; kc < D / 16; ++kc) {
            uint32_t oa[4];
            k_ldm4(oa, k_smem(sq + k_sw(warp * 16 + (lane & 15), kc * 16 + (lane >> 4) * 8)));
            #pragma unroll
            for (int np = 0; np < BN / 16; ++np) {
                const int r = np * 16 + ((lane >> 4) << 3) + (lane & 7);
                const int c = kc * 16 + ((lane >> 3) & 1) * 8;
                uint32_t kb4[4], vb[4];
                k_ldm4(kb4, k_smem(sk + k_sw(r, c)));
                k_ldm4(vb, k_smem(sv + k_sw(r, c)));
                k_mma(s[2 * np], qf[kc], kb4[0], kb4[1]);
                k_mma(s[2 * np + 1], qf[kc], kb4[2], kb4[3]);
                k_mma(dp[2 * np], oa, vb[0], vb[1]);
                k_mma(dp[2 * np + 1], oa, vb[2], vb[3]);
            }
        }

        /* dS in place of S; hidden, padded and unseen entries are 0. */
        #pragma unroll
        for (int n = 0; n < BN / 8; ++n) {
            #pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int rh = e >> 1;
                s[n][e] = k_q_entry(s[n][e], dp[n][e], row0 + rh * 8, j0 + n * 8 + tq * 2 + (e & 1),
                                    lq, lk, shift, sl, lse2[rh], del[rh]);
            }
        }
        uint32_t sf[BN / 16][4];
        #pragma unroll
        for (int c = 0; c < BN / 16; ++c) {
            sf[c][0] = k_pack(s[2 * c][0], s[2 * c][1]);
            sf[c][1] = k_pack(s[2 * c][2], s[2 * c][3]);
            sf[c][2] = k_pack(s[2 * c + 1][0], s[2 * c + 1][1]);
            sf[c][3] = k_pack(s[2 * c + 1][2], s[2 * c + 1][3]);
        }
        /* dQ += dS K: ldmatrix.trans of key rows gives B fragments. */
        #pragma unroll
        for (int c = 0; c < BN / 16; ++c) {
            #pragma unroll
            for (int dpp = 0; dpp < D / 16; ++dpp) {
                uint32_t kb4[4];
                k_ldm4t(kb4, k_smem(sk + k_sw(c * 16 + ((lane >> 3) & 1) * 8 + (lane & 7),
                                               dpp * 16 + (lane >> 4) * 8)));
                k_mma(dqa[2 * dpp], sf[c], kb4[0], kb4[1]);
                k_mma(dqa[2 * dpp + 1], sf[c], kb4[2], kb4[3]);
            }
        }
        __syncthreads(); /* every warp is done with this K and V */
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
            qrow[n * 4 + tq] = k_pack(dqa[n][2 * rh] * sc, dqa[n][2 * rh + 1] * sc);
    }
}
"#;

pub(crate) fn source(key: &BwdKey) -> String {
    let fwd = Key { dtype: key.dtype, mask: key.mask, variant: Variant::Flash(key.d), lse: false };
    let mut s = common(&fwd);
    match key.kernel {
        Kernel::Delta => s.push_str(DELTA_BODY),
        Kernel::Kv | Kernel::Q => {
            s.push_str(&flash_defines(key.dtype, key.d));
            s.push_str(FLASH_HELPERS);
            s.push_str(ENTRIES);
            s.push_str(if key.kernel == Kernel::Kv { KV_BODY } else { Q_BODY });
        }
        Kernel::KvHopper | Kernel::QHopper => {
            let t = if key.dtype == DType::BF16 { "bf16" } else { "f16" };
            s.push_str(ENTRIES);
            s.push_str(&hopper::body(key.d, t, key.kernel == Kernel::KvHopper));
        }
    }
    s
}

static KERNELS: KernelCache<BwdKey> = KernelCache::new();

fn kernel(key: &BwdKey) -> Result<Function> {
    let symbol = match key.kernel {
        Kernel::Delta => DELTA,
        Kernel::Kv => KV,
        Kernel::Q => Q,
        Kernel::KvHopper => hopper::KV,
        Kernel::QHopper => hopper::Q,
    };
    KERNELS.get(key, symbol, || source(key))
}

/// `AttentionVjp`: inputs q, k, v, o, lse, do; outputs dq, dk, dv.
pub(crate) fn attention_vjp(
    inputs: &[ArrayData],
    mask: AttentionMask,
    scale: f64,
) -> Result<Vec<ArrayData>> {
    let op = "scaled_dot_product_attention_vjp";
    let dtype = inputs[0].dtype;
    let [b_n, hq, lq, d] = [0, 1, 2, 3].map(|a| inputs[0].layout.shape[a]);
    let (hk, lk, dv) =
        (inputs[1].layout.shape[1], inputs[1].layout.shape[2], inputs[2].layout.shape[3]);
    let flash = matches!(dtype, DType::F16 | DType::BF16) && d == dv && d % 16 == 0;
    if !flash
        || !(16..=128).contains(&d)
        || !matches!(mask, AttentionMask::None | AttentionMask::Causal)
    {
        bail!(
            Value,
            op,
            "The fused backward takes half floats of one head dim (16 to 128) and no mask array."
        );
    }
    let dq = empty(&[b_n, hq, lq, d], dtype)?;
    let dk = empty(&[b_n, hk, lk, d], dtype)?;
    let dvo = empty(&[b_n, hk, lk, d], dtype)?;
    let rows = b_n * hq * lq;
    let group = (hq / hk.max(1)) as i64;
    let (q, k, v) =
        (dense_aligned(&inputs[0])?, dense_aligned(&inputs[1])?, dense_aligned(&inputs[2])?);
    let (o, lse) = (dense(&inputs[3])?, dense(&inputs[4])?);
    let g = dense_aligned(&inputs[5])?;
    let key = |kernel| BwdKey { dtype, mask, d, kernel };
    let threads = 32 * WARPS;

    // Di in float32.
    let delta = empty(&[rows], DType::F32)?;
    if rows > 0 {
        let mut args = Args::new();
        args.i64(rows as i64).i64(d as i64).ptr(ptr(&o)).ptr(ptr(&g)).ptr(ptr(&delta));
        let blocks = check_grid(op, rows.div_ceil(WARPS as usize) as u64)?;
        launch(DELTA, kernel(&key(Kernel::Delta))?, blocks, threads, 0, &mut args)?;
    }
    // (kernel, symbol, block, threads, dynamic shared memory) of the kv and q kernels.
    let [kv, qk] = if hopper::takes(d, crate::runtime::gpu()?.arch) {
        let shared = hopper::shared_bytes(d);
        [(Kernel::KvHopper, hopper::KV), (Kernel::QHopper, hopper::Q)]
            .map(|(kern, sym)| (kern, sym, hopper::BLOCK, hopper::THREADS, shared))
    } else {
        [(Kernel::Kv, KV), (Kernel::Q, Q)].map(|(kern, sym)| (kern, sym, BLOCK, threads, 0))
    };
    let k_blocks = lk.div_ceil(kv.2);
    if b_n * hk * k_blocks > 0 {
        let mut args = Args::new();
        args.i64(hq as i64).i64(lq as i64).i64(lk as i64).i64(group).i64(hk as i64);
        args.i64(k_blocks as i64).ptr(ptr(&q)).ptr(ptr(&k)).ptr(ptr(&v)).ptr(ptr(&g));
        args.ptr(ptr(&lse)).ptr(ptr(&delta)).ptr(ptr(&dk)).ptr(ptr(&dvo));
        args.i64(scale.to_bits() as i64);
        let blocks = check_grid(op, (b_n * hk * k_blocks) as u64)?;
        let function = kernel(&key(kv.0))?;
        crate::launch::allow_shared(kv.1, function, kv.4)?;
        launch(kv.1, function, blocks, kv.3, kv.4 as u32, &mut args)?;
    }
    let q_blocks = lq.div_ceil(qk.2);
    if b_n * hq * q_blocks > 0 {
        let mut args = Args::new();
        args.i64(hq as i64).i64(lq as i64).i64(lk as i64).i64(group).i64(hk as i64);
        args.i64(q_blocks as i64).ptr(ptr(&q)).ptr(ptr(&k)).ptr(ptr(&v)).ptr(ptr(&g));
        args.ptr(ptr(&lse)).ptr(ptr(&delta)).ptr(ptr(&dq));
        args.i64(scale.to_bits() as i64);
        let blocks = check_grid(op, (b_n * hq * q_blocks) as u64)?;
        let function = kernel(&key(qk.0))?;
        crate::launch::allow_shared(qk.1, function, qk.4)?;
        launch(qk.1, function, blocks, qk.3, qk.4 as u32, &mut args)?;
    }
    Ok(vec![dq, dk, dvo])
}

/// Every variant's source, named (the offline NVRTC check).
#[cfg(test)]
pub(crate) fn all_sources() -> Vec<(String, String)> {
    let mut out = Vec::new();
    for dtype in [DType::F16, DType::BF16] {
        for mask in [AttentionMask::None, AttentionMask::Causal] {
            for d in [16, 32, 64, 80, 96, 112, 128] {
                for kernel in [Kernel::Kv, Kernel::Q] {
                    let key = BwdKey { dtype, mask, d, kernel };
                    out.push((format!("attention_bwd_{key:?}"), source(&key)));
                }
            }
            for d in [64, 128] {
                for kernel in [Kernel::KvHopper, Kernel::QHopper] {
                    let key = BwdKey { dtype, mask, d, kernel };
                    out.push((format!("attention_bwd_{key:?}"), source(&key)));
                }
            }
            let key = BwdKey { dtype, mask, d: 64, kernel: Kernel::Delta };
            out.push((format!("attention_bwd_{key:?}"), source(&key)));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sources() {
        let key =
            BwdKey { dtype: DType::BF16, mask: AttentionMask::Causal, d: 128, kernel: Kernel::Kv };
        let s = source(&key);
        assert!(s.contains("#define MASK 1\n"));
        assert!(s.contains("#define D 128\n#define MMA_T \"bf16\"\n#define SWIZZLE 1"));
        assert!(s.contains("kiln_attn_bwd_kv") && !s.contains("kiln_attn_bwd_q("));
        let s = source(&BwdKey { kernel: Kernel::Q, d: 80, ..key });
        assert!(s.contains("#define SWIZZLE 0") && s.contains("kiln_attn_bwd_q("));
        let s = source(&BwdKey { kernel: Kernel::Delta, ..key });
        assert!(s.contains("kiln_attn_bwd_delta") && !s.contains("ldmatrix"));
        assert_eq!(all_sources().len(), 2 * 2 * (7 * 2 + 2 * 2 + 1));
    }
}
