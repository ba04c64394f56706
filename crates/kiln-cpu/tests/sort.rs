//! Sort and Partition: stability, NaN last, -0.0/0.0 ties, bit-exact copies, strided views,
//! empty and single-element lines, the partition property, index outputs, argument checks.
mod common;

use common::*;
use kiln_base::{ArrayData, DType, Layout, Primitive};

fn sort(axis: usize, arg: bool) -> Primitive {
    Primitive::Sort { axis, arg }
}

fn run(p: &Primitive, x: &ArrayData) -> ArrayData {
    eval(p, std::slice::from_ref(x))
}

#[test]
fn stable_with_nan_last_and_zero_ties() {
    let nan = f32::NAN;
    let x = f32s(&[3.0, nan, 1.0, f32::NEG_INFINITY, nan, f32::INFINITY, -0.0, 0.0], &[8]);
    assert_eq!(read::<u32>(&run(&sort(0, true), &x)), vec![3, 6, 7, 2, 0, 5, 1, 4]);
    let v = read::<f32>(&run(&sort(0, false), &x));
    assert_eq!(&v[..6], &[f32::NEG_INFINITY, 0.0, 0.0, 1.0, 3.0, f32::INFINITY]);
    assert!(v[1].is_sign_negative() && v[2].is_sign_positive() && v[6].is_nan() && v[7].is_nan());
    let ties = arr(&[1i32, 0, 1, 0, 1, 0], &[6], DType::I32);
    assert_eq!(read::<u32>(&run(&sort(0, true), &ties)), vec![1, 3, 5, 0, 2, 4]);
    let b = arr(&[1u8, 0, 1, 0], &[4], DType::Bool);
    assert_eq!(read::<u8>(&run(&sort(0, false), &b)), vec![0, 0, 1, 1]);
    // 64-bit values sort exactly (no detour through floats).
    let big = arr(&[i64::MAX, i64::MIN, (1 << 53) + 1, 1 << 53], &[4], DType::I64);
    assert_eq!(
        read::<i64>(&run(&sort(0, false), &big)),
        vec![i64::MIN, 1 << 53, (1 << 53) + 1, i64::MAX]
    );
}

#[test]
fn any_axis_of_strided_views() {
    // (2, 3) = [[5, 1, 4], [2, 6, 0]]; its transpose and a reversed view.
    let x = arr(&[5i32, 1, 4, 2, 6, 0], &[2, 3], DType::I32);
    assert_eq!(read::<i32>(&run(&sort(1, false), &x)), vec![1, 4, 5, 0, 2, 6]);
    assert_eq!(read::<i32>(&run(&sort(0, false), &x)), vec![2, 1, 0, 5, 6, 4]);
    assert_eq!(read::<u32>(&run(&sort(0, true), &x)), vec![1, 0, 1, 0, 1, 0]);
    let t = with_layout(&x, x.layout.transpose(&[1, 0]));
    assert_eq!(read::<i32>(&run(&sort(1, false), &t)), vec![2, 5, 1, 6, 0, 4]);
    let r = with_layout(&x, Layout::new(shape(&[2, 3]), [-3isize, -1].as_slice().into(), 5));
    assert_eq!(read::<i32>(&run(&sort(1, false), &r)), vec![0, 2, 6, 1, 4, 5]);
    assert_eq!(read::<u32>(&run(&sort(1, true), &r)), vec![0, 2, 1, 1, 0, 2]);
    let v = arr(&[3u16, 1], &[2], DType::U16);
    let bcast = with_layout(&v, v.layout.broadcast_to(&[3, 2]));
    assert_eq!(read::<u16>(&run(&sort(0, false), &bcast)), vec![3, 1, 3, 1, 3, 1]);
    assert_eq!(read::<u16>(&run(&sort(1, false), &bcast)), vec![1, 3, 1, 3, 1, 3]);
}

#[test]
fn empty_and_single_lines() {
    let e = arr::<f32>(&[], &[2, 0], DType::F32);
    for axis in [0, 1] {
        assert_eq!(run(&sort(axis, true), &e).layout.shape.as_slice(), &[2, 0]);
    }
    let one = arr(&[7i8], &[1], DType::I8);
    assert_eq!(read::<u32>(&run(&sort(0, true), &one)), vec![0]);
    let scalar = arr(&[7i8], &[], DType::I8);
    assert!(try_eval(&sort(0, false), &[scalar]).is_err());
}

/// Checks the partition property of `out` (values) against the sorted input.
fn assert_partitioned(out: &[f64], sorted: &[f64], k: usize) {
    let mut o = out.to_vec();
    assert!(same_f64(o[k], sorted[k]), "{o:?} at {k}");
    let le = |a: f64, b: f64| b.is_nan() || (!a.is_nan() && a <= b);
    assert!(o[..k].iter().all(|&v| le(v, o[k])) && o[k + 1..].iter().all(|&v| le(o[k], v)));
    o.sort_by(|a, b| a.partial_cmp(b).unwrap_or_else(|| a.is_nan().cmp(&b.is_nan())));
    assert!(o.iter().zip(sorted).all(|(&a, &b)| same_f64(a, b)));
}

#[test]
fn partition_property_for_every_kth() {
    let nan = f64::NAN;
    let data = [4.0, nan, -1.0, 7.0, 2.0, 2.0, nan, -3.0, 0.0];
    let mut sorted = data.to_vec();
    sorted.sort_by(|a, b| a.partial_cmp(b).unwrap_or_else(|| a.is_nan().cmp(&b.is_nan())));
    let x = arr(&data, &[9], DType::F64);
    let r = with_layout(
        &arr(&data.iter().rev().copied().collect::<Vec<_>>(), &[9], DType::F64),
        Layout::new(shape(&[9]), [-1isize].as_slice().into(), 8),
    );
    for kth in 0..9 {
        for input in [&x, &r] {
            let p = |arg| Primitive::Partition { kth, axis: 0, arg };
            assert_partitioned(&read::<f64>(&run(&p(false), input)), &sorted, kth);
            let idx = read::<u32>(&run(&p(true), input));
            let mut seen = idx.clone();
            seen.sort();
            assert_eq!(seen, (0..9).collect::<Vec<u32>>());
            let src = read::<f64>(input);
            let taken: Vec<f64> = idx.iter().map(|&i| src[i as usize]).collect();
            assert_partitioned(&taken, &sorted, kth);
        }
    }
    // kth must name an element of the axis.
    let p = Primitive::Partition { kth: 9, axis: 0, arg: false };
    assert!(try_eval(&p, &[x]).is_err());
    let e = arr::<f32>(&[], &[0], DType::F32);
    assert!(try_eval(&Primitive::Partition { kth: 0, axis: 0, arg: true }, &[e]).is_err());
}

#[test]
fn search_sorted_sides_nan_views_and_checks() {
    let search = |right, seq: &ArrayData, v: &ArrayData| {
        read::<u32>(&eval(&Primitive::SearchSorted { right }, &[seq.clone(), v.clone()]))
    };
    let nan = f32::NAN;
    let seq = f32s(&[-1.0, 0.0, 0.0, 2.0, nan], &[5]);
    let v = f32s(&[0.0, -0.0, -5.0, 3.0, nan, f32::INFINITY], &[2, 3]);
    assert_eq!(search(false, &seq, &v), vec![1, 1, 0, 4, 4, 4]);
    assert_eq!(search(true, &seq, &v), vec![3, 3, 0, 4, 5, 4]);
    // A negative-stride sequence over a descending buffer, and a transposed values view.
    let desc = f32s(&[nan, 2.0, 0.0, 0.0, -1.0], &[5]);
    let back = with_layout(&desc, Layout::new(shape(&[5]), [-1isize].as_slice().into(), 4));
    let vt = with_layout(&v, v.layout.transpose(&[1, 0]));
    assert_eq!(search(false, &back, &vt), vec![1, 4, 1, 4, 0, 4]);
    // Empty sequence or values, and 0-d values.
    let empty = f32s(&[], &[0]);
    assert_eq!(search(true, &empty, &v), vec![0; 6]);
    assert_eq!(search(false, &seq, &empty), Vec::<u32>::new());
    assert_eq!(search(false, &seq, &f32s(&[1.0], &[])), vec![3]);
    // The sequence must be 1-d and share the values' dtype.
    let p = Primitive::SearchSorted { right: false };
    assert!(try_eval(&p, &[v.clone(), v.clone()]).is_err());
    assert!(try_eval(&p, &[seq, arr(&[1i32], &[1], DType::I32)]).is_err());
}
