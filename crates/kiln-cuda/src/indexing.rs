//! Gather and Scatter on the GPU. One thread per output (gather) or update (scatter)
//! element: its index position and place in the block come from a division, its start on
//! each indexed axis from the index arrays (read in their own integer dtype), with the
//! CPU's rules: gather clamps a block into range, scatter drops a block that does not fit.
//! Scatter's reductions are atomic read-modify-writes, so duplicate indices all count. A
//! plain scatter keeps the last update of duplicates, as the CPU does: a first pass claims
//! each written element for the highest update index (atomicMax), a second writes the
//! winners.

use crate::alloc::{device_ptr, DEVICE};
use crate::copy::{bits_type, contiguous, copy_into, empty};
use crate::launch::{blocks_for, launch, Args, BLOCK};
use crate::nvrtc::KernelCache;
use crate::runtime::{driver_error, gpu};
use cudarc::driver::result;
use kiln_base::{bail, ArrayData, DType, Result, ScatterReduce};
use std::fmt::Write;

/// `const I *__restrict__ idxK` parameters, one per index array.
fn index_params(indices: &[DType]) -> String {
    indices
        .iter()
        .enumerate()
        .map(|(k, d)| format!(", const {} *__restrict__ idx{k}", kiln_codegen::c_type(*d)))
        .collect()
}

/// Index `k` of position `i` as int64 (uint64 past the int64 range saturates: it is out of
/// range either way, as on the CPU), wrapped once when negative.
fn load_index(k: usize, dtype: DType, dim: &str) -> String {
    let raw = match dtype {
        DType::U64 => format!("(idx{k}[i] > 9223372036854775807ull ? (int64_t)9223372036854775807ll : (int64_t)idx{k}[i])"),
        _ => format!("(int64_t)idx{k}[i]"),
    };
    format!("int64_t v = {raw}; if (v < 0) v += {dim};")
}

/// Shared-by-both table: `ndim` dims of the array, per-dim extras, then the K axes.
fn table_decl(fields: &[&str], ndim: usize, k: usize) -> String {
    let mut s = String::from("struct KTable {");
    for f in fields {
        let _ = write!(s, " int64_t {f}[{ndim}];");
    }
    let _ = write!(s, " int64_t axis[{}]; }};", k.max(1));
    s
}

fn gather_source(ndim: usize, width: usize, indices: &[DType]) -> String {
    let t = bits_type(width);
    let mut starts = String::new();
    for (k, &d) in indices.iter().enumerate() {
        let _ = write!(
            starts,
            "
        {{
            const int64_t ax = t.axis[{k}], dim = t.shape[ax], hi = dim - t.slice[ax];
            {load}
            off += (v < 0 ? 0 : (v > hi ? hi : v)) * t.stride[ax];
        }}",
            load = load_index(k, d, "dim"),
        );
    }
    let mut s = String::from(kiln_codegen::cuda::preamble());
    let _ = write!(
        s,
        r#"
{table}
extern "C" __global__ void kiln_gather(const int64_t n, const int64_t block, const {t} *__restrict__ src,
                                     {t} *__restrict__ dst{params}, const KTable t) {{
    for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < n;
         e += (int64_t)gridDim.x * blockDim.x) {{
        const int64_t i = e / block;
        int64_t j = e - i * block, off = 0;
        #pragma unroll
        for (int d = {last}; d >= 0; --d) {{
            off += (j % t.slice[d]) * t.stride[d];
            j /= t.slice[d];
        }}{starts}
        dst[e] = src[off];
    }}
}}
"#,
        table = table_decl(&["shape", "stride", "slice"], ndim, indices.len()),
        params = index_params(indices),
        last = ndim - 1,
    );
    s
}

/// `k_combine(a, b)` of a scatter reduction in the element's storage type.
fn combine(reduce: ScatterReduce, dtype: DType) -> String {
    let (x, y) = ("a", "b");
    let arith = |op: &str| match dtype {
        DType::F16 | DType::BF16 => {
            let h = if dtype == DType::F16 { "f16" } else { "bf16" };
            let (a, b) = (format!("k_{h}_to_f32({x})"), format!("k_{h}_to_f32({y})"));
            let v = match op {
                "+" | "*" => format!("{a} {op} {b}"),
                f => format!("{f}({a}, {b})"),
            };
            format!("k_f32_to_{h}({v})")
        }
        DType::Bool => match op {
            "+" | "k_maximum" => format!("{x} || {y}"),
            _ => format!("{x} && {y}"),
        },
        // complex64: the `kc64` operators and overloads of the preamble.
        DType::F32 | DType::C64 => match op {
            "+" | "*" => format!("{x} {op} {y}"),
            f => format!("{f}({x}, {y})"),
        },
        // Integers wrap: the arithmetic runs in uint64 and truncates, which is modular.
        _ => match op {
            "+" | "*" => format!("(S)((uint64_t){x} {op} (uint64_t){y})"),
            f => format!("{f}({x}, {y})"),
        },
    };
    match reduce {
        ScatterReduce::None => "b".into(),
        ScatterReduce::Add => arith("+"),
        ScatterReduce::Prod => arith("*"),
        ScatterReduce::Max => arith("k_maximum"),
        ScatterReduce::Min => arith("k_minimum"),
    }
}

/// `k_update(p, u)`: a store, float atomicAdd, or a compare-and-swap loop on the aligned
/// word holding the element (any width, any reduction).
fn update_fn(reduce: ScatterReduce, dtype: DType) -> String {
    let storage = kiln_codegen::c_type(dtype);
    let width = dtype.size();
    let bits = bits_type(width);
    let head = format!(
        "typedef {storage} S;\ntypedef {bits} B;\nunion KU {{ S s; B b; }};\n\
         K_INLINE S k_combine(S a, S b) {{ return {}; }}\n",
        combine(reduce, dtype)
    );
    let body = match (reduce, dtype) {
        (ScatterReduce::None, _) => "*p = u;".to_string(),
        (ScatterReduce::Add, DType::F32) => "atomicAdd(p, u);".to_string(),
        _ if width == 8 => "unsigned long long *w = (unsigned long long *)p, old = *w, seen;
    do {
        seen = old;
        KU c, r; c.b = (B)seen; r.s = k_combine(c.s, u);
        old = atomicCAS(w, seen, (unsigned long long)r.b);
    } while (seen != old);"
            .to_string(),
        _ => format!(
            "unsigned int *w = (unsigned int *)((uint64_t)p & ~3ull);
    const int sh = (int)((uint64_t)p & 3ull) * 8;
    const unsigned int mask = {mask}u << sh;
    unsigned int old = *w, seen;
    do {{
        seen = old;
        KU c, r; c.b = (B)(seen >> sh); r.s = k_combine(c.s, u);
        old = atomicCAS(w, seen, (seen & ~mask) | (((unsigned int)r.b << sh) & mask));
    }} while (seen != old);",
            mask = match width {
                1 => "0xff",
                2 => "0xffff",
                _ => "0xffffffff",
            },
        ),
    };
    format!("{head}K_INLINE void k_update(S *p, S u) {{\n    {body}\n}}\n")
}

/// Which pass of a scatter a kernel does.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
enum Pass {
    /// Combine every update in (the reductions).
    Combine,
    /// Plain scatter, first pass: `win[off]` becomes the last update index writing `off`.
    Claim,
    /// Plain scatter, second pass: each winner writes its value.
    Write,
}

fn scatter_source(
    ndim: usize,
    reduce: ScatterReduce,
    dtype: DType,
    indices: &[DType],
    pass: Pass,
) -> String {
    let mut starts = String::new();
    for (k, &d) in indices.iter().enumerate() {
        let _ = write!(
            starts,
            "
        {{
            const int64_t ax = t.axis[{k}], dim = t.shape[ax];
            {load}
            if (v < 0 || v > dim - t.block[ax]) continue;
            #pragma unroll
            for (int d = 0; d < {ndim}; ++d) if (d == ax) start[d] = v;
        }}",
            load = load_index(k, d, "dim"),
        );
    }
    let mut s = String::from(kiln_codegen::cuda::preamble());
    let _ = write!(
        s,
        r#"
{update}
{table}
extern "C" __global__ void kiln_scatter(const int64_t n, const int64_t block, S *__restrict__ out,
                                      const S *__restrict__ upd, int *__restrict__ win{params},
                                      const KTable t) {{
    for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < n;
         e += (int64_t)gridDim.x * blockDim.x) {{
        const int64_t i = e / block;
        int64_t start[{ndim}] = {{0}};{starts}
        int64_t j = e - i * block, off = 0, stride = 1;
        #pragma unroll
        for (int d = {last}; d >= 0; --d) {{
            off += (j % t.block[d] + start[d]) * stride;
            j /= t.block[d];
            stride *= t.shape[d];
        }}
        {apply}
    }}
}}
"#,
        apply = match pass {
            Pass::Combine => "k_update(out + off, upd[e]);",
            Pass::Claim => "atomicMax(win + off, (int)e);",
            Pass::Write => "if (win[off] == (int)e) out[off] = upd[e];",
        },
        update = update_fn(reduce, dtype),
        table = table_decl(&["shape", "block"], ndim, indices.len()),
        params = index_params(indices),
        last = ndim - 1,
    );
    s
}

type GatherKey = (usize, usize, Vec<DType>);
type ScatterKey = (usize, ScatterReduce, DType, Vec<DType>, Pass);
static GATHERS: KernelCache<GatherKey> = KernelCache::new();
static SCATTERS: KernelCache<ScatterKey> = KernelCache::new();

/// The index arrays row-major, with their dtypes.
fn index_arrays(op: &'static str, xs: &[ArrayData]) -> Result<(Vec<ArrayData>, Vec<DType>)> {
    let arrays = xs.iter().map(contiguous).collect::<Result<Vec<_>>>()?;
    let dtypes: Vec<DType> = arrays.iter().map(|x| x.dtype).collect();
    if let Some(d) = dtypes.iter().find(|d| !d.is_integer()) {
        bail!(Value, op, "Indices must be integral, got {d}.");
    }
    Ok((arrays, dtypes))
}

/// `ndim` at least 1: a 0-d array is treated as shape (1,) with `pad` as its extra field.
fn dims(values: impl Iterator<Item = i64>, pad: i64) -> Vec<i64> {
    let v: Vec<i64> = values.collect();
    if v.is_empty() {
        vec![pad]
    } else {
        v
    }
}

fn axis_table(axes: &[usize]) -> Vec<i64> {
    dims(axes.iter().map(|&a| a as i64), 0)
}

/// `out[i, ...] = src[block at (idx_0[i], ..., idx_k[i]) on axes]`.
pub(crate) fn gather(
    axes: &[usize],
    slice_sizes: &[usize],
    inputs: &[ArrayData],
    shape: &[usize],
) -> Result<ArrayData> {
    let src = &inputs[0];
    let out = empty(shape, src.dtype)?;
    let n = out.layout.size();
    if n == 0 {
        return Ok(out);
    }
    let (indices, dtypes) = index_arrays("gather", &inputs[1..])?;
    let l = &src.layout;
    let mut table = dims(l.shape.iter().map(|&d| d as i64), 1);
    let ndim = table.len();
    table.extend(dims(l.strides.iter().map(|&s| s as i64), 0));
    table.extend(dims(slice_sizes.iter().map(|&s| s as i64), 1));
    table.extend(axis_table(axes));
    let width = src.dtype.size();
    let key = (ndim, width, dtypes);
    let f = GATHERS.get(&key, "kiln_gather", || gather_source(ndim, width, &key.2))?;
    let mut args = Args::new();
    args.i64(n as i64)
        .i64(slice_sizes.iter().product::<usize>() as i64)
        .ptr(device_ptr(&src.buffer, l.offset as isize, width))
        .ptr(device_ptr(&out.buffer, 0, width));
    for x in &indices {
        args.ptr(device_ptr(&x.buffer, x.layout.offset as isize, x.dtype.size()));
    }
    args.i64_struct(&table);
    launch("gather", f, blocks_for(n as u64, BLOCK as u64), BLOCK, 0, &mut args)?;
    Ok(out)
}

/// `out = dst; out[block at idx[i]] (op)= updates[i]`.
pub(crate) fn scatter(
    axes: &[usize],
    reduce: ScatterReduce,
    inputs: &[ArrayData],
    shape: &[usize],
) -> Result<ArrayData> {
    let op = kiln_base::Primitive::Scatter { axes: axes.to_vec(), reduce }.name();
    let (dst, updates) = (&inputs[0], &inputs[inputs.len() - 1]);
    let out = empty(shape, dst.dtype)?;
    copy_into(dst, &out.buffer, &out.layout)?;
    let upd = contiguous(updates)?;
    let block: Vec<usize> = upd.layout.shape[upd.layout.ndim() - shape.len()..].to_vec();
    let n = upd.layout.size();
    if n == 0 || out.layout.size() == 0 {
        return Ok(out);
    }
    let (indices, dtypes) = index_arrays(op, &inputs[1..inputs.len() - 1])?;
    let mut table = dims(shape.iter().map(|&d| d as i64), 1);
    let ndim = table.len();
    table.extend(dims(block.iter().map(|&b| b as i64), 1));
    table.extend(axis_table(axes));
    let width = dst.dtype.size();
    // Plain scatter orders duplicates through a claim buffer (int32 update indices).
    let ordered = reduce == ScatterReduce::None && n <= i32::MAX as usize;
    let claims = if ordered { Some(DEVICE.alloc(out.layout.size() * 4)?) } else { None };
    if let Some(c) = &claims {
        // SAFETY: a live device block of size() * 4 bytes (or more), on the one stream.
        unsafe {
            result::memset_d8_async(
                c.as_ptr() as u64,
                0xff,
                out.layout.size() * 4,
                gpu()?.stream()?,
            )
        }
        .map_err(|e| driver_error(op, e))?;
    }
    let passes: &[Pass] = if ordered { &[Pass::Claim, Pass::Write] } else { &[Pass::Combine] };
    for &pass in passes {
        let key = (ndim, reduce, dst.dtype, dtypes.clone(), pass);
        let f = SCATTERS
            .get(&key, "kiln_scatter", || scatter_source(ndim, reduce, key.2, &key.3, pass))?;
        let mut args = Args::new();
        args.i64(n as i64)
            .i64(block.iter().product::<usize>() as i64)
            .ptr(device_ptr(&out.buffer, 0, width))
            .ptr(device_ptr(&upd.buffer, upd.layout.offset as isize, width))
            .ptr(claims.as_ref().map_or(0, |c| c.as_ptr() as u64));
        for x in &indices {
            args.ptr(device_ptr(&x.buffer, x.layout.offset as isize, x.dtype.size()));
        }
        args.i64_struct(&table);
        launch(op, f, blocks_for(n as u64, BLOCK as u64), BLOCK, 0, &mut args)?;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gather_reads_each_index_dtype_and_clamps() {
        let s = gather_source(2, 4, &[DType::I32, DType::U64]);
        assert!(s.contains("struct KTable { int64_t shape[2]; int64_t stride[2]; int64_t slice[2]; int64_t axis[2]; };"));
        assert!(s.contains("const int32_t *__restrict__ idx0, const uint64_t *__restrict__ idx1"));
        assert!(s.contains("9223372036854775807ull"));
        assert!(s.contains("(v < 0 ? 0 : (v > hi ? hi : v))"));
    }

    #[test]
    fn complex_scatter_combines_with_kc64_operators() {
        let add = update_fn(ScatterReduce::Add, DType::C64);
        assert!(add.contains("typedef kc64 S;"));
        assert!(add.contains("return a + b;"));
        assert!(add.contains("atomicCAS(w, seen, (unsigned long long)r.b)"));
        let mut all = Vec::new();
        for (k, reduce) in [
            ScatterReduce::None,
            ScatterReduce::Add,
            ScatterReduce::Prod,
            ScatterReduce::Max,
            ScatterReduce::Min,
        ]
        .into_iter()
        .enumerate()
        {
            let pass = if reduce == ScatterReduce::None { Pass::Write } else { Pass::Combine };
            let src = scatter_source(2, reduce, DType::C64, &[DType::I32], pass);
            all.push((format!("scatter_c64_{k}.cu"), src));
        }
        all.push(("gather_c64.cu".into(), gather_source(2, 8, &[DType::I64])));
        crate::nvrtc::dump_sources(&all);
    }

    #[test]
    fn scatter_updates() {
        let add = scatter_source(3, ScatterReduce::Add, DType::F32, &[DType::I64], Pass::Combine);
        let claim = scatter_source(2, ScatterReduce::None, DType::F16, &[DType::I32], Pass::Claim);
        assert!(claim.contains("atomicMax(win + off, (int)e);"));
        assert!(add.contains("atomicAdd(p, u);"));
        assert!(add.contains("if (v < 0 || v > dim - t.block[ax]) continue;"));
        let bf = update_fn(ScatterReduce::Max, DType::BF16);
        assert!(bf.contains("k_f32_to_bf16(k_maximum(k_bf16_to_f32(a), k_bf16_to_f32(b)))"));
        assert!(bf.contains("const unsigned int mask = 0xffffu << sh;"));
        let i8 = update_fn(ScatterReduce::Prod, DType::I8);
        assert!(i8.contains("(S)((uint64_t)a * (uint64_t)b)"));
        assert!(i8.contains("0xffu << sh"));
        let i64 = update_fn(ScatterReduce::Add, DType::I64);
        assert!(i64.contains("unsigned long long *w"));
        assert_eq!(combine(ScatterReduce::Min, DType::Bool), "a && b");
        assert!(update_fn(ScatterReduce::None, DType::F16).contains("*p = u;"));
    }
}
