//! RandomBits against MLX's values, and Arange.
mod common;

use common::*;
use half::{bf16, f16};
use kiln_base::{DType, Primitive, Scalar};

#[test]
fn random_bits_match_mlx() {
    // mx.random.split(mx.random.key(0)): key (0, 0), shape (2, 2), width 4.
    let key = arr(&[0u32, 0], &[2], DType::U32);
    let out = eval(&Primitive::RandomBits { shape: shape(&[2, 2]), width: 4 }, &[key]);
    assert_eq!(out.dtype, DType::U32);
    assert_eq!(out.layout.shape.as_slice(), &[2, 2]);
    assert_eq!(read::<u32>(&out), vec![4146024105, 967050713, 2718843009, 1272950319]);
    // mx.random.split(mx.random.key(42), 3): key (0, 42), shape (3, 2).
    let key = arr(&[0u32, 42], &[2], DType::U32);
    let out = eval(&Primitive::RandomBits { shape: shape(&[3, 2]), width: 4 }, &[key]);
    let want = vec![3134548294u32, 3733159049, 3746501087, 894150801, 801545058, 2363201431];
    assert_eq!(read::<u32>(&out), want);
}

#[test]
fn random_bits_per_key_strided_keys_and_widths() {
    // Keys (0, 0) and (0, 42) stored as the columns of a (2, 2) buffer and read through a
    // transpose: each key's block equals its own single-key result.
    let buf = arr(&[0u32, 0, 0, 42], &[2, 2], DType::U32);
    let keys = with_layout(&buf, buf.layout.transpose(&[1, 0]));
    let out = eval(&Primitive::RandomBits { shape: shape(&[3, 2]), width: 4 }, &[keys]);
    assert_eq!(out.layout.shape.as_slice(), &[2, 3, 2]);
    let got = read::<u32>(&out);
    assert_eq!(&got[6..], &[3134548294, 3733159049, 3746501087, 894150801, 801545058, 2363201431]);
    // Reversed key order via a negative stride.
    let rev = with_layout(&buf, buf.layout.transpose(&[1, 0]).slice(&[1, 0], &[-1, 1], &[2, 2]));
    let out =
        read::<u32>(&eval(&Primitive::RandomBits { shape: shape(&[3, 2]), width: 4 }, &[rev]));
    assert_eq!(&out[..6], &got[6..]);
    assert_eq!(&out[6..], &got[..6]);
    // Widths 1, 2, 8 are the same bytes reinterpreted.
    let key = arr(&[0u32, 0], &[2], DType::U32);
    let b1 =
        eval(&Primitive::RandomBits { shape: shape(&[16]), width: 1 }, std::slice::from_ref(&key));
    assert_eq!(b1.dtype, DType::U8);
    let b8 =
        eval(&Primitive::RandomBits { shape: shape(&[2]), width: 8 }, std::slice::from_ref(&key));
    assert_eq!(b8.dtype, DType::U64);
    let w4 =
        eval(&Primitive::RandomBits { shape: shape(&[4]), width: 4 }, std::slice::from_ref(&key));
    assert_eq!(b1.buffer.host_slice::<u8>(), w4.buffer.host_slice::<u8>());
    assert_eq!(b8.buffer.host_slice::<u8>(), w4.buffer.host_slice::<u8>());
    let b2 =
        eval(&Primitive::RandomBits { shape: shape(&[3]), width: 2 }, std::slice::from_ref(&key));
    assert_eq!(b2.dtype, DType::U16);
    // Empty shapes and empty key batches.
    let e =
        eval(&Primitive::RandomBits { shape: shape(&[0]), width: 4 }, std::slice::from_ref(&key));
    assert_eq!(e.layout.shape.as_slice(), &[0]);
    let nokeys = arr::<u32>(&[], &[0, 2], DType::U32);
    let e = eval(&Primitive::RandomBits { shape: shape(&[5]), width: 4 }, &[nokeys]);
    assert_eq!(e.layout.shape.as_slice(), &[0, 5]);
    assert!(try_eval(&Primitive::RandomBits { shape: shape(&[5]), width: 3 }, &[key]).is_err());
}

#[test]
fn arange_in_every_dtype_family() {
    let ar = |start, step, len, dtype| eval(&Primitive::Arange { start, step, len, dtype }, &[]);
    let f = ar(Scalar::Float(0.0), Scalar::Float(0.1), 10, DType::F32);
    let want: Vec<f32> = (0..10).map(|i| (i as f64 * 0.1) as f32).collect();
    assert_eq!(read::<f32>(&f), want);
    let d = ar(Scalar::Float(1.0), Scalar::Float(-0.5), 4, DType::F64);
    assert_eq!(read::<f64>(&d), vec![1.0, 0.5, 0.0, -0.5]);
    let h = ar(Scalar::Int(0), Scalar::Int(3), 3, DType::F16);
    assert_eq!(read::<f16>(&h), vec![f16::from_f32(0.0), f16::from_f32(3.0), f16::from_f32(6.0)]);
    let b = ar(Scalar::Float(0.5), Scalar::Float(1.0), 2, DType::BF16);
    assert_eq!(read::<bf16>(&b), vec![bf16::from_f32(0.5), bf16::from_f32(1.5)]);
    // Integers are exact in i64, even past 2^53, and wrap into narrow dtypes.
    let big = ar(Scalar::Int((1 << 53) + 1), Scalar::Int(1), 2, DType::I64);
    assert_eq!(read::<i64>(&big), vec![(1 << 53) + 1, (1 << 53) + 2]);
    let i8s = ar(Scalar::Int(126), Scalar::Int(1), 3, DType::I8);
    assert_eq!(read::<i8>(&i8s), vec![126, 127, -128]);
    let u = ar(Scalar::Int(5), Scalar::Int(-2), 4, DType::U32);
    assert_eq!(read::<u32>(&u), vec![5, 3, 1, u32::MAX]);
    let u64s = ar(Scalar::UInt(u64::MAX - 1), Scalar::Int(1), 2, DType::U64);
    assert_eq!(read::<u64>(&u64s), vec![u64::MAX - 1, u64::MAX]);
    let e = ar(Scalar::Int(0), Scalar::Int(1), 0, DType::I32);
    assert_eq!(e.layout.shape.as_slice(), &[0]);
}
