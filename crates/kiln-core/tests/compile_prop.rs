//! compile on random graphs (proptest): random DAGs of elementwise ops, broadcasts,
//! reductions and reshapes over random shapes, layouts and dtypes; the compiled result (C
//! kernels and the interpreter tier) equals eager's.

mod common;

use kiln_core::compile::trace;
use kiln_core::ops;
use kiln_core::{Array, DType, Result};
use kiln_cpu::fused::jit::{self, JitMode};
use proptest::prelude::*;
use std::sync::Mutex;

/// The JIT mode is process-wide.
static MODE: Mutex<()> = Mutex::new(());

#[derive(Debug, Clone)]
enum Step {
    Unary(usize, usize),
    Binary(usize, usize, usize),
    Where(usize, usize, usize),
    /// Sum over the last axis, kept (broadcasts back against the rest).
    Reduce(usize),
    /// Flatten and back.
    Reshape(usize),
}

#[derive(Debug, Clone)]
struct Program {
    float: bool,
    shape: Vec<usize>,
    /// Per input: which dims are 1 (broadcast), and whether it is a transposed view.
    inputs: Vec<(Vec<bool>, bool)>,
    steps: Vec<Step>,
    seed: u64,
}

fn program() -> impl Strategy<Value = Program> {
    (any::<bool>(), prop::collection::vec(0usize..4, 0..4), 1usize..4, any::<u64>()).prop_flat_map(
        |(float, shape, n_inputs, seed)| {
            let ndim = shape.len();
            let inputs = prop::collection::vec(
                (prop::collection::vec(any::<bool>(), ndim..=ndim), any::<bool>()),
                n_inputs..=n_inputs,
            );
            let step = (0usize..5, 0usize..8, 0usize..64, 0usize..64, 0usize..64).prop_map(
                |(k, op, a, b, c)| match k {
                    0 => Step::Unary(op, a),
                    1 => Step::Binary(op % 5, a, b),
                    2 => Step::Where(a, b, c),
                    3 => Step::Reduce(a),
                    _ => Step::Reshape(a),
                },
            );
            let steps = prop::collection::vec(step, 1..8);
            (inputs, steps).prop_map(move |(inputs, steps)| Program {
                float,
                shape: shape.clone(),
                inputs,
                steps,
                seed,
            })
        },
    )
}

fn make_inputs(p: &Program) -> Vec<Array> {
    let mut s = p.seed | 1;
    let mut next = move || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        s
    };
    p.inputs
        .iter()
        .map(|(ones, transposed)| {
            let mut shape: Vec<usize> =
                p.shape.iter().zip(ones).map(|(&d, &one)| if one { 1 } else { d }).collect();
            let transposed = *transposed && shape.len() >= 2;
            if transposed {
                // Stored with the last two axes swapped; a swapaxes view restores the shape.
                let k = shape.len();
                shape.swap(k - 1, k - 2);
            }
            let n: usize = shape.iter().product();
            let x = if p.float {
                let v: Vec<f32> = (0..n).map(|_| (next() % 2000) as f32 / 400.0 - 2.5).collect();
                Array::from_slice(&v, &shape).unwrap()
            } else {
                let v: Vec<i32> = (0..n).map(|_| (next() % 101) as i32 - 50).collect();
                Array::from_slice(&v, &shape).unwrap()
            };
            if transposed {
                ops::swapaxes(&x, -1, -2).unwrap()
            } else {
                x
            }
        })
        .collect()
}

fn run(p: &Program, xs: &[Array]) -> Result<Vec<Array>> {
    let mut vals: Vec<Array> = xs.to_vec();
    for step in &p.steps {
        let n = vals.len();
        let v = match *step {
            Step::Unary(op, a) => {
                let x = &vals[a % n];
                match (p.float, op) {
                    (true, 0) => ops::exp(x)?,
                    (true, 1) => ops::tanh(x)?,
                    (true, 2) => ops::sigmoid(x)?,
                    (true, 3) => ops::sin(x)?,
                    (true, 4) => ops::erf(x)?,
                    (_, 5) => ops::abs(x)?,
                    (_, 6) => ops::square(x)?,
                    _ => ops::negative(x)?,
                }
            }
            Step::Binary(op, a, b) => {
                let (x, y) = (&vals[a % n], &vals[b % n]);
                match op {
                    0 => ops::add(x, y)?,
                    1 => ops::subtract(x, y)?,
                    2 => ops::multiply(x, y)?,
                    3 => ops::maximum(x, y)?,
                    _ => ops::minimum(x, y)?,
                }
            }
            Step::Where(a, b, c) => {
                let (x, y, z) = (&vals[a % n], &vals[b % n], &vals[c % n]);
                ops::where_(&ops::greater(x, y)?, y, z)?
            }
            Step::Reduce(a) => {
                let x = &vals[a % n];
                if x.ndim() == 0 {
                    ops::add(x, x)?
                } else {
                    ops::sum(x, Some(&[-1]), true)?
                }
            }
            Step::Reshape(a) => {
                let x = &vals[a % n];
                let shape: Vec<i64> = x.shape().iter().map(|&d| d as i64).collect();
                ops::reshape(&ops::reshape(x, &[-1])?, &shape)?
            }
        };
        vals.push(v);
    }
    Ok(vals.split_off(xs.len()))
}

fn check_close(got: &Array, want: &Array, float: bool) {
    assert_eq!(got.shape(), want.shape());
    assert_eq!(got.dtype(), want.dtype());
    if !float {
        assert_eq!(got.to_bytes().unwrap(), want.to_bytes().unwrap());
        return;
    }
    let g = ops::astype(got, DType::F32).unwrap().to_vec::<f32>().unwrap();
    let w = ops::astype(want, DType::F32).unwrap().to_vec::<f32>().unwrap();
    // Compiled exp/tanh/erf/sigmoid are within a few ulp of eager's (docs/compile.md); later
    // ops may cancel, so the tolerance follows the largest finite magnitude.
    let scale = 1.0 + w.iter().filter(|v| v.is_finite()).fold(0f32, |m, v| m.max(v.abs()));
    for (i, (a, b)) in g.iter().zip(&w).enumerate() {
        let ok = (a.is_nan() && b.is_nan()) || a == b || (a - b).abs() <= 1e-5 * scale;
        assert!(ok, "element {i}: compiled {a} vs eager {b}");
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn random_graphs_compiled_equal_eager(p in program()) {
        let xs = make_inputs(&p);
        let want = run(&p, &xs).unwrap();
        let f = |ins: &[Array]| run(&p, ins);
        let c = trace(f, &xs, false).unwrap();
        let _guard = MODE.lock().unwrap_or_else(|e| e.into_inner());
        for mode in [JitMode::Off, JitMode::Sync] {
            jit::set_mode(Some(mode));
            let got = c.replay(&xs).unwrap();
            for (g, w) in got.iter().zip(&want) {
                check_close(g, w, p.float);
            }
        }
        jit::set_mode(None);
    }
}
