//! logsumexp over the last axis, fused: per row one pass for the max and one that sums
//! `exp(x - max)`, giving `max + log(sum)`, one value per row (the axis kept as size 1).
//! float32 rows use vecmath's exp in vectorised loops, half floats are widened to float32 a
//! row at a time and the result rounded once, float64 uses std's exp. A row whose max is
//! infinite gives that max (all -inf: -inf; any +inf: +inf), NaN anywhere gives NaN, as the
//! composition `where(|m| == inf, m, m + log(sum(exp(x - m))))` does.

use crate::halfmap::Half;
use crate::rowwalk::{max_f32, max_f64, rows, LANES};
use crate::simd;
use crate::vecmath;
use half::{bf16, f16};
use kiln_base::{bail, ArrayData, DType, Result};

const OP: &str = "logsumexp";

pub(crate) fn logsumexp(x: &ArrayData, shape: &[usize]) -> Result<ArrayData> {
    match x.dtype {
        DType::F32 => rows::<f32>(OP, x, shape, |src, dst, _| dst[0] = row_f32(src)),
        DType::F16 => rows::<f16>(OP, x, shape, row_half::<f16>),
        DType::BF16 => rows::<bf16>(OP, x, shape, row_half::<bf16>),
        DType::F64 => rows::<f64>(OP, x, shape, |src, dst, _| dst[0] = row_f64(src)),
        d => bail!(Type, OP, "Expected a floating-point input, got {d}."),
    }
}

fn row_f32(src: &[f32]) -> f32 {
    simd::run(
        #[inline(always)]
        || {
            let m = max_f32(src);
            if !m.is_finite() {
                return m;
            }
            let mut sums = [0f32; LANES];
            let mut chunks = src.chunks_exact(LANES);
            for c in chunks.by_ref() {
                for (s, &v) in sums.iter_mut().zip(c) {
                    *s += vecmath::exp(v - m);
                }
            }
            let rest: f32 = chunks.remainder().iter().map(|&v| vecmath::exp(v - m)).sum();
            m + (sums.iter().sum::<f32>() + rest).ln()
        },
    )
}

fn row_half<H: Half>(src: &[H], dst: &mut [H], scratch: &mut Vec<f32>) {
    scratch.resize(src.len(), 0.0);
    H::widen(src, scratch);
    H::narrow(&[row_f32(scratch)], dst);
}

fn row_f64(src: &[f64]) -> f64 {
    let m = max_f64(src);
    if !m.is_finite() {
        return m;
    }
    m + src.iter().map(|&v| (v - m).exp()).sum::<f64>().ln()
}
