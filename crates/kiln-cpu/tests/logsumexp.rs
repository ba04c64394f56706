//! The LogSumExp primitive (last axis, kept as size 1) against a float64 loop: row lengths
//! around the vectorised lanes, transposed views, half floats (float32 accumulation, one
//! rounding), special rows, and the shape rule.
mod common;

use common::*;
use half::{bf16, f16};
use kiln_base::{DType, Primitive};

/// logsumexp of one row in float64: the max where it is infinite or NaN.
fn naive(row: &[f64]) -> f64 {
    let m = row.iter().fold(f64::NEG_INFINITY, |a, &v| if v > a || v.is_nan() { v } else { a });
    if !m.is_finite() {
        return m;
    }
    m + row.iter().map(|&v| (v - m).exp()).sum::<f64>().ln()
}

fn data(n: usize) -> Vec<f64> {
    (0..n).map(|i| ((i * 37 % 101) as f64 - 50.0) / 7.0).collect()
}

#[test]
fn rows_of_every_length_match_a_loop() {
    for len in [1usize, 2, 31, 32, 33, 64, 100, 1000, 4099] {
        let v = data(3 * len);
        let want: Vec<f64> = v.chunks(len).map(naive).collect();
        let f32s: Vec<f32> = v.iter().map(|&x| x as f32).collect();
        let out = eval(&Primitive::LogSumExp, &[arr(&f32s, &[3, len], DType::F32)]);
        assert_eq!(out.layout.shape.as_slice(), &[3, 1]);
        let got: Vec<f64> = read::<f32>(&out).iter().map(|&x| x as f64).collect();
        assert_close(&got, &want, 1e-6);
        let out = eval(&Primitive::LogSumExp, &[arr(&v, &[3, len], DType::F64)]);
        assert_close(&read::<f64>(&out), &want, 1e-13);
        // Half floats: the widened values' logsumexp, rounded once.
        let h: Vec<f16> = v.iter().map(|&x| f16::from_f64(x)).collect();
        let hv: Vec<f64> = h.iter().map(|x| x.to_f64()).collect();
        let out = eval(&Primitive::LogSumExp, &[arr(&h, &[3, len], DType::F16)]);
        let want_h: Vec<f64> = hv.chunks(len).map(|r| f16::from_f64(naive(r)).to_f64()).collect();
        let got: Vec<f64> = read::<f16>(&out).iter().map(|x| x.to_f64()).collect();
        assert_close(&got, &want_h, 1e-3);
        let b: Vec<bf16> = v.iter().map(|&x| bf16::from_f64(x)).collect();
        let bv: Vec<f64> = b.iter().map(|x| x.to_f64()).collect();
        let out = eval(&Primitive::LogSumExp, &[arr(&b, &[3, len], DType::BF16)]);
        let want_b: Vec<f64> = bv.chunks(len).map(|r| bf16::from_f64(naive(r)).to_f64()).collect();
        let got: Vec<f64> = read::<bf16>(&out).iter().map(|x| x.to_f64()).collect();
        assert_close(&got, &want_b, 8e-3);
    }
}

#[test]
fn strided_rows_are_gathered() {
    // A (5, 4) buffer read as its (4, 5) transpose: rows of stride 4.
    let v = data(20);
    let x = arr(&v, &[5, 4], DType::F64);
    let t = with_layout(&x, x.layout.transpose(&[1, 0]));
    let want: Vec<f64> =
        (0..4).map(|j| naive(&(0..5).map(|i| v[i * 4 + j]).collect::<Vec<_>>())).collect();
    let out = eval(&Primitive::LogSumExp, &[t]);
    assert_eq!(out.layout.shape.as_slice(), &[4, 1]);
    assert_close(&read::<f64>(&out), &want, 1e-13);
}

#[test]
fn special_rows_and_the_shape_rule() {
    let (inf, nan) = (f32::INFINITY, f32::NAN);
    let mut rows = vec![
        vec![1.0, nan, 2.0],
        vec![-inf, -inf, -inf],
        vec![inf, 1.0, -inf],
        vec![nan, inf, -inf],
        vec![-inf, 0.0, 0.0],
    ];
    // The same specials inside rows long enough for the vectorised lanes.
    for r in rows.clone() {
        let mut long = vec![-inf; 70];
        long[40..43].copy_from_slice(&r);
        rows.push(long);
    }
    for r in rows {
        let out = eval(&Primitive::LogSumExp, &[f32s(&r, &[1, r.len()])]);
        let want = naive(&r.iter().map(|&x| x as f64).collect::<Vec<_>>());
        assert_close(&[read::<f32>(&out)[0] as f64], &[want], 1e-6);
    }
    // An empty last axis sums nothing: -inf.
    let empty = eval(&Primitive::LogSumExp, &[f32s(&[], &[2, 0])]);
    assert_eq!(read::<f32>(&empty), vec![f32::NEG_INFINITY; 2]);
    let p = Primitive::LogSumExp;
    assert_eq!(p.name(), "logsumexp");
    let err = p.output_shapes(&[(&[3, 4], DType::I32)]).unwrap_err().to_string();
    assert_eq!(err, "[logsumexp] Expected a float input, got int32.");
    assert!(p.output_shapes(&[(&[3], DType::C64)]).is_err());
    assert!(p.output_shapes(&[(&[], DType::F32)]).is_err());
    let out = p.output_shapes(&[(&[2, 3, 5], DType::BF16)]).unwrap();
    assert_eq!((out[0].0.as_slice(), out[0].1), (&[2, 3, 1][..], DType::BF16));
}
