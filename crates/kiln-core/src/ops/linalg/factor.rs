//! Factorisations and solvers of `mx.linalg`, over the last two axes with leading batch axes.
//! Each records one `Linalg` primitive (CPU kernels through faer) or composes them.

use crate::array::Array;
use crate::ops::{
    astype, broadcast_to, divide, expand_dims, greater, matmul, max, multiply, record_all, scalar,
    slice, squeeze, transpose, where_, zeros,
};
use kiln_base::shape::{broadcast_shapes, fmt_shape};
use kiln_base::{bail, ensure, DType, LinalgOp, Primitive, Result, Scalar};

fn run(op: LinalgOp, inputs: Vec<Array>) -> Result<Vec<Array>> {
    record_all(Primitive::Linalg(op), inputs)
}

fn one(op: LinalgOp, a: &Array) -> Result<Array> {
    Ok(run(op, vec![a.clone()])?.swap_remove(0))
}

/// Swaps the last two axes.
pub(crate) fn swap_last(x: &Array) -> Result<Array> {
    let n = x.ndim() as i64;
    let mut perm: Vec<i64> = (0..n).collect();
    perm.swap(x.ndim() - 2, x.ndim() - 1);
    transpose(x, Some(&perm))
}

/// MLX's checks for ops that take float32/float64 matrices only (no promotion).
fn check_matrix(op: &'static str, a: &Array, square: bool) -> Result<()> {
    let d = a.dtype();
    ensure!(
        d == DType::F32 || d == DType::F64,
        Value,
        op,
        "Arrays must have type float32 or float64. Received array with type {d}."
    );
    check_shape(op, a, square)
}

/// The dimension checks of `check_matrix`.
fn check_shape(op: &'static str, a: &Array, square: bool) -> Result<()> {
    ensure!(
        a.ndim() >= 2,
        Value,
        op,
        "Arrays must have >= 2 dimensions. Received array with {} dimensions.",
        a.ndim()
    );
    let n = a.ndim();
    if square {
        ensure!(
            a.shape()[n - 2] == a.shape()[n - 1],
            Value,
            op,
            "Only defined for square matrices, got shape {}.",
            fmt_shape(a.shape())
        );
    }
    Ok(())
}

/// `check_matrix` for the ops that also take complex64 (Hermitian eigh, SVD), as MLX.
fn check_matrix_or_complex(op: &'static str, a: &Array, square: bool) -> Result<()> {
    let d = a.dtype();
    ensure!(
        matches!(d, DType::F32 | DType::F64 | DType::C64),
        Value,
        op,
        "Arrays must have type float32, float64 or complex64. Received array with type {d}."
    );
    check_shape(op, a, square)
}

/// Inverse of square matrices. Singular matrices raise at evaluation, as in MLX.
pub fn inv(a: &Array) -> Result<Array> {
    check_matrix("linalg::inv", a, true)?;
    one(LinalgOp::Inv, a)
}

/// Inverse of triangular matrices, reading only the `upper` (or lower) triangle.
pub fn tri_inv(a: &Array, upper: bool) -> Result<Array> {
    check_matrix("linalg::tri_inv", a, true)?;
    one(LinalgOp::TriInv { upper }, a)
}

/// Cholesky factor of symmetric positive definite matrices (read from the lower triangle):
/// `L` with `A = L L^T`, or `U = L^T` when `upper`. Not positive definite gives NaN.
pub fn cholesky(a: &Array, upper: bool) -> Result<Array> {
    check_matrix("linalg::cholesky", a, true)?;
    one(LinalgOp::Cholesky { upper }, a)
}

/// Inverse of `A` from its Cholesky factor (`L`, or `U` when `upper`).
pub fn cholesky_inv(factor: &Array, upper: bool) -> Result<Array> {
    check_matrix("linalg::cholesky_inv", factor, true)?;
    let t = one(LinalgOp::TriInv { upper }, factor)?;
    // A = L L^T gives A^-1 = L^-T L^-1; A = U^T U gives U^-1 U^-T.
    if upper {
        matmul(&t, &swap_last(&t)?)
    } else {
        matmul(&swap_last(&t)?, &t)
    }
}

/// Reduced QR: `Q (..., m, k)` with orthonormal columns and upper `R (..., k, n)`.
pub fn qr(a: &Array) -> Result<(Array, Array)> {
    check_matrix("linalg::qr", a, false)?;
    let mut out = run(LinalgOp::Qr, vec![a.clone()])?;
    let r = out.pop().expect("two outputs");
    Ok((out.pop().expect("two outputs"), r))
}

/// Full SVD `[U, S, Vt]` with `A = U diag(S) Vt` (descending `S`), or `[S]` when not
/// `compute_uv`.
pub fn svd(a: &Array, compute_uv: bool) -> Result<Vec<Array>> {
    check_matrix_or_complex("linalg::svd", a, false)?;
    run(LinalgOp::Svd { compute_uv }, vec![a.clone()])
}

/// Eigenvalues (ascending) and eigenvectors (columns) of symmetric matrices, read from the
/// `upper` (or lower) triangle.
pub fn eigh(a: &Array, upper: bool) -> Result<(Array, Array)> {
    check_matrix_or_complex("linalg::eigh", a, true)?;
    let mut out = run(LinalgOp::Eigh { upper, vectors: true }, vec![a.clone()])?;
    let v = out.pop().expect("two outputs");
    Ok((out.pop().expect("two outputs"), v))
}

/// Eigenvalues (ascending) of symmetric matrices.
pub fn eigvalsh(a: &Array, upper: bool) -> Result<Array> {
    check_matrix_or_complex("linalg::eigvalsh", a, true)?;
    one(LinalgOp::Eigh { upper, vectors: false }, a)
}

/// Shared front of `solve` and `solve_triangular`: promotion, MLX's checks, a 1-d `b` as a
/// column, broadcast batch axes.
fn solve_with(op: LinalgOp, a: &Array, b: &Array) -> Result<Array> {
    let name = op.name();
    let dtype = a.dtype().promote(b.dtype());
    ensure!(
        dtype == DType::F32 || dtype == DType::F64,
        Value,
        name,
        "Input arrays must promote to float32 or float64. Received arrays with type {} and {}.",
        a.dtype(),
        b.dtype()
    );
    ensure!(
        a.ndim() >= 2,
        Value,
        name,
        "First input must have >= 2 dimensions. Received array with {} dimensions.",
        a.ndim()
    );
    ensure!(
        b.ndim() >= 1,
        Value,
        name,
        "Second input must have >= 1 dimensions. Received array with {} dimensions.",
        b.ndim()
    );
    let nd = a.ndim();
    let n = a.shape()[nd - 1];
    ensure!(
        a.shape()[nd - 2] == n,
        Value,
        name,
        "First input must be a square matrix. Received array with shape {}.",
        fmt_shape(a.shape())
    );
    let vector = b.ndim() == 1;
    let b2 = if vector { expand_dims(b, &[-1])? } else { b.clone() };
    let nb = b2.ndim();
    ensure!(
        b2.shape()[nb - 2] == n,
        Value,
        name,
        "Last dimension of first input with shape {} must match second to last dimension of \
         second input with shape {}.",
        fmt_shape(a.shape()),
        fmt_shape(b.shape())
    );
    let batch = broadcast_shapes(name, &a.shape()[..nd - 2], &b2.shape()[..nb - 2])?;
    let with_batch = |x: &Array, tail: &[usize]| -> Result<Array> {
        let mut shape = batch.to_vec();
        shape.extend_from_slice(tail);
        broadcast_to(&astype(x, dtype)?, &shape)
    };
    let a = with_batch(a, &[n, n])?;
    let b2 = with_batch(&b2, &b2.shape()[nb - 2..])?;
    let x = run(op, vec![a, b2])?.swap_remove(0);
    if vector {
        squeeze(&x, Some(&[-1]))
    } else {
        Ok(x)
    }
}

/// Solves `A X = B` (a 1-d `b` is one right-hand side). Singular `A` raises at evaluation.
pub fn solve(a: &Array, b: &Array) -> Result<Array> {
    solve_with(LinalgOp::Solve, a, b)
}

/// Solves `A X = B` for triangular `A`, reading only its `upper` (or lower) triangle.
pub fn solve_triangular(a: &Array, b: &Array, upper: bool) -> Result<Array> {
    solve_with(LinalgOp::SolveTriangular { upper }, a, b)
}

/// The dtype det/slogdet compute in (f64 stays, everything else float32) and return in
/// (the input's float type), as MLX.
fn det_input(op: &'static str, a: &Array) -> Result<(Array, DType)> {
    ensure!(
        a.ndim() >= 2,
        Value,
        op,
        "Arrays must have >= 2 dimensions. Received array with {} dimensions.",
        a.ndim()
    );
    let nd = a.ndim();
    ensure!(a.shape()[nd - 2] == a.shape()[nd - 1], Value, op, "Only defined for square matrices.");
    let compute = if a.dtype() == DType::F64 { DType::F64 } else { DType::F32 };
    Ok((astype(a, compute)?, a.dtype().to_float()))
}

/// Determinant of square matrices.
pub fn det(a: &Array) -> Result<Array> {
    let (x, out) = det_input("linalg::det", a)?;
    astype(&one(LinalgOp::Det, &x)?, out)
}

/// `(sign, log|det|)` of square matrices; singular gives `(0, -inf)`.
pub fn slogdet(a: &Array) -> Result<(Array, Array)> {
    let (x, out) = det_input("linalg::slogdet", a)?;
    let mut res = run(LinalgOp::Slogdet, vec![x])?;
    let log = astype(&res.pop().expect("two outputs"), out)?;
    Ok((astype(&res.pop().expect("two outputs"), out)?, log))
}

/// Partial-pivot LU `(p, L, U)` with `A = L[p] U` (`p` uint32 row indices), as MLX.
pub fn lu(a: &Array) -> Result<(Array, Array, Array)> {
    check_matrix("linalg::lu", a, false)?;
    let mut out = run(LinalgOp::Lu, vec![a.clone()])?;
    let u = out.pop().expect("three outputs");
    let l = out.pop().expect("three outputs");
    Ok((out.pop().expect("three outputs"), l, u))
}

/// The packed LU matrix and LAPACK's 0-based row swaps (uint32), as MLX.
pub fn lu_factor(a: &Array) -> Result<(Array, Array)> {
    check_matrix("linalg::lu_factor", a, false)?;
    let mut out = run(LinalgOp::LuFactor, vec![a.clone()])?;
    let pivots = out.pop().expect("two outputs");
    Ok((out.pop().expect("two outputs"), pivots))
}

/// Moore-Penrose pseudo-inverse through the SVD; singular values at most
/// `10 * max(m, n) * eps * max(S)` count as zero (MLX's cutoff).
pub fn pinv(a: &Array) -> Result<Array> {
    let op = "linalg::pinv";
    check_matrix(op, a, false)?;
    let nd = a.ndim();
    let (m, n) = (a.shape()[nd - 2], a.shape()[nd - 1]);
    let k = m.min(n);
    if k == 0 {
        let mut shape = a.shape()[..nd - 2].to_vec();
        shape.extend_from_slice(&[n, m]);
        return zeros(&shape, a.dtype());
    }
    let [u, s, vt]: [Array; 3] = match svd(a, true)?.try_into() {
        Ok(parts) => parts,
        Err(_) => bail!(Runtime, op, "Expected three SVD outputs."),
    };
    let eps = if a.dtype() == DType::F64 { f64::EPSILON } else { f32::EPSILON as f64 };
    let rcond = scalar(Scalar::Float(10.0 * m.max(n) as f64 * eps), a.dtype())?;
    let cutoff = multiply(&rcond, &max(&s, Some(&[-1]), true)?)?;
    let zero = scalar(Scalar::Float(0.0), a.dtype())?;
    let one = scalar(Scalar::Float(1.0), a.dtype())?;
    let inv_s = where_(&greater(&s, &cutoff)?, &divide(&one, &s)?, &zero)?;
    // V[:, :k] diag(1/S) U[:, :k]^T
    let first_k = |x: &Array, axis: usize| -> Result<Array> {
        let mut stops = vec![None; x.ndim()];
        stops[axis] = Some(k as i64);
        slice(x, &vec![None; x.ndim()], &stops, &vec![1; x.ndim()])
    };
    let v = swap_last(&first_k(&vt, nd - 2)?)?;
    let ut = swap_last(&first_k(&u, nd - 1)?)?;
    matmul(&multiply(&v, &expand_dims(&inv_s, &[-2])?)?, &ut)
}
