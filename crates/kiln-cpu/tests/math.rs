//! The math ops' kernels: integer floor division and remainder without traps, x86 shifts,
//! bitwise and logical ops, float floor division/remainder/logaddexp/arctan2 at NaN, inf
//! and signed zeros, rounding half to even, sign, and StopGradient as a view.
mod common;

use common::*;
use half::{bf16, f16};
use kiln_base::{BinaryOp, DType, Error, Primitive, UnaryOp};

fn bin(op: BinaryOp) -> Primitive {
    Primitive::Binary(op)
}

fn un(op: UnaryOp) -> Primitive {
    Primitive::Unary(op)
}

#[test]
fn integer_floor_divide_and_remainder_never_trap() {
    let a = arr(&[7i32, -7, 7, -7, 5, i32::MIN, i32::MIN, 0], &[8], DType::I32);
    let b = arr(&[2i32, 2, -2, -2, 0, -1, 1, 3], &[8], DType::I32);
    let q = read::<i32>(&eval(&bin(BinaryOp::FloorDivide), &[a.clone(), b.clone()]));
    assert_eq!(q, vec![3, -4, -4, 3, 0, i32::MIN, i32::MIN, 0]);
    let r = read::<i32>(&eval(&bin(BinaryOp::Remainder), &[a, b]));
    assert_eq!(r, vec![1, 1, -1, -1, 5, 0, 0, 0]);
    // Unsigned and the narrow signed types.
    let a = arr(&[250u8, 7, 9], &[3], DType::U8);
    let b = arr(&[7u8, 0, 10], &[3], DType::U8);
    assert_eq!(
        read::<u8>(&eval(&bin(BinaryOp::FloorDivide), &[a.clone(), b.clone()])),
        vec![35, 0, 0]
    );
    assert_eq!(read::<u8>(&eval(&bin(BinaryOp::Remainder), &[a, b])), vec![5, 7, 9]);
    let a = arr(&[i8::MIN, i8::MIN, -1], &[3], DType::I8);
    let b = arr(&[-1i8, 3, i8::MIN], &[3], DType::I8);
    assert_eq!(
        read::<i8>(&eval(&bin(BinaryOp::FloorDivide), &[a.clone(), b.clone()])),
        vec![i8::MIN, -43, 0]
    );
    assert_eq!(read::<i8>(&eval(&bin(BinaryOp::Remainder), &[a, b])), vec![0, 1, -1]);
    let a = arr(&[i64::MIN, -7], &[2], DType::I64);
    let b = arr(&[-1i64, 1 << 62], &[2], DType::I64);
    assert_eq!(
        read::<i64>(&eval(&bin(BinaryOp::FloorDivide), &[a.clone(), b.clone()])),
        vec![i64::MIN, -1]
    );
    assert_eq!(read::<i64>(&eval(&bin(BinaryOp::Remainder), &[a, b])), vec![0, (1 << 62) - 7]);
}

#[test]
fn float_floor_divide_and_remainder() {
    let (inf, nan) = (f64::INFINITY, f64::NAN);
    let a = [5.0, -5.0, 5.0, -5.0, 1.0, -1.0, 0.0, nan, 1.0, -1.0, 3.0, -3.0, 1.0];
    let b = [3.0, 3.0, -3.0, -3.0, 0.0, 0.0, 0.0, 1.0, inf, inf, -inf, -inf, 0.1];
    let (x, y) = (arr(&a, &[13], DType::F64), arr(&b, &[13], DType::F64));
    let q = read::<f64>(&eval(&bin(BinaryOp::FloorDivide), &[x.clone(), y.clone()]));
    // floor(a / b): 1 // 0.1 is floor(10.0) = 10 (numpy's fmod-based rule gives 9).
    let want = [1.0, -2.0, -2.0, 1.0, inf, -inf, nan, nan, 0.0, -0.0, -0.0, 0.0, 10.0];
    assert_close(&q, &want, 0.0);
    let r = read::<f64>(&eval(&bin(BinaryOp::Remainder), &[x, y]));
    let want = [2.0, 1.0, -1.0, -2.0, nan, nan, nan, nan, 1.0, inf, -inf, -3.0, 0.1 - 1e-16];
    assert_close(&r[..12], &want[..12], 0.0);
    assert!((r[12] - 0.09999999999999995).abs() < 1e-15, "{}", r[12]);
    // Half types compute in f32 and round once.
    let x = arr(&[f16::from_f32(5.0), f16::from_f32(-7.5)], &[2], DType::F16);
    let y = arr(&[f16::from_f32(0.3), f16::from_f32(2.0)], &[2], DType::F16);
    let r = read::<f16>(&eval(&bin(BinaryOp::Remainder), &[x, y]));
    assert_eq!(r, vec![f16::from_f32(0.19921875), f16::from_f32(0.5)]);
}

#[test]
fn shifts_follow_mlx_x86() {
    let one = |n: usize| vec![1i32; n];
    let counts = [0i32, 31, 32, 33, -1, 100];
    let a = arr(&one(6), &[6], DType::I32);
    let c = arr(&counts, &[6], DType::I32);
    assert_eq!(
        read::<i32>(&eval(&bin(BinaryOp::LeftShift), &[a, c.clone()])),
        vec![1, i32::MIN, 1, 2, i32::MIN, 16]
    );
    let a = arr(&[-8i32; 6], &[6], DType::I32);
    assert_eq!(
        read::<i32>(&eval(&bin(BinaryOp::RightShift), &[a, c])),
        vec![-8, -1, -8, -4, -1, -1]
    );
    // int8 shifts as int32 and truncates: 1 << 8 is 0, 1 << 100 is 1 << 4.
    let a = arr(&[1i8; 4], &[4], DType::I8);
    let c = arr(&[7i8, 8, 100, -1], &[4], DType::I8);
    assert_eq!(read::<i8>(&eval(&bin(BinaryOp::LeftShift), &[a, c])), vec![-128, 0, 16, 0]);
    let a = arr(&[200u8; 3], &[3], DType::U8);
    let c = arr(&[7u8, 8, 32], &[3], DType::U8);
    assert_eq!(read::<u8>(&eval(&bin(BinaryOp::RightShift), &[a, c])), vec![1, 0, 200]);
    let a = arr(&[1u64; 3], &[3], DType::U64);
    let c = arr(&[63u64, 64, 65], &[3], DType::U64);
    assert_eq!(read::<u64>(&eval(&bin(BinaryOp::LeftShift), &[a, c])), vec![1 << 63, 1, 2]);
    let a = arr(&[-1i16; 2], &[2], DType::I16);
    let c = arr(&[15i16, 40], &[2], DType::I16);
    assert_eq!(read::<i16>(&eval(&bin(BinaryOp::RightShift), &[a, c])), vec![-1, -1]);
    // Bool shifts are the front end's (as uint8); floats never reach the kernel.
    let b = arr(&[1u8], &[1], DType::Bool);
    assert!(matches!(
        try_eval(&bin(BinaryOp::LeftShift), &[b.clone(), b]),
        Err(Error::Type { .. })
    ));
    let f = f32s(&[1.0], &[1]);
    assert!(try_eval(&bin(BinaryOp::BitwiseAnd), &[f.clone(), f]).is_err());
}

#[test]
fn bitwise_and_logical_ops() {
    let a = arr(&[0b1100u16, 0xFFFF], &[2], DType::U16);
    let b = arr(&[0b1010u16, 0x00F0], &[2], DType::U16);
    assert_eq!(
        read::<u16>(&eval(&bin(BinaryOp::BitwiseAnd), &[a.clone(), b.clone()])),
        vec![0b1000, 0x00F0]
    );
    assert_eq!(
        read::<u16>(&eval(&bin(BinaryOp::BitwiseOr), &[a.clone(), b.clone()])),
        vec![0b1110, 0xFFFF]
    );
    assert_eq!(
        read::<u16>(&eval(&bin(BinaryOp::BitwiseXor), &[a.clone(), b])),
        vec![0b0110, 0xFF0F]
    );
    assert_eq!(read::<u16>(&eval(&un(UnaryOp::BitwiseInvert), &[a])), vec![0xFFF3, 0]);
    let i = arr(&[0i64, -1, 5], &[3], DType::I64);
    assert_eq!(read::<i64>(&eval(&un(UnaryOp::BitwiseInvert), &[i])), vec![-1, 0, -6]);
    // Bool: bitwise ops are the logical ones, invert is not; floor division and
    // remainder act on 0/1.
    let p = arr(&[0u8, 0, 1, 1], &[4], DType::Bool);
    let q = arr(&[0u8, 1, 0, 1], &[4], DType::Bool);
    let run = |op| read::<u8>(&eval(&bin(op), &[p.clone(), q.clone()]));
    assert_eq!(run(BinaryOp::LogicalAnd), vec![0, 0, 0, 1]);
    assert_eq!(run(BinaryOp::LogicalOr), vec![0, 1, 1, 1]);
    assert_eq!(run(BinaryOp::BitwiseXor), vec![0, 1, 1, 0]);
    assert_eq!(run(BinaryOp::FloorDivide), vec![0, 0, 0, 1]);
    assert_eq!(run(BinaryOp::Remainder), vec![0, 0, 1, 0]);
    assert_eq!(
        read::<u8>(&eval(&un(UnaryOp::LogicalNot), std::slice::from_ref(&p))),
        vec![1, 1, 0, 0]
    );
    assert_eq!(read::<u8>(&eval(&un(UnaryOp::BitwiseInvert), &[p])), vec![1, 1, 0, 0]);
    // Logical ops only take bool (the front end converts).
    let f = f32s(&[1.0], &[1]);
    assert!(try_eval(&un(UnaryOp::LogicalNot), &[f]).is_err());
}

#[test]
fn logaddexp_and_arctan2_edges() {
    let (inf, nan) = (f32::INFINITY, f32::NAN);
    let a = f32s(&[inf, -inf, inf, nan, 1.0, 1000.0, -1000.0], &[7]);
    let b = f32s(&[inf, -inf, -inf, 1.0, nan, 1000.0, -1000.5], &[7]);
    let got = read::<f32>(&eval(&bin(BinaryOp::LogAddExp), &[a, b]));
    let want = [inf, -inf, inf, nan, nan, 1000.0 + std::f32::consts::LN_2, -999.5259];
    let got64: Vec<f64> = got.iter().map(|&v| v as f64).collect();
    let want64: Vec<f64> = want.iter().map(|&v| v as f64).collect();
    assert_close(&got64, &want64, 1e-6);
    // Signed zeros pick the quadrant.
    let y = f32s(&[0.0, -0.0, 0.0, -0.0, 1.0], &[5]);
    let x = f32s(&[-0.0, -0.0, 0.0, 0.0, 1.0], &[5]);
    let got = read::<f32>(&eval(&bin(BinaryOp::ArcTan2), &[y, x]));
    let pi = std::f32::consts::PI;
    assert_eq!(got[..2], [pi, -pi]);
    assert!(got[2] == 0.0 && got[2].is_sign_positive() && got[3].is_sign_negative());
    assert_eq!(got[4], std::f32::consts::FRAC_PI_4);
}

#[test]
fn rounding_sign_and_integer_identities() {
    let xs = [0.5, 1.5, 2.5, -0.5, -2.5, 2.4, -2.6, f64::NAN, f64::INFINITY];
    let x = arr(&xs, &[9], DType::F64);
    let got = read::<f64>(&eval(&un(UnaryOp::Round), std::slice::from_ref(&x)));
    assert_close(&got, &[0.0, 2.0, 2.0, -0.0, -2.0, 2.0, -3.0, f64::NAN, f64::INFINITY], 0.0);
    let got = read::<f64>(&eval(&un(UnaryOp::Floor), std::slice::from_ref(&x)));
    assert_close(&got, &[0.0, 1.0, 2.0, -1.0, -3.0, 2.0, -3.0, f64::NAN, f64::INFINITY], 0.0);
    let got = read::<f64>(&eval(&un(UnaryOp::Sign), &[x]));
    assert_close(&got, &[1.0, 1.0, 1.0, -1.0, -1.0, 1.0, -1.0, 0.0, 1.0], 0.0);
    // bf16 ties: 2.5 and 3.5 are representable and round to 2 and 4.
    let h = arr(&[bf16::from_f32(2.5), bf16::from_f32(3.5)], &[2], DType::BF16);
    assert_eq!(
        read::<bf16>(&eval(&un(UnaryOp::Round), &[h])),
        vec![bf16::from_f32(2.0), bf16::from_f32(4.0)]
    );
    let i = arr(&[-5i32, 0, 9], &[3], DType::I32);
    assert_eq!(read::<i32>(&eval(&un(UnaryOp::Sign), std::slice::from_ref(&i))), vec![-1, 0, 1]);
    assert_eq!(read::<i32>(&eval(&un(UnaryOp::Ceil), &[i])), vec![-5, 0, 9]);
    let u = arr(&[0u32, 7], &[2], DType::U32);
    assert_eq!(read::<u32>(&eval(&un(UnaryOp::Sign), &[u])), vec![0, 1]);
}

#[test]
fn views_as_inputs_and_stop_gradient() {
    // A transposed and a reversed view into floor_divide.
    let base = arr(&[1i32, -2, 3, -4, 5, -6], &[2, 3], DType::I32);
    let t = with_layout(&base, base.layout.transpose(&[1, 0]));
    let r = with_layout(&base, base.layout.slice(&[1, 2], &[-1, -1], &[2, 3]));
    let r = with_layout(&r, r.layout.transpose(&[1, 0]));
    let q = read::<i32>(&eval(&bin(BinaryOp::FloorDivide), &[t, r]));
    // t = [[1,-4],[-2,5],[3,-6]], r = [[-6,3],[5,-2],[-4,1]]
    assert_eq!(q, vec![-1, -2, -1, -3, -1, -6]);
    // StopGradient shares the buffer.
    let s = eval(&Primitive::StopGradient, std::slice::from_ref(&base));
    assert!(s.buffer.host_slice::<i32>().as_ptr() == base.buffer.host_slice::<i32>().as_ptr());
    assert_eq!(read::<i32>(&s), vec![1, -2, 3, -4, 5, -6]);
    // Empty and 0-d.
    let e = arr::<i8>(&[], &[0, 2], DType::I8);
    let out = eval(&bin(BinaryOp::LeftShift), &[e.clone(), e]);
    assert_eq!(out.layout.shape.as_slice(), &[0, 2]);
    let z = arr(&[-7i16], &[], DType::I16);
    let two = arr(&[2i16], &[], DType::I16);
    assert_eq!(read::<i16>(&eval(&bin(BinaryOp::Remainder), &[z, two])), vec![1]);
}
