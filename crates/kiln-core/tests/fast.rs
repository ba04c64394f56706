//! mx.fast primitives against compositions of basic ops (float64): the CPU kernels' edge
//! cases (block boundaries of the streaming attention, causal skipping with more queries than
//! keys, grouped heads, empty inputs, strided views), and rope's inverse undoing it.

mod common;

use kiln_core::ops::{self, fast};
use kiln_core::{Array, DType};

fn values(seed: u64, n: usize) -> Vec<f64> {
    let mut state = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
    (0..n)
        .map(|_| {
            state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            -2.0 + 4.0 * ((state >> 11) as f64 / (1u64 << 53) as f64)
        })
        .collect()
}

fn rand(seed: u64, shape: &[usize]) -> Array {
    Array::from_slice(&values(seed, shape.iter().product()), shape).unwrap()
}

fn close(a: &Array, b: &Array, tol: f64) {
    assert_eq!(a.shape(), b.shape());
    let u = ops::astype(a, DType::F64).unwrap().to_vec::<f64>().unwrap();
    let v = ops::astype(b, DType::F64).unwrap().to_vec::<f64>().unwrap();
    for (i, (p, q)) in u.iter().zip(&v).enumerate() {
        assert!((p - q).abs() <= tol * (1.0 + q.abs()), "element {i}: {p} vs {q}");
    }
}

/// Attention from basic ops: repeated kv heads, lower-right causal mask.
fn composed(q: &Array, k: &Array, v: &Array, scale: f64, causal: bool) -> Array {
    let g = (q.shape()[1] / k.shape()[1]) as i64;
    let k = ops::repeat(k, g, Some(1)).unwrap();
    let v = ops::repeat(v, g, Some(1)).unwrap();
    let mut s = ops::matmul(q, &ops::swapaxes(&k, -1, -2).unwrap()).unwrap();
    s = ops::multiply(&s, &ops::scalar(kiln_core::Scalar::Float(scale), DType::F64).unwrap())
        .unwrap();
    if causal {
        let (lq, lk) = (q.shape()[2] as i64, k.shape()[2] as i64);
        let i =
            ops::reshape(&ops::arange(0.0, lq as f64, 1.0, DType::I64).unwrap(), &[-1, 1]).unwrap();
        let j = ops::arange(0.0, lk as f64, 1.0, DType::I64).unwrap();
        let shift = ops::scalar(kiln_core::Scalar::Int(lk - lq), DType::I64).unwrap();
        let vis = ops::less_equal(&j, &ops::add(&i, &shift).unwrap()).unwrap();
        let low = ops::scalar(kiln_core::Scalar::Float(f64::MIN), DType::F64).unwrap();
        s = ops::where_(&vis, &s, &low).unwrap();
    }
    ops::matmul(&ops::softmax(&s, Some(&[-1]), true).unwrap(), &v).unwrap()
}

#[test]
fn attention_matches_the_composition_across_blocks() {
    // Lengths straddle the kernel's query (64) and key (128) blocks.
    for (seed, (b, hq, hk, lq, lk, d)) in
        [(1, 2, 2, 65, 129, 4), (2, 4, 1, 130, 70, 3), (1, 3, 3, 1, 257, 5), (2, 2, 1, 200, 3, 2)]
            .into_iter()
            .enumerate()
    {
        let q = rand(seed as u64, &[b, hq, lq, d]);
        let k = rand(seed as u64 + 10, &[b, hk, lk, d]);
        let v = rand(seed as u64 + 20, &[b, hk, lk, d + 1]);
        for causal in [false, true] {
            let mask = if causal { fast::SdpaMask::Causal } else { fast::SdpaMask::None };
            let got = fast::scaled_dot_product_attention(&q, &k, &v, 0.4, mask, None).unwrap();
            close(&got, &composed(&q, &k, &v, 0.4, causal), 1e-12);
        }
    }
}

#[test]
fn attention_reads_views_and_handles_empty() {
    let base = rand(3, &[1, 6, 2, 8]);
    let q = ops::transpose(&base, Some(&[0, 2, 1, 3])).unwrap(); // (1, 2, 6, 8), strided
    let k =
        ops::slice(&rand(4, &[1, 2, 10, 8]), &[None, None, None, None], &[None; 4], &[1, 1, -2, 1])
            .unwrap();
    let v = rand(5, &[1, 2, 5, 3]);
    let got =
        fast::scaled_dot_product_attention(&q, &k, &v, 0.5, fast::SdpaMask::None, None).unwrap();
    close(&got, &composed(&q, &k, &v, 0.5, false), 1e-12);
    let e = Array::from_slice(&[] as &[f64], &[1, 2, 0, 3]).unwrap();
    let got = fast::scaled_dot_product_attention(
        &q,
        &ops::zeros(&[1, 2, 0, 8], DType::F64).unwrap(),
        &e,
        0.5,
        fast::SdpaMask::None,
        None,
    )
    .unwrap();
    assert_eq!(got.shape(), &[1, 2, 6, 3]);
    assert!(got.to_vec::<f64>().unwrap().iter().all(|&x| x == 0.0));
}

#[test]
fn norms_match_the_composition() {
    let x = rand(7, &[3, 4, 37]);
    let w = rand(8, &[37]);
    let mean = |a: &Array| ops::mean(a, Some(&[-1]), true).unwrap();
    let eps = ops::scalar(kiln_core::Scalar::Float(1e-5f32 as f64), DType::F64).unwrap();
    let xc = ops::subtract(&x, &mean(&x)).unwrap();
    let r =
        |var: &Array| ops::reciprocal(&ops::sqrt(&ops::add(var, &eps).unwrap()).unwrap()).unwrap();
    let ln = ops::multiply(&ops::multiply(&xc, &r(&mean(&ops::square(&xc).unwrap()))).unwrap(), &w)
        .unwrap();
    close(&fast::layer_norm(&x, Some(&w), None, 1e-5).unwrap(), &ln, 1e-12);
    let rms = ops::multiply(&ops::multiply(&x, &r(&mean(&ops::square(&x).unwrap()))).unwrap(), &w)
        .unwrap();
    close(&fast::rms_norm(&x, Some(&w), 1e-5).unwrap(), &rms, 1e-12);
    let t = ops::transpose(&x, None).unwrap(); // a strided input
    let tt = ops::contiguous(&t, false).unwrap();
    close(&fast::rms_norm(&t, None, 1e-5).unwrap(), &fast::rms_norm(&tt, None, 1e-5).unwrap(), 0.0);
}

#[test]
fn rope_keeps_norms_and_unrotated_features() {
    let x = rand(9, &[2, 3, 5, 10]);
    let off = Array::from_slice(&[3i32, 7], &[2]).unwrap();
    let y = fast::rope(&x, 6, false, Some(10000.0), 1.0, &off, None).unwrap();
    // Features past `dims` are copied; the rotated pairs keep their norm.
    let tail =
        |a: &Array| ops::slice(a, &[None, None, None, Some(6)], &[None; 4], &[1; 4]).unwrap();
    close(&tail(&y), &tail(&x), 0.0);
    let sq = |a: &Array| ops::sum(&ops::square(a).unwrap(), Some(&[-1]), false).unwrap();
    close(&sq(&y), &sq(&x), 1e-12);
    assert!(fast::rope(&x, 12, false, Some(1.0), 1.0, &off, None).is_err());
    assert!(fast::rope(&x, 4, false, None, 1.0, &off, None).is_err());
}
