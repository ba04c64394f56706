//! Rules of the fused Softmax primitive (last axis). With `y = softmax(x)`, the Jacobian
//! is `diag(y) - y yᵀ` per row, which is symmetric, so the cotangent and the tangent map
//! the same way: `v -> y * (v - sum(v * y, last axis))`.

use crate::array::Array;
use crate::ops;
use kiln_base::Result;

/// The Jacobian of softmax at output `y` applied to `v` (either side: it is symmetric).
pub(super) fn apply(v: &Array, y: &Array) -> Result<Array> {
    let dot = ops::sum(&ops::multiply(v, y)?, Some(&[-1]), true)?;
    ops::multiply(y, &ops::subtract(v, &dot)?)
}
