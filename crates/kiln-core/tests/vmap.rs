//! vmap against a loop over the batch, and the batched graph's size.

mod common;

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

type FunN = fn(&[Array]) -> Result<Array>;

/// vmap(f) over `in_axes` of `inputs` equals stacking f on each batch entry.
fn check_n(name: &str, f: FunN, inputs: &[Array], in_axes: &[Option<usize>]) {
    let batched = vmap(|a| Ok(vec![f(a)?]), inputs, in_axes, &[Some(0)]).unwrap().remove(0);
    let n = inputs.iter().zip(in_axes).find_map(|(x, a)| a.map(|a| x.shape()[a])).unwrap();
    let parts: Vec<Array> = (0..n)
        .map(|i| {
            let args: Vec<Array> = inputs
                .iter()
                .zip(in_axes)
                .map(|(x, a)| match a {
                    Some(a) => take(x, *a, i),
                    None => x.clone(),
                })
                .collect();
            ops::expand_dims(&f(&args).unwrap(), &[0]).unwrap()
        })
        .collect();
    let looped = ops::concatenate(&parts, 0).unwrap();
    assert_eq!(batched.shape(), looped.shape(), "{name}");
    let as_f64 = |x: &Array| ops::astype(x, DType::F64).unwrap().to_vec::<f64>().unwrap();
    let (b, l) = (as_f64(&batched), as_f64(&looped));
    for (u, v) in b.iter().zip(&l) {
        assert!((u - v).abs() <= 1e-5 * (1.0 + v.abs()), "{name}: {b:?} vs {l:?}");
    }
}

fn ints(values: &[i32], shape: &[usize]) -> Array {
    Array::from_slice(values, shape).unwrap()
}

#[test]
fn indexing_and_sorting_primitives_match_a_loop() {
    let x = arange(&[3, 4, 5], -2.0);
    let idx = ints(&[3, 0, 2, 1, 1, 0], &[3, 2]); // a batch of 3 index pairs
    let gathers: [(&str, FunN); 4] = [
        ("take_axis1", |a| ops::take(&a[0], &a[1], Some(1))),
        ("take_axis0", |a| ops::take(&a[0], &a[1], Some(0))),
        ("getitem_pair", |a| {
            ops::index(&a[0], &[IndexItem::Array(a[1].clone()), IndexItem::Array(a[1].clone())])
        }),
        ("scatter_add", |a| {
            let v = ops::ones(&[2, 5], DType::F32)?;
            ops::index_update(
                &a[0],
                &[IndexItem::Array(a[1].clone())],
                &v,
                kiln_base::ScatterReduce::Add,
            )
        }),
    ];
    for (name, f) in gathers {
        check_n(name, f, &[x.clone(), idx.clone()], &[Some(0), Some(0)]);
        check_n(name, f, &[x.clone(), take(&idx, 0, 1)], &[Some(0), None]);
        check_n(&format!("{name}_shared_x"), f, &[take(&x, 0, 0), idx.clone()], &[None, Some(0)]);
    }
    let sets: [(&str, FunN); 3] = [
        ("scatter_set", |a| {
            ops::index_update(
                &a[0],
                &[IndexItem::Array(a[1].clone())],
                &a[2],
                kiln_base::ScatterReduce::None,
            )
        }),
        ("scatter_max", |a| {
            ops::index_update(
                &a[0],
                &[IndexItem::Array(a[1].clone())],
                &a[2],
                kiln_base::ScatterReduce::Max,
            )
        }),
        ("put_along_axis", |a| {
            let i = ops::reshape(&a[1], &[1, 2])?;
            ops::put_along_axis(&a[0], &i, &a[2], Some(1))
        }),
    ];
    let upd = arange(&[3, 2, 5], 10.0);
    for (name, f) in sets {
        let u = if name == "put_along_axis" { take(&take(&upd, 2, 0), 1, 0) } else { upd.clone() };
        let u = if name == "put_along_axis" { ops::reshape(&u, &[3, 1, 1]).unwrap() } else { u };
        check_n(name, f, &[x.clone(), idx.clone(), u.clone()], &[Some(0), Some(0), Some(0)]);
        check_n(
            &format!("{name}_upd_only"),
            f,
            &[take(&x, 0, 1), take(&idx, 0, 2), u],
            &[None, None, Some(0)],
        );
    }
    // searchsorted: batched values, batched sorted rows, both; NaN sorts last.
    let sorted = Array::from_slice(
        &[0.0f32, 1.0, 1.0, 3.0, f32::NAN, -1.0, 0.5, 2.0, 2.0, 9.0, 1.0, 1.0, 1.0, 1.0, 1.0],
        &[3, 5],
    )
    .unwrap();
    let vals = Array::from_slice(&[1.0f32, -5.0, f32::NAN, 2.0, 9.5, 1.0, 0.5, 3.0, 1.0], &[3, 3])
        .unwrap();
    let search: [(&str, FunN); 2] = [
        ("searchsorted_left", |a| ops::searchsorted(&a[0], &a[1], false)),
        ("searchsorted_right", |a| ops::searchsorted(&a[0], &a[1], true)),
    ];
    for (name, f) in search {
        check_n(name, f, &[sorted.clone(), vals.clone()], &[Some(0), Some(0)]);
        check_n(name, f, &[sorted.clone(), take(&vals, 0, 0)], &[Some(0), None]);
        check_n(name, f, &[take(&sorted, 0, 1), vals.clone()], &[None, Some(1)]);
    }
    // masked_scatter: each entry fills from its own rows.
    let mask = ops::astype(
        &Array::from_slice(&[1u8, 0, 1, 0, 0, 0, 0, 1, 1, 1, 1, 1], &[3, 4]).unwrap(),
        DType::Bool,
    )
    .unwrap();
    let rows = arange(&[3, 4, 5], 100.0);
    let ms: FunN = |a| ops::masked_scatter(&a[0], &a[1], &a[2]);
    let x4 = arange(&[3, 4, 5], 0.0);
    check_n(
        "masked_scatter",
        ms,
        &[x4.clone(), mask.clone(), rows.clone()],
        &[Some(0), Some(0), Some(0)],
    );
    check_n(
        "masked_scatter_shared_mask",
        ms,
        &[x4.clone(), take(&mask, 0, 2), rows.clone()],
        &[Some(0), None, Some(0)],
    );
    check_n(
        "masked_scatter_shared_rows",
        ms,
        &[x4.clone(), mask.clone(), take(&rows, 0, 0)],
        &[Some(0), Some(0), None],
    );
    // Strided views of each entry, sort, partition, scans.
    let views: [(&str, FunN); 8] = [
        ("as_strided", |a| ops::as_strided(&a[0], Some(&[3, 4]), Some(&[5, 2]), 1)),
        ("sort", |a| ops::sort(&ops::negative(&a[0])?, Some(0))),
        ("argsort", |a| ops::astype(&ops::argsort(&ops::sin(&a[0])?, Some(1))?, DType::F32)),
        ("partition", |a| ops::partition(&ops::sin(&a[0])?, 2, Some(1))),
        ("cumprod", |a| ops::cumprod(&a[0], Some(1), true, false)),
        ("cummax", |a| ops::cummax(&ops::sin(&a[0])?, Some(0), false, true)),
        ("logcumsumexp", |a| ops::logcumsumexp(&a[0], Some(1), false, true)),
        ("slice_update", |a| {
            ops::index_update(&a[0], &[IndexItem::Int(1)], &a[1], kiln_base::ScatterReduce::None)
        }),
    ];
    let y = arange(&[3, 5], 0.5);
    for (name, f) in views {
        check_n(name, f, &[x.clone(), take(&y, 0, 0)], &[Some(0), None]);
        check_n(
            name,
            f,
            &[ops::transpose(&x, Some(&[1, 2, 0])).unwrap(), y.clone()],
            &[Some(2), Some(0)],
        );
    }
}

#[test]
fn conv_with_batched_weights_matches_a_loop() {
    let x = arange(&[3, 2, 6, 4], -1.0);
    let w = arange(&[3, 4, 3, 2], 0.3);
    let conv: FunN = |a| ops::conv1d(&a[0], &a[1], 1, 1, 1, 2);
    check_n("conv_both", conv, &[x.clone(), w.clone()], &[Some(0), Some(0)]);
    check_n("conv_weight_only", conv, &[take(&x, 0, 0), w.clone()], &[None, Some(0)]);
    check_n("conv_input_only", conv, &[x.clone(), take(&w, 0, 1)], &[Some(0), None]);
    let strided: FunN = |a| ops::conv_general(&a[0], &a[1], &[2], &[1], &[0], &[2], &[1], 1, true);
    let w1 = arange(&[3, 5, 2, 4], 0.1);
    check_n("conv_general", strided, &[x, w1], &[Some(0), Some(0)]);
}

#[test]
fn indexing_graph_size_does_not_grow_with_the_batch() {
    let f = |a: &[Array]| -> Result<Vec<Array>> {
        let g = ops::take(&a[0], &a[1], Some(0))?;
        let s = ops::sort(&g, Some(-1))?;
        let u = ops::index_update(
            &a[0],
            &[IndexItem::Array(a[1].clone())],
            &s,
            kiln_base::ScatterReduce::Add,
        )?;
        let c = ops::cumprod(&u, Some(1), false, true)?;
        Ok(vec![ops::searchsorted(&ops::reshape(&a[2], &[-1])?, &c, false)?])
    };
    let nodes = |batch: usize| {
        let x = arange(&[batch, 4, 3], 0.0);
        let i = ops::astype(
            &ops::remainder(
                &arange(&[batch, 2], 0.0),
                &ops::full(&[], kiln_base::Scalar::Float(4.0), DType::F32).unwrap(),
            )
            .unwrap(),
            DType::I32,
        )
        .unwrap();
        let s = arange(&[batch, 5], 0.0);
        let out = vmap(f, &[x, i, s], &[Some(0), Some(0), Some(0)], &[Some(0)]).unwrap();
        count_nodes(&out)
    };
    assert_eq!(nodes(2), nodes(1000));
}

#[test]
fn custom_vmap_rule_replaces_batching() {
    use kiln_core::transforms::{custom_call, CustomRules};
    use std::sync::Arc;
    // The rule answers differently from the function (+100) to show it is the one used;
    // it receives the batch axes and returns the output's.
    let rules = || CustomRules {
        fun: Arc::new(|a: &[Array]| Ok(vec![ops::exp(&a[0])?])),
        vjp: None,
        jvp: None,
        vmap: Some(Arc::new(|a: &[Array], axes: &[Option<usize>]| {
            let plus = ops::full(&[], kiln_core::Scalar::Float(100.0), DType::F32)?;
            Ok((vec![ops::add(&ops::exp(&a[0])?, &plus)?], axes.to_vec()))
        })),
    };
    let x = arange(&[2, 3], 0.0);
    let out = vmap(|a| custom_call(rules(), a), std::slice::from_ref(&x), &[Some(1)], &[Some(0)])
        .unwrap()
        .remove(0);
    assert_eq!(out.shape(), &[3, 2]);
    let xt = ops::transpose(&x, None).unwrap().to_vec::<f32>().unwrap();
    for (o, v) in out.to_vec::<f32>().unwrap().iter().zip(&xt) {
        assert!((o - (v.exp() + 100.0)).abs() < 1e-4);
    }
    // A rule returning an axis beyond the output's rank is a ValueError.
    let bad = CustomRules {
        fun: Arc::new(|a: &[Array]| Ok(vec![a[0].clone()])),
        vjp: None,
        jvp: None,
        vmap: Some(Arc::new(|a: &[Array], _: &[Option<usize>]| {
            Ok((vec![a[0].clone()], vec![Some(7)]))
        })),
    };
    let err = vmap(|a| custom_call(bad, a), std::slice::from_ref(&x), &[Some(0)], &[Some(0)])
        .unwrap_err();
    assert!(matches!(err, kiln_core::Error::Value { .. }), "{err}");
}
