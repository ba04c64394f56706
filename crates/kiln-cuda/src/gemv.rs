//! Products of a few rows against a weight matrix, at the memory bandwidth: `x @ W.T` for x
//! (M <= 8, K) and W (N, K) row-major, either dense (x's dtype) or in MLX's affine quantized
//! layout (packed words, a scale and a bias per group). A decode step's projections are such
//! products: every weight is read once and used M times, so the time is W's bytes over the
//! bandwidth, and cuBLAS's general kernels (tiles for large M) reach about half of it.
//!
//! A block of 4 warps computes 4 output features (`tiling`); its warps split K between
//! them, each lane taking units of 16 bytes of dense weights or 32 quantized values (`BITS`
//! words), `U` units per feature loaded before any is used, so enough bytes are in flight to
//! cover the memory latency. Quantized values become floats by an exact bit trick (`2^23 + q` as a
//! float, minus `2^23`: no integer conversion, which runs at a sixteenth of the FMA rate),
//! and a unit, inside one group, adds `scale * (x . q) + bias * sum(x)` (weight by weight
//! where x holds an inf or NaN, whose products the factored form would change). Accumulation
//! is float32; the warps' partial sums meet in shared memory.

use crate::copy::empty;
use crate::launch::{launch, Args};
use crate::nvrtc::{check_grid, Function, KernelCache};
use kiln_base::{ArrayData, DType, Result};
use std::fmt::Write;

const SYMBOL: &str = "kiln_gemv";
/// Features per block (`tiling`).
const FEATURES: usize = 4;
/// Rows of x up to which these kernels take a product.
pub(crate) const MAX_ROWS: usize = 8;

#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
struct Key {
    dtype: DType,
    /// `Some((group_size, bits))`: the affine layout; `None`: dense weights of x's dtype.
    quant: Option<(usize, u32)>,
    /// x's rows, rounded up to a power of two.
    rows: usize,
    tiling: Tiling,
    /// Products the kernel takes: 1, or `MAX_SETS` for a group run together.
    sets: usize,
}

/// A block's shape: `features` outputs, `warps` warps splitting K, `unroll` units per
/// feature loaded ahead (0: by the width, about 32 words of registers per feature).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
struct Tiling {
    features: usize,
    warps: usize,
    unroll: usize,
}

/// The block shape for a product: 4 features of 4 warps. Two features per block for the
/// matrices up to 16M weights ran faster one product at a time in a profiled sweep (bf16
/// 4096x4096 14.9 vs 17.1 us on the H200) but slowed mlx-lm's whole decode step in the same
/// run (llama 8B bf16 108 vs 171 tok/s, 1B 209 vs 304), so every product takes 4.
/// `KILN_GEMV_TILING=features,warps,unroll` (read once) sets another shape, for tuning on a
/// device.
fn tiling() -> Tiling {
    static FORCED: std::sync::OnceLock<Option<Tiling>> = std::sync::OnceLock::new();
    let forced = FORCED.get_or_init(|| {
        let v = crate::launch::tuning_numbers("KILN_GEMV_TILING");
        match v.as_slice() {
            [f, w, u] if (1..=16).contains(f) && (1..=16).contains(w) && *u <= 8 => {
                Some(Tiling { features: *f, warps: *w, unroll: *u })
            }
            _ => None,
        }
    });
    forced.unwrap_or(Tiling { features: FEATURES, warps: 4, unroll: 0 })
}

const BODY: &str = r#"
#define NT (WARPS * 32)

/* `count` consecutive values of x at p (16-byte aligned) as floats. */
template <int COUNT>
K_INLINE void k_xload(const S *__restrict__ p, float *o) {
#if S_IS_FLOAT
    #pragma unroll
    for (int i = 0; i < COUNT; i += 4) {
        const float4 a = __ldg((const float4 *)(p + i));
        o[i] = a.x; o[i + 1] = a.y; o[i + 2] = a.z; o[i + 3] = a.w;
    }
#else
    #pragma unroll
    for (int i = 0; i < COUNT; i += 8) {
        const uint4 a = __ldg((const uint4 *)(p + i));
        const uint32_t w[4] = {a.x, a.y, a.z, a.w};
        #pragma unroll
        for (int j = 0; j < 4; ++j) {
            o[i + 2 * j] = k_load((S)(w[j] & 0xffffu));
            o[i + 2 * j + 1] = k_load((S)(w[j] >> 16));
        }
    }
#endif
}

#if QUANT
#define VPU 32     /* values per unit */
#define WORDS BITS /* words per unit */
/* Value t (< 32, known after unrolling) of a unit's words, as an exact float. */
K_INLINE float k_wval(const uint32_t *wv, const int t) {
    const int bit = t * BITS, word = bit / 32, shift = bit % 32;
    uint32_t v = wv[word] >> shift;
    if (shift + BITS > 32) v |= wv[word + 1] << (32 - shift);
    return __uint_as_float((v & ((1u << BITS) - 1u)) | 0x4B000000u) - 8388608.0f;
}
#else
#define VPU (16 / (int)sizeof(S))
#define WORDS 4
K_INLINE float k_wval(const uint32_t *wv, const int t) {
#if S_IS_FLOAT
    return __uint_as_float(wv[t]);
#else
    return k_load((S)((wv[t / 2] >> (16 * (t & 1))) & 0xffffu));
#endif
}
#endif

/* A unit's words, 16 bytes at a time where WORDS allows. */
K_INLINE void k_words(const uint32_t *__restrict__ p, uint32_t *wv) {
#if WORDS % 4 == 0
    #pragma unroll
    for (int i = 0; i < WORDS; i += 4) {
        const uint4 a = __ldg((const uint4 *)(p + i));
        wv[i] = a.x; wv[i + 1] = a.y; wv[i + 2] = a.z; wv[i + 3] = a.w;
    }
#elif WORDS % 2 == 0
    #pragma unroll
    for (int i = 0; i < WORDS; i += 2) {
        const uint2 a = __ldg((const uint2 *)(p + i));
        wv[i] = a.x; wv[i + 1] = a.y;
    }
#else
    #pragma unroll
    for (int i = 0; i < WORDS; ++i) wv[i] = __ldg(p + i);
#endif
}

/* out (rows, n) = x (rows, k) @ W.T for each product of `sets`; W's rows `ldw` words apart. */
extern "C" __global__ void __launch_bounds__(NT) kiln_gemv(
        const int64_t rows, const int64_t k, const int64_t ldw, const S *__restrict__ x,
        const KSets sets) {
    K_PICK_SET(sets);
    __shared__ float red[WARPS][FPB][ROWS];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int64_t f0 = tile * FPB;
    int64_t fr[FPB];
    #pragma unroll
    for (int j = 0; j < FPB; ++j) fr[j] = f0 + j < n ? f0 + j : n - 1;
    float acc[FPB][ROWS];
    #pragma unroll
    for (int j = 0; j < FPB; ++j)
        #pragma unroll
        for (int r = 0; r < ROWS; ++r) acc[j][r] = 0.0f;
    const int64_t units = k / VPU;
#if QUANT
    const int64_t groups = k / GROUP;
#endif
    for (int64_t base = warp * 32 + lane; base < units; base += (int64_t)U * WARPS * 32) {
        uint32_t wq[U][FPB][WORDS];
#if QUANT
        float sc[U][FPB], bi[U][FPB];
#endif
        #pragma unroll
        for (int s = 0; s < U; ++s) {
            const int64_t u = base + (int64_t)s * WARPS * 32;
            if (u < units) {
                #pragma unroll
                for (int j = 0; j < FPB; ++j) {
                    k_words(w + fr[j] * ldw + u * WORDS, wq[s][j]);
#if QUANT
                    const int64_t g = fr[j] * groups + u * 32 / GROUP;
                    sc[s][j] = k_load(scales[g]);
                    bi[s][j] = k_load(biases[g]);
#endif
                }
            }
        }
        #pragma unroll
        for (int s = 0; s < U; ++s) {
            const int64_t u = base + (int64_t)s * WARPS * 32;
            if (u < units) {
                #pragma unroll
                for (int r = 0; r < ROWS; ++r) {
                    if (r < rows) {
                        float xv[VPU];
                        k_xload<VPU>(x + r * k + u * VPU, xv);
#if QUANT
                        float xs = 0.0f;
                        #pragma unroll
                        for (int t = 0; t < VPU; ++t) xs += xv[t];
                        if (isfinite(xs)) {
                            #pragma unroll
                            for (int j = 0; j < FPB; ++j) {
                                float d = 0.0f;
                                #pragma unroll
                                for (int t = 0; t < VPU; ++t) d = fmaf(xv[t], k_wval(wq[s][j], t), d);
                                acc[j][r] = fmaf(sc[s][j], d, fmaf(bi[s][j], xs, acc[j][r]));
                            }
                        } else {
                            /* inf or NaN in x: each weight first, rounded as dequantize
                               rounds it (a product, then a sum, each in S: a weight of
                               exactly 0 gives 0 * inf = NaN as the definition does; the
                               factored form and a fused multiply-add would not). */
                            #pragma unroll
                            for (int j = 0; j < FPB; ++j)
                                #pragma unroll
                                for (int t = 0; t < VPU; ++t) {
                                    const float wt = k_dequant(sc[s][j], k_wval(wq[s][j], t), bi[s][j]);
                                    acc[j][r] = fmaf(xv[t], wt, acc[j][r]);
                                }
                        }
#else
                        #pragma unroll
                        for (int j = 0; j < FPB; ++j)
                            #pragma unroll
                            for (int t = 0; t < VPU; ++t) acc[j][r] = fmaf(xv[t], k_wval(wq[s][j], t), acc[j][r]);
#endif
                    }
                }
            }
        }
    }
    #pragma unroll
    for (int j = 0; j < FPB; ++j)
        #pragma unroll
        for (int r = 0; r < ROWS; ++r) {
            float a = acc[j][r];
            #pragma unroll
            for (int o = 16; o > 0; o >>= 1) a += __shfl_xor_sync(0xffffffffu, a, o);
            if (lane == 0) red[warp][j][r] = a;
        }
    __syncthreads();
    for (int t = threadIdx.x; t < FPB * ROWS; t += NT) {
        const int j = t / ROWS, r = t % ROWS;
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
    let (quant, group, bits) = match key.quant {
        Some((g, b)) => (1, g, b),
        None => (0, 32, 16),
    };
    // Units loaded ahead per feature: about 32 words of registers per feature.
    let words = if quant == 1 { bits as usize } else { 4 };
    let t = key.tiling;
    let unroll = if t.unroll > 0 { t.unroll } else { (8 / words).clamp(1, 2) };
    let _ = write!(
        s,
        "#define QUANT {quant}\n#define GROUP {group}\n#define BITS {bits}\n#define ROWS {}\n\
         #define U {unroll}\n#define S_IS_FLOAT {}\n#define WARPS {}\n#define FPB {}\n",
        key.rows,
        (key.dtype == DType::F32) as u8,
        t.warps,
        t.features,
    );
    s.push_str(&sets_source(key.sets));
    s.push_str(BODY);
    s
}

static KERNELS: KernelCache<Key> = KernelCache::new();

fn kernel(key: &Key) -> Result<Function> {
    KERNELS.get(key, SYMBOL, || source(key))
}

fn half_or_single(dtype: DType) -> bool {
    matches!(dtype, DType::F32 | DType::F16 | DType::BF16)
}

/// One product of a launch: W's `n` rows at `w` (scales and biases row-major `(n, k /
/// group)` when quantized) and the `(rows, n)` output it writes.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Weights {
    pub n: usize,
    pub w: u64,
    pub scales: u64,
    pub biases: u64,
}

/// `rows` rows of x (row-major, 16-byte aligned at `x`) times W.T for each of `sets` (one
/// launch: a group's products of one x); every W's rows `ldw` words apart.
struct Product {
    dtype: DType,
    quant: Option<(usize, u32)>,
    rows: usize,
    k: usize,
    ldw: usize,
    x: u64,
    sets: Vec<Weights>,
}

/// Products one launch takes at most (a layer's q, k and v, and one more).
pub(crate) const MAX_SETS: usize = 4;

/// The kernels' `KSets` argument and the source that reads it: a block takes the product
/// whose blocks hold it. The choice is unrolled over constant indices (a dynamic index into
/// a kernel parameter would copy the struct to local memory).
pub(crate) fn sets_source(sets: usize) -> String {
    format!(
        r#"
#define SETS {sets}
/* Per product: features, first block (rising; unused entries start past every block),
   weights, scales, biases, output. */
struct KSets {{ int64_t n[SETS], first[SETS], w[SETS], scales[SETS], biases[SETS], out[SETS]; }};
#define K_PICK_SET(sets) \
    int64_t n = sets.n[0], tile = blockIdx.x, w_ = sets.w[0], s_ = sets.scales[0], \
            b_ = sets.biases[0], o_ = sets.out[0]; \
    _Pragma("unroll") for (int i_ = 1; i_ < SETS; ++i_) \
        if ((int64_t)blockIdx.x >= sets.first[i_]) {{ \
            n = sets.n[i_]; tile = (int64_t)blockIdx.x - sets.first[i_]; w_ = sets.w[i_]; \
            s_ = sets.scales[i_]; b_ = sets.biases[i_]; o_ = sets.out[i_]; \
        }} \
    const uint32_t *__restrict__ w = (const uint32_t *)w_; \
    const S *__restrict__ scales = (const S *)s_; \
    const S *__restrict__ biases = (const S *)b_; \
    S *__restrict__ out = (S *)o_
"#
    )
}

/// Pushes `sets` (at most `slots`) with their outputs as the kernels' `KSets`, each product
/// taking `n / per_block` blocks; returns the blocks in all.
pub(crate) fn push_sets(
    args: &mut Args,
    sets: &[Weights],
    outs: &[&ArrayData],
    per_block: usize,
    slots: usize,
) -> u64 {
    let mut fields = vec![0i64; 6 * slots];
    let mut blocks = 0u64;
    for i in 0..slots {
        fields[slots + i] = i64::MAX;
    }
    for (i, (set, out)) in sets.iter().zip(outs).enumerate() {
        fields[i] = set.n as i64;
        fields[slots + i] = blocks as i64;
        fields[2 * slots + i] = set.w as i64;
        fields[3 * slots + i] = set.scales as i64;
        fields[4 * slots + i] = set.biases as i64;
        fields[5 * slots + i] = out.buffer.as_ptr() as i64;
        blocks += set.n.div_ceil(per_block) as u64;
    }
    args.i64_struct(&fields);
    blocks
}

fn run(p: &Product, shapes: &[&[usize]]) -> Result<Vec<ArrayData>> {
    let outs = shapes.iter().map(|s| empty(s, p.dtype)).collect::<Result<Vec<_>>>()?;
    let live: Vec<(Weights, &ArrayData)> =
        p.sets.iter().copied().zip(&outs).filter(|(s, _)| s.n > 0).collect();
    if p.rows == 0 || live.is_empty() {
        return Ok(outs);
    }
    let tiling = tiling();
    let sets = if p.sets.len() == 1 { 1 } else { MAX_SETS };
    let rows = p.rows.next_power_of_two();
    let key = Key { dtype: p.dtype, quant: p.quant, rows, tiling, sets };
    let mut args = Args::new();
    args.i64(p.rows as i64).i64(p.k as i64).i64(p.ldw as i64).ptr(p.x);
    let (weights, outs_live): (Vec<_>, Vec<_>) = live.into_iter().unzip();
    let blocks = push_sets(&mut args, &weights, &outs_live, tiling.features, sets);
    let blocks = check_grid(SYMBOL, blocks)?;
    let threads = 32 * tiling.warps as u32;
    launch(SYMBOL, kernel(&key)?, blocks, threads, 0, &mut args)?;
    Ok(outs)
}

/// A quantized product's operands as `quantized` and `quantized_together` take them.
pub(crate) struct Quantized<'a> {
    pub w: &'a ArrayData,
    pub scales: &'a ArrayData,
    pub biases: &'a ArrayData,
    pub shape: &'a [usize],
}

/// `x @ dequantize(w).T` for x with at most `MAX_ROWS` rows of k values and a 2-d packed w,
/// or `None` when the layouts do not allow it (the caller's general kernel runs instead).
pub(crate) fn quantized(
    x: &ArrayData,
    w: &ArrayData,
    scales: &ArrayData,
    biases: &ArrayData,
    group_size: usize,
    bits: u32,
    shape: &[usize],
) -> Result<Option<ArrayData>> {
    let q = Quantized { w, scales, biases, shape };
    let out = quantized_together(x, &[q], group_size, bits)?;
    Ok(out.map(|mut v| v.remove(0)))
}

/// `x @ dequantize(w).T` for each of `products` (at most `MAX_SETS`, with the same packed
/// row length) in one launch, or `None` when the layouts do not allow it.
pub(crate) fn quantized_together(
    x: &ArrayData,
    products: &[Quantized],
    group_size: usize,
    bits: u32,
) -> Result<Option<Vec<ArrayData>>> {
    let k = *x.layout.shape.last().unwrap_or(&0);
    let rows = x.layout.size().checked_div(k).unwrap_or(0);
    let words = products[0].w.layout.shape[1];
    let ptr = crate::fast::ptr;
    let word_align: usize = if bits.is_multiple_of(4) {
        16
    } else if bits.is_multiple_of(2) {
        8
    } else {
        4
    };
    let operands_fit = |q: &Quantized| {
        q.scales.dtype == x.dtype
            && q.biases.dtype == x.dtype
            && q.w.layout.shape[1] == words
            && [q.w, q.scales, q.biases].iter().all(|a| a.layout.row_contiguous)
            && ptr(q.w).is_multiple_of(word_align as u64)
    };
    let fits = rows <= MAX_ROWS
        && k > 0
        && products.len() <= MAX_SETS
        && half_or_single(x.dtype)
        && x.layout.row_contiguous
        && ptr(x).is_multiple_of(16)
        && (k * x.dtype.size()).is_multiple_of(16)
        && (words * 4).is_multiple_of(word_align)
        && products.iter().all(operands_fit);
    if !fits {
        return Ok(None);
    }
    let sets: Vec<Weights> = products
        .iter()
        .map(|q| Weights {
            n: q.w.layout.shape[0],
            w: ptr(q.w),
            scales: ptr(q.scales),
            biases: ptr(q.biases),
        })
        .collect();
    let shapes: Vec<&[usize]> = products.iter().map(|q| q.shape).collect();
    if crate::qmv_mma::applies(x.dtype, group_size, bits) {
        let sizes = (rows, k, words);
        let outs = crate::qmv_mma::run(x.dtype, group_size, sizes, ptr(x), &sets, &shapes)?;
        if outs.is_some() || sets.len() > 1 {
            // (A group the tensor-core kernel refuses runs member by member, each as alone.)
            return Ok(outs);
        }
    }
    let p = Product {
        dtype: x.dtype,
        quant: Some((group_size, bits)),
        rows,
        k,
        ldw: words,
        x: ptr(x),
        sets,
    };
    run(&p, &shapes).map(Some)
}

/// `a @ b` where a has at most `MAX_ROWS` rows in all (row-major) and b is one matrix (its
/// batch broadcast) stored column-major: the transposed view `W.T` of a row-major W, as
/// `nn.Linear` multiplies. `None` for other layouts (cuBLAS takes them).
pub(crate) fn dense_transposed(
    a: &ArrayData,
    b: &ArrayData,
    shape: &[usize],
) -> Result<Option<ArrayData>> {
    let out = dense_transposed_together(a, &[(b, shape)])?;
    Ok(out.map(|mut v| v.remove(0)))
}

/// `a @ b` for each `(b, shape)` of `products` (at most `MAX_SETS`, with the same row
/// stride) in one launch, as `dense_transposed` takes them, or `None`.
pub(crate) fn dense_transposed_together(
    a: &ArrayData,
    products: &[(&ArrayData, &[usize])],
) -> Result<Option<Vec<ArrayData>>> {
    if !half_or_single(a.dtype) || !a.layout.row_contiguous || products.len() > MAX_SETS {
        return Ok(None);
    }
    let esize = a.dtype.size();
    let ptr = crate::fast::ptr;
    let mut sets = Vec::with_capacity(products.len());
    let mut common = None;
    for &(b, _) in products {
        let nd = b.layout.ndim();
        if nd < 2 || a.dtype != b.dtype {
            return Ok(None);
        }
        let (k, n) = (b.layout.shape[nd - 2], b.layout.shape[nd - 1]);
        let (sk, sn) = (b.layout.strides[nd - 2], b.layout.strides[nd - 1]);
        let rows = a.layout.size().checked_div(k).unwrap_or(0);
        let broadcast = b.layout.shape[..nd - 2]
            .iter()
            .zip(&b.layout.strides[..nd - 2])
            .all(|(&d, &s)| d == 1 || s == 0);
        let fits = rows <= MAX_ROWS
            && k > 0
            && n > 0
            && broadcast
            && (sk == 1 || k == 1)
            && sn > 0
            && (sn as usize) >= k
            && (sn as usize * esize).is_multiple_of(16)
            && (k * esize).is_multiple_of(16)
            && ptr(a).is_multiple_of(16)
            && ptr(b).is_multiple_of(16);
        let shared = (rows, k, sn as usize * esize / 4);
        if !fits || common.is_some_and(|c| c != shared) {
            return Ok(None);
        }
        common = Some(shared);
        sets.push(Weights { n, w: ptr(b), scales: 0, biases: 0 });
    }
    let Some((rows, k, ldw)) = common else { return Ok(None) };
    let p = Product { dtype: a.dtype, quant: None, rows, k, ldw, x: ptr(a), sets };
    let shapes: Vec<&[usize]> = products.iter().map(|&(_, s)| s).collect();
    run(&p, &shapes).map(Some)
}

/// Every variant's source (the offline NVRTC check).
#[cfg(test)]
pub(crate) fn all_sources() -> Vec<(String, String)> {
    let mut out = Vec::new();
    for dtype in [DType::F32, DType::F16, DType::BF16] {
        for rows in [1, 2, 4, 8] {
            let mut quants = vec![None];
            for bits in [1, 2, 3, 4, 5, 6, 8] {
                quants.extend([32, 64, 128].map(|g| Some((g, bits))));
            }
            for quant in quants {
                for sets in [1, MAX_SETS] {
                    let key = Key { dtype, quant, rows, tiling: tiling(), sets };
                    out.push((format!("gemv_{key:?}"), source(&key)));
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn sources_define_the_variant() {
        let srcs = super::all_sources();
        assert_eq!(srcs.len(), 3 * 4 * 22 * 2);
        let (_, s) = &srcs[0];
        assert!(s.contains("#define QUANT 0\n") && s.contains("#define ROWS 1\n#define U 2\n"));
        assert!(s.contains("#define WARPS 4\n#define FPB 4\n"));
        let q8 = srcs.iter().find(|(n, _)| n.contains("Some((64, 8))")).unwrap();
        assert!(q8.1.contains("#define BITS 8\n") && q8.1.contains("#define U 1\n"));
    }
}
