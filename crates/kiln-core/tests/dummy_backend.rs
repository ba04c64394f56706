//! The core on a minimal backend of its own, with neither kiln-cpu nor kiln-cuda registered:
//! a float32 interpreter of a few elementwise primitives (and of the fused programs compile
//! makes from them). The graph, transforms and compile run on it as on a real device, and
//! what it cannot compute is an error naming the op, never a panic.

use kiln_base::backend::DeviceMemory;
use kiln_base::{bail, ArrayData, Backend, BinaryOp, DType, DeviceKind, FusedOp, Layout};
use kiln_base::{Device, Primitive, Result, Scalar, Shape, UnaryOp, HOST};
use kiln_core::{backends, compile, device, ops, transforms, Array};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Once;

/// Counts its calls, so tests can see the work went through it.
struct Dummy {
    calls: AtomicUsize,
}

static DUMMY: Dummy = Dummy { calls: AtomicUsize::new(0) };

fn setup() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| assert!(backends::register(DeviceKind::Cpu, &DUMMY)));
}

fn unary(op: UnaryOp, x: f32) -> Option<f32> {
    Some(match op {
        UnaryOp::Negative => -x,
        UnaryOp::Exp => x.exp(),
        _ => return None,
    })
}

fn binary(op: BinaryOp, a: f32, b: f32) -> Option<f32> {
    Some(match op {
        BinaryOp::Add => a + b,
        BinaryOp::Subtract => a - b,
        BinaryOp::Multiply => a * b,
        _ => return None,
    })
}

/// Input `x`'s elements in the output's row-major order (broadcast inputs arrive as
/// layouts of the output's shape with zero strides; a one-element input is a scalar).
fn elements(x: &ArrayData, shape: &Shape) -> Option<Vec<f32>> {
    let all = x.buffer.host_slice::<f32>();
    if x.layout.shape == *shape {
        Some(x.layout.indices().map(|i| all[i]).collect())
    } else if x.layout.size() == 1 {
        Some(vec![all[x.layout.offset]; shape.iter().product()])
    } else {
        None
    }
}

impl Dummy {
    fn compute(&self, prim: &Primitive, inputs: &[ArrayData], shape: &Shape) -> Option<Vec<f32>> {
        if inputs.iter().any(|x| x.dtype != DType::F32) {
            return None;
        }
        let xs: Vec<Vec<f32>> = inputs.iter().map(|x| elements(x, shape)).collect::<Option<_>>()?;
        let n: usize = shape.iter().product();
        match prim {
            Primitive::Copy => Some(xs[0].clone()),
            Primitive::Unary(op) => xs[0].iter().map(|&x| unary(*op, x)).collect(),
            Primitive::Binary(op) => {
                xs[0].iter().zip(&xs[1]).map(|(&a, &b)| binary(*op, a, b)).collect()
            }
            Primitive::Fused(program) => (0..n)
                .map(|i| {
                    let mut values: Vec<f32> = Vec::with_capacity(program.steps.len());
                    for step in &program.steps {
                        let v = match step.op {
                            FusedOp::Input(k) => xs[k][i],
                            FusedOp::Literal(Scalar::Float(f)) => f as f32,
                            FusedOp::Unary(op, a) => unary(op, values[a])?,
                            FusedOp::Binary(op, a, b) => binary(op, values[a], values[b])?,
                            _ => return None,
                        };
                        values.push(v);
                    }
                    (program.outputs.len() == 1).then(|| values[program.outputs[0]])
                })
                .collect(),
            _ => None,
        }
    }
}

impl Backend for Dummy {
    fn eval(
        &self,
        prim: &Primitive,
        inputs: &[ArrayData],
        outputs: &[(Shape, DType)],
    ) -> Result<Vec<ArrayData>> {
        self.calls.fetch_add(1, Ordering::Relaxed);
        let [(shape, DType::F32)] = outputs else {
            bail!(Unsupported, prim.name(), "The dummy backend computes one float32 output.")
        };
        let Some(values) = self.compute(prim, inputs, shape) else {
            bail!(Unsupported, prim.name(), "The dummy backend has no kernel for this call.")
        };
        let buffer = HOST.from_slice(&values)?;
        Ok(vec![ArrayData { buffer, layout: Layout::contiguous(shape), dtype: DType::F32 }])
    }

    fn memory(&self) -> &'static dyn DeviceMemory {
        &HOST
    }
}

fn arr(values: &[f32], shape: &[usize]) -> Array {
    Array::from_slice(values, shape).unwrap()
}

fn read(a: &Array) -> Vec<f32> {
    a.to_vec::<f32>().unwrap()
}

#[test]
fn eager_ops_run_on_the_registered_backend() {
    setup();
    let before = DUMMY.calls.load(Ordering::Relaxed);
    let a = arr(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0], &[2, 3]);
    let b = arr(&[10.0, 20.0, 30.0], &[3]);
    // b broadcasts over a's rows (a view: no call); then a transpose read through strides.
    let y = ops::binary(BinaryOp::Multiply, &ops::binary(BinaryOp::Add, &a, &b).unwrap(), &a);
    assert_eq!(read(&y.unwrap()), [11.0, 44.0, 99.0, 56.0, 125.0, 216.0]);
    let t = ops::unary(UnaryOp::Negative, &ops::transpose(&a, None).unwrap()).unwrap();
    assert_eq!(read(&t), [-1.0, -4.0, -2.0, -5.0, -3.0, -6.0]);
    assert!(DUMMY.calls.load(Ordering::Relaxed) >= before + 3);
}

#[test]
fn no_gpu_backend_means_no_gpu() {
    setup();
    assert!(!device::is_available(Device::GPU));
    assert_eq!(device::default_device(), Device::CPU);
    let why = backends::unavailable_reason(Device::GPU).unwrap();
    assert!(why.contains("no GPU backend is registered"), "{why}");
    let err = device::set_default_device(Device::GPU).unwrap_err().to_string();
    assert!(err.contains("set_default_device") && err.contains("no GPU backend"), "{err}");
    // A second CPU backend is refused: the first stays.
    assert!(!backends::register(DeviceKind::Cpu, &DUMMY));
}

#[test]
fn compile_fuses_and_replays_on_it() {
    setup();
    let f = |xs: &[Array]| -> Result<Vec<Array>> {
        let p = ops::binary(BinaryOp::Multiply, &xs[0], &xs[1])?;
        let e = ops::unary(UnaryOp::Exp, &ops::unary(UnaryOp::Negative, &p)?)?;
        Ok(vec![ops::binary(BinaryOp::Add, &e, &xs[0])?])
    };
    let x = arr(&[0.0, 0.5, 1.0, 2.0], &[4]);
    let y = arr(&[1.0, 2.0, -1.0, 0.25], &[4]);
    let compiled = compile::trace(f, &[x.clone(), y.clone()], false).unwrap();
    let fused: Vec<&Primitive> = compiled
        .graph()
        .nodes
        .iter()
        .map(|n| &n.prim)
        .filter(|p| matches!(p, Primitive::Fused(_)))
        .collect();
    assert_eq!(fused.len(), 1, "one region: {:?}", compiled.graph().nodes);
    let eager = read(&f(&[x.clone(), y.clone()]).unwrap()[0]);
    for _ in 0..2 {
        let out = compiled.replay(&[x.clone(), y.clone()]).unwrap();
        let got = read(&out[0]);
        for (g, e) in got.iter().zip(&eager) {
            assert!((g - e).abs() <= 1e-6 * e.abs().max(1.0), "{got:?} vs {eager:?}");
        }
    }
}

#[test]
fn transforms_run_on_it() {
    setup();
    // d/dx (x * x) . c = 2 x c
    let x = arr(&[1.0, -2.0, 3.0], &[3]);
    let c = arr(&[1.0, 0.5, 2.0], &[3]);
    let square = |xs: &[Array]| Ok(vec![ops::binary(BinaryOp::Multiply, &xs[0], &xs[0])?]);
    let (outs, grads) =
        transforms::vjp(square, std::slice::from_ref(&x), std::slice::from_ref(&c)).unwrap();
    assert_eq!(read(&outs[0]), [1.0, 4.0, 9.0]);
    assert_eq!(read(&grads[0]), [2.0, -2.0, 12.0]);
    let (_, tangents) = transforms::jvp(square, std::slice::from_ref(&x), &[c]).unwrap();
    assert_eq!(read(&tangents[0]), [2.0, -2.0, 12.0]);
    // vmap over rows of a (2, 3) batch: the same elementwise program.
    let rows = arr(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0], &[2, 3]);
    let negate = |xs: &[Array]| Ok(vec![ops::unary(UnaryOp::Negative, &xs[0])?]);
    let out = transforms::vmap(negate, &[rows], &[Some(0)], &[Some(0)]).unwrap();
    assert_eq!(out[0].shape(), [2, 3]);
    assert_eq!(read(&out[0]), [-1.0, -2.0, -3.0, -4.0, -5.0, -6.0]);
}

#[test]
fn what_it_cannot_compute_is_an_error_naming_the_op() {
    setup();
    let a = arr(&[1.0, 2.0, 3.0, 4.0], &[2, 2]);
    let m = ops::matmul(&a, &a).unwrap();
    let err = m.to_vec::<f32>().unwrap_err().to_string();
    assert!(err.contains("matmul") && err.contains("dummy backend"), "{err}");
    // The failure stays with that array; other work goes on.
    assert!(m.to_vec::<f32>().is_err());
    assert_eq!(read(&ops::unary(UnaryOp::Negative, &a).unwrap()), [-1.0, -2.0, -3.0, -4.0]);
}
