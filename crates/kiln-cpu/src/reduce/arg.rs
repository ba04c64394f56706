//! argmax/argmin over a row-contiguous input, read in place and threaded: the input is
//! `(outer, n, inner)` around the reduced axis. With `inner == 1` each output's group is a
//! contiguous run (a long run is split over threads and the parts combined in order);
//! otherwise `n` rows of `inner` columns are folded column-wise, which walks memory in
//! order. Semantics match the generic walk: the first best index wins ties and the first
//! NaN beats every number.

use crate::element::Element;
use crate::scalar::Num;
use crate::walk::PARALLEL_ELEMENTS;
use rayon::prelude::*;

/// The best value of `run` (non-empty) and its index: the first NaN, or the first element
/// no later one is `better` than.
#[inline(always)]
fn run_best<T: Element>(run: &[T], better: impl Fn(T::Acc, T::Acc) -> bool) -> (T::Acc, usize) {
    let mut best = run[0].to_acc();
    let mut at = 0;
    if best.is_nan() {
        return (best, 0);
    }
    for (j, v) in run.iter().enumerate().skip(1) {
        let v = v.to_acc();
        if v.is_nan() {
            return (v, j);
        }
        if better(v, best) {
            (best, at) = (v, j);
        }
    }
    (best, at)
}

/// `run_best` of a long run: chunks on threads, combined in order (an earlier part keeps
/// ties, a NaN part wins unless an earlier one already holds a NaN).
fn long_run<T: Element, B>(run: &[T], better: B) -> usize
where
    B: Fn(T::Acc, T::Acc) -> bool + Copy + Send + Sync,
{
    let parts: Vec<(T::Acc, usize)> = run
        .par_chunks(PARALLEL_ELEMENTS)
        .enumerate()
        .map(|(k, c)| {
            let (v, j) = run_best(c, better);
            (v, k * PARALLEL_ELEMENTS + j)
        })
        .collect();
    let mut parts = parts.into_iter();
    let (mut best, mut at) = parts.next().expect("non-empty run");
    for (v, j) in parts {
        if best.is_nan() {
            break;
        }
        if v.is_nan() || better(v, best) {
            (best, at) = (v, j);
        }
    }
    at
}

/// Column-wise over `rows` rows of `out.len()` columns starting at column `start` of a
/// row of `width` elements.
fn columns<T: Element>(
    slab: &[T],
    rows: usize,
    width: usize,
    start: usize,
    out: &mut [u32],
    better: impl Fn(T::Acc, T::Acc) -> bool,
) {
    let w = out.len();
    let row = |r: usize| &slab[r * width + start..r * width + start + w];
    let mut best: Vec<T::Acc> = row(0).iter().map(|v| v.to_acc()).collect();
    out.fill(0);
    for r in 1..rows {
        for ((b, o), v) in best.iter_mut().zip(out.iter_mut()).zip(row(r)) {
            let v = v.to_acc();
            if !b.is_nan() && (v.is_nan() || better(v, *b)) {
                (*b, *o) = (v, r as u32);
            }
        }
    }
}

/// Fills `out` (`outer * inner` indices) from `src` (`outer * n * inner` elements, n > 0).
pub(super) fn contiguous<T: Element, B>(
    src: &[T],
    (outer, n, inner): (usize, usize, usize),
    out: &mut [u32],
    better: B,
) where
    B: Fn(T::Acc, T::Acc) -> bool + Copy + Send + Sync,
{
    let big = outer * n * inner >= 2 * PARALLEL_ELEMENTS;
    if inner == 1 {
        if outer == 1 && big {
            out[0] = long_run(src, better) as u32;
            return;
        }
        let per_task = (PARALLEL_ELEMENTS / n).max(1);
        let body = |(o, s): (&mut [u32], &[T])| {
            for (o, run) in o.iter_mut().zip(s.chunks(n)) {
                *o = run_best(run, better).1 as u32;
            }
        };
        if big {
            out.par_chunks_mut(per_task).zip(src.par_chunks(per_task * n)).for_each(body);
        } else {
            body((out, src));
        }
        return;
    }
    // Column blocks of at most 1024 keep the running best values in L1.
    let block = 1024.min(inner);
    let slab = n * inner;
    let task = |(k, o): (usize, &mut [u32])| {
        let (slab_index, col) = (k / inner.div_ceil(block), (k % inner.div_ceil(block)) * block);
        let s = &src[slab_index * slab..(slab_index + 1) * slab];
        columns(s, n, inner, col, o, better);
    };
    // Blocks never straddle two outputs' rows: split each outer's row of outputs first.
    let blocks = out.chunks_mut(inner).flat_map(|row| row.chunks_mut(block));
    if big {
        blocks.enumerate().collect::<Vec<_>>().into_par_iter().for_each(task);
    } else {
        blocks.enumerate().for_each(task);
    }
}
