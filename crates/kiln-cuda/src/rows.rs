//! Row kernels: arg reductions, softmax and logsumexp. The input is viewed with the reduced
//! axis last (copied row-major when that view is not contiguous); a block, or a warp for short
//! rows, works on one row at a time, and a few long rows are split across blocks.

use crate::alloc::{device_ptr, DEVICE};
use crate::elementwise::{run_program, single_op_program};
use crate::launch::{blocks_for, launch, Args, BLOCK};
use crate::nvrtc::{Function, KernelCache};
use kiln_base::{bail, ArgReduceOp, ArrayData, DType, Layout, Primitive, Result};
use std::fmt::Write;
use std::sync::Arc;

const SYMBOL: &str = "kiln_rows";

fn load(dtype: DType) -> &'static str {
    match dtype {
        DType::F16 => "k_f16_to_f32(x)",
        DType::BF16 => "k_bf16_to_f32(x)",
        DType::F32 => "x",
        _ => "x",
    }
}

/// Which kernel of an arg reduction: a block per whole row, or a long row split across
/// blocks (`Partial`: each block reduces a chunk to a (value, index) pair; `Final`: a block
/// per row reduces those pairs).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
enum ArgPass {
    Whole,
    Partial,
    Final,
}

/// Rows at least this long, when there are few, are split across blocks: one block read a
/// decode step's 128256-entry row of log-probabilities in 123 us on the H200.
const SPLIT_LEN: usize = 16384;
/// Rows up to which a long row is split (more rows fill the GPU a block each).
const SPLIT_ROWS: usize = 64;
/// Elements of a row each block of the partial pass reduces.
const CHUNK: usize = 2048;

/// argmax / argmin over rows: the first NaN wins, ties go to the lower index (as the CPU).
/// complex64 compares lexicographically (the kc64 operators) and is NaN when either part is.
fn arg_source(op: ArgReduceOp, dtype: DType, pass: ArgPass) -> String {
    let storage = kiln_codegen::c_type(dtype);
    let cmp = match op {
        ArgReduceOp::ArgMax => ">",
        ArgReduceOp::ArgMin => "<",
    };
    let value = match dtype {
        DType::C64 => "kc64",
        d if d.is_float() => "float",
        DType::U64 => "uint64_t",
        _ => "int64_t",
    };
    let is_nan = if dtype == DType::C64 { "k_isnan" } else { "k_isnan_real" };
    let mut s = String::from(kiln_codegen::cuda::preamble());
    let _ = write!(
        s,
        r#"
typedef {value} V;
typedef {storage} S;
K_INLINE V k_load(S x) {{ return (V){load}; }}
K_INLINE bool k_isnan_real(V v) {{ return v != v; }}
/* Whether (v, i) beats (w, j); index `len` marks no candidate. */
K_INLINE bool k_better(V v, int64_t i, V w, int64_t j) {{
    const bool vn = {is_nan}(v), wn = {is_nan}(w);
    if (vn || wn) return vn && (!wn || i < j);
    return (v {cmp} w) || (v == w && i < j);
}}
K_INLINE void k_take(V v, int64_t j, V &best, int64_t &at, int64_t len) {{
    if (j < len && (at == len || k_better(v, j, best, at))) {{ best = v; at = j; }}
}}
/* The block's best (value, index) pair, in thread 0. */
K_INLINE void k_block_best(V &best, int64_t &at, int64_t len, V *sv, int64_t *si) {{
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = (blockDim.x + 31) >> 5;
    for (int o = 16; o > 0; o >>= 1) {{
        const V v = __shfl_down_sync(0xffffffffu, best, o);
        const int64_t j = __shfl_down_sync(0xffffffffu, at, o);
        k_take(v, j, best, at, len);
    }}
    if (lane == 0) {{ sv[warp] = best; si[warp] = at; }}
    __syncthreads();
    if (warp == 0) {{
        best = lane < warps ? sv[lane] : V(); at = lane < warps ? si[lane] : len;
        for (int o = 16; o > 0; o >>= 1) {{
            const V v = __shfl_down_sync(0xffffffffu, best, o);
            const int64_t j = __shfl_down_sync(0xffffffffu, at, o);
            k_take(v, j, best, at, len);
        }}
    }}
    __syncthreads();
}}
"#,
        load = load(dtype),
    );
    s.push_str(match pass {
        ArgPass::Whole => ARG_WHOLE,
        ArgPass::Partial => ARG_PARTIAL,
        ArgPass::Final => ARG_FINAL,
    });
    s
}

const ARG_WHOLE: &str = r#"
extern "C" __global__ void kiln_rows(const int64_t rows, const int64_t len, const S *__restrict__ in,
                                   uint32_t *__restrict__ out) {
    __shared__ V sv[32];
    __shared__ int64_t si[32];
    for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
        const S *p = in + row * len;
        V best = V(); int64_t at = len;
        for (int64_t j = threadIdx.x; j < len; j += blockDim.x) k_take(k_load(p[j]), j, best, at, len);
        k_block_best(best, at, len, sv, si);
        if (threadIdx.x == 0) out[row] = (uint32_t)(at == len ? 0 : at);
    }
}
"#;

/* Block b reduces chunk b % chunks of row b / chunks. */
const ARG_PARTIAL: &str = r#"
extern "C" __global__ void kiln_rows(const int64_t len, const int64_t chunks, const int64_t chunk,
                                   const S *__restrict__ in, V *__restrict__ pv, int64_t *__restrict__ pi) {
    __shared__ V sv[32];
    __shared__ int64_t si[32];
    const int64_t row = blockIdx.x / chunks, c = blockIdx.x % chunks;
    const S *p = in + row * len;
    const int64_t hi = min(len, (c + 1) * chunk);
    V best = V(); int64_t at = len;
    for (int64_t j = c * chunk + threadIdx.x; j < hi; j += blockDim.x) k_take(k_load(p[j]), j, best, at, len);
    k_block_best(best, at, len, sv, si);
    if (threadIdx.x == 0) { pv[blockIdx.x] = best; pi[blockIdx.x] = at; }
}
"#;

const ARG_FINAL: &str = r#"
extern "C" __global__ void kiln_rows(const int64_t len, const int64_t chunks, const V *__restrict__ pv,
                                   const int64_t *__restrict__ pi, uint32_t *__restrict__ out) {
    __shared__ V sv[32];
    __shared__ int64_t si[32];
    const int64_t row = blockIdx.x;
    V best = V(); int64_t at = len;
    for (int64_t c = threadIdx.x; c < chunks; c += blockDim.x)
        k_take(pv[row * chunks + c], pi[row * chunks + c], best, at, len);
    k_block_best(best, at, len, sv, si);
    if (threadIdx.x == 0) out[row] = (uint32_t)(at == len ? 0 : at);
}
"#;

/// Rows this short are a warp's (each lane keeps its values in registers: one read, one write).
const WARP_ROW: usize = 1024;

/// The start of the warp-per-row kernels (softmax, logsumexp): a lane's `PER` values of the
/// row in registers (-inf past its length) and the row's NaN-keeping max, on every lane.
const WARP_ROW_MAX: &str = r#"
K_INLINE float k_warp_row_max(const S *__restrict__ p, const int64_t len, const int lane, float *v) {
    float m = -INFINITY;
    #pragma unroll
    for (int i = 0; i < PER; ++i) {
        const int64_t j = lane + 32 * i;
        v[i] = (EXACT || j < len) ? k_load(p[j]) : -INFINITY;
        m = (m != m || m > v[i]) ? m : v[i];
    }
    for (int o = 16; o > 0; o >>= 1) {
        const float b = __shfl_xor_sync(0xffffffffu, m, o);
        m = (m != m || m > b) ? m : b;
    }
    return m;
}
"#;

/// Softmax of rows of at most `WARP_ROW`, a warp per row. `PER` (values per lane) is fixed
/// at build time so the loops unroll to exactly the row's length: a row of 256 runs 8 steps,
/// not 32 predicated ones (2.3x faster on the H200). `EXACT`: the length is `32 * PER`, so
/// no bounds checks at all.
const WARP_SOFTMAX: &str = r#"
extern "C" __global__ void kiln_rows(const int64_t rows, const int64_t len, const S *__restrict__ in,
                                   S *__restrict__ out) {
    const int lane = threadIdx.x & 31;
    const int64_t warps = ((int64_t)gridDim.x * blockDim.x) >> 5;
    for (int64_t row = (blockIdx.x * (int64_t)blockDim.x + threadIdx.x) >> 5; row < rows; row += warps) {
        const S *p = in + row * len;
        S *q = out + row * len;
        float v[PER];
        const float m = k_warp_row_max(p, len, lane, v);
        float sum = 0.0f;
        #pragma unroll
        for (int i = 0; i < PER; ++i) {
            if (EXACT || lane + 32 * i < len) { v[i] = expf(v[i] - m); sum += v[i]; }
        }
        for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
        const float scale = 1.0f / sum;
        #pragma unroll
        for (int i = 0; i < PER; ++i) {
            const int64_t j = lane + 32 * i;
            if (EXACT || j < len) q[j] = k_store(v[i] * scale);
        }
    }
}
"#;

/// The preamble of the float row kernels (softmax, logsumexp): the storage type `S`, and
/// `k_load` / `k_store` between it and float.
fn float_rows_prelude(dtype: DType) -> String {
    let storage = kiln_codegen::c_type(dtype);
    let store = match dtype {
        DType::F16 => "k_f32_to_f16(v)",
        DType::BF16 => "k_f32_to_bf16(v)",
        _ => "v",
    };
    let mut s = String::from(kiln_codegen::cuda::preamble());
    let _ = write!(
        s,
        r#"
typedef {storage} S;
K_INLINE float k_load({storage} x) {{ return {load}; }}
K_INLINE {storage} k_store(float v) {{ return {store}; }}
"#,
        load = load(dtype),
    );
    s
}

/// Block-wide combines (max propagating NaN, or sum) of one float per thread.
const BLOCK_COMBINE: &str = r#"
/* Block-wide combine of one float per thread; every thread gets the result. */
template <bool MAX> K_INLINE float k_block(float a, float *scratch) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = (blockDim.x + 31) >> 5;
    for (int o = 16; o > 0; o >>= 1) {
        const float b = __shfl_xor_sync(0xffffffffu, a, o);
        a = MAX ? ((a != a || a > b) ? a : b) : a + b;
    }
    if (lane == 0) scratch[warp] = a;
    __syncthreads();
    a = lane < warps ? scratch[lane] : (MAX ? -INFINITY : 0.0f);
    for (int o = 16; o > 0; o >>= 1) {
        const float b = __shfl_xor_sync(0xffffffffu, a, o);
        a = MAX ? ((a != a || a > b) ? a : b) : a + b;
    }
    __syncthreads();
    return a;
}
"#;

/// Softmax over rows, computed in float: max, sum of exp(x - max), then the scaled write; a
/// block per row, or a warp per row for rows of at most `WARP_ROW` (`warp`: values per lane,
/// and whether the row length is exactly 32 times that).
fn softmax_source(dtype: DType, warp: Option<(usize, bool)>) -> String {
    let storage = kiln_codegen::c_type(dtype);
    let mut s = float_rows_prelude(dtype);
    if let Some((per, exact)) = warp {
        let _ = write!(s, "#define PER {per}\n#define EXACT {}\n", exact as i32);
        s.push_str(WARP_ROW_MAX);
        s.push_str(WARP_SOFTMAX);
        return s;
    }
    s.push_str(BLOCK_COMBINE);
    let _ = write!(
        s,
        r#"
extern "C" __global__ void {SYMBOL}(const int64_t rows, const int64_t len, const {storage} *__restrict__ in,
                                   {storage} *__restrict__ out) {{
    __shared__ float scratch[32];
    for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {{
        const {storage} *p = in + row * len;
        {storage} *q = out + row * len;
        float m = -INFINITY;
        for (int64_t j = threadIdx.x; j < len; j += blockDim.x) {{
            const float v = k_load(p[j]);
            m = (m != m || m > v) ? m : v;
        }}
        m = k_block<true>(m, scratch);
        float sum = 0.0f;
        for (int64_t j = threadIdx.x; j < len; j += blockDim.x) sum += expf(k_load(p[j]) - m);
        sum = k_block<false>(sum, scratch);
        const float scale = 1.0f / sum;
        for (int64_t j = threadIdx.x; j < len; j += blockDim.x) {{
            const float v = expf(k_load(p[j]) - m) * scale;
            q[j] = k_store(v);
        }}
    }}
}}
"#
    );
    s
}

/// Which kernel of a logsumexp over rows: a warp per row of at most `WARP_ROW` (values per
/// lane, and whether the length is exactly 32 times that), a block per row, or a few long
/// rows split across blocks (`Partial`: each block reduces a chunk to its (max, sum of
/// exp(x - max)) pair; `Final`: a block per row combines those pairs).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
enum LsePass {
    Warp(usize, bool),
    Block,
    Partial,
    Final,
}

/// The value of a row from its max `m` and its sum of exp(x - m): `m` itself where it is
/// infinite or NaN, as the composition `where(|m| == inf, m, m + log(sum))`.
const LSE_FINISH: &str = r#"
K_INLINE bool k_finite(float m) { return fabsf(m) < INFINITY; }
K_INLINE float k_lse(float m, float sum) { return k_finite(m) ? m + logf(sum) : m; }
"#;

const WARP_LSE: &str = r#"
extern "C" __global__ void kiln_rows(const int64_t rows, const int64_t len, const S *__restrict__ in,
                                   S *__restrict__ out) {
    const int lane = threadIdx.x & 31;
    const int64_t warps = ((int64_t)gridDim.x * blockDim.x) >> 5;
    for (int64_t row = (blockIdx.x * (int64_t)blockDim.x + threadIdx.x) >> 5; row < rows; row += warps) {
        const S *p = in + row * len;
        float v[PER];
        const float m = k_warp_row_max(p, len, lane, v);
        float sum = 0.0f;
        #pragma unroll
        for (int i = 0; i < PER; ++i) {
            if (EXACT || lane + 32 * i < len) sum += expf(v[i] - m);
        }
        for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
        if (lane == 0) out[row] = k_store(k_lse(m, sum));
    }
}
"#;

const BLOCK_LSE: &str = r#"
extern "C" __global__ void kiln_rows(const int64_t rows, const int64_t len, const S *__restrict__ in,
                                   S *__restrict__ out) {
    __shared__ float scratch[32];
    for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
        const S *p = in + row * len;
        float m = -INFINITY;
        for (int64_t j = threadIdx.x; j < len; j += blockDim.x) {
            const float v = k_load(p[j]);
            m = (m != m || m > v) ? m : v;
        }
        m = k_block<true>(m, scratch);
        float sum = 0.0f;
        if (k_finite(m)) {
            for (int64_t j = threadIdx.x; j < len; j += blockDim.x) sum += expf(k_load(p[j]) - m);
        }
        sum = k_block<false>(sum, scratch);
        if (threadIdx.x == 0) out[row] = k_store(k_lse(m, sum));
    }
}
"#;

/* Block b reduces chunk b % chunks of row b / chunks to (max, sum of exp(x - max)) at
part[2b], part[2b + 1]; the sum is 0 where the max is not finite. */
const PARTIAL_LSE: &str = r#"
extern "C" __global__ void kiln_rows(const int64_t len, const int64_t chunks, const int64_t chunk,
                                   const S *__restrict__ in, float *__restrict__ part) {
    __shared__ float scratch[32];
    const int64_t row = blockIdx.x / chunks, c = blockIdx.x % chunks;
    const S *p = in + row * len;
    const int64_t hi = min(len, (c + 1) * chunk);
    float m = -INFINITY;
    for (int64_t j = c * chunk + threadIdx.x; j < hi; j += blockDim.x) {
        const float v = k_load(p[j]);
        m = (m != m || m > v) ? m : v;
    }
    m = k_block<true>(m, scratch);
    float sum = 0.0f;
    if (k_finite(m)) {
        for (int64_t j = c * chunk + threadIdx.x; j < hi; j += blockDim.x) sum += expf(k_load(p[j]) - m);
    }
    sum = k_block<false>(sum, scratch);
    if (threadIdx.x == 0) { part[2 * blockIdx.x] = m; part[2 * blockIdx.x + 1] = sum; }
}
"#;

/* A block per row over its chunks' pairs: the row's max, then the chunks' sums rescaled to
it (a chunk of -inf only adds 0). */
const FINAL_LSE: &str = r#"
extern "C" __global__ void kiln_rows(const int64_t rows, const int64_t chunks,
                                   const float *__restrict__ part, S *__restrict__ out) {
    __shared__ float scratch[32];
    for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
        const float *q = part + 2 * row * chunks;
        float m = -INFINITY;
        for (int64_t c = threadIdx.x; c < chunks; c += blockDim.x) {
            const float v = q[2 * c];
            m = (m != m || m > v) ? m : v;
        }
        m = k_block<true>(m, scratch);
        float sum = 0.0f;
        if (k_finite(m)) {
            for (int64_t c = threadIdx.x; c < chunks; c += blockDim.x) {
                const float mc = q[2 * c];
                if (mc > -INFINITY) sum += q[2 * c + 1] * expf(mc - m);
            }
        }
        sum = k_block<false>(sum, scratch);
        if (threadIdx.x == 0) out[row] = k_store(k_lse(m, sum));
    }
}
"#;

/// logsumexp over rows, computed in float (NaN-propagating max, then the sum of
/// exp(x - max), one value per row); see `LsePass` for the variants.
fn logsumexp_source(dtype: DType, pass: LsePass) -> String {
    let mut s = float_rows_prelude(dtype);
    s.push_str(LSE_FINISH);
    if let LsePass::Warp(per, exact) = pass {
        let _ = write!(s, "#define PER {per}\n#define EXACT {}\n", exact as i32);
        s.push_str(WARP_ROW_MAX);
        s.push_str(WARP_LSE);
        return s;
    }
    s.push_str(BLOCK_COMBINE);
    s.push_str(match pass {
        LsePass::Partial => PARTIAL_LSE,
        LsePass::Final => FINAL_LSE,
        _ => BLOCK_LSE,
    });
    s
}

#[derive(Clone, PartialEq, Eq, Hash)]
enum Key {
    Arg(ArgReduceOp, DType, ArgPass),
    /// The dtype, and for a warp per row its values per lane and exactness (see
    /// `softmax_source`).
    Softmax(DType, Option<(usize, bool)>),
    LogSumExp(DType, LsePass),
}

static KERNELS: KernelCache<Key> = KernelCache::new();

fn kernel(key: Key) -> Result<Function> {
    KERNELS.get(&key, SYMBOL, || match &key {
        Key::Arg(op, d, pass) => arg_source(*op, *d, *pass),
        Key::Softmax(d, warp) => softmax_source(*d, *warp),
        Key::LogSumExp(d, pass) => logsumexp_source(*d, *pass),
    })
}

/// `x` with `axis` moved last, row-major (a copy only when the view is not).
fn rows_of(x: &ArrayData, axis: usize) -> Result<(ArrayData, usize, usize)> {
    let nd = x.layout.ndim();
    let perm: Vec<usize> = (0..nd).filter(|&d| d != axis).chain([axis]).collect();
    let viewed = ArrayData { layout: x.layout.transpose(&perm), ..x.clone() };
    let len = x.layout.shape[axis];
    let rows = x.layout.size().checked_div(len).unwrap_or(0);
    if viewed.layout.row_contiguous || rows == 0 {
        return Ok((viewed, rows, len));
    }
    let copy = Arc::new(single_op_program(&Primitive::Copy, &[x.dtype], x.dtype).expect("copy"));
    let c = run_program(&copy, std::slice::from_ref(&viewed), &viewed.layout.shape)?.remove(0);
    Ok((c, rows, len))
}

fn run_rows(key: Key, rows: usize, len: usize, x: &ArrayData, out: u64) -> Result<()> {
    let mut args = Args::new();
    args.i64(rows as i64).i64(len as i64);
    args.ptr(device_ptr(&x.buffer, x.layout.offset as isize, x.dtype.size())).ptr(out);
    let warp = matches!(key, Key::Softmax(_, Some(_)) | Key::LogSumExp(_, LsePass::Warp(..)));
    let per_block = if warp { BLOCK as u64 / 32 } else { 1 };
    launch("rows", kernel(key)?, blocks_for(rows as u64, per_block), BLOCK, 0, &mut args)
}

/// argmax / argmin along `axis` (uint32 indices; the axis kept with size 1).
pub fn arg_reduce(
    op: ArgReduceOp,
    axis: usize,
    x: &ArrayData,
    shape: &[usize],
) -> Result<ArrayData> {
    let (input, rows, len) = rows_of(x, axis)?;
    let out_size: usize = shape.iter().product();
    if len == 0 && out_size > 0 {
        bail!(Value, "argmax", "Cannot argmax reduce zero size array.");
    }
    let out = ArrayData {
        buffer: DEVICE.alloc(out_size * 4)?,
        layout: Layout::contiguous(shape),
        dtype: DType::U32,
    };
    let out_ptr = out.buffer.as_ptr() as u64;
    if rows > 0 && len >= SPLIT_LEN && rows <= SPLIT_ROWS && x.dtype != DType::C64 {
        split_arg_reduce(op, x.dtype, rows, len, &input, out_ptr)?;
    } else if rows > 0 {
        run_rows(Key::Arg(op, x.dtype, ArgPass::Whole), rows, len, &input, out_ptr)?;
    }
    Ok(out)
}

/// An arg reduction of a few long rows: chunks reduced by a block each, then a block per
/// row over the chunks' pairs (8-byte values and indices, whatever the dtype).
fn split_arg_reduce(
    op: ArgReduceOp,
    dtype: DType,
    rows: usize,
    len: usize,
    x: &ArrayData,
    out: u64,
) -> Result<()> {
    let chunks = len.div_ceil(CHUNK);
    let pairs = rows * chunks;
    let (values, indices) = (DEVICE.alloc(pairs * 8)?, DEVICE.alloc(pairs * 8)?);
    let (pv, pi) = (values.as_ptr() as u64, indices.as_ptr() as u64);
    let mut args = Args::new();
    args.i64(len as i64).i64(chunks as i64).i64(CHUNK as i64);
    args.ptr(device_ptr(&x.buffer, x.layout.offset as isize, x.dtype.size())).ptr(pv).ptr(pi);
    let partial = kernel(Key::Arg(op, dtype, ArgPass::Partial))?;
    launch(
        "argmax",
        partial,
        crate::nvrtc::check_grid("argmax", pairs as u64)?,
        BLOCK,
        0,
        &mut args,
    )?;
    let mut args = Args::new();
    args.i64(len as i64).i64(chunks as i64).ptr(pv).ptr(pi).ptr(out);
    let last = kernel(Key::Arg(op, dtype, ArgPass::Final))?;
    // The pair buffers return to the cache now: stream order runs later users after this.
    launch("argmax", last, rows as u32, BLOCK, 0, &mut args)
}

/// Softmax over the last axis.
pub fn softmax(x: &ArrayData, shape: &[usize]) -> Result<ArrayData> {
    if !matches!(x.dtype, DType::F32 | DType::F16 | DType::BF16) {
        bail!(Type, "softmax", "The GPU softmax supports float16, bfloat16 and float32.");
    }
    let nd = x.layout.ndim().max(1);
    let (input, rows, len) =
        if x.layout.ndim() == 0 { (x.clone(), 1, 1) } else { rows_of(x, nd - 1)? };
    let out = ArrayData {
        buffer: DEVICE.alloc(x.layout.size() * x.dtype.size())?,
        layout: Layout::contiguous(shape),
        dtype: x.dtype,
    };
    if rows > 0 && len > 0 {
        let warp = (len <= WARP_ROW).then(|| (len.div_ceil(32), len % 32 == 0));
        let key = Key::Softmax(x.dtype, warp);
        run_rows(key, rows, len, &input, out.buffer.as_ptr() as u64)?;
    }
    Ok(out)
}

/// logsumexp over the last axis, which stays as size 1 (`shape`): a warp per short row, a
/// block per row, or a few long rows (a decode step's vocabulary row) split across blocks
/// and combined by a second kernel.
pub fn logsumexp(x: &ArrayData, shape: &[usize]) -> Result<ArrayData> {
    if !matches!(x.dtype, DType::F32 | DType::F16 | DType::BF16) {
        bail!(Type, "logsumexp", "The GPU logsumexp supports float16, bfloat16 and float32.");
    }
    if x.layout.ndim() == 0 {
        bail!(Value, "logsumexp", "Expected an input with at least one axis.");
    }
    let (input, rows, len) = rows_of(x, x.layout.ndim() - 1)?;
    let out_size: usize = shape.iter().product();
    let out = ArrayData {
        buffer: DEVICE.alloc(out_size * x.dtype.size())?,
        layout: Layout::contiguous(shape),
        dtype: x.dtype,
    };
    let out_ptr = out.buffer.as_ptr() as u64;
    if out_size == 0 {
        return Ok(out);
    }
    if len >= SPLIT_LEN && rows <= SPLIT_ROWS {
        return split_logsumexp(x.dtype, rows, len, &input, out_ptr).map(|()| out);
    }
    let pass = if len > 0 && len <= WARP_ROW {
        LsePass::Warp(len.div_ceil(32), len % 32 == 0)
    } else {
        LsePass::Block
    };
    run_rows(Key::LogSumExp(x.dtype, pass), out_size, len, &input, out_ptr)?;
    Ok(out)
}

/// logsumexp of a few long rows: chunks reduced to (max, sum) pairs by a block each, then a
/// block per row over its chunks' pairs.
fn split_logsumexp(dtype: DType, rows: usize, len: usize, x: &ArrayData, out: u64) -> Result<()> {
    let chunks = len.div_ceil(CHUNK);
    let pairs = rows * chunks;
    let part = DEVICE.alloc(pairs * 2 * 4)?;
    let pp = part.as_ptr() as u64;
    let mut args = Args::new();
    args.i64(len as i64).i64(chunks as i64).i64(CHUNK as i64);
    args.ptr(device_ptr(&x.buffer, x.layout.offset as isize, x.dtype.size())).ptr(pp);
    let partial = kernel(Key::LogSumExp(dtype, LsePass::Partial))?;
    let grid = crate::nvrtc::check_grid("logsumexp", pairs as u64)?;
    launch("logsumexp", partial, grid, BLOCK, 0, &mut args)?;
    let mut args = Args::new();
    args.i64(rows as i64).i64(chunks as i64).ptr(pp).ptr(out);
    let last = kernel(Key::LogSumExp(dtype, LsePass::Final))?;
    // The pair buffer returns to the cache now: stream order runs later users after this.
    launch("logsumexp", last, rows as u32, BLOCK, 0, &mut args)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Softmax and logsumexp variants for an offline NVRTC check.
    fn float_row_sources() -> Vec<(String, String)> {
        let mut all = Vec::new();
        for (name, warp) in
            [("exact", Some((8, true))), ("ragged", Some((3, false))), ("block", None)]
        {
            all.push((format!("softmax_{name}.cu"), softmax_source(DType::BF16, warp)));
        }
        let passes = [
            LsePass::Warp(8, true),
            LsePass::Warp(3, false),
            LsePass::Warp(32, true),
            LsePass::Block,
            LsePass::Partial,
            LsePass::Final,
        ];
        for dtype in [DType::F32, DType::F16, DType::BF16] {
            for pass in passes {
                all.push((
                    format!("logsumexp_{dtype}_{pass:?}.cu").replace(['(', ')', ',', ' '], "_"),
                    logsumexp_source(dtype, pass),
                ));
            }
        }
        all
    }

    /// The variants' sources for an offline NVRTC check (`nvrtc::dump_sources`).
    #[test]
    fn dump() {
        crate::nvrtc::dump_sources(&float_row_sources());
    }

    /// Every softmax and logsumexp variant builds offline for sm_90a and sm_80 (no GPU
    /// needed; skipped without libnvrtc on the library path).
    #[test]
    fn float_row_kernels_build_offline() {
        if !crate::nvrtc::loadable() {
            eprintln!("skipped: no libnvrtc on the library path (pip nvidia-cuda-nvrtc-cu12)");
            return;
        }
        let failures = crate::nvrtc::problems_in_parallel(&float_row_sources(), |name, src| {
            let built = ["sm_90a", "sm_80"].map(|arch| (arch, crate::nvrtc::compile(src, arch)));
            built
                .into_iter()
                .filter_map(|(arch, r)| r.err().map(|e| format!("{name} ({arch}): {e}")))
                .collect()
        });
        assert!(failures.is_empty(), "{}", failures.join("\n\n"));
    }

    #[test]
    fn logsumexp_sources() {
        let w = logsumexp_source(DType::BF16, LsePass::Warp(8, true));
        assert!(w.contains("#define PER 8\n#define EXACT 1"));
        assert!(w.contains("if (lane == 0) out[row] = k_store(k_lse(m, sum));"));
        assert!(!w.contains("k_block"));
        let b = logsumexp_source(DType::F32, LsePass::Block);
        assert!(b.contains("m = k_block<true>(m, scratch);"));
        assert!(b.contains("K_INLINE float k_load(float x) { return x; }"));
        let p = logsumexp_source(DType::F16, LsePass::Partial);
        assert!(p.contains("part[2 * blockIdx.x] = m; part[2 * blockIdx.x + 1] = sum;"));
        assert!(p.contains("k_f16_to_f32(x)"));
        let f = logsumexp_source(DType::BF16, LsePass::Final);
        assert!(f.contains("if (mc > -INFINITY) sum += q[2 * c + 1] * expf(mc - m);"));
        assert!(f.contains("k_f32_to_bf16(v)"));
    }

    #[test]
    fn complex_arg_sources() {
        let c = arg_source(ArgReduceOp::ArgMax, DType::C64, ArgPass::Whole);
        assert!(c.contains("typedef kc64 V;"));
        assert!(c.contains("const bool vn = k_isnan(v), wn = k_isnan(w);"));
        assert!(c.contains("return (v > w) || (v == w && i < j);"));
        assert!(c.contains("V best = V();") && !c.contains("(V)0"));
        let f = arg_source(ArgReduceOp::ArgMin, DType::F16, ArgPass::Whole);
        assert!(f.contains("typedef float V;"));
        assert!(f.contains("const bool vn = k_isnan_real(v), wn = k_isnan_real(w);"));
        let mut all = Vec::new();
        for (k, d) in [DType::C64, DType::F16, DType::U64, DType::Bool].into_iter().enumerate() {
            for pass in [ArgPass::Whole, ArgPass::Partial, ArgPass::Final] {
                let name = |op| format!("{op}_{k}_{pass:?}.cu");
                all.push((name("argmax"), arg_source(ArgReduceOp::ArgMax, d, pass)));
                all.push((name("argmin"), arg_source(ArgReduceOp::ArgMin, d, pass)));
            }
        }
        let split = arg_source(ArgReduceOp::ArgMax, DType::BF16, ArgPass::Partial);
        assert!(split.contains("const int64_t row = blockIdx.x / chunks"));
        crate::nvrtc::dump_sources(&all);
    }

    #[test]
    fn softmax_sources() {
        let w = softmax_source(DType::BF16, Some((8, true)));
        assert!(w.contains("typedef uint16_t S;"));
        assert!(w.contains("#define PER 8\n#define EXACT 1"));
        assert!(w.contains("float v[PER];"));
        assert!(!w.contains("k_block"));
        let b = softmax_source(DType::F32, None);
        assert!(b.contains("m = k_block<true>(m, scratch);"));
        assert!(b.contains("K_INLINE float k_load(float x) { return x; }"));
    }
}
