//! Replaying a compiled GPU function as one device graph (DESIGN.md section 5.3): the policy
//! lives here, the recording in the GPU backend's `GraphCapture` (kiln-cuda: CUDA graphs).
//!
//! A compiled call normally rebuilds its graph as lazy arrays and evaluates them, launching
//! each kernel from the host: about 8 us per kernel, far more than most kernels run. Here the
//! entry's kernel sequence is captured once into a device graph and relaunched per call:
//!
//! 1. the first call replays lazily, as on the CPU (kernels get built);
//! 2. the second runs the nodes directly, without lazy arrays; an op with no GPU kernel
//!    turns the graph off for this entry (the lazy replay takes over);
//! 3. the third copies the inputs into buffers the entry owns (its staging buffers), captures
//!    the nodes over them, and launches the graph;
//! 4. every later call copies the inputs in, launches, and copies the outputs out to fresh
//!    buffers (the graph writes the same buffers at every launch).
//!
//! Entries of one kernel, or whose arrays are too large for the copies to pay
//! (`worth_a_graph`), run directly on every call from the second on and are never captured.
//!
//! The memory plan is fixed at capture: the graph reserves every block freed while it was
//! recorded (the backend's allocator), the plan keeps its staging, constants and outputs.
//! Calls are serialised by the entry's lock; the work itself stays asynchronous.
//! `KILN_CUDA_GRAPHS=0` turns graphs off (the lazy replay runs every call).

use super::captured::{Graph, Value};
use crate::array::Array;
use crate::eval::{eval_async, gpu_runs, run};
use kiln_base::backend::{DeviceGraph, GraphCapture, IssueGuard};
use kiln_base::{bail, ArrayData, Backend, DType, Device, Layout, Result, Shape, Stream};
use std::sync::Mutex;

/// A compiled entry's graph replay state.
pub(crate) struct GraphReplay {
    backend: &'static dyn Backend,
    graphs: &'static dyn GraphCapture,
    device: Device,
    stream: Stream,
    /// For each node, the last node reading one of its outputs (`usize::MAX`: an output of
    /// the function, kept to the end).
    last_use: Vec<usize>,
    /// Few kernels: run them directly on every call, never capture.
    direct: bool,
    state: Mutex<State>,
}

enum State {
    /// Calls replayed lazily so far.
    Lazy(u32),
    /// The direct run worked; the next call captures.
    Warm,
    /// Every call runs the nodes directly (few kernels; the launches so far).
    Direct(u64),
    Ready(Plan),
    /// Not possible for this entry (an op without a GPU kernel, a failed capture).
    Off,
}

/// What a captured graph reads and writes.
struct Plan {
    graph: Box<dyn DeviceGraph>,
    /// Row-major copies of the inputs, the buffers the graph reads.
    staging: Vec<ArrayData>,
    /// The input each staging buffer holds a copy of. Arrays never change once computed,
    /// so the same buffer and layout again (weights passed on every call) needs no copy;
    /// holding the buffer keeps its memory from being reused meanwhile.
    copied: Mutex<Vec<Option<ArrayData>>>,
    /// Constants on the GPU (the graph reads their buffers).
    _consts: Vec<ArrayData>,
    /// The graph's results: where each function output is found after a launch.
    outputs: Vec<ArrayData>,
    launches: u64,
}

/// What explain reports about an entry's device graph.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GraphStatus {
    /// "lazy" (not tried yet), "warm" (captures on the next call), "captured", "off".
    pub state: &'static str,
    /// Nodes in the captured graph.
    pub nodes: usize,
    /// Launches so far.
    pub launches: u64,
}

/// Kernels a run of `graph` launches (views launch none).
fn kernel_count(graph: &Graph) -> usize {
    graph
        .nodes
        .iter()
        .filter(|n| match n.inputs.as_slice() {
            [v] => n.prim.view_layout(&Layout::contiguous(graph.meta(*v).0)).is_none(),
            _ => true,
        })
        .count()
}

/// Whether replaying `graph` as a device graph pays. A graph saves each kernel's launch (a few
/// microseconds of host time) but copies the inputs in and the outputs out at every call: a
/// function of a few kernels over large arrays (one fused kernel over 2^26 elements) would
/// move twice the bytes to save one launch. Estimated at traced sizes: the copies (at about
/// 2 TB/s) must cost less than the launches saved (about 4 us each).
fn worth_a_graph(graph: &Graph, kernels: usize) -> bool {
    const BYTES_PER_LAUNCH: usize = 8 << 20;
    let bytes = |(shape, dtype): &(Shape, DType)| shape.iter().product::<usize>() * dtype.size();
    let copied: usize = graph.inputs.iter().map(bytes).sum::<usize>()
        + graph
            .outputs
            .iter()
            .filter_map(|v| match *v {
                Value::Node(n, k) => Some(bytes(&graph.nodes[n].outputs[k])),
                _ => None,
            })
            .sum::<usize>();
    copied <= kernels.saturating_mul(BYTES_PER_LAUNCH)
}

/// Most kernels an entry launches itself on every call rather than through a graph. Host
/// time per driver call on the H200: a kernel launch 3.9 to 4.3 us, a one-kernel graph
/// launch 1.8 us, a device-to-device copy 4.7 to 5.3 us; a graph launch and the copy of the
/// outputs out cost more than one plain launch. Measured per compiled call of silu on 1024
/// elements: 8.3 to 12.5 us issued back to back launched directly, 13.4 to 14.6 through the
/// graph.
const DIRECT_AT_MOST: usize = 1;

fn graphs_enabled() -> bool {
    !std::env::var("KILN_CUDA_GRAPHS").is_ok_and(|v| v == "0")
}

impl GraphReplay {
    /// A replay state for `graph` when every node runs on one GPU stream.
    pub(crate) fn new(graph: &Graph) -> Option<GraphReplay> {
        let stream = graph.nodes.first()?.stream;
        let on_gpu = stream.device.kind == kiln_base::DeviceKind::Gpu;
        if !on_gpu || graph.nodes.iter().any(|n| n.stream != stream) {
            return None;
        }
        // Read per entry, not per call (an environment lookup takes a lock).
        if !graphs_enabled() {
            return None;
        }
        let backend = crate::backends::gpu()?;
        let graphs = backend.graph_capture()?;
        let kernels = kernel_count(graph);
        let direct = kernels <= DIRECT_AT_MOST || !worth_a_graph(graph, kernels);
        let mut last_use = vec![0; graph.nodes.len()];
        for (i, node) in graph.nodes.iter().enumerate() {
            for v in &node.inputs {
                if let Value::Node(n, _) = v {
                    last_use[*n] = i;
                }
            }
        }
        for v in &graph.outputs {
            if let Value::Node(n, _) = v {
                last_use[*n] = usize::MAX;
            }
        }
        Some(GraphReplay {
            backend,
            graphs,
            device: stream.device,
            stream,
            last_use,
            direct,
            state: Mutex::new(State::Lazy(0)),
        })
    }

    pub(crate) fn status(&self) -> GraphStatus {
        let state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let (state, nodes, launches) = match &*state {
            State::Lazy(_) => ("lazy", 0, 0),
            State::Warm => ("warm", 0, 0),
            State::Direct(launches) => ("direct", 0, *launches),
            State::Ready(plan) => ("captured", plan.graph.nodes(), plan.launches),
            State::Off => ("off", 0, 0),
        };
        GraphStatus { state, nodes, launches }
    }

    /// This call's outputs, or `None` when the lazy replay should run it.
    pub(crate) fn call(&self, graph: &Graph, inputs: &[Array]) -> Result<Option<Vec<Array>>> {
        if inputs.iter().any(|a| a.is_tracer() || a.is_placeholder()) {
            return Ok(None);
        }
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        match &*state {
            State::Off => return Ok(None),
            State::Lazy(0) => {
                *state = State::Lazy(1);
                return Ok(None);
            }
            _ => {}
        }
        let data = self.input_data(inputs)?;
        let consts = self.consts(graph)?;
        match std::mem::replace(&mut *state, State::Off) {
            old @ (State::Lazy(_) | State::Direct(_)) => {
                match self.run_directly(graph, &data, &consts) {
                    Ok(values) => {
                        *state = match old {
                            State::Direct(n) => State::Direct(n + 1),
                            _ if self.direct => State::Direct(1),
                            _ => State::Warm,
                        };
                        let arrays = values.into_iter().map(|d| Array::from_data(d, self.stream));
                        Ok(Some(self.outputs(graph, inputs, arrays.collect())))
                    }
                    // No GPU kernel for some node: the lazy replay runs it (on the CPU).
                    Err(kiln_base::Error::Unsupported { .. }) => Ok(None),
                    Err(e) => Err(e),
                }
            }
            State::Warm => match self.capture(graph, &data, consts) {
                Ok(mut plan) => {
                    plan.launches += 1;
                    let out = self.launch(&plan, graph, inputs, &data)?;
                    *state = State::Ready(plan);
                    Ok(Some(out))
                }
                Err(e) => {
                    log(&format!("no device graph for this entry: {e}"));
                    Ok(None)
                }
            },
            State::Ready(mut plan) => {
                plan.launches += 1;
                let out = self.launch(&plan, graph, inputs, &data);
                *state = State::Ready(plan);
                out.map(Some)
            }
            State::Off => unreachable!("handled above"),
        }
    }

    /// The inputs' data on the GPU, their pending work issued (without waiting for it).
    fn input_data(&self, inputs: &[Array]) -> Result<Vec<ArrayData>> {
        let pending: Vec<Array> = inputs.iter().filter(|a| !a.is_evaluated()).cloned().collect();
        eval_async(&pending)?;
        inputs.iter().map(|a| a.data_on(self.device)).collect()
    }

    fn consts(&self, graph: &Graph) -> Result<Vec<ArrayData>> {
        let pending: Vec<Array> =
            graph.consts.iter().filter(|a| !a.is_evaluated()).cloned().collect();
        eval_async(&pending)?;
        graph.consts.iter().map(|a| a.data_on(self.device)).collect()
    }

    /// `execute` outside a capture (marked as issuing GPU work).
    fn run_directly(
        &self,
        graph: &Graph,
        inputs: &[ArrayData],
        consts: &[ArrayData],
    ) -> Result<Vec<ArrayData>> {
        let _issuing = self.issuing();
        self.execute(graph, inputs, consts, true)
    }

    /// Runs the nodes in order straight on the backend, releasing each value after its last
    /// reader; returns the graph outputs' data (inputs and constants included). `profiled`:
    /// the profiler may record each call (not while capturing: nothing runs then).
    fn execute(
        &self,
        graph: &Graph,
        inputs: &[ArrayData],
        consts: &[ArrayData],
        profiled: bool,
    ) -> Result<Vec<ArrayData>> {
        let mut values: Vec<Option<Vec<ArrayData>>> = vec![None; graph.nodes.len()];
        let get = |v: &Value, values: &[Option<Vec<ArrayData>>]| match *v {
            Value::Input(i) => inputs[i].clone(),
            Value::Const(c) => consts[c].clone(),
            Value::Node(n, k) => values[n].as_ref().expect("computed before its users")[k].clone(),
        };
        for (i, node) in graph.nodes.iter().enumerate() {
            let args: Vec<ArrayData> = node.inputs.iter().map(|v| get(v, &values)).collect();
            let view = matches!(args.as_slice(), [x] if node.prim.view_layout(&x.layout).is_some());
            let dtypes = args.iter().map(|a| a.dtype).chain(node.outputs.iter().map(|o| o.1));
            if !view && !gpu_runs(&node.prim, dtypes) {
                bail!(Unsupported, "compile", "{} has no GPU kernel.", node.prim.name());
            }
            let donated = vec![false; args.len()];
            let timer = profiled.then(|| crate::profile::Timer::start(self.device)).flatten();
            values[i] = Some(run(&node.prim, &args, &donated, &node.outputs, self.device)?);
            if let Some(t) = timer {
                t.call(&node.prim, &args, &node.outputs, self.device, self.device);
            }
            drop(args);
            for v in &node.inputs {
                if let Value::Node(n, _) = *v {
                    if self.last_use[n] == i {
                        values[n] = None;
                    }
                }
            }
        }
        Ok(graph.outputs.iter().map(|v| get(v, &values)).collect())
    }

    /// Marks this thread as issuing GPU work (no capture elsewhere meanwhile).
    fn issuing(&self) -> Option<IssueGuard> {
        self.backend.issuing()
    }

    /// Records the nodes over fresh staging buffers into a device graph.
    fn capture(&self, graph: &Graph, inputs: &[ArrayData], consts: Vec<ArrayData>) -> Result<Plan> {
        // Inputs that were views took other kernel variants so far: build the row-major
        // ones together now rather than one by one inside the capture.
        if inputs.iter().any(|x| !x.layout.row_contiguous || x.layout.offset != 0) {
            super::prebuild_kernels::prebuild_row_major(graph);
        }
        let staging = inputs
            .iter()
            .map(|x| self.row_major_buffer(&x.layout.shape, x.dtype))
            .collect::<Result<Vec<_>>>()?;
        let mut work = || self.execute(graph, &staging, &consts, false);
        let (device_graph, outputs) = self.graphs.capture(&mut work)?;
        log(&format!("captured a device graph of {} nodes", device_graph.nodes()));
        let copied = Mutex::new(vec![None; staging.len()]);
        Ok(Plan { graph: device_graph, staging, copied, _consts: consts, outputs, launches: 0 })
    }

    /// One graph run: inputs copied in, the graph launched, outputs copied out.
    fn launch(
        &self,
        plan: &Plan,
        graph: &Graph,
        inputs: &[Array],
        data: &[ArrayData],
    ) -> Result<Vec<Array>> {
        let _issuing = self.issuing();
        let mut copied = plan.copied.lock().unwrap_or_else(|e| e.into_inner());
        let mut copies = Vec::with_capacity(data.len());
        for ((x, staging), last) in data.iter().zip(&plan.staging).zip(copied.iter_mut()) {
            let same =
                last.as_ref().is_some_and(|l| l.buffer.same(&x.buffer) && l.layout == x.layout);
            if !same {
                copies.push((x, &staging.buffer));
                *last = Some(x.clone());
            }
        }
        if let Err(e) = self.graphs.copy_all_row_major(&copies) {
            // Which staging buffers hold what is unknown now: copy everything next time.
            copied.iter_mut().for_each(|c| *c = None);
            return Err(e);
        }
        plan.graph.launch()?;
        // Inputs and constants are returned as they are; only node results are copied.
        let fresh = graph
            .outputs
            .iter()
            .zip(&plan.outputs)
            .map(|(value, out)| match value {
                Value::Node(..) => self.row_major_buffer(&out.layout.shape, out.dtype).map(Some),
                _ => Ok(None),
            })
            .collect::<Result<Vec<_>>>()?;
        let copies: Vec<_> = plan
            .outputs
            .iter()
            .zip(&fresh)
            .filter_map(|(out, f)| f.as_ref().map(|f| (out, &f.buffer)))
            .collect();
        self.graphs.copy_all_row_major(&copies)?;
        let results = plan
            .outputs
            .iter()
            .zip(fresh)
            .map(|(out, f)| Array::from_data(f.unwrap_or_else(|| out.clone()), self.stream))
            .collect();
        Ok(self.outputs(graph, inputs, results))
    }

    fn row_major_buffer(&self, shape: &Shape, dtype: DType) -> Result<ArrayData> {
        let n: usize = shape.iter().product();
        Ok(ArrayData {
            buffer: self.backend.memory().alloc(n * dtype.size())?,
            layout: Layout::contiguous(shape),
            dtype,
        })
    }

    /// The function's outputs: its inputs and constants as the caller's own arrays.
    fn outputs(&self, graph: &Graph, inputs: &[Array], computed: Vec<Array>) -> Vec<Array> {
        graph
            .outputs
            .iter()
            .zip(computed)
            .map(|(v, a)| match *v {
                Value::Input(i) => inputs[i].clone(),
                Value::Const(c) => graph.consts[c].clone(),
                Value::Node(..) => a,
            })
            .collect()
    }
}

impl std::fmt::Debug for GraphReplay {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("GraphReplay")
    }
}

/// `KILN_LOG=compile` reports graph captures.
fn log(msg: &str) {
    if std::env::var("KILN_LOG").is_ok_and(|v| v.contains("compile")) {
        eprintln!("kiln compile: {msg}");
    }
}
