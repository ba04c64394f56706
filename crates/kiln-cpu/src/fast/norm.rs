//! layer_norm and rms_norm over the last axis: per row one pass for the sum (two for
//! layer_norm's centred variance, while the row is in cache) and one that writes the
//! normalised, weighted row. Sums use 16 partial lanes so they vectorise.

use super::{dense_as, elements, Real};
use crate::halfmap::Half;
use crate::simd;
use crate::strided::output_full;
use crate::walk::PARALLEL_ELEMENTS;
use half::{bf16, f16};
use kiln_base::DType;
use kiln_base::{ArrayData, Result};
use rayon::prelude::*;

const LANES: usize = 16;

/// `sum(f(x))` over a row with partial lanes.
#[inline(always)]
fn lane_sum<C: Real>(x: &[C], f: impl Fn(C) -> C) -> C {
    let mut acc = [C::ZERO; LANES];
    let mut chunks = x.chunks_exact(LANES);
    for c in chunks.by_ref() {
        for (a, &v) in acc.iter_mut().zip(c) {
            *a = *a + f(v);
        }
    }
    let tail = chunks.remainder().iter().fold(C::ZERO, |a, &v| a + f(v));
    acc.iter().fold(C::ZERO, |a, &b| a + b) + tail
}

/// Runs `row(x_row, out_row)` on every row of length `d`, rows split over threads. Half
/// floats computed in float32 are widened and rounded back a row at a time, so the whole
/// array is never held as float32 (a third of the memory traffic).
fn rows<C: Real>(
    op: &'static str,
    x: &ArrayData,
    shape: &[usize],
    row: impl Fn(&[C], &mut [C]) + Sync,
) -> Result<ArrayData> {
    if C::DTYPE == DType::F32 {
        match x.dtype {
            DType::F16 => return half_rows::<f16, C>(op, x, shape, row),
            DType::BF16 => return half_rows::<bf16, C>(op, x, shape, row),
            _ => {}
        }
    }
    let d = shape.last().copied().unwrap_or(1);
    let xd = dense_as(x, C::DTYPE)?;
    let xs = elements::<C>(&xd);
    output_full::<C>(op, shape, |out| {
        if out.is_empty() || d == 0 {
            return Ok(());
        }
        let per_task = d * (PARALLEL_ELEMENTS / d).max(1);
        out.par_chunks_mut(per_task).zip(xs.par_chunks(per_task)).for_each(|(o, xc)| {
            simd::run(
                #[inline(always)]
                || {
                    for (orow, xrow) in o.chunks_exact_mut(d).zip(xc.chunks_exact(d)) {
                        row(xrow, orow);
                    }
                },
            )
        });
        Ok(())
    })
}

/// `rows` for half-float storage `H` with float32 compute (`C` is float32: checked by the
/// caller, so the slices cast in place).
fn half_rows<H: Half, C: Real>(
    op: &'static str,
    x: &ArrayData,
    shape: &[usize],
    row: impl Fn(&[C], &mut [C]) + Sync,
) -> Result<ArrayData> {
    let d = shape.last().copied().unwrap_or(1);
    let xd = dense_as(x, H::DTYPE)?;
    let xs = elements::<H>(&xd);
    output_full::<H>(op, shape, |out| {
        if out.is_empty() || d == 0 {
            return Ok(());
        }
        let per_task = d * (PARALLEL_ELEMENTS / d).max(1);
        out.par_chunks_mut(per_task).zip(xs.par_chunks(per_task)).for_each(|(o, xc)| {
            let mut wide = vec![C::ZERO; 2 * d];
            let (xw, ow) = wide.split_at_mut(d);
            simd::run(
                #[inline(always)]
                || {
                    for (orow, xrow) in o.chunks_exact_mut(d).zip(xc.chunks_exact(d)) {
                        H::widen(xrow, bytemuck::cast_slice_mut(xw));
                        row(xw, ow);
                        H::narrow(bytemuck::cast_slice(ow), orow);
                    }
                },
            )
        });
        Ok(())
    })
}

pub(crate) fn layer_norm<C: Real>(
    x: &ArrayData,
    w: Option<&ArrayData>,
    b: Option<&ArrayData>,
    eps: f64,
    shape: &[usize],
) -> Result<ArrayData> {
    let (wd, bd) = (
        w.map(|w| dense_as(w, C::DTYPE)).transpose()?,
        b.map(|b| dense_as(b, C::DTYPE)).transpose()?,
    );
    let ws = wd.as_ref().map(elements::<C>);
    let bs = bd.as_ref().map(elements::<C>);
    let eps = C::of(eps);
    rows::<C>("layer_norm", x, shape, |xr, o| {
        let n = C::of(xr.len() as f64);
        let mean = lane_sum(xr, |v| v) / n;
        let var = lane_sum(xr, |v| (v - mean) * (v - mean)) / n;
        let r = C::ONE / (var + eps).sqrt();
        // One loop per weight/bias combination so each stays a plain vectorisable map.
        match (ws, bs) {
            (Some(w), Some(b)) => {
                for (((o, &v), &w), &b) in o.iter_mut().zip(xr).zip(w).zip(b) {
                    *o = (v - mean) * r * w + b;
                }
            }
            (Some(w), None) => {
                for ((o, &v), &w) in o.iter_mut().zip(xr).zip(w) {
                    *o = (v - mean) * r * w;
                }
            }
            (None, Some(b)) => {
                for ((o, &v), &b) in o.iter_mut().zip(xr).zip(b) {
                    *o = (v - mean) * r + b;
                }
            }
            (None, None) => {
                for (o, &v) in o.iter_mut().zip(xr) {
                    *o = (v - mean) * r;
                }
            }
        }
    })
}

pub(crate) fn rms_norm<C: Real>(
    x: &ArrayData,
    w: Option<&ArrayData>,
    eps: f64,
    shape: &[usize],
) -> Result<ArrayData> {
    let wd = w.map(|w| dense_as(w, C::DTYPE)).transpose()?;
    let ws = wd.as_ref().map(elements::<C>);
    let eps = C::of(eps);
    rows::<C>("rms_norm", x, shape, |xr, o| {
        let n = C::of(xr.len() as f64);
        let r = C::ONE / (lane_sum(xr, |v| v * v) / n + eps).sqrt();
        match ws {
            Some(w) => {
                for ((o, &v), &w) in o.iter_mut().zip(xr).zip(w) {
                    *o = v * r * w;
                }
            }
            None => {
                for (o, &v) in o.iter_mut().zip(xr) {
                    *o = v * r;
                }
            }
        }
    })
}
