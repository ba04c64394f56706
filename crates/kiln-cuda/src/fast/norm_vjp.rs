//! The fused backward of layer_norm and rms_norm (`LayerNormVjp`, `RmsNormVjp`): per row,
//! the statistics of x again (no saved state), then
//! `dx = r (gw - xhat mean(gw xhat) - mean(gw))` (rms_norm: no `mean(gw)`), `gw = g weight`,
//! with x and g read once into registers (a warp per short row, a block per long one, as the
//! forward in `norm.rs`; rows too long for registers are streamed). `dweight = sum(g xhat)`
//! and `dbias = sum(g)` over rows are deterministic: each block sums its rows' terms in
//! registers (a warp-per-row block then adds its warps in shared memory, in warp order) and
//! writes one float32 partial row per output into a (blocks, outputs, D) scratch, which a
//! second kernel sums over blocks in a fixed order. No atomics.
//!
//! `KILN_CUDA_NORM_VJP=simple` forces the streamed kernel with scalar loads: slow but
//! obviously correct, to tell a fast-path bug apart on a device.

// The forward's row modes and block sizes serve the backward too.
pub(crate) use super::norm::Kind;
use super::norm::{MAX_REG_BLOCK, STREAM_BLOCK, WARP_BLOCK};
use super::{dense, header, ptr};
use crate::copy::empty;
use crate::launch::{launch, Args};
use crate::nvrtc::KernelCache;
use crate::runtime::gpu;
use kiln_base::{ArrayData, DType, Result};
use std::fmt::Write;

const SYMBOL: &str = "kiln_norm_vjp";
const SUM_SYMBOL: &str = "kiln_norm_vjp_sum";

/// A compiled variant of the row kernel.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub(crate) struct Key {
    pub dtype: DType,
    pub kind: Kind,
    /// A weight input (and a dweight output).
    pub weight: bool,
    /// A dbias output.
    pub bias: bool,
    /// Elements per load: 16 bytes' worth, or 1.
    pub vec: usize,
    /// Vectors per thread kept in registers; 0 streams the row.
    pub items: usize,
    /// A warp per row (else a block per row).
    pub warp: bool,
}

/// Most values of x (and as many of g) a thread keeps in registers: half the forward's,
/// since g and the dweight/dbias sums live there too.
const MAX_FLOATS: usize = 16;
/// Registers of a multiprocessor (sm_80 and later). The register-resident variants take
/// about 100 per thread (ptxas for sm_90: 96 to 109, no spills; forcing fewer spills), so
/// the grid is capped at one wave of blocks of 128-register threads and few partial rows
/// need summing.
const REGISTERS_PER_SM: u32 = 65536;

const BODY: &str = r#"
typedef KVec<S, VEC> V;
#define NP (HAS_W + HAS_DB)

/* Sums of N values over the threads sharing a row (a warp, or the whole block); every
   thread gets the same bits (a butterfly: each step adds equal pairs). */
template <int N> K_INLINE void k_sums(float (&a)[N], float *scratch) {
    #pragma unroll
    for (int k = 0; k < N; ++k) {
        #pragma unroll
        for (int o = 16; o > 0; o >>= 1) a[k] += __shfl_xor_sync(0xffffffffu, a[k], o);
    }
#if !WARP_ROWS
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
    if (lane == 0) {
        #pragma unroll
        for (int k = 0; k < N; ++k) scratch[k * 32 + warp] = a[k];
    }
    __syncthreads();
    #pragma unroll
    for (int k = 0; k < N; ++k) {
        a[k] = lane < warps ? scratch[k * 32 + lane] : 0.0f;
        #pragma unroll
        for (int o = 16; o > 0; o >>= 1) a[k] += __shfl_xor_sync(0xffffffffu, a[k], o);
    }
    __syncthreads(); /* scratch is reused by the next sum */
#endif
}

K_INLINE void k_read(const S *p, float *v, int64_t j) {
    const V u = *(const V *)(p + j);
    #pragma unroll
    for (int e = 0; e < VEC; ++e) v[e] = k_load(u.v[e]);
}

/* The weight at j..j+VEC (ones without one). */
K_INLINE void k_weight(const S *w, float *v, int64_t j) {
#if HAS_W
    k_read(w, v, j);
#else
    #pragma unroll
    for (int e = 0; e < VEC; ++e) v[e] = 1.0f;
#endif
}

#if ITEMS > 0
/* Writes this block's partial row of one output (a[it][e] holds column (it*threads+t)*VEC+e).
   A warp-per-row block first adds its warps' sums in shared memory, in warp order. */
K_INLINE void k_partial(const float (&a)[ITEMS][VEC], float *__restrict__ dst, int64_t d,
                        int t, int threads, float *red) {
#if WARP_ROWS
    const int width = 32 * ITEMS * VEC, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
    #pragma unroll
    for (int it = 0; it < ITEMS; ++it) {
        #pragma unroll
        for (int e = 0; e < VEC; ++e) red[warp * width + (it * 32 + t) * VEC + e] = a[it][e];
    }
    __syncthreads();
    for (int64_t j = threadIdx.x; j < d; j += blockDim.x) {
        float s = 0.0f;
        for (int v = 0; v < warps; ++v) s += red[v * width + j];
        dst[j] = s;
    }
    __syncthreads(); /* red is reused by the next output */
#else
    #pragma unroll
    for (int it = 0; it < ITEMS; ++it) {
        const int64_t j = ((int64_t)it * threads + t) * VEC;
        if (j < d) {
            #pragma unroll
            for (int e = 0; e < VEC; ++e) dst[j + e] = a[it][e];
        }
    }
#endif
}
#endif

extern "C" __global__ void __launch_bounds__(MAX_THREADS, 1) kiln_norm_vjp(
        const int64_t rows, const int64_t d, const S *__restrict__ x, const S *__restrict__ w,
        const S *__restrict__ g, S *__restrict__ dx, float *__restrict__ part,
        const double eps_d) {
    __shared__ float scratch[96];
    const float eps = (float)eps_d, n = (float)d;
#if WARP_ROWS
    const int t = threadIdx.x & 31, threads = 32;
    const int64_t first = (blockIdx.x * (int64_t)blockDim.x + threadIdx.x) >> 5;
    const int64_t stride = ((int64_t)gridDim.x * blockDim.x) >> 5;
#else
    const int t = threadIdx.x, threads = blockDim.x;
    const int64_t first = blockIdx.x, stride = gridDim.x;
#endif
    /* This block's partial rows: dweight, then dbias. */
    float *const pdw = part + (int64_t)blockIdx.x * NP * d;
    float *const pdb = part + ((int64_t)blockIdx.x * NP + HAS_W) * d;
#if ITEMS > 0
    float adw[ITEMS][VEC], adb[ITEMS][VEC];
    #pragma unroll
    for (int it = 0; it < ITEMS; ++it) {
        #pragma unroll
        for (int e = 0; e < VEC; ++e) { adw[it][e] = 0.0f; adb[it][e] = 0.0f; }
    }
    /* The loop bounds are the same for every thread of a row's group, so the group's
       shuffles and barriers are reached by all of it. */
    for (int64_t row = first; row < rows; row += stride) {
        const S *p = x + row * d, *q = g + row * d;
        S *o = dx + row * d;
        float xv[ITEMS][VEC], gv[ITEMS][VEC];
        float s0 = 0.0f;
        #pragma unroll
        for (int it = 0; it < ITEMS; ++it) {
            const int64_t j = ((int64_t)it * threads + t) * VEC;
            if (j < d) {
                k_read(p, xv[it], j);
                k_read(q, gv[it], j);
            } else {
                #pragma unroll
                for (int e = 0; e < VEC; ++e) { xv[it][e] = 0.0f; gv[it][e] = 0.0f; }
            }
            #pragma unroll
            for (int e = 0; e < VEC; ++e) s0 += xv[it][e];
        }
        float mean = 0.0f;
#if !RMS
        { float a[1] = {s0}; k_sums<1>(a, scratch); mean = a[0] / n; }
#endif
        /* Centred squares, sum(gw) and sum(gw (x - mean)) in one round. */
        float a[3] = {0.0f, 0.0f, 0.0f};
        #pragma unroll
        for (int it = 0; it < ITEMS; ++it) {
            const int64_t j = ((int64_t)it * threads + t) * VEC;
            if (j < d) {
                float wv[VEC];
                k_weight(w, wv, j);
                #pragma unroll
                for (int e = 0; e < VEC; ++e) {
                    const float c = xv[it][e] - mean, gw = gv[it][e] * wv[e];
                    a[0] += c * c;
                    a[1] += gw;
                    a[2] += gw * c;
                }
            }
        }
        k_sums<3>(a, scratch);
        const float r = 1.0f / sqrtf(a[0] / n + eps);
        const float proj = r * a[2] / n, shift = RMS ? 0.0f : a[1] / n;
        #pragma unroll
        for (int it = 0; it < ITEMS; ++it) {
            const int64_t j = ((int64_t)it * threads + t) * VEC;
            if (j < d) {
                float wv[VEC];
                k_weight(w, wv, j);
                V out;
                #pragma unroll
                for (int e = 0; e < VEC; ++e) {
                    const float xh = (xv[it][e] - mean) * r, gw = gv[it][e] * wv[e];
                    out.v[e] = k_store(r * (gw - xh * proj - shift));
                    adw[it][e] += gv[it][e] * xh;
                    adb[it][e] += gv[it][e];
                }
                *(V *)(o + j) = out;
            }
        }
    }
#if NP > 0
#if WARP_ROWS
    __shared__ float red[(MAX_THREADS / 32) * 32 * ITEMS * VEC];
#else
    float *red = scratch; /* unused */
#endif
#if HAS_W
    k_partial(adw, pdw, d, t, threads, red);
#endif
#if HAS_DB
    k_partial(adb, pdb, d, t, threads, red);
#endif
#endif
#else
    /* Streamed rows: each thread owns columns t*VEC + k*threads*VEC of the partial rows
       (zeroed here, added to per row by that thread alone). */
#if NP > 0
    for (int64_t j = (int64_t)t * VEC; j < d; j += (int64_t)threads * VEC) {
        #pragma unroll
        for (int e = 0; e < VEC; ++e) {
            if (HAS_W) pdw[j + e] = 0.0f;
            if (HAS_DB) pdb[j + e] = 0.0f;
        }
    }
#endif
    for (int64_t row = first; row < rows; row += stride) {
        const S *p = x + row * d, *q = g + row * d;
        S *o = dx + row * d;
        float xv[VEC], gv[VEC], wv[VEC];
        float mean = 0.0f;
#if !RMS
        float s0[1] = {0.0f};
        for (int64_t j = (int64_t)t * VEC; j < d; j += (int64_t)threads * VEC) {
            k_read(p, xv, j);
            #pragma unroll
            for (int e = 0; e < VEC; ++e) s0[0] += xv[e];
        }
        k_sums<1>(s0, scratch);
        mean = s0[0] / n;
#endif
        float a[3] = {0.0f, 0.0f, 0.0f};
        for (int64_t j = (int64_t)t * VEC; j < d; j += (int64_t)threads * VEC) {
            k_read(p, xv, j);
            k_read(q, gv, j);
            k_weight(w, wv, j);
            #pragma unroll
            for (int e = 0; e < VEC; ++e) {
                const float c = xv[e] - mean, gw = gv[e] * wv[e];
                a[0] += c * c;
                a[1] += gw;
                a[2] += gw * c;
            }
        }
        k_sums<3>(a, scratch);
        const float r = 1.0f / sqrtf(a[0] / n + eps);
        const float proj = r * a[2] / n, shift = RMS ? 0.0f : a[1] / n;
        for (int64_t j = (int64_t)t * VEC; j < d; j += (int64_t)threads * VEC) {
            k_read(p, xv, j);
            k_read(q, gv, j);
            k_weight(w, wv, j);
            V out;
            #pragma unroll
            for (int e = 0; e < VEC; ++e) {
                const float xh = (xv[e] - mean) * r, gw = gv[e] * wv[e];
                out.v[e] = k_store(r * (gw - xh * proj - shift));
                if (HAS_W) pdw[j + e] += gv[e] * xh;
                if (HAS_DB) pdb[j + e] += gv[e];
            }
            *(V *)(o + j) = out;
        }
    }
#endif
}
"#;

/// Sums the (blocks, np, d) partial rows over blocks: a block per 32 columns of one output,
/// 32 slices of blocks per column summed by strides, then the slices in order.
const SUM_BODY: &str = r#"
extern "C" __global__ void __launch_bounds__(1024, 1) kiln_norm_vjp_sum(
        const int64_t blocks, const int64_t d, const int64_t np, const float *__restrict__ part,
        S *__restrict__ out0, S *__restrict__ out1) {
    __shared__ float red[32][33];
    const int64_t cblocks = (d + 31) / 32;
    const int64_t k = (int64_t)blockIdx.x / cblocks;
    const int lane = threadIdx.x & 31, slice = threadIdx.x >> 5;
    const int64_t col = ((int64_t)blockIdx.x % cblocks) * 32 + lane;
    float s = 0.0f;
    if (col < d) {
        for (int64_t b = slice; b < blocks; b += 32) s += part[(b * np + k) * d + col];
    }
    red[slice][lane] = s;
    __syncthreads();
    if (slice == 0 && col < d) {
        float total = 0.0f;
        for (int i = 0; i < 32; ++i) total += red[i][lane];
        (k == 0 ? out0 : out1)[col] = k_store(total);
    }
}
"#;

pub(crate) fn source(key: &Key) -> String {
    let mut s = header(key.dtype);
    let _ = write!(
        s,
        "#define VEC {}\n#define ITEMS {}\n#define RMS {}\n#define HAS_W {}\n#define HAS_DB {}\n\
         #define WARP_ROWS {}\n#define MAX_THREADS {}\n",
        key.vec,
        key.items,
        (key.kind == Kind::Rms) as u8,
        key.weight as u8,
        key.bias as u8,
        key.warp as u8,
        max_threads(key)
    );
    s.push_str(BODY);
    s
}

pub(crate) fn sum_source(dtype: DType) -> String {
    let mut s = header(dtype);
    s.push_str(SUM_BODY);
    s
}

/// The block size a variant is launched with (its `__launch_bounds__`; warp-per-row blocks
/// size their shared reduction buffer by it).
fn max_threads(key: &Key) -> u32 {
    if key.warp {
        WARP_BLOCK
    } else if key.items == 0 {
        STREAM_BLOCK
    } else {
        MAX_REG_BLOCK
    }
}

static KERNELS: KernelCache<Key> = KernelCache::new();
static SUMS: KernelCache<DType> = KernelCache::new();

/// Most vectors per thread for `vec`-element loads.
fn max_items(vec: usize) -> usize {
    (MAX_FLOATS / vec).max(1)
}

/// The variant (warp per row, vectors per thread; 0 streams) and block size for rows of
/// `d` elements (`vec` elements per load).
pub(crate) fn plan(d: usize, vec: usize) -> (bool, usize, u32) {
    let n = d.div_ceil(vec); // vectors per row
    let most = max_items(vec);
    if n <= 32 * most {
        return (true, n.div_ceil(32).max(1), WARP_BLOCK);
    }
    let threads = n.div_ceil(most).next_power_of_two().clamp(64, MAX_REG_BLOCK as usize);
    let items = n.div_ceil(threads);
    if items > most {
        return (false, 0, STREAM_BLOCK);
    }
    (false, items, threads as u32)
}

fn simple_requested() -> bool {
    std::env::var("KILN_CUDA_NORM_VJP").is_ok_and(|v| v == "simple")
}

/// The grid: enough blocks for the rows, at most one full wave of the GPU (each block
/// loops over rows); with weight or bias gradients also few enough that the float32 partial
/// rows (`np` per block) stay under about an eighth of the bytes x, g and dx move.
fn grid(rows: usize, rows_per_block: usize, threads: u32, np: usize, size: usize) -> Result<u32> {
    let sms = gpu()?.multiprocessors.max(1) as usize;
    let per_sm = (REGISTERS_PER_SM / (128 * threads)).max(1) as usize;
    let mut blocks = rows.div_ceil(rows_per_block.max(1)).min(sms * per_sm);
    if np > 0 {
        blocks = blocks.min((rows.saturating_mul(3 * size) / (32 * np)).max(sms));
    }
    Ok(blocks.max(1) as u32)
}

/// The fused backward of either norm over the last axis: `dx`, then `dweight` (when `w`)
/// and `dbias` (when `want_db`), each in x's dtype.
pub(crate) fn norm_vjp(
    kind: Kind,
    x: &ArrayData,
    w: Option<&ArrayData>,
    g: &ArrayData,
    eps: f64,
    shape: &[usize],
    want_db: bool,
) -> Result<Vec<ArrayData>> {
    let dtype = x.dtype;
    let d = shape.last().copied().unwrap_or(1);
    let rows = x.layout.size().checked_div(d).unwrap_or(0);
    let dx = empty(shape, dtype)?;
    let np = w.is_some() as usize + want_db as usize;
    let sums: Vec<ArrayData> = (0..np).map(|_| empty(&[d], dtype)).collect::<Result<_>>()?;
    if d == 0 {
        let mut outs = vec![dx];
        outs.extend(sums);
        return Ok(outs);
    }
    let x = dense(x)?;
    let g = dense(g)?;
    let w = w.map(dense).transpose()?;
    let width = 16 / dtype.size();
    let ptrs = [Some(&x), Some(&g), w.as_ref(), Some(&dx)];
    let aligned = ptrs.iter().flatten().all(|a| ptr(a).is_multiple_of(16));
    let simple = simple_requested();
    let vec = if aligned && d.is_multiple_of(width) && !simple { width } else { 1 };
    let (warp, items, threads) = if simple { (false, 0, STREAM_BLOCK) } else { plan(d, vec) };
    let key = Key { dtype, kind, weight: w.is_some(), bias: want_db, vec, items, warp };
    let blocks = if rows == 0 {
        0
    } else {
        let per_block = if warp { (threads / 32) as usize } else { 1 };
        grid(rows, per_block, threads, np, dtype.size())?
    };
    // (blocks, np, d) float32 partial rows, every element written by the row kernel.
    let part = if np > 0 && blocks > 0 {
        Some(empty(&[blocks as usize, np, d], DType::F32)?)
    } else {
        None
    };
    let part_ptr = part.as_ref().map_or(0, |p| p.buffer.as_ptr() as u64);
    if blocks > 0 {
        let f = KERNELS.get(&key, SYMBOL, || source(&key))?;
        let mut args = Args::new();
        args.i64(rows as i64).i64(d as i64).ptr(ptr(&x));
        // An absent weight is never read: any pointer will do.
        args.ptr(w.as_ref().map_or(0, ptr)).ptr(ptr(&g));
        args.ptr(dx.buffer.as_ptr() as u64).ptr(part_ptr).i64(eps.to_bits() as i64);
        launch(SYMBOL, f, blocks, threads, 0, &mut args)?;
    }
    if np > 0 {
        // With no rows, no partials: the sums are zeros.
        let f = SUMS.get(&dtype, SUM_SYMBOL, || sum_source(dtype))?;
        let out0 = sums[0].buffer.as_ptr() as u64;
        let out1 = sums.get(1).map_or(out0, |s| s.buffer.as_ptr() as u64);
        let mut args = Args::new();
        args.i64(blocks as i64).i64(d as i64).i64(np as i64).ptr(part_ptr);
        args.ptr(out0).ptr(out1);
        let launches = d.div_ceil(32) * np;
        launch(SUM_SYMBOL, f, launches as u32, 1024, 0, &mut args)?;
    }
    let mut outs = vec![dx];
    outs.extend(sums);
    Ok(outs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plans_cover_every_column() {
        assert_eq!(plan(512, 8), (true, 2, WARP_BLOCK));
        assert_eq!(plan(512, 4), (true, 4, WARP_BLOCK));
        assert_eq!(plan(1, 1), (true, 1, WARP_BLOCK));
        assert_eq!(plan(1000, 1), (false, 16, 64));
        assert_eq!(plan(8192, 8), (false, 2, 512));
        assert_eq!(plan(8193, 1), (false, 0, STREAM_BLOCK));
        for (d, vec) in [
            (1, 1),
            (7, 1),
            (33, 1),
            (512, 1),
            (513, 1),
            (1000, 1),
            (4096, 8),
            (8192, 8),
            (8192, 4),
            (8193, 1),
            (100_003, 1),
            (32768, 8),
        ] {
            let (warp, items, threads) = plan(d, vec);
            let key = Key {
                dtype: DType::F32,
                kind: Kind::Layer,
                weight: true,
                bias: true,
                vec,
                items,
                warp,
            };
            assert!(threads % 32 == 0 && threads <= max_threads(&key), "{d}");
            if warp {
                assert!(items * 32 * vec >= d && items * vec <= MAX_FLOATS, "{d}");
                assert_eq!(threads, WARP_BLOCK);
            } else if items > 0 {
                assert!(items * threads as usize * vec >= d && items * vec <= MAX_FLOATS, "{d}");
            } else {
                assert_eq!(threads, STREAM_BLOCK);
            }
        }
    }

    #[test]
    fn warp_blocks_fit_their_shared_buffer() {
        // (MAX_THREADS / 32) warps of 32 * MAX_FLOATS floats, plus the 96 scratch floats.
        let bytes = (WARP_BLOCK as usize / 32) * 32 * MAX_FLOATS * 4 + 96 * 4;
        assert!(bytes <= 48 * 1024);
    }

    #[test]
    fn sources_define_the_variant() {
        let key = Key {
            dtype: DType::BF16,
            kind: Kind::Rms,
            weight: true,
            bias: false,
            vec: 8,
            items: 2,
            warp: true,
        };
        let s = source(&key);
        assert!(s.contains("#define VEC 8\n#define ITEMS 2\n#define RMS 1\n#define HAS_W 1"));
        assert!(s.contains("#define MAX_THREADS 256\n"));
        assert!(sum_source(DType::F16).contains("kiln_norm_vjp_sum"));
    }
}
