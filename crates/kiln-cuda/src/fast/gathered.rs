//! Products with few rows per weight matrix, reading the weights in place: `quantized_matmul`
//! (a decode step of a quantized model), `gather_qmm` and `gather_mm` (a mixture of
//! experts). Output row `r` is row `r % m` of pick `p = r / m`: x's row `lhs[p] * m + r % m`
//! times expert `rhs[p]`'s matrix (no indices: x's row `r`, the one matrix).
//!
//! A block owns 8 consecutive rows and 32 output features; its rows are taken in runs that
//! share an expert (one run for sorted indices), so a run reads its expert's weights once
//! for all its rows. Each warp computes 4 features; its lanes split the inner axis in units
//! of 32 values (for `bits`-bit weights, `bits` whole words), dequantize a unit in registers
//! (`scale * q + bias`: the weights themselves, as the CPU kernel) and dot it with the run's
//! rows; a warp sum finishes each feature. Accumulation is float32.

use super::{dense, header, ptr};
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

#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub(crate) struct Key {
    pub dtype: DType,
    /// `Some((group_size, bits))`: MLX's affine layout; `None`: dense weights of x's dtype.
    pub quant: Option<(usize, u32)>,
    /// Whether rows are picked through `lhs`/`rhs`.
    pub indexed: bool,
}

const BODY: &str = r#"
#define ROWS 8
#define FEATS_PER_WARP 4
#define FEATS 32
#define FULL 0xffffffffu

/* Bits [v * BITS, (v + 1) * BITS) of a unit's BITS words, for the unit's 32 values. */
K_INLINE void k_unpack(const uint32_t *__restrict__ words, float *q) {
    uint32_t wv[BITS];
    #pragma unroll
    for (int i = 0; i < BITS; ++i) wv[i] = words[i];
    #pragma unroll
    for (int v = 0; v < 32; ++v) {
        const int bit = v * BITS, word = bit / 32, shift = bit % 32;
        uint32_t bits = wv[word] >> shift;
        if (shift + BITS > 32) bits |= wv[word + 1] << (32 - shift);
        q[v] = (float)(bits & ((1u << BITS) - 1u));
    }
}

/* w: QUANT: (experts, n, k * BITS / 32) words, scales and biases (experts, n, k / GROUP);
   dense: element (e, j, f) of the (k, n) matrix of expert e at e * es + j * ks + f * ns. */
extern "C" __global__ void kiln_gathered(
    const int64_t rows, const int64_t m, const int64_t n, const int64_t k,
    const int64_t x_batch, const int64_t experts, const int64_t es, const int64_t ks,
    const int64_t ns, const S *__restrict__ x, const void *__restrict__ wv,
    const S *__restrict__ scales, const S *__restrict__ biases,
    const uint32_t *__restrict__ lhs, const uint32_t *__restrict__ rhs, S *__restrict__ out) {
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int64_t feat_tiles = (n + FEATS - 1) / FEATS, row_tiles = (rows + ROWS - 1) / ROWS;
    const int64_t units = k / 32;
    for (int64_t tile = blockIdx.x; tile < feat_tiles * row_tiles; tile += gridDim.x) {
        const int64_t f0 = (tile % feat_tiles) * FEATS, r0 = (tile / feat_tiles) * ROWS;
        const int64_t r_end = r0 + ROWS < rows ? r0 + ROWS : rows;
        int64_t run = r0;
        while (run < r_end) {
#if INDEXED
            const int64_t e = rhs[run / m] < experts ? rhs[run / m] : experts - 1;
#else
            const int64_t e = 0;
#endif
            int64_t run_end = run + 1;
#if INDEXED
            while (run_end < r_end &&
                   (rhs[run_end / m] < experts ? rhs[run_end / m] : experts - 1) == e)
                ++run_end;
#else
            run_end = r_end;
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
            for (int j = 0; j < FEATS_PER_WARP; ++j) {
                const int64_t f = f0 + warp * FEATS_PER_WARP + j;
                if (f >= n) break; /* the same for the whole warp */
                float acc[ROWS];
                #pragma unroll
                for (int i = 0; i < ROWS; ++i) acc[i] = 0.0f;
#if QUANT
                const int64_t groups = k / GROUP, words = k * BITS / 32;
                const uint32_t *wf = (const uint32_t *)wv + (e * n + f) * words;
                const S *sf = scales + (e * n + f) * groups, *bf = biases + (e * n + f) * groups;
#else
                const S *wf = (const S *)wv + e * es + f * ns;
#endif
                for (int64_t u = lane; u < units; u += 32) {
                    float q[32];
#if QUANT
                    k_unpack(wf + u * BITS, q);
                    const int64_t g = u * 32 / GROUP;
                    const float sc = k_load(sf[g]), bi = k_load(bf[g]);
                    #pragma unroll
                    for (int v = 0; v < 32; ++v) q[v] = sc * q[v] + bi;
#else
                    #pragma unroll
                    for (int v = 0; v < 32; ++v) q[v] = k_load(wf[(u * 32 + v) * ks]);
#endif
                    #pragma unroll
                    for (int i = 0; i < ROWS; ++i) {
                        if (i < nr) {
                            const S *xp = xr[i] + u * 32;
                            float s = 0.0f;
                            #pragma unroll
                            for (int v = 0; v < 32; ++v) s += k_load(xp[v]) * q[v];
                            acc[i] += s;
                        }
                    }
                }
#if !QUANT
                /* The inner axis past the last whole unit (dense weights only: affine
                   layouts have k a multiple of 32). */
                for (int64_t t = units * 32 + lane; t < k; t += 32) {
                    const float wt = k_load(wf[t * ks]);
                    #pragma unroll
                    for (int i = 0; i < ROWS; ++i)
                        if (i < nr) acc[i] += k_load(xr[i][t]) * wt;
                }
#endif
                #pragma unroll
                for (int i = 0; i < ROWS; ++i) {
                    if (i < nr) {
                        float a = acc[i];
                        for (int o = 16; o > 0; o >>= 1) a += __shfl_xor_sync(FULL, a, o);
                        if (lane == 0) out[(run + i) * n + f] = k_store(a);
                    }
                }
            }
            run = run_end;
        }
    }
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
        "#define QUANT {quant}\n#define GROUP {group}\n#define BITS {bits}\n#define INDEXED {}",
        key.indexed as u8
    );
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
        unsafe { result::memset_d8_async(out.buffer.as_ptr() as u64, 0, bytes, gpu()?.stream) }
            .map_err(|e| driver_error(SYMBOL, e))?;
        return Ok(out);
    }
    let mut args = Args::new();
    args.i64(l.rows as i64).i64(l.m as i64).i64(l.n as i64).i64(l.k as i64);
    args.i64(l.x_batch as i64).i64(l.experts as i64);
    args.i64(l.strides[0]).i64(l.strides[1]).i64(l.strides[2]);
    args.ptr(ptr(l.x)).ptr(ptr(l.w));
    let (s, b) = l.params.map_or((0, 0), |(s, b)| (ptr(s), ptr(b)));
    args.ptr(s).ptr(b);
    let (li, ri) = l.indices.map_or((0, 0), |(li, ri)| (ptr(li), ptr(ri)));
    args.ptr(li).ptr(ri).ptr(out.buffer.as_ptr() as u64);
    let tiles = (l.n.div_ceil(FEATS) * l.rows.div_ceil(ROWS)) as u64;
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
    let [x, w, s, b] = [0, 1, 2, 3].map(|i| dense(&inputs[i]));
    let (x, w, s, b) = (x?, w?, s?, b?);
    let k = *x.layout.shape.last().unwrap_or(&0);
    let n = w.layout.shape[0];
    let rows = x.layout.size().checked_div(k).unwrap_or(0);
    let key = Key { dtype: x.dtype, quant: Some((group_size, bits)), indexed: false };
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
    let [x, w, s, b] = [0, 1, 2, 3].map(|i| dense(&inputs[i]));
    let (x, w, s, b) = (x?, w?, s?, b?);
    let (li, ri) = index_inputs(&inputs[4..6])?;
    let nd = shape.len();
    let (m, n) = (shape[nd - 2], shape[nd - 1]);
    let k = *x.layout.shape.last().unwrap_or(&0);
    let words = n * k * bits as usize / 32;
    let key = Key { dtype: x.dtype, quant: Some((group_size, bits)), indexed: true };
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
    let x = dense(&inputs[0])?;
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
    let key = Key { dtype: x.dtype, quant: None, indexed: true };
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
        let mut keys = vec![Key { dtype, quant: None, indexed: true }];
        for bits in [1, 2, 3, 4, 5, 6, 8] {
            for group in [32, 64, 128] {
                for indexed in [false, true] {
                    keys.push(Key { dtype, quant: Some((group, bits)), indexed });
                }
            }
        }
        out.extend(keys.iter().map(|k| (format!("gathered_{k:?}"), source(k))));
    }
    out
}
