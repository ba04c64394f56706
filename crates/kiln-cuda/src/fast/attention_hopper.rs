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
//! backward. Head dims 64, 96, 128 and 256 (96 padded to 128 with zero columns; 256 with
//! 64-key tiles), float16 and bfloat16, on sm_90 (`KILN_HOPPER_ATTN` picks a form: `cp`,
//! `ws`, `pingpong`, `persistent` (the default; causal takes `pingpong`), or `off`);
//! everything else keeps the flash kernel.

use kiln_base::{DType, Result};
use std::fmt::Write;

/// Queries per block (two warpgroups of 64).
pub(crate) const BM: usize = 128;

/// The tile width for head dim `d`: whole 64-column panels.
fn padded(d: usize) -> usize {
    d.next_multiple_of(64)
}

/// Keys per tile: 128, or 64 for head dim 256 (its output accumulators take twice the
/// registers, its tiles twice the shared memory).
pub(crate) fn key_tile(d: usize) -> usize {
    if padded(d) > 128 {
        64
    } else {
        128
    }
}
/// Threads per block.
pub(crate) const THREADS: u32 = 256;
pub(crate) const SYMBOL: &str = "kiln_attn_hopper";
/// The warp-specialised form: a producer warpgroup and two consumers.
pub(crate) const SYMBOL_WS: &str = "kiln_attn_hopper_ws";
pub(crate) const THREADS_WS: u32 = 384;

/// Whether this kernel takes head dim `d` on a GPU of compute capability `arch` (unless
/// `KILN_HOPPER_ATTN=off` keeps the `mma.sync` flash kernels).
pub(crate) fn takes(d: usize, arch: (i32, i32)) -> bool {
    arch == (9, 0) && matches!(d, 64 | 96 | 128 | 256) && form().is_some()
}

/// Which form `KILN_HOPPER_ATTN` asks for: 0 the cp.async one (`cp`), 1 the
/// warp-specialised one (`ws`: TMA, mbarriers), 2 that with the two consumers taking turns
/// and each tile's softmax overlapping the last tile's `P V` (`pingpong`), 3 (the default)
/// that with one block an SM walking tiles (`persistent`: the next tile's loads overlap this
/// one's last products and stores; under the causal mask with a grid that balances the
/// tiles' lengths, `attention::persistent_grid`, unless `KILN_HOPPER_CAUSAL=pingpong`; not
/// without keys: those take 2); none for
/// `off`. On an H100 (bench/fast_gpu.py, (8, 16, 2048, D) bf16 forward, two runs) at D 128
/// they ran at 341, 520, 555 and 551-561 TFLOP/s, the mma.sync kernel at 200; at D 64
/// `pingpong` 379-380, `persistent` 381-416.
pub(crate) fn form() -> Option<u8> {
    match std::env::var("KILN_HOPPER_ATTN").as_deref() {
        Ok("off") => None,
        Ok("cp") => Some(0),
        Ok("ws") => Some(1),
        Ok("pingpong") => Some(2),
        _ => Some(3),
    }
}

/// Dynamic shared memory of a block: Q, two K and two V tiles, the warp-specialised form's
/// ten mbarriers, and 1 KiB to align the base to the swizzle's 1024-byte period.
pub(crate) fn shared_bytes(d: usize) -> usize {
    (BM + 4 * key_tile(d)) * padded(d) * 2 + 1024 + 128
}

/// The TMA descriptor of a row-major (heads, rows, d) half-float tensor at `ptr` (16-byte
/// aligned), read in boxes of 64 columns by `box_rows` rows of one head, 128-byte swizzled
/// (the layout the kernel's shared-memory descriptors assume); rows past a head's end read
/// as zeros. As 16 words, the kernel's `KTmap` parameter.
pub(crate) fn tensor_map(
    dtype: DType,
    ptr: u64,
    (heads, rows, d): (usize, usize, usize),
    box_rows: usize,
) -> Result<[i64; 16]> {
    use cudarc::driver::sys as ds;
    let kind = if dtype == DType::BF16 {
        ds::CUtensorMapDataType::CU_TENSOR_MAP_DATA_TYPE_BFLOAT16
    } else {
        ds::CUtensorMapDataType::CU_TENSOR_MAP_DATA_TYPE_FLOAT16
    };
    // An empty tensor is never read (no key tiles) but still needs a valid map.
    let dims = [d as u64, rows.max(1) as u64, heads.max(1) as u64];
    let strides = [(d * 2) as u64, (rows.max(1) * d * 2) as u64];
    let boxes = [64u32, box_rows as u32, 1];
    let unit = [1u32; 3];
    let mut map = ds::CUtensorMap { opaque: [0; 16] };
    // SAFETY: every array has the rank (3, strides 2) the call reads; `ptr` is a live device
    // allocation of heads * rows * d elements, 16-byte aligned, strides multiples of 16.
    let status = unsafe {
        ds::cuTensorMapEncodeTiled(
            &mut map,
            kind,
            3,
            ptr as *mut std::ffi::c_void,
            dims.as_ptr(),
            strides.as_ptr(),
            boxes.as_ptr(),
            unit.as_ptr(),
            ds::CUtensorMapInterleave::CU_TENSOR_MAP_INTERLEAVE_NONE,
            ds::CUtensorMapSwizzle::CU_TENSOR_MAP_SWIZZLE_128B,
            ds::CUtensorMapL2promotion::CU_TENSOR_MAP_L2_PROMOTION_L2_128B,
            ds::CUtensorMapFloatOOBfill::CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE,
        )
    };
    if status != ds::CUresult::CUDA_SUCCESS {
        kiln_base::bail!(
            Runtime,
            "scaled_dot_product_attention",
            "cuTensorMapEncodeTiled failed: {status:?}"
        );
    }
    Ok(map.opaque.map(|w| w as i64))
}

/// `wgmma` of one warpgroup: d (64 x n, float32, n / 2 registers a thread) += a (64 x 16) b
/// (16 x n); `a` from shared memory (`_ss`, a descriptor) or registers (`_rs`, 4 words), `b`
/// from shared memory (transposed when `tnsp_b`: MN-major). `_ss` zeroes d first unless
/// `acc`.
pub(crate) fn wgmma_helpers(n: usize, t: &str) -> String {
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

/// The kernel's source after `attention::common` (mask mode, `S`, `LSE`, helpers) for head
/// dim `d`: `D` the padded tile width, `DR` the real one.
pub(crate) fn body(d: usize, dtype_mma: &str, form: u8) -> String {
    let (dp, bn) = (padded(d), key_tile(d));
    let mut s = format!(
        "#define D {dp}\n#define DR {d}\n#define BM {BM}\n#define BN {bn}\n\
         #define WGMMA_SS_S k_wgmma_ss_{bn}\n#define WGMMA_RS_D k_wgmma_rs_{dp}\n"
    );
    s.push_str(&wgmma_helpers(bn, dtype_mma));
    if dp != bn {
        s.push_str(&wgmma_helpers(dp, dtype_mma));
    }
    s.push_str(HELPERS);
    let _ = writeln!(s, "#define PINGPONG {}", (form >= 2) as u8);
    let _ = writeln!(s, "#define PERSISTENT {}", (form == 3) as u8);
    s.push_str(BODY);
    s.push_str(if form > 0 { KERNEL_WS } else { KERNEL_CP });
    s
}

/// What the forward and backward kernels share: copies, packing, `wgmma` fences and
/// descriptors, the swizzled tile loader (256 threads). Needs `S`, `D` and `DR`.
pub(crate) const HELPERS: &str = r#"
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
   ((c ^ r % 8) * 16), the layout TMA's 128-byte swizzle writes. Rows past the end and
   padded columns are zeros (0 * NaN would poison a product). */
template <int R>
K_INLINE void k_load_tile(uint32_t base, const S *src, int64_t r0, int64_t rows) {
    #pragma unroll
    for (int e = threadIdx.x; e < R * (D / 8); e += 256) {
        const int r = e / (D / 8), c = e % (D / 8);
        const bool valid = r0 + r < rows && c * 8 < DR;
        const uint32_t dst = base + (c >> 3) * (R * 128) + r * 128 + (((c & 7) ^ (r & 7)) << 4);
        k_cp16(dst, src + (valid ? (r0 + r) * DR + c * 8 : 0), valid);
    }
}

"#;

const BODY: &str = r#"
/* What every query row of a block shares: where its head's data is, the causal shift, the
   mask's strides. */
struct KRows {
    int64_t lq, lk, shift, i0, b, h;
    const M *mask;
    KStrides ms;
    float sl; /* scale * log2(e) */
};

/* Issues s = Q K^T for one warpgroup (no fence, commit or wait): 16 features a step; a
   panel holds 64 (4 steps of 32 bytes). `qwg` is the warpgroup's first query row in the Q
   tile (BM rows a panel). */
K_INLINE void k_scores_issue(float *s, uint32_t qwg, uint32_t sk) {
    #pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
        const uint32_t off = (kk & 3) << 5;
        const uint64_t da = k_desc(qwg + (kk >> 2) * (BM * 128) + off, 16, 1024);
        const uint64_t db = k_desc(sk + (kk >> 2) * (BN * 128) + off, 16, 1024);
        WGMMA_SS_S(s, da, db, kk);
    }
}

/* s = Q K^T, waited for. */
K_INLINE void k_scores(float *s, uint32_t qwg, uint32_t sk) {
    k_wg_fence();
    k_scores_issue(s, qwg, sk);
    k_wg_commit();
    k_wg_wait();
    k_fence_regs(s, BN / 2);
}

/* The online softmax of keys [j0, j0 + BN): s becomes the probabilities, m and l (this
   thread's two rows, base-2 units) are updated, corr is what the output accumulated so far
   must be scaled by. The 4 threads of a group share a row. Tiles off every edge keep the raw
   scores: the scale (never negative here, see `takes`) goes into the exponent's FFMA, as
   max(s) * scale = max(s * scale). Edge tiles scale and mask first (hidden: the lowest float;
   past the end: -inf). */
K_INLINE void k_softmax(float *s, float *corr, float *m, float *l, const KRows &r, int64_t j0,
                        int64_t row0, int tq) {
    bool edge = j0 + BN > r.lk;
#if MASK == 1
    edge = edge || j0 + BN - 1 > r.i0 + r.shift;
#elif MASK >= 2
    edge = true;
#endif
    float mul = r.sl;
    if (edge) {
        mul = 1.0f;
        /* Tile-local key indices (32-bit): keys [0, kend) exist; under the causal mask row
           rh sees keys up to lim[rh]. */
        const int kend = (int)min((int64_t)BN, r.lk - j0);
#if MASK == 1
        int lim[2];
        #pragma unroll
        for (int rh = 0; rh < 2; ++rh)
            lim[rh] = (int)max((int64_t)-1, min((int64_t)BN, row0 + rh * 8 + r.shift - j0));
#endif
        #pragma unroll
        for (int n = 0; n < BN / 8; ++n) {
            #pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int jl = n * 8 + tq * 2 + (e & 1);
                const int64_t i = row0 + (e >> 1) * 8, j = j0 + jl;
                float x = s[n * 4 + e] * r.sl;
#if MASK == 1
                if (jl > lim[e >> 1]) x = LOWEST;
#elif MASK == 2
                if (i < r.lq && j < r.lk)
                    x = x + k_load(r.mask[r.b * r.ms.v[0] + r.h * r.ms.v[1] + i * r.ms.v[2] + j * r.ms.v[3]]) * LOG2E;
#elif MASK == 3
                if (i < r.lq && j < r.lk && !r.mask[r.b * r.ms.v[0] + r.h * r.ms.v[1] + i * r.ms.v[2] + j * r.ms.v[3]])
                    x = LOWEST;
#endif
                (void)i;
                (void)j;
                s[n * 4 + e] = jl < kend ? x : -INFINITY;
            }
        }
    }
    #pragma unroll
    for (int rh = 0; rh < 2; ++rh) {
        float mt = -INFINITY;
        #pragma unroll
        for (int n = 0; n < BN / 8; ++n)
            mt = k_max_nan(k_max_nan(mt, s[n * 4 + 2 * rh]), s[n * 4 + 2 * rh + 1]);
        mt = k_max_nan(mt, __shfl_xor_sync(0xffffffffu, mt, 1));
        mt = k_max_nan(mt, __shfl_xor_sync(0xffffffffu, mt, 2));
        const float mx = k_max_nan(m[rh], mt * mul);
        corr[rh] = mx == m[rh] ? 1.0f : k_ex2(m[rh] - mx);
        const float nbase = mx == -INFINITY ? 0.0f : -mx;
        float sum = 0.0f;
        #pragma unroll
        for (int n = 0; n < BN / 8; ++n) {
            s[n * 4 + 2 * rh] = k_ex2(fmaf(s[n * 4 + 2 * rh], mul, nbase));
            s[n * 4 + 2 * rh + 1] = k_ex2(fmaf(s[n * 4 + 2 * rh + 1], mul, nbase));
            sum += s[n * 4 + 2 * rh] + s[n * 4 + 2 * rh + 1];
        }
        l[rh] = l[rh] * corr[rh] + sum;
        m[rh] = mx;
    }
}

K_INLINE void k_rescale(float *o, const float *corr) {
    #pragma unroll
    for (int n = 0; n < D / 8; ++n) {
        o[n * 4 + 0] *= corr[0];
        o[n * 4 + 1] *= corr[0];
        o[n * 4 + 2] *= corr[1];
        o[n * 4 + 3] *= corr[1];
    }
}

/* P as register A fragments: key columns 16c..16c+15 are accumulator chunks 2c and 2c + 1,
   the layout A wants. */
K_INLINE void k_pack_p(uint32_t (*pf)[4], const float *s) {
    #pragma unroll
    for (int c = 0; c < BN / 16; ++c) {
        pf[c][0] = k_pack(s[8 * c + 0], s[8 * c + 1]);
        pf[c][1] = k_pack(s[8 * c + 2], s[8 * c + 3]);
        pf[c][2] = k_pack(s[8 * c + 4], s[8 * c + 5]);
        pf[c][3] = k_pack(s[8 * c + 6], s[8 * c + 7]);
    }
}

/* Issues o += P V (no wait): 16 keys a step (two 8-row groups of the swizzle, SBO); V's
   64-column panels are BN rows apart (LBO). */
K_INLINE void k_pv_issue(float *o, uint32_t (*pf)[4], uint32_t sv) {
    #pragma unroll
    for (int c = 0; c < BN / 16; ++c) WGMMA_RS_D(o, pf[c], k_desc(sv + c * 16 * 128, BN * 128, 1024));
}

/* o += P V, waited for. */
K_INLINE void k_pv(float *o, const float *s, uint32_t sv) {
    uint32_t pf[BN / 16][4];
    k_pack_p(pf, s);
    k_fence_regs(o, D / 2);
    k_wg_fence();
    k_pv_issue(o, pf, sv);
    k_wg_commit();
    k_wg_wait();
    k_fence_regs(o, D / 2);
}

/* The thread's two output rows (and their logsumexp). */
K_INLINE void k_epilogue(const float *o, float *m, float *l, const KRows &r, int64_t bh,
                         int64_t row0, int tq, S *out, float *lse) {
    #pragma unroll
    for (int rh = 0; rh < 2; ++rh) {
        l[rh] += __shfl_xor_sync(0xffffffffu, l[rh], 1);
        l[rh] += __shfl_xor_sync(0xffffffffu, l[rh], 2);
        const int64_t i = row0 + rh * 8;
        if (i >= r.lq) continue;
#if LSE
        if (tq == 0) {
            float lv = r.lk == 0 ? -INFINITY : (m[rh] + log2f(l[rh])) * 0.6931471805599453f;
#if MASK == 1
            if (r.lk > 0 && i + r.shift < 0) lv = logf((float)r.lk);
#endif
            lse[bh * r.lq + i] = lv;
        }
#endif
        const float inv = r.lk == 0 ? 0.0f : 1.0f / l[rh];
        uint32_t *orow = (uint32_t *)(out + (bh * r.lq + i) * DR);
        #pragma unroll
        for (int n = 0; n < DR / 8; ++n) /* padded columns (DR < D) are not written */
            orow[n * 4 + tq] = k_pack(o[n * 4 + 2 * rh] * inv, o[n * 4 + 2 * rh + 1] * inv);
    }
}

/* Keys the block visits: under the causal mask, none after its last query's (unless some
   row sees no key: it must average them all). */
K_INLINE int k_key_tiles(const KRows &r) {
    int64_t key_end = r.lk;
#if MASK == 1
    if (r.i0 + r.shift >= 0) key_end = min(r.lk, min(r.lq, r.i0 + BM) - 1 + r.shift + 1);
#endif
    return (int)((key_end + BN - 1) / BN);
}
"#;

/// Tiles through `cp.async` by all 256 threads; a block barrier a tile.
const KERNEL_CP: &str = r#"
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
    const KRows r = {lq, lk, lk - lq, qb * BM, b, h, mask, ms, (float)scale * LOG2E};
    const S *kp = k + kvh * lk * DR;
    const S *vp = v + kvh * lk * DR;
    const int n_blocks = k_key_tiles(r);

    k_load_tile<BM>(sq, q + bh * lq * DR, r.i0, lq);
    if (n_blocks > 0) {
        k_load_tile<BN>(sk0, kp, 0, lk);
        k_load_tile<BN>(sv0, vp, 0, lk);
    }
    k_cp_commit();

    float o[D / 2];
    #pragma unroll
    for (int n = 0; n < D / 2; ++n) o[n] = 0.0f;
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
    /* This thread's rows: row0 and row0 + 8 (warp w of the warpgroup owns 16). */
    const int64_t row0 = r.i0 + wg * 64 + (warp & 3) * 16 + g;

    for (int nb = 0; nb < n_blocks; ++nb) {
        const int64_t j0 = (int64_t)nb * BN;
        const uint32_t sk = sk0 + (nb & 1) * (BN * D * 2), sv = sv0 + (nb & 1) * (BN * D * 2);
        k_cp_wait();
        asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
        __syncthreads(); /* tile nb is in; every warpgroup is done with tile nb - 1 */
        if (nb + 1 < n_blocks) {
            k_load_tile<BN>(sk0 + ((nb + 1) & 1) * (BN * D * 2), kp, j0 + BN, lk);
            k_load_tile<BN>(sv0 + ((nb + 1) & 1) * (BN * D * 2), vp, j0 + BN, lk);
        }
        k_cp_commit();
        float s[BN / 2];
        k_scores(s, sq + wg * 64 * 128, sk);
        float corr[2];
        k_softmax(s, corr, m, l, r, j0, row0, tq);
        k_rescale(o, corr);
        k_pv(o, s, sv);
    }
    k_epilogue(o, m, l, r, bh, row0, tq, out, lse);
}
"#;

/// A producer warp feeds the tiles through the tensor memory accelerator (TMA) into a
/// two-stage ring; two consumer warpgroups take them through mbarriers (no block barrier, so
/// one warpgroup's softmax can overlap the other's products).
const KERNEL_WS: &str = r#"
struct __align__(64) KTmap { uint64_t w[16]; };

K_INLINE void k_bar_init(uint32_t bar, int count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count));
}
K_INLINE void k_bar_expect(uint32_t bar, uint32_t bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}
K_INLINE void k_bar_arrive(uint32_t bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
K_INLINE void k_bar_wait(uint32_t bar, uint32_t parity) {
    asm volatile("{\n.reg .pred done;\nWAIT_%=:\n"
                 "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
                 "@!done bra WAIT_%=;\n}\n" ::"r"(bar), "r"(parity) : "memory");
}
/* One 64-column panel of `rows` rows of head `head` from row `row0` (zeros past the
   head's end) into `dst`, counted on `bar`. */
K_INLINE void k_tma(uint32_t dst, const KTmap *map, int col, int row0, int head, uint32_t bar) {
    asm volatile("cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
                 " [%0], [%1, {%2, %3, %4}], [%5];\n"
                 ::"r"(dst), "l"((uint64_t)map), "r"(col), "r"(row0), "r"(head), "r"(bar) : "memory");
}

extern "C" __global__ void __launch_bounds__(384, 1) kiln_attn_hopper_ws(
        const __grid_constant__ KTmap tmq, const __grid_constant__ KTmap tmk,
        const __grid_constant__ KTmap tmv,
        const int64_t hq, const int64_t lq, const int64_t lk, const int64_t group, const int64_t hk,
        const int64_t q_blocks, const M *__restrict__ mask, S *__restrict__ out,
        float *__restrict__ lse, const KStrides ms, const double scale, const int64_t n_tiles) {
    extern __shared__ uint8_t smem_raw[];
    const uint32_t base = (k_smem(smem_raw) + 1023u) & ~1023u;
    const uint32_t sq = base;
    const uint32_t sk0 = sq + BM * D * 2;
    const uint32_t sv0 = sk0 + 2 * BN * D * 2;
    /* Barriers: Q full; K full 0, 1; V full 0, 1; K empty 0, 1; V empty 0, 1; Q empty. */
    const uint32_t bars = sv0 + 2 * BN * D * 2;
    const uint32_t bar_q = bars, full_k = bars + 8, full_v = bars + 24, empty_k = bars + 40,
                   empty_v = bars + 56, empty_q = bars + 72;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, wg = warp >> 2;
    /* Tiles (a head's 128-query block; later blocks of a head first: under the causal mask
       they have the most keys): one a block, or, persistent, every gridDim.x-th from
       blockIdx.x, so the next tile's loads overlap this one's last products and output. */
#if PERSISTENT
    const int64_t t_step = gridDim.x;
#else
    const int64_t t_step = n_tiles;
#endif
    if (tid == 0) {
        k_bar_init(bar_q, 1);
        k_bar_init(empty_q, 8); /* a lane of each consumer warp */
        #pragma unroll
        for (int st = 0; st < 2; ++st) {
            k_bar_init(full_k + 8 * st, 1);
            k_bar_init(full_v + 8 * st, 1);
            k_bar_init(empty_k + 8 * st, 8);
            k_bar_init(empty_v + 8 * st, 8);
        }
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    __syncthreads();

    if (wg == 0) {
        asm volatile("setmaxnreg.dec.sync.aligned.u32 40;\n");
        if (tid != 0) return;
        int it = 0; /* K and V tiles through the ring so far */
        int tc = 0;
        for (int64_t t = blockIdx.x; t < n_tiles; t += t_step, ++tc) {
            const int64_t qb = q_blocks - 1 - t % q_blocks, bh = t / q_blocks;
            const int64_t kvh = (bh / hq) * hk + (bh % hq) / group;
            const KRows r = {lq, lk, lk - lq, qb * BM, bh / hq, bh % hq, mask, ms, 0.0f};
            const int n_blocks = k_key_tiles(r);
            k_bar_wait(empty_q, (tc & 1) ^ 1);
            k_bar_expect(bar_q, BM * D * 2);
            #pragma unroll
            for (int p = 0; p < PANELS; ++p) k_tma(sq + p * BM * 128, &tmq, 64 * p, (int)r.i0, (int)bh, bar_q);
            for (int nb = 0; nb < n_blocks; ++nb, ++it) {
                const int st = it & 1;
                const uint32_t ph = (it >> 1) & 1;
                const uint32_t sk = sk0 + st * (BN * D * 2), sv = sv0 + st * (BN * D * 2);
                k_bar_wait(empty_k + 8 * st, ph ^ 1);
                k_bar_expect(full_k + 8 * st, BN * D * 2);
                #pragma unroll
                for (int p = 0; p < PANELS; ++p) k_tma(sk + p * BN * 128, &tmk, 64 * p, nb * BN, (int)kvh, full_k + 8 * st);
                k_bar_wait(empty_v + 8 * st, ph ^ 1);
                k_bar_expect(full_v + 8 * st, BN * D * 2);
                #pragma unroll
                for (int p = 0; p < PANELS; ++p) k_tma(sv + p * BN * 128, &tmv, 64 * p, nb * BN, (int)kvh, full_v + 8 * st);
            }
        }
        return;
    }
    asm volatile("setmaxnreg.inc.sync.aligned.u32 232;\n");
    const int cw = wg - 1, g = lane >> 2, tq = lane & 3;
    int it = 0, tc = 0;
#if PERSISTENT
    for (int64_t t = blockIdx.x; t < n_tiles; t += t_step, ++tc) {
#else
    { /* (no loop: around the products one makes ptxas serialise every wgmma) */
    const int64_t t = blockIdx.x;
#endif
    const int64_t qb = q_blocks - 1 - t % q_blocks, bh = t / q_blocks;
    const KRows r = {lq, lk, lk - lq, qb * BM, bh / hq, bh % hq, mask, ms, (float)scale * LOG2E};
    const int n_blocks = k_key_tiles(r);
    float o[D / 2];
    #pragma unroll
    for (int n = 0; n < D / 2; ++n) o[n] = 0.0f;
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
    const int64_t row0 = r.i0 + cw * 64 + (warp & 3) * 16 + g;
    k_bar_wait(bar_q, tc & 1);
#if PINGPONG
    /* Tile j's S = Q K^T and tile j-1's O += P V are issued together, then S is waited for
       while P V runs; the softmax of S overlaps it. The two consumer warpgroups take turns
       issuing (named barriers 1 and 2), so one's products run during the other's softmax.
       Warpgroup 0 goes first; the block's last turn is not passed on (no dangling arrival).
       Both warpgroups take a tile's key tiles alike, and a persistent launch has keys in
       every tile, so the turns alternate across tiles whatever their lengths. */
    const uint32_t qwg = sq + cw * 64 * 128;
    const bool last_tile = t + t_step >= n_tiles;
    uint32_t pf[BN / 16][4];
    if (cw == 1 && tc == 0 && n_blocks > 0) asm volatile("bar.arrive 1, 256;\n" ::: "memory");
    for (int nb = 0; nb < n_blocks; ++nb, ++it) {
        const int st = it & 1, pst = st ^ 1;
        const uint32_t ph = (it >> 1) & 1, pph = ((it - 1) >> 1) & 1;
        const uint32_t sk = sk0 + st * (BN * D * 2), psv = sv0 + pst * (BN * D * 2);
        float s[BN / 2];
        k_bar_wait(full_k + 8 * st, ph);
        if (nb > 0) k_bar_wait(full_v + 8 * pst, pph);
        if (cw == 0) asm volatile("bar.sync 1, 256;\n" ::: "memory");
        else asm volatile("bar.sync 2, 256;\n" ::: "memory");
        k_fence_regs(o, D / 2);
        k_wg_fence();
        k_scores_issue(s, qwg, sk);
        k_wg_commit();
        if (nb > 0) k_pv_issue(o, pf, psv);
        k_wg_commit();
        if (cw == 0) asm volatile("bar.arrive 2, 256;\n" ::: "memory");
        else if (nb + 1 < n_blocks || !last_tile) asm volatile("bar.arrive 1, 256;\n" ::: "memory");
        asm volatile("wgmma.wait_group.sync.aligned 1;\n" ::: "memory");
        k_fence_regs(s, BN / 2);
        if (lane == 0) k_bar_arrive(empty_k + 8 * st);
        float corr[2];
        k_softmax(s, corr, m, l, r, (int64_t)nb * BN, row0, tq);
        k_wg_wait();
        k_fence_regs(o, D / 2);
        if (nb > 0 && lane == 0) k_bar_arrive(empty_v + 8 * pst);
        k_rescale(o, corr);
        k_pack_p(pf, s);
    }
    /* Every S of the tile is done: the producer may load the next tile's Q. */
    if (lane == 0) k_bar_arrive(empty_q);
    /* A persistent launch has keys in every tile (Lk = 0 never takes it); inside its tile
       loop a condition around these products would make ptxas serialise every wgmma. */
#if !PERSISTENT
    if (n_blocks > 0)
#endif
    {
        const int st = (it - 1) & 1;
        k_bar_wait(full_v + 8 * st, ((it - 1) >> 1) & 1);
        k_fence_regs(o, D / 2);
        k_wg_fence();
        k_pv_issue(o, pf, sv0 + st * (BN * D * 2));
        k_wg_commit();
        k_wg_wait();
        k_fence_regs(o, D / 2);
        if (lane == 0) k_bar_arrive(empty_v + 8 * st);
    }
#else
    for (int nb = 0; nb < n_blocks; ++nb, ++it) {
        const int st = it & 1;
        const uint32_t ph = (it >> 1) & 1;
        const uint32_t sk = sk0 + st * (BN * D * 2), sv = sv0 + st * (BN * D * 2);
        float s[BN / 2];
        k_bar_wait(full_k + 8 * st, ph);
        k_scores(s, sq + cw * 64 * 128, sk);
        if (lane == 0) k_bar_arrive(empty_k + 8 * st);
        float corr[2];
        k_softmax(s, corr, m, l, r, (int64_t)nb * BN, row0, tq);
        k_rescale(o, corr);
        k_bar_wait(full_v + 8 * st, ph);
        k_pv(o, s, sv);
        if (lane == 0) k_bar_arrive(empty_v + 8 * st);
    }
    if (lane == 0) k_bar_arrive(empty_q);
#endif
    k_epilogue(o, m, l, r, bh, row0, tq, out, lse);
    }
}
"#;
