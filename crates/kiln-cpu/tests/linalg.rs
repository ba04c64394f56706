//! Factorisations and solvers: reconstructions, batches, strided inputs, empty matrices and
//! the failure rules (zero pivots error, non-positive-definite Cholesky is NaN).
mod common;

use common::*;
use kiln_base::{ArrayData, DType, Layout, LinalgOp, Primitive};

fn lin(op: LinalgOp) -> Primitive {
    Primitive::Linalg(op)
}

fn f64s(data: &[f64], shape: &[usize]) -> ArrayData {
    arr(data, shape, DType::F64)
}

/// Row-major `(m, k) @ (k, n)`.
fn mm(a: &[f64], b: &[f64], m: usize, k: usize, n: usize) -> Vec<f64> {
    let mut out = vec![0.0; m * n];
    for i in 0..m {
        for j in 0..n {
            out[i * n + j] = (0..k).map(|l| a[i * k + l] * b[l * n + j]).sum();
        }
    }
    out
}

fn assert_near(got: &[f64], want: &[f64], tol: f64) {
    assert_eq!(got.len(), want.len());
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!((g - w).abs() <= tol, "element {i}: got {g}, want {w}");
    }
}

const A: [f64; 9] = [4.0, 1.0, 2.0, 1.0, 5.0, 3.0, 2.0, 3.0, 6.0];

#[test]
fn inverse_of_a_batch_and_of_a_transposed_view() {
    let mut two = A.to_vec();
    two.extend(A.iter().map(|v| v * 2.0));
    let x = f64s(&two, &[2, 3, 3]);
    let inv = read::<f64>(&eval(&lin(LinalgOp::Inv), &[x]));
    assert_near(&mm(&A, &inv[..9], 3, 3, 3), &[1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0], 1e-12);
    assert_near(&inv[9..], &inv[..9].iter().map(|v| v / 2.0).collect::<Vec<_>>(), 1e-12);
    // A non-symmetric matrix read through a transposed layout.
    let b = [1.0, 2.0, 0.0, 3.0, 1.0, 1.0, 0.0, 1.0, 4.0];
    let bt =
        with_layout(&f64s(&b, &[3, 3]), Layout::new(shape(&[3, 3]), [1, 3].as_slice().into(), 0));
    let inv_t = read::<f64>(&eval(&lin(LinalgOp::Inv), &[bt]));
    let transposed: Vec<f64> = (0..9).map(|i| b[(i % 3) * 3 + i / 3]).collect();
    assert_near(
        &mm(&transposed, &inv_t, 3, 3, 3),
        &[1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0],
        1e-12,
    );
}

#[test]
fn singular_and_empty() {
    let zeros = f64s(&[0.0; 4], &[2, 2]);
    let err = try_eval(&lin(LinalgOp::Inv), std::slice::from_ref(&zeros)).unwrap_err();
    assert!(err.to_string().contains("singular"), "{err}");
    assert!(try_eval(&lin(LinalgOp::Solve), &[zeros.clone(), f64s(&[1.0, 1.0], &[2, 1])]).is_err());
    assert!(try_eval(&lin(LinalgOp::TriInv { upper: true }), std::slice::from_ref(&zeros)).is_err());
    assert_eq!(read::<f64>(&eval(&lin(LinalgOp::Det), std::slice::from_ref(&zeros))), vec![0.0]);
    let sl = try_eval_all(&lin(LinalgOp::Slogdet), &[zeros]).unwrap();
    assert_eq!((read::<f64>(&sl[0]), read::<f64>(&sl[1])), (vec![0.0], vec![f64::NEG_INFINITY]));
    let empty = f64s(&[], &[0, 0]);
    assert_eq!(
        eval(&lin(LinalgOp::Inv), std::slice::from_ref(&empty)).layout.shape.as_slice(),
        &[0, 0]
    );
    assert_eq!(read::<f64>(&eval(&lin(LinalgOp::Det), std::slice::from_ref(&empty))), vec![1.0]);
    let svd =
        try_eval_all(&lin(LinalgOp::Svd { compute_uv: true }), &[f64s(&[], &[0, 2])]).unwrap();
    assert_eq!(read::<f64>(&svd[2]), vec![1.0, 0.0, 0.0, 1.0]);
    let batch = f64s(&[], &[0, 3, 3]);
    assert_eq!(eval(&lin(LinalgOp::Cholesky { upper: false }), &[batch]).layout.size(), 0);
}

#[test]
fn svd_and_qr_reconstruct() {
    let x = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]; // (3, 2)
    let out = try_eval_all(&lin(LinalgOp::Svd { compute_uv: true }), &[f64s(&x, &[3, 2])]).unwrap();
    let (u, s, vt) = (read::<f64>(&out[0]), read::<f64>(&out[1]), read::<f64>(&out[2]));
    assert!(s[0] >= s[1] && s[1] >= 0.0);
    let mut us = vec![0.0; 6]; // U[:, :2] diag(S)
    for i in 0..3 {
        for j in 0..2 {
            us[i * 2 + j] = u[i * 3 + j] * s[j];
        }
    }
    assert_near(&mm(&us, &vt, 3, 2, 2), &x, 1e-12);
    let only = eval(&lin(LinalgOp::Svd { compute_uv: false }), &[f64s(&x, &[3, 2])]);
    assert_near(&read::<f64>(&only), &s, 1e-12);
    let qr = try_eval_all(&lin(LinalgOp::Qr), &[f64s(&x, &[2, 3])]).unwrap();
    let (q, r) = (read::<f64>(&qr[0]), read::<f64>(&qr[1]));
    assert_eq!(
        (qr[0].layout.shape.as_slice(), qr[1].layout.shape.as_slice()),
        (&[2, 2][..], &[2, 3][..])
    );
    assert_eq!(r[3], 0.0);
    assert_near(&mm(&q, &r, 2, 2, 3), &x, 1e-12);
}

#[test]
fn svd_of_nan_is_an_error() {
    let x = f32s(&[f32::NAN, 1.0, 1.0, 2.0], &[2, 2]);
    assert!(try_eval_all(&lin(LinalgOp::Svd { compute_uv: true }), &[x]).is_err());
}

#[test]
fn cholesky_reads_one_triangle_and_fails_to_nan() {
    // Junk above the diagonal is ignored.
    let x = [4.0, 99.0, 2.0, 3.0];
    let l = read::<f64>(&eval(&lin(LinalgOp::Cholesky { upper: false }), &[f64s(&x, &[2, 2])]));
    assert_near(&l, &[2.0, 0.0, 1.0, 2f64.sqrt()], 1e-12);
    let u = read::<f64>(&eval(&lin(LinalgOp::Cholesky { upper: true }), &[f64s(&x, &[2, 2])]));
    assert_near(&u, &[2.0, 1.0, 0.0, 2f64.sqrt()], 1e-12);
    let bad = read::<f32>(&eval(
        &lin(LinalgOp::Cholesky { upper: false }),
        &[f32s(&[1.0, 2.0, 2.0, 1.0], &[2, 2])],
    ));
    assert!(bad.iter().all(|v| v.is_nan()));
}

#[test]
fn eigh_from_either_triangle() {
    // Lower triangle [[2, .], [1, 2]] and upper [[2, 1], [., 2]] are the same matrix.
    for (x, upper) in [([2.0, 50.0, 1.0, 2.0], false), ([2.0, 1.0, 50.0, 2.0], true)] {
        let out = try_eval_all(&lin(LinalgOp::Eigh { upper, vectors: true }), &[f64s(&x, &[2, 2])])
            .unwrap();
        assert_near(&read::<f64>(&out[0]), &[1.0, 3.0], 1e-12);
        let v = read::<f64>(&out[1]);
        let sym = [2.0, 1.0, 1.0, 2.0];
        let av = mm(&sym, &v, 2, 2, 2);
        let vw: Vec<f64> = (0..4).map(|i| v[i] * [1.0, 3.0][i % 2]).collect();
        assert_near(&av, &vw, 1e-12);
    }
}

#[test]
fn solves_and_determinants() {
    let b = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]; // (3, 2)
    let x = read::<f64>(&eval(&lin(LinalgOp::Solve), &[f64s(&A, &[3, 3]), f64s(&b, &[3, 2])]));
    assert_near(&mm(&A, &x, 3, 3, 2), &b, 1e-12);
    let t = read::<f64>(&eval(
        &lin(LinalgOp::SolveTriangular { upper: true }),
        &[f64s(&A, &[3, 3]), f64s(&b, &[3, 2])],
    ));
    let upper = [4.0, 1.0, 2.0, 0.0, 5.0, 3.0, 0.0, 0.0, 6.0];
    assert_near(&mm(&upper, &t, 3, 3, 2), &b, 1e-12);
    let inv = read::<f64>(&eval(&lin(LinalgOp::TriInv { upper: false }), &[f64s(&A, &[3, 3])]));
    let lower = [4.0, 0.0, 0.0, 1.0, 5.0, 0.0, 2.0, 3.0, 6.0];
    assert_near(&mm(&lower, &inv, 3, 3, 3), &[1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0], 1e-12);
    // det(A) = 4(30 - 9) - 1(6 - 6) + 2(3 - 10) = 70; a row swap flips the sign.
    assert_near(&read::<f64>(&eval(&lin(LinalgOp::Det), &[f64s(&A, &[3, 3])])), &[70.0], 1e-9);
    let swapped = [1.0, 5.0, 3.0, 4.0, 1.0, 2.0, 2.0, 3.0, 6.0];
    let sl = try_eval_all(&lin(LinalgOp::Slogdet), &[f64s(&swapped, &[3, 3])]).unwrap();
    assert_eq!(read::<f64>(&sl[0]), vec![-1.0]);
    assert_near(&read::<f64>(&sl[1]), &[70f64.ln()], 1e-12);
}

#[test]
fn rejects_other_dtypes_and_shapes() {
    let h = arr(&[half::f16::ONE; 4], &[2, 2], DType::F16);
    assert!(try_eval(&lin(LinalgOp::Inv), &[h]).is_err());
    assert!(try_eval(&lin(LinalgOp::Inv), &[f32s(&[1.0; 6], &[2, 3])]).is_err());
    assert!(try_eval(&lin(LinalgOp::Solve), &[f32s(&[1.0; 4], &[2, 2]), f64s(&[1.0; 2], &[2, 1])])
        .is_err());
}

#[test]
fn lu_as_lapack() {
    // Pivot rows are the first largest; `A = L[p] U`.
    let x = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]; // (3, 2)
    let out = try_eval_all(&lin(LinalgOp::Lu), &[f64s(&x, &[3, 2])]).unwrap();
    assert_eq!(out[0].dtype, DType::U32);
    let (p, l, u) = (read::<u32>(&out[0]), read::<f64>(&out[1]), read::<f64>(&out[2]));
    assert_eq!(p, vec![1, 2, 0]);
    let lu = mm(&l, &u, 3, 2, 2);
    let rebuilt: Vec<f64> = (0..6).map(|i| lu[p[i / 2] as usize * 2 + i % 2]).collect();
    assert_near(&rebuilt, &x, 1e-12);
    let packed = try_eval_all(&lin(LinalgOp::LuFactor), &[f64s(&x, &[3, 2])]).unwrap();
    assert_eq!(read::<u32>(&packed[1]), vec![2, 2]);
    // A zero column: no division, no NaN.
    let z =
        try_eval_all(&lin(LinalgOp::LuFactor), &[f64s(&[0.0, 1.0, 0.0, 2.0], &[2, 2])]).unwrap();
    assert_eq!(read::<f64>(&z[0]), vec![0.0, 1.0, 0.0, 2.0]);
    assert_eq!(read::<u32>(&z[1]), vec![0, 1]);
}
