//! The fused Softmax primitive: values against the composition, gradients against central
//! finite differences (float64), jvp against vjp, and vmap against a loop.

mod common;

use kiln_core::ops;
use kiln_core::transforms::{grad, jvp, vjp, vmap};
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

fn composed(x: &Array, axes: Option<&[i64]>) -> Array {
    let e = ops::exp(&ops::subtract(x, &ops::max(x, axes, true).unwrap()).unwrap()).unwrap();
    ops::divide(&e, &ops::sum(&e, axes, true).unwrap()).unwrap()
}

fn close(a: &Array, b: &Array, tol: f64) {
    assert_eq!(a.shape(), b.shape());
    let (u, v) = (
        ops::astype(a, DType::F64).unwrap().to_vec::<f64>().unwrap(),
        ops::astype(b, DType::F64).unwrap().to_vec::<f64>().unwrap(),
    );
    for (p, q) in u.iter().zip(&v) {
        assert!(
            (p - q).abs() <= tol * (1.0 + q.abs()) || (p.is_nan() && q.is_nan()),
            "{u:?} vs {v:?}"
        );
    }
}

#[test]
fn matches_the_composition_on_every_axis_and_dtype() {
    let x = Array::from_slice(&values(1, 60), &[3, 4, 5]).unwrap();
    for dtype in [DType::F32, DType::F64, DType::F16, DType::BF16] {
        let xd = ops::astype(&x, dtype).unwrap();
        let tol = match dtype {
            DType::F64 => 1e-12,
            DType::F32 => 1e-6,
            _ => 1e-2,
        };
        for axes in [None, Some(&[0][..]), Some(&[1][..]), Some(&[-1][..]), Some(&[0, 2][..])] {
            let got = ops::softmax(&xd, axes, true).unwrap();
            assert_eq!(got.dtype(), dtype);
            close(&got, &composed(&ops::astype(&xd, DType::F64).unwrap(), axes), tol);
        }
        // A transposed, negative-step view is read in place.
        let v = ops::transpose(&xd, Some(&[2, 0, 1])).unwrap();
        let v = ops::index(&v, &[ops::IndexItem::Slice(None, None, Some(-1))]).unwrap();
        close(&ops::softmax(&v, Some(&[-1]), false).unwrap(), &composed(&v, Some(&[-1])), tol);
    }
}

#[test]
fn special_values_follow_the_composition() {
    let inf = f64::INFINITY;
    let x = Array::from_slice(
        &[1.0, 2.0, f64::NAN, 0.0, -inf, 0.0, inf, 1.0, -inf, -inf, 1000.0, -1000.0],
        &[4, 3],
    )
    .unwrap();
    for dtype in [DType::F32, DType::F64] {
        let xd = ops::astype(&x, dtype).unwrap();
        close(&ops::softmax(&xd, Some(&[1]), false).unwrap(), &composed(&xd, Some(&[1])), 1e-6);
    }
    let empty = Array::from_slice::<f32>(&[], &[0, 3]).unwrap();
    assert_eq!(ops::softmax(&empty, Some(&[1]), false).unwrap().shape(), &[0, 3]);
    let one = Array::from_slice(&[5.0f32], &[]).unwrap();
    assert_eq!(ops::softmax(&one, None, false).unwrap().item::<f32>().unwrap(), 1.0);
    let ints = Array::from_slice(&[1i32, 2, 3], &[3]).unwrap();
    assert_eq!(ops::softmax(&ints, None, false).unwrap().dtype(), DType::F32);
}

#[test]
fn gradients_match_finite_differences_and_jvp() {
    let v = values(2, 12);
    let x = Array::from_slice(&v, &[3, 4]).unwrap();
    let w = Array::from_slice(&values(3, 12), &[3, 4]).unwrap();
    for axis in [0i64, 1] {
        let f = |a: &[Array]| {
            let s = ops::softmax(&a[0], Some(&[axis]), false)?;
            ops::sum(&ops::multiply(&s, &w)?, None, false)
        };
        let g = grad(f, std::slice::from_ref(&x), &[0]).unwrap().remove(0).to_vec::<f64>().unwrap();
        common::assert_central_differences(f, &v, &[3, 4], &g, &format!("axis {axis}"));
        // <vjp(w), t> == <w, jvp(t)> for the softmax itself.
        let t = Array::from_slice(&values(4, 12), &[3, 4]).unwrap();
        let sm = |a: &[Array]| Ok(vec![ops::softmax(&a[0], Some(&[axis]), false)?]);
        let (_, ct) = vjp(sm, std::slice::from_ref(&x), std::slice::from_ref(&w)).unwrap();
        let (_, tan) = jvp(sm, std::slice::from_ref(&x), std::slice::from_ref(&t)).unwrap();
        let dot = |a: &Array, b: &Array| {
            ops::sum(&ops::multiply(a, b).unwrap(), None, false).unwrap().item::<f64>().unwrap()
        };
        let (l, r) = (dot(&ct[0], &t), dot(&w, &tan[0]));
        assert!((l - r).abs() < 1e-12 * (1.0 + l.abs()), "{l} vs {r}");
    }
}

#[test]
fn vmap_matches_a_loop() {
    let x = Array::from_slice(&values(5, 24), &[2, 3, 4]).unwrap();
    for in_axis in [0usize, 2] {
        let out = vmap(
            |a| Ok(vec![ops::softmax(&a[0], Some(&[-1]), false)?]),
            std::slice::from_ref(&x),
            &[Some(in_axis)],
            &[Some(0)],
        )
        .unwrap()
        .remove(0);
        let moved = ops::moveaxis(&x, in_axis as i64, 0).unwrap();
        close(&out, &composed(&moved, Some(&[-1])), 1e-12);
    }
}
