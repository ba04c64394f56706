//! complex64 products and the general eigendecomposition (`mx.linalg.eig`), through faer's
//! `c32`. Inputs are read row-major (strided views gathered), one matrix of the batch at a
//! time.

use crate::complex::C64;
use crate::matmul::PARALLEL_FLOPS;
use crate::strided::{dense, output};
use faer::linalg::matmul::matmul as faer_matmul;
use faer::{Accum, Mat, MatMut, MatRef, Par};
use kiln_base::shape::size_of;
use kiln_base::{bail, ArrayData, DType, Result, Shape};
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
