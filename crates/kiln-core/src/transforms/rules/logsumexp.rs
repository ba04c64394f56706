//! Rules of the fused LogSumExp primitive (last axis, kept as size 1). With
//! `y = logsumexp(x)` per row, `dy/dx = exp(x - y)` (the row's softmax), so the cotangent
//! maps back as `g * exp(x - y)` and the tangent forward as `sum(t * exp(x - y))` over the
//! row. `y` is the primitive's output, itself differentiable: higher orders follow.

use crate::array::Array;
use crate::ops;
use kiln_base::{DType, Result};

/// The dtype the rules compute in: float32 for half floats (as the kernels), else `d`.
fn compute(d: DType) -> DType {
    match d {
        DType::F16 | DType::BF16 => DType::F32,
        d => d,
    }
}

/// `v * exp(x - y)` in the compute dtype (`y` broadcast over the row).
fn weighted(v: &Array, x: &Array, y: &Array) -> Result<Array> {
    let c = compute(x.dtype());
    let up = |a: &Array| ops::astype(a, c);
    let w = ops::exp(&ops::subtract(&up(x)?, &up(y)?)?)?;
    ops::multiply(&up(v)?, &w)
}

/// The cotangent of `x` given the output's cotangent `g` (shape of `y`).
pub(super) fn vjp(x: &Array, g: &Array, y: &Array) -> Result<Array> {
    ops::astype(&weighted(g, x, y)?, x.dtype())
}

/// The output's tangent given the tangent `t` of `x`.
pub(super) fn jvp(x: &Array, t: &Array, y: &Array) -> Result<Array> {
    let dot = ops::sum(&weighted(t, x, y)?, Some(&[-1]), true)?;
    ops::astype(&dot, x.dtype())
}
