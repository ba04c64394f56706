//! Vectorised, threaded reductions for the two common layouts: each output's group a
//! contiguous run (reducing trailing axes), or whole contiguous rows folded together
//! (reducing leading axes). Folds keep `LANES` independent partial results (so the loop
//! vectorises without reassociating any one sum), combine them pairwise, and combine blocks
//! with `cascade`: float sums stay accurate to O(log n) growth.

use super::cascade;
use crate::element::Element;
use crate::scalar::Num;
use crate::simd;
use crate::walk::PARALLEL_ELEMENTS;
use kiln_base::Layout;
use rayon::prelude::*;

const LANES: usize = 16;
/// Elements folded by the lanes before block results are combined.
const BLOCK: usize = 1024;

/// `f` over one block: lane-wise, then the lanes pairwise.
#[inline(always)]
fn fold_block<T: Element, F: Fn(T::Acc, T::Acc) -> T::Acc>(block: &[T], f: &F) -> T::Acc {
    if block.len() < 2 * LANES {
        let mut it = block.iter().map(|v| v.to_acc());
        let first = it.next().unwrap_or(T::Acc::ZERO);
        return it.fold(first, f);
    }
    let mut lanes: [T::Acc; LANES] = std::array::from_fn(|l| block[l].to_acc());
    let mut chunks = block[LANES..].chunks_exact(LANES);
    for c in chunks.by_ref() {
        for (a, v) in lanes.iter_mut().zip(c) {
            *a = f(*a, v.to_acc());
        }
    }
    for (a, v) in lanes.iter_mut().zip(chunks.remainder()) {
        *a = f(*a, v.to_acc());
    }
    let mut width = LANES;
    while width > 1 {
        width /= 2;
        let (lo, hi) = lanes.split_at_mut(width);
        for (a, b) in lo.iter_mut().zip(&hi[..width]) {
            *a = f(*a, *b);
        }
    }
    lanes[0]
}

/// `f` over a non-empty run, split over threads when long.
fn fold_run<T: Element, F: Fn(T::Acc, T::Acc) -> T::Acc + Sync>(run: &[T], f: &F) -> T::Acc {
    let seq = |r: &[T]| {
        simd::run(
            #[inline(always)]
            || cascade(r.chunks(BLOCK).map(|b| fold_block(b, f)), f),
        )
        .unwrap_or(T::Acc::ZERO)
    };
    if run.len() < 4 * PARALLEL_ELEMENTS {
        return seq(run);
    }
    let parts: Vec<T::Acc> = run.par_chunks(PARALLEL_ELEMENTS).map(seq).collect();
    cascade(parts.into_iter(), f).unwrap_or(T::Acc::ZERO)
}

/// `out[i] = f over base[i * group .. (i + 1) * group]` (group > 0).
pub(super) fn runs<T: Element, F: Fn(T::Acc, T::Acc) -> T::Acc + Copy + Send + Sync>(
    base: &[T],
    group: usize,
    out: &mut [T],
    f: F,
) {
    let per_task = (PARALLEL_ELEMENTS / group).max(1);
    let body = |(o, b): (&mut [T], &[T])| {
        for (o, run) in o.iter_mut().zip(b.chunks(group)) {
            *o = T::from_acc(fold_run(run, &f));
        }
    };
    if out.len() > 1 && out.len() * group >= 2 * PARALLEL_ELEMENTS {
        out.par_chunks_mut(per_task).zip(base.par_chunks(per_task * group)).for_each(body);
    } else {
        body((out, base));
    }
}

/// When `axes` are the leading axes of a row-contiguous `l` (not all of them): the number
/// of rows folded together and the offset of the first.
pub(super) fn leading(l: &Layout, axes: &[usize]) -> Option<(usize, usize)> {
    let k = axes.len();
    let prefix = axes.iter().enumerate().all(|(i, &a)| a == i);
    (l.row_contiguous && prefix && k < l.ndim()).then(|| (l.shape[..k].iter().product(), l.offset))
}

/// Rows folded in order before partial results are combined pairwise.
const ROW_BLOCK: usize = 64;

/// `out[j] = f over rows r of base[r * m + j]` (m = out.len(), at least one row), columns
/// split over threads. Blocks of rows fold in order (vectorised across columns) and block
/// results combine pairwise, so float sums keep O(log rows) error growth.
pub(super) fn rows<T: Element, F: Fn(T::Acc, T::Acc) -> T::Acc + Copy + Send + Sync>(
    base: &[T],
    out: &mut [T],
    f: F,
) {
    let m = out.len();
    let rows = base.len() / m;
    let cols = |o: &mut [T], start: usize| {
        let w = o.len();
        let acc = simd::run(
            #[inline(always)]
            || {
                // (partial, level) like `cascade`: merging two of one level gives the next.
                let mut stack: Vec<(Vec<T::Acc>, u32)> = Vec::new();
                for r0 in (0..rows).step_by(ROW_BLOCK) {
                    let row = |r: usize| &base[r * m + start..r * m + start + w];
                    let mut acc: Vec<T::Acc> = row(r0).iter().map(|v| v.to_acc()).collect();
                    for r in r0 + 1..(r0 + ROW_BLOCK).min(rows) {
                        for (a, v) in acc.iter_mut().zip(row(r)) {
                            *a = f(*a, v.to_acc());
                        }
                    }
                    let mut level = 0;
                    while stack.last().is_some_and(|t| t.1 == level) {
                        let (top, _) = stack.pop().expect("checked");
                        acc = merge(top, acc, f);
                        level += 1;
                    }
                    stack.push((acc, level));
                    if kiln_base::interrupt::requested() {
                        break; // eval discards the partial result
                    }
                }
                let (mut acc, _) = stack.pop().expect("at least one row");
                while let Some((top, _)) = stack.pop() {
                    acc = merge(top, acc, f);
                }
                acc
            },
        );
        for (o, a) in o.iter_mut().zip(acc) {
            *o = T::from_acc(a);
        }
    };
    // Column blocks of at most 4096 keep the accumulators in L1/L2.
    let width = 4096.min(m).max(1);
    if m * rows >= 2 * PARALLEL_ELEMENTS {
        out.par_chunks_mut(width).enumerate().for_each(|(i, o)| cols(o, i * width));
    } else {
        out.chunks_mut(width).enumerate().for_each(|(i, o)| cols(o, i * width));
    }
}

/// `a[j] = f(a[j], b[j])`: the earlier rows' partial on the left (order kept).
#[inline(always)]
fn merge<A: Copy>(mut a: Vec<A>, b: Vec<A>, f: impl Fn(A, A) -> A) -> Vec<A> {
    for (x, y) in a.iter_mut().zip(b) {
        *x = f(*x, y);
    }
    a
}
