//! Unary ops: float math per dtype against std's f64 math, integer wrapping, bool, views.
mod common;

use common::*;
use half::{bf16, f16};
use kiln_base::{DType, Error, Layout, Primitive, UnaryOp};

const XS: [f64; 12] = [
    -3.0,
    -0.5,
    0.0,
    0.25,
    0.5,
    2.0,
    20.0,
    -100.0,
    1000.0,
    f64::NAN,
    f64::INFINITY,
    f64::NEG_INFINITY,
];

fn reference(op: UnaryOp, x: f64) -> f64 {
    match op {
        UnaryOp::Negative => -x,
        UnaryOp::Abs => x.abs(),
        UnaryOp::Exp => x.exp(),
        UnaryOp::Log => x.ln(),
        UnaryOp::Sqrt => x.sqrt(),
        UnaryOp::Sin => x.sin(),
        UnaryOp::Tanh => x.tanh(),
        UnaryOp::Sigmoid => 1.0 / (1.0 + (-x).exp()),
        UnaryOp::Erf => libm::erf(x),
        UnaryOp::ErfInv => {
            // erfinv's inputs are mapped into (-1, 1) below; ±1 and outside are edge-tested.
            let x = x / (1.0 + x.abs());
            erfinv_by_bisection(x)
        }
        UnaryOp::Sign => {
            if x > 0.0 {
                1.0
            } else if x < 0.0 {
                -1.0
            } else {
                0.0 // NaN too, as MLX
            }
        }
        UnaryOp::Floor => x.floor(),
        UnaryOp::Ceil => x.ceil(),
        UnaryOp::Round => x.round_ties_even(),
        UnaryOp::Rsqrt => 1.0 / x.sqrt(),
        UnaryOp::Expm1 => x.exp_m1(),
        UnaryOp::Log1p => x.ln_1p(),
        UnaryOp::Log2 => x.log2(),
        UnaryOp::Log10 => x.log10(),
        UnaryOp::Cos => x.cos(),
        UnaryOp::Tan => x.tan(),
        UnaryOp::ArcSin => x.asin(),
        UnaryOp::ArcCos => x.acos(),
        UnaryOp::ArcTan => x.atan(),
        UnaryOp::Sinh => x.sinh(),
        UnaryOp::Cosh => x.cosh(),
        UnaryOp::ArcSinh => x.asinh(),
        UnaryOp::ArcCosh => x.acosh(),
        UnaryOp::ArcTanh => x.atanh(),
        UnaryOp::LogicalNot | UnaryOp::BitwiseInvert => unreachable!("not float ops"),
    }
}

/// Slow, independent erfinv: bisection on libm's erf.
fn erfinv_by_bisection(y: f64) -> f64 {
    if y.is_nan() || y == 0.0 || y.abs() > 1.0 {
        return if y.abs() > 1.0 { f64::NAN } else { y };
    }
    if y.abs() == 1.0 {
        return y * f64::INFINITY;
    }
    let (mut lo, mut hi) = (-7.0f64, 7.0f64);
    for _ in 0..200 {
        let mid = 0.5 * (lo + hi);
        if libm::erf(mid) < y {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    0.5 * (lo + hi)
}

fn inputs(op: UnaryOp) -> Vec<f64> {
    match op {
        UnaryOp::ErfInv => XS
            .iter()
            .map(|&x| x / (1.0 + x.abs()))
            .filter(|x| x.abs() < 1.0 || x.is_nan())
            .collect(),
        _ => XS.to_vec(),
    }
}

fn run_f64(op: UnaryOp, xs: &[f64], dtype: DType) -> Vec<f64> {
    let x = match dtype {
        DType::F64 => arr(xs, &[xs.len()], dtype),
        DType::F32 => arr(&xs.iter().map(|&v| v as f32).collect::<Vec<_>>(), &[xs.len()], dtype),
        DType::F16 => {
            arr(&xs.iter().map(|&v| f16::from_f64(v)).collect::<Vec<_>>(), &[xs.len()], dtype)
        }
        _ => arr(&xs.iter().map(|&v| bf16::from_f64(v)).collect::<Vec<_>>(), &[xs.len()], dtype),
    };
    let out = eval(&Primitive::Unary(op), &[x]);
    match dtype {
        DType::F64 => read::<f64>(&out),
        DType::F32 => read::<f32>(&out).into_iter().map(f64::from).collect(),
        DType::F16 => read::<f16>(&out).into_iter().map(f64::from).collect(),
        _ => read::<bf16>(&out).into_iter().map(f64::from).collect(),
    }
}

#[test]
fn float_ops_match_reference_in_every_float_dtype() {
    let float_ops = UnaryOp::ALL
        .into_iter()
        .filter(|op| !matches!(op, UnaryOp::LogicalNot | UnaryOp::BitwiseInvert));
    for op in float_ops {
        let xs = inputs(op);
        // (dtype, relative tolerance, absolute tolerance below the smallest normal number)
        let tolerances = [
            (DType::F64, 1e-14, 2.3e-308),
            (DType::F32, 2e-6, 1.2e-38),
            (DType::F16, 2e-3, 6.2e-5),
            (DType::BF16, 1.6e-2, 1.2e-38),
        ];
        for (dtype, rtol, atol) in tolerances {
            // Reference at the input as rounded to the dtype.
            let rounded = run_f64(UnaryOp::Abs, &xs, dtype)
                .iter()
                .zip(&xs)
                .map(|(a, &x)| if x < 0.0 { -a } else { *a })
                .collect::<Vec<_>>();
            let want: Vec<f64> = rounded.iter().map(|&x| reference_at(op, x)).collect();
            let got = run_f64(op, &xs, dtype);
            for (i, (&g, &w)) in got.iter().zip(&want).enumerate() {
                // Results that overflow/underflow the narrow dtypes compare after rounding.
                let w_rounded = match dtype {
                    DType::F16 => f64::from(f16::from_f64(w)),
                    DType::BF16 => f64::from(bf16::from_f64(w)),
                    DType::F32 => w as f32 as f64,
                    _ => w,
                };
                let ok = same_f64(g, w_rounded) || (g - w).abs() <= rtol * w.abs() + atol;
                assert!(ok, "{op:?} {dtype} x={}: got {g}, want {w}", rounded[i]);
            }
        }
    }
}

fn reference_at(op: UnaryOp, x: f64) -> f64 {
    match op {
        UnaryOp::ErfInv => erfinv_by_bisection(x),
        _ => reference(op, x),
    }
}

#[test]
fn sigmoid_never_nan_and_erfinv_edges() {
    let x = f32s(&[-1000.0, 1000.0, -90.0, 90.0], &[4]);
    let out = read::<f32>(&eval(&Primitive::Unary(UnaryOp::Sigmoid), &[x]));
    // sigmoid(-90) = e^-90 is a float32 subnormal (8.2e-40): 0 or that, never NaN.
    assert_eq!([out[0], out[1], out[3]], [0.0, 1.0, 1.0]);
    assert!((0.0..1e-38).contains(&out[2]), "{}", out[2]);
    for dtype in [DType::F32, DType::F64, DType::F16, DType::BF16] {
        let got = run_f64(UnaryOp::ErfInv, &[1.0, -1.0, 1.5, -2.0, 0.0], dtype);
        assert_eq!(&got[..2], &[f64::INFINITY, f64::NEG_INFINITY], "{dtype}");
        assert!(got[2].is_nan() && got[3].is_nan(), "{dtype}");
        assert_eq!(got[4], 0.0);
    }
}

#[test]
fn integer_negative_and_abs_wrap() {
    let x = arr(&[i8::MIN, -5, 0, 7, i8::MAX], &[5], DType::I8);
    assert_eq!(
        read::<i8>(&eval(&Primitive::Unary(UnaryOp::Negative), std::slice::from_ref(&x))),
        vec![i8::MIN, 5, 0, -7, -i8::MAX]
    );
    assert_eq!(
        read::<i8>(&eval(&Primitive::Unary(UnaryOp::Abs), &[x])),
        vec![i8::MIN, 5, 0, 7, i8::MAX]
    );
    let x = arr(&[i64::MIN, -3], &[2], DType::I64);
    assert_eq!(read::<i64>(&eval(&Primitive::Unary(UnaryOp::Abs), &[x])), vec![i64::MIN, 3]);
    let u = arr(&[0u16, 1, 65535], &[3], DType::U16);
    assert_eq!(
        read::<u16>(&eval(&Primitive::Unary(UnaryOp::Negative), std::slice::from_ref(&u))),
        vec![0, 65535, 1]
    );
    assert_eq!(read::<u16>(&eval(&Primitive::Unary(UnaryOp::Abs), &[u])), vec![0, 1, 65535]);
    let u = arr(&[3u64, 0], &[2], DType::U64);
    assert_eq!(
        read::<u64>(&eval(&Primitive::Unary(UnaryOp::Negative), &[u])),
        vec![u64::MAX - 2, 0]
    );
}

#[test]
fn bool_abs_is_identity_and_unsupported_ops_error() {
    let b = arr(&[0u8, 1, 1], &[3], DType::Bool);
    assert_eq!(
        read::<u8>(&eval(&Primitive::Unary(UnaryOp::Abs), std::slice::from_ref(&b))),
        vec![0, 1, 1]
    );
    assert!(matches!(
        try_eval(&Primitive::Unary(UnaryOp::Negative), std::slice::from_ref(&b)),
        Err(Error::Type { .. })
    ));
    assert!(try_eval(&Primitive::Unary(UnaryOp::Exp), &[b]).is_err());
    for dtype in [DType::I32, DType::U8, DType::I64] {
        let x = arr(&vec![0u8; dtype.size() * 2], &[2 * dtype.size()], DType::U8);
        let x = kiln_base::ArrayData { layout: Layout::contiguous(&[2]), dtype, ..x };
        let err = try_eval(&Primitive::Unary(UnaryOp::Sqrt), &[x]).unwrap_err();
        assert!(err.to_string().starts_with("[sqrt]"), "{err}");
    }
}

#[test]
fn strided_broadcast_empty_and_scalar_inputs() {
    let base = f32s(&[1.0, -2.0, 3.0, -4.0, 5.0, -6.0], &[2, 3]);
    let neg = Primitive::Unary(UnaryOp::Negative);
    // Transposed (3, 2) view.
    let t = with_layout(&base, base.layout.transpose(&[1, 0]));
    assert_eq!(read::<f32>(&eval(&neg, &[t])), vec![-1.0, 4.0, 2.0, -5.0, -3.0, 6.0]);
    // Reversed columns: negative stride with an offset.
    let r = with_layout(&base, base.layout.slice(&[0, 2], &[1, -1], &[2, 3]));
    assert_eq!(
        read::<f32>(&eval(&Primitive::Unary(UnaryOp::Abs), &[r])),
        vec![3.0, 2.0, 1.0, 6.0, 5.0, 4.0]
    );
    // Row broadcast (stride 0).
    let row = f32s(&[1.0, 4.0], &[2]);
    let b = with_layout(&row, row.layout.broadcast_to(&[3, 2]));
    assert_eq!(
        read::<f32>(&eval(&Primitive::Unary(UnaryOp::Sqrt), &[b])),
        vec![1.0, 2.0, 1.0, 2.0, 1.0, 2.0]
    );
    // Empty and 0-d.
    let e = f32s(&[], &[0, 3]);
    let out = eval(&neg, &[e]);
    assert_eq!(out.layout.shape.as_slice(), &[0, 3]);
    assert!(read::<f32>(&out).is_empty());
    let s = arr(&[4.0f64], &[], DType::F64);
    let out = eval(&Primitive::Unary(UnaryOp::Sqrt), &[s]);
    assert_eq!(out.layout.shape.len(), 0);
    assert_eq!(read::<f64>(&out), vec![2.0]);
}
