//! General (non-symmetric) eigendecomposition: complex64 results whatever the input's
//! dtype (float32, float64 or complex64), as MLX.

use crate::array::Array;
use crate::ops::record_all;
use kiln_base::{LinalgOp, Primitive, Result};

/// Eigenvalues `(..., n)` and unit eigenvectors as columns `(..., n, n)`.
pub fn eig(a: &Array) -> Result<(Array, Array)> {
    let mut out = record_all(Primitive::Linalg(LinalgOp::Eig { vectors: true }), vec![a.clone()])?;
    let v = out.swap_remove(1);
    Ok((out.swap_remove(0), v))
}

/// Eigenvalues `(..., n)` of square matrices.
pub fn eigvals(a: &Array) -> Result<Array> {
    let mut out = record_all(Primitive::Linalg(LinalgOp::Eig { vectors: false }), vec![a.clone()])?;
    Ok(out.swap_remove(0))
}
