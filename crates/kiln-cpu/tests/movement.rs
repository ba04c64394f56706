//! Copy, the view primitives and Concatenate.
mod common;

use common::*;
use kiln_base::{DType, Primitive};

#[test]
fn copy_makes_row_contiguous_buffers() {
    let x = arr(&[1u16, 2, 3, 4, 5, 6], &[2, 3], DType::F16);
    let t = with_layout(&x, x.layout.transpose(&[1, 0]));
    let c = eval(&Primitive::Copy, &[t]);
    assert!(c.layout.row_contiguous && !c.buffer.same(&x.buffer));
    assert_eq!(c.dtype, DType::F16);
    assert_eq!(c.buffer.host_slice::<u16>(), &[1, 4, 2, 5, 3, 6]);
    let b = arr(&[1u8, 0], &[2], DType::Bool);
    let b = with_layout(&b, b.layout.broadcast_to(&[2, 2]));
    assert_eq!(eval(&Primitive::Copy, &[b]).buffer.host_slice::<u8>(), &[1, 0, 1, 0]);
    let z = arr(&[1.5f64], &[], DType::F64);
    assert_eq!(read::<f64>(&eval(&Primitive::Copy, &[z])), vec![1.5]);
    let e = arr::<i64>(&[], &[3, 0], DType::I64);
    assert_eq!(eval(&Primitive::Copy, &[e]).layout.shape.as_slice(), &[3, 0]);
}

#[test]
fn views_share_the_buffer() {
    let x = arr(&[0i32, 1, 2, 3, 4, 5], &[2, 3], DType::I32);
    let t = eval(&Primitive::Transpose { perm: vec![1, 0] }, std::slice::from_ref(&x));
    assert!(t.buffer.same(&x.buffer));
    assert_eq!(read::<i32>(&t), vec![0, 3, 1, 4, 2, 5]);
    let b = eval(&Primitive::BroadcastTo { shape: shape(&[2, 2, 3]) }, std::slice::from_ref(&x));
    assert!(b.buffer.same(&x.buffer));
    assert_eq!(read::<i32>(&b), vec![0, 1, 2, 3, 4, 5, 0, 1, 2, 3, 4, 5]);
    let s = eval(
        &Primitive::Slice { start: vec![1, 2], step: vec![-1, -2], len: vec![2, 2] },
        std::slice::from_ref(&x),
    );
    assert!(s.buffer.same(&x.buffer));
    assert_eq!(read::<i32>(&s), vec![5, 3, 2, 0]);
    let r =
        eval(&Primitive::Reshape { shape: shape(&[3, 2]), rule: vec![] }, std::slice::from_ref(&x));
    assert!(r.buffer.same(&x.buffer));
    assert_eq!(read::<i32>(&r), vec![0, 1, 2, 3, 4, 5]);
}

#[test]
fn reshape_that_cannot_be_a_view_copies() {
    let x = arr(&[0i32, 1, 2, 3, 4, 5], &[2, 3], DType::I32);
    let t = with_layout(&x, x.layout.transpose(&[1, 0]));
    let r = eval(&Primitive::Reshape { shape: shape(&[6]), rule: vec![] }, &[t]);
    assert!(!r.buffer.same(&x.buffer) && r.layout.row_contiguous);
    assert_eq!(read::<i32>(&r), vec![0, 3, 1, 4, 2, 5]);
    // 0-d <-> (1, 1) and empty reshapes.
    let z = arr(&[9u8], &[], DType::U8);
    assert_eq!(
        read::<u8>(&eval(&Primitive::Reshape { shape: shape(&[1, 1]), rule: vec![] }, &[z])),
        vec![9]
    );
    let e = arr::<f32>(&[], &[0, 4], DType::F32);
    assert_eq!(
        eval(&Primitive::Reshape { shape: shape(&[2, 0]), rule: vec![] }, &[e])
            .layout
            .shape
            .as_slice(),
        &[2, 0]
    );
}

#[test]
fn concatenate_any_axis_with_views() {
    let a = arr(&[1i16, 2, 3, 4], &[2, 2], DType::I16);
    let b = arr(&[5i16, 6], &[2, 1], DType::I16);
    let out = eval(&Primitive::Concatenate { axis: 1 }, &[a.clone(), b.clone()]);
    assert_eq!(read::<i16>(&out), vec![1, 2, 5, 3, 4, 6]);
    // Transposed first input on axis 0, plus an empty input.
    let t = with_layout(&a, a.layout.transpose(&[1, 0]));
    let e = arr::<i16>(&[], &[0, 2], DType::I16);
    let c = arr(&[7i16, 8], &[2], DType::I16);
    let c = with_layout(&c, c.layout.broadcast_to(&[1, 2]));
    let out = eval(&Primitive::Concatenate { axis: 0 }, &[t, e, c]);
    assert_eq!(out.layout.shape.as_slice(), &[3, 2]);
    assert_eq!(read::<i16>(&out), vec![1, 3, 2, 4, 7, 8]);
    // A single input, three dims, middle axis, f64.
    let x = arr(&[0.0f64, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0], &[2, 2, 2], DType::F64);
    let r = with_layout(&x, x.layout.slice(&[0, 1, 0], &[1, -1, 1], &[2, 2, 2]));
    let out = eval(&Primitive::Concatenate { axis: 1 }, &[x.clone(), r]);
    assert_eq!(
        read::<f64>(&out),
        vec![0.0, 1.0, 2.0, 3.0, 2.0, 3.0, 0.0, 1.0, 4.0, 5.0, 6.0, 7.0, 6.0, 7.0, 4.0, 5.0]
    );
    // Mismatched dtypes are rejected.
    let f = arr(&[1.0f32, 2.0], &[2, 1], DType::F32);
    assert!(try_eval(&Primitive::Concatenate { axis: 1 }, &[b, f]).is_err());
}

#[test]
fn malformed_requests_error_instead_of_panicking() {
    use kiln_base::{Backend, Layout};
    use kiln_cpu::CpuBackend;
    let x = arr(&[1.0f32, 2.0], &[2], DType::F32);
    // A layout reaching past its buffer.
    let bad = with_layout(&x, Layout::new(shape(&[3]), [1isize].as_slice().into(), 0));
    assert!(try_eval(&Primitive::Copy, &[bad]).is_err());
    let bad = with_layout(&x, Layout::new(shape(&[2]), [-1isize].as_slice().into(), 0));
    assert!(try_eval(&Primitive::Copy, &[bad]).is_err());
    // Wrong arity, wrong output spec, two outputs.
    assert!(CpuBackend.eval(&Primitive::Copy, &[], &[(shape(&[2]), DType::F32)]).is_err());
    assert!(CpuBackend
        .eval(&Primitive::Copy, std::slice::from_ref(&x), &[(shape(&[3]), DType::F32)])
        .is_err());
    assert!(CpuBackend
        .eval(&Primitive::Copy, std::slice::from_ref(&x), &[(shape(&[2]), DType::F64)])
        .is_err());
    let two = [(shape(&[2]), DType::F32), (shape(&[2]), DType::F32)];
    assert!(CpuBackend.eval(&Primitive::Copy, std::slice::from_ref(&x), &two).is_err());
    // An out-of-bounds slice and an invalid permutation are caught by the primitive's rules.
    let s = Primitive::Slice { start: vec![1], step: vec![1], len: vec![2] };
    assert!(try_eval(&s, std::slice::from_ref(&x)).is_err());
    assert!(try_eval(&Primitive::Transpose { perm: vec![1] }, &[x]).is_err());
}
