//! The lazy graph: deep chains, shared subgraphs, multi-output eval, threads.

mod common;

use kiln_core::ops::{self, IndexItem};
use kiln_core::{eval, Array, DType, Scalar};

fn vec_f32(a: &Array) -> Vec<f32> {
    a.to_vec::<f32>().unwrap()
}

#[test]
fn evaluates_lazily_and_on_access() {
    let a = Array::from_slice(&[1.0f32, 2.0, 3.0], &[3]).unwrap();
    let b = ops::add(&a, &a).unwrap();
    assert!(!b.is_evaluated());
    assert_eq!(vec_f32(&b), vec![2.0, 4.0, 6.0]);
    assert!(b.is_evaluated());
    // Evaluated arrays have dropped their inputs.
    assert!(b.primitive().is_none());
}

#[test]
fn million_op_chain_evaluates_and_drops() {
    let mut x = ops::zeros(&[], DType::F32).unwrap();
    let one = ops::ones(&[], DType::F32).unwrap();
    for _ in 0..1_000_000 {
        x = ops::add(&x, &one).unwrap();
    }
    assert_eq!(x.item::<f32>().unwrap(), 1_000_000.0);
    // And an unevaluated chain of the same depth drops without recursion.
    let mut y = ops::zeros(&[], DType::F32).unwrap();
    for _ in 0..1_000_000 {
        y = ops::multiply(&y, &one).unwrap();
    }
    drop(y);
}

#[test]
fn eval_of_several_outputs_and_reevaluation() {
    let a = ops::arange(0.0, 6.0, 1.0, DType::F32).unwrap();
    let m = ops::reshape(&a, &[2, 3]).unwrap();
    let s0 = ops::sum(&m, Some(&[0]), false).unwrap();
    let s1 = ops::sum(&m, Some(&[1]), false).unwrap();
    eval(&[s0.clone(), s1.clone()]).unwrap();
    assert!(s0.is_evaluated() && s1.is_evaluated());
    eval(&[s0.clone(), s1.clone()]).unwrap(); // nothing left to do
    assert_eq!(vec_f32(&s0), vec![3.0, 5.0, 7.0]);
    assert_eq!(vec_f32(&s1), vec![3.0, 12.0]);
}

#[test]
fn threads_evaluate_overlapping_graphs() {
    let expected: Vec<f32> = {
        let vals: Vec<f32> = (0..1000).map(|v| (v as f32 / 1000.0).exp().sqrt()).collect();
        (0..4).map(|i| vals.iter().map(|v| v + i as f32).sum()).collect()
    };
    for _ in 0..20 {
        let a = ops::arange(0.0, 1.0, 0.001, DType::F32).unwrap();
        let shared = ops::sqrt(&ops::exp(&a).unwrap()).unwrap();
        let outs: Vec<_> = (0..4)
            .map(|i| {
                let k = ops::scalar(Scalar::Float(i as f64), DType::F32).unwrap();
                ops::sum(&ops::add(&shared, &k).unwrap(), None, false).unwrap()
            })
            .collect();
        let handles: Vec<_> = outs
            .into_iter()
            .map(|o| std::thread::spawn(move || o.item::<f32>().unwrap()))
            .collect();
        for (h, want) in handles.into_iter().zip(&expected) {
            let got = h.join().unwrap();
            assert!((got - want).abs() <= 1e-3 * want.abs(), "{got} vs {want}");
        }
        assert!(shared.is_evaluated());
    }
}

#[test]
fn array_is_send_and_sync() {
    fn check<T: Send + Sync>() {}
    check::<Array>();
}

#[test]
fn views_share_buffers() {
    let a = ops::arange(0.0, 12.0, 1.0, DType::I32).unwrap();
    let m = ops::reshape(&a, &[3, 4]).unwrap();
    let t = ops::transpose(&m, None).unwrap();
    let s = ops::index(&t, &[IndexItem::Slice(None, None, Some(-1)), IndexItem::Int(1)]).unwrap();
    assert_eq!(s.to_vec::<i32>().unwrap(), vec![7, 6, 5, 4]);
    assert!(s.data().unwrap().buffer.same(&a.data().unwrap().buffer));
    let b = ops::broadcast_to(&ops::expand_dims(&a, &[0]).unwrap(), &[2, 12]).unwrap();
    assert!(b.data().unwrap().buffer.same(&a.data().unwrap().buffer));
    assert_eq!(b.data().unwrap().layout.strides.as_slice(), &[0, 1]);
}

#[test]
fn placeholders_refuse_eval() {
    let p = Array::placeholder(&[2], DType::F32, kiln_core::device::default_stream());
    let y = ops::exp(&p).unwrap();
    let err = eval(&[y]).unwrap_err();
    assert!(err.to_string().starts_with("[eval] Cannot evaluate a placeholder"));
}
