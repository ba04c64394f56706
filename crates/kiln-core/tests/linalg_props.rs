//! Random shapes, dtypes and arguments (raw byte patterns: NaN and inf included) fed to the
//! matrix-product, convolution and linalg entry points: each returns Ok or a typed error,
//! and evaluating what was built never panics or hangs.

mod common;

use kiln_core::ops::linalg::{self, NormOrd};
use kiln_core::ops::{self, TensordotAxes};
use kiln_core::{eval, Array, DType};
use proptest::prelude::*;

fn dtype() -> impl Strategy<Value = DType> {
    prop::sample::select(vec![DType::F32, DType::F64, DType::F16, DType::I32, DType::Bool])
}

fn shape() -> impl Strategy<Value = Vec<usize>> {
    prop::collection::vec(0usize..4, 0..5)
}

fn array(shape: &[usize], dtype: DType, salt: usize) -> Array {
    let n: usize = shape.iter().product();
    let bytes: Vec<u8> = (0..n * dtype.size()).map(|i| ((i + salt) * 37 % 251) as u8).collect();
    let bytes = if dtype == DType::Bool { bytes.iter().map(|b| b & 1).collect() } else { bytes };
    Array::from_bytes(&bytes, shape, dtype).unwrap()
}

fn check(results: Vec<kiln_core::Result<Array>>) {
    let ok: Vec<Array> = results.into_iter().filter_map(Result::ok).collect();
    for a in ok {
        let _ = eval(&[a]); // Ok or a typed error; a panic fails the test
    }
}

fn many(r: kiln_core::Result<Vec<Array>>) -> Vec<kiln_core::Result<Array>> {
    match r {
        Ok(v) => v.into_iter().map(Ok).collect(),
        Err(e) => vec![Err(e)],
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 150, ..ProptestConfig::default() })]

    #[test]
    fn products_and_linalg_never_panic(
        sa in shape(), sb in shape(), da in dtype(), db in dtype(),
        axes in prop::collection::vec(-4i64..4, 0..3), axis in -4i64..4,
        ord in prop::sample::select(vec![-3.0, -2.0, -1.0, 0.0, 0.5, 1.0, 2.0, f64::INFINITY]),
        upper in any::<bool>(),
        spec in prop::sample::select(vec!["ij,jk", "ii", "i,i", "...i,...i", "ij->ji", "iij->j",
            "a...b,b->a", "ij,ij->", "i", ",", "i->", "ab,bc,cd"]),
    ) {
        let (a, b) = (array(&sa, da, 1), array(&sb, db, 2));
        let square = array(&[2, 3, 3], da, 3);
        let mut r = vec![
            ops::addmm(&a, &a, &b, 2.0, 0.5), ops::outer(&a, &b), ops::inner(&a, &b),
            ops::tensordot(&a, &b, &TensordotAxes::Count(axis)),
            ops::tensordot(&a, &b, &TensordotAxes::Pairs(axes.clone(), axes.clone())),
            ops::einsum(spec, &[a.clone(), b.clone()]),
            ops::einsum(spec, std::slice::from_ref(&a)),
            linalg::norm(&a, None, Some(&axes), upper),
            linalg::norm(&a, Some(&NormOrd::Num(ord)), Some(&axes), false),
            linalg::norm(&a, Some(&NormOrd::Num(ord)), None, true),
            linalg::norm(&a, Some(&NormOrd::Name("nuc".into())), Some(&axes), false),
            linalg::inv(&a), linalg::inv(&square), linalg::tri_inv(&a, upper),
            linalg::cholesky(&a, upper), linalg::cholesky(&square, upper),
            linalg::cholesky_inv(&a, upper),
            linalg::eigvalsh(&a, upper), linalg::eigvalsh(&square, upper),
            linalg::solve(&a, &b), linalg::solve(&square, &b),
            linalg::solve_triangular(&a, &b, upper), linalg::det(&a), linalg::det(&square),
            linalg::pinv(&a), linalg::pinv(&square), linalg::cross(&a, &b, axis),
        ];
        r.extend(many(linalg::svd(&a, true)));
        r.extend(many(linalg::svd(&square, upper)));
        r.extend(many(linalg::qr(&a).map(|(q, r)| vec![q, r])));
        r.extend(many(linalg::eigh(&square, upper).map(|(w, v)| vec![w, v])));
        r.extend(many(linalg::slogdet(&a).map(|(s, l)| vec![s, l])));
        r.extend(many(linalg::lu(&a).map(|(p, l, u)| vec![p, l, u])));
        r.extend(many(linalg::lu_factor(&square).map(|(lu, p)| vec![lu, p])));
        check(r);
    }

    #[test]
    fn convolution_never_panics(
        sx in prop::collection::vec(0usize..5, 1..6), sw in prop::collection::vec(0usize..4, 1..6),
        dx in dtype(), stride in 1usize..3, lo in -2i64..3, hi in -2i64..3,
        kdil in 1usize..3, idil in 1usize..3, groups in 0usize..3, flip in any::<bool>(),
    ) {
        let (x, w) = (array(&sx, dx, 4), array(&sw, DType::F32, 5));
        let d = sx.len().saturating_sub(2).max(1);
        check(vec![
            ops::conv_general(&x, &w, &vec![stride; d], &vec![lo; d], &vec![hi; d],
                &vec![kdil; d], &vec![idil; d], groups, flip),
            ops::conv1d(&x, &w, stride, lo, kdil, groups.max(1)),
            ops::conv_transpose1d(&x, &w, stride, lo, kdil, hi, groups.max(1)),
        ]);
    }
}

/// The outputs of one multi-output call are computed together, whichever is evaluated
/// first; an output nobody holds does not stop the others.
#[test]
fn siblings_evaluate_together() {
    let a = Array::from_slice(&[4.0f32, 1.0, 2.0, 3.0], &[2, 2]).unwrap();
    let mut out = linalg::svd(&a, true).unwrap();
    let vt = out.pop().unwrap();
    let s = out.pop().unwrap();
    drop(out); // U is never held
    eval(std::slice::from_ref(&s)).unwrap();
    assert!(vt.is_evaluated(), "the sibling was filled by the same call");
    let s = s.to_vec::<f32>().unwrap();
    assert!(s[0] >= s[1] && s[1] > 0.0);
    assert_eq!(vt.to_vec::<f32>().unwrap().len(), 4);
}
