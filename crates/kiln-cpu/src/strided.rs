//! Walking inputs: output allocation, input validation, and the elementwise loops shared by
//! unary, binary, where, cast and copy. Each loop has a flat fast path for row-contiguous
//! (or uniform, all-stride-0) operands beside the general strided walk.

use crate::element::Element;
use bytemuck::Pod;
use kiln_base::shape::size_of;
use kiln_base::{bail, ensure, ArrayData, DeviceKind, Layout, Result, HOST};
use rayon::prelude::*;

/// Allocates a zeroed row-major output of `shape` and lets `fill` write it.
pub(crate) fn output<T: Element>(
    op: &'static str,
    shape: &[usize],
    fill: impl FnOnce(&mut [T]) -> Result<()>,
) -> Result<ArrayData> {
    let n = size_of(shape);
    let Some(nbytes) = n.checked_mul(std::mem::size_of::<T>()) else {
        bail!(Runtime, op, "Output of {n} elements is too large.");
    };
    let mut buffer = HOST.alloc(nbytes)?;
    let Some(out) = buffer.host_slice_mut::<T>() else {
        bail!(Runtime, op, "Fresh output buffer is shared.");
    };
    fill(&mut out[..n])?;
    Ok(ArrayData { buffer, layout: Layout::contiguous(shape), dtype: T::DTYPE })
}

/// Checks that every element the layout addresses lies inside a host buffer, so kernels'
/// indexing can never go out of bounds (no panics on malformed inputs).
pub(crate) fn validate(op: &'static str, x: &ArrayData) -> Result<()> {
    let l = &x.layout;
    ensure!(x.buffer.device().kind == DeviceKind::Cpu, Runtime, op, "Input is not in host memory.");
    ensure!(l.shape.len() == l.strides.len(), Runtime, op, "Layout rank mismatch.");
    if l.size() == 0 {
        return Ok(());
    }
    let (mut lo, mut hi) = (l.offset as i128, l.offset as i128);
    for (&d, &s) in l.shape.iter().zip(&l.strides) {
        let span = (d as i128 - 1) * s as i128;
        if span < 0 {
            lo += span;
        } else {
            hi += span;
        }
    }
    let len = (x.buffer.nbytes() / x.dtype.size()) as i128;
    ensure!(lo >= 0 && hi < len, Runtime, op, "Layout addresses memory outside its buffer.");
    Ok(())
}

/// The input's elements in row-major order as one slice, when the layout is row-contiguous.
pub(crate) fn flat<T: Pod>(x: &ArrayData) -> Option<&[T]> {
    let l = &x.layout;
    let src = x.buffer.host_slice::<T>();
    if l.size() == 0 {
        return Some(&[]);
    }
    l.row_contiguous.then(|| &src[l.offset..l.offset + l.size()])
}

/// The single value of an input whose every element is one buffer slot (a broadcast scalar).
fn uniform<T: Pod>(x: &ArrayData) -> Option<T> {
    let l = &x.layout;
    let one = l.size() > 0 && l.shape.iter().zip(&l.strides).all(|(&d, &s)| d == 1 || s == 0);
    one.then(|| x.buffer.host_slice::<T>()[l.offset])
}

/// Contiguous loops longer than this are split over the rayon pool (a task costs a few
/// microseconds; below this the loop is faster alone).
const PARALLEL_ELEMENTS: usize = 1 << 15;

/// `out[i] = f(x[i])` in row-major order.
pub(crate) fn map1<T: Pod + Sync, U: Send>(
    x: &ArrayData,
    out: &mut [U],
    f: impl Fn(T) -> U + Sync,
) {
    if let Some(src) = flat::<T>(x) {
        if out.len() >= PARALLEL_ELEMENTS {
            out.par_chunks_mut(PARALLEL_ELEMENTS)
                .zip(src.par_chunks(PARALLEL_ELEMENTS))
                .for_each(|(o, s)| o.iter_mut().zip(s).for_each(|(o, &a)| *o = f(a)));
            return;
        }
        for (o, &a) in out.iter_mut().zip(src) {
            *o = f(a);
        }
    } else {
        let src = x.buffer.host_slice::<T>();
        for (o, i) in out.iter_mut().zip(x.layout.indices()) {
            *o = f(src[i]);
        }
    }
}

/// `out[i] = f(x[i], y[i])`; x and y have the output's shape (maybe broadcast views).
pub(crate) fn map2<A: Pod + Sync, B: Pod + Sync, U: Send>(
    x: &ArrayData,
    y: &ArrayData,
    out: &mut [U],
    f: impl Fn(A, B) -> U + Sync,
) {
    if let (Some(a), Some(b)) = (flat::<A>(x), flat::<B>(y)) {
        if out.len() >= PARALLEL_ELEMENTS {
            let n = PARALLEL_ELEMENTS;
            out.par_chunks_mut(n).zip(a.par_chunks(n)).zip(b.par_chunks(n)).for_each(
                |((o, a), b)| o.iter_mut().zip(a).zip(b).for_each(|((o, &a), &b)| *o = f(a, b)),
            );
            return;
        }
        for ((o, &a), &b) in out.iter_mut().zip(a).zip(b) {
            *o = f(a, b);
        }
    } else if let (Some(a), Some(b)) = (flat::<A>(x), uniform::<B>(y)) {
        for (o, &a) in out.iter_mut().zip(a) {
            *o = f(a, b);
        }
    } else if let (Some(a), Some(b)) = (uniform::<A>(x), flat::<B>(y)) {
        for (o, &b) in out.iter_mut().zip(b) {
            *o = f(a, b);
        }
    } else {
        let (sa, sb) = (x.buffer.host_slice::<A>(), y.buffer.host_slice::<B>());
        let idx = x.layout.indices().zip(y.layout.indices());
        for (o, (i, j)) in out.iter_mut().zip(idx) {
            *o = f(sa[i], sb[j]);
        }
    }
}

/// `out[i] = f(x[i], y[i], z[i])` (where): contiguous fast path, else strided.
pub(crate) fn map3<A: Pod, B: Pod, C: Pod, U>(
    x: &ArrayData,
    y: &ArrayData,
    z: &ArrayData,
    out: &mut [U],
    f: impl Fn(A, B, C) -> U,
) {
    if let (Some(a), Some(b), Some(c)) = (flat::<A>(x), flat::<B>(y), flat::<C>(z)) {
        for (((o, &a), &b), &c) in out.iter_mut().zip(a).zip(b).zip(c) {
            *o = f(a, b, c);
        }
        return;
    }
    let (sa, sb, sc) =
        (x.buffer.host_slice::<A>(), y.buffer.host_slice::<B>(), z.buffer.host_slice::<C>());
    let idx = x.layout.indices().zip(y.layout.indices()).zip(z.layout.indices());
    for (o, ((i, j), k)) in out.iter_mut().zip(idx) {
        *o = f(sa[i], sb[j], sc[k]);
    }
}

/// The input's elements in row-major order: borrowed when row-contiguous, else gathered.
pub(crate) fn dense<T: Pod>(x: &ArrayData) -> std::borrow::Cow<'_, [T]> {
    match flat::<T>(x) {
        Some(s) => std::borrow::Cow::Borrowed(s),
        None => {
            let src = x.buffer.host_slice::<T>();
            std::borrow::Cow::Owned(x.layout.indices().map(|i| src[i]).collect())
        }
    }
}
