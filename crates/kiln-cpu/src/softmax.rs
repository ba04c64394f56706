//! Softmax over the last axis, fused: per row one pass for the max, one that writes
//! `exp(x - max)` and sums it, one that scales by `1 / sum` while the row is still in cache.
//! float32 rows use vecmath's exp in vectorised loops, half floats are widened to float32
//! a row at a time (computed in float32 whether or not `precise`), float64 uses std's exp.
//! Rows are split over threads. NaN anywhere in a row makes the row NaN; a row whose max is
//! infinite gives NaN as the composition `exp(x - max(x)) / sum(...)` does.

use crate::halfmap::Half;
use crate::lines::Lines;
use crate::simd;
use crate::strided::output_full;
use crate::vecmath;
use crate::walk::PARALLEL_ELEMENTS;
use half::{bf16, f16};
use kiln_base::{bail, ArrayData, DType, Result};
use rayon::prelude::*;

/// Lanes of the partial maxima and sums: two AVX-512 vectors, so the loop-carried additions
/// do not wait on each other.
const LANES: usize = 32;

pub(crate) fn softmax(x: &ArrayData, shape: &[usize]) -> Result<ArrayData> {
    match x.dtype {
        DType::F32 => rows::<f32>(x, shape, |src, dst, _| row_f32(src, dst)),
        DType::F16 => rows::<f16>(x, shape, row_half::<f16>),
        DType::BF16 => rows::<bf16>(x, shape, row_half::<bf16>),
        DType::F64 => rows::<f64>(x, shape, |src, dst, _| row_f64(src, dst)),
        d => bail!(Type, "softmax", "Expected a floating-point input, got {d}."),
    }
}

/// Runs `row(src, dst, scratch)` on every row of the last axis (gathering strided rows).
fn rows<T: crate::element::Element>(
    x: &ArrayData,
    shape: &[usize],
    row: impl Fn(&[T], &mut [T], &mut Vec<f32>) + Sync,
) -> Result<ArrayData> {
    let n = shape.last().copied().unwrap_or(1);
    let src = x.buffer.host_slice::<T>();
    let axis = shape.len().saturating_sub(1);
    output_full::<T>("softmax", shape, |out| {
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
        out.par_chunks_mut(n * per_task).zip(starts.par_chunks(per_task)).for_each(|(o, s)| {
            let (mut gathered, mut scratch) = (Vec::new(), Vec::new());
            for (dst, &start) in o.chunks_mut(n).zip(s) {
                let contiguous = n <= 1 || lines.at(start, 1) == start + 1;
                let row_src: &[T] = if contiguous {
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
fn max_nan(acc: f32, v: f32) -> f32 {
    if v > acc || v.is_nan() {
        v
    } else {
        acc
    }
}

fn row_f32(src: &[f32], dst: &mut [f32]) {
    simd::run(
        #[inline(always)]
        || {
            let mut lanes = [f32::NEG_INFINITY; LANES];
            let mut chunks = src.chunks_exact(LANES);
            for c in chunks.by_ref() {
                for (m, &v) in lanes.iter_mut().zip(c) {
                    *m = max_nan(*m, v);
                }
            }
            let m = lanes.into_iter().fold(f32::NEG_INFINITY, max_nan);
            let m = chunks.remainder().iter().fold(m, |a, &v| max_nan(a, v));
            let mut sums = [0f32; LANES];
            for (c, d) in src.chunks_exact(LANES).zip(dst.chunks_exact_mut(LANES)) {
                for ((s, &v), o) in sums.iter_mut().zip(c).zip(d.iter_mut()) {
                    let e = vecmath::exp(v - m);
                    *o = e;
                    *s += e;
                }
            }
            let done = src.len() / LANES * LANES;
            let mut sum = 0f32;
            for (o, &v) in dst[done..].iter_mut().zip(&src[done..]) {
                *o = vecmath::exp(v - m);
                sum += *o;
            }
            let sum = sums.iter().sum::<f32>() + sum;
            let inv = 1.0 / sum;
            dst.iter_mut().for_each(|o| *o *= inv);
        },
    )
}

fn row_half<H: Half>(src: &[H], dst: &mut [H], scratch: &mut Vec<f32>) {
    let n = src.len();
    scratch.resize(2 * n, 0.0);
    let (a, b) = scratch.split_at_mut(n);
    H::widen(src, a);
    row_f32(a, b);
    H::narrow(b, dst);
}

fn row_f64(src: &[f64], dst: &mut [f64]) {
    let m = src.iter().fold(f64::NEG_INFINITY, |a, &v| if v > a || v.is_nan() { v } else { a });
    let mut sum = 0.0;
    for (o, &v) in dst.iter_mut().zip(src) {
        *o = (v - m).exp();
        sum += *o;
    }
    let inv = 1.0 / sum;
    dst.iter_mut().for_each(|o| *o *= inv);
}
