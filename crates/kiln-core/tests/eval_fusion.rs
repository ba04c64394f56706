//! The core's fusion at evaluation time (horizontal.rs, vertical.rs) on a fake GPU: a backend
//! registered as the GPU whose buffers are host memory tagged with the GPU device. It groups
//! multiplies sharing their first input and exps of any input, chains an add into a
//! negation, and records what it was handed, so these tests see which calls ran together,
//! that every result is right, and that declined groups run each call on its own. No real
//! GPU is needed (CI runs them).

use kiln_base::backend::DeviceMemory;
use kiln_base::buffer::Allocator;
use kiln_base::Layout;
use kiln_base::{bail, ArrayData, Backend, BinaryOp, Buffer, Chained, DType, Device, DeviceKind};
use kiln_base::{Primitive, Result, Shape, Together, UnaryOp, HOST};
use kiln_core::{backends, device, ops, Array};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard, Once};

/// Host memory that says it lives on the GPU.
struct FakeGpuMemory;

impl Allocator for FakeGpuMemory {
    fn device(&self) -> Device {
        Device::GPU
    }

    unsafe fn free(&self, ptr: NonNull<u8>, nbytes: usize) {
        let layout = std::alloc::Layout::from_size_align(nbytes.max(4), 16).expect("valid");
        // SAFETY: `alloc` below made ptr with this layout (the caller's contract).
        unsafe { std::alloc::dealloc(ptr.as_ptr(), layout) }
    }
}

static MEMORY: FakeGpuMemory = FakeGpuMemory;

fn fake_buffer(values: &[f32]) -> Buffer {
    let nbytes = std::mem::size_of_val(values);
    let layout = std::alloc::Layout::from_size_align(nbytes.max(4), 16).expect("valid");
    // SAFETY: a fresh allocation of `layout` (nonzero size), filled before it is wrapped.
    unsafe {
        let ptr = NonNull::new(std::alloc::alloc(layout)).expect("allocation");
        std::ptr::copy_nonoverlapping(values.as_ptr() as *const u8, ptr.as_ptr(), nbytes);
        Buffer::from_raw(ptr, nbytes, &MEMORY)
    }
}

/// `x`'s elements (any layout) in row-major order of its shape.
fn values(x: &ArrayData) -> Vec<f32> {
    let len = x.buffer.nbytes() / 4;
    // SAFETY: the buffer holds `len` float32 values (every buffer here does) and is not
    // written while shared.
    let all = unsafe { std::slice::from_raw_parts(x.buffer.as_ptr() as *const f32, len) };
    x.layout.indices().map(|i| all[i]).collect()
}

fn output(values: Vec<f32>, shape: &Shape) -> ArrayData {
    ArrayData { buffer: fake_buffer(&values), layout: Layout::contiguous(shape), dtype: DType::F32 }
}

/// What the fake was handed together: each group's size, and chains run; the donation flags
/// of each group's first inputs.
#[derive(Default)]
struct Record {
    groups: Vec<usize>,
    chains: usize,
    donated: Vec<Vec<bool>>,
}

struct FakeGpu {
    record: Mutex<Record>,
    decline: AtomicBool,
}

static GPU: FakeGpu = FakeGpu {
    record: Mutex::new(Record { groups: Vec::new(), chains: 0, donated: Vec::new() }),
    decline: AtomicBool::new(false),
};

fn compute(prim: &Primitive, inputs: &[ArrayData], shape: &Shape) -> Option<Vec<f32>> {
    let xs: Vec<Vec<f32>> = inputs.iter().map(values).collect();
    let n: usize = shape.iter().product();
    let at = |x: &Vec<f32>, i: usize| if x.len() == 1 { x[0] } else { x[i] };
    Some(match prim {
        Primitive::Copy => xs[0].clone(),
        Primitive::Binary(op) => (0..n)
            .map(|i| {
                let (a, b) = (at(&xs[0], i), at(&xs[1], i));
                match op {
                    BinaryOp::Add => a + b,
                    BinaryOp::Multiply => a * b,
                    BinaryOp::Subtract => a - b,
                    _ => f32::NAN,
                }
            })
            .collect(),
        Primitive::Unary(UnaryOp::Exp) => xs[0].iter().map(|v| v.exp()).collect(),
        Primitive::Unary(UnaryOp::Negative) => xs[0].iter().map(|v| -v).collect(),
        _ => return None,
    })
}

impl Backend for FakeGpu {
    fn eval(
        &self,
        prim: &Primitive,
        inputs: &[ArrayData],
        outputs: &[(Shape, DType)],
    ) -> Result<Vec<ArrayData>> {
        let [(shape, DType::F32)] = outputs else {
            bail!(Unsupported, prim.name(), "The fake GPU computes one float32 output.")
        };
        let Some(v) = compute(prim, inputs, shape) else {
            bail!(Unsupported, prim.name(), "The fake GPU has no kernel for this call.")
        };
        Ok(vec![output(v, shape)])
    }

    fn memory(&self) -> &'static dyn DeviceMemory {
        &HOST
    }

    fn transfer(&self, data: &ArrayData, device: Device) -> Result<ArrayData> {
        let v = values(data);
        let buffer = match device.kind {
            DeviceKind::Cpu => HOST.from_slice(&v)?,
            DeviceKind::Gpu => fake_buffer(&v),
        };
        Ok(ArrayData { buffer, layout: Layout::contiguous(&data.layout.shape), dtype: data.dtype })
    }

    fn runs_together(&self, prim: &Primitive) -> Option<Together> {
        match prim {
            Primitive::Binary(BinaryOp::Multiply) => Some(Together::SharedInput),
            Primitive::Unary(UnaryOp::Exp) | Primitive::Binary(BinaryOp::Subtract) => {
                Some(Together::Independent)
            }
            _ => None,
        }
    }

    fn eval_together(
        &self,
        prim: &Primitive,
        inputs: &[Vec<ArrayData>],
        donated: &[Vec<bool>],
        outputs: &[&(Shape, DType)],
    ) -> Option<Result<Vec<ArrayData>>> {
        if self.decline.load(Ordering::Relaxed) {
            return None;
        }
        let mut record = self.record.lock().unwrap();
        record.groups.push(inputs.len());
        record.donated.push(donated.iter().map(|d| d[0]).collect());
        drop(record);
        let results = inputs.iter().zip(outputs).map(|(call, (shape, _))| {
            Ok(output(compute(prim, call, shape).expect("grouped prims compute"), shape))
        });
        Some(results.collect())
    }

    fn chains_into(&self, consumer: &Primitive) -> bool {
        matches!(consumer, Primitive::Unary(UnaryOp::Negative))
    }

    fn runs_chained(&self, producer: &Primitive, consumer: &Primitive) -> bool {
        self.chains_into(consumer) && matches!(producer, Primitive::Binary(BinaryOp::Add))
    }

    fn eval_chained(&self, chain: &Chained) -> Option<Result<(ArrayData, ArrayData)>> {
        if self.decline.load(Ordering::Relaxed) || !chain.c_rest.is_empty() {
            return None;
        }
        self.record.lock().unwrap().chains += 1;
        let p_shape = &chain.p_out.0;
        let made = output(compute(chain.producer, chain.p_inputs, p_shape)?, p_shape);
        let c_shape = &chain.c_out.0;
        let out = output(compute(chain.consumer, std::slice::from_ref(&made), c_shape)?, c_shape);
        Some(Ok((made, out)))
    }
}

/// Registers the fake GPU once, makes it the default device, and serialises the tests (they
/// share its record); the record starts empty.
fn setup() -> MutexGuard<'static, ()> {
    static ONCE: Once = Once::new();
    static SERIAL: Mutex<()> = Mutex::new(());
    ONCE.call_once(|| {
        assert!(backends::register(DeviceKind::Gpu, &GPU));
        device::set_default_device(Device::GPU).unwrap();
    });
    let guard = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    *GPU.record.lock().unwrap() = Record::default();
    GPU.decline.store(false, Ordering::Relaxed);
    guard
}

fn record() -> (Vec<usize>, usize) {
    let r = GPU.record.lock().unwrap();
    (r.groups.clone(), r.chains)
}

fn arr(values: &[f32]) -> Array {
    Array::from_slice(values, &[values.len()]).unwrap()
}

fn read(a: &Array) -> Vec<f32> {
    a.to_vec::<f32>().unwrap()
}

fn mul(a: &Array, b: &Array) -> Array {
    ops::binary(BinaryOp::Multiply, a, b).unwrap()
}

fn add(a: &Array, b: &Array) -> Array {
    ops::binary(BinaryOp::Add, a, b).unwrap()
}

fn exp(a: &Array) -> Array {
    ops::unary(UnaryOp::Exp, a).unwrap()
}

#[test]
fn calls_sharing_their_first_input_run_together() {
    let _serial = setup();
    let x = arr(&[1.0, 2.0, 3.0]);
    let ws: Vec<Array> = (0..3).map(|i| arr(&[i as f32, 1.0, -1.0])).collect();
    let outs: Vec<Array> = ws.iter().map(|w| mul(&x, w)).collect();
    kiln_core::eval::eval(&outs).unwrap();
    assert_eq!(record().0, vec![3]);
    for (i, o) in outs.iter().enumerate() {
        assert_eq!(read(o), vec![i as f32, 2.0, -3.0]);
    }
}

#[test]
fn views_of_one_input_count_as_one() {
    // matmul reshapes x anew for each product: the members' first inputs are different
    // views of the same data.
    let _serial = setup();
    let x = Array::from_slice(&[1.0f32, 2.0, 3.0, 4.0], &[1, 4]).unwrap();
    let ws: Vec<Array> = (0..3).map(|i| arr(&[1.0, 0.0, i as f32, 2.0])).collect();
    let outs: Vec<Array> = ws.iter().map(|w| mul(&ops::reshape(&x, &[4]).unwrap(), w)).collect();
    kiln_core::eval::eval(&outs).unwrap();
    assert_eq!(record().0, vec![3]);
    assert_eq!(read(&outs[2]), vec![1.0, 0.0, 6.0, 8.0]);
}

#[test]
fn a_member_that_depends_on_another_runs_alone() {
    let _serial = setup();
    let x = arr(&[1.0, 2.0]);
    let a = mul(&x, &arr(&[3.0, 4.0]));
    let b = mul(&x, &add(&arr(&[1.0, 1.0]), &a)); // its weight needs a
    let c = mul(&x, &arr(&[0.5, 0.5]));
    kiln_core::eval::eval(&[a.clone(), b.clone(), c.clone()]).unwrap();
    assert_eq!(record().0, vec![2], "a and c together, b alone");
    assert_eq!(read(&a), vec![3.0, 8.0]);
    assert_eq!(read(&b), vec![4.0, 18.0]);
    assert_eq!(read(&c), vec![0.5, 1.0]);
}

#[test]
fn independent_calls_group_as_they_become_ready() {
    // Three "layers": each one's two exps are ready together (their products ran as one
    // group), the next layer's only after this one's sum.
    let _serial = setup();
    let mut h = arr(&[0.1, 0.2]);
    let mut want = vec![0.1f32, 0.2];
    let (wq, wk) = (arr(&[0.5, 1.0]), arr(&[-1.0, 0.25]));
    for _ in 0..3 {
        let (q, k) = (exp(&mul(&h, &wq)), exp(&mul(&h, &wk)));
        h = add(&h, &mul(&q, &k));
        want = want
            .iter()
            .zip([0.5f32, 1.0].iter().zip([-1.0f32, 0.25]))
            .map(|(&v, (&a, b))| v + (v * a).exp() * (v * b).exp())
            .collect();
    }
    kiln_core::eval::eval(std::slice::from_ref(&h)).unwrap();
    // Per layer: the two products of h (shared input), then the two exps.
    assert_eq!(record().0, vec![2, 2, 2, 2, 2, 2]);
    for (got, w) in read(&h).iter().zip(&want) {
        assert!((got - w).abs() < 1e-5, "{got} vs {w}");
    }
}

#[test]
fn a_declined_group_runs_each_call_on_its_own() {
    let _serial = setup();
    GPU.decline.store(true, Ordering::Relaxed);
    let x = arr(&[2.0]);
    let outs: Vec<Array> = (0..5).map(|i| exp(&mul(&x, &arr(&[i as f32])))).collect();
    let h = add(&outs[0], &outs[1]);
    let y = ops::unary(UnaryOp::Negative, &h).unwrap();
    kiln_core::eval::eval(&[outs.clone(), vec![y.clone()]].concat()).unwrap();
    assert_eq!(record(), (vec![], 0));
    for (i, o) in outs.iter().enumerate() {
        assert!((read(o)[0] - (2.0 * i as f32).exp()).abs() < 1e-4);
    }
    assert!((read(&y)[0] + 1.0 + 2f32.exp()).abs() < 1e-4);
}

#[test]
fn an_add_and_its_consumer_run_as_one_keeping_both() {
    let _serial = setup();
    let (a, b) = (arr(&[1.0, 2.0]), arr(&[3.0, 5.0]));
    let h = add(&a, &b);
    let y = ops::unary(UnaryOp::Negative, &h).unwrap();
    let z = add(&h, &y); // the sum is read again (the next residual)
    kiln_core::eval::eval(&[y.clone(), z.clone()]).unwrap();
    assert_eq!(record().1, 1, "h and -h as one; z alone (its consumer is not a negation)");
    assert_eq!(read(&h), vec![4.0, 7.0]);
    assert_eq!(read(&y), vec![-4.0, -7.0]);
    assert_eq!(read(&z), vec![0.0, 0.0]);
}

#[test]
fn independent_calls_of_views_with_a_host_scalar_group_per_layer() {
    // RoPE's pattern in mlx-lm's decode: each layer's q and k are views (reshape) of
    // products of one h, and each RoPE also reads a host scalar (the cache offset).
    let _serial = setup();
    let offset = Array::from_slice(&[0.5f32], &[1]).unwrap();
    let mut h = Array::from_slice(&[0.1f32, 0.2], &[1, 2]).unwrap();
    let (wq, wk) = (arr(&[0.5, 1.0]), arr(&[-1.0, 0.25]));
    let mut outs = Vec::new();
    for _ in 0..3 {
        let flat = ops::reshape(&h, &[2]).unwrap();
        let q = ops::reshape(&mul(&flat, &wq), &[1, 2]).unwrap();
        let k = ops::reshape(&mul(&flat, &wk), &[1, 2]).unwrap();
        let sub = |a: &Array| ops::binary(BinaryOp::Subtract, a, &offset).unwrap();
        let (rq, rk) = (sub(&q), sub(&k));
        h = add(&h, &mul(&rq, &rk));
        outs.extend([rq, rk]);
    }
    outs.insert(0, h.clone());
    kiln_core::eval::eval(&outs).unwrap();
    assert_eq!(record().0, vec![2, 2, 2, 2, 2, 2]);
}

#[test]
fn independent_members_own_their_first_inputs() {
    // mlx-lm's KV-cache writes: each write's cache is referenced by that write alone, so the
    // backend may write into it (donation), the group's first member as well as the others.
    let _serial = setup();
    let (a, b) = (add(&arr(&[1.0, 2.0]), &arr(&[1.0, 1.0])), add(&arr(&[3.0]), &arr(&[1.0])));
    kiln_core::eval::eval(&[a.clone(), b.clone()]).unwrap();
    let (ea, eb) = (exp(&a), exp(&b));
    drop((a, b));
    kiln_core::eval::eval(&[ea.clone(), eb.clone()]).unwrap();
    let donated = GPU.record.lock().unwrap().donated.clone();
    assert_eq!(donated.last(), Some(&vec![true, true]), "{donated:?}");
    assert!((read(&eb)[0] - 4f32.exp()).abs() < 1e-3);
}
