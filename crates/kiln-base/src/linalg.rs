//! Matrix factorisations and solvers (`mx.linalg`): the op kinds and their shape rules. Each
//! works on the last two axes; leading axes are a batch (equal in all inputs: the front end
//! broadcasts). Only float32 and float64 are accepted, as in MLX.

use crate::shape::{fmt_shape, Shape};
use crate::{ensure, DType, Result};

/// One dense linear-algebra routine.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum LinalgOp {
    /// General inverse (partial-pivot LU). Singular matrices are an error at eval.
    Inv,
    /// Inverse of a triangular matrix; only the `upper` (or lower) triangle is read.
    TriInv { upper: bool },
    /// `L` with `A = L L^T` from the lower triangle; `upper` returns `L^T` instead.
    Cholesky { upper: bool },
    /// Reduced QR: `Q (m, k)`, `R (k, n)` with `k = min(m, n)`.
    Qr,
    /// Full SVD `U (m, m)`, `S (k)`, `Vt (n, n)`; only `S` unless `compute_uv`.
    Svd { compute_uv: bool },
    /// Symmetric eigendecomposition from one triangle: ascending eigenvalues `(n)` and,
    /// with `vectors`, eigenvectors as columns `(n, n)`.
    Eigh { upper: bool, vectors: bool },
    /// General eigendecomposition: complex64 eigenvalues `(n)` and, with `vectors`, unit
    /// eigenvectors as columns `(n, n)` (complex64).
    Eig { vectors: bool },
    /// `A X = B` for square `A (n, n)` and `B (n, k)`.
    Solve,
    /// `A X = B` for triangular `A`; only the `upper` (or lower) triangle is read.
    SolveTriangular { upper: bool },
    /// `sign` and `log|det|` of square matrices (two outputs of the batch shape).
    Slogdet,
    /// Determinant of square matrices (batch shape).
    Det,
    /// Partial-pivot LU of `(m, n)` matrices as LAPACK's `getrf` computes it: row indices
    /// `p (m)` (uint32, `A = L[p] U`), unit lower `L (m, k)`, upper `U (k, n)`.
    Lu,
    /// The same LU packed in one `(m, n)` matrix (unit diagonal of `L` implied) and LAPACK's
    /// row swaps `pivots (k)` (uint32, 0-based: row `i` was swapped with `pivots[i]`).
    LuFactor,
}

impl LinalgOp {
    /// The op name used in error messages (MLX's `linalg::` prefix).
    pub fn name(self) -> &'static str {
        match self {
            LinalgOp::Inv => "linalg::inv",
            LinalgOp::TriInv { .. } => "linalg::tri_inv",
            LinalgOp::Cholesky { .. } => "linalg::cholesky",
            LinalgOp::Qr => "linalg::qr",
            LinalgOp::Svd { .. } => "linalg::svd",
            LinalgOp::Eigh { .. } => "linalg::eigh",
            LinalgOp::Eig { .. } => "linalg::eig",
            LinalgOp::Solve => "linalg::solve",
            LinalgOp::SolveTriangular { .. } => "linalg::solve_triangular",
            LinalgOp::Slogdet => "linalg::slogdet",
            LinalgOp::Det => "linalg::det",
            LinalgOp::Lu => "linalg::lu",
            LinalgOp::LuFactor => "linalg::lu_factor",
        }
    }

    pub fn num_inputs(self) -> usize {
        match self {
            LinalgOp::Solve | LinalgOp::SolveTriangular { .. } => 2,
            _ => 1,
        }
    }

    pub fn num_outputs(self) -> usize {
        match self {
            LinalgOp::Svd { compute_uv: true } | LinalgOp::Lu => 3,
            LinalgOp::Qr
            | LinalgOp::Slogdet
            | LinalgOp::LuFactor
            | LinalgOp::Eigh { vectors: true, .. }
            | LinalgOp::Eig { vectors: true } => 2,
            _ => 1,
        }
    }

    /// Checks inputs (already counted by the caller) and returns every output.
    pub fn output_shapes(self, inputs: &[(&[usize], DType)]) -> Result<Vec<(Shape, DType)>> {
        let op = self.name();
        let (a, dtype) = inputs[0];
        for &(_, d) in inputs {
            if matches!(self, LinalgOp::Eig { .. } | LinalgOp::Eigh { .. } | LinalgOp::Svd { .. }) {
                ensure!(
                    matches!(d, DType::F32 | DType::F64 | DType::C64),
                    Value,
                    op,
                    "Arrays must have type float32, float64 or complex64. Received array with \
                     type {d}."
                );
            } else {
                ensure!(
                    d == DType::F32 || d == DType::F64,
                    Value,
                    op,
                    "Arrays must have type float32 or float64. Received array with type {d}."
                );
            }
            ensure!(d == dtype, Value, op, "Inputs must have one dtype.");
        }
        let nd = a.len();
        ensure!(
            nd >= 2,
            Value,
            op,
            "Arrays must have >= 2 dimensions. Received array with {nd} dimensions."
        );
        let (batch, m, n) = (&a[..nd - 2], a[nd - 2], a[nd - 1]);
        let square = || -> Result<()> {
            ensure!(
                m == n,
                Value,
                op,
                "Only defined for square matrices, got shape {}.",
                fmt_shape(a)
            );
            Ok(())
        };
        let with = |tail: &[usize]| -> (Shape, DType) {
            let mut s = Shape::from(batch);
            s.extend_from_slice(tail);
            (s, dtype)
        };
        let k = m.min(n);
        // Eigenvalues of a Hermitian matrix and singular values are real.
        let real =
            |tail: &[usize]| (with(tail).0, if dtype == DType::C64 { DType::F32 } else { dtype });
        Ok(match self {
            LinalgOp::Inv | LinalgOp::TriInv { .. } | LinalgOp::Cholesky { .. } => {
                square()?;
                vec![with(&[n, n])]
            }
            LinalgOp::Qr => vec![with(&[m, k]), with(&[k, n])],
            LinalgOp::Svd { compute_uv: true } => vec![with(&[m, m]), real(&[k]), with(&[n, n])],
            LinalgOp::Svd { compute_uv: false } => vec![real(&[k])],
            LinalgOp::Eigh { vectors, .. } => {
                square()?;
                let mut out = vec![real(&[n])];
                if vectors {
                    out.push(with(&[n, n]));
                }
                out
            }
            LinalgOp::Eig { vectors } => {
                square()?;
                let complex = |tail: &[usize]| (with(tail).0, DType::C64);
                let mut out = vec![complex(&[n])];
                if vectors {
                    out.push(complex(&[n, n]));
                }
                out
            }
            LinalgOp::Solve | LinalgOp::SolveTriangular { .. } => {
                square()?;
                let b = inputs[1].0;
                ensure!(
                    b.len() == nd && b[..nd - 2] == *batch && b[nd - 2] == n,
                    Value,
                    op,
                    "Last dimension of first input with shape {} must match second to last \
                     dimension of second input with shape {}.",
                    fmt_shape(a),
                    fmt_shape(b)
                );
                vec![with(&[n, b[nd - 1]])]
            }
            LinalgOp::Slogdet => {
                square()?;
                vec![with(&[]), with(&[])]
            }
            LinalgOp::Det => {
                square()?;
                vec![with(&[])]
            }
            LinalgOp::Lu => {
                let mut p = with(&[m]);
                p.1 = DType::U32;
                vec![p, with(&[m, k]), with(&[k, n])]
            }
            LinalgOp::LuFactor => {
                let mut pivots = with(&[k]);
                pivots.1 = DType::U32;
                vec![with(&[m, n]), pivots]
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shapes() {
        let f = DType::F32;
        let svd = LinalgOp::Svd { compute_uv: true }.output_shapes(&[(&[2, 4, 3], f)]).unwrap();
        let dims: Vec<&[usize]> = svd.iter().map(|(s, _)| s.as_slice()).collect();
        assert_eq!(dims, vec![&[2, 4, 4][..], &[2, 3], &[2, 3, 3]]);
        let qr = LinalgOp::Qr.output_shapes(&[(&[3, 5], f)]).unwrap();
        assert_eq!((qr[0].0.as_slice(), qr[1].0.as_slice()), (&[3, 3][..], &[3, 5][..]));
        let solve = LinalgOp::Solve.output_shapes(&[(&[2, 3, 3], f), (&[2, 3, 4], f)]).unwrap();
        assert_eq!(solve[0].0.as_slice(), &[2, 3, 4]);
        assert!(LinalgOp::Inv.output_shapes(&[(&[3, 2], f)]).is_err());
        assert!(LinalgOp::Inv.output_shapes(&[(&[3], f)]).is_err());
        assert!(LinalgOp::Inv.output_shapes(&[(&[3, 3], DType::F16)]).is_err());
        assert!(LinalgOp::Solve.output_shapes(&[(&[3, 3], f), (&[2, 1], f)]).is_err());
    }
}
