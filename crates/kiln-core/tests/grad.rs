//! Gradients against central finite differences in float64, and vjp against jvp.

mod common;

use kiln_core::ops::{self, IndexItem};
use kiln_core::transforms::{grad, jvp, value_and_grad, vjp};
use kiln_core::{Array, DType, Result, Scalar};

type Fun = fn(&[Array]) -> Result<Array>;

fn arr(values: &[f64], shape: &[usize]) -> Array {
    Array::from_slice(values, shape).unwrap()
}

fn values(seed: u64, n: usize, lo: f64, hi: f64) -> Vec<f64> {
    // A small LCG: deterministic inputs without a dependency.
    let mut state = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
    (0..n)
        .map(|_| {
            state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            lo + (hi - lo) * ((state >> 11) as f64 / (1u64 << 53) as f64)
        })
        .collect()
}

/// Reduces any output to a scalar with fixed weights, so every output element is checked.
fn weighted(out: Array) -> Result<Array> {
    let w = arr(&values(99, out.size(), 0.5, 1.5), out.shape());
    ops::sum(&ops::multiply(&out, &w)?, None, false)
}

fn check_grad(name: &str, f: Fun, inputs: &[(Vec<f64>, Vec<usize>)]) {
    let args: Vec<Array> = inputs.iter().map(|(v, s)| arr(v, s)).collect();
    let scalar_f = |a: &[Array]| weighted(f(a)?);
    let argnums: Vec<usize> = (0..args.len()).collect();
    let grads = grad(scalar_f, &args, &argnums).unwrap();
    let eps = 1e-6;
    for (k, (v, s)) in inputs.iter().enumerate() {
        let g = grads[k].to_vec::<f64>().unwrap();
        for i in 0..v.len() {
            let eval_at = |delta: f64| {
                let mut a = args.clone();
                let mut vv = v.clone();
                vv[i] += delta;
                a[k] = arr(&vv, s);
                scalar_f(&a).unwrap().item::<f64>().unwrap()
            };
            let fd = (eval_at(eps) - eval_at(-eps)) / (2.0 * eps);
            let tol = 1e-5 * (1.0 + fd.abs());
            assert!((g[i] - fd).abs() <= tol, "{name}: d/dx{k}[{i}] = {} vs fd {fd}", g[i]);
        }
    }
}

#[test]
fn unary_ops_match_finite_differences() {
    let x = (values(1, 6, 0.1, 0.9), vec![2, 3]);
    let cases: [(&str, Fun); 10] = [
        ("negative", |a| ops::negative(&a[0])),
        ("abs", |a| {
            ops::abs(&ops::subtract(&a[0], &ops::scalar(Scalar::Float(0.5), DType::F64)?)?)
        }),
        ("exp", |a| ops::exp(&a[0])),
        ("log", |a| ops::log(&a[0])),
        ("sqrt", |a| ops::sqrt(&a[0])),
        ("sin", |a| ops::sin(&a[0])),
        ("tanh", |a| ops::tanh(&a[0])),
        ("sigmoid", |a| ops::sigmoid(&a[0])),
        ("erf", |a| ops::erf(&a[0])),
        ("erfinv", |a| ops::erfinv(&a[0])),
    ];
    for (name, f) in cases {
        check_grad(name, f, std::slice::from_ref(&x));
    }
    // x in (0.1, 0.9): inside every domain below (arccosh gets 1 + x).
    let more: [(&str, Fun); 16] = [
        ("rsqrt", |a| ops::rsqrt(&a[0])),
        ("expm1", |a| ops::expm1(&a[0])),
        ("log1p", |a| ops::log1p(&a[0])),
        ("log2", |a| ops::log2(&a[0])),
        ("log10", |a| ops::log10(&a[0])),
        ("cos", |a| ops::cos(&a[0])),
        ("tan", |a| ops::tan(&a[0])),
        ("arcsin", |a| ops::arcsin(&a[0])),
        ("arccos", |a| ops::arccos(&a[0])),
        ("arctan", |a| ops::arctan(&a[0])),
        ("sinh", |a| ops::sinh(&a[0])),
        ("cosh", |a| ops::cosh(&a[0])),
        ("arcsinh", |a| ops::arcsinh(&a[0])),
        ("arccosh", |a| ops::arccosh(&ops::add(&a[0], &ops::ones(&[], DType::F64)?)?)),
        ("arctanh", |a| ops::arctanh(&a[0])),
        ("square", |a| ops::square(&a[0])),
    ];
    for (name, f) in more {
        check_grad(name, f, std::slice::from_ref(&x));
    }
    // Piecewise constant ops have zero gradient.
    let g =
        grad(|a| ops::sum(&ops::floor(&a[0])?, None, false), &[arr(&[1.5], &[1])], &[0]).unwrap();
    assert_eq!(g[0].to_vec::<f64>().unwrap(), vec![0.0]);
}

#[test]
fn binary_ops_match_finite_differences() {
    let a = (values(2, 6, 0.5, 2.0), vec![2, 3]);
    let b = (values(3, 3, 0.5, 2.0), vec![3]); // broadcast
    let cases: [(&str, Fun); 7] = [
        ("add", |x| ops::add(&x[0], &x[1])),
        ("subtract", |x| ops::subtract(&x[0], &x[1])),
        ("multiply", |x| ops::multiply(&x[0], &x[1])),
        ("divide", |x| ops::divide(&x[0], &x[1])),
        ("maximum", |x| ops::maximum(&x[0], &x[1])),
        ("minimum", |x| ops::minimum(&x[0], &x[1])),
        ("power", |x| ops::power(&x[0], &x[1])),
    ];
    for (name, f) in cases {
        check_grad(name, f, &[a.clone(), b.clone()]);
    }
    let more: [(&str, Fun); 3] = [
        ("logaddexp", |x| ops::logaddexp(&x[0], &x[1])),
        ("arctan2", |x| ops::arctan2(&x[0], &x[1])),
        ("remainder", |x| ops::remainder(&x[0], &x[1])),
    ];
    for (name, f) in more {
        check_grad(name, f, &[a.clone(), b.clone()]);
    }
    check_grad("where", |x| ops::where_(&ops::less(&x[0], &x[1])?, &x[0], &x[1]), &[a, b]);
}

#[test]
fn reductions_movement_and_matmul_match_finite_differences() {
    let x = (values(4, 24, -1.0, 1.0), vec![2, 3, 4]);
    let cases: [(&str, Fun); 11] = [
        ("sum", |a| ops::sum(&a[0], Some(&[0, 2]), false)),
        ("mean", |a| ops::mean(&a[0], Some(&[1]), true)),
        ("prod", |a| ops::prod(&a[0], Some(&[2]), false)),
        ("max", |a| ops::max(&a[0], Some(&[1]), false)),
        ("min", |a| ops::min(&a[0], None, false)),
        ("reshape", |a| ops::reshape(&a[0], &[4, 6])),
        ("transpose", |a| ops::transpose(&a[0], Some(&[2, 0, 1]))),
        ("broadcast", |a| ops::broadcast_to(&ops::expand_dims(&a[0], &[1])?, &[2, 5, 3, 4])),
        ("concatenate", |a| ops::concatenate(&[a[0].clone(), ops::exp(&a[0])?], 1)),
        ("matmul", |a| {
            let m = ops::reshape(&a[0], &[2, 3, 4])?;
            ops::matmul(&m, &ops::transpose(&m, Some(&[0, 2, 1]))?)
        }),
        ("astype", |a| ops::astype(&ops::astype(&a[0], DType::F32)?, DType::F64)),
    ];
    for (name, f) in cases {
        if name == "astype" {
            continue; // f32 rounding defeats a 1e-6 difference quotient; checked below
        }
        check_grad(name, f, std::slice::from_ref(&x));
    }
    let g = grad(
        |a| ops::sum(&ops::astype(&a[0], DType::F32)?, None, false),
        &[arr(&[1.0, 2.0], &[2])],
        &[0],
    )
    .unwrap();
    assert_eq!((g[0].dtype(), g[0].to_vec::<f64>().unwrap()), (DType::F64, vec![1.0, 1.0]));
}

#[test]
fn vjp_and_jvp_agree() {
    // <vjp(u), v> == <u, jvp(v)> for f(x, y) = tanh(x @ y) * x[:, :1]
    let f = |a: &[Array]| -> Result<Vec<Array>> {
        let first = ops::index(
            &a[0],
            &[IndexItem::Slice(None, None, None), IndexItem::Slice(None, Some(1), None)],
        )?;
        Ok(vec![ops::multiply(&ops::tanh(&ops::matmul(&a[0], &a[1])?)?, &first)?])
    };
    let x = arr(&values(5, 6, -1.0, 1.0), &[2, 3]);
    let y = arr(&values(6, 12, -1.0, 1.0), &[3, 4]);
    let u = arr(&values(7, 8, -1.0, 1.0), &[2, 4]);
    let (vx, vy) =
        (arr(&values(8, 6, -1.0, 1.0), &[2, 3]), arr(&values(9, 12, -1.0, 1.0), &[3, 4]));
    let dot = |a: &Array, b: &Array| {
        ops::sum(&ops::multiply(a, b).unwrap(), None, false).unwrap().item::<f64>().unwrap()
    };
    // Slicing has no vjp yet, so differentiate only through the parts that do.
    let g =
        |a: &[Array]| -> Result<Vec<Array>> { Ok(vec![ops::tanh(&ops::matmul(&a[0], &a[1])?)?]) };
    let (_, cots) = vjp(g, &[x.clone(), y.clone()], std::slice::from_ref(&u)).unwrap();
    let (_, tans) = jvp(g, &[x.clone(), y.clone()], &[vx.clone(), vy.clone()]).unwrap();
    let lhs = dot(&cots[0], &vx) + dot(&cots[1], &vy);
    let rhs = dot(&u, &tans[0]);
    assert!((lhs - rhs).abs() < 1e-10, "{lhs} vs {rhs}");
    // jvp also works through slices.
    let (_, t) = jvp(f, &[x, y], &[vx, vy]).unwrap();
    assert_eq!(t[0].shape(), &[2, 4]);
}

#[test]
fn higher_order_and_eval_inside() {
    // d2/dx2 sin(x) = -sin(x): grad of grad.
    let x = arr(&[0.3, 1.1], &[2]);
    let d2 = grad(
        |a| {
            let inner = grad(|b| ops::sum(&ops::sin(&b[0])?, None, false), a, &[0])?;
            ops::sum(&inner[0], None, false)
        },
        std::slice::from_ref(&x),
        &[0],
    )
    .unwrap();
    let want: Vec<f64> = [0.3f64, 1.1].iter().map(|v| -v.sin()).collect();
    for (g, w) in d2[0].to_vec::<f64>().unwrap().iter().zip(&want) {
        assert!((g - w).abs() < 1e-12);
    }
    // Evaluating inside the function keeps the graph the gradient needs.
    let (v, g) = value_and_grad(
        |a| {
            let y = ops::exp(&a[0])?;
            kiln_core::eval(std::slice::from_ref(&y))?;
            ops::sum(&ops::multiply(&y, &a[0])?, None, false)
        },
        std::slice::from_ref(&x),
        &[0],
    )
    .unwrap();
    let want: Vec<f64> = [0.3f64, 1.1].iter().map(|v| v.exp() * (1.0 + v)).collect();
    assert!((v.item::<f64>().unwrap() - (0.3f64.exp() * 0.3 + 1.1f64.exp() * 1.1)).abs() < 1e-12);
    for (g, w) in g[0].to_vec::<f64>().unwrap().iter().zip(&want) {
        assert!((g - w).abs() < 1e-12);
    }
}

#[test]
fn integer_inputs_and_errors() {
    let i = Array::from_slice(&[1i32, 2], &[2]).unwrap();
    let x = arr(&[1.0, 2.0], &[2]);
    let g =
        grad(|a| ops::sum(&ops::multiply(&a[0], &a[1])?, None, false), &[x.clone(), i], &[0, 1])
            .unwrap();
    assert_eq!(g[0].to_vec::<f64>().unwrap(), vec![1.0, 2.0]);
    // As MLX: the rule's cotangent cast to the input's dtype, not zeros.
    assert_eq!((g[1].dtype(), g[1].to_vec::<i32>().unwrap()), (DType::I32, vec![1, 2]));
    let err = grad(|a| ops::exp(&a[0]), std::slice::from_ref(&x), &[0]).unwrap_err();
    assert!(err.to_string().starts_with("[value_and_grad]"), "{err}");
    let err = grad(|a| ops::sum(&a[0], None, false), std::slice::from_ref(&x), &[3]).unwrap_err();
    assert!(matches!(err, kiln_core::Error::Value { .. }));
}

#[test]
fn indexing_ops_match_finite_differences() {
    let x = (values(11, 12, -1.0, 1.0), vec![3, 4]);
    let cases: [(&str, Fun); 5] = [
        ("strided_slice", |a| {
            ops::index(
                &a[0],
                &[IndexItem::Slice(None, None, Some(-2)), IndexItem::Slice(Some(1), None, Some(2))],
            )
        }),
        ("int_index", |a| ops::index(&a[0], &[IndexItem::Int(1)])),
        ("take_duplicates", |a| {
            let idx = Array::from_slice(&[2i32, 0, 2, 1], &[4]).unwrap();
            ops::take(&a[0], &idx, Some(1))
        }),
        ("setitem", |a| {
            let v = ops::exp(&ops::index(&a[0], &[IndexItem::Int(0)])?)?;
            ops::index_update(&a[0], &[IndexItem::Int(2)], &v, kiln_base::ScatterReduce::None)
        }),
        ("at_add", |a| {
            let idx = Array::from_slice(&[0i32, 2, 0], &[3]).unwrap();
            let v = ops::multiply(&ops::take(&a[0], &idx, Some(0))?, &a[0].clone())?;
            let v = ops::reshape(&ops::sum(&v, Some(&[1]), false)?, &[3, 1])?;
            let v = ops::broadcast_to(&v, &[3, 4])?;
            ops::index_update(&a[0], &[IndexItem::Array(idx)], &v, kiln_base::ScatterReduce::Add)
        }),
    ];
    for (name, f) in cases {
        check_grad(name, f, std::slice::from_ref(&x));
    }
}

#[test]
fn scans_and_softmax_match_finite_differences() {
    let x = (values(12, 12, -1.0, 1.0), vec![3, 4]);
    let cases: [(&str, Fun); 4] = [
        ("cumsum", |a| ops::cumsum(&a[0], Some(1), false, true)),
        ("cumsum_reverse_exclusive", |a| ops::cumsum(&a[0], Some(0), true, false)),
        ("logsumexp", |a| ops::logsumexp(&a[0], Some(&[1]), false)),
        ("softmax", |a| ops::softmax(&a[0], Some(&[1]), false)),
    ];
    for (name, f) in cases {
        check_grad(name, f, std::slice::from_ref(&x));
    }
}

#[test]
fn checkpoint_recomputes_and_custom_rules_apply() {
    use kiln_core::transforms::{checkpoint, custom_call, CustomRules};
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    static CALLS: AtomicUsize = AtomicUsize::new(0);
    let body: kiln_core::transforms::Fun = Arc::new(|a: &[Array]| {
        CALLS.fetch_add(1, Ordering::SeqCst);
        Ok(vec![ops::sin(&ops::multiply(&a[0], &a[0])?)?])
    });
    let x = arr(&values(13, 5, -1.0, 1.0), &[5]);
    let plain =
        grad(|a| ops::sum(&body(a)?.remove(0), None, false), std::slice::from_ref(&x), &[0])
            .unwrap();
    let before = CALLS.load(Ordering::SeqCst);
    let body2 = body.clone();
    let ck = grad(
        move |a| ops::sum(&checkpoint(body2.clone(), a)?.remove(0), None, false),
        std::slice::from_ref(&x),
        &[0],
    )
    .unwrap();
    assert_eq!(CALLS.load(Ordering::SeqCst) - before, 2, "forward once, recomputed once");
    assert_eq!(ck[0].to_vec::<f64>().unwrap(), plain[0].to_vec::<f64>().unwrap());
    // A custom vjp replaces differentiation: here the gradient is reported as 7 everywhere.
    let rules = || CustomRules {
        fun: Arc::new(|a: &[Array]| Ok(vec![ops::exp(&a[0])?])),
        vjp: Some(Arc::new(|p: &[Array], _c: &[Array], _o: &[Array]| {
            Ok(vec![ops::full(p[0].shape(), Scalar::Float(7.0), DType::F64)?])
        })),
        jvp: None,
        vmap: None,
    };
    let g = grad(
        |a| ops::sum(&custom_call(rules(), a)?.remove(0), None, false),
        std::slice::from_ref(&x),
        &[0],
    )
    .unwrap();
    assert_eq!(g[0].to_vec::<f64>().unwrap(), vec![7.0; 5]);
    let v = custom_call(rules(), std::slice::from_ref(&x)).unwrap().remove(0);
    let want: Vec<f64> = values(13, 5, -1.0, 1.0).iter().map(|v| v.exp()).collect();
    assert_eq!(v.to_vec::<f64>().unwrap(), want);
    // jvp falls back to differentiating the function; vmap maps it.
    let (_, t) = jvp(
        |a| custom_call(rules(), a),
        std::slice::from_ref(&x),
        &[ops::ones(&[5], DType::F64).unwrap()],
    )
    .unwrap();
    assert_eq!(t[0].to_vec::<f64>().unwrap(), want);
    let m = kiln_core::transforms::vmap(
        |a| custom_call(rules(), a),
        std::slice::from_ref(&x),
        &[Some(0)],
        &[Some(0)],
    )
    .unwrap();
    assert_eq!(m[0].to_vec::<f64>().unwrap(), want);
}

/// `<vjp(u), v> == <u, jvp(v)>` for random `u` and `v`, every input at once.
fn check_dot(name: &str, f: Fun, inputs: &[(Vec<f64>, Vec<usize>)]) {
    let args: Vec<Array> = inputs.iter().map(|(v, s)| arr(v, s)).collect();
    let fl = |a: &[Array]| Ok(vec![f(a)?]);
    let out = f(&args).unwrap();
    let u = arr(&values(31, out.size(), -1.0, 1.0), out.shape());
    let vs: Vec<Array> = inputs
        .iter()
        .enumerate()
        .map(|(k, (v, s))| arr(&values(40 + k as u64, v.len(), -1.0, 1.0), s))
        .collect();
    let (_, cots) = vjp(fl, &args, std::slice::from_ref(&u)).unwrap();
    let (_, tans) = jvp(fl, &args, &vs).unwrap();
    let dot = |a: &Array, b: &Array| {
        ops::sum(&ops::multiply(a, b).unwrap(), None, false).unwrap().item::<f64>().unwrap()
    };
    let lhs: f64 = cots.iter().zip(&vs).map(|(c, v)| dot(c, v)).sum();
    let rhs = dot(&u, &tans[0]);
    assert!((lhs - rhs).abs() <= 1e-9 * (1.0 + lhs.abs()), "{name}: {lhs} vs {rhs}");
}

fn bools(v: &[u8], shape: &[usize]) -> Result<Array> {
    ops::astype(&Array::from_slice(v, shape)?, DType::Bool)
}

fn check_both(name: &str, f: Fun, inputs: &[(Vec<f64>, Vec<usize>)]) {
    check_grad(name, f, inputs);
    check_dot(name, f, inputs);
}

fn input(seed: u64, shape: &[usize]) -> (Vec<f64>, Vec<usize>) {
    (values(seed, shape.iter().product(), -1.0, 1.0), shape.to_vec())
}

#[test]
fn conv_matches_finite_differences() {
    type Conv = (&'static str, Fun, Vec<usize>, Vec<usize>);
    let cases: Vec<Conv> = vec![
        ("conv1d", |a| ops::conv1d(&a[0], &a[1], 1, 0, 1, 1), vec![2, 7, 3], vec![4, 3, 3]),
        (
            "conv1d_stride_pad",
            |a| ops::conv1d(&a[0], &a[1], 2, 2, 1, 1),
            vec![1, 8, 2],
            vec![3, 3, 2],
        ),
        (
            "conv1d_dilation_groups",
            |a| ops::conv1d(&a[0], &a[1], 1, 1, 2, 2),
            vec![2, 9, 4],
            vec![6, 2, 2],
        ),
        (
            "conv_general",
            |a| {
                ops::conv_general(
                    &a[0],
                    &a[1],
                    &[3, 1],
                    &[1, -1],
                    &[2, 0],
                    &[1, 2],
                    &[2, 1],
                    1,
                    true,
                )
            },
            vec![1, 5, 6, 2],
            vec![2, 2, 2, 2],
        ),
        (
            "conv_transpose1d",
            |a| ops::conv_transpose1d(&a[0], &a[1], 2, 1, 1, 0, 1),
            vec![1, 5, 2],
            vec![3, 3, 2],
        ),
        (
            "conv2d_groups",
            |a| ops::conv2d(&a[0], &a[1], [1, 2], [1, 0], [1, 1], 2),
            vec![1, 4, 5, 4],
            vec![4, 2, 3, 2],
        ),
    ];
    for (i, (name, f, xs, ws)) in cases.into_iter().enumerate() {
        let inputs = [input(50 + i as u64, &xs), input(60 + i as u64, &ws)];
        check_both(name, f, &inputs);
    }
}

#[test]
fn sort_and_scans_match_finite_differences() {
    let x = input(70, &[3, 5]);
    let cases: [(&str, Fun); 12] = [
        ("sort", |a| ops::sort(&a[0], Some(1))),
        ("sort_axis0", |a| ops::sort(&a[0], Some(0))),
        ("partition", |a| ops::partition(&a[0], 2, Some(1))),
        ("topk", |a| ops::topk(&a[0], 2, Some(1))),
        ("cumprod", |a| ops::cumprod(&a[0], Some(1), false, true)),
        ("cumprod_reverse_exclusive", |a| ops::cumprod(&a[0], Some(1), true, false)),
        ("cummax", |a| ops::cummax(&a[0], Some(1), false, true)),
        ("cummin_reverse", |a| ops::cummin(&a[0], Some(0), true, true)),
        ("cummax_exclusive", |a| ops::cummax(&a[0], Some(1), false, false)),
        ("logcumsumexp", |a| ops::logcumsumexp(&a[0], Some(1), false, true)),
        ("logcumsumexp_reverse", |a| ops::logcumsumexp(&a[0], Some(1), true, true)),
        ("median", |a| ops::median(&a[0], Some(&[1]), false)),
    ];
    for (name, f) in cases {
        if name == "cummax_exclusive" {
            // -inf at the first position: only the dot-product identity applies there.
            check_grad(
                name,
                |a| {
                    ops::slice(
                        &ops::cummax(&a[0], Some(1), false, false)?,
                        &[None, Some(1)],
                        &[None, None],
                        &[1, 1],
                    )
                },
                std::slice::from_ref(&x),
            );
            continue;
        }
        check_both(name, f, std::slice::from_ref(&x));
    }
    // cumprod with zeros: exact (no division by the zero).
    let z = (vec![0.5, 0.0, 2.0, 0.0, 3.0, -1.0, 0.7, 0.0, 1.5], vec![1, 9]);
    check_both(
        "cumprod_zeros",
        |a| ops::cumprod(&a[0], Some(1), false, true),
        std::slice::from_ref(&z),
    );
    check_both(
        "cumprod_zeros_rev",
        |a| ops::cumprod(&a[0], Some(1), true, false),
        std::slice::from_ref(&z),
    );
}

#[test]
fn masked_scatter_and_as_strided_match_finite_differences() {
    let x = input(80, &[3, 4]);
    let v = input(81, &[7]);
    check_both(
        "masked_scatter",
        |a| {
            let mask = bools(&[1, 0, 1, 1, 0, 0, 1, 0, 1, 0, 0, 0], &[3, 4])?;
            ops::masked_scatter(&a[0], &mask, &a[1])
        },
        &[x.clone(), v],
    );
    let rows = input(82, &[4, 4]);
    check_both(
        "masked_scatter_rows",
        |a| {
            let mask = bools(&[0, 1, 1], &[3])?;
            ops::masked_scatter(&a[0], &mask, &a[1])
        },
        &[x.clone(), rows],
    );
    for (name, reduce) in [
        ("scatter_max", kiln_base::ScatterReduce::Max),
        ("scatter_min", kiln_base::ScatterReduce::Min),
        ("scatter_add", kiln_base::ScatterReduce::Add),
        ("scatter_set", kiln_base::ScatterReduce::None),
    ] {
        let f = match reduce {
            kiln_base::ScatterReduce::Max => {
                |a: &[Array]| scatter_with(a, kiln_base::ScatterReduce::Max)
            }
            kiln_base::ScatterReduce::Min => {
                |a: &[Array]| scatter_with(a, kiln_base::ScatterReduce::Min)
            }
            kiln_base::ScatterReduce::Add => {
                |a: &[Array]| scatter_with(a, kiln_base::ScatterReduce::Add)
            }
            _ => |a: &[Array]| scatter_with(a, kiln_base::ScatterReduce::None),
        };
        check_both(name, f, &[x.clone(), input(83, &[3, 4])]);
    }
    check_both(
        "as_strided_overlapping",
        |a| ops::as_strided(&a[0], Some(&[3, 3]), Some(&[2, 1]), 1),
        std::slice::from_ref(&x),
    );
    check_both(
        "as_strided_of_transpose",
        |a| ops::as_strided(&ops::transpose(&a[0], None)?, Some(&[2, 5]), Some(&[-1, 2]), 2),
        std::slice::from_ref(&x),
    );
}

/// `x.at[[0, 2, 0]].<reduce>(v)`: duplicate indices compete (a plain set takes distinct
/// rows: which duplicate wins is unspecified, as in MLX, and both get the cotangent).
fn scatter_with(a: &[Array], reduce: kiln_base::ScatterReduce) -> Result<Array> {
    let rows: &[i32] =
        if reduce == kiln_base::ScatterReduce::None { &[0, 2, 1] } else { &[0, 2, 0] };
    let idx = Array::from_slice(rows, &[3])?;
    ops::index_update(&a[0], &[IndexItem::Array(idx)], &a[1], reduce)
}

fn spd(seed: u64, n: usize) -> (Vec<f64>, Vec<usize>) {
    // Well conditioned: a random matrix plus n on the diagonal (symmetric where it matters
    // only through the triangle read).
    let mut v = values(seed, n * n, -0.5, 0.5);
    for i in 0..n {
        v[i * n + i] += n as f64;
    }
    (v, vec![n, n])
}

#[test]
fn linalg_matches_finite_differences() {
    let a = spd(90, 3);
    let b = input(91, &[3, 2]);
    let cases: [(&str, Fun); 8] = [
        ("inv", |x| ops::linalg::inv(&x[0])),
        ("tri_inv_upper", |x| ops::linalg::tri_inv(&x[0], true)),
        ("tri_inv_lower", |x| ops::linalg::tri_inv(&x[0], false)),
        ("det", |x| ops::linalg::det(&x[0])),
        ("slogdet", |x| Ok(ops::linalg::slogdet(&x[0])?.1)),
        ("cholesky", |x| ops::linalg::cholesky(&x[0], false)),
        ("cholesky_upper", |x| ops::linalg::cholesky(&x[0], true)),
        ("eigvalsh", |x| ops::linalg::eigvalsh(&x[0], true)),
    ];
    for (name, f) in cases {
        check_both(name, f, std::slice::from_ref(&a));
    }
    let two: [(&str, Fun); 3] = [
        ("solve", |x| ops::linalg::solve(&x[0], &x[1])),
        ("solve_triangular_lower", |x| ops::linalg::solve_triangular(&x[0], &x[1], false)),
        ("solve_triangular_upper", |x| ops::linalg::solve_triangular(&x[0], &x[1], true)),
    ];
    for (name, f) in two {
        check_both(name, f, &[a.clone(), b.clone()]);
    }
    // Sign-invariant functions of eigenvectors and singular vectors.
    let sq = |x: Array| ops::multiply(&x, &x);
    let _ = sq;
    let vec_cases: [(&str, Fun); 5] = [
        ("eigh_vectors", |x| {
            let (w, v) = ops::linalg::eigh(&x[0], false)?;
            ops::add(&ops::multiply(&v, &v)?, &ops::expand_dims(&w, &[0])?)
        }),
        ("qr", |x| {
            let (q, r) = ops::linalg::qr(&x[0])?;
            ops::matmul(&ops::multiply(&q, &q)?, &ops::multiply(&r, &r)?)
        }),
        ("svd_values", |x| Ok(ops::linalg::svd(&x[0], false)?.remove(0))),
        ("svd_vectors", |x| {
            let usv = ops::linalg::svd(&x[0], true)?;
            let u2 = ops::multiply(&usv[0], &usv[0])?;
            let v2 = ops::multiply(&usv[2], &usv[2])?;
            ops::add(&ops::add(&u2, &v2)?, &ops::expand_dims(&usv[1], &[0])?)
        }),
        ("pinv", |x| ops::linalg::pinv(&x[0])),
    ];
    let general = (values(92, 9, -1.0, 1.0), vec![3, 3]);
    for (name, f) in vec_cases {
        let inp = if name == "eigh_vectors" { &a } else { &general };
        check_both(name, f, std::slice::from_ref(inp));
    }
    let tall = input(93, &[4, 2]);
    check_both(
        "svd_values_tall",
        |x| Ok(ops::linalg::svd(&x[0], false)?.remove(0)),
        std::slice::from_ref(&tall),
    );
    check_both(
        "qr_tall",
        |x| {
            let (q, r) = ops::linalg::qr(&x[0])?;
            ops::add(
                &ops::sum(&ops::multiply(&q, &q)?, Some(&[0]), false)?,
                &ops::sum(&ops::multiply(&r, &r)?, Some(&[0]), false)?,
            )
        },
        std::slice::from_ref(&tall),
    );
    // LU has no gradient (as in MLX): a clear ValueError.
    let err = grad(|x| ops::sum(&ops::linalg::lu(&x[0])?.1, None, false), &[arr(&a.0, &a.1)], &[0])
        .unwrap_err();
    assert!(matches!(err, kiln_core::Error::Value { .. }), "{err}");
}
