//! complex64 products and the general eigendecomposition (`mx.linalg.eig`), through faer's
//! `c32`. Inputs are read row-major (strided views gathered), one matrix of the batch at a
//! time.

use crate::complex::C64;
use crate::strided::{dense, output};
use crate::walk::PARALLEL_FLOPS;
use faer::linalg::matmul::matmul as faer_matmul;
use faer::{Accum, Mat, MatMut, MatRef, Par, Side};
use kiln_base::shape::size_of;
use kiln_base::{bail, ArrayData, DType, LinalgOp, Result, Shape};
use num_complex::Complex32;

/// `(..., m, k) @ (..., k, n)` in complex64 (equal batch dims).
pub(crate) fn matmul(a: &ArrayData, b: &ArrayData, shape: &[usize]) -> Result<ArrayData> {
    let (sa, sb) = (&a.layout.shape, &b.layout.shape);
    let nd = sa.len();
    let (m, k, n) = (sa[nd - 2], sa[nd - 1], sb[nd - 1]);
    let (da, db) = (dense::<Complex32>(a), dense::<Complex32>(b));
    let par = if m * n * k >= PARALLEL_FLOPS { Par::rayon(0) } else { Par::Seq };
    output::<C64>("matmul", shape, |out| {
        if m * n == 0 || k == 0 {
            return Ok(());
        }
        let out: &mut [Complex32] = bytemuck::cast_slice_mut(out);
        for (i, dst) in out.chunks_mut(m * n).enumerate() {
            let ma = MatRef::from_row_major_slice(&da[i * m * k..(i + 1) * m * k], m, k);
            let mb = MatRef::from_row_major_slice(&db[i * k * n..(i + 1) * k * n], k, n);
            let dst = MatMut::from_row_major_slice_mut(dst, m, n);
            faer_matmul(dst, Accum::Replace, ma, mb, Complex32::new(1.0, 0.0), par);
        }
        Ok(())
    })
}

/// Eigenvalues `(..., n)` and, with `vectors`, eigenvectors as columns `(..., n, n)`, both
/// complex64, from float32, float64 or complex64 square matrices. As LAPACK's `geev`, each
/// eigenvector has unit norm and its largest component real; a solver that does not
/// converge gives NaNs.
pub(crate) fn eig(
    vectors: bool,
    x: &ArrayData,
    outputs: &[(Shape, DType)],
) -> Result<Vec<ArrayData>> {
    let name = "linalg::eig";
    let shape = &x.layout.shape;
    let nd = shape.len();
    let n = shape[nd - 1];
    let batch = size_of(&shape[..nd - 2]);
    let a: Vec<Complex32> = match x.dtype {
        DType::F32 => dense::<f32>(x).iter().map(|&v| Complex32::new(v, 0.0)).collect(),
        DType::F64 => dense::<f64>(x).iter().map(|&v| Complex32::new(v as f32, 0.0)).collect(),
        DType::C64 => dense::<Complex32>(x).into_owned(),
        d => bail!(Type, name, "Arrays must have type float32, float64 or complex64, got {d}."),
    };
    let real = x.dtype != DType::C64;
    let (mut values, mut vecs) = (Vec::with_capacity(batch * n), Vec::new());
    let nan = Complex32::new(f32::NAN, f32::NAN);
    for i in 0..batch {
        let block = &a[i * n * n..(i + 1) * n * n];
        if n == 0 {
            continue;
        }
        // Real input factorises as real (conjugate pairs come out exactly conjugate).
        let re = real.then(|| Mat::<f32>::from_fn(n, n, |r, c| block[r * n + c].re));
        let mat = MatRef::from_row_major_slice(block, n, n);
        if !vectors {
            let w = match &re {
                Some(re) => re.eigenvalues(),
                None => mat.eigenvalues(),
            };
            match w {
                Ok(w) => values.extend(w),
                Err(_) => values.extend(std::iter::repeat_n(nan, n)),
            }
            continue;
        }
        let e = match &re {
            Some(re) => re.eigen(),
            None => mat.eigen(),
        };
        match e {
            Ok(e) => {
                values.extend(e.S().column_vector().iter().copied());
                let mut u = e.U().to_owned();
                for j in 0..n {
                    normalise(
                        u.as_mut().col_mut(j).try_as_col_major_mut().map(|c| c.as_slice_mut()),
                    );
                }
                let start = vecs.len();
                vecs.resize(start + n * n, nan);
                MatMut::from_row_major_slice_mut(&mut vecs[start..], n, n).copy_from(u.as_ref());
            }
            Err(_) => {
                values.extend(std::iter::repeat_n(nan, n));
                vecs.extend(std::iter::repeat_n(nan, n * n));
            }
        }
    }
    let fill = |data: &[Complex32], s: &Shape| {
        output::<C64>(name, s, |out| {
            if out.len() != data.len() {
                bail!(Runtime, name, "Kernel produced {} values for {}.", data.len(), out.len());
            }
            out.iter_mut().zip(data).for_each(|(o, &z)| *o = C64(z));
            Ok(())
        })
    };
    let mut outs = vec![fill(&values, &outputs[0].0)?];
    if vectors {
        outs.push(fill(&vecs, &outputs[1].0)?);
    }
    Ok(outs)
}

/// Scales a column to unit norm with its largest-magnitude component real and positive.
fn normalise(col: Option<&mut [Complex32]>) {
    let Some(col) = col else { return };
    let (mut big, mut norm) = (Complex32::new(0.0, 0.0), 0f32);
    for &z in col.iter() {
        if z.norm() > big.norm() {
            big = z;
        }
        norm = norm.hypot(z.norm());
    }
    if norm == 0.0 || !norm.is_finite() {
        return;
    }
    let rot = big.conj() / (big.norm() * norm);
    col.iter_mut().for_each(|z| *z *= rot);
}

/// complex64 `eigh` (Hermitian, from the `upper` or lower triangle: ascending float32
/// eigenvalues and unit eigenvectors as columns, each column turned so that its last
/// component is real and non-negative) and `svd` (descending float32 singular values; `U`
/// and `V^H` with each column of `U` turned so that its first component is real and
/// non-negative, the matching row of `V^H` turned with it). Vectors are unique only up to
/// such a phase, which LAPACK (MLX) fixes by its own algorithm; values and products agree.
pub(crate) fn hermitian(
    op: LinalgOp,
    x: &ArrayData,
    outputs: &[(Shape, DType)],
) -> Result<Vec<ArrayData>> {
    let name = op.name();
    let shape = &x.layout.shape;
    let nd = shape.len();
    let (m, n) = (shape[nd - 2], shape[nd - 1]);
    let batch = size_of(&shape[..nd - 2]);
    let a = dense::<Complex32>(x);
    let nan = Complex32::new(f32::NAN, f32::NAN);
    let mut reals: Vec<f32> = Vec::new();
    // The complex outputs in order (eigh: vectors; svd: U, V^H).
    let mut vecs: [Vec<Complex32>; 2] = [Vec::new(), Vec::new()];
    let push = |out: &mut Vec<Complex32>, mat: MatRef<'_, Complex32>| {
        let start = out.len();
        out.resize(start + mat.nrows() * mat.ncols(), nan);
        MatMut::from_row_major_slice_mut(&mut out[start..], mat.nrows(), mat.ncols())
            .copy_from(mat);
    };
    for i in 0..batch {
        let block = &a[i * m * n..(i + 1) * m * n];
        let mat = MatRef::from_row_major_slice(block, m, n);
        match op {
            LinalgOp::Eigh { upper, vectors } => {
                if n == 0 {
                    continue;
                }
                // The Hermitian matrix the chosen triangle describes (diagonal real).
                let h = Mat::<Complex32>::from_fn(n, n, |r, c| {
                    if r == c {
                        Complex32::new(mat.get(r, r).re, 0.0)
                    } else if (upper && c > r) || (!upper && c < r) {
                        *mat.get(r, c)
                    } else {
                        mat.get(c, r).conj()
                    }
                });
                let (h, unscale) = normalized(h.as_ref());
                if !vectors {
                    match h.self_adjoint_eigenvalues(Side::Lower) {
                        Ok(w) => reals.extend(w.iter().map(|v| (*v as f64 * unscale) as f32)),
                        Err(_) => reals.extend(std::iter::repeat_n(f32::NAN, n)),
                    }
                    continue;
                }
                match h.self_adjoint_eigen(Side::Lower) {
                    Ok(e) => {
                        reals.extend(
                            e.S().column_vector().iter().map(|v| (v.re as f64 * unscale) as f32),
                        );
                        let mut u = e.U().to_owned();
                        for j in 0..n {
                            let rot = phase(*u.get(n - 1, j));
                            u.as_mut().col_mut(j).iter_mut().for_each(|z| *z *= rot);
                        }
                        push(&mut vecs[0], u.as_ref());
                    }
                    Err(_) => {
                        reals.extend(std::iter::repeat_n(f32::NAN, n));
                        vecs[0].extend(std::iter::repeat_n(nan, n * n));
                    }
                }
            }
            LinalgOp::Svd { compute_uv } => {
                let k = m.min(n);
                if k == 0 {
                    if compute_uv {
                        push(&mut vecs[0], Mat::<Complex32>::identity(m, m).as_ref());
                        push(&mut vecs[1], Mat::<Complex32>::identity(n, n).as_ref());
                    }
                    continue;
                }
                let (scaled, unscale) = normalized(mat);
                if !compute_uv {
                    let Ok(s) = scaled.singular_values() else { bail!(Runtime, name, "{NO_SVD}") };
                    reals.extend(s.iter().map(|v| (*v as f64 * unscale) as f32));
                    continue;
                }
                let Ok(svd) = scaled.svd() else { bail!(Runtime, name, "{NO_SVD}") };
                let (mut u, mut v) = (svd.U().to_owned(), svd.V().to_owned());
                for j in 0..m {
                    let rot = phase(*u.get(0, j));
                    u.as_mut().col_mut(j).iter_mut().for_each(|z| *z *= rot);
                    if j < n {
                        v.as_mut().col_mut(j).iter_mut().for_each(|z| *z *= rot);
                    }
                }
                reals
                    .extend(svd.S().column_vector().iter().map(|v| (v.re as f64 * unscale) as f32));
                push(&mut vecs[0], u.as_ref());
                let vh = Mat::<Complex32>::from_fn(n, n, |r, c| v.get(c, r).conj());
                push(&mut vecs[1], vh.as_ref());
            }
            _ => bail!(Runtime, name, "No complex64 kernel for {name}."),
        }
    }
    let check = |got: usize, want: usize| -> Result<()> {
        if got != want {
            bail!(Runtime, name, "Kernel produced {got} values for {want}.");
        }
        Ok(())
    };
    let mut complex = vecs.into_iter();
    outputs
        .iter()
        .map(|(s, dtype)| {
            if *dtype == DType::F32 {
                return output::<f32>(name, s, |out| {
                    check(reals.len(), out.len())?;
                    out.copy_from_slice(&reals);
                    Ok(())
                });
            }
            let data = complex.next().unwrap_or_default();
            output::<C64>(name, s, |out| {
                check(data.len(), out.len())?;
                out.iter_mut().zip(&data).for_each(|(o, &z)| *o = C64(z));
                Ok(())
            })
        })
        .collect()
}

const NO_SVD: &str = "SVD did not converge (is the input finite?).";

/// The unit factor that turns `z` real and non-negative (1 for zero or non-finite `z`).
fn phase(z: Complex32) -> Complex32 {
    let r = z.norm();
    if r == 0.0 || !r.is_finite() {
        return Complex32::new(1.0, 0.0);
    }
    z.conj() / r
}

/// `mat` divided by the power of two nearest its largest |entry| and the factor undoing it
/// (as the real kernels: the iterative solvers square entries).
fn normalized(mat: MatRef<'_, Complex32>) -> (Mat<Complex32>, f64) {
    let mut largest = 0.0f64;
    for j in 0..mat.ncols() {
        for i in 0..mat.nrows() {
            largest = largest.max(mat.get(i, j).norm() as f64);
        }
    }
    let factor =
        if largest > 0.0 && largest.is_finite() { largest.log2().round().exp2() } else { 1.0 };
    let inv = (1.0 / factor) as f32;
    (Mat::from_fn(mat.nrows(), mat.ncols(), |i, j| *mat.get(i, j) * inv), factor)
}
