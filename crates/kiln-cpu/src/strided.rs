//! Walking inputs: output allocation, input validation, and the elementwise loops shared by
//! unary, binary, where, cast and copy. The loops walk runs of the innermost merged axis
//! (`walk.rs`), compiled for the CPU's SIMD level (`simd.rs`) and split over threads.

use crate::element::Element;
use crate::simd::{Exec, Plain};
use crate::walk::{par_chunks, Plan};
use bytemuck::Pod;
use kiln_base::shape::size_of;
use kiln_base::{bail, ensure, ArrayData, DeviceKind, Layout, Result, HOST};

/// Allocates a zeroed row-major output of `shape` and lets `fill` write it.
pub(crate) fn output<T: Element>(
    op: &'static str,
    shape: &[usize],
    fill: impl FnOnce(&mut [T]) -> Result<()>,
) -> Result<ArrayData> {
    alloc_output(op, shape, false, fill)
}

/// `output` for a `fill` that writes every element (the elementwise maps): the buffer is
/// not zeroed first (a reused block keeps stale bytes until `fill` overwrites them).
pub(crate) fn output_full<T: Element>(
    op: &'static str,
    shape: &[usize],
    fill: impl FnOnce(&mut [T]) -> Result<()>,
) -> Result<ArrayData> {
    alloc_output(op, shape, true, fill)
}

fn alloc_output<T: Element>(
    op: &'static str,
    shape: &[usize],
    overwrite: bool,
    fill: impl FnOnce(&mut [T]) -> Result<()>,
) -> Result<ArrayData> {
    let n = size_of(shape);
    let Some(nbytes) = n.checked_mul(std::mem::size_of::<T>()) else {
        bail!(Runtime, op, "Output of {n} elements is too large.");
    };
    let mut buffer =
        if overwrite { HOST.alloc_for_overwrite(nbytes)? } else { HOST.alloc(nbytes)? };
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

/// `out[i] = f(x[i])` in row-major order, split over threads
/// for long outputs; strided and broadcast inputs are read in place, run by run.
pub(crate) fn map1<T: Pod + Sync, U: Send>(
    x: &ArrayData,
    out: &mut [U],
    f: impl Fn(T) -> U + Sync,
) {
    map1_in::<Plain, T, U>(x, out, f)
}

/// `map1` with its loops run by `E` (`Simd` for the hot float kernels).
pub(crate) fn map1_in<E: Exec, T: Pod + Sync, U: Send>(
    x: &ArrayData,
    out: &mut [U],
    f: impl Fn(T) -> U + Sync,
) {
    let src = x.buffer.host_slice::<T>();
    let plan = Plan::new(&x.layout.shape, [&x.layout]);
    par_chunks(out, |chunk, start| {
        E::exec(
            #[inline(always)]
            || {
                plan.runs(
                    start,
                    start + chunk.len(),
                    #[inline(always)]
                    |pos, [i], [s], n| {
                        let dst = &mut chunk[pos - start..pos - start + n];
                        let i = i as usize;
                        match s {
                            1 => dst.iter_mut().zip(&src[i..i + n]).for_each(
                                #[inline(always)]
                                |(o, &a)| *o = f(a),
                            ),
                            _ => dst
                                .iter_mut()
                                .enumerate()
                                .for_each(|(t, o)| *o = f(src[at(i, t, s)])),
                        }
                    },
                )
            },
        )
    });
}

/// Buffer index of element `t` of a run starting at `i` with stride `s` (in bounds: every
/// input layout is validated against its buffer).
#[inline(always)]
fn at(i: usize, t: usize, s: isize) -> usize {
    (i as isize).wrapping_add((t as isize).wrapping_mul(s)) as usize
}

/// `out[i] = f(x[i], y[i])`; x and y have the output's shape (maybe broadcast views). Runs
/// where both are contiguous, or one is a broadcast value, get loops LLVM vectorises.
pub(crate) fn map2<A: Pod + Sync, B: Pod + Sync, U: Send>(
    x: &ArrayData,
    y: &ArrayData,
    out: &mut [U],
    f: impl Fn(A, B) -> U + Sync,
) {
    map2_in::<Plain, A, B, U>(x, y, out, f)
}

/// `map2` with its loops run by `E`.
pub(crate) fn map2_in<E: Exec, A: Pod + Sync, B: Pod + Sync, U: Send>(
    x: &ArrayData,
    y: &ArrayData,
    out: &mut [U],
    f: impl Fn(A, B) -> U + Sync,
) {
    let (sa, sb) = (x.buffer.host_slice::<A>(), y.buffer.host_slice::<B>());
    let plan = Plan::new(&x.layout.shape, [&x.layout, &y.layout]);
    par_chunks(out, |chunk, start| {
        E::exec(
            #[inline(always)]
            || {
                plan.runs(
                    start,
                    start + chunk.len(),
                    #[inline(always)]
                    |pos, [i, j], [si, sj], n| {
                        let dst = &mut chunk[pos - start..pos - start + n];
                        let (i, j) = (i as usize, j as usize);
                        match (si, sj) {
                            (1, 1) => {
                                dst.iter_mut().zip(&sa[i..i + n]).zip(&sb[j..j + n]).for_each(
                                    #[inline(always)]
                                    |((o, &a), &b)| *o = f(a, b),
                                )
                            }
                            (1, 0) => {
                                let b = sb[j];
                                dst.iter_mut().zip(&sa[i..i + n]).for_each(
                                    #[inline(always)]
                                    |(o, &a)| *o = f(a, b),
                                )
                            }
                            (0, 1) => {
                                let a = sa[i];
                                dst.iter_mut().zip(&sb[j..j + n]).for_each(
                                    #[inline(always)]
                                    |(o, &b)| *o = f(a, b),
                                )
                            }
                            _ => dst
                                .iter_mut()
                                .enumerate()
                                .for_each(|(t, o)| *o = f(sa[at(i, t, si)], sb[at(j, t, sj)])),
                        }
                    },
                )
            },
        )
    });
}

/// `out[i] = f(x[i], y[i], z[i])` (where).
pub(crate) fn map3<A: Pod + Sync, B: Pod + Sync, C: Pod + Sync, U: Send>(
    x: &ArrayData,
    y: &ArrayData,
    z: &ArrayData,
    out: &mut [U],
    f: impl Fn(A, B, C) -> U + Sync,
) {
    let (sa, sb, sc) =
        (x.buffer.host_slice::<A>(), y.buffer.host_slice::<B>(), z.buffer.host_slice::<C>());
    let plan = Plan::new(&x.layout.shape, [&x.layout, &y.layout, &z.layout]);
    par_chunks(out, |chunk, start| {
        plan.runs(start, start + chunk.len(), |pos, [i, j, k], [si, sj, sk], n| {
            let dst = &mut chunk[pos - start..pos - start + n];
            let (i, j, k) = (i as usize, j as usize, k as usize);
            if (si, sj, sk) == (1, 1, 1) {
                let abc = sa[i..i + n].iter().zip(&sb[j..j + n]).zip(&sc[k..k + n]);
                dst.iter_mut().zip(abc).for_each(|(o, ((&a, &b), &c))| *o = f(a, b, c));
            } else {
                dst.iter_mut().enumerate().for_each(|(t, o)| {
                    *o = f(sa[at(i, t, si)], sb[at(j, t, sj)], sc[at(k, t, sk)])
                });
            }
        })
    });
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
