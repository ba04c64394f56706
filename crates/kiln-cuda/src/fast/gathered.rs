//! Products with few rows per weight matrix, reading the weights in place: `quantized_matmul`
//! (a decode step of a quantized model), `gather_qmm` and `gather_mm` (a mixture of
//! experts). Output row `r` is row `r % m` of pick `p = r / m`: x's row `lhs[p] * m + r % m`
//! times expert `rhs[p]`'s matrix (no indices: x's row `r`, the one matrix).
//!
//! A block owns up to 8 consecutive rows (one pick's rows for a few picks, which likely use
//! different experts) and 32 output features; its rows are taken in runs that share an
//! expert (one run for sorted indices), so a run reads its expert's weights once for all its
//! rows. Each warp computes 4 features together (each load of x serves all four); its lanes
//! split the inner axis in units of 32 values (for `bits`-bit weights, `bits` whole words,
//! loaded 16 bytes at a time), dequantize a unit in registers (`scale * q + bias`: the
//! weights themselves, as the CPU kernel) and dot it with the run's rows; a warp sum
//! finishes each feature. Accumulation is float32.

use super::{dense, dense_aligned, header, ptr};
use crate::copy::empty;
use crate::launch::{blocks_for, launch, Args};
use crate::nvrtc::{Function, KernelCache};
use crate::runtime::{driver_error, gpu};
use cudarc::driver::result;
use kiln_base::{bail, ArrayData, DType, Result};
use std::fmt::Write;

const SYMBOL: &str = "kiln_gathered";
/// Rows per block (the accumulators each lane holds).
const ROWS: usize = 8;
/// Output features per block: 8 warps of 4.
const FEATS: usize = 32;
const THREADS: u32 = 256;
/// Indexed rows up to which each block takes one pick's rows.
const FEW_PICKS: usize = 64;

#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub(crate) struct Key {
    pub dtype: DType,
    /// `Some((group_size, bits))`: MLX's affine layout; `None`: dense weights of x's dtype.
    pub quant: Option<(usize, u32)>,
    /// Whether rows are picked through `lhs`/`rhs`.
    pub indexed: bool,
    /// x's rows (and dense weights' rows, with `wunit`) are 16-byte aligned with the inner
    /// axis a multiple of 8: 8 values per vector load.
    pub vec: bool,
    /// Dense weights with a unit inner stride (each feature's weights contiguous).
    pub wunit: bool,
}

const BODY: &str = r#"
#define ROWS 8
#define FPW 4 /* features per warp, computed together: each load of x serves all four */
#define FEATS 32
#define FULL 0xffffffffu

/* 8 consecutive elements of x as floats (VEC: one 16-byte load for half floats, two for
   float32; the host checks the alignment). */
K_INLINE void k_load8(const S *__restrict__ p, float *out) {
#if VEC
#if S_IS_FLOAT
    const float4 a = *(const float4 *)p, b = *(const float4 *)(p + 4);
    out[0] = a.x; out[1] = a.y; out[2] = a.z; out[3] = a.w;
    out[4] = b.x; out[5] = b.y; out[6] = b.z; out[7] = b.w;
#else
    const uint4 a = *(const uint4 *)p;
    const uint32_t w[4] = {a.x, a.y, a.z, a.w};
    #pragma unroll
    for (int i = 0; i < 4; ++i) {
        out[2 * i] = k_load((S)(w[i] & 0xffffu));
        out[2 * i + 1] = k_load((S)(w[i] >> 16));
    }
#endif
#else
    #pragma unroll
    for (int i = 0; i < 8; ++i) out[i] = k_load(p[i]);
#endif
}


/* w: QUANT: (experts, n, k * BITS / 32) words, scales and biases (experts, n, k / GROUP);
   dense: element (e, j, f) of the (k, n) matrix of expert e at e * es + j * ks + f * ns. */
extern "C" __global__ void kiln_gathered(
    const int64_t rows, const int64_t tile_rows, const int64_t m, const int64_t n,
    const int64_t k, const int64_t x_batch, const int64_t experts, const int64_t es, const int64_t ks,
    const int64_t ns, const S *__restrict__ x, const void *__restrict__ wv,
    const S *__restrict__ scales, const S *__restrict__ biases,
    const uint32_t *__restrict__ lhs, const uint32_t *__restrict__ rhs, S *__restrict__ out) {
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int64_t feat_tiles = (n + FEATS - 1) / FEATS;
    const int64_t row_tiles = (rows + tile_rows - 1) / tile_rows;
    const int64_t units = k / 32;
    for (int64_t tile = blockIdx.x; tile < feat_tiles * row_tiles; tile += gridDim.x) {
        const int64_t f0 = (tile % feat_tiles) * FEATS + warp * FPW;
        const int64_t r0 = (tile / feat_tiles) * tile_rows;
        const int64_t r_end = r0 + tile_rows < rows ? r0 + tile_rows : rows;
        int64_t run = r0;
        while (run < r_end) {
#if INDEXED
            const int64_t e = rhs[run / m] < experts ? rhs[run / m] : experts - 1;
            int64_t run_end = run + 1;
            while (run_end < r_end &&
                   (rhs[run_end / m] < experts ? rhs[run_end / m] : experts - 1) == e)
                ++run_end;
#else
            const int64_t e = 0, run_end = r_end;
#endif
            const int nr = (int)(run_end - run);
            const S *xr[ROWS];
            #pragma unroll
            for (int i = 0; i < ROWS; ++i) {
                const int64_t r = run + (i < nr ? i : 0);
#if INDEXED
                const int64_t p = r / m, b = lhs[p] < x_batch ? lhs[p] : x_batch - 1;
                xr[i] = x + (b * m + r % m) * k;
#else
                xr[i] = x + r * k;
#endif
            }
            /* This warp's features (the last ones of a tile may lie past n: computed on a
               clamped row, never stored). */
            int64_t fj[FPW];
            #pragma unroll
            for (int j = 0; j < FPW; ++j) fj[j] = f0 + j < n ? f0 + j : n - 1;
            float acc[FPW][ROWS];
            #pragma unroll
            for (int j = 0; j < FPW; ++j)
                #pragma unroll
                for (int i = 0; i < ROWS; ++i) acc[j][i] = 0.0f;
            if (f0 < n) {
#if QUANT
                const int64_t groups = k / GROUP, words = k * BITS / 32;
#endif
                for (int64_t u = lane; u < units; u += 32) {
#if QUANT
                    uint32_t wq[FPW][BITS];
                    float sc[FPW], bi[FPW];
                    const int64_t g = u * 32 / GROUP;
                    #pragma unroll
                    for (int j = 0; j < FPW; ++j) {
                        const int64_t row = e * n + fj[j];
                        k_words((const uint32_t *)wv + row * words + u * BITS, wq[j]);
                        sc[j] = k_load(scales[row * groups + g]);
                        bi[j] = k_load(biases[row * groups + g]);
                    }
#endif
                    #pragma unroll
                    for (int c = 0; c < 4; ++c) {
                        float q[FPW][8];
                        #pragma unroll
                        for (int j = 0; j < FPW; ++j) {
#if QUANT
                            #pragma unroll
                            for (int v = 0; v < 8; ++v)
                                q[j][v] = sc[j] * k_value(wq[j], c * 8 + v) + bi[j];
#else
                            const S *wf = (const S *)wv + e * es + fj[j] * ns;
#if WUNIT
                            k_load8(wf + u * 32 + c * 8, q[j]);
#else
                            #pragma unroll
                            for (int v = 0; v < 8; ++v) q[j][v] = k_load(wf[(u * 32 + c * 8 + v) * ks]);
#endif
#endif
                        }
                        #pragma unroll
                        for (int i = 0; i < ROWS; ++i) {
                            if (i < nr) {
                                float xv[8];
                                k_load8(xr[i] + u * 32 + c * 8, xv);
                                #pragma unroll
                                for (int j = 0; j < FPW; ++j)
                                    #pragma unroll
                                    for (int v = 0; v < 8; ++v) acc[j][i] += xv[v] * q[j][v];
                            }
                        }
                    }
                }
#if !QUANT
                /* The inner axis past the last whole unit (dense weights only: affine
                   layouts have k a multiple of 32). */
                for (int64_t t = units * 32 + lane; t < k; t += 32) {
                    #pragma unroll
                    for (int j = 0; j < FPW; ++j) {
                        const float wt = k_load(((const S *)wv)[e * es + t * ks + fj[j] * ns]);
                        #pragma unroll
                        for (int i = 0; i < ROWS; ++i)
                            if (i < nr) acc[j][i] += k_load(xr[i][t]) * wt;
                    }
                }
#endif
            }
            #pragma unroll
            for (int j = 0; j < FPW; ++j) {
                #pragma unroll
                for (int i = 0; i < ROWS; ++i) {
                    if (i < nr) {
                        float a = acc[j][i];
                        for (int o = 16; o > 0; o >>= 1) a += __shfl_xor_sync(FULL, a, o);
                        if (lane == 0 && f0 + j < n) out[(run + i) * n + f0 + j] = k_store(a);
                    }
                }
            }
            run = run_end;
        }
    }
}
"#;

/// MLX's affine packing read back: a unit of 32 `BITS`-bit values is `BITS` consecutive
/// words, value t at bits `t * BITS ..` of their little-endian stream (`quantized_prefill.rs`
/// dequantizes with the same helpers).
pub(super) const UNPACK: &str = r#"
/* A unit's BITS words (its 32 values), 16 bytes at a time where BITS allows. */
K_INLINE void k_words(const uint32_t *__restrict__ p, uint32_t *wv) {
#if BITS % 4 == 0
    #pragma unroll
    for (int i = 0; i < BITS; i += 4) {
        const uint4 a = *(const uint4 *)(p + i);
        wv[i] = a.x; wv[i + 1] = a.y; wv[i + 2] = a.z; wv[i + 3] = a.w;
    }
#elif BITS % 2 == 0
    #pragma unroll
    for (int i = 0; i < BITS; i += 2) {
        const uint2 a = *(const uint2 *)(p + i);
        wv[i] = a.x; wv[i + 1] = a.y;
    }
#else
    #pragma unroll
    for (int i = 0; i < BITS; ++i) wv[i] = p[i];
#endif
}

/* Value t (< 32, known at compile time after unrolling) of a unit's words, as an exact float
   by the bits of 2^23 + q (integer conversions run at a quarter of the float rate). */
K_INLINE float k_value(const uint32_t *wv, const int t) {
    const int bit = t * BITS, word = bit / 32, shift = bit % 32;
    uint32_t v = wv[word] >> shift;
    if (shift + BITS > 32) v |= wv[word + 1] << (32 - shift);
    return __uint_as_float((v & ((1u << BITS) - 1u)) | 0x4B000000u) - 8388608.0f;
}
"#;

pub(crate) fn source(key: &Key) -> String {
    let mut s = header(key.dtype);
    let (quant, group, bits) = match key.quant {
        Some((g, b)) => (1, g, b),
        None => (0, 32, 1),
    };
    let _ = writeln!(
        s,
        "#define QUANT {quant}\n#define GROUP {group}\n#define BITS {bits}\n#define INDEXED {}\n\
         #define VEC {}\n#define WUNIT {}\n#define S_IS_FLOAT {}",
        key.indexed as u8,
        key.vec as u8,
        key.wunit as u8,
        (key.dtype == DType::F32) as u8
    );
    if quant == 1 {
        s.push_str(UNPACK);
    }
    s.push_str(BODY);
    s
}

static KERNELS: KernelCache<Key> = KernelCache::new();

fn kernel(key: &Key) -> Result<Function> {
    KERNELS.get(key, SYMBOL, || source(key))
}

/// What one launch needs besides the key.
struct Launch<'a> {
    rows: usize,
    m: usize,
    n: usize,
    k: usize,
    x_batch: usize,
    experts: usize,
    /// Dense weights: the strides of expert, inner and feature axes (elements).
    strides: [i64; 3],
    x: &'a ArrayData,
    w: &'a ArrayData,
    params: Option<(&'a ArrayData, &'a ArrayData)>,
    indices: Option<(&'a ArrayData, &'a ArrayData)>,
}

fn run(key: &Key, l: &Launch, shape: &[usize]) -> Result<ArrayData> {
    let out = empty(shape, key.dtype)?;
    if l.rows == 0 || l.n == 0 {
        return Ok(out);
    }
    if l.k == 0 || l.experts == 0 || l.x_batch == 0 {
        // Empty sums (or nothing to pick from): zeros.
        let bytes = out.layout.size() * key.dtype.size();
        // SAFETY: the output block holds `bytes` bytes and is only reused by later work.
        unsafe { result::memset_d8_async(out.buffer.as_ptr() as u64, 0, bytes, gpu()?.stream()?) }
            .map_err(|e| driver_error(SYMBOL, e))?;
        return Ok(out);
    }
    // A few picks (a decode step) are likely of different experts: a block each, so that the
    // experts are read in parallel. More rows come sorted (mlx_lm sorts from 64 picks):
    // blocks of 8 rows share their expert's weights.
    let tile_rows = if key.indexed && l.rows <= FEW_PICKS { l.m.min(ROWS) } else { ROWS };
    let mut args = Args::new();
    args.i64(l.rows as i64).i64(tile_rows as i64).i64(l.m as i64).i64(l.n as i64).i64(l.k as i64);
    args.i64(l.x_batch as i64).i64(l.experts as i64);
    args.i64(l.strides[0]).i64(l.strides[1]).i64(l.strides[2]);
    args.ptr(ptr(l.x)).ptr(ptr(l.w));
    let (s, b) = l.params.map_or((0, 0), |(s, b)| (ptr(s), ptr(b)));
    args.ptr(s).ptr(b);
    let (li, ri) = l.indices.map_or((0, 0), |(li, ri)| (ptr(li), ptr(ri)));
    args.ptr(li).ptr(ri).ptr(out.buffer.as_ptr() as u64);
    let tiles = (l.n.div_ceil(FEATS) * l.rows.div_ceil(tile_rows)) as u64;
    launch(SYMBOL, kernel(key)?, blocks_for(tiles, 1), THREADS, 0, &mut args)?;
    Ok(out)
}

/// `x @ dequantize(w).T` over `[x, w, scales, biases]` (x (..., K), w 2-d).
pub(crate) fn quantized_matmul(
    inputs: &[ArrayData],
    group_size: usize,
    bits: u32,
    shape: &[usize],
) -> Result<ArrayData> {
    let (x, w, s, b) = packed_inputs(inputs)?;
    if let Some(out) = crate::gemv::quantized(&x, &w, &s, &b, group_size, bits, shape)? {
        return Ok(out);
    }
    if let Some(out) = super::quantized_prefill::product(&x, &w, &s, &b, group_size, bits, shape)? {
        return Ok(out);
    }
    let k = *x.layout.shape.last().unwrap_or(&0);
    let n = w.layout.shape[0];
    let rows = x.layout.size().checked_div(k).unwrap_or(0);
    let vec = vectorised(&x, k);
    let key =
        Key { dtype: x.dtype, quant: Some((group_size, bits)), indexed: false, vec, wunit: false };
    let l = Launch {
        rows,
        m: 1,
        n,
        k,
        x_batch: rows,
        experts: 1,
        strides: [0; 3],
        x: &x,
        w: &w,
        params: Some((&s, &b)),
        indices: None,
    };
    run(&key, &l, shape)
}

/// `[x, w, scales, biases]` row-major, x and w 16-byte aligned (vector loads).
fn packed_inputs(inputs: &[ArrayData]) -> Result<(ArrayData, ArrayData, ArrayData, ArrayData)> {
    Ok((
        dense_aligned(&inputs[0])?,
        dense_aligned(&inputs[1])?,
        dense(&inputs[2])?,
        dense(&inputs[3])?,
    ))
}

/// Whether x's rows of `k` elements (x row-major) take 8-value vector loads.
fn vectorised(x: &ArrayData, k: usize) -> bool {
    k.is_multiple_of(8) && ptr(x).is_multiple_of(16)
}

/// The flat indices of a gathered product as row-major uint32.
fn index_inputs(inputs: &[ArrayData]) -> Result<(ArrayData, ArrayData)> {
    for i in inputs {
        if i.dtype != DType::U32 {
            bail!(Type, "gather_mm", "Indices must be uint32, got {}.", i.dtype);
        }
    }
    Ok((dense(&inputs[0])?, dense(&inputs[1])?))
}

/// `x[lhs] @ dequantize(w[rhs]).T` over `[x, w, scales, biases, lhs, rhs]`.
pub(crate) fn gather_qmm(
    inputs: &[ArrayData],
    group_size: usize,
    bits: u32,
    shape: &[usize],
) -> Result<ArrayData> {
    let (x, w, s, b) = packed_inputs(inputs)?;
    let (li, ri) = index_inputs(&inputs[4..6])?;
    let nd = shape.len();
    let (m, n) = (shape[nd - 2], shape[nd - 1]);
    let k = *x.layout.shape.last().unwrap_or(&0);
    let words = n * k * bits as usize / 32;
    let vec = vectorised(&x, k);
    let key =
        Key { dtype: x.dtype, quant: Some((group_size, bits)), indexed: true, vec, wunit: false };
    let l = Launch {
        rows: li.layout.size() * m,
        m,
        n,
        k,
        x_batch: x.layout.size().checked_div(m * k).unwrap_or(0),
        experts: w.layout.size().checked_div(words).unwrap_or(0),
        strides: [0; 3],
        x: &x,
        w: &w,
        params: Some((&s, &b)),
        indices: Some((&li, &ri)),
    };
    run(&key, &l, shape)
}

/// `a[lhs] @ b[rhs]` over `[a, b, lhs, rhs]`, `b`'s matrices read through their strides (a
/// copy first only when its batch axes do not fold into one stride).
pub(crate) fn gather_mm(inputs: &[ArrayData], shape: &[usize]) -> Result<ArrayData> {
    let x = dense_aligned(&inputs[0])?;
    let (li, ri) = index_inputs(&inputs[2..4])?;
    let folded = |b: &ArrayData| -> Option<[i64; 3]> {
        let l = &b.layout;
        let nd = l.ndim();
        let (shape, strides) = (&l.shape[..nd - 2], &l.strides[..nd - 2]);
        // The batch axes as one: each stride the next one's times its size.
        let mut stride = None;
        for i in (0..shape.len()).rev() {
            if shape[i] == 1 {
                continue;
            }
            match stride {
                None => stride = Some((strides[i], shape[i] as isize)),
                Some((s, count)) if strides[i] == s * count => {
                    stride = Some((s, count * shape[i] as isize))
                }
                Some(_) => return None,
            }
        }
        let es = stride.map_or(0, |(s, _)| s);
        let (ks, ns) = (l.strides[nd - 2], l.strides[nd - 1]);
        (es >= 0 && ks >= 0 && ns >= 0).then_some([es as i64, ks as i64, ns as i64])
    };
    let b = &inputs[1];
    let (b, strides) = match folded(b) {
        Some(s) => (b.clone(), s),
        None => {
            let d = dense(b)?;
            let s = folded(&d).expect("a row-major layout folds");
            (d, s)
        }
    };
    let nd = shape.len();
    let (m, n) = (shape[nd - 2], shape[nd - 1]);
    let k = *x.layout.shape.last().unwrap_or(&0);
    let experts = b.layout.size().checked_div(k * n).unwrap_or(0);
    let wunit = strides[1] == 1;
    let aligned = |v: i64| v % 8 == 0;
    let vec = vectorised(&x, k)
        && (!wunit || (aligned(strides[0]) && aligned(strides[2]) && ptr(&b).is_multiple_of(16)));
    let key = Key { dtype: x.dtype, quant: None, indexed: true, vec, wunit };
    let l = Launch {
        rows: li.layout.size() * m,
        m,
        n,
        k,
        x_batch: x.layout.size().checked_div(m * k).unwrap_or(0),
        experts,
        strides,
        x: &x,
        w: &b,
        params: None,
        indices: Some((&li, &ri)),
    };
    run(&key, &l, shape)
}

/// Every variant's source (the offline NVRTC check).
#[cfg(test)]
pub(crate) fn all_sources() -> Vec<(String, String)> {
    let mut out = Vec::new();
    for dtype in [DType::F32, DType::F16, DType::BF16] {
        let mut keys = Vec::new();
        for (vec, wunit) in [(false, false), (false, true), (true, false), (true, true)] {
            keys.push(Key { dtype, quant: None, indexed: true, vec, wunit });
        }
        for bits in [1, 2, 3, 4, 5, 6, 8] {
            for group in [32, 64, 128] {
                for (indexed, vec) in [(false, false), (true, true)] {
                    let quant = Some((group, bits));
                    keys.push(Key { dtype, quant, indexed, vec, wunit: false });
                }
            }
        }
        out.extend(keys.iter().map(|k| (format!("gathered_{k:?}"), source(k))));
    }
    out
}
