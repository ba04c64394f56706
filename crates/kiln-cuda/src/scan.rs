//! Cumulative ops (Scan) along one axis of a row-major copy seen as (outer, len, inner).
//! Along the last axis (inner == 1) a block scans each row tile by tile (a shared-memory
//! inclusive scan per tile plus the running carry); along other axes (and for complex64
//! max / min, whose combine is not associative) one thread walks each column in order,
//! reading neighbouring columns side by side. Accumulation types and
//! identities are the reductions' (half floats in float, integers in 64 bits, truncated on
//! store, complex64 in `kc64`); as on the CPU, a scan's first element starts the running
//! value as it is.

use crate::alloc::device_ptr;
use crate::copy::{contiguous, empty};
use crate::launch::{blocks_for, launch, Args, BLOCK};
use crate::nvrtc::KernelCache;
use crate::reduce::{acc_type, combine, identity};
use kiln_base::{bail, ArrayData, DType, Primitive, ReduceOp, Result, ScanOp};
use std::fmt::Write;

type Key = (ScanOp, DType, bool, bool, bool);

fn source((op, dtype, reverse, inclusive, rows): Key) -> String {
    let storage = kiln_codegen::c_type(dtype);
    let (load, store) = match dtype {
        DType::F16 => ("k_f16_to_f32(x)", "k_f32_to_f16(a)".to_string()),
        DType::BF16 => ("k_bf16_to_f32(x)", "k_f32_to_bf16(a)".to_string()),
        DType::Bool => ("(Acc)x", "(a != 0)".to_string()),
        _ => ("(Acc)x", format!("({storage})a")),
    };
    let reduce = match op {
        ScanOp::Sum => ReduceOp::Sum,
        ScanOp::Prod => ReduceOp::Prod,
        ScanOp::Max | ScanOp::LogAddExp => ReduceOp::Max,
        ScanOp::Min => ReduceOp::Min,
    };
    let combine = if dtype == DType::C64 {
        // The binary ops' complex forms (the kc64 operators): lexicographic, NaN-propagating
        // maximum / minimum as kiln-cpu's. LogAddExp never gets here: `scan` refuses it on
        // complex64, as the CPU does.
        match op {
            ScanOp::Max => "k_maximum(a, b)",
            ScanOp::Min => "k_minimum(a, b)",
            _ => combine(reduce, false),
        }
        .to_string()
    } else if op == ScanOp::LogAddExp {
        "(a != a || b != b) ? NAN : ((a > b ? b : a) == -INFINITY || (a > b ? a : b) == INFINITY) \
         ? (a > b ? a : b) : (a > b ? a : b) + log1pf(expf((a > b ? b : a) - (a > b ? a : b)))"
            .to_string()
    } else {
        combine(reduce, dtype.is_float()).to_string()
    };
    let at = if reverse { "len - 1 - j" } else { "j" };
    let kernel = if rows {
        let shown = if inclusive {
            "incl"
        } else {
            "threadIdx.x == 0 ? (has ? carry : IDENT) \
             : (has ? k_combine(carry, tile[threadIdx.x - 1]) : tile[threadIdx.x - 1])"
        };
        format!(
            r#"
extern "C" __global__ void kiln_scan(const int64_t outer, const int64_t len, const int64_t inner,
                                   const S *__restrict__ in, S *__restrict__ out) {{
    __shared__ Acc tile[{BLOCK}];
    for (int64_t row = blockIdx.x; row < outer; row += gridDim.x) {{
        const S *p = in + row * len;
        S *q = out + row * len;
        Acc carry = IDENT;
        bool has = false;
        for (int64_t base = 0; base < len; base += blockDim.x) {{
            const int64_t j = base + threadIdx.x;
            Acc v = j < len ? k_load(p[{at}]) : IDENT;
            tile[threadIdx.x] = v;
            __syncthreads();
            for (unsigned o = 1; o < blockDim.x; o <<= 1) {{
                const Acc w = threadIdx.x >= o ? tile[threadIdx.x - o] : v;
                __syncthreads();
                if (threadIdx.x >= o) {{ v = k_combine(w, v); tile[threadIdx.x] = v; }}
                __syncthreads();
            }}
            if (j < len) {{
                const Acc incl = has ? k_combine(carry, v) : v;
                q[{at}] = k_store({shown});
            }}
            const int64_t valid = len - base < (int64_t)blockDim.x ? len - base : (int64_t)blockDim.x;
            const Acc last = tile[valid - 1];
            __syncthreads();
            carry = has ? k_combine(carry, last) : last;
            has = true;
        }}
    }}
}}
"#
        )
    } else {
        let shown = if inclusive { "next" } else { "(j == 0 ? IDENT : acc)" };
        format!(
            r#"
extern "C" __global__ void kiln_scan(const int64_t outer, const int64_t len, const int64_t inner,
                                   const S *__restrict__ in, S *__restrict__ out) {{
    for (int64_t t = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; t < outer * inner;
         t += (int64_t)gridDim.x * blockDim.x) {{
        const int64_t o = t / inner, base = o * len * inner + (t - o * inner);
        Acc acc = IDENT;
        for (int64_t j = 0; j < len; ++j) {{
            const int64_t at = base + ({at}) * inner;
            const Acc v = k_load(in[at]);
            const Acc next = j == 0 ? v : k_combine(acc, v);
            out[at] = k_store({shown});
            acc = next;
        }}
    }}
}}
"#
        )
    };
    let mut s = String::from(kiln_codegen::cuda::preamble());
    let _ = write!(
        s,
        r#"
typedef {acc} Acc;
typedef {storage} S;
#define IDENT ((Acc)({ident}))
K_INLINE Acc k_load(S x) {{ return {load}; }}
K_INLINE S k_store(Acc a) {{ return {store}; }}
K_INLINE Acc k_combine(Acc a, Acc b) {{ return {combine}; }}
{kernel}"#,
        acc = acc_type(dtype),
        ident = identity(reduce, dtype),
    );
    s
}

static KERNELS: KernelCache<Key> = KernelCache::new();

pub(crate) fn scan(
    prim: &Primitive,
    (op, axis, reverse, inclusive): (ScanOp, usize, bool, bool),
    x: &ArrayData,
    shape: &[usize],
) -> Result<ArrayData> {
    let name = prim.name();
    if op == ScanOp::LogAddExp && !x.dtype.is_float() {
        bail!(Type, name, "Expected a float input, got {}.", x.dtype);
    }
    let out = empty(shape, x.dtype)?;
    if out.layout.size() == 0 {
        return Ok(out);
    }
    let input = contiguous(x)?;
    let outer: usize = shape[..axis].iter().product();
    let len = shape[axis];
    let inner: usize = shape[axis + 1..].iter().product();
    // complex64 max / min are not associative (kiln-cpu's `maximum` keeps a number over a
    // value whose imaginary part alone is NaN when its real part is larger), so their rows
    // are walked in order by one thread each, as the CPU does, never combined as a tree.
    let in_order = x.dtype == DType::C64 && matches!(op, ScanOp::Max | ScanOp::Min);
    let rows = inner == 1 && !in_order;
    let key = (op, x.dtype, reverse, inclusive, rows);
    let f = KERNELS.get(&key, "kiln_scan", || source(key))?;
    let size = x.dtype.size();
    let mut args = Args::new();
    args.i64(outer as i64)
        .i64(len as i64)
        .i64(inner as i64)
        .ptr(device_ptr(&input.buffer, input.layout.offset as isize, size))
        .ptr(device_ptr(&out.buffer, 0, size));
    let blocks = if rows {
        blocks_for(outer as u64, 1)
    } else {
        blocks_for((outer * inner) as u64, BLOCK as u64)
    };
    launch(name, f, blocks, BLOCK, 0, &mut args)?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scan_sources() {
        let rows = source((ScanOp::Sum, DType::BF16, false, false, true));
        assert!(rows.contains("typedef float Acc;"));
        assert!(rows.contains("__shared__ Acc tile[256];"));
        assert!(rows.contains("k_combine(carry, tile[threadIdx.x - 1])"));
        let cols = source((ScanOp::Max, DType::I8, true, true, false));
        assert!(cols.contains("#define IDENT ((Acc)(-128))"));
        assert!(cols.contains("base + (len - 1 - j) * inner"));
        let lae = source((ScanOp::LogAddExp, DType::F32, false, true, true));
        assert!(lae.contains("log1pf(expf("));
    }

    #[test]
    fn complex_scan_sources() {
        let sum = source((ScanOp::Sum, DType::C64, false, false, true));
        assert!(sum.contains("typedef kc64 Acc;\ntypedef kc64 S;"));
        assert!(sum.contains("#define IDENT ((Acc)(k_c64(0.0f, 0.0f)))"));
        assert!(sum.contains("return a + b;"));
        let prod = source((ScanOp::Prod, DType::C64, true, true, false));
        assert!(prod.contains("#define IDENT ((Acc)(k_c64(1.0f, 0.0f)))"));
        assert!(prod.contains("return a * b;"));
        let max = source((ScanOp::Max, DType::C64, false, false, false));
        assert!(max.contains("return k_maximum(a, b);"));
        assert!(max.contains("k_c64(-INFINITY, -INFINITY)"));
        let min = source((ScanOp::Min, DType::C64, true, false, true));
        assert!(min.contains("return k_minimum(a, b);"));
        let mut all = Vec::new();
        for (k, op) in [ScanOp::Sum, ScanOp::Prod, ScanOp::Max, ScanOp::Min].into_iter().enumerate()
        {
            for flags in 0..8 {
                let key = (op, DType::C64, flags & 1 == 1, flags & 2 == 2, flags & 4 == 4);
                all.push((format!("scan_c64_{k}_{flags}.cu"), source(key)));
            }
        }
        crate::nvrtc::dump_sources(&all);
    }
}
