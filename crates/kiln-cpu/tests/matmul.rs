//! Matmul against a naive triple loop: batches, transposed and strided operands, half
//! precision, k == 0 and empty dims.
mod common;

use common::*;
use half::{bf16, f16};
use kiln_base::{ArrayData, DType, Layout, Primitive};

/// Row-major (batch, m, n) product of row-major values.
fn naive(a: &[f64], b: &[f64], batch: usize, m: usize, k: usize, n: usize) -> Vec<f64> {
    let mut out = vec![0.0; batch * m * n];
    for p in 0..batch {
        for i in 0..m {
            for j in 0..n {
                out[(p * m + i) * n + j] =
                    (0..k).map(|l| a[(p * m + i) * k + l] * b[(p * k + l) * n + j]).sum();
            }
        }
    }
    out
}

fn values(n: usize, seed: usize) -> Vec<f64> {
    (0..n).map(|i| (((i * 37 + seed * 11) % 19) as f64 - 9.0) / 4.0).collect()
}

fn matmul_f64(a: &ArrayData, b: &ArrayData) -> Vec<f64> {
    let out = eval(&Primitive::Matmul, &[a.clone(), b.clone()]);
    match out.dtype {
        DType::F64 => read::<f64>(&out),
        DType::F32 => read::<f32>(&out).into_iter().map(f64::from).collect(),
        DType::F16 => read::<f16>(&out).into_iter().map(f64::from).collect(),
        _ => read::<bf16>(&out).into_iter().map(f64::from).collect(),
    }
}

#[test]
fn contiguous_batched_and_large() {
    for (batch, m, k, n) in [(1, 1, 1, 1), (1, 3, 4, 5), (3, 2, 7, 3), (2, 70, 90, 65)] {
        let (av, bv) = (values(batch * m * k, 1), values(batch * k * n, 2));
        let want = naive(&av, &bv, batch, m, k, n);
        let a64 = arr(&av, &[batch, m, k], DType::F64);
        let b64 = arr(&bv, &[batch, k, n], DType::F64);
        assert_close(&matmul_f64(&a64, &b64), &want, 1e-12);
        let a32 =
            arr(&av.iter().map(|&v| v as f32).collect::<Vec<_>>(), &[batch, m, k], DType::F32);
        let b32 =
            arr(&bv.iter().map(|&v| v as f32).collect::<Vec<_>>(), &[batch, k, n], DType::F32);
        assert_close(&matmul_f64(&a32, &b32), &want, 1e-5);
    }
}

#[test]
fn transposed_strided_and_broadcast_operands() {
    let (m, k, n) = (4, 5, 3);
    let (av, bv) = (values(m * k, 3), values(k * n, 4));
    let want = naive(&av, &bv, 1, m, k, n);
    // a stored as (k, m) and transposed: column-major matrix view.
    let mut at = vec![0.0; m * k];
    for i in 0..m {
        for l in 0..k {
            at[l * m + i] = av[i * k + l];
        }
    }
    let a_t = arr(&at, &[k, m], DType::F64);
    let a_view = with_layout(&a_t, a_t.layout.transpose(&[1, 0]));
    let b = arr(&bv, &[k, n], DType::F64);
    assert_close(&matmul_f64(&a_view, &b), &want, 1e-12);
    // b reversed twice (negative strides) equals b: gathered path.
    let mut brev = bv.clone();
    brev.reverse();
    let b_rev = arr(&brev, &[k, n], DType::F64);
    let b_view = with_layout(&b_rev, b_rev.layout.slice(&[k - 1, n - 1], &[-1, -1], &[k, n]));
    assert_close(&matmul_f64(&a_view, &b_view), &want, 1e-12);
    // Every other column of a wider buffer (row stride 2k).
    let mut wide = vec![0.0; m * 2 * k];
    for i in 0..m {
        for l in 0..k {
            wide[i * 2 * k + 2 * l] = av[i * k + l];
        }
    }
    let w = arr(&wide, &[m, 2 * k], DType::F64);
    let a_strided = with_layout(&w, w.layout.slice(&[0, 0], &[1, 2], &[m, k]));
    assert_close(&matmul_f64(&a_strided, &b), &want, 1e-12);
    // Batch of 3 with b broadcast along the batch (stride 0) and a transposed per batch.
    let a3v = values(3 * m * k, 5);
    let mut a3t = vec![0.0; 3 * m * k];
    for p in 0..3 {
        for i in 0..m {
            for l in 0..k {
                a3t[(p * k + l) * m + i] = a3v[(p * m + i) * k + l];
            }
        }
    }
    let a3 = arr(&a3t, &[3, k, m], DType::F64);
    let a3 = with_layout(&a3, a3.layout.transpose(&[0, 2, 1]));
    let b3 = with_layout(&b, b.layout.broadcast_to(&[3, k, n]));
    let b3v: Vec<f64> = (0..3).flat_map(|_| bv.clone()).collect();
    assert_close(&matmul_f64(&a3, &b3), &naive(&a3v, &b3v, 3, m, k, n), 1e-12);
}

#[test]
fn half_precision_goes_through_f32() {
    let (m, k, n) = (3, 6, 2);
    let (av, bv) = (values(m * k, 6), values(k * n, 7));
    let want = naive(&av, &bv, 1, m, k, n);
    let ah: Vec<f16> = av.iter().map(|&v| f16::from_f64(v)).collect();
    let bh: Vec<f16> = bv.iter().map(|&v| f16::from_f64(v)).collect();
    let got = matmul_f64(&arr(&ah, &[m, k], DType::F16), &arr(&bh, &[k, n], DType::F16));
    // Inputs are multiples of 1/4, exact in f16; only the final rounding differs.
    let rounded: Vec<f64> = want.iter().map(|&v| f64::from(f16::from_f64(v))).collect();
    assert_eq!(got, rounded);
    // bf16 with a column-major a (strides (1, m)).
    let mut ab = vec![bf16::ZERO; m * k];
    for i in 0..m {
        for l in 0..k {
            ab[l * m + i] = bf16::from_f64(av[i * k + l]);
        }
    }
    let bb: Vec<bf16> = bv.iter().map(|&v| bf16::from_f64(v)).collect();
    let a = arr(&ab, &[k, m], DType::BF16);
    let a = with_layout(&a, Layout::new(shape(&[m, k]), [1isize, m as isize].as_slice().into(), 0));
    let got = matmul_f64(&a, &arr(&bb, &[k, n], DType::BF16));
    let rounded: Vec<f64> = want.iter().map(|&v| f64::from(bf16::from_f64(v))).collect();
    assert_eq!(got, rounded);
    // Integer inputs are rejected.
    let i = arr(&[1i32], &[1, 1], DType::I32);
    assert!(try_eval(&Primitive::Matmul, &[i.clone(), i]).is_err());
}

#[test]
fn zero_inner_and_empty_dims() {
    let a = arr::<f32>(&[], &[2, 0], DType::F32);
    let b = arr::<f32>(&[], &[0, 3], DType::F32);
    assert_eq!(matmul_f64(&a, &b), vec![0.0; 6]);
    let a = arr::<f64>(&[], &[0, 4], DType::F64);
    let b = arr(&[1.0f64; 8], &[4, 2], DType::F64);
    let out = eval(&Primitive::Matmul, &[a, b]);
    assert_eq!(out.layout.shape.as_slice(), &[0, 2]);
    let a = arr::<f64>(&[], &[0, 2, 2], DType::F64);
    assert_eq!(eval(&Primitive::Matmul, &[a.clone(), a]).layout.shape.as_slice(), &[0, 2, 2]);
    let a = arr::<f16>(&[], &[1, 0], DType::F16);
    let b = arr::<f16>(&[], &[0, 1], DType::F16);
    assert_eq!(matmul_f64(&a, &b), vec![0.0]);
}
