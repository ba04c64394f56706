//! The fused LogSumExp primitive: values against the composition (every axis, keepdims,
//! dtype, views, special rows), gradients against central finite differences (float64) and
//! the composition's, jvp against vjp, second order, and vmap against a loop.

mod common;

use kiln_core::ops;
use kiln_core::transforms::{grad, jvp, vjp, vmap};
use kiln_core::{Array, DType};

fn values(seed: u64, n: usize) -> Vec<f64> {
    let mut state = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
    (0..n)
        .map(|_| {
            state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            -3.0 + 6.0 * ((state >> 11) as f64 / (1u64 << 53) as f64)
        })
        .collect()
}

/// The old composition: `where(|m| == inf, m, m + log(sum(exp(x - m))))`, `m` the max.
fn composed(x: &Array, axes: Option<&[i64]>, keepdims: bool) -> Array {
    let m = ops::max(x, axes, true).unwrap();
    let s = ops::sum(&ops::exp(&ops::subtract(x, &m).unwrap()).unwrap(), axes, true).unwrap();
    let out = ops::add(&ops::log(&s).unwrap(), &m).unwrap();
    let out = ops::where_(&ops::isinf(&m).unwrap(), &m, &out).unwrap();
    if keepdims {
        out
    } else {
        let all: Vec<i64> = (0..x.ndim() as i64).collect();
        ops::squeeze(&out, Some(axes.unwrap_or(&all))).unwrap()
    }
}

fn close(a: &Array, b: &Array, tol: f64) {
    assert_eq!(a.shape(), b.shape());
    let (u, v) = (
        ops::astype(a, DType::F64).unwrap().to_vec::<f64>().unwrap(),
        ops::astype(b, DType::F64).unwrap().to_vec::<f64>().unwrap(),
    );
    for (p, q) in u.iter().zip(&v) {
        let same_special = (p.is_nan() && q.is_nan()) || (p.is_infinite() && p == q);
        assert!(same_special || (p - q).abs() <= tol * (1.0 + q.abs()), "{u:?} vs {v:?}");
    }
}

#[test]
fn matches_the_composition_on_every_axis_and_dtype() {
    let x = Array::from_slice(&values(1, 60), &[3, 4, 5]).unwrap();
    let x64 = |a: &Array| ops::astype(a, DType::F64).unwrap();
    for dtype in [DType::F32, DType::F64, DType::F16, DType::BF16] {
        let xd = ops::astype(&x, dtype).unwrap();
        let tol = match dtype {
            DType::F64 => 1e-12,
            DType::F32 => 1e-6,
            DType::F16 => 1e-3,
            _ => 8e-3,
        };
        let axes: [Option<&[i64]>; 6] =
            [None, Some(&[0]), Some(&[1]), Some(&[-1]), Some(&[2]), Some(&[0, 2])];
        for axes in axes {
            for keepdims in [false, true] {
                let got = ops::logsumexp(&xd, axes, keepdims).unwrap();
                assert_eq!(got.dtype(), dtype);
                close(&got, &composed(&x64(&xd), axes, keepdims), tol);
            }
        }
        // A transposed, negative-step view is read in place.
        let v = ops::transpose(&xd, Some(&[2, 0, 1])).unwrap();
        let v = ops::index(&v, &[ops::IndexItem::Slice(None, None, Some(-1))]).unwrap();
        for axis in [0i64, 1, 2] {
            let want = composed(&x64(&v), Some(&[axis]), false);
            close(&ops::logsumexp(&v, Some(&[axis]), false).unwrap(), &want, tol);
        }
    }
    // Long rows (the vectorised lanes and their remainder), half floats accumulate in float32.
    let long = Array::from_slice(&values(7, 3 * 1001), &[3, 1001]).unwrap();
    for dtype in [DType::F32, DType::BF16] {
        let l = ops::astype(&long, dtype).unwrap();
        let got = ops::logsumexp(&l, Some(&[-1]), true).unwrap();
        assert_eq!(got.shape(), &[3, 1]);
        let tol = if dtype == DType::F32 { 1e-6 } else { 8e-3 };
        close(&got, &composed(&x64(&l), Some(&[-1]), true), tol);
    }
}

#[test]
fn special_values_follow_the_composition() {
    let (inf, nan) = (f64::INFINITY, f64::NAN);
    #[rustfmt::skip]
    let rows = [
        1.0, 2.0, nan,  // NaN anywhere: NaN
        0.0, -inf, 0.0,  // -inf adds nothing
        inf, 1.0, -inf,  // +inf: +inf
        -inf, -inf, -inf,  // all -inf: -inf
        nan, inf, 1.0,  // NaN beats +inf
        1000.0, -1000.0, 999.0,  // no overflow
    ];
    let x = Array::from_slice(&rows, &[6, 3]).unwrap();
    for dtype in [DType::F32, DType::F64, DType::F16, DType::BF16] {
        let xd = ops::astype(&x, dtype).unwrap();
        let got = ops::logsumexp(&xd, Some(&[1]), false).unwrap();
        let want = [nan, 2f64.ln(), inf, -inf, nan, 1000.0 + (1.0 + (-1f64).exp()).ln()];
        let g = ops::astype(&got, DType::F64).unwrap().to_vec::<f64>().unwrap();
        for (i, (&a, &b)) in g.iter().zip(&want).enumerate() {
            let ok = (a.is_nan() && b.is_nan()) || a == b || (a - b).abs() < 1e-2 * b.abs();
            assert!(ok, "{dtype} row {i}: {a} vs {b}");
        }
        close(&got, &composed(&xd, Some(&[1]), false), 1e-2);
    }
    let one = Array::from_slice(&[5.0f32], &[]).unwrap();
    assert_eq!(ops::logsumexp(&one, None, false).unwrap().item::<f32>().unwrap(), 5.0);
    let ints = Array::from_slice(&[1i32, 2, 3], &[3]).unwrap();
    let l = ops::logsumexp(&ints, None, true).unwrap();
    assert_eq!((l.dtype(), l.shape()), (DType::F32, &[1][..]));
    let e = Array::from_slice::<f32>(&[], &[2, 0]).unwrap();
    assert_eq!(
        ops::logsumexp(&e, Some(&[1]), false).unwrap_err().to_string(),
        "[logsumexp] Received empty array."
    );
}

#[test]
fn gradients_match_finite_differences_and_the_composition() {
    let v = values(2, 12);
    let x = Array::from_slice(&v, &[3, 4]).unwrap();
    let w = Array::from_slice(&values(3, 12), &[3, 4]).unwrap();
    let dot = |a: &Array, b: &Array| {
        ops::sum(&ops::multiply(a, b).unwrap(), None, false).unwrap().item::<f64>().unwrap()
    };
    for axes in [Some(&[0i64][..]), Some(&[1][..]), None] {
        for keepdims in [false, true] {
            let weights = ops::sum(&w, axes, keepdims).unwrap();
            let f = |a: &[Array]| {
                let l = ops::logsumexp(&a[0], axes, keepdims)?;
                // (the square: a loss whose cotangent differs per row)
                ops::sum(&ops::multiply(&ops::square(&l)?, &weights)?, None, false)
            };
            let fc = |a: &[Array]| {
                let l = composed(&a[0], axes, keepdims);
                ops::sum(&ops::multiply(&ops::square(&l)?, &weights)?, None, false)
            };
            let g = grad(f, std::slice::from_ref(&x), &[0]).unwrap().remove(0);
            let gc = grad(fc, std::slice::from_ref(&x), &[0]).unwrap().remove(0);
            close(&g, &gc, 1e-12);
            let g = g.to_vec::<f64>().unwrap();
            common::assert_central_differences(f, &v, &[3, 4], &g, &format!("{axes:?}"));
        }
        // <vjp(c), t> == <c, jvp(t)> for the logsumexp itself.
        let t = Array::from_slice(&values(4, 12), &[3, 4]).unwrap();
        let lse = |a: &[Array]| Ok(vec![ops::logsumexp(&a[0], axes, true)?]);
        let c = ops::sum(&w, axes, true).unwrap();
        let (_, ct) = vjp(lse, std::slice::from_ref(&x), std::slice::from_ref(&c)).unwrap();
        let (_, tan) = jvp(lse, std::slice::from_ref(&x), std::slice::from_ref(&t)).unwrap();
        let (l, r) = (dot(&ct[0], &t), dot(&c, &tan[0]));
        assert!((l - r).abs() < 1e-12 * (1.0 + l.abs()), "{l} vs {r}");
    }
    // Second order: the gradient of the gradient against the composition's (the output
    // feeds the rules, so it must stay differentiable).
    let inner = |a: &[Array]| {
        let f = |b: &[Array]| ops::sum(&ops::logsumexp(&b[0], Some(&[1]), false)?, None, false);
        let g = grad(f, a, &[0])?.remove(0);
        ops::sum(&ops::multiply(&g, &w)?, None, false)
    };
    let inner_c = |a: &[Array]| {
        let f = |b: &[Array]| ops::sum(&composed(&b[0], Some(&[1]), false), None, false);
        let g = grad(f, a, &[0])?.remove(0);
        ops::sum(&ops::multiply(&g, &w)?, None, false)
    };
    let h = grad(inner, std::slice::from_ref(&x), &[0]).unwrap().remove(0);
    let hc = grad(inner_c, std::slice::from_ref(&x), &[0]).unwrap().remove(0);
    close(&h, &hc, 1e-12);
    // Half floats: the gradient is the row's softmax, computed in float32 and rounded once.
    let xb = ops::astype(&x, DType::BF16).unwrap();
    let f = |a: &[Array]| ops::sum(&ops::logsumexp(&a[0], Some(&[1]), false)?, None, false);
    let g = grad(f, std::slice::from_ref(&xb), &[0]).unwrap().remove(0);
    assert_eq!(g.dtype(), DType::BF16);
    close(&g, &ops::softmax(&x, Some(&[1]), false).unwrap(), 8e-3);
}

#[test]
fn vmap_matches_a_loop() {
    let x = Array::from_slice(&values(5, 24), &[2, 3, 4]).unwrap();
    for in_axis in [0usize, 2] {
        for axes in [Some(&[-1i64][..]), Some(&[0][..]), None] {
            let out = vmap(
                |a| Ok(vec![ops::logsumexp(&a[0], axes, false)?]),
                std::slice::from_ref(&x),
                &[Some(in_axis)],
                &[Some(0)],
            )
            .unwrap()
            .remove(0);
            let moved = ops::moveaxis(&x, in_axis as i64, 0).unwrap();
            let rows: Vec<Array> = (0..x.shape()[in_axis] as i64)
                .map(|i| {
                    let xi = ops::index(&moved, &[ops::IndexItem::Int(i)]).unwrap();
                    composed(&xi, axes, false)
                })
                .collect();
            close(&out, &ops::stack(&rows, 0).unwrap(), 1e-12);
        }
    }
}
