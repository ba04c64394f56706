//! Reductions, scans and sorts end to end: hand-checked values, and properties over random
//! shapes, axes, dtypes and views (calls return Ok or a typed error and never panic; sort
//! output is ordered and a permutation; the last inclusive cumsum equals the sum;
//! searchsorted finds each value's first position).

mod common;

use kiln_core::ops::{self, IndexItem};
use kiln_core::{eval, Array, DType};
use proptest::prelude::*;

fn f32s(a: &Array) -> Vec<f32> {
    a.to_vec::<f32>().unwrap()
}

#[test]
fn values() {
    let x = Array::from_slice(&[1.0f32, 2.0, 3.0, 4.0, 5.0, 7.0], &[2, 3]).unwrap();
    let v = ops::var(&x, None, false, 0).unwrap();
    assert!((v.item::<f32>().unwrap() - 3.888_889).abs() < 1e-5);
    let s = ops::std(&x, Some(&[1]), true, 1).unwrap();
    assert_eq!(s.shape(), &[2, 1]);
    assert!((f32s(&s)[1] - 1.527_525_2).abs() < 1e-5);
    let l = ops::logsumexp(&x, Some(&[-1]), false).unwrap();
    assert!((f32s(&l)[0] - 3.407_606).abs() < 1e-5);
    let p = ops::softmax(&x, Some(&[1]), false).unwrap();
    assert!((f32s(&p)[..3].iter().sum::<f32>() - 1.0).abs() < 1e-6);
    let b = ops::all(&x, None, false).unwrap();
    assert_eq!(b.dtype(), DType::Bool);
    let c = ops::cumsum(&x, None, true, false).unwrap();
    // Reversed and exclusive: each element is the sum of those after it.
    assert_eq!(f32s(&c), vec![21.0, 19.0, 16.0, 12.0, 7.0, 0.0]);
    let t = ops::topk(&x, 2, Some(1)).unwrap();
    assert_eq!(f32s(&t), vec![2.0, 3.0, 5.0, 7.0]);
    let e = Array::from_slice::<f32>(&[], &[0]).unwrap();
    assert_eq!(
        ops::logsumexp(&e, None, false).unwrap_err().to_string(),
        "[logsumexp] Received empty array."
    );
}

fn dtype() -> impl Strategy<Value = DType> {
    prop::sample::select(DType::ALL.to_vec())
}

fn shape() -> impl Strategy<Value = Vec<usize>> {
    prop::collection::vec(0usize..5, 0..4)
}

fn array(shape: &[usize], dtype: DType) -> Array {
    let n: usize = shape.iter().product();
    let bytes: Vec<u8> = (0..n * dtype.size()).map(|i| (i * 37 % 251) as u8).collect();
    let bytes = if dtype == DType::Bool { bytes.iter().map(|b| b & 1).collect() } else { bytes };
    Array::from_bytes(&bytes, shape, dtype).unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    #[test]
    fn ops_never_panic(
        s in shape(), d in dtype(), axes in prop::collection::vec(-5i64..5, 0..3),
        axis in prop::option::of(-5i64..5), k in -2i64..6, ddof in -3i64..6,
        flags in (any::<bool>(), any::<bool>()), step in prop::sample::select(vec![1i64, -1, -2]),
    ) {
        let a = array(&s, d);
        // A negative-step view over the first axis when there is one.
        let a = if s.is_empty() { a } else {
            ops::index(&a, &[IndexItem::Slice(None, None, Some(step))]).unwrap()
        };
        let (rev, incl) = flags;
        let results = vec![
            ops::all(&a, Some(&axes), true), ops::any(&a, None, false),
            ops::var(&a, Some(&axes), false, ddof), ops::std(&a, None, true, ddof),
            ops::logsumexp(&a, Some(&axes), false), ops::softmax(&a, Some(&axes), flags.0),
            ops::cumsum(&a, axis, rev, incl), ops::cumprod(&a, axis, rev, incl),
            ops::cummax(&a, axis, rev, incl), ops::cummin(&a, axis, rev, incl),
            ops::logcumsumexp(&a, axis, rev, incl),
            ops::sort(&a, axis), ops::argsort(&a, axis), ops::partition(&a, k, axis),
            ops::argpartition(&a, k, axis), ops::topk(&a, k, axis),
            ops::count_nonzero(&a, Some(&axes), true), ops::median(&a, Some(&axes), false),
            ops::median(&a, None, true), ops::searchsorted(&a, &a, flags.1),
            ops::minmax(&a, Some(&axes), false).map(|(lo, _)| lo),
        ];
        let ok: Vec<Array> = results.into_iter().filter_map(Result::ok).collect();
        let _ = eval(&ok); // Ok or a typed error; a panic fails the test
    }

    #[test]
    fn sort_orders_and_cumsum_ends_at_the_sum(values in prop::collection::vec(-50i32..50, 1..40)) {
        let x = Array::from_slice(&values, &[values.len()]).unwrap();
        let sorted = ops::sort(&x, Some(0)).unwrap().to_vec::<i32>().unwrap();
        let mut want = values.clone();
        want.sort();
        prop_assert_eq!(sorted, want.clone());
        let idx = ops::argsort(&x, None).unwrap().to_vec::<u32>().unwrap();
        let taken: Vec<i32> = idx.iter().map(|&i| values[i as usize]).collect();
        prop_assert_eq!(taken, want.clone());
        let c = ops::cumsum(&x, None, false, true).unwrap().to_vec::<i32>().unwrap();
        let total = ops::sum(&x, None, false).unwrap().item::<i32>().unwrap();
        prop_assert_eq!(*c.last().unwrap(), total);
        let r = ops::cumsum(&x, None, true, true).unwrap().to_vec::<i32>().unwrap();
        prop_assert_eq!(r[0], total);
        // Searching the sorted values for themselves finds each one's first position.
        let s = ops::sort(&x, None).unwrap();
        let at = ops::searchsorted(&s, &x, false).unwrap().to_vec::<u32>().unwrap();
        for (&i, v) in at.iter().zip(&values) {
            prop_assert_eq!(want[i as usize], *v);
            prop_assert!(i == 0 || want[i as usize - 1] < *v);
        }
    }
}

#[test]
fn float16_mean_over_more_than_65504_elements() {
    // MLX: the float16 sum times 1/n in float16: 65505 ones sum to 65504 (rounded), and
    // 70000 overflow to inf; the mean is then 65504 * 2^-16 and inf, never NaN.
    let mean_of_ones = |n: usize| {
        let x = ops::ones(&[n], DType::F16).unwrap();
        ops::mean(&x, None, false).unwrap().to_vec::<half::f16>().unwrap()[0].to_f64()
    };
    assert_eq!(mean_of_ones(65505), 0.99951171875);
    assert_eq!(mean_of_ones(70000), f64::INFINITY);
    assert_eq!(mean_of_ones(1000), 1.0);
    // Over no elements: 0 * inf, NaN as in MLX.
    let e = ops::zeros(&[0], DType::F32).unwrap();
    assert!(ops::mean(&e, None, false).unwrap().item::<f32>().unwrap().is_nan());
}
