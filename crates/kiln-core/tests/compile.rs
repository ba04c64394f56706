//! compile: compiled results equal eager ones (C kernels and the interpreter tier), the
//! fused graph has the expected shape, traces are cached, and bad uses are clear errors.

mod common;

use kiln_core::compile::{compile, trace};
use kiln_core::ops;
use kiln_core::{Array, DType, Primitive, Result, Scalar};
use kiln_cpu::fused::jit::{self, JitMode};
use std::sync::Mutex;

/// The JIT mode is process-wide: tests that set it run one at a time.
static MODE: Mutex<()> = Mutex::new(());

fn values(seed: u64, n: usize) -> Vec<f32> {
    let mut s = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
    (0..n)
        .map(|_| {
            s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            ((s >> 40) as f32 / (1u64 << 24) as f32) * 6.0 - 3.0
        })
        .collect()
}

fn gelu(x: &[Array]) -> Result<Vec<Array>> {
    let x = &x[0];
    let dt = x.dtype();
    let inner =
        ops::erf(&ops::divide(x, &ops::scalar(Scalar::Float(std::f64::consts::SQRT_2), dt)?)?)?;
    let one = ops::add(&inner, &ops::scalar(Scalar::Float(1.0), dt)?)?;
    let y = ops::multiply(x, &one)?;
    Ok(vec![ops::divide(&y, &ops::scalar(Scalar::Float(2.0), dt)?)?])
}

fn fused_nodes(c: &kiln_core::compile::Compiled) -> usize {
    c.graph().nodes.iter().filter(|n| matches!(n.prim, Primitive::Fused(_))).count()
}

fn bits(a: &Array) -> Vec<u8> {
    a.to_bytes().unwrap()
}

fn close(a: &Array, b: &Array, tol: f32) {
    let (x, y) = (ops::astype(a, DType::F32).unwrap(), ops::astype(b, DType::F32).unwrap());
    let (x, y) = (x.to_vec::<f32>().unwrap(), y.to_vec::<f32>().unwrap());
    assert_eq!(x.len(), y.len());
    for (i, (p, q)) in x.iter().zip(&y).enumerate() {
        let ok = (p.is_nan() && q.is_nan()) || (p - q).abs() <= tol * (1.0 + q.abs());
        assert!(ok, "element {i}: {p} vs {q}");
    }
}

fn run_modes(check: impl Fn()) {
    let _guard = MODE.lock().unwrap_or_else(|e| e.into_inner());
    for mode in [JitMode::Off, JitMode::Sync] {
        jit::set_mode(Some(mode));
        check();
    }
    jit::set_mode(None);
}

#[test]
fn gelu_is_one_fused_kernel_and_matches_eager() {
    run_modes(|| {
        for shape in [vec![0usize], vec![], vec![7], vec![3, 5000], vec![40000]] {
            let n = shape.iter().product();
            let x = Array::from_slice(&values(1, n), &shape).unwrap();
            let c = trace(gelu, std::slice::from_ref(&x), false).unwrap();
            assert_eq!(fused_nodes(&c), 1, "{:?}", c.graph().describe());
            assert_eq!(c.num_nodes(), 1, "{:?}", c.graph().describe());
            let got = c.replay(std::slice::from_ref(&x)).unwrap();
            let want = gelu(std::slice::from_ref(&x)).unwrap();
            close(&got[0], &want[0], 2e-6);
        }
    });
}

#[test]
fn strided_and_broadcast_inputs() {
    run_modes(|| {
        let f = |x: &[Array]| -> Result<Vec<Array>> {
            let s = ops::add(&ops::multiply(&x[0], &x[1])?, &x[0])?;
            Ok(vec![ops::tanh(&s)?])
        };
        let a = Array::from_slice(&values(2, 24), &[4, 6]).unwrap();
        let t = ops::transpose(&a, None).unwrap(); // (6, 4), strided
        let row = Array::from_slice(&values(3, 4), &[4]).unwrap();
        let c = compile(f);
        let got = c.call(&[t.clone(), ops::broadcast_to(&row, &[6, 4]).unwrap()]).unwrap();
        let want = f(&[t.clone(), ops::broadcast_to(&row, &[6, 4]).unwrap()]).unwrap();
        close(&got[0], &want[0], 1e-6);
        // Negative strides.
        let rev = ops::index(&a, &[ops::IndexItem::Slice(None, None, Some(-1))]).unwrap();
        let got = c.call(&[rev.clone(), rev.clone()]).unwrap();
        let want = f(&[rev.clone(), rev]).unwrap();
        close(&got[0], &want[0], 1e-6);
    });
}

#[test]
fn integer_and_half_programs_are_exact() {
    run_modes(|| {
        // Wrapping int8 arithmetic, floor division by zero, shifts, comparisons and where.
        let f = |x: &[Array]| -> Result<Vec<Array>> {
            let p = ops::multiply(&x[0], &x[1])?;
            let q = ops::floor_divide(&p, &x[1])?;
            let r = ops::remainder(&x[0], &x[1])?;
            let m = ops::greater(&q, &r)?;
            Ok(vec![ops::where_(&m, &q, &ops::left_shift(&r, &x[1])?)?])
        };
        let a: Vec<i8> = (0..256).map(|i| (i as i8).wrapping_mul(37)).collect();
        let b: Vec<i8> = (0..256).map(|i| ((i * 7) % 11) as i8 - 5).collect();
        let (a, b) =
            (Array::from_slice(&a, &[256]).unwrap(), Array::from_slice(&b, &[256]).unwrap());
        let got = compile(f).call(&[a.clone(), b.clone()]).unwrap();
        assert_eq!(bits(&got[0]), bits(&f(&[a, b]).unwrap()[0]));

        // float16 rounds at every node as eager does; casts with NaN and out-of-range values.
        let g = |x: &[Array]| -> Result<Vec<Array>> {
            let e = ops::exp(&ops::multiply(&x[0], &x[0])?)?;
            let s = ops::subtract(&e, &x[0])?;
            Ok(vec![
                s.clone(),
                ops::astype(
                    &ops::multiply(&s, &ops::scalar(Scalar::Float(1e4), DType::F16)?)?,
                    DType::I32,
                )?,
            ])
        };
        let mut v: Vec<f32> = values(4, 64);
        v.extend([f32::NAN, f32::INFINITY, -f32::INFINITY, 0.0, -0.0, 11.0]);
        let x = ops::astype(&Array::from_slice(&v, &[v.len()]).unwrap(), DType::F16).unwrap();
        let got = compile(g).call(std::slice::from_ref(&x)).unwrap();
        let want = g(std::slice::from_ref(&x)).unwrap();
        assert_eq!(bits(&got[0]), bits(&want[0]));
        assert_eq!(bits(&got[1]), bits(&want[1]));
    });
}

#[test]
fn traces_once_per_signature() {
    let c = compile(gelu);
    let x = Array::from_slice(&values(5, 6), &[2, 3]).unwrap();
    for _ in 0..3 {
        c.call(std::slice::from_ref(&x)).unwrap();
    }
    assert_eq!(c.traces(), 1);
    let y = Array::from_slice(&values(6, 4), &[4]).unwrap();
    c.call(std::slice::from_ref(&y)).unwrap();
    assert_eq!(c.traces(), 2);
    let z = ops::astype(&y, DType::F16).unwrap();
    c.call(std::slice::from_ref(&z)).unwrap();
    assert_eq!(c.traces(), 3);
}

#[test]
fn simplify_merges_scalars_and_common_subexpressions() {
    let f = |x: &[Array]| -> Result<Vec<Array>> {
        let a = ops::exp(&x[0])?;
        let b = ops::exp(&x[0])?; // same op, same input: merged
        let c = ops::log2(&x[0])?; // not the same as log
        let d = ops::log(&x[0])?;
        let two = ops::scalar(Scalar::Float(2.0), DType::F32)?;
        let two_again = ops::scalar(Scalar::Float(2.0), DType::F32)?;
        let s = ops::add(&ops::multiply(&a, &two)?, &ops::multiply(&b, &two_again)?)?;
        Ok(vec![ops::add(&s, &ops::subtract(&c, &d)?)?])
    };
    let x = Array::from_slice(&[1.0f32, 2.0, 3.0], &[3]).unwrap();
    let c = trace(f, std::slice::from_ref(&x), false).unwrap();
    let simplified = c.simplified.join("\n");
    assert_eq!(simplified.matches("= exp(").count(), 1, "{simplified}");
    assert_eq!(simplified.matches("= log2(").count(), 1, "{simplified}");
    assert_eq!(simplified.matches("= log(").count(), 1, "{simplified}");
    assert_eq!(simplified.matches("= multiply(").count(), 1, "{simplified}");
    let got = c.replay(std::slice::from_ref(&x)).unwrap();
    close(&got[0], &f(std::slice::from_ref(&x)).unwrap()[0], 1e-6);
}

#[test]
fn simplify_is_linear_on_wide_graphs() {
    // 40,000 ops that all share one scalar.
    let f = |x: &[Array]| -> Result<Vec<Array>> {
        let one = ops::scalar(Scalar::Float(1.0), DType::F32)?;
        let mut acc = x[0].clone();
        for _ in 0..20_000 {
            acc = ops::multiply(&ops::add(&acc, &one)?, &one)?;
        }
        Ok(vec![acc])
    };
    let x = Array::from_slice(&[1.0f32], &[1]).unwrap();
    let t = std::time::Instant::now();
    let c = trace(f, std::slice::from_ref(&x), false).unwrap();
    assert!(t.elapsed().as_secs_f64() < 5.0, "trace + passes took {:?}", t.elapsed());
    assert_eq!(fused_nodes(&c), 1);
}

#[test]
fn a_lone_op_stays_unfused_and_shared_values_become_outputs() {
    let lone = |x: &[Array]| -> Result<Vec<Array>> { Ok(vec![ops::exp(&x[0])?]) };
    let x = Array::from_slice(&[1.0f32, 2.0], &[2]).unwrap();
    let c = trace(lone, std::slice::from_ref(&x), false).unwrap();
    assert_eq!(fused_nodes(&c), 0);
    // An intermediate that is also returned becomes a second kernel output.
    let two = |x: &[Array]| -> Result<Vec<Array>> {
        let e = ops::exp(&x[0])?;
        Ok(vec![ops::sin(&ops::add(&e, &x[0])?)?, e])
    };
    let c = trace(two, std::slice::from_ref(&x), false).unwrap();
    assert_eq!(c.num_nodes(), 1, "{:?}", c.graph().describe());
    let got = c.replay(std::slice::from_ref(&x)).unwrap();
    let want = two(std::slice::from_ref(&x)).unwrap();
    close(&got[0], &want[0], 1e-6);
    close(&got[1], &want[1], 1e-6);
}

#[test]
fn closure_over_an_argument_is_an_error() {
    let x = Array::from_slice(&[1.0f32, 2.0], &[2]).unwrap();
    let captured = x.clone();
    let f = move |_: &[Array]| -> Result<Vec<Array>> { Ok(vec![ops::exp(&captured)?]) };
    let err = trace(f, std::slice::from_ref(&x), false).unwrap_err();
    assert!(err.to_string().contains("closure"), "{err}");
}

#[test]
fn evaluating_a_placeholder_names_compile() {
    let f = |x: &[Array]| -> Result<Vec<Array>> {
        let v = ops::exp(&x[0])?;
        v.item::<f32>()?;
        Ok(vec![v])
    };
    let x = Array::from_slice(&[1.0f32], &[1]).unwrap();
    let err = trace(f, std::slice::from_ref(&x), false).unwrap_err();
    assert!(err.to_string().contains("compile"), "{err}");
}

#[test]
fn kernel_inputs_are_bounded_and_the_border_says_why() {
    use kiln_core::compile::MAX_KERNEL_INPUTS;
    let n = MAX_KERNEL_INPUTS + 6;
    // x0 * x1 + x2 * x3 + ...: one chain of elementwise ops over n distinct inputs.
    let sum = |x: &[Array]| -> Result<Vec<Array>> {
        let mut acc = ops::multiply(&x[0], &x[0])?;
        for a in &x[1..] {
            acc = ops::add(&acc, &ops::multiply(a, a)?)?;
        }
        Ok(vec![acc])
    };
    let xs: Vec<Array> =
        (0..n).map(|i| Array::from_slice(&values(i as u64, 5), &[5]).unwrap()).collect();
    let c = trace(sum, &xs, false).unwrap();
    assert!(fused_nodes(&c) >= 2, "{:?}", c.graph().describe());
    for node in &c.graph().nodes {
        if let Primitive::Fused(p) = &node.prim {
            assert!(p.inputs.len() <= MAX_KERNEL_INPUTS, "{} inputs", p.inputs.len());
        }
    }
    let limited =
        c.regions.iter().flat_map(|r| &r.borders).any(|b| b.contains("MAX_KERNEL_INPUTS"));
    assert!(limited, "{:?}", c.regions);
    run_modes(|| {
        let got = c.replay(&xs).unwrap();
        close(&got[0], &sum(&xs).unwrap()[0], 1e-6);
    });
}

#[test]
fn disk_cache_trims_least_recently_used_kernels_to_its_limit() {
    let dir = std::env::temp_dir().join(format!("kiln-trim-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let t0 = std::time::SystemTime::now() - std::time::Duration::from_secs(100);
    // Four kernels of 1000 + 100 bytes, oldest first, plus a build in flight and a foreign file.
    for k in 0..4u64 {
        for (ext, size) in [("so", 1000), ("c", 100)] {
            let p = dir.join(format!("{k:016x}.{ext}"));
            std::fs::write(&p, vec![0u8; size]).unwrap();
            let f = std::fs::File::options().write(true).open(&p).unwrap();
            f.set_modified(t0 + std::time::Duration::from_secs(k * 10)).unwrap();
        }
    }
    std::fs::write(dir.join("00000000000000aa.1.tmp.so"), vec![0u8; 5000]).unwrap();
    std::fs::write(dir.join("notes.txt"), b"keep").unwrap();
    let _guard = MODE.lock().unwrap_or_else(|e| e.into_inner());
    jit::set_disk_cache_limit(Some(2500));
    jit::trim_disk_cache(&dir);
    jit::set_disk_cache_limit(None);
    let exists = |name: &str| dir.join(name).exists();
    assert!(!exists("0000000000000000.so") && !exists("0000000000000000.c"));
    assert!(!exists("0000000000000001.so") && !exists("0000000000000001.c"));
    assert!(exists("0000000000000002.so") && exists("0000000000000003.c"));
    assert!(exists("00000000000000aa.1.tmp.so") && exists("notes.txt"));
    std::fs::remove_dir_all(&dir).unwrap();
}
