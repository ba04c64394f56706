//! complex64 kernels: the FFT primitive against a direct DFT (strided inputs, odd and
//! prime lengths, real kinds), complex parts, casts, matmul and eig.
mod common;

use common::*;
use kiln_base::{ComplexOp, DType, FftKind, Layout, LinalgOp, Primitive};

/// `[re, im]` pairs as complex64 data.
fn c64(pairs: &[[f32; 2]], shape: &[usize]) -> kiln_base::ArrayData {
    arr(pairs, shape, DType::C64)
}

/// A direct DFT of one line (f64), the oracle.
fn dft(x: &[[f64; 2]], inverse: bool) -> Vec<[f64; 2]> {
    let n = x.len();
    let sign = if inverse { 1.0 } else { -1.0 };
    (0..n)
        .map(|k| {
            let mut acc = [0.0, 0.0];
            for (j, v) in x.iter().enumerate() {
                let t = sign * 2.0 * std::f64::consts::PI * (j * k % n) as f64 / n as f64;
                acc[0] += v[0] * t.cos() - v[1] * t.sin();
                acc[1] += v[0] * t.sin() + v[1] * t.cos();
            }
            if inverse {
                [acc[0] / n as f64, acc[1] / n as f64]
            } else {
                acc
            }
        })
        .collect()
}

fn flat(v: &[[f32; 2]]) -> Vec<f64> {
    v.iter().flat_map(|p| [p[0] as f64, p[1] as f64]).collect()
}

fn input(n: usize) -> Vec<[f32; 2]> {
    (0..n).map(|i| [(i as f32 * 0.7).sin(), (i as f32 * 1.3).cos() - 0.5]).collect()
}

#[test]
fn complex_fft_matches_direct_dft() {
    for n in [1usize, 2, 5, 8, 13, 30] {
        for inverse in [false, true] {
            let x = input(n);
            let prim = Primitive::Fft { axes: vec![0], inverse, kind: FftKind::Complex };
            let got: Vec<[f32; 2]> = read(&eval(&prim, &[c64(&x, &[n])]));
            let wide: Vec<[f64; 2]> = x.iter().map(|p| [p[0] as f64, p[1] as f64]).collect();
            let want: Vec<f64> = dft(&wide, inverse).iter().flat_map(|p| *p).collect();
            for (g, w) in flat(&got).iter().zip(&want) {
                assert!((g - w).abs() <= 1e-4 * w.abs().max(1.0), "n={n}: {g} vs {w}");
            }
        }
    }
}

#[test]
fn fft_over_a_strided_axis_and_a_transposed_view() {
    // (3, 4): transform axis 0 of the transposed view of a (4, 3) buffer.
    let x = input(12);
    let base = c64(&x, &[4, 3]);
    let view = with_layout(&base, Layout::new(shape(&[3, 4]), [1isize, 3].as_slice().into(), 0));
    let prim = Primitive::Fft { axes: vec![0], inverse: false, kind: FftKind::Complex };
    let got: Vec<[f32; 2]> = read(&eval(&prim, &[view]));
    for col in 0..4 {
        let line: Vec<[f64; 2]> =
            (0..3).map(|r| [x[col * 3 + r][0] as f64, x[col * 3 + r][1] as f64]).collect();
        let want = dft(&line, false);
        for r in 0..3 {
            let g = got[r * 4 + col];
            assert!(
                (g[0] as f64 - want[r][0]).abs() < 1e-4 && (g[1] as f64 - want[r][1]).abs() < 1e-4
            );
        }
    }
}

#[test]
fn real_transforms_round_trip() {
    let n = 7;
    let x: Vec<f32> = (0..2 * n).map(|i| (i as f32 * 0.37).cos()).collect();
    let fwd = Primitive::Fft { axes: vec![1], inverse: false, kind: FftKind::RealForward };
    let spec = eval(&fwd, &[f32s(&x, &[2, n])]);
    assert_eq!(spec.layout.shape.as_slice(), &[2, n / 2 + 1]);
    let inv = Primitive::Fft { axes: vec![1], inverse: true, kind: FftKind::RealInverse { n } };
    let back: Vec<f32> = read(&eval(&inv, &[spec]));
    let (a, b): (Vec<f64>, Vec<f64>) =
        back.iter().zip(&x).map(|(&g, &w)| (g as f64, w as f64)).unzip();
    assert_close(&a, &b, 1e-5);
    // A half spectrum of the wrong length is rejected by the shape rule.
    let bad = c64(&input(3), &[3]);
    let inv = Primitive::Fft { axes: vec![0], inverse: true, kind: FftKind::RealInverse { n: 8 } };
    assert!(try_eval(&inv, &[bad]).is_err());
}

#[test]
fn empty_inputs() {
    let prim = Primitive::Fft { axes: vec![1], inverse: false, kind: FftKind::Complex };
    let out = eval(&prim, &[c64(&[], &[0, 4])]);
    assert_eq!(out.layout.shape.as_slice(), &[0, 4]);
}

#[test]
fn parts_casts_and_matmul() {
    let z = c64(&[[3.0, -4.0], [0.0, 2.0]], &[2]);
    let part = |op| read::<f32>(&eval(&Primitive::Complex(op), std::slice::from_ref(&z)));
    assert_eq!(part(ComplexOp::Real), vec![3.0, 0.0]);
    assert_eq!(part(ComplexOp::Imag), vec![-4.0, 2.0]);
    assert_eq!(part(ComplexOp::Abs), vec![5.0, 2.0]);
    let conj: Vec<[f32; 2]> =
        read(&eval(&Primitive::Complex(ComplexOp::Conj), std::slice::from_ref(&z)));
    assert_eq!(conj, vec![[3.0, 4.0], [0.0, -2.0]]);
    assert!(try_eval(&Primitive::Complex(ComplexOp::Real), &[f32s(&[1.0], &[1])]).is_err());
    let to_bool = read::<u8>(&eval(&Primitive::AsType(DType::Bool), std::slice::from_ref(&z)));
    assert_eq!(to_bool, vec![1, 1]);
    let to_i32 = read::<i32>(&eval(&Primitive::AsType(DType::I32), &[z]));
    assert_eq!(to_i32, vec![3, 0]);
    // [[1+i, 2], [0, i]] @ [[1], [i]] = [[1 + 3i], [-1]]
    let a = c64(&[[1.0, 1.0], [2.0, 0.0], [0.0, 0.0], [0.0, 1.0]], &[2, 2]);
    let b = c64(&[[1.0, 0.0], [0.0, 1.0]], &[2, 1]);
    let p: Vec<[f32; 2]> = read(&eval(&Primitive::Matmul, &[a, b]));
    assert_eq!(p, vec![[1.0, 3.0], [-1.0, 0.0]]);
}

#[test]
fn eig_of_a_rotation() {
    // [[0, -1], [1, 0]] has eigenvalues +-i.
    let a = f32s(&[0.0, -1.0, 1.0, 0.0], &[2, 2]);
    let out = try_eval_all(&Primitive::Linalg(LinalgOp::Eig { vectors: true }), &[a]).unwrap();
    let mut w: Vec<[f32; 2]> = read(&out[0]);
    w.sort_by(|x, y| x[1].total_cmp(&y[1]));
    assert!((w[0][1] + 1.0).abs() < 1e-6 && w[0][0].abs() < 1e-6);
    assert!((w[1][1] - 1.0).abs() < 1e-6 && w[1][0].abs() < 1e-6);
    assert_eq!(out[1].layout.shape.as_slice(), &[2, 2]);
}
