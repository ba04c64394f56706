//! Reductions over any axes. When the reduced axes lead in memory (a sum over the batch of a
//! row-major array) threads walk columns in place. Otherwise the input is viewed with the
//! kept axes first and the reduced axes last (copied row-major when that view is not
//! contiguous) and each row is reduced by a warp (short rows) or a block (per-thread
//! accumulation, warp shuffles, one shared-memory step). Long rows or columns with few of
//! them are split into chunks whose partials a second launch combines, so a full reduction
//! still uses every multiprocessor.

use crate::alloc::{device_ptr, DEVICE};
use crate::elementwise::{run_program, single_op_program};
use crate::launch::{blocks_for, launch, Args, BLOCK};
use crate::nvrtc::KernelCache;
use crate::runtime::gpu;
use kiln_base::{bail, ArrayData, DType, Layout, Primitive, ReduceOp, Result};
use std::fmt::Write;
use std::sync::Arc;

const SYMBOL: &str = "kiln_reduce";

/// The accumulator type of a reduction over `dtype` (half floats accumulate in float;
/// integers in 64 bits, truncated on store, which equals wrapping arithmetic in the type).
pub(crate) fn acc_type(dtype: DType) -> &'static str {
    match dtype {
        DType::F16 | DType::BF16 | DType::F32 => "float",
        DType::C64 => "kc64",
        DType::U8 | DType::U16 | DType::U32 | DType::U64 => "uint64_t",
        _ => "int64_t",
    }
}

pub(crate) fn identity(op: ReduceOp, dtype: DType) -> String {
    let float = dtype.is_float();
    if dtype == DType::C64 {
        // Max and min start below / above every ordered value (lexicographic order).
        return match op {
            ReduceOp::Prod | ReduceOp::And => "k_c64(1.0f, 0.0f)",
            ReduceOp::Max => "k_c64(-INFINITY, -INFINITY)",
            ReduceOp::Min => "k_c64(INFINITY, INFINITY)",
            ReduceOp::Sum | ReduceOp::Or => "k_c64(0.0f, 0.0f)",
        }
        .into();
    }
    match op {
        ReduceOp::Sum | ReduceOp::Or => "0".into(),
        ReduceOp::Prod | ReduceOp::And => "1".into(),
        ReduceOp::Max if float => "-INFINITY".into(),
        ReduceOp::Min if float => "INFINITY".into(),
        ReduceOp::Max => match dtype {
            DType::Bool | DType::U8 | DType::U16 | DType::U32 | DType::U64 => "0".into(),
            DType::I8 => "-128".into(),
            DType::I16 => "-32768".into(),
            DType::I32 => "INT32_MIN".into(),
            _ => "INT64_MIN".into(),
        },
        ReduceOp::Min => match dtype {
            DType::Bool => "1".into(),
            DType::U8 => "255".into(),
            DType::U16 => "65535".into(),
            DType::U32 => "4294967295ull".into(),
            DType::U64 => "18446744073709551615ull".into(),
            DType::I8 => "127".into(),
            DType::I16 => "32767".into(),
            DType::I32 => "2147483647".into(),
            _ => "9223372036854775807ll".into(),
        },
    }
}

pub(crate) fn combine(op: ReduceOp, float: bool) -> &'static str {
    match op {
        ReduceOp::Sum => "a + b",
        ReduceOp::Prod => "a * b",
        ReduceOp::Max if float => "(isnan(a) || a > b) ? a : b",
        ReduceOp::Min if float => "(isnan(a) || a < b) ? a : b",
        ReduceOp::Max => "a > b ? a : b",
        ReduceOp::Min => "a < b ? a : b",
        ReduceOp::And => "(a != 0 && b != 0) ? 1 : 0",
        ReduceOp::Or => "(a != 0 || b != 0) ? 1 : 0",
    }
}

/// How a stage spreads its work: a block per (row, chunk) for long rows, a warp per row for
/// short ones, or a thread per (chunk, column) when the reduced axes lead in memory.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
enum Kind {
    Block,
    Warp,
    Columns,
}

/// Source of one reduction stage: reads `input` elements (or accumulators when `partial_in`),
/// writes accumulators (`partial_out`) or `dtype` elements.
fn source(op: ReduceOp, dtype: DType, partial_in: bool, partial_out: bool, kind: Kind) -> String {
    let acc = acc_type(dtype);
    let storage = kiln_codegen::c_type(dtype);
    let (tin, load) = if partial_in {
        (acc, "x".to_string())
    } else {
        let l = match dtype {
            DType::F16 => "k_f16_to_f32(x)".to_string(),
            DType::BF16 => "k_bf16_to_f32(x)".to_string(),
            _ => format!("({acc})x"),
        };
        (storage, l)
    };
    let (tout, store) = if partial_out {
        (acc, "a".to_string())
    } else {
        let s = match dtype {
            DType::F16 => "k_f32_to_f16(a)".to_string(),
            DType::BF16 => "k_f32_to_bf16(a)".to_string(),
            DType::Bool => "(a != 0)".to_string(),
            _ => format!("({storage})a"),
        };
        (storage, s)
    };
    let mut s = String::from(kiln_codegen::cuda::preamble());
    let _ = write!(
        s,
        r#"
typedef {acc} Acc;
#define IDENT ((Acc)({ident}))
K_INLINE Acc k_load({tin} x) {{ return {load}; }}
K_INLINE {tout} k_store(Acc a) {{ return {store}; }}
K_INLINE Acc k_combine(Acc a, Acc b) {{ return {combine}; }}
{kernel}"#,
        combine = match (op, dtype) {
            // Lexicographic and NaN-propagating, as kiln-cpu's maximum / minimum.
            (ReduceOp::Max, DType::C64) => "k_maximum(a, b)",
            (ReduceOp::Min, DType::C64) => "k_minimum(a, b)",
            _ => combine(op, dtype.is_float()),
        },
        ident = identity(op, dtype),
        kernel = match kind {
            Kind::Block => BLOCK_KERNEL,
            Kind::Warp => WARP_KERNEL,
            Kind::Columns => COLUMN_KERNEL,
        }
        .replace("TIN", tin)
        .replace("TOUT", tout),
    );
    s
}

/// Each block reduces one (row, chunk) at a time: per-thread strides, warp shuffles, one
/// shared-memory step.
const BLOCK_KERNEL: &str = r#"extern "C" __global__ void kiln_reduce(const int64_t rows, const int64_t len, const int64_t chunks,
                                   const TIN *__restrict__ in, TOUT *__restrict__ out) {
    __shared__ Acc partial[32];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = (blockDim.x + 31) >> 5;
    const int64_t per = (len + chunks - 1) / chunks;
    for (int64_t task = blockIdx.x; task < rows * chunks; task += gridDim.x) {
        const int64_t row = task / chunks, chunk = task - row * chunks;
        const int64_t begin = chunk * per, end = begin + per < len ? begin + per : len;
        const TIN *p = in + row * len;
        Acc a = IDENT;
        for (int64_t j = begin + threadIdx.x; j < end; j += blockDim.x) a = k_combine(a, k_load(p[j]));
        for (int o = 16; o > 0; o >>= 1) a = k_combine(a, __shfl_down_sync(0xffffffffu, a, o));
        if (lane == 0) partial[warp] = a;
        __syncthreads();
        if (warp == 0) {
            a = lane < warps ? partial[lane] : IDENT;
            for (int o = 16; o > 0; o >>= 1) a = k_combine(a, __shfl_down_sync(0xffffffffu, a, o));
            if (lane == 0) out[task] = k_store(a);
        }
        __syncthreads();
    }
}
"#;

/// Each warp reduces one row at a time (rows too short to occupy a block).
const WARP_KERNEL: &str = r#"extern "C" __global__ void kiln_reduce(const int64_t rows, const int64_t len, const int64_t chunks,
                                   const TIN *__restrict__ in, TOUT *__restrict__ out) {
    const int lane = threadIdx.x & 31;
    const int64_t warps = ((int64_t)gridDim.x * blockDim.x) >> 5;
    for (int64_t row = (blockIdx.x * (int64_t)blockDim.x + threadIdx.x) >> 5; row < rows; row += warps) {
        const TIN *p = in + row * len;
        Acc a = IDENT;
        for (int64_t j = lane; j < len; j += 32) a = k_combine(a, k_load(p[j]));
        for (int o = 16; o > 0; o >>= 1) a = k_combine(a, __shfl_down_sync(0xffffffffu, a, o));
        if (lane == 0) out[row] = k_store(a);
    }
}
"#;

/// The input is (len, rows) row-major: a thread per (chunk, column) walks its chunk of the
/// reduced rows, neighbouring threads reading neighbouring columns; output (chunks, rows).
const COLUMN_KERNEL: &str = r#"extern "C" __global__ void kiln_reduce(const int64_t rows, const int64_t len, const int64_t chunks,
                                   const TIN *__restrict__ in, TOUT *__restrict__ out) {
    const int64_t per = (len + chunks - 1) / chunks;
    for (int64_t t = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; t < rows * chunks;
         t += (int64_t)gridDim.x * blockDim.x) {
        const int64_t chunk = t / rows, col = t - chunk * rows;
        const int64_t begin = chunk * per, end = begin + per < len ? begin + per : len;
        Acc a = IDENT;
        for (int64_t r = begin; r < end; ++r) a = k_combine(a, k_load(in[r * rows + col]));
        out[t] = k_store(a);
    }
}
"#;

type Key = (ReduceOp, DType, bool, bool, Kind);
static KERNELS: KernelCache<Key> = KernelCache::new();

fn run_stage(
    key: Key,
    rows: usize,
    len: usize,
    chunks: usize,
    input: u64,
    output: u64,
) -> Result<()> {
    let f = KERNELS.get(&key, SYMBOL, || source(key.0, key.1, key.2, key.3, key.4))?;
    let mut args = Args::new();
    args.i64(rows as i64).i64(len as i64).i64(chunks as i64).ptr(input).ptr(output);
    let blocks = match key.4 {
        Kind::Block => blocks_for((rows * chunks) as u64, 1),
        Kind::Warp => blocks_for(rows as u64, BLOCK as u64 / 32),
        Kind::Columns => blocks_for((rows * chunks) as u64, BLOCK as u64),
    };
    launch("reduce", f, blocks, BLOCK, 0, &mut args)
}

/// Reduces `x` viewed as (len, rows) row-major over its first axis: in chunks of the rows
/// when there are too few columns to occupy the GPU, then over the chunks' partials.
fn reduce_columns(op: ReduceOp, x: &ArrayData, rows: usize, len: usize, out: u64) -> Result<()> {
    let dtype = x.dtype;
    let input = device_ptr(&x.buffer, x.layout.offset as isize, dtype.size());
    let threads = gpu()?.multiprocessors as usize * 2048;
    let chunks = (threads / rows.max(1)).clamp(1, (len / 16).max(1));
    if chunks == 1 {
        return run_stage((op, dtype, false, false, Kind::Columns), rows, len, 1, input, out);
    }
    let partials = DEVICE.alloc(rows * chunks * 8)?;
    let p = partials.as_ptr() as u64;
    run_stage((op, dtype, false, true, Kind::Columns), rows, len, chunks, input, p)?;
    run_stage((op, dtype, true, false, Kind::Columns), rows, chunks, 1, p, out)
}

/// Reduces `x` over `axes`; the output keeps the reduced axes with size 1.
pub fn reduce(op: ReduceOp, axes: &[usize], x: &ArrayData, shape: &[usize]) -> Result<ArrayData> {
    let dtype = x.dtype;
    if dtype == DType::C64 && matches!(op, ReduceOp::And | ReduceOp::Or) {
        bail!(Type, "reduce", "Logical reductions take bool inputs, got complex64.");
    }
    let nd = x.layout.ndim();
    let kept: Vec<usize> = (0..nd).filter(|d| !axes.contains(d)).collect();
    let perm: Vec<usize> = kept.iter().chain(axes.iter()).copied().collect();
    let viewed = ArrayData { layout: x.layout.transpose(&perm), ..x.clone() };
    let rows: usize = kept.iter().map(|&d| x.layout.shape[d]).product();
    let len: usize = axes.iter().map(|&d| x.layout.shape[d]).product();
    if len == 1 {
        // One element per output (a size-1 axis, as a gradient's sum over a group of one):
        // the values themselves, in one copy rather than a reduction per element.
        let copy = Arc::new(single_op_program(&Primitive::Copy, &[dtype], dtype).expect("copy"));
        let mut out = run_program(&copy, std::slice::from_ref(&viewed), &viewed.layout.shape)?;
        let mut out = out.remove(0);
        out.layout = Layout::contiguous(shape);
        return Ok(out);
    }
    let reduced_first: Vec<usize> = axes.iter().chain(kept.iter()).copied().collect();
    let columns = ArrayData { layout: x.layout.transpose(&reduced_first), ..x.clone() };
    if !viewed.layout.row_contiguous && columns.layout.row_contiguous && rows * len > 0 {
        let out = ArrayData {
            buffer: DEVICE.alloc(rows * dtype.size())?,
            layout: Layout::contiguous(shape),
            dtype,
        };
        reduce_columns(op, &columns, rows, len, out.buffer.as_ptr() as u64)?;
        return Ok(out);
    }
    let input = if viewed.layout.row_contiguous || rows * len == 0 {
        viewed
    } else {
        let copy = Arc::new(single_op_program(&Primitive::Copy, &[dtype], dtype).expect("copy"));
        run_program(&copy, std::slice::from_ref(&viewed), &viewed.layout.shape)?.remove(0)
    };
    let out = ArrayData {
        buffer: DEVICE.alloc(rows.max(1) * dtype.size())?,
        layout: Layout::contiguous(shape),
        dtype,
    };
    if rows == 0 {
        return Ok(out);
    }
    let in_ptr = device_ptr(&input.buffer, input.layout.offset as isize, dtype.size());
    let out_ptr = out.buffer.as_ptr() as u64;
    // Split long rows when there are too few rows to fill the GPU.
    let target = gpu()?.multiprocessors as usize * 8;
    let chunks = if rows >= target || len < 4 * BLOCK as usize * 8 {
        1
    } else {
        (target / rows).clamp(1, len / (BLOCK as usize * 8))
    };
    if chunks == 1 {
        let kind = if len <= 1024 { Kind::Warp } else { Kind::Block };
        return run_stage((op, dtype, false, false, kind), rows, len, 1, in_ptr, out_ptr)
            .map(|_| out);
    }
    let partials = DEVICE.alloc(rows * chunks * 8)?;
    let p = partials.as_ptr() as u64;
    run_stage((op, dtype, false, true, Kind::Block), rows, len, chunks, in_ptr, p)?;
    let kind = if chunks <= 1024 { Kind::Warp } else { Kind::Block };
    run_stage((op, dtype, true, false, kind), rows, chunks, 1, p, out_ptr)?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sources_accumulate_wide_and_store_narrow() {
        let s = source(ReduceOp::Sum, DType::BF16, false, false, Kind::Block);
        assert!(s.contains("typedef float Acc;"));
        assert!(s.contains("K_INLINE Acc k_load(uint16_t x) { return k_bf16_to_f32(x); }"));
        assert!(s.contains("K_INLINE uint16_t k_store(Acc a) { return k_f32_to_bf16(a); }"));
        let p = source(ReduceOp::Max, DType::I8, false, true, Kind::Warp);
        assert!(p.contains("typedef int64_t Acc;"));
        assert!(p.contains("#define IDENT ((Acc)(-128))"));
        assert!(p.contains("row += warps"));
        assert!(p.contains("K_INLINE int64_t k_store(Acc a) { return a; }"));
        let f = source(ReduceOp::Min, DType::F32, true, false, Kind::Columns);
        assert!(f.contains("(isnan(a) || a < b) ? a : b"));
        assert!(f.contains("const float *__restrict__ in"));
        assert!(f.contains("in[r * rows + col]"));
    }

    #[test]
    fn complex_sources_accumulate_in_kc64() {
        let s = source(ReduceOp::Sum, DType::C64, false, false, Kind::Block);
        assert!(s.contains("typedef kc64 Acc;"));
        assert!(s.contains("#define IDENT ((Acc)(k_c64(0.0f, 0.0f)))"));
        assert!(s.contains("K_INLINE Acc k_combine(Acc a, Acc b) { return a + b; }"));
        let m = source(ReduceOp::Max, DType::C64, true, false, Kind::Warp);
        assert!(m.contains("return k_maximum(a, b);"));
        let mut all = Vec::new();
        for (k, op) in
            [ReduceOp::Sum, ReduceOp::Prod, ReduceOp::Max, ReduceOp::Min].into_iter().enumerate()
        {
            for (j, kind) in [Kind::Block, Kind::Warp, Kind::Columns].into_iter().enumerate() {
                for (pin, pout) in [(false, false), (false, true), (true, false)] {
                    let name = format!("reduce_c64_{k}_{j}_{}{}.cu", pin as u8, pout as u8);
                    all.push((name, source(op, DType::C64, pin, pout, kind)));
                }
            }
        }
        crate::nvrtc::dump_sources(&all);
    }

    #[test]
    fn identities() {
        assert_eq!(identity(ReduceOp::Min, DType::U8), "255");
        assert_eq!(identity(ReduceOp::Max, DType::F16), "-INFINITY");
        assert_eq!(identity(ReduceOp::And, DType::Bool), "1");
    }
}
