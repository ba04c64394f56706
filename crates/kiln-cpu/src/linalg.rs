//! Dense factorisations and solvers through faer, one matrix of the batch at a time: inputs
//! are read row-major (strided views gathered), results written row-major. Failures follow
//! MLX/LAPACK: an exactly zero pivot (singular inverse or solve) and a non-converging SVD are
//! errors; a matrix that is not positive definite gives a NaN Cholesky factor and a
//! non-converging eigensolver NaN values, instead of MLX's unspecified numbers.

use crate::matmul::Gemm;
use crate::strided::{dense, output};
use faer::linalg::solvers::{DenseSolveCore, Solve};
use faer::traits::RealField;
use faer::{Mat, MatMut, MatRef, Side};
use kiln_base::shape::size_of;
use kiln_base::{bail, ArrayData, DType, LinalgOp, Result, Shape};

/// The float types faer factorises (f32, f64); `Element::from_f64` converts back.
trait Real:
    Gemm
    + RealField
    + PartialOrd
    + std::ops::Mul<Output = Self>
    + std::ops::SubAssign
    + std::ops::DivAssign
{
    fn to_f64(self) -> f64;
}

impl Real for f32 {
    fn to_f64(self) -> f64 {
        self as f64
    }
}

impl Real for f64 {
    fn to_f64(self) -> f64 {
        self
    }
}

pub(crate) fn linalg(
    op: LinalgOp,
    inputs: &[ArrayData],
    outputs: &[(Shape, DType)],
) -> Result<Vec<ArrayData>> {
    match inputs[0].dtype {
        DType::F32 => run::<f32>(op, inputs, outputs),
        DType::F64 => run::<f64>(op, inputs, outputs),
        d => bail!(Type, op.name(), "Arrays must have type float32 or float64, got {d}."),
    }
}

fn run<T: Real>(
    op: LinalgOp,
    inputs: &[ArrayData],
    outputs: &[(Shape, DType)],
) -> Result<Vec<ArrayData>> {
    let name = op.name();
    let shape = &inputs[0].layout.shape;
    let nd = shape.len();
    let (m, n) = (shape[nd - 2], shape[nd - 1]);
    let batch = size_of(&shape[..nd - 2]);
    let a = dense::<T>(&inputs[0]);
    let b = inputs.get(1).map(dense::<T>);
    let rhs_cols = inputs.get(1).map_or(0, |x| x.layout.shape[nd - 1]);
    let mut outs: Vec<Vec<T>> =
        outputs.iter().map(|(s, _)| Vec::with_capacity(size_of(s))).collect();
    // The one uint32 output (LU row indices or pivots), if any.
    let mut indices: Vec<u32> = Vec::new();
    for i in 0..batch {
        let mat = MatRef::from_row_major_slice(&a[i * m * n..(i + 1) * m * n], m, n);
        let rhs = b.as_ref().map(|b| {
            let size = n * rhs_cols;
            MatRef::from_row_major_slice(&b[i * size..(i + 1) * size], n, rhs_cols)
        });
        match op {
            LinalgOp::Inv => push(&mut outs[0], inverse(name, mat)?.as_ref()),
            LinalgOp::TriInv { upper } => {
                let t = triangle(name, mat, upper)?;
                let mut x = Mat::<T>::identity(n, n);
                solve_triangular(t.as_ref(), upper, x.as_mut());
                push(&mut outs[0], x.as_ref());
            }
            LinalgOp::Cholesky { upper } => {
                let factor = cholesky(mat);
                push(&mut outs[0], if upper { factor.transpose() } else { factor.as_ref() });
            }
            LinalgOp::Qr => {
                if m.min(n) > 0 {
                    let qr = mat.qr();
                    push(&mut outs[0], qr.compute_thin_Q().as_ref());
                    push(&mut outs[1], qr.thin_R());
                }
            }
            LinalgOp::Svd { compute_uv } => svd(name, mat, compute_uv, &mut outs)?,
            LinalgOp::Eigh { upper, vectors } => eigh(mat, upper, vectors, &mut outs),
            // Complex outputs: dispatched to complex_linalg.rs before this generic path.
            LinalgOp::Eig { .. } => bail!(Runtime, name, "Expected the complex eig kernel."),
            LinalgOp::Solve => {
                let mut x = rhs.expect("two inputs").to_owned();
                if n > 0 {
                    let lu = mat.partial_piv_lu();
                    check_pivots(name, lu.U())?;
                    lu.solve_in_place(x.as_mut());
                }
                push(&mut outs[0], x.as_ref());
            }
            LinalgOp::SolveTriangular { upper } => {
                let t = triangle(name, mat, upper)?;
                let mut x = rhs.expect("two inputs").to_owned();
                solve_triangular(t.as_ref(), upper, x.as_mut());
                push(&mut outs[0], x.as_ref());
            }
            LinalgOp::Slogdet => {
                let (sign, log) = slogdet(mat);
                outs[0].push(T::from_f64(sign));
                outs[1].push(T::from_f64(log));
            }
            // The pivots' product, not exp(log): exact for small integer matrices.
            LinalgOp::Det => outs[0].push(T::from_f64(det(mat))),
            LinalgOp::Lu | LinalgOp::LuFactor => {
                let mut lu: Vec<T> = a[i * m * n..(i + 1) * m * n].to_vec();
                let pivots = getf2(&mut lu, m, n);
                if op == LinalgOp::LuFactor {
                    outs[0].extend_from_slice(&lu);
                    indices.extend(pivots.iter().map(|&p| p as u32));
                } else {
                    unpack_lu(&lu, m, n, &pivots, &mut indices, &mut outs);
                }
            }
        }
    }
    outputs
        .iter()
        .zip(outs)
        .map(|((s, dtype), values)| {
            if *dtype == DType::U32 {
                return output::<u32>(name, s, |out| {
                    if out.len() != indices.len() {
                        bail!(
                            Runtime,
                            name,
                            "Kernel produced {} indices for {}.",
                            indices.len(),
                            out.len()
                        );
                    }
                    out.copy_from_slice(&indices);
                    Ok(())
                });
            }
            output::<T>(name, s, |out| {
                if out.len() != values.len() {
                    bail!(
                        Runtime,
                        name,
                        "Kernel produced {} values for {}.",
                        values.len(),
                        out.len()
                    );
                }
                out.copy_from_slice(&values);
                Ok(())
            })
        })
        .collect()
}

/// Appends `m` to `out` row-major.
fn push<T: Real>(out: &mut Vec<T>, m: MatRef<'_, T>) {
    let start = out.len();
    out.resize(start + m.nrows() * m.ncols(), T::default());
    MatMut::from_row_major_slice_mut(&mut out[start..], m.nrows(), m.ncols()).copy_from(m);
}

/// Appends `len` NaNs (a factorisation that does not exist).
fn push_nan<T: Real>(out: &mut Vec<T>, len: usize) {
    out.extend(std::iter::repeat_n(T::from_f64(f64::NAN), len));
}

/// LAPACK's singularity test: an exactly zero pivot (NaN pivots pass, giving NaN results).
fn check_pivots<T: Real>(op: &'static str, u: MatRef<'_, T>) -> Result<()> {
    if u.diagonal().column_vector().iter().any(|&p| p.to_f64() == 0.0) {
        bail!(Runtime, op, "The matrix is singular: its LU factorization has a zero pivot.");
    }
    Ok(())
}

fn inverse<T: Real>(op: &'static str, mat: MatRef<'_, T>) -> Result<Mat<T>> {
    let n = mat.nrows();
    if n == 0 {
        return Ok(Mat::zeros(0, 0));
    }
    let lu = mat.partial_piv_lu();
    check_pivots(op, lu.U())?;
    Ok(lu.inverse())
}

/// The `upper` (or lower) triangle of `mat`, zeros elsewhere; an error on a zero diagonal.
fn triangle<T: Real>(op: &'static str, mat: MatRef<'_, T>, upper: bool) -> Result<Mat<T>> {
    let n = mat.nrows();
    let t = Mat::from_fn(n, n, |i, j| {
        if (upper && j >= i) || (!upper && j <= i) {
            *mat.get(i, j)
        } else {
            T::default()
        }
    });
    if t.diagonal().column_vector().iter().any(|&d| d.to_f64() == 0.0) {
        bail!(Runtime, op, "The triangular matrix is singular: its diagonal has a zero.");
    }
    Ok(t)
}

fn solve_triangular<T: Real>(t: MatRef<'_, T>, upper: bool, x: MatMut<'_, T>) {
    if t.nrows() == 0 || x.ncols() == 0 {
        return;
    }
    if upper {
        t.solve_upper_triangular_in_place(x);
    } else {
        t.solve_lower_triangular_in_place(x);
    }
}

/// Lower Cholesky factor from the lower triangle; NaN when not positive definite.
fn cholesky<T: Real>(mat: MatRef<'_, T>) -> Mat<T> {
    let n = mat.nrows();
    if n == 0 {
        return Mat::zeros(0, 0);
    }
    match mat.llt(Side::Lower) {
        Ok(llt) => llt.L().to_owned(),
        Err(_) => Mat::from_fn(n, n, |_, _| T::from_f64(f64::NAN)),
    }
}

fn svd<T: Real>(op: &'static str, mat: MatRef<'_, T>, uv: bool, outs: &mut [Vec<T>]) -> Result<()> {
    let (m, n) = (mat.nrows(), mat.ncols());
    if m.min(n) == 0 {
        // No singular values; the singular vectors are any orthonormal bases.
        if uv {
            push(&mut outs[0], Mat::<T>::identity(m, m).as_ref());
            push(&mut outs[2], Mat::<T>::identity(n, n).as_ref());
        }
        return Ok(());
    }
    let failed =
        || -> Result<()> { bail!(Runtime, op, "SVD did not converge (is the input finite?).") };
    let (scaled, unscale) = normalized(mat);
    let unscale = |v: &T| T::from_f64(v.to_f64() * unscale);
    if !uv {
        let Ok(s) = scaled.singular_values() else { return failed() };
        outs[0].extend(s.iter().map(unscale));
        return Ok(());
    }
    let Ok(svd) = scaled.svd() else { return failed() };
    push(&mut outs[0], svd.U());
    outs[1].extend(svd.S().column_vector().iter().map(unscale));
    push(&mut outs[2], svd.V().transpose());
    Ok(())
}

/// `mat` divided by the power of two nearest its largest |entry|, and the factor that undoes
/// it: the iterative solvers square entries, which overflows float32 near 1e19 (and
/// underflows tiny ones). Scaling by a power of two is exact; non-finite input is kept.
fn normalized<T: Real>(mat: MatRef<'_, T>) -> (Mat<T>, f64) {
    let mut largest = 0.0f64;
    for j in 0..mat.ncols() {
        for i in 0..mat.nrows() {
            largest = largest.max(mat.get(i, j).to_f64().abs());
        }
    }
    let factor =
        if largest > 0.0 && largest.is_finite() { largest.log2().round().exp2() } else { 1.0 };
    (
        Mat::from_fn(mat.nrows(), mat.ncols(), |i, j| T::from_f64(mat.get(i, j).to_f64() / factor)),
        factor,
    )
}

/// Ascending eigenvalues (and eigenvectors as columns) of the symmetric matrix whose `upper`
/// (or lower) triangle `mat` holds.
fn eigh<T: Real>(mat: MatRef<'_, T>, upper: bool, vectors: bool, outs: &mut [Vec<T>]) {
    let n = mat.nrows();
    if n == 0 {
        return;
    }
    // Mirror the chosen triangle, so the solver sees exactly the matrix MLX describes.
    let sym = Mat::from_fn(n, n, |i, j| {
        let (r, c) = if (upper && j >= i) || (!upper && j <= i) { (i, j) } else { (j, i) };
        *mat.get(r, c)
    });
    let (sym, unscale) = normalized(sym.as_ref());
    let unscale = |v: &T| T::from_f64(v.to_f64() * unscale);
    if !vectors {
        match sym.self_adjoint_eigenvalues(Side::Lower) {
            Ok(w) => outs[0].extend(w.iter().map(unscale)),
            Err(_) => push_nan(&mut outs[0], n),
        }
        return;
    }
    match sym.self_adjoint_eigen(Side::Lower) {
        Ok(e) => {
            outs[0].extend(e.S().column_vector().iter().map(unscale));
            push(&mut outs[1], e.U());
        }
        Err(_) => {
            push_nan(&mut outs[0], n);
            push_nan(&mut outs[1], n * n);
        }
    }
}

/// Sign of a row permutation given as `perm[i]` = source row of row `i`.
fn permutation_sign(perm: &[usize]) -> f64 {
    let mut seen = vec![false; perm.len()];
    let mut sign = 1.0;
    for start in 0..perm.len() {
        let mut len = 0;
        let mut i = start;
        while !seen[i] {
            seen[i] = true;
            i = perm[i];
            len += 1;
        }
        if len > 0 && len % 2 == 0 {
            sign = -sign;
        }
    }
    sign
}

/// `(sign, log|det|)` from a partial-pivot LU (computed in f64): sign 0 and -inf when
/// singular.
fn slogdet<T: Real>(mat: MatRef<'_, T>) -> (f64, f64) {
    if mat.nrows() == 0 {
        return (1.0, 0.0);
    }
    let lu = mat.partial_piv_lu();
    let mut sign = permutation_sign(lu.P().arrays().0);
    let mut log = 0.0;
    for &u in lu.U().diagonal().column_vector().iter() {
        let u = u.to_f64();
        if u == 0.0 {
            return (0.0, f64::NEG_INFINITY);
        }
        sign *= u.signum();
        log += u.abs().ln();
    }
    (sign, log)
}

/// The determinant as the signed product of the LU pivots (exact for small integers); 0 at
/// the first zero pivot (the pivots after it are NaN).
fn det<T: Real>(mat: MatRef<'_, T>) -> f64 {
    if mat.nrows() == 0 {
        return 1.0;
    }
    let lu = mat.partial_piv_lu();
    let mut det = permutation_sign(lu.P().arrays().0);
    for &u in lu.U().diagonal().column_vector().iter() {
        if u.to_f64() == 0.0 {
            return 0.0;
        }
        det *= u.to_f64();
    }
    det
}

/// LAPACK's unblocked partial-pivot LU (`getf2`) of the row-major `(m, n)` matrix `a`, in
/// place: the first largest |pivot| of each column, rows swapped whole, and a zero pivot
/// leaves its column of `L` unscaled (no NaN). Returns the row swaps.
fn getf2<T: Real>(a: &mut [T], m: usize, n: usize) -> Vec<usize> {
    let k = m.min(n);
    let mut pivots = Vec::with_capacity(k);
    for j in 0..k {
        let mut p = j;
        for r in j + 1..m {
            if a[r * n + j].to_f64().abs() > a[p * n + j].to_f64().abs() {
                p = r;
            }
        }
        pivots.push(p);
        if p != j {
            for c in 0..n {
                a.swap(j * n + c, p * n + c);
            }
        }
        let pivot = a[j * n + j];
        if pivot.to_f64() != 0.0 {
            for r in j + 1..m {
                a[r * n + j] /= pivot;
            }
        }
        for r in j + 1..m {
            let l = a[r * n + j];
            for c in j + 1..n {
                a[r * n + c] -= l * a[j * n + c];
            }
        }
    }
    pivots
}

/// Splits a packed LU into MLX's `lu` outputs: row indices `p` with `A = L[p] U`, `L`, `U`.
fn unpack_lu<T: Real>(
    lu: &[T],
    m: usize,
    n: usize,
    pivots: &[usize],
    indices: &mut Vec<u32>,
    outs: &mut [Vec<T>],
) {
    let k = m.min(n);
    // order[r]: the original row that ended up as row r.
    let mut order: Vec<usize> = (0..m).collect();
    for (j, &p) in pivots.iter().enumerate() {
        order.swap(j, p);
    }
    let mut p = vec![0u32; m];
    for (r, &row) in order.iter().enumerate() {
        p[row] = r as u32;
    }
    indices.extend(p);
    let (zero, one) = (T::from_f64(0.0), T::from_f64(1.0));
    for r in 0..m {
        for c in 0..k {
            outs[1].push(match r.cmp(&c) {
                std::cmp::Ordering::Greater => lu[r * n + c],
                std::cmp::Ordering::Equal => one,
                std::cmp::Ordering::Less => zero,
            });
        }
    }
    for r in 0..k {
        for c in 0..n {
            outs[2].push(if c >= r { lu[r * n + c] } else { zero });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::permutation_sign;

    #[test]
    fn permutation_signs() {
        assert_eq!(permutation_sign(&[0, 1, 2]), 1.0);
        assert_eq!(permutation_sign(&[1, 0, 2]), -1.0);
        assert_eq!(permutation_sign(&[1, 2, 0]), 1.0);
        assert_eq!(permutation_sign(&[]), 1.0);
    }
}
