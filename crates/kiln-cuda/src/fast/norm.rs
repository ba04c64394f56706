//! layer_norm and rms_norm over the last axis in one read of the data: a warp per row for
//! short rows, a block per row for long ones, each thread keeping its share of the row in
//! registers (`ITEMS` vectors of `VEC` elements, half floats packed two to a register; 16-byte
//! loads when every pointer is aligned and the row length a multiple of the vector), so the
//! statistics and the normalised write need no second read. Rows too long for registers are
//! streamed (read again per pass, from L2 mostly).
//!
//! Statistics in float32: the mean square (rms_norm), or the mean and centred variance
//! (layer_norm: the mean, then the centred squares from registers, two reduction rounds).
//! The rounds alternate between two scratch slots, so none needs a barrier after its read:
//! layer_norm's float32 rows of 8192 went from 0.89 to 0.96 of torch.compile's speed on the
//! H200 without them (one round merging each thread's mean and centred squares by Chan's
//! formula ran no faster). Weight and bias are read as vectors like x.

use super::{dense, header, ptr};
use crate::copy::empty;
use crate::launch::{blocks_covering, launch, Args};
use crate::nvrtc::{Function, KernelCache};
use kiln_base::{ArrayData, DType, Result};
use std::fmt::Write;

const SYMBOL: &str = "kiln_norm";

#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub(crate) enum Kind {
    Layer,
    Rms,
}

/// A compiled variant.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub(crate) struct Key {
    pub dtype: DType,
    pub kind: Kind,
    pub weight: bool,
    pub bias: bool,
    /// Elements per load: 16 bytes' worth, or 1.
    pub vec: usize,
    /// Vectors per thread kept in registers; 0 streams the row.
    pub items: usize,
    /// A warp per row (else a block per row).
    pub warp: bool,
    /// The block size (also the kernel's `__launch_bounds__`).
    pub threads: u32,
    /// The row is `x + res`, also written out (`h`): a residual add and the norm reading it.
    pub residual: bool,
    /// Weight and bias loaded before the rows (a block per row kept in registers, no more rows
    /// than multiprocessors): with a decode step's one row the kernel is a chain of round
    /// trips, and this takes the weight's out of it.
    pub hoist: bool,
}

/// Most values a thread keeps in registers (`ITEMS * VEC`): 8 vectors of float32 (only rows
/// too long for 512 threads of `F32_BLOCK_FLOATS`), 4 of half floats (kept packed, two per
/// register). More per thread left too few warps per
/// multiprocessor to hide latency, or spilled (measured on the H200, bf16 rows of 4096 and
/// 8192: 64 packed halves per thread ran at 0.82 to 0.85 of the copy floor, 32 at 0.90 to
/// 0.96; 64 converted to float at 0.59).
const MAX_FLOATS: usize = 32;
/// Threads per block in warp-per-row mode (8 rows per block).
pub(super) const WARP_BLOCK: u32 = 256;
/// Most threads per block when rows live in registers (`__launch_bounds__` then leaves 128
/// registers per thread).
pub(super) const MAX_REG_BLOCK: u32 = 512;
/// Threads per block that stream rows too long for registers.
pub(super) const STREAM_BLOCK: u32 = 1024;

/// The row kernel's body, after `header`: the mode constants are macros so one text serves
/// every variant (the compiler drops the dead branches).
const BODY: &str = r#"
typedef KVec<S, VEC> V;

/* Sum over the threads sharing a row (a warp, or the whole block); all get the result. The
   caller alternates between two `slot`s of scratch, so no barrier is needed after the read:
   a slot is written again two reductions later, after a barrier every thread passes only
   once it has read this one. */
K_INLINE float k_row_sum(float a, float *slot) {
    #pragma unroll
    for (int o = 16; o > 0; o >>= 1) a += __shfl_xor_sync(0xffffffffu, a, o);
#if !WARP_ROWS
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
    if (lane == 0) slot[warp] = a;
    __syncthreads();
    a = lane < warps ? slot[lane] : 0.0f;
    #pragma unroll
    for (int o = 16; o > 0; o >>= 1) a += __shfl_xor_sync(0xffffffffu, a, o);
#endif
    return a;
}

/* Normalises and stores the VEC elements at j: (v - mean) r w + b, or v r w for rms_norm
   (kiln-cpu's order); the weight and bias as one vector load each (aligned like x when
   VEC > 1: scalar loads of them were 2 VEC load instructions per 16 bytes of x). */
K_INLINE void k_write_v(S *q, const float *v, float mean, float r, const V &wv, const V &bv, int64_t j) {
    V o;
    #pragma unroll
    for (int e = 0; e < VEC; ++e) {
        float y = RMS ? v[e] * r : (v[e] - mean) * r;
#if HAS_W
        y = y * k_load(wv.v[e]);
#endif
#if HAS_B
        y = y + k_load(bv.v[e]);
#endif
        o.v[e] = k_store(y);
    }
    *(V *)(q + j) = o;
}

K_INLINE void k_write(S *q, const float *v, float mean, float r, const S *w, const S *b, int64_t j) {
    V wv, bv;
#if HAS_W
    wv = *(const V *)(w + j);
#endif
#if HAS_B
    bv = *(const V *)(b + j);
#endif
    k_write_v(q, v, mean, r, wv, bv, j);
}

#if PACKED
/* Half floats kept two to a 32-bit register (element 0 in the low half). */
typedef KVec<uint32_t, VEC / 2> U;
K_INLINE float k_elem(const U &u, int e) { return k_load((S)(u.v[e >> 1] >> (16 * (e & 1)))); }
/* Hides the packed values' identity from the compiler, so it converts them again in the next
   pass instead of keeping every converted float alive (twice the registers: no packing). */
K_INLINE void k_opaque(U (&u)[ITEMS]) {
    #pragma unroll
    for (int it = 0; it < ITEMS; ++it) {
        #pragma unroll
        for (int k = 0; k < VEC / 2; ++k) asm volatile("" : "+r"(u[it].v[k]));
    }
}
#else
typedef V U;
K_INLINE float k_elem(const U &u, int e) { return k_load(u.v[e]); }
template <int N> K_INLINE void k_opaque(U (&)[N]) {}
#endif

K_INLINE void k_read(const S *p, float *v, int64_t j) {
    const V u = *(const V *)(p + j);
    #pragma unroll
    for (int e = 0; e < VEC; ++e) v[e] = k_load(u.v[e]);
}

/* RESIDUAL: the row is x + r, rounded to S as the add kernel rounds it (a float sum, then
   one rounding: the correctly rounded sum), and written to h as it is read. */
K_INLINE V k_sum_into(const S *p, const S *rp, S *hp, int64_t j) {
    const V a = *(const V *)(p + j), c = *(const V *)(rp + j);
    V o;
    #pragma unroll
    for (int e = 0; e < VEC; ++e) o.v[e] = k_store(k_load(a.v[e]) + k_load(c.v[e]));
    *(V *)(hp + j) = o;
    return o;
}

extern "C" __global__ void __launch_bounds__(MAX_THREADS, MIN_BLOCKS) kiln_norm(const int64_t rows, const int64_t d, const S *__restrict__ x,
                                     const S *__restrict__ w, const S *__restrict__ b,
                                     S *__restrict__ y, const double eps_d,
                                     const S *__restrict__ res, S *__restrict__ h) {
    __shared__ float scratch[64]; /* two slots of 32 floats, alternated */
    unsigned round = 0;
    const float eps = (float)eps_d, n = (float)d;
#if WARP_ROWS
    const int t = threadIdx.x & 31, threads = 32;
    const int64_t first = (blockIdx.x * (int64_t)blockDim.x + threadIdx.x) >> 5;
    const int64_t stride = ((int64_t)gridDim.x * blockDim.x) >> 5;
#else
    const int t = threadIdx.x, threads = blockDim.x;
    const int64_t first = blockIdx.x, stride = gridDim.x;
#endif
#if HOIST
    V wh[ITEMS], bh[ITEMS];
    #pragma unroll
    for (int it = 0; it < ITEMS; ++it) {
        const int64_t j = ((int64_t)it * threads + t) * VEC;
        if (j < d) {
#if HAS_W
            wh[it] = *(const V *)(w + j);
#endif
#if HAS_B
            bh[it] = *(const V *)(b + j);
#endif
        }
    }
#endif
    /* The loop bounds are the same for every thread of a row's group, so the group's
       shuffles and barriers are reached by all of it. */
    for (int64_t row = first; row < rows; row += stride) {
        const S *p = x + row * d;
        S *q = y + row * d;
#if RESIDUAL
        const S *rp = res + row * d;
        S *hp = h + row * d;
#endif
#if ITEMS > 0
        /* The row's share as loaded (half floats stay packed: half the registers, so twice
           the values per thread at the same occupancy), converted in each pass. */
        U u[ITEMS];
        float sum = 0.0f;
        #pragma unroll
        for (int it = 0; it < ITEMS; ++it) {
            const int64_t j = ((int64_t)it * threads + t) * VEC;
            if (j < d) {
#if RESIDUAL
                const V o = k_sum_into(p, rp, hp, j);
                u[it] = *(const U *)&o;
#else
                u[it] = *(const U *)(p + j);
#endif
            } else {
                #pragma unroll
                for (int k = 0; k < (int)(sizeof(U) / sizeof(u[it].v[0])); ++k)
                    u[it].v[k] = 0; /* +0.0 in every dtype */
            }
            #pragma unroll
            for (int e = 0; e < VEC; ++e) {
                const float a = k_elem(u[it], e);
                sum += RMS ? a * a : a;
            }
        }
        k_opaque(u);
        float mean = 0.0f, r;
        if (RMS) {
            r = 1.0f / sqrtf(k_row_sum(sum, scratch + 32 * (round++ & 1)) / n + eps);
        } else {
            /* The mean, then the centred squares from registers. */
            mean = k_row_sum(sum, scratch + 32 * (round++ & 1)) / n;
            float sq = 0.0f;
            #pragma unroll
            for (int it = 0; it < ITEMS; ++it) {
                const int64_t j = ((int64_t)it * threads + t) * VEC;
                if (j < d) {
                    #pragma unroll
                    for (int e = 0; e < VEC; ++e) {
                        const float c = k_elem(u[it], e) - mean;
                        sq += c * c;
                    }
                }
            }
            k_opaque(u);
            r = 1.0f / sqrtf(k_row_sum(sq, scratch + 32 * (round++ & 1)) / n + eps);
        }
        #pragma unroll
        for (int it = 0; it < ITEMS; ++it) {
            const int64_t j = ((int64_t)it * threads + t) * VEC;
            if (j < d) {
                float v[VEC];
                #pragma unroll
                for (int e = 0; e < VEC; ++e) v[e] = k_elem(u[it], e);
#if HOIST
                k_write_v(q, v, mean, r, wh[it], bh[it], j);
#else
                k_write(q, v, mean, r, w, b, j);
#endif
            }
        }
#else
        float v[VEC], sum = 0.0f;
        for (int64_t j = (int64_t)t * VEC; j < d; j += (int64_t)threads * VEC) {
#if RESIDUAL
            const V o = k_sum_into(p, rp, hp, j);
            #pragma unroll
            for (int e = 0; e < VEC; ++e) v[e] = k_load(o.v[e]);
#else
            k_read(p, v, j);
#endif
            #pragma unroll
            for (int e = 0; e < VEC; ++e) sum += RMS ? v[e] * v[e] : v[e];
        }
        sum = k_row_sum(sum, scratch + 32 * (round++ & 1));
#if RESIDUAL
        p = hp; /* the later passes read the sum back (each thread its own elements) */
#endif
        float mean = 0.0f, r;
        if (RMS) {
            r = 1.0f / sqrtf(sum / n + eps);
        } else {
            mean = sum / n;
            float sq = 0.0f;
            for (int64_t j = (int64_t)t * VEC; j < d; j += (int64_t)threads * VEC) {
                k_read(p, v, j);
                #pragma unroll
                for (int e = 0; e < VEC; ++e) sq += (v[e] - mean) * (v[e] - mean);
            }
            r = 1.0f / sqrtf(k_row_sum(sq, scratch + 32 * (round++ & 1)) / n + eps);
        }
        for (int64_t j = (int64_t)t * VEC; j < d; j += (int64_t)threads * VEC) {
            k_read(p, v, j);
            k_write(q, v, mean, r, w, b, j);
        }
#endif
    }
}
"#;

pub(crate) fn source(key: &Key) -> String {
    let mut s = header(key.dtype);
    let _ = write!(
        s,
        "#define VEC {}\n#define ITEMS {}\n#define RMS {}\n#define HAS_W {}\n#define HAS_B {}\n\
         #define WARP_ROWS {}\n#define MAX_THREADS {}\n#define MIN_BLOCKS {}\n\
         #define PACKED {}\n#define RESIDUAL {}\n#define HOIST {}\n",
        key.vec,
        key.items,
        (key.kind == Kind::Rms) as u8,
        key.weight as u8,
        key.bias as u8,
        key.warp as u8,
        key.threads,
        min_blocks(key),
        (key.dtype.size() == 2 && key.vec >= 2 && key.items > 0) as u8,
        key.residual as u8,
        key.hoist as u8,
    );
    s.push_str(BODY);
    s
}

/// Blocks per multiprocessor the register allocation must allow (`__launch_bounds__`'s
/// second argument). Half floats ask for 1024 resident threads: their row kernels then get 64
/// registers (no spills in ptxas's report for sm_90) where they took 72 to 80, which left 768
/// threads per multiprocessor for block-per-row layer_norm. float32 asks for two blocks of 512
/// (layer_norm on rows of 8192 at 0.967 and 1.01 of torch.compile's speed on the H200, 0.96
/// with one); smaller float32 blocks keep their registers: forced to 64 (no spills) its
/// layer_norm on rows of 4096 ran slower (0.298 against 0.282 ms), as do scalar loads (they
/// spill).
/// A hoisted variant runs few blocks: its registers are not capped.
fn min_blocks(key: &Key) -> u32 {
    if key.hoist {
        1
    } else if key.items > 0 && key.vec > 1 && key.dtype.size() == 2 {
        (1024 / key.threads).max(1)
    } else if key.items > 0 && key.vec > 1 && key.threads >= 512 {
        2
    } else {
        1
    }
}

static KERNELS: KernelCache<Key> = KernelCache::new();

fn kernel(key: &Key) -> Result<Function> {
    KERNELS.get(key, SYMBOL, || source(key))
}

/// Most vectors per thread for `vec`-element loads.
fn max_items(vec: usize) -> usize {
    (MAX_FLOATS / vec).max(1)
}

/// Values a float32 thread aims to keep when a block shares a row: 16 (4 vectors). On the
/// H200, rows of 4096 ran at 0.98 of the copy floor with 256 threads of 16 values and 0.97
/// with 128 threads of 32 (both with a block per row); layer_norm's rows of 8192 ran at 0.96
/// of torch.compile's speed with 512 threads of 16, 0.92 with 256 of 32 and 0.89 with 128 of
/// 64. Half floats keep `MAX_FLOATS` (packed, 16 registers).
const F32_BLOCK_FLOATS: usize = 16;

/// The variant and block size for rows of `d` elements (`vec` elements per load; `half`:
/// 2-byte elements).
pub(crate) fn plan(d: usize, vec: usize, half: bool) -> (bool, usize, u32) {
    let n = d.div_ceil(vec); // vectors per row
    let most = max_items(vec);
    if n <= 32 * most {
        return (true, n.div_ceil(32).max(1), WARP_BLOCK);
    }
    // About `aim` vectors per thread: many loads in flight, few idle lanes.
    let aim = if half { most } else { (F32_BLOCK_FLOATS / vec).max(1) };
    let threads = n.div_ceil(aim).next_power_of_two().clamp(64, MAX_REG_BLOCK as usize);
    let items = n.div_ceil(threads);
    if items > most {
        return (false, 0, STREAM_BLOCK);
    }
    (false, items, threads as u32)
}

/// Either norm of the rows of `x` (last axis), with optional weight and bias of length `d`.
pub(crate) fn norm(
    kind: Kind,
    x: &ArrayData,
    w: Option<&ArrayData>,
    b: Option<&ArrayData>,
    eps: f64,
    shape: &[usize],
) -> Result<ArrayData> {
    Ok(run(kind, x, None, w, b, eps, shape)?.0)
}

/// `h = x + res` and the norm of h's rows, one kernel (a residual add and the norm after it;
/// x and res of the same shape and dtype): `(h, norm)`, h rounded as the add kernel rounds.
pub(crate) fn norm_of_sum(
    kind: Kind,
    (x, res): (&ArrayData, &ArrayData),
    w: Option<&ArrayData>,
    b: Option<&ArrayData>,
    eps: f64,
    shape: &[usize],
) -> Result<(ArrayData, ArrayData)> {
    let (out, h) = run(kind, x, Some(res), w, b, eps, shape)?;
    Ok((h.expect("made for a residual"), out))
}

/// The norm (and, with `res`, the sum it normalises).
fn run(
    kind: Kind,
    x: &ArrayData,
    res: Option<&ArrayData>,
    w: Option<&ArrayData>,
    b: Option<&ArrayData>,
    eps: f64,
    shape: &[usize],
) -> Result<(ArrayData, Option<ArrayData>)> {
    let out = empty(shape, x.dtype)?;
    let h = res.map(|_| empty(shape, x.dtype)).transpose()?;
    let d = shape.last().copied().unwrap_or(1);
    let rows = x.layout.size().checked_div(d).unwrap_or(0);
    if rows == 0 || d == 0 {
        return Ok((out, h));
    }
    let x = dense(x)?;
    let res = res.map(dense).transpose()?;
    let w = w.map(dense).transpose()?;
    let b = b.map(dense).transpose()?;
    let width = 16 / x.dtype.size();
    let ptrs = [Some(&x), res.as_ref(), w.as_ref(), b.as_ref()];
    let aligned = ptrs.iter().flatten().all(|a| ptr(a).is_multiple_of(16));
    let vec = if aligned && d.is_multiple_of(width) { width } else { 1 };
    let (warp, items, threads) = plan(d, vec, x.dtype.size() == 2);
    let hoist = !warp && items > 0 && rows <= crate::runtime::gpu()?.multiprocessors as usize;
    let key = Key {
        dtype: x.dtype,
        kind,
        weight: w.is_some(),
        bias: b.is_some(),
        vec,
        items,
        warp,
        threads,
        residual: res.is_some(),
        hoist,
    };
    let mut args = Args::new();
    args.i64(rows as i64).i64(d as i64).ptr(ptr(&x));
    // An absent weight, bias or residual is never read (nor h written): any pointer will do.
    args.ptr(w.as_ref().map_or(0, ptr)).ptr(b.as_ref().map_or(0, ptr));
    args.ptr(out.buffer.as_ptr() as u64).i64(eps.to_bits() as i64);
    args.ptr(res.as_ref().map_or(0, ptr)).ptr(h.as_ref().map_or(0, |h| h.buffer.as_ptr() as u64));
    // A block per row (or per `threads / 32` rows): capped grids ran 5% slower (rows end
    // unevenly across multiprocessors), see `blocks_covering`.
    let per_block = if warp { (threads / 32) as u64 } else { 1 };
    launch(SYMBOL, kernel(&key)?, blocks_covering(rows as u64, per_block), threads, 0, &mut args)?;
    Ok((out, h))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plans_keep_rows_in_registers() {
        // Short rows: a warp each.
        assert_eq!(plan(64, 4, false), (true, 1, WARP_BLOCK));
        assert_eq!(plan(1024, 4, false), (true, 8, WARP_BLOCK));
        assert_eq!(plan(1024, 8, true), (true, 4, WARP_BLOCK));
        assert_eq!(plan(33, 1, false), (true, 2, WARP_BLOCK));
        assert_eq!(plan(1000, 1, false), (true, 32, WARP_BLOCK));
        // Longer rows: a block each, at most 32 values per thread, every element covered.
        for (d, vec) in [
            (8192, 8),
            (8192, 4),
            (4096, 8),
            (4096, 4),
            (2000, 1),
            (1025, 1),
            (100_003, 1),
            (16384, 4),
            (32768, 8),
        ] {
            let (warp, items, threads) = plan(d, vec, vec == 8);
            assert!(!warp);
            if items > 0 {
                assert!(items <= max_items(vec) && items * threads as usize * vec >= d, "{d}");
                assert!(items * vec <= MAX_FLOATS);
            } else {
                assert!(d.div_ceil(vec) > max_items(vec) * MAX_REG_BLOCK as usize);
                assert_eq!(threads, STREAM_BLOCK);
            }
            let most = if items == 0 { STREAM_BLOCK } else { MAX_REG_BLOCK };
            assert!(threads % 32 == 0 && threads <= most);
        }
        assert_eq!(plan(8192, 8, true), (false, 4, 256));
        assert_eq!(plan(4096, 8, true), (false, 4, 128));
        // float32: 4 vectors per thread, up to 8 for rows too long for 512 threads of 4.
        assert_eq!(plan(4096, 4, false), (false, 4, 256));
        assert_eq!(plan(8192, 4, false), (false, 4, 512));
        assert_eq!(plan(16384, 4, false), (false, 8, 512));
    }

    #[test]
    fn sources_define_the_variant() {
        let key = Key {
            dtype: DType::BF16,
            kind: Kind::Rms,
            weight: true,
            bias: false,
            vec: 8,
            items: 4,
            warp: false,
            threads: 256,
            residual: false,
            hoist: false,
        };
        let s = source(&key);
        assert!(s.contains("#define VEC 8\n#define ITEMS 4\n#define RMS 1\n#define HAS_W 1"));
        assert!(s.contains("typedef uint16_t S;"));
        assert!(s.contains("k_bf16_to_f32(x)"));
        assert!(s.contains("#define PACKED 1\n"));
        let f32_key = Key { dtype: DType::F32, vec: 4, ..key };
        assert!(source(&f32_key).contains("#define PACKED 0\n"));
    }
}
