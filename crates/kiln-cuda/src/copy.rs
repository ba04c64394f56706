//! Data movement between layouts: one strided copy kernel (any source layout into any
//! destination layout of the same shape, elements moved as raw bits of their width) serves
//! Concatenate, SliceUpdate's base copy and update, and the copies behind non-view bitcasts.

use crate::alloc::{device_ptr, DEVICE};
use crate::collapse::collapse_layouts;
use crate::launch::{blocks_for, launch, Args, BLOCK};
use crate::nvrtc::KernelCache;
use kiln_base::{bail, ArrayData, Buffer, DType, Layout, Result};
use std::fmt::Write;

const SYMBOL: &str = "kiln_copy";

/// The unsigned type of an element width in bytes: copies move bits, never values.
pub(crate) fn bits_type(width: usize) -> &'static str {
    match width {
        1 => "uint8_t",
        2 => "uint16_t",
        4 => "uint32_t",
        _ => "uint64_t",
    }
}

/// `dst[index] = src[index]` over `ndim` dims; the table holds the dims, then the source's
/// and the destination's element strides. Pairs of copies alike in shape and strides (a
/// layer's two KV-cache writes) run as one launch: element `e` of `pairs * n` is element
/// `e % n` of copy `e / n`.
fn source(ndim: usize, width: usize) -> String {
    let t = bits_type(width);
    let mut s = String::from(kiln_codegen::cuda::preamble());
    let _ = write!(
        s,
        r#"
struct KTable {{ int64_t v[{three}]; }};
extern "C" __global__ void {SYMBOL}(const int64_t n, const int64_t pairs,
                                   const {t} *__restrict__ src0, {t} *__restrict__ dst0,
                                   const {t} *__restrict__ src1, {t} *__restrict__ dst1,
                                   const KTable t) {{
    for (int64_t f = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; f < pairs * n;
         f += (int64_t)gridDim.x * blockDim.x) {{
        const bool second = f >= n;
        const int64_t e = second ? f - n : f;
        const {t} *__restrict__ src = second ? src1 : src0;
        {t} *__restrict__ dst = second ? dst1 : dst0;
        int64_t r = e, from = 0, to = 0;
        #pragma unroll
        for (int d = {last}; d >= 0; --d) {{
            const int64_t i = r % t.v[d];
            r /= t.v[d];
            from += i * t.v[{ndim} + d];
            to += i * t.v[{two} + d];
        }}
        dst[to] = src[from];
    }}
}}
"#,
        three = 3 * ndim,
        two = 2 * ndim,
        last = ndim - 1,
    );
    s
}

static KERNELS: KernelCache<(usize, usize)> = KernelCache::new();

/// Every variant's source for 1 to 4 collapsed dims (the offline NVRTC check).
#[cfg(test)]
pub(crate) fn all_sources() -> Vec<(String, String)> {
    let mut out = Vec::new();
    for ndim in 1..=4 {
        for width in [1, 2, 4, 8] {
            out.push((format!("copy_{ndim}_{width}"), source(ndim, width)));
        }
    }
    out
}

/// Copies the elements of `src` into `dst`'s buffer at `dst_layout` (same shape).
pub(crate) fn copy_into(src: &ArrayData, dst: &Buffer, dst_layout: &Layout) -> Result<()> {
    let shape = &src.layout.shape;
    if shape.as_slice() != dst_layout.shape.as_slice() {
        bail!(Runtime, "copy", "Copy from {shape:?} into {:?}.", dst_layout.shape);
    }
    let target = ArrayData { buffer: dst.clone(), layout: dst_layout.clone(), dtype: src.dtype };
    copy_pairs(&[(src, &target)])
}

/// Two copies alike (shape, dtype, and strides once collapsed: a layer's KV-cache writes of
/// k and v) in one launch, or `false` where they differ (nothing ran).
pub(crate) fn copy_two_into(pairs: [(&ArrayData, &ArrayData); 2]) -> Result<bool> {
    let [(s0, d0), (s1, d1)] = pairs;
    let shape = &s0.layout.shape;
    let alike = [s1, d0, d1].iter().all(|a| &a.layout.shape == shape && a.dtype == s0.dtype);
    let collapsed = |s: &ArrayData, d: &ArrayData| collapse_layouts(shape, &[&s.layout, &d.layout]);
    if !alike || collapsed(s0, d0) != collapsed(s1, d1) {
        return Ok(false);
    }
    copy_pairs(&pairs)?;
    Ok(true)
}

/// One launch copying each `(src, dst)` of `pairs` (one or two, alike).
fn copy_pairs(pairs: &[(&ArrayData, &ArrayData)]) -> Result<()> {
    let (src, dst) = pairs[0];
    let shape = &src.layout.shape;
    let n: usize = shape.iter().product();
    if n == 0 {
        return Ok(());
    }
    let width = src.dtype.size();
    let (dims, strides) = collapse_layouts(shape, &[&src.layout, &dst.layout]);
    let mut table = dims.clone();
    table.extend_from_slice(&strides[0]);
    table.extend_from_slice(&strides[1]);
    let f = KERNELS.get(&(dims.len(), width), SYMBOL, || source(dims.len(), width))?;
    let at = |a: &ArrayData| device_ptr(&a.buffer, a.layout.offset as isize, width);
    let (src1, dst1) = pairs.get(1).copied().unwrap_or((src, dst));
    let mut args = Args::new();
    args.i64(n as i64).i64(pairs.len() as i64);
    args.ptr(at(src)).ptr(at(dst)).ptr(at(src1)).ptr(at(dst1)).i64_struct(&table);
    let total = (n * pairs.len()) as u64;
    launch("copy", f, blocks_for(total, BLOCK as u64), BLOCK, 0, &mut args)
}

/// A fresh row-major buffer of `shape` elements of `dtype`.
pub(crate) fn empty(shape: &[usize], dtype: DType) -> Result<ArrayData> {
    let n: usize = shape.iter().product();
    Ok(ArrayData {
        buffer: DEVICE.alloc(n * dtype.size())?,
        layout: Layout::contiguous(shape),
        dtype,
    })
}

/// `x` itself when row-contiguous, else a row-major copy.
pub(crate) fn contiguous(x: &ArrayData) -> Result<ArrayData> {
    if x.layout.row_contiguous {
        return Ok(x.clone());
    }
    let out = empty(&x.layout.shape, x.dtype)?;
    copy_into(x, &out.buffer, &out.layout)?;
    Ok(out)
}

/// Inputs joined along `axis`, each copied into its place in a fresh output.
pub(crate) fn concatenate(inputs: &[ArrayData], axis: usize, shape: &[usize]) -> Result<ArrayData> {
    let Some(first) = inputs.first() else {
        bail!(Runtime, "concatenate", "No inputs.");
    };
    let out = empty(shape, first.dtype)?;
    let mut at = 0usize;
    for x in inputs {
        let place = Layout::new(
            x.layout.shape.clone(),
            out.layout.strides.clone(),
            at * out.layout.strides[axis] as usize,
        );
        copy_into(x, &out.buffer, &place)?;
        at += x.layout.shape[axis];
    }
    Ok(out)
}

/// A row-major copy of `base` with the strided region `slice` replaced by `update`.
pub(crate) fn slice_update(
    (start, step, len): (&[usize], &[isize], &[usize]),
    base: &ArrayData,
    update: &ArrayData,
    shape: &[usize],
) -> Result<ArrayData> {
    let out = empty(shape, base.dtype)?;
    copy_into(base, &out.buffer, &out.layout)?;
    copy_into(update, &out.buffer, &out.layout.slice(start, step, len))?;
    Ok(out)
}

/// The row-major elements of `x` (copied when not row-major already) seen through `layout`
/// as `dtype`: the non-view forms of View (a bitcast) and AsStrided.
pub(crate) fn relabel(x: &ArrayData, layout: Layout, dtype: DType) -> Result<ArrayData> {
    let dense = if x.layout.row_contiguous && x.layout.offset == 0 {
        x.clone()
    } else {
        let out = empty(&x.layout.shape, x.dtype)?;
        copy_into(x, &out.buffer, &out.layout)?;
        out
    };
    Ok(ArrayData { buffer: dense.buffer, layout, dtype })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copy_source_moves_bits_over_baked_dims() {
        let s = source(3, 2);
        assert!(s.contains("struct KTable { int64_t v[9]; };"));
        assert!(s.contains("const uint16_t *__restrict__ src"));
        assert!(s.contains("to += i * t.v[6 + d];"));
        assert!(s.contains("for (int d = 2; d >= 0; --d)"));
    }
}
