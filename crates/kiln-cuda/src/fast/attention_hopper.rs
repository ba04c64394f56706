//! Scaled dot-product attention forward for Hopper (sm_90): both products on `wgmma`, the
//! warpgroup-wide asynchronous tensor-core instruction that alone reaches the H100/H200's
//! bf16 peak (`mma.sync`, which `attention.rs`'s flash kernel uses, tops out near half).
//!
//! A block of two warpgroups (256 threads) takes 128 queries of one (batch, head), 64 per
//! warpgroup; 128-key tiles of K and V stream through shared memory, double-buffered
//! (`cp.async`, the next tile's copy overlapping this tile's work). Tiles are stored in the
//! layout `wgmma` reads through shared-memory descriptors: 64-column panels of 128-byte rows,
//! each 16-byte chunk XOR-ed with `row % 8` (the 128-byte swizzle). One layout serves every
//! operand: Q and K are read K-major (the head dim contiguous), V MN-major (its head dim is
//! the product's N; `wgmma` transposes it). `S = Q Kᵀ` takes Q and K from shared memory;
//! the probabilities go from `S`'s accumulators straight into the register A operand of
//! `O += P V` (the two fragment layouts coincide, as with `mma.sync`).
//!
//! Semantics are `attention.rs`'s flash kernel's (masks, the lowest float for hidden scores,
//! lower-right causal alignment, GQA, the optional row logsumexp), so either serves the
//! backward. Head dims 64 and 128, float16 and bfloat16; everything else keeps the flash
//! kernel, as does every GPU but sm_90 and `KILN_CUDA_ATTENTION=mma`.

use std::fmt::Write;

/// Queries per block (two warpgroups of 64) and keys per tile.
pub(crate) const BM: usize = 128;
pub(crate) const BN: usize = 128;
/// Threads per block.
pub(crate) const THREADS: u32 = 256;
pub(crate) const SYMBOL: &str = "kiln_attn_hopper";

/// Whether this kernel takes head dim `d` on a GPU of compute capability `arch`, unless
/// `KILN_CUDA_ATTENTION=mma` keeps the `mma.sync` flash kernel.
pub(crate) fn takes(d: usize, arch: (i32, i32)) -> bool {
    arch == (9, 0)
        && matches!(d, 64 | 128)
        && !std::env::var("KILN_CUDA_ATTENTION").is_ok_and(|v| v == "mma")
}

/// Dynamic shared memory of a block: Q, two K and two V tiles, plus 1 KiB to align the base
/// to the swizzle's 1024-byte period.
pub(crate) fn shared_bytes(d: usize) -> usize {
    (BM + 4 * BN) * d * 2 + 1024
}

/// `wgmma` of one warpgroup: d (64 x n, float32, n / 2 registers a thread) += a (64 x 16) b
/// (16 x n); `a` from shared memory (`_ss`, a descriptor) or registers (`_rs`, 4 words), `b`
/// from shared memory (transposed when `tnsp_b`: MN-major). `_ss` zeroes d first unless
/// `acc`.
fn wgmma_helpers(n: usize, t: &str) -> String {
    let regs = n / 2;
    let list =
        |from: usize| (from..from + regs).map(|i| format!("%{i}")).collect::<Vec<_>>().join(", ");
    let outs = (0..regs).map(|i| format!("\"+f\"(d[{i}])")).collect::<Vec<_>>().join(", ");
    let mut s = String::new();
    let _ = write!(
        s,
        r#"
K_INLINE void k_wgmma_ss_{n}(float *d, uint64_t da, uint64_t db, int acc) {{
    asm volatile("{{\n.reg .pred p;\nsetp.ne.b32 p, %{acc}, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n{n}k16.f32.{t}.{t} {{{dl}}}, %{a}, %{b}, p, 1, 1, 0, 0;\n}}\n"
        : {outs} : "l"(da), "l"(db), "r"(acc));
}}
K_INLINE void k_wgmma_rs_{n}(float *d, const uint32_t *a, uint64_t db) {{
    asm volatile("wgmma.mma_async.sync.aligned.m64n{n}k16.f32.{t}.{t} {{{dl}}}, "
        "{{%{a0}, %{a1}, %{a2}, %{a3}}}, %{b2}, 1, 1, 1, 1;\n"
        : {outs} : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db));
}}
"#,
        dl = list(0),
        a = regs,
        b = regs + 1,
        acc = regs + 2,
        a0 = regs,
        a1 = regs + 1,
        a2 = regs + 2,
        a3 = regs + 3,
        b2 = regs + 4,
    );
    s
}

/// The kernel's source after `attention::common` (mask mode, `S`, `LSE`, helpers).
pub(crate) fn body(d: usize, dtype_mma: &str) -> String {
    let mut s = format!(
        "#define D {d}\n#define BM {BM}\n#define BN {BN}\n#define WGMMA_RS_D k_wgmma_rs_{d}\n"
    );
    s.push_str(&wgmma_helpers(BN, dtype_mma));
    if d != BN {
        s.push_str(&wgmma_helpers(d, dtype_mma));
    }
    s.push_str(BODY);
    s
}

const BODY: &str = r#"
#define PANELS (D / 64)
K_INLINE uint32_t k_smem(const void *p) { return (uint32_t)__cvta_generic_to_shared(p); }
K_INLINE void k_cp16(uint32_t dst, const void *src, bool valid) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(valid ? 16 : 0));
}
K_INLINE void k_cp_commit() { asm volatile("cp.async.commit_group;\n" ::); }
K_INLINE void k_cp_wait() { asm volatile("cp.async.wait_group 0;\n" ::: "memory"); }
K_INLINE uint32_t k_pack(float lo, float hi) {
    return (uint32_t)k_store(lo) | ((uint32_t)k_store(hi) << 16);
}
K_INLINE void k_wg_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
K_INLINE void k_wg_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
K_INLINE void k_wg_wait() { asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory"); }
/* Keeps the compiler from moving accumulator reads or writes across the asynchronous
   products (they read and write these registers between issue and wait). */
K_INLINE void k_fence_regs(float *r, int n) {
    #pragma unroll
    for (int i = 0; i < n; ++i) asm volatile("" : "+f"(r[i])::"memory");
}
/* Shared-memory matrix descriptor, 128-byte swizzle: start address, leading and stride
   byte offsets (16-byte units), layout type 1 in the top bits. */
K_INLINE uint64_t k_desc(uint32_t addr, uint32_t lbo, uint32_t sbo) {
    return (uint64_t)((addr & 0x3FFFF) >> 4) | ((uint64_t)((lbo >> 4) & 0x3FFF) << 16)
        | ((uint64_t)((sbo >> 4) & 0x3FFF) << 32) | (1ull << 62);
}
/* Rows [r0, r0 + R) of a row-major (rows, D) matrix into a tile at `base` (a shared
   address, 1024-aligned): 64-column panels of R 128-byte rows, chunk c of row r at
   ((c ^ r % 8) * 16). Rows past the end are zeros (0 * NaN would poison a product). */
template <int R>
K_INLINE void k_load_tile(uint32_t base, const S *src, int64_t r0, int64_t rows) {
    #pragma unroll
    for (int e = threadIdx.x; e < R * (D / 8); e += 256) {
        const int r = e / (D / 8), c = e % (D / 8);
        const bool valid = r0 + r < rows;
        const uint32_t dst = base + (c >> 3) * (R * 128) + r * 128 + (((c & 7) ^ (r & 7)) << 4);
        k_cp16(dst, src + (valid ? (r0 + r) * D + c * 8 : 0), valid);
    }
}

extern "C" __global__ void __launch_bounds__(256, 1) kiln_attn_hopper(
        const int64_t hq, const int64_t lq, const int64_t lk, const int64_t group, const int64_t hk,
        const int64_t q_blocks, const S *__restrict__ q, const S *__restrict__ k,
        const S *__restrict__ v, const M *__restrict__ mask, S *__restrict__ out,
        float *__restrict__ lse, const KStrides ms, const double scale) {
    extern __shared__ uint8_t smem_raw[];
    const uint32_t base = (k_smem(smem_raw) + 1023u) & ~1023u;
    const uint32_t sq = base;
    const uint32_t sk0 = sq + BM * D * 2;          /* K tiles 0 and 1 */
    const uint32_t sv0 = sk0 + 2 * BN * D * 2;     /* V tiles 0 and 1 */
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, wg = warp >> 2;
    const int g = lane >> 2, tq = lane & 3;
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
    if (i0 + shift >= 0) key_end = min(lk, min(lq, i0 + BM) - 1 + shift + 1);
#endif
    const int n_blocks = (int)((key_end + BN - 1) / BN);

    k_load_tile<BM>(sq, qp, i0, lq);
    if (n_blocks > 0) {
        k_load_tile<BN>(sk0, kp, 0, lk);
        k_load_tile<BN>(sv0, vp, 0, lk);
    }
    k_cp_commit();

    float o[D / 2];
    #pragma unroll
    for (int n = 0; n < D / 2; ++n) o[n] = 0.0f;
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
    const float sl = (float)scale * LOG2E;
    /* This thread's rows: row0 and row0 + 8 (warp w of the warpgroup owns 16). */
    const int64_t row0 = i0 + wg * 64 + (warp & 3) * 16 + g;
    const uint32_t qwg = sq + wg * 64 * 128;

    for (int nb = 0; nb < n_blocks; ++nb) {
        const int64_t j0 = (int64_t)nb * BN;
        const uint32_t sk = sk0 + (nb & 1) * (BN * D * 2), sv = sv0 + (nb & 1) * (BN * D * 2);
        k_cp_wait();
        asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
        __syncthreads(); /* tile nb is in; every warpgroup is done with tile nb - 1 */
        if (nb + 1 < n_blocks) {
            const uint32_t nk = sk0 + ((nb + 1) & 1) * (BN * D * 2);
            const uint32_t nv = sv0 + ((nb + 1) & 1) * (BN * D * 2);
            k_load_tile<BN>(nk, kp, j0 + BN, lk);
            k_load_tile<BN>(nv, vp, j0 + BN, lk);
        }
        k_cp_commit();

        /* S = Q K^T: 16 features a step; a panel holds 64 (4 steps of 32 bytes). */
        float s[BN / 2];
        k_wg_fence();
        #pragma unroll
        for (int kk = 0; kk < D / 16; ++kk) {
            const uint32_t off = (kk & 3) << 5;
            const uint64_t da = k_desc(qwg + (kk >> 2) * (BM * 128) + off, 16, 1024);
            const uint64_t db = k_desc(sk + (kk >> 2) * (BN * 128) + off, 16, 1024);
            k_wgmma_ss_128(s, da, db, kk);
        }
        k_wg_commit();
        k_wg_wait();
        k_fence_regs(s, BN / 2);

        /* Scores in base-2 units; masks only where a tile needs them. */
        bool edge = j0 + BN > lk;
#if MASK == 1
        edge = edge || j0 + BN - 1 > i0 + shift;
#elif MASK >= 2
        edge = true;
#endif
        if (edge) {
            #pragma unroll
            for (int n = 0; n < BN / 8; ++n) {
                #pragma unroll
                for (int e = 0; e < 4; ++e) {
                    const int64_t i = row0 + (e >> 1) * 8;
                    const int64_t j = j0 + n * 8 + tq * 2 + (e & 1);
                    float x = s[n * 4 + e] * sl;
#if MASK == 1
                    if (j > i + shift) x = LOWEST;
#elif MASK == 2
                    if (i < lq && j < lk)
                        x = x + k_load(mask[b * ms.v[0] + h * ms.v[1] + i * ms.v[2] + j * ms.v[3]]) * LOG2E;
#elif MASK == 3
                    if (i < lq && j < lk && !mask[b * ms.v[0] + h * ms.v[1] + i * ms.v[2] + j * ms.v[3]])
                        x = LOWEST;
#endif
                    s[n * 4 + e] = j < lk ? x : -INFINITY;
                }
            }
        } else {
            #pragma unroll
            for (int n = 0; n < BN / 2; ++n) s[n] *= sl;
        }

        /* Online softmax per row; the 4 threads of a group share a row. */
        #pragma unroll
        for (int rh = 0; rh < 2; ++rh) {
            float mx = m[rh];
            #pragma unroll
            for (int n = 0; n < BN / 8; ++n)
                mx = k_max_nan(k_max_nan(mx, s[n * 4 + 2 * rh]), s[n * 4 + 2 * rh + 1]);
            mx = k_max_nan(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
            mx = k_max_nan(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
            const float corr = mx == m[rh] ? 1.0f : exp2f(m[rh] - mx);
            const float base2 = mx == -INFINITY ? 0.0f : mx;
            float sum = 0.0f;
            #pragma unroll
            for (int n = 0; n < BN / 8; ++n) {
                s[n * 4 + 2 * rh] = exp2f(s[n * 4 + 2 * rh] - base2);
                s[n * 4 + 2 * rh + 1] = exp2f(s[n * 4 + 2 * rh + 1] - base2);
                sum += s[n * 4 + 2 * rh] + s[n * 4 + 2 * rh + 1];
            }
            l[rh] = l[rh] * corr + sum;
            m[rh] = mx;
            #pragma unroll
            for (int n = 0; n < D / 8; ++n) {
                o[n * 4 + 2 * rh] *= corr;
                o[n * 4 + 2 * rh + 1] *= corr;
            }
        }

        /* P as A fragments: key columns 16c..16c+15 are accumulator chunks 2c and 2c + 1. */
        uint32_t pf[BN / 16][4];
        #pragma unroll
        for (int c = 0; c < BN / 16; ++c) {
            pf[c][0] = k_pack(s[8 * c + 0], s[8 * c + 1]);
            pf[c][1] = k_pack(s[8 * c + 2], s[8 * c + 3]);
            pf[c][2] = k_pack(s[8 * c + 4], s[8 * c + 5]);
            pf[c][3] = k_pack(s[8 * c + 6], s[8 * c + 7]);
        }

        /* O += P V: 16 keys a step (two 8-row groups of the swizzle, SBO); V's 64-column
           panels are BN rows apart (LBO). */
        k_fence_regs(o, D / 2);
        k_wg_fence();
        #pragma unroll
        for (int c = 0; c < BN / 16; ++c) {
            const uint64_t db = k_desc(sv + c * 16 * 128, BN * 128, 1024);
            WGMMA_RS_D(o, pf[c], db);
        }
        k_wg_commit();
        k_wg_wait();
        k_fence_regs(o, D / 2);
    }

    #pragma unroll
    for (int rh = 0; rh < 2; ++rh) {
        l[rh] += __shfl_xor_sync(0xffffffffu, l[rh], 1);
        l[rh] += __shfl_xor_sync(0xffffffffu, l[rh], 2);
        const int64_t i = row0 + rh * 8;
        if (i >= lq) continue;
#if LSE
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
            orow[n * 4 + tq] = k_pack(o[n * 4 + 2 * rh] * inv, o[n * 4 + 2 * rh + 1] * inv);
    }
}
"#;
