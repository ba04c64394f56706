//! The row walker of the fused last-axis kernels (softmax, logsumexp): every row of the
//! input's last axis handed to a row function with its output row, rows split over threads,
//! strided rows gathered first; and the NaN-propagating float32 row maximum they share.

use crate::element::Element;
use crate::lines::Lines;
use crate::strided::output_full;
use crate::walk::PARALLEL_ELEMENTS;
use kiln_base::{ArrayData, Result};

/// Lanes of the partial maxima and sums: two AVX-512 vectors, so the loop-carried additions
/// do not wait on each other.
pub(crate) const LANES: usize = 32;

/// Runs `row(src, dst, scratch)` on every row of `x`'s last axis (gathering strided rows),
/// writing a row-major output of `shape` (the input's shape with any length of last axis:
/// `dst` is the output row, as long as `shape`'s last axis).
pub(crate) fn rows<T: Element>(
    op: &'static str,
    x: &ArrayData,
    shape: &[usize],
    row: impl Fn(&[T], &mut [T], &mut Vec<f32>) + Sync,
) -> Result<ArrayData> {
    use rayon::prelude::*;
    let n = x.layout.shape.last().copied().unwrap_or(1);
    let m = shape.last().copied().unwrap_or(1);
    let src = x.buffer.host_slice::<T>();
    let axis = shape.len().saturating_sub(1);
    output_full::<T>(op, shape, |out| {
        if out.is_empty() {
            return Ok(());
        }
        if shape.is_empty() {
            // A 0-d input is one row of one element.
            let one = [src[x.layout.offset]];
            row(&one, out, &mut Vec::new());
            return Ok(());
        }
        let lines = Lines::new(&x.layout, axis);
        let starts: Vec<usize> = lines.starts().collect();
        let per_task = (PARALLEL_ELEMENTS / n.max(1)).max(1);
        out.par_chunks_mut(m * per_task).zip(starts.par_chunks(per_task)).for_each(|(o, s)| {
            let (mut gathered, mut scratch) = (Vec::new(), Vec::new());
            for (dst, &start) in o.chunks_mut(m).zip(s) {
                let contiguous = n <= 1 || lines.at(start, 1) == start + 1;
                let row_src: &[T] = if n == 0 {
                    // (an empty row's start may lie past an empty buffer)
                    &[]
                } else if contiguous {
                    &src[start..start + n]
                } else {
                    gathered.clear();
                    gathered.extend((0..n).map(|j| src[lines.at(start, j)]));
                    &gathered
                };
                row(row_src, dst, &mut scratch);
            }
        });
        Ok(())
    })
}

/// NaN-propagating maximum (a NaN on either side wins), as a select that vectorises.
#[inline(always)]
pub(crate) fn max_nan(acc: f32, v: f32) -> f32 {
    if v > acc || v.is_nan() {
        v
    } else {
        acc
    }
}

/// The row's maximum, NaN when it holds one (-inf for an empty row); vectorises when inlined
/// into a `simd::run` body.
#[inline(always)]
pub(crate) fn max_f32(src: &[f32]) -> f32 {
    let mut lanes = [f32::NEG_INFINITY; LANES];
    let mut chunks = src.chunks_exact(LANES);
    for c in chunks.by_ref() {
        for (m, &v) in lanes.iter_mut().zip(c) {
            *m = max_nan(*m, v);
        }
    }
    let m = lanes.into_iter().fold(f32::NEG_INFINITY, max_nan);
    chunks.remainder().iter().fold(m, |a, &v| max_nan(a, v))
}

/// The same for float64 (scalar).
pub(crate) fn max_f64(src: &[f64]) -> f64 {
    src.iter().fold(f64::NEG_INFINITY, |a, &v| if v > a || v.is_nan() { v } else { a })
}
