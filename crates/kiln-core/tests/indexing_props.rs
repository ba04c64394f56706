//! Random shapes, axes, index arrays and arguments fed to the shape and indexing ops: every
//! call returns Ok or a typed error, and evaluating what was built never panics (index
//! values out of range included).

mod common;

use kiln_base::ScatterReduce;
use kiln_core::ops::{self, IndexItem, PadMode, SplitSpec};
use kiln_core::{eval, Array, DType, Scalar};
use proptest::prelude::*;

fn dtype() -> impl Strategy<Value = DType> {
    prop::sample::select(DType::ALL.to_vec())
}

fn shape() -> impl Strategy<Value = Vec<usize>> {
    prop::collection::vec(0usize..4, 0..4)
}

/// An array whose bytes make index values from very negative to very positive.
fn array(shape: &[usize], dtype: DType) -> Array {
    let n: usize = shape.iter().product();
    let bytes: Vec<u8> = (0..n * dtype.size()).map(|i| (i * 89 % 251) as u8).collect();
    let bytes = if dtype == DType::Bool { bytes.iter().map(|b| b & 1).collect() } else { bytes };
    Array::from_bytes(&bytes, shape, dtype).unwrap()
}

fn small_ints(shape: &[usize], seed: i64) -> Array {
    let n: usize = shape.iter().product();
    let v: Vec<i32> = (0..n as i64).map(|i| ((i * 7 + seed) % 11 - 5) as i32).collect();
    Array::from_slice(&v, shape).unwrap()
}

fn check(results: Vec<kiln_core::Result<Array>>) {
    for array in results.into_iter().filter_map(Result::ok) {
        // One at a time: an eval error (a masked scatter short of rows) must not hide the
        // rest. Ok or a typed error; a panic fails the test.
        let _ = eval(&[array]);
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, ..ProptestConfig::default() })]

    #[test]
    fn indexing_ops_never_panic(
        sa in shape(), si in shape(), da in dtype(), di in dtype(),
        axes in prop::collection::vec(-5i64..5, 0..3), axis in -5i64..5, n in -3i64..5,
        sizes in prop::collection::vec(-1i64..4, 0..4),
        widths in prop::collection::vec((-1i64..3, -1i64..3), 0..4),
        big in prop::sample::select(vec![0i64, 1, 7, -1, i64::MAX, i64::MIN, 1 << 40]),
    ) {
        let a = array(&sa, da);
        let raw = array(&si, di);
        let idx = small_ints(&si, n);
        let items = [IndexItem::Slice(None, None, Some(-1)), IndexItem::Array(idx.clone()),
            IndexItem::NewAxis, IndexItem::Array(raw.clone()), IndexItem::Int(n)];
        let mut results = vec![
            ops::take(&a, &idx, Some(axis)), ops::take(&a, &raw, None),
            ops::take_along_axis(&a, &idx, Some(axis)), ops::take_along_axis(&a, &raw, None),
            ops::put_along_axis(&a, &idx, &raw, Some(axis)),
            ops::put_along_axis(&a, &raw, &idx, None),
            ops::gather(&a, &[idx.clone(), raw.clone()], &axes, &sa),
            ops::scatter_add(&a, std::slice::from_ref(&idx), &raw, &axes),
            ops::scatter_reduce(&a, std::slice::from_ref(&raw), &idx, &[axis], ScatterReduce::Max),
            ops::index(&a, &items[..(n.rem_euclid(5) as usize)]),
            ops::index(&a, &items[1..2]), ops::index(&a, &items[1..4]),
            ops::index_update(&a, &items[..(n.rem_euclid(5) as usize)], &raw, ScatterReduce::None),
            ops::index_update(&a, &items[1..2], &idx, ScatterReduce::Prod),
            ops::index_update(&a, &[IndexItem::Array(raw.clone())], &idx, ScatterReduce::None),
            ops::masked_scatter(&a, &raw, &idx),
            ops::slice_dynamic(&a, &raw, &axes, &sizes),
            ops::slice_dynamic(&a, &idx, &axes, &sizes),
            ops::slice_update_dynamic(&a, &raw, &idx, &axes),
            ops::view(&a, di),
            ops::as_strided(&a, Some(&si), Some(&sizes), big),
            ops::as_strided(&a, None, Some(&[big, 1, -1][..sa.len().min(3)]), 0),
            ops::flatten(&a, axis, n), ops::unflatten(&a, axis, &sizes),
            ops::swapaxes(&a, axis, n), ops::moveaxis(&a, axis, n),
            ops::repeat(&a, n, Some(axis)), ops::repeat(&a, big, None),
            ops::tile(&a, &sizes), ops::tile(&a, &[big, 2]),
            ops::roll(&a, &[big, n], Some(&axes)), ops::roll(&a, &axes, None),
            ops::stack(&[a.clone(), raw.clone()], axis),
        ];
        let zero = ops::scalar(Scalar::Int(0), da).unwrap();
        for mode in [PadMode::Constant, PadMode::Edge, PadMode::Reflect, PadMode::Symmetric] {
            results.push(ops::pad(&a, &widths, mode, &zero));
            results.push(ops::pad(&a, &[(big, 1)], mode, &raw));
        }
        results.extend(ops::broadcast_arrays(&[a.clone(), raw.clone()]).unwrap_or_default().into_iter().map(Ok));
        for spec in [SplitSpec::Sections(n), SplitSpec::Indices(sizes.clone()), SplitSpec::Indices(vec![big])] {
            results.extend(ops::split(&a, &spec, axis).unwrap_or_default().into_iter().map(Ok));
        }
        check(results);
    }
}
