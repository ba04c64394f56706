//! Reductions over any axes: the input is viewed with the kept axes first and the reduced
//! axes last (copied row-major when that view is not contiguous), then each row is reduced
//! by a block (per-thread accumulation, warp shuffles, one shared-memory step). Long rows
//! with few of them are split into chunks whose partials a second launch combines, so a
//! full reduction still uses every multiprocessor.

use crate::alloc::{device_ptr, DEVICE};
use crate::elementwise::{run_program, single_op_program};
use crate::launch::{blocks_for, launch, Args, BLOCK};
use crate::nvrtc::{function, Function};
use crate::runtime::gpu;
use kiln_base::{bail, ArrayData, DType, Layout, Primitive, ReduceOp, Result};
use rustc_hash::FxHashMap;
use std::fmt::Write;
use std::sync::{Arc, Mutex, OnceLock};

const SYMBOL: &str = "kiln_reduce";

/// The accumulator type of a reduction over `dtype` (half floats accumulate in float;
/// integers in 64 bits, truncated on store, which equals wrapping arithmetic in the type).
fn acc_type(dtype: DType) -> &'static str {
    match dtype {
        DType::F16 | DType::BF16 | DType::F32 => "float",
        DType::U8 | DType::U16 | DType::U32 | DType::U64 => "uint64_t",
        _ => "int64_t",
    }
}

fn identity(op: ReduceOp, dtype: DType) -> String {
    let float = dtype.is_float();
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

fn combine(op: ReduceOp, float: bool) -> &'static str {
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

/// Source of one reduction stage: reads `input` elements (or accumulators when `partial_in`),
/// writes accumulators (`partial_out`) or `dtype` elements.
fn source(op: ReduceOp, dtype: DType, partial_in: bool, partial_out: bool) -> String {
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
    let mut s = String::from(kiln_codegen::cuda::PREAMBLE);
    let _ = write!(
        s,
        r#"
typedef {acc} Acc;
K_INLINE Acc k_load({tin} x) {{ return {load}; }}
K_INLINE {tout} k_store(Acc a) {{ return {store}; }}
K_INLINE Acc k_combine(Acc a, Acc b) {{ return {combine}; }}
extern "C" __global__ void {SYMBOL}(const int64_t rows, const int64_t len, const int64_t chunks,
                                   const {tin} *__restrict__ in, {tout} *__restrict__ out) {{
    __shared__ Acc partial[32];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = (blockDim.x + 31) >> 5;
    const int64_t per = (len + chunks - 1) / chunks;
    for (int64_t task = blockIdx.x; task < rows * chunks; task += gridDim.x) {{
        const int64_t row = task / chunks, chunk = task - row * chunks;
        const int64_t begin = chunk * per, end = begin + per < len ? begin + per : len;
        const {tin} *p = in + row * len;
        Acc a = {ident};
        for (int64_t j = begin + threadIdx.x; j < end; j += blockDim.x) a = k_combine(a, k_load(p[j]));
        for (int o = 16; o > 0; o >>= 1) a = k_combine(a, __shfl_down_sync(0xffffffffu, a, o));
        if (lane == 0) partial[warp] = a;
        __syncthreads();
        if (warp == 0) {{
            a = lane < warps ? partial[lane] : ({ident});
            for (int o = 16; o > 0; o >>= 1) a = k_combine(a, __shfl_down_sync(0xffffffffu, a, o));
            if (lane == 0) out[task] = k_store(a);
        }}
        __syncthreads();
    }}
}}
"#,
        combine = combine(op, dtype.is_float()),
        ident = format!("(Acc)({})", identity(op, dtype)),
    );
    s
}

type Key = (ReduceOp, DType, bool, bool);
static KERNELS: OnceLock<Mutex<FxHashMap<Key, Function>>> = OnceLock::new();

fn kernel(key: Key) -> Result<Function> {
    let kernels = KERNELS.get_or_init(|| Mutex::new(FxHashMap::default()));
    if let Some(f) = kernels.lock().unwrap_or_else(|e| e.into_inner()).get(&key) {
        return Ok(*f);
    }
    let f = function(&source(key.0, key.1, key.2, key.3), SYMBOL)?;
    kernels.lock().unwrap_or_else(|e| e.into_inner()).insert(key, f);
    Ok(f)
}

fn run_stage(
    key: Key,
    rows: usize,
    len: usize,
    chunks: usize,
    input: u64,
    output: u64,
) -> Result<()> {
    let mut args = Args::new();
    args.i64(rows as i64).i64(len as i64).i64(chunks as i64).ptr(input).ptr(output);
    let blocks = blocks_for((rows * chunks) as u64, 1);
    launch("reduce", kernel(key)?, blocks, BLOCK, 0, &mut args)
}

/// Reduces `x` over `axes`; the output keeps the reduced axes with size 1.
pub fn reduce(op: ReduceOp, axes: &[usize], x: &ArrayData, shape: &[usize]) -> Result<ArrayData> {
    let dtype = x.dtype;
    if dtype == DType::C64 {
        bail!(Type, "reduce", "Complex reductions are not supported on the GPU yet.");
    }
    let nd = x.layout.ndim();
    let kept: Vec<usize> = (0..nd).filter(|d| !axes.contains(d)).collect();
    let perm: Vec<usize> = kept.iter().chain(axes.iter()).copied().collect();
    let viewed = ArrayData { layout: x.layout.transpose(&perm), ..x.clone() };
    let rows: usize = kept.iter().map(|&d| x.layout.shape[d]).product();
    let len: usize = axes.iter().map(|&d| x.layout.shape[d]).product();
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
        return run_stage((op, dtype, false, false), rows, len, 1, in_ptr, out_ptr).map(|_| out);
    }
    let partials = DEVICE.alloc(rows * chunks * 8)?;
    let p = partials.as_ptr() as u64;
    run_stage((op, dtype, false, true), rows, len, chunks, in_ptr, p)?;
    run_stage((op, dtype, true, false), rows, chunks, 1, p, out_ptr)?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sources_accumulate_wide_and_store_narrow() {
        let s = source(ReduceOp::Sum, DType::BF16, false, false);
        assert!(s.contains("typedef float Acc;"));
        assert!(s.contains("K_INLINE Acc k_load(uint16_t x) { return k_bf16_to_f32(x); }"));
        assert!(s.contains("K_INLINE uint16_t k_store(Acc a) { return k_f32_to_bf16(a); }"));
        let p = source(ReduceOp::Max, DType::I8, false, true);
        assert!(p.contains("typedef int64_t Acc;"));
        assert!(p.contains("Acc a = (Acc)(-128);"));
        assert!(p.contains("K_INLINE int64_t k_store(Acc a) { return a; }"));
        let f = source(ReduceOp::Min, DType::F32, true, false);
        assert!(f.contains("(isnan(a) || a < b) ? a : b"));
        assert!(f.contains("const float *__restrict__ in"));
    }

    #[test]
    fn identities() {
        assert_eq!(identity(ReduceOp::Min, DType::U8), "255");
        assert_eq!(identity(ReduceOp::Max, DType::F16), "-INFINITY");
        assert_eq!(identity(ReduceOp::And, DType::Bool), "1");
    }
}
