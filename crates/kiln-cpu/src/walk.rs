//! Row-major walks over several operands of one shape (the output's; inputs may be
//! broadcast, transposed or negative-step views), as runs along the innermost axis. Axes
//! that are contiguous in every operand are merged first and size-1 axes dropped, so a
//! contiguous or uniformly strided operand is one long run, and a broadcast row is a run of
//! stride 0. A walk can start at any flat position, so the output can be split over threads.

use kiln_base::Layout;
use rayon::prelude::*;

/// Below this many multiply-adds, threading a product costs more than it saves.
pub(crate) const PARALLEL_FLOPS: usize = 1 << 18;

/// Loops longer than this are split over the rayon pool (a task costs a few microseconds;
/// measured: below about 2^15 float32 elements one thread is faster).
pub(crate) const PARALLEL_ELEMENTS: usize = 1 << 15;

/// The merged axes of `N` operands.
pub(crate) struct Plan<const N: usize> {
    /// Merged sizes, outermost first; never empty (a 0-d walk is one axis of size 1).
    shape: Vec<usize>,
    /// Per operand, the element stride of each merged axis.
    strides: [Vec<isize>; N],
    offsets: [isize; N],
}

impl<const N: usize> Plan<N> {
    /// Layouts must have `shape` (the kernels' inputs are broadcast to the output first).
    pub fn new(shape: &[usize], layouts: [&Layout; N]) -> Self {
        // Innermost first: (size, strides of the axis' elements).
        let mut dims: Vec<(usize, [isize; N])> = Vec::new();
        for d in (0..shape.len()).rev() {
            if shape[d] == 1 {
                continue;
            }
            let st: [isize; N] = std::array::from_fn(|k| layouts[k].strides[d]);
            if let Some((size, inner)) = dims.last_mut() {
                let mergeable = (0..N).all(|k| st[k] == inner[k].wrapping_mul(*size as isize));
                if mergeable {
                    *size *= shape[d];
                    continue;
                }
            }
            dims.push((shape[d], st));
        }
        if dims.is_empty() {
            dims.push((1, [0; N]));
        }
        dims.reverse();
        Plan {
            shape: dims.iter().map(|d| d.0).collect(),
            strides: std::array::from_fn(|k| dims.iter().map(|d| d.1[k]).collect()),
            offsets: std::array::from_fn(|k| layouts[k].offset as isize),
        }
    }

    /// Calls `f(position, starts, strides, len)` for each run covering the flat output
    /// positions `[start, end)`: `len` elements at buffer indices `starts[k] + i * strides[k]`.
    #[inline(always)]
    pub fn runs(
        &self,
        start: usize,
        end: usize,
        mut f: impl FnMut(usize, [isize; N], [isize; N], usize),
    ) {
        let nd = self.shape.len();
        let inner = self.shape[nd - 1];
        if start >= end || inner == 0 {
            return;
        }
        let step: [isize; N] = std::array::from_fn(|k| self.strides[k][nd - 1]);
        let mut coord = vec![0usize; nd - 1];
        let mut rest = start / inner;
        for d in (0..nd - 1).rev() {
            coord[d] = rest % self.shape[d];
            rest /= self.shape[d];
        }
        let mut base: [isize; N] = std::array::from_fn(|k| {
            (0..nd - 1).fold(self.offsets[k], |acc, d| {
                acc.wrapping_add((coord[d] as isize).wrapping_mul(self.strides[k][d]))
            })
        });
        let (mut pos, mut j) = (start, start % inner);
        while pos < end {
            let n = (inner - j).min(end - pos);
            f(pos, std::array::from_fn(|k| base[k].wrapping_add(j as isize * step[k])), step, n);
            pos += n;
            j = 0;
            // Advance the outer coordinates like an odometer.
            for d in (0..nd - 1).rev() {
                coord[d] += 1;
                for (b, s) in base.iter_mut().zip(&self.strides) {
                    *b = b.wrapping_add(s[d]);
                }
                if coord[d] < self.shape[d] {
                    break;
                }
                for (b, s) in base.iter_mut().zip(&self.strides) {
                    *b = b.wrapping_sub(s[d].wrapping_mul(self.shape[d] as isize));
                }
                coord[d] = 0;
            }
        }
    }
}

/// The most elements one task of a threaded loop covers: a few milliseconds of work, so a
/// Ctrl-C (checked between tasks) stops even a huge loop promptly.
pub(crate) const MAX_TASK_ELEMENTS: usize = 1 << 22;

/// Runs `body(chunk, start)` over consecutive chunks of `out` (starting at flat position
/// `start`), on the rayon pool when `out` is long: a few chunks per thread, so a slow
/// thread does not hold the others up, and few enough that task overhead stays small.
/// After a Ctrl-C the remaining chunks are skipped (eval discards the output).
pub(crate) fn par_chunks<U: Send>(out: &mut [U], body: impl Fn(&mut [U], usize) + Sync) {
    let n = out.len();
    if n < PARALLEL_ELEMENTS {
        body(out, 0);
        return;
    }
    let chunk = task_elements(n, PARALLEL_ELEMENTS / 2, 64);
    out.par_chunks_mut(chunk).enumerate().for_each(|(k, c)| {
        if !kiln_base::interrupt::requested() {
            body(c, k * chunk);
        }
    });
}

/// Elements per task for a threaded loop over `n`: about four tasks per thread, at least
/// `min` and at most [`MAX_TASK_ELEMENTS`], a multiple of `align`.
pub(crate) fn task_elements(n: usize, min: usize, align: usize) -> usize {
    let tasks = rayon::current_num_threads() * 4;
    n.div_ceil(tasks).clamp(min, MAX_TASK_ELEMENTS).next_multiple_of(align)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every run's indices, flattened, must equal the layout's own row-major indices.
    fn check(layout: &Layout) {
        let plan = Plan::new(&layout.shape, [layout]);
        let want: Vec<usize> = layout.indices().collect();
        let n = want.len();
        for (start, end) in [(0, n), (n / 3, n), (1.min(n), (n / 2 + 1).min(n))] {
            let mut got = Vec::new();
            plan.runs(start, end, |pos, [i], [s], len| {
                assert_eq!(pos, start + got.len());
                got.extend((0..len).map(|t| (i + t as isize * s) as usize));
            });
            assert_eq!(got, want[start..end], "{layout:?} [{start}, {end})");
        }
    }

    #[test]
    fn runs_match_layout_indices() {
        let base = Layout::contiguous(&[3, 4, 5]);
        check(&base);
        check(&base.transpose(&[2, 0, 1]));
        check(&Layout::new(vec![3, 4].into(), vec![0, 1].into(), 2)); // broadcast rows
        check(&Layout::new(vec![3, 4].into(), vec![1, 0].into(), 0)); // broadcast columns
        check(&Layout::new(vec![4, 3].into(), vec![-3, -1].into(), 11)); // reversed
        check(&Layout::new(vec![2, 3, 2].into(), vec![12, 4, 2].into(), 1)); // stepped
        check(&Layout::new(vec![].into(), vec![].into(), 7)); // 0-d
        check(&Layout::new(vec![1, 1, 6].into(), vec![0, 5, 1].into(), 0));
        check(&Layout::new(vec![0, 3].into(), vec![3, 1].into(), 0)); // empty
        check(&Layout::new(vec![3, 0].into(), vec![1, 1].into(), 0));
    }

    #[test]
    fn merges_contiguous_axes() {
        let plan = Plan::new(&[2, 3, 4], [&Layout::contiguous(&[2, 3, 4])]);
        assert_eq!(plan.shape, vec![24]);
        let b = Layout::new(vec![2, 3, 4].into(), vec![0, 4, 1].into(), 0);
        let plan = Plan::new(&[2, 3, 4], [&Layout::contiguous(&[2, 3, 4]), &b]);
        assert_eq!(plan.shape, vec![2, 12]);
    }
}
