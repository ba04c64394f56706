//! Sort and argsort along an axis (and Partition, which a full sort satisfies): a bitonic
//! network over each row padded to a power of two, on (value, index) pairs compared
//! lexicographically, so equal values keep their order (the result equals a stable sort) and
//! NaN goes last, as on the CPU. Rows of up to `SHARED_ROW` sort in shared memory, a block
//! per row; longer rows run the network in global memory, one launch per step. SearchSorted
//! is a binary search per value under the same order.

use crate::alloc::{device_ptr, DEVICE};
use crate::copy::{contiguous, copy_into, empty};
use crate::launch::{blocks_for, launch, Args, BLOCK};
use crate::nvrtc::KernelCache;
use kiln_base::{bail, ArrayData, DType, Layout, Result};

/// The longest row sorted in shared memory (its keys and indices take at most 24 KB).
const SHARED_ROW: usize = 2048;

/// The compare type: half floats compare as float, the rest as themselves.
fn key_type(dtype: DType) -> &'static str {
    match dtype {
        DType::F16 | DType::BF16 => "float",
        d => kiln_codegen::c_type(d),
    }
}

fn key_load(dtype: DType) -> &'static str {
    match dtype {
        DType::F16 => "k_f16_to_f32(x)",
        DType::BF16 => "k_bf16_to_f32(x)",
        _ => "x",
    }
}

/// The three-way order of two keys, `k_order(a, b)`: -1, 0 or 1 as `a` goes before, ties
/// with or goes after `b`: NaN after every number and NaNs tied (numpy's rule for floats;
/// -0.0 and 0.0 tie). complex64 orders lexicographically, real parts first, and is NaN when
/// either part is (MLX's order, and kiln-cpu's: numpy instead groups NaN values by which part
/// is NaN), so NaN values keep their input order at the end.
fn order(dtype: DType) -> String {
    let nan = |v: &str| match dtype {
        DType::C64 => format!("k_isnan({v})"),
        d if d.is_float() => format!("{v} != {v}"),
        _ => "false".into(),
    };
    format!(
        r#"
K_INLINE int k_order(K a, K b) {{
    const bool na = {na}, nb = {nb};
    if (na || nb) return na == nb ? 0 : (na ? 1 : -1);
    return a < b ? -1 : (b < a ? 1 : 0);
}}
"#,
        na = nan("a"),
        nb = nan("b"),
    )
}

/// The key types and order shared by every kernel here.
fn keys(dtype: DType) -> String {
    format!(
        "\ntypedef {storage} S;\ntypedef {key} K;\nK_INLINE K k_key(S x) {{ return {load}; }}{order}",
        storage = kiln_codegen::c_type(dtype),
        key = key_type(dtype),
        load = key_load(dtype),
        order = order(dtype),
    )
}

/// Helpers shared by both sort kernels: `k_before` orders (key, index) pairs, so ties keep
/// their input order; indices at or past `len` are padding and sort after everything.
fn header(dtype: DType) -> String {
    let mut s = keys(dtype);
    s.push_str(
        r#"K_INLINE bool k_before(K a, uint32_t ia, K b, uint32_t ib, uint32_t len) {
    if (ia >= len || ib >= len) return ia < ib;
    const int o = k_order(a, b);
    return o != 0 ? o < 0 : ia < ib;
}
"#,
    );
    s
}

/// A block sorts each row in shared memory: `p` (a power of two) keys, then `p` indices from
/// the next multiple of 8 keys (aligned for any key width).
fn shared_source(dtype: DType) -> String {
    let mut s = String::from(kiln_codegen::cuda::preamble());
    s.push_str(&header(dtype));
    s.push_str(
        r#"
extern "C" __global__ void kiln_sort(const int64_t rows, const int64_t len, const int64_t p,
                                   const S *__restrict__ in, S *__restrict__ values,
                                   uint32_t *__restrict__ indices) {
    extern __shared__ unsigned long long smem_[];
    K *key = (K *)smem_;
    uint32_t *ix = (uint32_t *)(key + ((p + 7) & ~7ll));  /* 8-byte aligned after the keys */
    for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
        const S *src = in + row * len;
        for (int64_t i = threadIdx.x; i < p; i += blockDim.x) {
            ix[i] = (uint32_t)i;
            key[i] = i < len ? k_key(src[i]) : K();
        }
        __syncthreads();
        for (int64_t k = 2; k <= p; k <<= 1) {
            for (int64_t j = k >> 1; j > 0; j >>= 1) {
                for (int64_t i = threadIdx.x; i < p; i += blockDim.x) {
                    const int64_t l = i ^ j;
                    if (l > i) {
                        const bool up = (i & k) == 0;
                        const bool swap = up ? k_before(key[l], ix[l], key[i], ix[i], (uint32_t)len)
                                             : k_before(key[i], ix[i], key[l], ix[l], (uint32_t)len);
                        if (swap) {
                            const K t = key[i]; key[i] = key[l]; key[l] = t;
                            const uint32_t u = ix[i]; ix[i] = ix[l]; ix[l] = u;
                        }
                    }
                }
                __syncthreads();
            }
        }
        for (int64_t i = threadIdx.x; i < len; i += blockDim.x) {
            if (indices) indices[row * len + i] = ix[i];
            if (values) values[row * len + i] = src[ix[i]];
        }
        __syncthreads();
    }
}
"#,
    );
    s
}

/// The same network in global memory for long rows: `phase` 0 fills the pairs, 1 runs the
/// step (k, j) over every element, 2 writes the results.
fn global_source(dtype: DType) -> String {
    let mut s = String::from(kiln_codegen::cuda::preamble());
    s.push_str(&header(dtype));
    s.push_str(
        r#"
extern "C" __global__ void kiln_sort(const int64_t rows, const int64_t len, const int64_t p,
                                   const S *__restrict__ in, S *__restrict__ values,
                                   uint32_t *__restrict__ indices, K *__restrict__ key,
                                   uint32_t *__restrict__ ix, const int phase, const int64_t k,
                                   const int64_t j) {
    for (int64_t t = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; t < rows * p;
         t += (int64_t)gridDim.x * blockDim.x) {
        const int64_t row = t / p, i = t - row * p;
        const S *src = in + row * len;
        K *rk = key + row * p;
        uint32_t *ri = ix + row * p;
        if (phase == 0) {
            ri[i] = (uint32_t)i;
            rk[i] = i < len ? k_key(src[i]) : K();
        } else if (phase == 1) {
            const int64_t l = i ^ j;
            if (l > i) {
                const bool up = (i & k) == 0;
                const bool swap = up ? k_before(rk[l], ri[l], rk[i], ri[i], (uint32_t)len)
                                     : k_before(rk[i], ri[i], rk[l], ri[l], (uint32_t)len);
                if (swap) {
                    const K a = rk[i]; rk[i] = rk[l]; rk[l] = a;
                    const uint32_t u = ri[i]; ri[i] = ri[l]; ri[l] = u;
                }
            }
        } else if (i < len) {
            if (indices) indices[row * len + i] = ri[i];
            if (values) values[row * len + i] = src[ri[i]];
        }
    }
}
"#,
    );
    s
}

/// Binary search of each value in a sorted 1-d sequence under the same order (NaN last,
/// equal values equal): the count of elements before it (`RIGHT`: not after it).
fn search_source(dtype: DType, right: bool) -> String {
    format!(
        r#"{preamble}{keys}
extern "C" __global__ void kiln_searchsorted(const int64_t n, const int64_t len, const S *__restrict__ seq,
                                           const S *__restrict__ values, uint32_t *__restrict__ out) {{
    for (int64_t t = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; t < n;
         t += (int64_t)gridDim.x * blockDim.x) {{
        const K v = k_key(values[t]);
        int64_t lo = 0, hi = len;
        while (lo < hi) {{
            const int64_t mid = lo + (hi - lo) / 2;
            const int o = k_order(k_key(seq[mid]), v);
            if ({before}) lo = mid + 1; else hi = mid;
        }}
        out[t] = (uint32_t)lo;
    }}
}}
"#,
        preamble = kiln_codegen::cuda::preamble(),
        keys = keys(dtype),
        before = if right { "o <= 0" } else { "o < 0" },
    )
}

static SEARCHES: KernelCache<(DType, bool)> = KernelCache::new();

/// For each of `values`, its uint32 insertion index into the sorted 1-d `seq`.
pub(crate) fn search_sorted(
    right: bool,
    seq: &ArrayData,
    values: &ArrayData,
    shape: &[usize],
) -> Result<ArrayData> {
    let op = "searchsorted";
    let len = seq.layout.size();
    if len > u32::MAX as usize {
        bail!(Value, op, "Sequence of {len} elements is too long for uint32.");
    }
    let out = empty(shape, DType::U32)?;
    let n = out.layout.size();
    if n == 0 {
        return Ok(out);
    }
    let (seq, values) = (contiguous(seq)?, contiguous(values)?);
    let dtype = seq.dtype;
    let f = SEARCHES.get(&(dtype, right), "kiln_searchsorted", || search_source(dtype, right))?;
    let mut args = Args::new();
    args.i64(n as i64)
        .i64(len as i64)
        .ptr(device_ptr(&seq.buffer, seq.layout.offset as isize, dtype.size()))
        .ptr(device_ptr(&values.buffer, values.layout.offset as isize, dtype.size()))
        .ptr(device_ptr(&out.buffer, 0, 4));
    launch(op, f, blocks_for(n as u64, BLOCK as u64), BLOCK, 0, &mut args)?;
    Ok(out)
}

static KERNELS: KernelCache<(DType, bool)> = KernelCache::new();

/// Sorts `x` along `axis`: the values (`arg` false) or their uint32 indices (`arg` true).
pub(crate) fn sort(
    op: &'static str,
    axis: usize,
    arg: bool,
    x: &ArrayData,
    shape: &[usize],
) -> Result<ArrayData> {
    let out_dtype = if arg { DType::U32 } else { x.dtype };
    let out = empty(shape, out_dtype)?;
    let len = shape[axis];
    let n = out.layout.size();
    if n == 0 {
        return Ok(out);
    }
    if len > u32::MAX as usize {
        bail!(Value, op, "Rows longer than 2^32 elements cannot be sorted on the GPU.");
    }
    let rows = n / len;
    // Rows along the last axis, row-major.
    let nd = shape.len();
    let perm: Vec<usize> = (0..nd).filter(|&d| d != axis).chain([axis]).collect();
    let input = contiguous(&ArrayData { layout: x.layout.transpose(&perm), ..x.clone() })?;
    let sorted = if axis == nd - 1 { out.clone() } else { empty(&input.layout.shape, out_dtype)? };
    let p = len.next_power_of_two();
    let (values, indices) =
        if arg { (0, sorted.buffer.as_ptr() as u64) } else { (sorted.buffer.as_ptr() as u64, 0) };
    let in_ptr = device_ptr(&input.buffer, input.layout.offset as isize, x.dtype.size());
    let shared = p <= SHARED_ROW;
    let f = KERNELS.get(&(x.dtype, shared), "kiln_sort", || {
        if shared {
            shared_source(x.dtype)
        } else {
            global_source(x.dtype)
        }
    })?;
    // Half floats compare as float; complex64's key is its (re, im) pair.
    let key_size = match x.dtype {
        DType::F16 | DType::BF16 => 4,
        d => d.size(),
    };
    if shared {
        let mut args = Args::new();
        args.i64(rows as i64).i64(len as i64).i64(p as i64).ptr(in_ptr).ptr(values).ptr(indices);
        let smem = (p.next_multiple_of(8) * key_size + p * 4) as u32;
        launch(op, f, blocks_for(rows as u64, 1), BLOCK, smem, &mut args)?;
    } else {
        let keys = DEVICE.alloc(rows * p * key_size)?;
        let ix = DEVICE.alloc(rows * p * 4)?;
        let blocks = blocks_for((rows * p) as u64, BLOCK as u64);
        let step = |phase: i64, k: usize, j: usize| -> Result<()> {
            let mut args = Args::new();
            args.i64(rows as i64).i64(len as i64).i64(p as i64).ptr(in_ptr).ptr(values);
            args.ptr(indices).ptr(keys.as_ptr() as u64).ptr(ix.as_ptr() as u64);
            // `phase` is an int parameter: its word's low half, little-endian.
            args.i64(phase).i64(k as i64).i64(j as i64);
            launch(op, f, blocks, BLOCK, 0, &mut args)
        };
        step(0, 0, 0)?;
        let mut k = 2;
        while k <= p {
            let mut j = k / 2;
            while j > 0 {
                step(1, k, j)?;
                j /= 2;
            }
            k *= 2;
        }
        step(2, 0, 0)?;
    }
    if axis != nd - 1 {
        // Back from rows along the last axis to the axis's place.
        let mut inverse = vec![0; nd];
        for (i, &d) in perm.iter().enumerate() {
            inverse[d] = i;
        }
        let back = ArrayData { layout: sorted.layout.transpose(&inverse), ..sorted };
        copy_into(&back, &out.buffer, &Layout::contiguous(shape))?;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sort_sources() {
        let h = shared_source(DType::BF16);
        assert!(h.contains("typedef float K;"));
        assert!(h.contains("K_INLINE K k_key(S x) { return k_bf16_to_f32(x); }"));
        assert!(h.contains("const bool na = a != a, nb = b != b;"));
        assert!(h.contains("(key + ((p + 7) & ~7ll))"));
        let g = global_source(DType::I64);
        assert!(g.contains("typedef int64_t K;"));
        assert!(g.contains("const bool na = false, nb = false;"));
        assert!(g.contains("phase == 1"));
        let r = search_source(DType::F16, true);
        assert!(r.contains("if (o <= 0) lo = mid + 1; else hi = mid;"));
        assert!(r.contains("const bool na = a != a, nb = b != b;"));
        assert!(search_source(DType::I32, false).contains("if (o < 0) lo = mid + 1;"));
    }

    #[test]
    fn complex_sort_sources() {
        let c = shared_source(DType::C64);
        assert!(c.contains("typedef kc64 S;\ntypedef kc64 K;"));
        assert!(c.contains("const bool na = k_isnan(a), nb = k_isnan(b);"));
        assert!(c.contains("return a < b ? -1 : (b < a ? 1 : 0);"));
        // Padding keys are value-initialised (no `(K)0` cast, which a struct refuses).
        assert!(c.contains(": K();") && !c.contains("(K)0"));
        assert!(global_source(DType::C64).contains("rk[i] = i < len ? k_key(src[i]) : K();"));
        assert!(search_source(DType::C64, false).contains("k_order(k_key(seq[mid]), v)"));
        // Integers need no NaN rule.
        assert!(shared_source(DType::U8).contains("const bool na = false, nb = false;"));
        let mut all = Vec::new();
        for d in [DType::C64, DType::BF16, DType::I32] {
            all.push((format!("sort_shared_{d}.cu"), shared_source(d)));
            all.push((format!("sort_global_{d}.cu"), global_source(d)));
            all.push((format!("searchsorted_{d}.cu"), search_source(d, true)));
        }
        crate::nvrtc::dump_sources(&all);
    }
}
