//! Scan against a naive loop: every op, forward/reverse, inclusive/exclusive, on strided
//! views (transposed, negative and zero strides, offsets), empty axes, wrapping integers,
//! bool and/or, NaN, half floats accumulating in f32, and the float-only log-add-exp.
mod common;

use common::*;
use half::f16;
use kiln_base::{ArrayData, DType, Layout, Primitive, ScanOp};

fn scan(op: ScanOp, axis: usize, reverse: bool, inclusive: bool) -> Primitive {
    Primitive::Scan { op, axis, reverse, inclusive }
}

fn run(p: &Primitive, x: &ArrayData) -> ArrayData {
    eval(p, std::slice::from_ref(x))
}

/// Naive scan of a row-major (rows, cols) f64 array along `axis`.
fn naive(
    data: &[f64],
    dims: [usize; 2],
    axis: usize,
    op: ScanOp,
    rev: bool,
    incl: bool,
) -> Vec<f64> {
    let f = |a: f64, b: f64| match op {
        ScanOp::Sum => a + b,
        ScanOp::Prod => a * b,
        ScanOp::Max => a.max(b),
        ScanOp::Min => a.min(b),
        ScanOp::LogAddExp => a.max(b) + (-(a - b).abs()).exp().ln_1p(),
    };
    let init = match op {
        ScanOp::Sum => 0.0,
        ScanOp::Prod => 1.0,
        ScanOp::Max | ScanOp::LogAddExp => f64::NEG_INFINITY,
        ScanOp::Min => f64::INFINITY,
    };
    let mut out = vec![0.0; data.len()];
    let (n, lines) = (dims[axis], dims[1 - axis]);
    for l in 0..lines {
        let at = |j: usize| if axis == 1 { l * dims[1] + j } else { j * dims[1] + l };
        let mut acc = init;
        for step in 0..n {
            let j = if rev { n - 1 - step } else { step };
            let next = if step == 0 { data[at(j)] } else { f(acc, data[at(j)]) };
            out[at(j)] = if incl { next } else { acc };
            acc = next;
        }
    }
    out
}

#[test]
fn every_op_direction_and_view_matches_naive() {
    let data: Vec<f64> = (0..12).map(|i| ((i * 5) % 7) as f64 * 0.5 - 1.0).collect();
    let x = arr(&data, &[3, 4], DType::F64);
    // The same values as a transposed view of a (4, 3) buffer, and reversed twice.
    let tdata: Vec<f64> = (0..12).map(|i| data[(i % 3) * 4 + i / 3]).collect();
    let t = arr(&tdata, &[4, 3], DType::F64);
    let t = with_layout(&t, t.layout.transpose(&[1, 0]));
    let rdata: Vec<f64> = data.iter().rev().copied().collect();
    let r = arr(&rdata, &[3, 4], DType::F64);
    let r = with_layout(&r, Layout::new(shape(&[3, 4]), [-4isize, -1].as_slice().into(), 11));
    for op in [ScanOp::Sum, ScanOp::Prod, ScanOp::Max, ScanOp::Min, ScanOp::LogAddExp] {
        for axis in [0, 1] {
            for (rev, incl) in [(false, true), (true, true), (false, false), (true, false)] {
                let want = naive(&data, [3, 4], axis, op, rev, incl);
                for input in [&x, &t, &r] {
                    let out = run(&scan(op, axis, rev, incl), input);
                    assert_eq!(out.layout.shape.as_slice(), &[3, 4]);
                    assert_close(&read::<f64>(&out), &want, 1e-12);
                }
            }
        }
    }
}

#[test]
fn broadcast_input_and_empty_axes() {
    let v = arr(&[1i32, 2, 3], &[3], DType::I32);
    let b = with_layout(&v, v.layout.broadcast_to(&[2, 3]));
    assert_eq!(read::<i32>(&run(&scan(ScanOp::Sum, 1, false, true), &b)), vec![1, 3, 6, 1, 3, 6]);
    assert_eq!(read::<i32>(&run(&scan(ScanOp::Sum, 0, false, true), &b)), vec![1, 2, 3, 2, 4, 6]);
    let e = arr::<f32>(&[], &[2, 0], DType::F32);
    for axis in [0, 1] {
        let out = run(&scan(ScanOp::Max, axis, true, false), &e);
        assert_eq!(out.layout.shape.as_slice(), &[2, 0]);
    }
    let s = arr(&[7u16], &[1], DType::U16);
    assert_eq!(read::<u16>(&run(&scan(ScanOp::Prod, 0, false, false), &s)), vec![1]);
    assert!(try_eval(&scan(ScanOp::Sum, 1, false, true), &[s]).is_err()); // axis out of range
}

#[test]
fn integers_wrap_and_exclusive_extremes() {
    let x = arr(&[100i8, 100, 100], &[3], DType::I8);
    assert_eq!(read::<i8>(&run(&scan(ScanOp::Sum, 0, false, true), &x)), vec![100, -56, 44]);
    assert_eq!(read::<i8>(&run(&scan(ScanOp::Prod, 0, false, true), &x)), vec![100, 16, 64]);
    assert_eq!(read::<i8>(&run(&scan(ScanOp::Max, 0, false, false), &x)), vec![i8::MIN, 100, 100]);
    assert_eq!(read::<i8>(&run(&scan(ScanOp::Min, 0, true, false), &x)), vec![100, 100, i8::MAX]);
    let u = arr(&[3u64, u64::MAX], &[2], DType::U64);
    assert_eq!(read::<u64>(&run(&scan(ScanOp::Sum, 0, false, true), &u)), vec![3, 2]);
    assert_eq!(read::<u64>(&run(&scan(ScanOp::Max, 0, false, false), &u)), vec![0, 3]);
}

#[test]
fn bools_scan_as_and_or() {
    let b = arr(&[1u8, 0, 1], &[3], DType::Bool);
    assert_eq!(read::<u8>(&run(&scan(ScanOp::Prod, 0, false, true), &b)), vec![1, 0, 0]);
    assert_eq!(read::<u8>(&run(&scan(ScanOp::Max, 0, false, false), &b)), vec![0, 1, 1]);
    assert_eq!(read::<u8>(&run(&scan(ScanOp::Min, 0, false, false), &b)), vec![1, 1, 0]);
    // Log-add-exp is float-only: the primitive refuses integers and bools.
    assert!(try_eval(&scan(ScanOp::LogAddExp, 0, false, true), &[b]).is_err());
    let i = arr(&[1i32], &[1], DType::I32);
    assert!(try_eval(&scan(ScanOp::LogAddExp, 0, false, true), &[i]).is_err());
}

#[test]
fn float_specials_and_half_accumulation() {
    let (nan, inf) = (f32::NAN, f32::INFINITY);
    let x = f32s(&[1.0, nan, 3.0], &[3]);
    for op in [ScanOp::Max, ScanOp::Min, ScanOp::Sum, ScanOp::LogAddExp] {
        let out = read::<f32>(&run(&scan(op, 0, false, true), &x));
        assert!(out[0] == 1.0 && out[1].is_nan() && out[2].is_nan(), "{op:?}");
    }
    let lae = |v: &[f32]| {
        read::<f32>(&run(&scan(ScanOp::LogAddExp, 0, false, true), &f32s(v, &[v.len()])))
    };
    assert_eq!(lae(&[-inf, -inf, 2.0, inf, 1.0]), vec![-inf, -inf, 2.0, inf, inf]);
    assert_eq!(lae(&[inf, -inf]), vec![inf, inf]);
    let big = lae(&[1e30, 1e30]);
    assert!((big[1] - (1e30 + std::f32::consts::LN_2)).abs() <= 1e24);
    // The first element passes through untouched: -0.0 keeps its sign.
    let z = read::<f32>(&run(&scan(ScanOp::Sum, 0, false, true), &f32s(&[-0.0], &[1])));
    assert!(z[0].is_sign_negative());
    // 4096 ones in f16 would stall at 2048 with f16 accumulation.
    let h = arr(&vec![f16::ONE; 4096], &[4096], DType::F16);
    let out = read::<f16>(&run(&scan(ScanOp::Sum, 0, false, true), &h));
    assert_eq!(out[4095].to_f32(), 4096.0);
}

/// The row-contiguous fast paths (lines along the last axis, whole rows along another, both
/// threaded at these sizes) against the generic line walk on the same values: a reversed
/// view of reversed data takes the walk. Both fold each line in the same order, so the
/// results agree bit for bit (NaN included).
#[test]
fn contiguous_paths_match_strided_walk() {
    for dims in [[3usize, 301, 97], [1, 70_001, 1], [9000, 1, 8], [2, 5, 7000]] {
        let n: usize = dims.iter().product();
        let mut data: Vec<f32> =
            (0..n).map(|i| ((i * 7919) % 2003) as f32 / 1001.0 - 1.0 + 1e-3).collect();
        data[n / 2] = f32::NAN;
        let rdata: Vec<f32> = data.iter().rev().copied().collect();
        let strides: Vec<isize> = vec![-((dims[1] * dims[2]) as isize), -(dims[2] as isize), -1];
        for dtype in [DType::F32, DType::F16] {
            let (x, r) = match dtype {
                DType::F32 => (arr(&data, &dims, dtype), arr(&rdata, &dims, dtype)),
                _ => {
                    let h = |v: &[f32]| v.iter().map(|&f| f16::from_f32(f)).collect::<Vec<_>>();
                    (arr(&h(&data), &dims, dtype), arr(&h(&rdata), &dims, dtype))
                }
            };
            let r = with_layout(&r, Layout::new(shape(&dims), strides.as_slice().into(), n - 1));
            for op in [ScanOp::Sum, ScanOp::Prod, ScanOp::Max, ScanOp::Min] {
                for axis in 0..3 {
                    for (rev, incl) in [(false, true), (true, true), (false, false), (true, false)]
                    {
                        let p = scan(op, axis, rev, incl);
                        let (fast, walk) = (run(&p, &x), run(&p, &r));
                        let bits = |a: &ArrayData| match dtype {
                            DType::F32 => read::<u32>(a),
                            _ => read::<u16>(a).into_iter().map(u32::from).collect(),
                        };
                        assert!(bits(&fast) == bits(&walk), "{dims:?} {dtype} {op:?} {axis}");
                    }
                }
            }
        }
    }
}
