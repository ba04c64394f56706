//! Binary ops and Where: wrapping, NaN rules, integer power, bool arithmetic, views.
mod common;

use common::*;
use half::f16;
use kiln_base::{BinaryOp, DType, Primitive};

fn bin(op: BinaryOp) -> Primitive {
    Primitive::Binary(op)
}

#[test]
fn integer_arithmetic_wraps() {
    let a = arr(&[i8::MAX, i8::MIN, 100, -7], &[4], DType::I8);
    let b = arr(&[1i8, 1, 2, 3], &[4], DType::I8);
    assert_eq!(
        read::<i8>(&eval(&bin(BinaryOp::Add), &[a.clone(), b.clone()])),
        vec![i8::MIN, -127, 102, -4]
    );
    assert_eq!(
        read::<i8>(&eval(&bin(BinaryOp::Subtract), &[a.clone(), b.clone()])),
        vec![126, i8::MAX, 98, -10]
    );
    assert_eq!(
        read::<i8>(&eval(&bin(BinaryOp::Multiply), &[a, b])),
        vec![i8::MAX, i8::MIN, -56, -21]
    );
    let a = arr(&[0u32, 5], &[2], DType::U32);
    let b = arr(&[1u32, 7], &[2], DType::U32);
    assert_eq!(read::<u32>(&eval(&bin(BinaryOp::Subtract), &[a, b])), vec![u32::MAX, u32::MAX - 1]);
    let a = arr(&[u64::MAX], &[1], DType::U64);
    assert_eq!(read::<u64>(&eval(&bin(BinaryOp::Multiply), &[a.clone(), a])), vec![1]);
    // Divide only exists for floats.
    let i = arr(&[4i32], &[1], DType::I32);
    assert!(try_eval(&bin(BinaryOp::Divide), &[i.clone(), i]).is_err());
}

#[test]
fn integer_power_matches_mlx() {
    // MLX: square-and-multiply, wrapping, and any negative exponent gives 0.
    let a = arr(&[2i32, -2, 3, 1, -1, -1, 0, 0, 3, 7], &[10], DType::I32);
    let b = arr(&[-1i32, 3, 0, -5, -5, -4, -1, 0, 21, 40], &[10], DType::I32);
    // 3^21 and 7^40 modulo 2^32, as signed (from Python's pow(b, e, 2**32)).
    let want = vec![0, -8, 1, 0, 0, 0, 0, 1, 1870418611, -142118463];
    assert_eq!(read::<i32>(&eval(&bin(BinaryOp::Power), &[a, b])), want);
    let a = arr(&[2u8, 3, 0], &[3], DType::U8);
    let b = arr(&[9u8, 5, 0], &[3], DType::U8);
    assert_eq!(read::<u8>(&eval(&bin(BinaryOp::Power), &[a, b])), vec![0, 243, 1]);
    // 3^(2^63 - 1) modulo 2^64: a 63-step square-and-multiply.
    let a = arr(&[3i64], &[1], DType::I64);
    let b = arr(&[i64::MAX], &[1], DType::I64);
    assert_eq!(read::<i64>(&eval(&bin(BinaryOp::Power), &[a, b])), vec![-6148914691236517205]);
}

#[test]
fn float_max_min_propagate_nan_and_power() {
    let nan = f32::NAN;
    let a = f32s(&[1.0, nan, 3.0, nan, -0.0], &[5]);
    let b = f32s(&[nan, 1.0, 2.0, nan, 1.0], &[5]);
    let mx = read::<f32>(&eval(&bin(BinaryOp::Maximum), &[a.clone(), b.clone()]));
    let mn = read::<f32>(&eval(&bin(BinaryOp::Minimum), &[a.clone(), b.clone()]));
    assert!(mx[0].is_nan() && mx[1].is_nan() && mx[3].is_nan() && mn[0].is_nan() && mn[1].is_nan());
    assert_eq!((mx[2], mn[2], mx[4], mn[4]), (3.0, 2.0, 1.0, -0.0));
    let p = read::<f32>(&eval(
        &bin(BinaryOp::Power),
        &[f32s(&[2.0, -8.0, 4.0], &[3]), f32s(&[-1.0, 1.0 / 3.0, 0.5], &[3])],
    ));
    assert_eq!(p[0], 0.5);
    assert!(p[1].is_nan());
    assert_eq!(p[2], 2.0);
    let d = read::<f64>(&eval(
        &bin(BinaryOp::Divide),
        &[arr(&[1.0f64, -1.0, 0.0], &[3], DType::F64), arr(&[0.0f64, 0.0, 0.0], &[3], DType::F64)],
    ));
    assert_eq!(&d[..2], &[f64::INFINITY, f64::NEG_INFINITY]);
    assert!(d[2].is_nan());
}

#[test]
fn comparisons_output_bool_with_ieee_nan() {
    let nan = f64::NAN;
    let a = arr(&[1.0f64, nan, 2.0, nan], &[4], DType::F64);
    let b = arr(&[1.0f64, 1.0, 3.0, nan], &[4], DType::F64);
    let cases = [
        (BinaryOp::Equal, [1u8, 0, 0, 0]),
        (BinaryOp::NotEqual, [0, 1, 1, 1]),
        (BinaryOp::Less, [0, 0, 1, 0]),
        (BinaryOp::LessEqual, [1, 0, 1, 0]),
        (BinaryOp::Greater, [0, 0, 0, 0]),
        (BinaryOp::GreaterEqual, [1, 0, 0, 0]),
    ];
    for (op, want) in cases {
        let out = eval(&bin(op), &[a.clone(), b.clone()]);
        assert_eq!(out.dtype, DType::Bool);
        assert_eq!(read::<u8>(&out), want, "{op:?}");
    }
    let a = arr(&[-1i16, 5], &[2], DType::I16);
    let b = arr(&[1i16, 5], &[2], DType::I16);
    assert_eq!(read::<u8>(&eval(&bin(BinaryOp::Less), &[a, b])), vec![1, 0]);
    let a = arr(&[f16::from_f32(0.1)], &[1], DType::F16);
    assert_eq!(read::<u8>(&eval(&bin(BinaryOp::Equal), &[a.clone(), a])), vec![1]);
}

#[test]
fn bool_arithmetic_maps_back_to_bool() {
    let a = arr(&[0u8, 0, 1, 1], &[4], DType::Bool);
    let b = arr(&[0u8, 1, 0, 1], &[4], DType::Bool);
    let run = |op| read::<u8>(&eval(&bin(op), &[a.clone(), b.clone()]));
    assert_eq!(run(BinaryOp::Add), vec![0, 1, 1, 1]);
    assert_eq!(run(BinaryOp::Subtract), vec![0, 1, 1, 0]);
    assert_eq!(run(BinaryOp::Multiply), vec![0, 0, 0, 1]);
    assert_eq!(run(BinaryOp::Maximum), vec![0, 1, 1, 1]);
    assert_eq!(run(BinaryOp::Minimum), vec![0, 0, 0, 1]);
    assert_eq!(run(BinaryOp::Power), vec![1, 0, 1, 1]);
    assert_eq!(run(BinaryOp::Less), vec![0, 1, 0, 0]);
    assert!(try_eval(&bin(BinaryOp::Divide), &[a.clone(), b.clone()]).is_err());
}

#[test]
fn broadcast_strided_and_empty_operands() {
    // (2, 3) + broadcast row, + broadcast column, + scalar: every map2 path.
    let x = f32s(&[0.0, 1.0, 2.0, 3.0, 4.0, 5.0], &[2, 3]);
    let row = f32s(&[10.0, 20.0, 30.0], &[3]);
    let row = with_layout(&row, row.layout.broadcast_to(&[2, 3]));
    assert_eq!(
        read::<f32>(&eval(&bin(BinaryOp::Add), &[x.clone(), row])),
        vec![10.0, 21.0, 32.0, 13.0, 24.0, 35.0]
    );
    let col = f32s(&[100.0, 200.0], &[2, 1]);
    let col = with_layout(&col, col.layout.broadcast_to(&[2, 3]));
    assert_eq!(
        read::<f32>(&eval(&bin(BinaryOp::Subtract), &[col, x.clone()])),
        vec![100.0, 99.0, 98.0, 197.0, 196.0, 195.0]
    );
    let s = f32s(&[2.0], &[]);
    let s = with_layout(&s, s.layout.broadcast_to(&[2, 3]));
    assert_eq!(
        read::<f32>(&eval(&bin(BinaryOp::Multiply), &[s.clone(), x.clone()])),
        vec![0.0, 2.0, 4.0, 6.0, 8.0, 10.0]
    );
    assert_eq!(
        read::<f32>(&eval(&bin(BinaryOp::Multiply), &[x.clone(), s])),
        vec![0.0, 2.0, 4.0, 6.0, 8.0, 10.0]
    );
    // Transposed against reversed.
    let t = with_layout(&x, x.layout.transpose(&[1, 0]));
    let r = f32s(&[0.0, 1.0, 2.0, 3.0, 4.0, 5.0], &[3, 2]);
    let r = with_layout(&r, r.layout.slice(&[2, 1], &[-1, -1], &[3, 2]));
    assert_eq!(
        read::<f32>(&eval(&bin(BinaryOp::Add), &[t, r])),
        vec![5.0, 7.0, 4.0, 6.0, 3.0, 5.0]
    );
    // Empty and 0-d.
    let e = f32s(&[], &[2, 0]);
    assert!(read::<f32>(&eval(&bin(BinaryOp::Add), &[e.clone(), e])).is_empty());
    let z = arr(&[7i64], &[], DType::I64);
    assert_eq!(read::<i64>(&eval(&bin(BinaryOp::Maximum), &[z.clone(), z])), vec![7]);
}

#[test]
fn where_selects_per_element_with_views() {
    let c = arr(&[1u8, 0, 0, 1], &[4], DType::Bool);
    let x = arr(&[1i64, 2, 3, 4], &[4], DType::I64);
    let y = arr(&[-1i64, -2, -3, -4], &[4], DType::I64);
    let out = eval(&Primitive::Where, &[c.clone(), x.clone(), y.clone()]);
    assert_eq!(out.dtype, DType::I64);
    assert_eq!(read::<i64>(&out), vec![1, -2, -3, 4]);
    // Broadcast condition column and reversed x, f16 payload.
    let c = arr(&[1u8, 0], &[2, 1], DType::Bool);
    let c = with_layout(&c, c.layout.broadcast_to(&[2, 2]));
    let h: Vec<f16> = [1.0f32, 2.0, 3.0, 4.0].iter().map(|&v| f16::from_f32(v)).collect();
    let x = arr(&h, &[2, 2], DType::F16);
    let x = with_layout(&x, x.layout.slice(&[1, 1], &[-1, -1], &[2, 2]));
    let y = arr(&[f16::ZERO; 4], &[2, 2], DType::F16);
    let out = eval(&Primitive::Where, &[c, x, y]);
    assert_eq!(out.dtype, DType::F16);
    assert_eq!(
        read::<f16>(&out).iter().map(|v| v.to_f32()).collect::<Vec<_>>(),
        vec![4.0, 3.0, 0.0, 0.0]
    );
    // A non-bool condition is rejected.
    assert!(try_eval(&Primitive::Where, &[x_i64(), x_i64(), x_i64()]).is_err());
}

fn x_i64() -> kiln_base::ArrayData {
    arr(&[1i64], &[1], DType::I64)
}
