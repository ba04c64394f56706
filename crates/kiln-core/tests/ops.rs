//! Ops end to end on the CPU backend, against hand-computed values and MLX's numbers.

mod common;

use kiln_core::ops::{self, random, IndexItem};
use kiln_core::{Array, DType};

fn f32s(a: &Array) -> Vec<f32> {
    a.to_vec::<f32>().unwrap()
}

#[test]
fn random_matches_mlx() {
    let k0 = random::key(0).unwrap();
    let split = random::split(&k0, 2).unwrap();
    assert_eq!(split.to_vec::<u32>().unwrap(), vec![4146024105, 967050713, 2718843009, 1272950319]);
    let u = random::uniform(0.0, 1.0, &[4], DType::F32, Some(&k0)).unwrap();
    let want = [0.965_321_5_f32, 0.225_159_03, 0.633_03, 0.296_381_83];
    for (g, w) in f32s(&u).iter().zip(want) {
        assert!((g - w).abs() < 1e-6, "{g} vs {w}");
    }
    let n = random::normal(&[4], DType::F32, 0.0, 1.0, Some(&k0)).unwrap();
    let want = [1.816_087_1_f32, -0.754_884_8, 0.339_889_26, -0.534_835_3];
    for (g, w) in f32s(&n).iter().zip(want) {
        assert!((g - w).abs() < 1e-5, "{g} vs {w}");
    }
    let k42 = random::key(42).unwrap();
    let u16 = random::uniform(0.0, 1.0, &[2, 2], DType::F16, Some(&k42)).unwrap();
    let got: Vec<f64> = u16.to_vec::<half::f16>().unwrap().iter().map(|v| v.to_f64()).collect();
    assert_eq!(got, vec![0.57421875, 0.8564453125, 0.0594482421875, 0.062347412109375]);
}

#[test]
fn key_sequence_is_seeded() {
    random::seed(7);
    let a = f32s(&random::uniform(0.0, 1.0, &[3], DType::F32, None).unwrap());
    random::seed(7);
    let b = f32s(&random::uniform(0.0, 1.0, &[3], DType::F32, None).unwrap());
    assert_eq!(a, b);
    let c = f32s(&random::uniform(0.0, 1.0, &[3], DType::F32, None).unwrap());
    assert_ne!(a, c);
}

#[test]
fn matmul_shapes() {
    let a = ops::reshape(&ops::arange(0.0, 6.0, 1.0, DType::F32).unwrap(), &[2, 3]).unwrap();
    let b = ops::arange(0.0, 3.0, 1.0, DType::F32).unwrap();
    assert_eq!(f32s(&ops::matmul(&a, &b).unwrap()), vec![5.0, 14.0]);
    let at = ops::transpose(&a, None).unwrap();
    let c = ops::matmul(&a, &at).unwrap();
    assert_eq!(c.shape(), &[2, 2]);
    assert_eq!(f32s(&c), vec![5.0, 14.0, 14.0, 50.0]);
    let batched = ops::broadcast_to(&a, &[4, 2, 3]).unwrap();
    assert_eq!(ops::matmul(&batched, &at).unwrap().shape(), &[4, 2, 2]);
    assert!(ops::matmul(&a, &a).is_err());
    let i = ops::arange(0.0, 3.0, 1.0, DType::I32).unwrap();
    assert!(matches!(ops::matmul(&i, &i), Err(kiln_core::Error::Value { .. })));
}

#[test]
fn reductions_and_promotion() {
    let x = ops::reshape(&ops::arange(0.0, 6.0, 1.0, DType::I8).unwrap(), &[2, 3]).unwrap();
    let s = ops::sum(&x, None, false).unwrap();
    assert_eq!(s.dtype(), DType::I32);
    assert_eq!(s.item::<i32>().unwrap(), 15);
    let m = ops::mean(&x, Some(&[1]), true).unwrap();
    assert_eq!((m.dtype(), m.shape()), (DType::F32, &[2usize, 1][..]));
    assert_eq!(f32s(&m), vec![1.0, 4.0]);
    let am = ops::argmax(&x, Some(0), false).unwrap();
    assert_eq!(am.to_vec::<u32>().unwrap(), vec![1, 1, 1]);
    assert!(ops::max(&ops::zeros(&[0], DType::F32).unwrap(), None, false).is_err());
}

#[test]
fn indexing_views() {
    let x = ops::reshape(&ops::arange(0.0, 24.0, 1.0, DType::I32).unwrap(), &[2, 3, 4]).unwrap();
    let y = ops::index(
        &x,
        &[IndexItem::Ellipsis, IndexItem::Slice(None, None, Some(-2)), IndexItem::NewAxis],
    )
    .unwrap();
    assert_eq!(y.shape(), &[2, 3, 2, 1]);
    assert_eq!(&y.to_vec::<i32>().unwrap()[..4], &[3, 1, 7, 5]);
    let z = ops::index(&x, &[IndexItem::Int(-1), IndexItem::Int(2)]).unwrap();
    assert_eq!(z.to_vec::<i32>().unwrap(), vec![20, 21, 22, 23]);
    assert!(matches!(ops::index(&x, &[IndexItem::Int(2)]), Err(kiln_core::Error::Index { .. })));
}

#[test]
fn more_distributions_match_mlx() {
    let k = random::key(0).unwrap();
    let s = |v: f64| ops::scalar(kiln_core::Scalar::Float(v), DType::F32).unwrap();
    let close = |got: Vec<f32>, want: &[f64]| {
        for (g, w) in got.iter().zip(want) {
            assert!((*g as f64 - w).abs() < 1e-5 * (1.0 + w.abs()), "{got:?} vs {want:?}");
        }
    };
    let r = random::randint(&s(0.0), &s(10.0), &[6], DType::I32, Some(&k)).unwrap();
    assert_eq!(r.to_vec::<i32>().unwrap(), vec![5, 0, 7, 8, 5, 4]);
    let r = random::randint(&s(-5.0), &s(5.0), &[4], DType::I8, Some(&k)).unwrap();
    assert_eq!(r.to_vec::<i8>().unwrap(), vec![4, -3, 1, -3]);
    let b = random::bernoulli(&s(0.5), &[6], Some(&k)).unwrap();
    assert_eq!(b.to_bytes().unwrap(), vec![0, 1, 0, 0, 0, 1]);
    close(
        f32s(&random::gumbel(&[3], DType::F32, Some(&k)).unwrap()),
        &[3.3440396785736084, -0.14513324201107025, 0.7825523614883423],
    );
    close(
        f32s(&random::laplace(&[3], DType::F32, 0.0, 1.0, Some(&k)).unwrap()),
        &[-2.6684885025024414, 0.4630463123321533, -0.3093280792236328],
    );
    close(
        f32s(&random::truncated_normal(&s(-1.0), &s(1.0), &[3], DType::F32, Some(&k)).unwrap()),
        &[0.9065213799476624, -0.32263678312301636, 0.2296501249074936],
    );
    let logits = Array::from_slice(&[0.0f32, 1.0, 2.0, 2.0, 1.0, 0.0], &[2, 3]).unwrap();
    let c = random::categorical(&logits, -1, random::Draws::One, Some(&k)).unwrap();
    assert_eq!(c.to_vec::<u32>().unwrap(), vec![2, 0]);
    let five = random::categorical(&logits, -1, random::Draws::Samples(5), Some(&k)).unwrap();
    assert_eq!(five.shape(), &[2, 5]);
    let p = random::permutation_of(6, Some(&k)).unwrap();
    assert_eq!(p.to_vec::<u32>().unwrap(), vec![1, 5, 0, 4, 2, 3]);
}
