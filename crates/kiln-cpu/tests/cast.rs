//! AsType: the float -> int edge cases as MLX's CPU build gives them (checked element by
//! element against mlx 0.32 for all 169 dtype pairs while writing this backend), wrapping
//! int -> int, bool, rounding float -> float, views.
mod common;

use common::*;
use half::{bf16, f16};
use kiln_base::{ArrayData, DType, Primitive};

fn cast(x: &ArrayData, to: DType) -> ArrayData {
    eval(&Primitive::AsType(to), std::slice::from_ref(x))
}

const EDGES: [f64; 15] = [
    -1.0,
    -128.9,
    255.5,
    f64::NAN,
    f64::INFINITY,
    f64::NEG_INFINITY,
    1e20,
    -1e20,
    9.223372036854776e18,
    1.8446744073709552e19,
    3e9,
    -3e9,
    2147483648.0,
    -2147483648.0,
    -9.223372036854776e18,
];

#[test]
fn float_to_int_edges_match_mlx() {
    let min32 = i32::MIN;
    let min64 = i64::MIN;
    let u8s = [255u8, 128, 255, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0];
    let i8s = [-1i8, -128, -1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0];
    let i16s = [-1i16, -128, 255, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0];
    let i32s = [
        -1, -128, 255, min32, min32, min32, min32, min32, min32, min32, min32, min32, min32, min32,
        min32,
    ];
    let u32s = [
        u32::MAX,
        4294967168,
        255,
        0,
        0,
        0,
        0,
        0,
        0,
        0,
        3000000000,
        1294967296,
        2147483648,
        2147483648,
        0,
    ];
    let i64s = [
        -1,
        -128,
        255,
        min64,
        min64,
        min64,
        min64,
        min64,
        min64,
        min64,
        3000000000,
        -3000000000,
        2147483648,
        -2147483648,
        min64,
    ];
    let two63 = 1u64 << 63;
    let u64s = [
        u64::MAX,
        u64::MAX - 127,
        255,
        two63,
        0,
        two63,
        0,
        two63,
        two63,
        0,
        3000000000,
        18446744070709551616,
        2147483648,
        18446744071562067968,
        two63,
    ];
    let f64s = arr(&EDGES, &[15], DType::F64);
    let f32s_: Vec<f32> = EDGES.iter().map(|&v| v as f32).collect();
    for x in [f64s, arr(&f32s_, &[15], DType::F32)] {
        assert_eq!(read::<u8>(&cast(&x, DType::U8)), u8s, "{}", x.dtype);
        assert_eq!(read::<i8>(&cast(&x, DType::I8)), i8s);
        assert_eq!(read::<i16>(&cast(&x, DType::I16)), i16s);
        assert_eq!(read::<i32>(&cast(&x, DType::I32)), i32s);
        assert_eq!(read::<u32>(&cast(&x, DType::U32)), u32s);
        assert_eq!(read::<i64>(&cast(&x, DType::I64)), i64s);
        // 2^64 rounds to 2^64 in f32 as well, so both sources agree.
        assert_eq!(read::<u64>(&cast(&x, DType::U64)), u64s);
        assert_eq!(read::<u8>(&cast(&x, DType::Bool)), vec![1; 15]);
    }
    // In-range values truncate toward zero; half sources go through f32.
    let h: Vec<f16> = [2.7f32, -2.7, 300.0, -0.5].iter().map(|&v| f16::from_f32(v)).collect();
    let h = arr(&h, &[4], DType::F16);
    assert_eq!(read::<i32>(&cast(&h, DType::I32)), vec![2, -2, 300, 0]);
    assert_eq!(read::<u8>(&cast(&h, DType::U8)), vec![2, 254, 44, 0]);
}

#[test]
fn int_and_bool_conversions() {
    let x = arr(
        &[-1i64, 255, 256, -129, (1 << 31) + 5, -(1 << 40) - 3, i64::MIN, i64::MAX],
        &[8],
        DType::I64,
    );
    assert_eq!(read::<u8>(&cast(&x, DType::U8)), vec![255, 255, 0, 127, 5, 253, 0, 255]);
    assert_eq!(read::<i8>(&cast(&x, DType::I8)), vec![-1, -1, 0, 127, 5, -3, 0, -1]);
    assert_eq!(
        read::<i32>(&cast(&x, DType::I32)),
        vec![-1, 255, 256, -129, -2147483643, -3, 0, -1]
    );
    assert_eq!(read::<u64>(&cast(&x, DType::U64))[0], u64::MAX);
    assert_eq!(read::<u8>(&cast(&x, DType::Bool)), vec![1, 1, 1, 1, 1, 1, 1, 1]);
    assert_eq!(read::<f32>(&cast(&x, DType::F32))[7], 9.223372e18);
    let u = arr(&[u64::MAX, 0, 1 << 63], &[3], DType::U64);
    assert_eq!(read::<i64>(&cast(&u, DType::I64)), vec![-1, 0, i64::MIN]);
    assert_eq!(
        read::<f64>(&cast(&u, DType::F64)),
        vec![1.8446744073709552e19, 0.0, 9.223372036854776e18]
    );
    let b = arr(&[0u8, 1], &[2], DType::Bool);
    assert_eq!(read::<f32>(&cast(&b, DType::F32)), vec![0.0, 1.0]);
    assert_eq!(read::<i64>(&cast(&b, DType::I64)), vec![0, 1]);
    assert_eq!(read::<u16>(&cast(&b, DType::BF16)), vec![0, bf16::ONE.to_bits()]);
    let z = arr(&[0.0f32, -0.0, f32::NAN, 1e-45], &[4], DType::F32);
    assert_eq!(read::<u8>(&cast(&z, DType::Bool)), vec![0, 0, 1, 1]);
}

#[test]
fn float_to_float_rounds_to_nearest() {
    let x = arr(
        &[65520.0f64, 65519.0, 1.0 + 1e-4, 1e-8, 0.1, f64::NAN, f64::NEG_INFINITY],
        &[7],
        DType::F64,
    );
    let h = read::<f16>(&cast(&x, DType::F16));
    assert_eq!(h[0], f16::INFINITY);
    assert_eq!(h[1], f16::MAX);
    assert_eq!(h[2], f16::ONE);
    assert_eq!(h[3], f16::ZERO);
    assert_eq!(h[4], f16::from_f64(0.1));
    assert!(h[5].is_nan() && h[6] == f16::NEG_INFINITY);
    let b = read::<bf16>(&cast(&x, DType::BF16));
    assert_eq!(b[0], bf16::from_f64(65520.0));
    assert_eq!(read::<f32>(&cast(&x, DType::F32))[4], 0.1f32);
    // f16 -> bf16 and back are through exact f32.
    let hs = arr(&[f16::from_f32(0.1), f16::MAX], &[2], DType::F16);
    let bs = read::<bf16>(&cast(&hs, DType::BF16));
    assert_eq!(bs, vec![bf16::from_f32(f16::from_f32(0.1).to_f32()), bf16::from_f32(65504.0)]);
    assert_eq!(read::<f64>(&cast(&hs, DType::F64)), vec![f16::from_f32(0.1).to_f64(), 65504.0]);
}

#[test]
fn cast_views_empty_and_every_pair() {
    let x = arr(&[1i32, 2, 3, 4, 5, 6], &[2, 3], DType::I32);
    let t = with_layout(&x, x.layout.transpose(&[1, 0]));
    assert_eq!(read::<f64>(&cast(&t, DType::F64)), vec![1.0, 4.0, 2.0, 5.0, 3.0, 6.0]);
    let r = with_layout(&x, x.layout.slice(&[1, 2], &[-1, -2], &[2, 2]));
    assert_eq!(read::<i16>(&cast(&r, DType::I16)), vec![6, 4, 3, 1]);
    let e = arr::<f32>(&[], &[0], DType::F32);
    assert_eq!(cast(&e, DType::U8).layout.shape.as_slice(), &[0]);
    // Every pair runs, 0-d included, and small integers survive the round trip.
    let s = arr(&[3u8], &[], DType::U8);
    for a in DType::ALL {
        let xa = cast(&s, a);
        for b in DType::ALL {
            let back = cast(&cast(&xa, b), DType::U8);
            let want = if a == DType::Bool || b == DType::Bool { 1 } else { 3 };
            assert_eq!(read::<u8>(&back), vec![want], "{a} -> {b}");
        }
    }
}
