//! Shapeless compile: reshape rules recompute targets from new input shapes, mean divides by
//! a count of the replayed shape, and fixed-shape traces fold that count into a constant.

mod common;

use kiln_base::primitive::resolve_reshape;
use kiln_base::ReshapeDim::{Axes, Fixed, Rest};
use kiln_core::compile::trace;
use kiln_core::ops;
use kiln_core::{Array, DType, Primitive, Result};

fn input(shape: &[usize]) -> Array {
    let n: usize = shape.iter().product();
    let v: Vec<f32> = (0..n).map(|i| ((i * 7919) % 97) as f32 / 13.0 - 3.0).collect();
    Array::from_slice(&v, shape).unwrap()
}

fn mean_last(x: &[Array]) -> Result<Vec<Array>> {
    Ok(vec![ops::mean(&x[0], Some(&[-1]), false)?])
}

fn var_ddof(x: &[Array]) -> Result<Vec<Array>> {
    Ok(vec![ops::var(&x[0], Some(&[0, 1]), true, 1)?])
}

fn has_count(c: &kiln_core::compile::Compiled) -> bool {
    c.graph().nodes.iter().any(|n| matches!(n.prim, Primitive::NumberOfElements { .. }))
}

#[test]
fn reshape_rules_resolve_against_new_shapes() {
    // squeeze of axis 1, expand_dims in front, flatten, -1.
    assert_eq!(resolve_reshape(&[Axes(0, 1), Axes(2, 3)], &[5, 1, 3]).unwrap().as_slice(), [5, 3]);
    assert_eq!(resolve_reshape(&[Fixed(1), Axes(0, 1)], &[4]).unwrap().as_slice(), [1, 4]);
    assert_eq!(resolve_reshape(&[Axes(0, 2), Axes(2, 3)], &[2, 3, 4]).unwrap().as_slice(), [6, 4]);
    assert_eq!(resolve_reshape(&[Fixed(3), Rest], &[6, 2]).unwrap().as_slice(), [3, 4]);
    assert_eq!(resolve_reshape(&[Rest], &[0, 5]).unwrap().as_slice(), [0]);
    // Empty input over a zero-sized known part, a -1 that does not divide, axes past the
    // rank, two -1: no shape.
    assert!(resolve_reshape(&[Fixed(0), Rest], &[0]).is_none());
    assert!(resolve_reshape(&[Fixed(3), Rest], &[8]).is_none());
    assert!(resolve_reshape(&[Axes(0, 3)], &[2, 2]).is_none());
    assert!(resolve_reshape(&[Rest, Rest], &[4]).is_none());
    // Products that overflow are no shape, not a panic.
    assert!(resolve_reshape(&[Axes(0, 2)], &[usize::MAX, 2]).is_none());
}

#[test]
fn shapeless_mean_replays_at_new_shapes() {
    let traced_at = input(&[3, 4]);
    let c = trace(mean_last, std::slice::from_ref(&traced_at), true).unwrap();
    assert!(has_count(&c));
    for shape in [[3, 4], [5, 2], [1, 9], [6, 6]] {
        let x = input(&shape);
        let got = c.replay(std::slice::from_ref(&x)).unwrap().remove(0);
        let want = mean_last(std::slice::from_ref(&x)).unwrap().remove(0);
        assert_eq!(got.shape(), want.shape());
        assert_eq!(got.to_vec::<f32>().unwrap(), want.to_vec::<f32>().unwrap(), "{shape:?}");
    }
}

#[test]
fn shapeless_var_with_ddof_replays_at_new_shapes() {
    let c = trace(var_ddof, &[input(&[2, 3, 4])], true).unwrap();
    for shape in [[2, 3, 4], [4, 5, 2], [1, 2, 3]] {
        let x = input(&shape);
        let got = c.replay(std::slice::from_ref(&x)).unwrap().remove(0);
        let want = var_ddof(std::slice::from_ref(&x)).unwrap().remove(0);
        assert_eq!(got.shape(), want.shape());
        assert_eq!(got.to_vec::<f32>().unwrap(), want.to_vec::<f32>().unwrap(), "{shape:?}");
    }
}

#[test]
fn fixed_shape_traces_fold_the_count() {
    let x = input(&[3, 4]);
    let c = trace(mean_last, std::slice::from_ref(&x), false).unwrap();
    assert!(!has_count(&c));
    let got = c.replay(std::slice::from_ref(&x)).unwrap().remove(0);
    let want = mean_last(std::slice::from_ref(&x)).unwrap().remove(0);
    assert_eq!(got.to_vec::<f32>().unwrap(), want.to_vec::<f32>().unwrap());
    assert_eq!(got.dtype(), DType::F32);
}

#[test]
fn baked_reshape_raises_a_value_error() {
    let f = |x: &[Array]| -> Result<Vec<Array>> { Ok(vec![ops::reshape(&x[0], &[2, 3])?]) };
    let c = trace(f, &[input(&[6])], true).unwrap();
    let err = c.replay(&[input(&[8])]).unwrap_err().to_string();
    assert!(err.contains("reshape"), "{err}");
    // A -1 that no longer divides raises from the rule.
    let g = |x: &[Array]| -> Result<Vec<Array>> { Ok(vec![ops::reshape(&x[0], &[3, -1])?]) };
    let c = trace(g, &[input(&[6])], true).unwrap();
    assert_eq!(c.replay(&[input(&[9])]).unwrap()[0].shape(), [3, 3]);
    let err = c.replay(&[input(&[8])]).unwrap_err().to_string();
    assert!(err.contains("reshape"), "{err}");
}
