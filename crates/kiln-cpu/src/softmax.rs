//! Softmax over the last axis, fused: per row one pass for the max, one that writes
//! `exp(x - max)` and sums it, one that scales by `1 / sum` while the row is still in cache.
//! float32 rows use vecmath's exp in vectorised loops, half floats are widened to float32
//! a row at a time (computed in float32 whether or not `precise`), float64 uses std's exp.
//! Rows are split over threads. NaN anywhere in a row makes the row NaN; a row whose max is
//! infinite gives NaN as the composition `exp(x - max(x)) / sum(...)` does.

use crate::halfmap::Half;
use crate::rowwalk::{max_f32, max_f64, rows, LANES};
use crate::simd;
use crate::vecmath;
use half::{bf16, f16};
use kiln_base::{bail, ArrayData, DType, Result};

const OP: &str = "softmax";

pub(crate) fn softmax(x: &ArrayData, shape: &[usize]) -> Result<ArrayData> {
    match x.dtype {
        DType::F32 => rows::<f32>(OP, x, shape, |src, dst, _| row_f32(src, dst)),
        DType::F16 => rows::<f16>(OP, x, shape, row_half::<f16>),
        DType::BF16 => rows::<bf16>(OP, x, shape, row_half::<bf16>),
        DType::F64 => rows::<f64>(OP, x, shape, |src, dst, _| row_f64(src, dst)),
        d => bail!(Type, OP, "Expected a floating-point input, got {d}."),
    }
}

fn row_f32(src: &[f32], dst: &mut [f32]) {
    simd::run(
        #[inline(always)]
        || {
            let m = max_f32(src);
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
    let m = max_f64(src);
    let mut sum = 0.0;
    for (o, &v) in dst.iter_mut().zip(src) {
        *o = (v - m).exp();
        sum += *o;
    }
    let inv = 1.0 / sum;
    dst.iter_mut().for_each(|o| *o *= inv);
}
