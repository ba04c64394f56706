//! Evaluation: walk the pending graph in dependency order and run each primitive call once,
//! on its stream's backend. Views (transpose, broadcast, slice, most reshapes) cost no
//! kernel. After a call runs its outputs keep only their data and the call is dropped, which
//! releases the inputs.

use crate::array::{Array, Pending};
use crate::device::backend;
use crate::walk::pending_in_order;
use kiln_base::{bail, interrupt, ArrayData, DType, DeviceKind, Primitive, Result, Shape};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

static CALLS_RUN: AtomicU64 = AtomicU64::new(0);

/// Primitive calls evaluated so far in this process (views included): lets tests check
/// that shared subgraphs run once.
pub fn calls_run() -> u64 {
    CALLS_RUN.load(Ordering::Relaxed)
}

/// Computes every array in `outputs` (and what they depend on) that has no data yet.
pub fn eval(outputs: &[Array]) -> Result<()> {
    let timer = crate::profile::Timer::start(kiln_base::Device::CPU);
    // Arrays handed to async_eval's issuing thread: wait for it rather than join in (two
    // threads issuing one graph contend, and the job's event is recorded as it ends).
    crate::background::wait_for(outputs);
    if eval_async(outputs)? {
        // As in MLX, eval returns once the values exist (GPU faults surface here too), and
        // no later: work issued since by another async_eval is not waited for.
        let gpu_outputs = outputs.iter().filter(|a| a.stream().device.kind == DeviceKind::Gpu);
        crate::completion::wait(gpu_outputs.map(|a| a.0.evaluation.load(Ordering::Relaxed)))?;
    }
    if let Some(t) = timer {
        t.span("eval".into(), "eval", kiln_base::Device::CPU);
    }
    Ok(())
}

/// Issues the work computing `outputs`; GPU work may still run when this returns. Returns
/// whether any was issued to the GPU.
pub fn eval_async(outputs: &[Array]) -> Result<bool> {
    // No other thread may capture a CUDA graph from the stream meanwhile.
    let _issuing = crate::backends::gpu().and_then(|b| b.issuing());
    // A Ctrl-C from now on stops the evaluation: between calls here, and inside long CPU
    // kernels (see kiln_base::interrupt).
    let _evaluating = interrupt::Evaluating::start();
    let order = pending_in_order(outputs);
    // Arrays with data may still be in flight on the GPU (a CUDA graph replay returns its
    // outputs before they are written): eval waits for those too.
    let mut on_gpu = outputs.iter().any(|a| a.stream().device.kind == DeviceKind::Gpu);
    let mut issued = false;
    let evaluation = crate::completion::begin();
    let mut groups = crate::horizontal::find(&order);
    let mut chains = crate::vertical::find(&order);
    // Consume the order front to back so each node is released once its users are done.
    for (array, call) in order {
        let gpu = array.stream().device.kind == DeviceKind::Gpu;
        on_gpu |= gpu;
        issued |= gpu;
        interrupt::check("eval")?;
        let stamp = if gpu { evaluation } else { 0 };
        let chain = call.as_ref().and_then(|c| Some((chains.take(c)?, c)));
        if let Some((consumer, producer)) = chain {
            if crate::vertical::run(array.stream().device, producer, &consumer, stamp)? {
                continue;
            }
        }
        let group = call.as_ref().and_then(|c| groups.take(c));
        if let (Some(rest), Some(call)) = (group, &call) {
            let (ran, left) = crate::horizontal::run(&array, call, &rest, stamp)?;
            groups.requeue(left);
            if ran {
                continue;
            }
        }
        eval_node(&array, stamp)?;
    }
    if issued {
        crate::completion::finish(evaluation)?;
    }
    Ok(on_gpu)
}

/// Counts calls run together by `horizontal::run`.
pub(crate) fn count_calls(n: u64) {
    CALLS_RUN.fetch_add(n, Ordering::Relaxed);
}

/// `evaluation`: the number stamped on the outputs (see completion.rs).
pub(crate) fn eval_node(array: &Array, evaluation: u64) -> Result<()> {
    if array.is_evaluated() {
        return Ok(());
    }
    let Some(call) = array.call() else {
        if let Some(e) = array.failure() {
            return Err(e);
        }
        if array.is_placeholder() {
            bail!(
                Value,
                "eval",
                "Cannot evaluate a placeholder array: inside a function being compiled or \
                 transformed (compile, vmap), arrays have no values yet. Move .item(), \
                 printing and numpy conversion out of the function."
            );
        }
        return Ok(()); // another thread finished it meanwhile
    };
    let _running = call.running.lock().unwrap_or_else(|e| e.into_inner());
    if array.is_evaluated() {
        return Ok(());
    }
    if let Some(view) = view_in_place(array, &call) {
        // A view of an input already on the array's device (a decode step's reshapes and
        // transposes, a third of its nodes): no kernel, allocation or guard to go through.
        let timer = crate::profile::Timer::start(view.buffer.device());
        CALLS_RUN.fetch_add(1, Ordering::Relaxed);
        if let Some(t) = timer {
            let input = call.inputs[0].0.data.get().expect("checked by view_in_place");
            let device = view.buffer.device();
            t.call(&call.prim, std::slice::from_ref(input), &call.output_meta, device, device);
        }
        set_results(&call, vec![view], evaluation, array.is_tracer());
        return Ok(());
    }
    // Primitives without a GPU kernel yet run on the CPU; each input moves (once) to the
    // device that runs the call.
    let device = match array.stream().device.kind {
        DeviceKind::Gpu if !runs_anywhere(&call) && !call_runs_on_gpu(&call) => {
            log_cpu_fallback(&call);
            kiln_base::Device::CPU
        }
        _ => array.stream().device,
    };
    // Inside a transform, traced nodes keep their call: the transform walks it afterwards.
    let keep_graph = array.is_tracer();
    let mut donated = Vec::with_capacity(call.inputs.len());
    let inputs: Vec<ArrayData> = call
        .inputs
        .iter()
        .map(|input| {
            let data = input.0.data.get().expect("inputs are evaluated first");
            if data.buffer.device() == device {
                donated.push(!keep_graph && sole_owner(input, data));
                Ok(data.clone())
            } else {
                // Views too (see `runs_anywhere`): the input keeps its copy.
                donated.push(false);
                input.data_on(device)
            }
        })
        .collect::<Result<_>>()?;
    let outputs = call.outputs.get().expect("set at construction");
    let timer = crate::profile::Timer::start(device);
    let ran =
        run_guarded(&call.prim, &inputs, &donated, &call.output_meta, device).and_then(|results| {
            if device == array.stream().device {
                return Ok(results);
            }
            // Ran on the CPU for want of a GPU kernel: the results belong on the GPU.
            results.iter().map(|r| crate::device::to_device(r, array.stream().device)).collect()
        });
    // An interrupted call leaves its outputs pending, as if it had not started: the kernel
    // may have stopped early, so its results are dropped (a later eval runs it again). A
    // kernel that wrote into a donated input ran to completion: its results stand.
    let interrupted = || Err(kiln_base::Error::Interrupted { op: call.prim.name() });
    let results = match ran {
        Ok(_) if interrupt::requested() && !writes_in_place(&call.prim, &donated, device) => {
            return interrupted()
        }
        Err(kiln_base::Error::Interrupted { .. }) => return interrupted(),
        Ok(results) => results,
        Err(e) => {
            // Every output fails from now on, with this error; the call (and the inputs it
            // holds) is released.
            for node in outputs.iter().filter_map(|w| w.upgrade()) {
                *node.pending.lock().unwrap_or_else(|e| e.into_inner()) =
                    Pending::Failed(e.clone());
            }
            return Err(e);
        }
    };
    CALLS_RUN.fetch_add(1, Ordering::Relaxed);
    if let Some(t) = timer {
        t.call(&call.prim, &inputs, &call.output_meta, device, array.stream().device);
    }
    set_results(&call, results, evaluation, keep_graph);
    Ok(())
}

/// The view `array`'s call makes of its one input, when that input is evaluated on the
/// array's own device and the primitive is a view of its layout (else `None`: the general
/// path, which may move the input first).
fn view_in_place(array: &Array, call: &crate::array::OpCall) -> Option<ArrayData> {
    let [input] = call.inputs.as_slice() else { return None };
    let data = input.0.data.get()?;
    if data.buffer.device() != array.stream().device {
        return None;
    }
    let layout = call.prim.view_layout(&data.layout)?;
    Some(ArrayData { buffer: data.buffer.clone(), layout, dtype: data.dtype })
}

/// Gives the call's outputs their data, stamped with `evaluation`; the call is dropped
/// unless a transform keeps the graph (`keep_graph`).
pub(crate) fn set_results(
    call: &crate::array::OpCall,
    results: Vec<ArrayData>,
    evaluation: u64,
    keep_graph: bool,
) {
    let outputs = call.outputs.get().expect("set at construction");
    for (weak, data) in outputs.iter().zip(results) {
        if let Some(node) = weak.upgrade() {
            let _ = node.data.set(data);
            node.evaluation.store(evaluation, Ordering::Relaxed);
            if !keep_graph {
                let mut pending = node.pending.lock().unwrap_or_else(|e| e.into_inner());
                *pending = Pending::Done;
            }
        }
    }
}

/// Buffer donation: whether `input`'s buffer is referenced by nothing but the call being
/// run, so the kernel may write an output into it. The call's handle must be the only one
/// to the node (no array the user holds, not passed twice, no other pending graph; no weak
/// handle that could revive it) and the node's the only one to the buffer (no view, no
/// numpy export). Both counts only grow through the node, which only this call reaches.
pub(crate) fn sole_owner(input: &Array, data: &ArrayData) -> bool {
    Arc::strong_count(&input.0) == 1
        && Arc::weak_count(&input.0) == 0
        && !input.is_tracer()
        && data.buffer.handle_count() == 1
}

/// Fault injection for tests: the next evaluation of a primitive named `op` panics inside
/// its kernel call, as a kernel bug would (`None`: disarm).
pub fn inject_panic(op: Option<&str>) {
    arm(op.map(|op| (op.to_string(), Fault::Panic)));
}

/// Fault injection for tests: a Ctrl-C arrives while the next evaluation of a primitive
/// named `op` runs its kernel (`None`: disarm).
pub fn inject_interrupt(op: Option<&str>) {
    arm(op.map(|op| (op.to_string(), Fault::Interrupt)));
}

#[derive(Clone, Copy, PartialEq)]
enum Fault {
    Panic,
    Interrupt,
}

fn arm(fault: Option<(String, Fault)>) {
    FAULT_ARMED.store(fault.is_some(), Ordering::Relaxed);
    *FAULT.lock().unwrap_or_else(|e| e.into_inner()) = fault;
}

static FAULT_ARMED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
static FAULT: std::sync::Mutex<Option<(String, Fault)>> = std::sync::Mutex::new(None);

fn inject_fault(prim: &Primitive) {
    let mut fault = FAULT.lock().unwrap_or_else(|e| e.into_inner());
    let Some((_, kind)) = fault.as_ref().filter(|(op, _)| op == prim.name()) else { return };
    let kind = *kind;
    *fault = None;
    FAULT_ARMED.store(false, Ordering::Relaxed);
    drop(fault);
    match kind {
        Fault::Panic => panic!("injected fault in {}", prim.name()),
        Fault::Interrupt => interrupt::request(),
    }
}

/// [`run`], with a panic in a kernel turned into an error naming the primitive (a bug, but
/// one that must reach Python as an exception rather than abort or leave half-made state).
fn run_guarded(
    prim: &Primitive,
    inputs: &[ArrayData],
    donated: &[bool],
    outputs: &[(Shape, DType)],
    device: kiln_base::Device,
) -> Result<Vec<ArrayData>> {
    let attempt = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        if FAULT_ARMED.load(Ordering::Relaxed) {
            inject_fault(prim);
        }
        run(prim, inputs, donated, outputs, device)
    }));
    attempt.unwrap_or_else(|payload| {
        let what = payload
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| payload.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "unknown panic".into());
        bail!(Runtime, prim.name(), "Internal error while evaluating (a bug in kiln): {what}")
    })
}

/// Whether the kernel for `prim` may write an output into a donated input's buffer: fused
/// kernels on the CPU, a slice update into its base (a KV cache's new entries), and an
/// all-reduce of host memory into its input (a gradient read only through its all_sum:
/// kiln-cpu's collective.rs reduces it in place).
fn writes_in_place(prim: &Primitive, donated: &[bool], device: kiln_base::Device) -> bool {
    let first = donated.first() == Some(&true);
    let slice_update = matches!(prim, Primitive::SliceUpdate { .. }) && first;
    let fused = matches!(prim, Primitive::Fused(_)) && donated.contains(&true);
    let reduced = matches!(prim, Primitive::Collective(c) if c.reduction().is_some()) && first;
    slice_update || ((fused || reduced) && device.kind == DeviceKind::Cpu)
}

/// Runs one primitive: a view when the layout allows, else the device's kernel (`donated`:
/// see `sole_owner`).
pub(crate) fn run(
    prim: &Primitive,
    inputs: &[ArrayData],
    donated: &[bool],
    outputs: &[(Shape, DType)],
    device: kiln_base::Device,
) -> Result<Vec<ArrayData>> {
    if let [input] = inputs {
        if let Some(layout) = prim.view_layout(&input.layout) {
            return Ok(vec![ArrayData {
                buffer: input.buffer.clone(),
                layout,
                dtype: input.dtype,
            }]);
        }
    }
    if let Primitive::Custom { num_primals, .. } = prim {
        return Ok(inputs[*num_primals..].to_vec()); // the function's outputs, as they are
    }
    let in_place = writes_in_place(prim, donated, device);
    let device = backend(device)?;
    if in_place {
        return device.eval_donating(prim, inputs, donated, outputs);
    }
    if let (Primitive::Reshape { shape, .. }, [input]) = (prim, inputs) {
        // Not viewable: copy to row-major first, which always is.
        let meta = [(input.layout.shape.clone(), input.dtype)];
        let mut copied = device.eval(&Primitive::Copy, inputs, &meta)?;
        let mut data = copied.pop().expect("one output");
        data.layout = data.layout.reshape(shape).expect("row-major reshapes are views");
        return Ok(vec![data]);
    }
    device.eval(prim, inputs, outputs)
}

/// `KILN_LOG=gpu`: names each primitive that ran on the CPU for want of a GPU kernel, once.
fn log_cpu_fallback(call: &crate::array::OpCall) {
    static SEEN: std::sync::Mutex<Vec<&'static str>> = std::sync::Mutex::new(Vec::new());
    if !std::env::var("KILN_LOG").is_ok_and(|v| v.contains("gpu")) {
        return;
    }
    let op = call.prim.name();
    let mut seen = SEEN.lock().unwrap_or_else(|e| e.into_inner());
    if !seen.contains(&op) {
        seen.push(op);
        eprintln!("kiln: {op} has no GPU kernel yet; it runs on the CPU");
    }
}

/// Whether a call runs on the GPU (the others run on the CPU for now).
/// Views and custom functions' outputs need no kernel: they run on the stream's device, their
/// input moved there once (kept by the input). Sent to the CPU instead, a view of GPU data
/// came back as a new host array copied to the GPU by every consumer (each vjp's tracers).
fn runs_anywhere(call: &crate::array::OpCall) -> bool {
    match (&call.prim, call.inputs.as_slice()) {
        (Primitive::Custom { .. }, _) => true,
        (prim, [x]) => x.0.data.get().is_some_and(|d| prim.view_layout(&d.layout).is_some()),
        _ => false,
    }
}

fn call_runs_on_gpu(call: &crate::array::OpCall) -> bool {
    let dtypes = call.inputs.iter().map(|x| x.dtype()).chain(call.output_meta.iter().map(|o| o.1));
    gpu_runs(&call.prim, dtypes)
}

/// Whether the GPU has a kernel for `prim` over these dtypes; a reshape that is not a view
/// runs as the backend's copy.
pub(crate) fn gpu_runs(prim: &Primitive, dtypes: impl Iterator<Item = DType>) -> bool {
    let prim = match prim {
        Primitive::Reshape { .. } => &Primitive::Copy,
        p => p,
    };
    let gpu = crate::backends::registered(DeviceKind::Gpu);
    gpu.is_some_and(|b| b.supports(prim, &mut { dtypes }))
}
