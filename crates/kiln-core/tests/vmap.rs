//! vmap against a loop over the batch, and the batched graph's size.

use kiln_core::ops::{self, IndexItem};
use kiln_core::transforms::{grad, vmap};
use kiln_core::{Array, DType, Result};

type Fun = fn(&[Array]) -> Result<Array>;

fn arange(shape: &[usize], offset: f64) -> Array {
    let n: usize = shape.iter().product();
    let flat = ops::arange(offset, offset + n as f64 * 0.25, 0.25, DType::F32).unwrap();
    let shape: Vec<i64> = shape.iter().map(|&d| d as i64).collect();
    ops::reshape(&flat, &shape).unwrap()
}

fn take(x: &Array, axis: usize, i: usize) -> Array {
    let mut items = vec![IndexItem::Slice(None, None, None); axis];
    items.push(IndexItem::Int(i as i64));
    ops::index(x, &items).unwrap()
}

/// vmap(f) over axis `in_axis` of x (y shared) equals stacking f on each slice.
fn check(name: &str, f: Fun, x: &Array, in_axis: usize, y: &Array) {
    let batched =
        vmap(|a| Ok(vec![f(a)?]), &[x.clone(), y.clone()], &[Some(in_axis), None], &[Some(0)])
            .unwrap()
            .remove(0);
    let n = x.shape()[in_axis];
    let parts: Vec<Array> = (0..n)
        .map(|i| ops::expand_dims(&f(&[take(x, in_axis, i), y.clone()]).unwrap(), &[0]).unwrap())
        .collect();
    let looped = ops::concatenate(&parts, 0).unwrap();
    assert_eq!(batched.shape(), looped.shape(), "{name}");
    let (b, l) = (batched.to_vec::<f32>().unwrap(), looped.to_vec::<f32>().unwrap());
    for (u, v) in b.iter().zip(&l) {
        assert!((u - v).abs() <= 1e-5 * (1.0 + v.abs()), "{name}: {b:?} vs {l:?}");
    }
}

#[test]
fn primitives_match_a_loop() {
    let x = arange(&[3, 4, 5], -2.0);
    let y = arange(&[4, 5], 0.5);
    let cases: [(&str, Fun); 14] = [
        ("unary", |a| ops::tanh(&a[0])),
        ("binary", |a| ops::multiply(&a[0], &a[1])),
        ("binary_bcast", |a| ops::add(&a[0], &ops::index(&a[1], &[IndexItem::Int(0)])?)),
        ("where", |a| ops::where_(&ops::greater(&a[0], &a[1])?, &a[0], &a[1])),
        ("sum", |a| ops::sum(&a[0], Some(&[1]), false)),
        ("max_keep", |a| ops::max(&a[0], Some(&[0]), true)),
        ("argmax", |a| ops::astype(&ops::argmax(&a[0], Some(1), false)?, DType::F32)),
        ("reshape", |a| ops::reshape(&a[0], &[2, 10])),
        ("transpose", |a| ops::transpose(&a[0], None)),
        ("broadcast", |a| ops::broadcast_to(&ops::sum(&a[0], Some(&[0]), false)?, &[3, 5])),
        ("slice", |a| {
            ops::index(&a[0], &[IndexItem::Slice(Some(1), None, Some(2)), IndexItem::Int(-1)])
        }),
        ("concat", |a| ops::concatenate(&[a[0].clone(), a[1].clone()], 0)),
        ("matmul", |a| ops::matmul(&a[0], &ops::transpose(&a[1], None)?)),
        ("astype", |a| ops::astype(&ops::astype(&a[0], DType::I32)?, DType::F32)),
    ];
    for (name, f) in cases {
        check(name, f, &x, 0, &y);
        check(name, f, &ops::transpose(&x, Some(&[1, 0, 2])).unwrap(), 1, &y);
    }
}

fn count_nodes(outputs: &[Array]) -> usize {
    let mut seen = std::collections::HashSet::new();
    let mut stack: Vec<Array> = outputs.to_vec();
    while let Some(a) = stack.pop() {
        if !seen.insert(a.id()) {
            continue;
        }
        if let Some((_, inputs)) = a.primitive() {
            stack.extend(inputs);
        }
    }
    seen.len()
}

#[test]
fn graph_size_does_not_grow_with_the_batch() {
    let f = |a: &[Array]| -> Result<Vec<Array>> {
        let h = ops::tanh(&ops::matmul(&a[0], &a[1])?)?;
        Ok(vec![ops::sum(&ops::multiply(&h, &h)?, None, false)?])
    };
    let w = arange(&[4, 3], 0.1);
    let nodes = |batch: usize| {
        let x = arange(&[batch, 2, 4], 0.0);
        let out = vmap(f, &[x, w.clone()], &[Some(0), None], &[Some(0)]).unwrap();
        assert_eq!(out[0].shape(), &[batch]);
        count_nodes(&out)
    };
    assert_eq!(nodes(2), nodes(1000));
}

#[test]
fn per_example_gradients_and_axes() {
    // vmap(grad): gradient of sum(w * x_i)^2 for each row x_i.
    let x = arange(&[5, 3], -1.0);
    let w = arange(&[3], 0.5);
    let per = vmap(
        |a| {
            let loss = |b: &[Array]| {
                let s = ops::sum(&ops::multiply(&b[0], &b[1])?, None, false)?;
                ops::multiply(&s, &s)
            };
            grad(loss, &[a[1].clone(), a[0].clone()], &[0])
        },
        &[x.clone(), w.clone()],
        &[Some(0), None],
        &[Some(0)],
    )
    .unwrap()
    .remove(0);
    assert_eq!(per.shape(), &[5, 3]);
    let (xv, wv, gv) =
        (x.to_vec::<f32>().unwrap(), w.to_vec::<f32>().unwrap(), per.to_vec::<f32>().unwrap());
    for i in 0..5 {
        let s: f32 = (0..3).map(|j| xv[i * 3 + j] * wv[j]).sum();
        for j in 0..3 {
            assert!((gv[i * 3 + j] - 2.0 * s * xv[i * 3 + j]).abs() < 1e-4);
        }
    }
    // out_axes moves the batch; a constant output is repeated.
    let out = vmap(
        |a| Ok(vec![ops::exp(&a[0])?, a[1].clone()]),
        &[x.clone(), w.clone()],
        &[Some(0), None],
        &[Some(1), Some(0)],
    )
    .unwrap();
    assert_eq!((out[0].shape(), out[1].shape()), (&[3usize, 5][..], &[5usize, 3][..]));
}

#[test]
fn errors() {
    let x = arange(&[2, 3], 0.0);
    let id = |a: &[Array]| Ok(a.to_vec());
    let err = |r: Result<Vec<Array>>| r.unwrap_err().to_string();
    assert!(err(vmap(id, std::slice::from_ref(&x), &[Some(2)], &[Some(0)]))
        .contains("[vmap] Mapped axis 2"));
    assert!(err(vmap(id, std::slice::from_ref(&x), &[], &[Some(0)])).contains("in_axes"));
    let y = arange(&[3, 3], 0.0);
    assert!(err(vmap(id, &[x.clone(), y], &[Some(0), Some(0)], &[Some(0), Some(0)]))
        .contains("Inconsistent"));
    assert!(err(vmap(id, std::slice::from_ref(&x), &[Some(0)], &[None])).contains("cannot be None"));
    // Evaluating inside vmap is refused with a clear error.
    let e = vmap(
        |a| {
            ops::sum(&a[0], None, false)?.item::<f32>()?;
            Ok(a.to_vec())
        },
        std::slice::from_ref(&x),
        &[Some(0)],
        &[Some(0)],
    );
    assert!(err(e).contains("placeholder"));
}
