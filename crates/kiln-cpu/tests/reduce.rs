//! Reduce and ArgReduce against naive loops: any axes of strided views, empty axes, NaN,
//! wrapping integers, f16 accumulation.
mod common;

use common::*;
use half::f16;
use kiln_base::{ArgReduceOp, ArrayData, DType, Layout, Primitive, ReduceOp};

fn red(op: ReduceOp, axes: &[usize]) -> Primitive {
    Primitive::Reduce { op, axes: axes.to_vec() }
}

/// Naive reduction of a row-major (2, 3, 4) array over `axes`, output keeping size-1 axes.
fn naive(data: &[f64], dims: [usize; 3], axes: &[usize], op: ReduceOp) -> Vec<f64> {
    let out_dims: Vec<usize> =
        (0..3).map(|a| if axes.contains(&a) { 1 } else { dims[a] }).collect();
    let n_out: usize = out_dims.iter().product();
    let mut out = vec![None::<f64>; n_out];
    for i in 0..dims[0] {
        for j in 0..dims[1] {
            for k in 0..dims[2] {
                let v = data[(i * dims[1] + j) * dims[2] + k];
                let idx = [i, j, k];
                let o = (0..3).fold(0, |acc, a| {
                    acc * out_dims[a] + if axes.contains(&a) { 0 } else { idx[a] }
                });
                out[o] = Some(match (out[o], op) {
                    (None, _) => v,
                    (Some(a), ReduceOp::Sum) => a + v,
                    (Some(a), ReduceOp::Prod) => a * v,
                    (Some(a), ReduceOp::Max) => a.max(v),
                    (Some(a), ReduceOp::Min) => a.min(v),
                    (Some(_), ReduceOp::And | ReduceOp::Or) => unreachable!("bool inputs only"),
                });
            }
        }
    }
    out.into_iter().map(|v| v.unwrap()).collect()
}

#[test]
fn every_axis_set_of_contiguous_and_transposed_views() {
    let data: Vec<f64> = (0..24).map(|i| ((i * 7) % 11) as f64 - 4.5).collect();
    let x = arr(&data, &[2, 3, 4], DType::F64);
    // The same values as a transposed view of a (4, 3, 2) buffer.
    let mut tdata = vec![0.0; 24];
    for i in 0..2 {
        for j in 0..3 {
            for k in 0..4 {
                tdata[(k * 3 + j) * 2 + i] = data[(i * 3 + j) * 4 + k];
            }
        }
    }
    let t = arr(&tdata, &[4, 3, 2], DType::F64);
    let t = with_layout(&t, t.layout.transpose(&[2, 1, 0]));
    let axis_sets: [&[usize]; 8] = [&[], &[0], &[1], &[2], &[0, 1], &[0, 2], &[1, 2], &[0, 1, 2]];
    for op in [ReduceOp::Sum, ReduceOp::Prod, ReduceOp::Max, ReduceOp::Min] {
        for axes in axis_sets {
            let want = naive(&data, [2, 3, 4], axes, op);
            for input in [&x, &t] {
                let out = eval(&red(op, axes), std::slice::from_ref(input));
                assert_close(&read::<f64>(&out), &want, 1e-12);
            }
        }
    }
}

#[test]
fn float_reductions_nan_and_f16_accumulation() {
    let x = f32s(&[1.0, f32::NAN, 3.0, -2.0], &[4]);
    for op in [ReduceOp::Sum, ReduceOp::Max, ReduceOp::Min, ReduceOp::Prod] {
        assert!(read::<f32>(&eval(&red(op, &[0]), std::slice::from_ref(&x)))[0].is_nan(), "{op:?}");
    }
    // 4096 ones in f16 would stall at 2048 with f16 accumulation.
    let h = arr(&vec![f16::ONE; 4096], &[4096], DType::F16);
    assert_eq!(read::<f16>(&eval(&red(ReduceOp::Sum, &[0]), &[h]))[0].to_f32(), 4096.0);
    // Pairwise f32: 10^6 * 0.1 stays close to 1e5 (naive f32 summation is off by ~1%).
    let n = 1_000_000;
    let x = f32s(&vec![0.1; n], &[n]);
    let s = read::<f32>(&eval(&red(ReduceOp::Sum, &[0]), &[x]))[0];
    assert!((s as f64 - 1e5).abs() < 1.0, "{s}");
}

#[test]
fn integer_and_bool_reductions() {
    let x = arr(&[100i8, 100, 100, -128], &[4], DType::I8);
    assert_eq!(
        read::<i8>(&eval(&red(ReduceOp::Sum, &[0]), std::slice::from_ref(&x))),
        vec![-84] /* 172 wrapped */
    );
    assert_eq!(read::<i8>(&eval(&red(ReduceOp::Prod, &[0]), std::slice::from_ref(&x))), vec![0]);
    assert_eq!(read::<i8>(&eval(&red(ReduceOp::Max, &[0]), std::slice::from_ref(&x))), vec![100]);
    assert_eq!(read::<i8>(&eval(&red(ReduceOp::Min, &[0]), &[x])), vec![-128]);
    let u = arr(&[u64::MAX, 2], &[2], DType::U64);
    assert_eq!(read::<u64>(&eval(&red(ReduceOp::Sum, &[0]), &[u])), vec![1]);
    let b = arr(&[0u8, 1, 0, 0], &[2, 2], DType::Bool);
    assert_eq!(read::<u8>(&eval(&red(ReduceOp::Max, &[1]), std::slice::from_ref(&b))), vec![1, 0]);
    assert_eq!(read::<u8>(&eval(&red(ReduceOp::Min, &[0]), &[b])), vec![0, 0]);
}

#[test]
fn empty_and_zero_dim_reductions() {
    let e = f32s(&[], &[2, 0]);
    assert_eq!(
        read::<f32>(&eval(&red(ReduceOp::Sum, &[1]), std::slice::from_ref(&e))),
        vec![0.0, 0.0]
    );
    assert_eq!(
        read::<f32>(&eval(&red(ReduceOp::Prod, &[1]), std::slice::from_ref(&e))),
        vec![1.0, 1.0]
    );
    assert!(try_eval(&red(ReduceOp::Max, &[1]), std::slice::from_ref(&e)).is_err());
    assert!(try_eval(&red(ReduceOp::Min, &[0, 1]), std::slice::from_ref(&e)).is_err());
    // Reducing the non-empty axis leaves an empty output: nothing to fail on.
    let out = eval(&red(ReduceOp::Max, &[0]), std::slice::from_ref(&e));
    assert_eq!(out.layout.shape.as_slice(), &[1, 0]);
    let i = arr::<i32>(&[], &[0], DType::I32);
    assert_eq!(read::<i32>(&eval(&red(ReduceOp::Prod, &[0]), &[i])), vec![1]);
    let s = arr(&[5u16], &[], DType::U16);
    assert_eq!(read::<u16>(&eval(&red(ReduceOp::Sum, &[]), &[s])), vec![5]);
    // A broadcast input reduces like its materialised form.
    let r = f32s(&[1.0, 2.0], &[2]);
    let b = with_layout(&r, r.layout.broadcast_to(&[3, 2]));
    assert_eq!(read::<f32>(&eval(&red(ReduceOp::Sum, &[0]), &[b])), vec![3.0, 6.0]);
}

#[test]
fn argmax_argmin_first_wins_and_nan_wins() {
    let arg = |op, axis| Primitive::ArgReduce { op, axis };
    let x = f32s(&[1.0, 5.0, 5.0, -2.0, -2.0, 0.0], &[6]);
    assert_eq!(read::<u32>(&eval(&arg(ArgReduceOp::ArgMax, 0), std::slice::from_ref(&x))), vec![1]);
    assert_eq!(read::<u32>(&eval(&arg(ArgReduceOp::ArgMin, 0), &[x])), vec![3]);
    let n = f32s(&[1.0, f32::NAN, 5.0, f32::NAN, -9.0], &[5]);
    assert_eq!(read::<u32>(&eval(&arg(ArgReduceOp::ArgMax, 0), std::slice::from_ref(&n))), vec![1]);
    assert_eq!(read::<u32>(&eval(&arg(ArgReduceOp::ArgMin, 0), &[n])), vec![1]);
    // (2, 3) over each axis, transposed and reversed views, ints and bool.
    let m = arr(&[3i64, 9, 1, 7, 2, 8], &[2, 3], DType::I64);
    let out = eval(&arg(ArgReduceOp::ArgMax, 0), std::slice::from_ref(&m));
    assert_eq!(out.layout.shape.as_slice(), &[1, 3]);
    assert_eq!(read::<u32>(&out), vec![1, 0, 1]);
    assert_eq!(
        read::<u32>(&eval(&arg(ArgReduceOp::ArgMin, 1), std::slice::from_ref(&m))),
        vec![2, 1]
    );
    let t = with_layout(&m, m.layout.transpose(&[1, 0]));
    assert_eq!(read::<u32>(&eval(&arg(ArgReduceOp::ArgMax, 1), &[t])), vec![1, 0, 1]);
    let r =
        with_layout(&m, Layout::new(m.layout.shape.clone(), [-3isize, -1].as_slice().into(), 5));
    assert_eq!(read::<u32>(&eval(&arg(ArgReduceOp::ArgMax, 1), &[r])), vec![0, 1]);
    let b = arr(&[0u8, 0, 1, 1], &[4], DType::Bool);
    assert_eq!(read::<u32>(&eval(&arg(ArgReduceOp::ArgMax, 0), &[b])), vec![2]);
    let e = f32s(&[], &[0, 2]);
    assert!(try_eval(&arg(ArgReduceOp::ArgMax, 0), std::slice::from_ref(&e)).is_err());
    assert_eq!(read::<u32>(&eval(&arg(ArgReduceOp::ArgMax, 1), &[e])).len(), 0);
}

#[test]
fn and_or_of_bools_with_empty_groups_and_views() {
    let b = arr(&[1u8, 1, 0, 1, 0, 0], &[2, 3], DType::Bool);
    let all = |axes: &[usize], x: &ArrayData| {
        read::<u8>(&eval(&red(ReduceOp::And, axes), std::slice::from_ref(x)))
    };
    let any = |axes: &[usize], x: &ArrayData| {
        read::<u8>(&eval(&red(ReduceOp::Or, axes), std::slice::from_ref(x)))
    };
    assert_eq!(all(&[1], &b), vec![0, 0]);
    assert_eq!(all(&[0], &b), vec![1, 0, 0]);
    assert_eq!(any(&[1], &b), vec![1, 1]);
    assert_eq!(any(&[0, 1], &b), vec![1]);
    // A transposed view: rows become columns.
    let t = with_layout(&b, b.layout.transpose(&[1, 0]));
    assert_eq!(all(&[1], &t), vec![1, 0, 0]);
    // Over no elements: all is true, any is false.
    let e = arr::<u8>(&[], &[2, 0], DType::Bool);
    assert_eq!(all(&[1], &e), vec![1, 1]);
    assert_eq!(any(&[1], &e), vec![0, 0]);
    // Only bools: the op converts first, and the primitive refuses anything else.
    let f = f32s(&[1.0], &[1]);
    assert!(try_eval(&red(ReduceOp::And, &[0]), &[f]).is_err());
}

/// Naive argmax/argmin of a row-major `(outer, n, inner)` array over the middle axis.
fn naive_arg(data: &[f32], (outer, n, inner): (usize, usize, usize), max: bool) -> Vec<u32> {
    let mut out = Vec::new();
    for o in 0..outer {
        for c in 0..inner {
            let at = |r: usize| data[(o * n + r) * inner + c];
            let mut best = 0;
            for r in 1..n {
                let (v, b) = (at(r), at(best));
                if !b.is_nan() && (v.is_nan() || if max { v > b } else { v < b }) {
                    best = r;
                }
            }
            out.push(best as u32);
        }
    }
    out
}

#[test]
fn argmax_argmin_large_contiguous_and_threaded() {
    // Sizes above the threading threshold: one long run, many runs, and columns (the
    // reduced axis first or in the middle, more than one block of columns), with ties
    // across thread chunks and NaN placed late.
    let arg = |op, axis| Primitive::ArgReduce { op, axis };
    let vals = |n: usize| -> Vec<f32> { (0..n).map(|i| ((i * 7919) % 1000) as f32).collect() };
    for (dims, nan_at) in [
        ((1, 200_000, 1), None),
        ((1, 200_000, 1), Some(150_001)),
        ((64, 3000, 1), Some(5000)),
        ((1, 70, 2500), None),
        ((3, 40, 1500), Some(40 * 1500 + 1700)),
        ((2, 5, 3), Some(7)),
    ] {
        let (o, n, i) = dims;
        let mut data = vals(o * n * i);
        if let Some(k) = nan_at {
            data[k] = f32::NAN;
        }
        let x = f32s(&data, &[o, n, i]);
        for (op, max) in [(ArgReduceOp::ArgMax, true), (ArgReduceOp::ArgMin, false)] {
            let got = read::<u32>(&eval(&arg(op, 1), std::slice::from_ref(&x)));
            assert_eq!(got, naive_arg(&data, dims, max), "{dims:?} {op:?}");
        }
    }
    // An offset view of a row-contiguous slice reads from its offset.
    let data = vals(2 * 40_000);
    let x = f32s(&data, &[2, 40_000]);
    let second = with_layout(
        &x,
        Layout::new([40_000usize].as_slice().into(), [1isize].as_slice().into(), 40_000),
    );
    let got = read::<u32>(&eval(&arg(ArgReduceOp::ArgMax, 0), &[second]));
    assert_eq!(got, naive_arg(&data[40_000..], (1, 40_000, 1), true));
    // Integers and a size-1 reduced axis.
    let ints = arr(&[4i32, -1, 4, 9, 9, 0], &[3, 1, 2], DType::I32);
    assert_eq!(read::<u32>(&eval(&arg(ArgReduceOp::ArgMax, 1), &[ints])), vec![0; 6]);
}
