//! Random shapes, axes and dtypes fed to the op entry points: every call returns Ok or a
//! typed error, and evaluation of what was built never panics.

mod common;

use kiln_core::ops::{self, IndexItem};
use kiln_core::{eval, Array, DType};
use proptest::prelude::*;

fn dtype() -> impl Strategy<Value = DType> {
    prop::sample::select(DType::ALL.to_vec())
}

fn shape() -> impl Strategy<Value = Vec<usize>> {
    prop::collection::vec(0usize..4, 0..4)
}

fn array(shape: &[usize], dtype: DType) -> Array {
    let n: usize = shape.iter().product();
    let bytes: Vec<u8> = (0..n * dtype.size()).map(|i| (i * 37 % 251) as u8).collect();
    let bytes = if dtype == DType::Bool { bytes.iter().map(|b| b & 1).collect() } else { bytes };
    Array::from_bytes(&bytes, shape, dtype).unwrap()
}

fn check(results: Vec<kiln_core::Result<Array>>) {
    let ok: Vec<Array> = results.into_iter().filter_map(Result::ok).collect();
    let _ = eval(&ok); // Ok or a typed error; a panic fails the test
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    #[test]
    fn ops_never_panic(
        sa in shape(), sb in shape(), da in dtype(), db in dtype(),
        axes in prop::collection::vec(-5i64..5, 0..3), axis in -5i64..5,
        new_shape in prop::collection::vec(-2i64..5, 0..4),
        idx in prop::collection::vec((-4i64..4, -4i64..4, -3i64..3), 0..4),
    ) {
        let (a, b) = (array(&sa, da), array(&sb, db));
        let items: Vec<IndexItem> = idx
            .iter()
            .map(|&(s, e, st)| if st == 0 { IndexItem::Int(s) } else { IndexItem::Slice(Some(s), Some(e), Some(st)) })
            .collect();
        check(vec![
            ops::add(&a, &b), ops::divide(&a, &b), ops::power(&a, &b), ops::maximum(&a, &b),
            ops::less(&a, &b), ops::equal(&a, &b), ops::matmul(&a, &b),
            ops::negative(&a), ops::exp(&a), ops::erf(&a), ops::sqrt(&b), ops::abs(&b),
            ops::where_(&a, &b, &a), ops::astype(&a, db),
            ops::sum(&a, Some(&axes), true), ops::max(&a, Some(&axes), false),
            ops::mean(&a, None, false), ops::argmax(&a, Some(axis), false),
            ops::argmax(&a, None, true),
            ops::reshape(&a, &new_shape), ops::transpose(&a, Some(&axes)),
            ops::broadcast_to(&a, &sb), ops::expand_dims(&a, &axes), ops::squeeze(&a, Some(&axes)),
            ops::concatenate(&[a.clone(), b.clone()], axis), ops::index(&a, &items),
        ]);
        let k = axes.first().copied().unwrap_or(0) * 3;
        check(vec![
            ops::floor_divide(&a, &b), ops::remainder(&a, &b), ops::bitwise_and(&a, &b),
            ops::left_shift(&a, &b), ops::right_shift(&b, &a), ops::logical_or(&a, &b),
            ops::logaddexp(&a, &b), ops::arctan2(&a, &b), ops::bitwise_invert(&a),
            ops::round(&a, axis as i32), ops::sign(&b), ops::arccosh(&a), ops::square(&b),
            ops::nan_to_num(&a, 0.0, None, None), ops::clip(&a, Some(&b), None),
            ops::isclose(&a, &b, 1e-5, 1e-8, true), ops::array_equal(&a, &b, true),
            ops::allclose(&a, &b, 1e-5, 1e-8, false), ops::stop_gradient(&a),
            ops::tril(&a, k), ops::triu(&b, -k), ops::diag(&a, k),
            ops::diagonal(&a, k, axis, axes.first().copied().unwrap_or(1)),
            ops::eye(k, Some(axis), axis, da), ops::tri(axis, None, k, db),
            ops::linspace(axis as f64, k as f64, k, axis > 0, da),
            ops::full_like(&a, &b, Some(db)), ops::zeros_like(&b, None),
        ]);
        if let Ok(grids) = ops::meshgrid(&[a.clone(), b.clone()], axis > 0, "xy") {
            check(grids.into_iter().map(Ok).collect());
        }
        if let Ok((q, r)) = ops::divmod(&a, &b) {
            check(vec![Ok(q), Ok(r)]);
        }
    }
}
