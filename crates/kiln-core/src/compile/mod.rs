//! compile: trace a function once on placeholders, simplify the graph, fuse elementwise
//! regions into generated kernels, and replay the result on later calls.
//!
//! - `captured.rs`: the captured graph (numbered inputs, frozen constants, nodes in order);
//! - `simplify.rs`: no-op removal, scalar merging, CSE, dead-code removal (linear time);
//! - `concat.rs`: sums of zero-padded slices (split gradients) -> one concatenate;
//! - `fuse.rs`: elementwise regions -> `Primitive::Fused` (kiln-cpu builds them as C);
//! - `graph_replay.rs`: GPU entries replayed as one captured device graph (the backend's
//!   `GraphCapture`: CUDA graphs);
//! - `prebuild_kernels.rs`: a GPU entry's kernels built in parallel before its first call;
//! - this file: tracing, replay, the Rust-facing cache (`compile`), switches.
//!
//! The Python front end (`kiln.core.compile`) keeps its own cache keyed by pytree structure
//! and constants, and uses [`trace`] and [`Compiled::replay`] underneath.

mod captured;
mod concat;
mod dot;
mod fuse;
mod graph_replay;
mod prebuild_kernels;
mod simplify;

pub use captured::{Graph, Node, Value};
pub use dot::to_dot;
pub use fuse::{Region, MAX_KERNEL_INPUTS};
pub use graph_replay::GraphStatus;

use crate::array::Array;
use crate::transforms::{Transform, TransformScope};
use kiln_base::shape::broadcast_shapes;
use kiln_base::{ensure, DType, Primitive, Result, Shape};
use rustc_hash::FxHashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

/// Whether compile is on (`disable_compile`, `KILN_DISABLE_COMPILE`).
fn enabled_flag() -> &'static AtomicBool {
    static FLAG: OnceLock<AtomicBool> = OnceLock::new();
    FLAG.get_or_init(|| {
        let off = std::env::var("KILN_DISABLE_COMPILE").is_ok_and(|v| !v.is_empty() && v != "0");
        AtomicBool::new(!off)
    })
}

/// Whether compiled functions trace and replay (else they call the function as is).
pub fn is_enabled() -> bool {
    enabled_flag().load(Ordering::Relaxed)
}

/// Switches compile off everywhere, at once, also for functions compiled earlier.
pub fn disable_compile() {
    enabled_flag().store(false, Ordering::Relaxed);
}

pub fn enable_compile() {
    enabled_flag().store(true, Ordering::Relaxed);
}

/// Which passes run (`KILN_COMPILE_MODE=no_simplify|no_fuse`, comma separated).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Passes {
    pub simplify: bool,
    pub fuse: bool,
}

impl Passes {
    pub fn from_env() -> Passes {
        let mode = std::env::var("KILN_COMPILE_MODE").unwrap_or_default();
        let has = |m: &str| mode.split(',').any(|p| p.trim() == m);
        Passes { simplify: !has("no_simplify"), fuse: !has("no_fuse") }
    }
}

/// A traced and optimised function, ready to replay.
#[derive(Debug)]
pub struct Compiled {
    graph: Graph,
    shapeless: bool,
    /// Shapeless replay: for each broadcast node, the values whose shapes it was broadcast
    /// to match (its user's other operands), so it follows their new shapes.
    broadcast_like: Vec<Vec<Value>>,
    /// The graph as traced, after simplify, and the fused regions (explain).
    pub traced: Vec<String>,
    pub simplified: Vec<String>,
    pub regions: Vec<Region>,
    /// GPU entries: the CUDA-graph replay (none for shapeless or CPU entries).
    cuda_graph: Option<graph_replay::GraphReplay>,
    /// The parallel build of the kernels the first call needed (set at the first replay
    /// over real inputs of the traced shapes; `None` inside: nothing to build on the GPU).
    prebuilt: OnceLock<Option<kiln_base::backend::BuildReport>>,
    /// Replays over real inputs (explain, the report: the first call and each cache hit).
    replays: AtomicU64,
}

/// Traces `fun` on placeholders shaped like `inputs` and optimises the graph.
///
/// `inputs` are the real arguments: a constant of the trace that is one of them means the
/// function read an argument through a closure instead of its parameter (an error, since
/// the compiled graph would freeze that call's value).
pub fn trace<F>(fun: F, inputs: &[Array], shapeless: bool) -> Result<Compiled>
where
    F: FnOnce(&[Array]) -> Result<Vec<Array>>,
{
    let traced = capture(fun, inputs, shapeless)?;
    Ok(optimise(traced, shapeless, Passes::from_env()))
}

/// Runs `fun` on placeholders shaped like `inputs` and returns the graph as traced, before
/// any pass (what `trace` optimises; function export saves it).
pub fn capture<F>(fun: F, inputs: &[Array], shapeless: bool) -> Result<Graph>
where
    F: FnOnce(&[Array]) -> Result<Vec<Array>>,
{
    let placeholders: Vec<Array> = inputs
        .iter()
        .map(|a| Array::tracer_placeholder(a.shape(), a.dtype(), a.stream()))
        .collect();
    let outputs = {
        let _scope = TransformScope::enter(Transform::Compile);
        let _shapeless = shapeless.then(|| TransformScope::enter(Transform::Shapeless));
        fun(&placeholders)?
    };
    let traced = Graph::capture(&placeholders, &outputs, inputs)?;
    for c in &traced.consts {
        ensure!(
            !c.is_placeholder(),
            Value,
            "compile",
            "The function uses a placeholder from another trace (an array created inside \
             another compiled or transformed function)."
        );
    }
    Ok(traced)
}

/// Runs `passes` over a captured graph (a trace's, or an imported function's).
pub fn optimise(traced: Graph, shapeless: bool, passes: Passes) -> Compiled {
    // Counts taken from traced shapes are constants unless shapes change at replay.
    let folded;
    let source = if shapeless {
        &traced
    } else {
        folded = simplify::fold_counts(&traced);
        &folded
    };
    let simplified = if passes.simplify {
        let mut merged = simplify::simplify(source);
        // Slices baked at traced sizes tile the axis only at those sizes.
        if !shapeless && concat::sums_of_padded_slices(&mut merged) > 0 {
            merged = simplify::remove_dead(&merged);
        }
        merged
    } else {
        source.clone()
    };
    let (graph, regions) = if passes.fuse {
        let (fused, regions) = fuse::fuse(&simplified);
        // Broadcast scalars folded into kernels as literals are dead now.
        (simplify::remove_dead(&fused), regions)
    } else {
        (simplified.clone(), Vec::new())
    };
    let broadcast_like = if shapeless { broadcast_partners(&graph) } else { Vec::new() };
    let cuda_graph = if shapeless { None } else { graph_replay::GraphReplay::new(&graph) };
    Compiled {
        cuda_graph,
        prebuilt: OnceLock::new(),
        replays: AtomicU64::new(0),
        broadcast_like,
        traced: traced.describe(),
        simplified: simplified.describe(),
        regions,
        graph,
        shapeless,
    }
}

/// For each broadcast node, the values whose new shapes its shape follows at replay (empty:
/// it keeps its traced shape). Under an elementwise user (every operand of the output's
/// shape) these are the user's operands before broadcasting, so `a * b` traced on (3, 1) x
/// (1, 3) replays on (4, 1) x (1, 4). Under another user, one operand that has the
/// broadcast's shape without being broadcast itself (or that follows a partner of its own:
/// gradients add broadcasts).
fn broadcast_partners(graph: &Graph) -> Vec<Vec<Value>> {
    let broadcast_source = |v: &Value| match v {
        Value::Node(n, _) if matches!(graph.nodes[*n].prim, Primitive::BroadcastTo { .. }) => {
            Some(graph.nodes[*n].inputs[0])
        }
        _ => None,
    };
    // Replay builds nodes in order: what a broadcast follows must exist before it.
    let before = |p: &Value, b: usize| !matches!(p, Value::Node(pn, _) if *pn >= b);
    let mut like: Vec<Vec<Value>> = vec![Vec::new(); graph.nodes.len()];
    for node in &graph.nodes {
        let out = node.outputs[0].0.as_slice();
        let same_shape = |v: &&Value| graph.meta(**v).0 == out;
        let elementwise =
            node.prim.broadcasts_inputs() && node.inputs.iter().all(|v| same_shape(&v));
        if elementwise {
            let sources: Vec<Value> =
                node.inputs.iter().map(|v| broadcast_source(v).unwrap_or(*v)).collect();
            for v in &node.inputs {
                if let (Value::Node(b, _), Some(_)) = (v, broadcast_source(v)) {
                    if like[*b].is_empty() {
                        like[*b] = sources.iter().filter(|p| before(p, *b)).copied().collect();
                    }
                }
            }
            continue;
        }
        let partner =
            node.inputs.iter().filter(same_shape).find(|v| broadcast_source(v).is_none()).or_else(
                || {
                    node.inputs
                        .iter()
                        .filter(same_shape)
                        .find(|v| matches!(v, Value::Node(b, _) if !like[*b].is_empty()))
                },
            );
        for v in &node.inputs {
            if let (Value::Node(b, _), Some(p)) = (v, partner) {
                if broadcast_source(v).is_some() && like[*b].is_empty() && before(p, *b) {
                    like[*b] = vec![*p];
                }
            }
        }
    }
    like
}

impl Compiled {
    /// The optimised graph.
    pub fn graph(&self) -> &Graph {
        &self.graph
    }

    /// The entry's CUDA graph (GPU entries that are not shapeless).
    pub fn cuda_graph_status(&self) -> Option<GraphStatus> {
        self.cuda_graph.as_ref().map(graph_replay::GraphReplay::status)
    }

    /// What the parallel build before the first GPU call did (explain); `None` before the
    /// first call, for CPU entries, or with nothing to build.
    pub fn prebuild_report(&self) -> Option<&kiln_base::backend::BuildReport> {
        self.prebuilt.get().and_then(Option::as_ref)
    }

    /// Before the first call over real inputs: the GPU kernels it will launch, built in
    /// parallel (concurrent first calls wait for one batch). Shapeless entries predict only
    /// for inputs of the traced shapes, the ones the graph's nodes record.
    fn prebuild_kernels(&self, inputs: &[Array]) {
        if self.prebuilt.get().is_some()
            || inputs.iter().any(|a| a.is_tracer() || a.is_placeholder())
            || inputs.iter().zip(&self.graph.inputs).any(|(a, (s, _))| a.shape() != s.as_slice())
        {
            return;
        }
        self.prebuilt.get_or_init(|| prebuild_kernels::prebuild(&self.graph, inputs));
    }

    /// Number of primitive calls one replay records.
    pub fn num_nodes(&self) -> usize {
        self.graph.nodes.len()
    }

    /// How many times this entry was replayed over real inputs.
    pub fn replays(&self) -> u64 {
        self.replays.load(Ordering::Relaxed)
    }

    /// Builds the optimised graph over `inputs` (lazy, like every op) and returns its
    /// outputs.
    pub fn replay(&self, inputs: &[Array]) -> Result<Vec<Array>> {
        let op = "compile";
        let g = &self.graph;
        ensure!(
            inputs.len() == g.inputs.len(),
            Value,
            op,
            "Expected {} array inputs, got {}.",
            g.inputs.len(),
            inputs.len()
        );
        for (i, (a, (shape, dtype))) in inputs.iter().zip(&g.inputs).enumerate() {
            ensure!(
                a.dtype() == *dtype,
                Value,
                op,
                "Input {i} has dtype {}, traced with {dtype}.",
                a.dtype()
            );
            if !self.shapeless {
                ensure!(
                    a.shape() == shape.as_slice(),
                    Value,
                    op,
                    "Input {i} has shape {:?}, traced with {:?}.",
                    a.shape(),
                    shape
                );
            }
        }
        self.prebuild_kernels(inputs);
        if !inputs.iter().any(|a| a.is_tracer() || a.is_placeholder()) {
            self.replays.fetch_add(1, Ordering::Relaxed);
        }
        if let Some(replay) = &self.cuda_graph {
            let timer = crate::profile::Timer::start(kiln_base::Device::GPU);
            if let Some(outputs) = replay.call(g, inputs)? {
                if let Some(t) = timer {
                    t.span(
                        format!("CudaGraph({} nodes)", g.nodes.len()),
                        "graph",
                        kiln_base::Device::GPU,
                    );
                }
                return Ok(outputs);
            }
        }
        let mut values: Vec<Vec<Array>> = Vec::with_capacity(g.nodes.len());
        let get = |v: Value, values: &Vec<Vec<Array>>| match v {
            Value::Input(i) => inputs[i].clone(),
            Value::Const(c) => g.consts[c].clone(),
            Value::Node(n, k) => values[n][k].clone(),
        };
        for (i, node) in g.nodes.iter().enumerate() {
            let mut args: Vec<Array> = node.inputs.iter().map(|&v| get(v, &values)).collect();
            let mut prim = node.prim.clone();
            let outputs = if self.shapeless {
                let like = self.broadcast_like.get(i).map(Vec::as_slice).unwrap_or(&[]);
                if matches!(prim, Primitive::BroadcastTo { .. }) && !like.is_empty() {
                    let mut shape = Shape::from(args[0].shape());
                    for &v in like {
                        shape = broadcast_shapes("broadcast_to", &shape, get(v, &values).shape())?;
                    }
                    prim = Primitive::BroadcastTo { shape };
                }
                if prim.broadcasts_inputs() {
                    broadcast_args(&mut args, node.stream)?;
                }
                let specs: Vec<(&[usize], DType)> =
                    args.iter().map(|a| (a.shape(), a.dtype())).collect();
                prim.reinfer(&specs)?;
                let outputs = prim.output_shapes(&specs)?;
                crate::ops::check_sizes(prim.name(), &outputs)?;
                outputs
            } else {
                node.outputs.clone()
            };
            values.push(Array::from_call(prim, args, outputs, node.stream));
        }
        Ok(g.outputs.iter().map(|&v| get(v, &values)).collect())
    }
}

/// Elementwise operands of one shape at trace time whose new shapes differ: each is
/// broadcast (a view) to their common shape, as the ops layer would have done.
fn broadcast_args(args: &mut [Array], stream: kiln_base::Stream) -> Result<()> {
    let mut shape = Shape::new();
    for a in args.iter() {
        shape = broadcast_shapes("compile", &shape, a.shape())?;
    }
    for a in args.iter_mut() {
        if a.shape() != shape.as_slice() {
            let prim = Primitive::BroadcastTo { shape: shape.clone() };
            let out = vec![(shape.clone(), a.dtype())];
            *a = Array::from_call(prim, vec![a.clone()], out, stream).swap_remove(0);
        }
    }
    Ok(())
}

/// Shapes and dtypes of a call's inputs (the Rust cache key).
type Signature = Vec<(Shape, DType)>;

/// A compiled Rust function with its cache: one trace per input signature (shapes and
/// dtypes), replayed on later calls.
pub struct CompiledFn<F> {
    fun: F,
    cache: Mutex<FxHashMap<Signature, Arc<Compiled>>>,
    traces: AtomicU64,
}

/// Compiles `fun`: `kiln_core::compile::compile(|x| ...).call(&[x])`.
pub fn compile<F>(fun: F) -> CompiledFn<F>
where
    F: Fn(&[Array]) -> Result<Vec<Array>>,
{
    CompiledFn { fun, cache: Mutex::new(FxHashMap::default()), traces: AtomicU64::new(0) }
}

impl<F> CompiledFn<F>
where
    F: Fn(&[Array]) -> Result<Vec<Array>>,
{
    pub fn call(&self, inputs: &[Array]) -> Result<Vec<Array>> {
        if !is_enabled() || inputs.iter().any(Array::is_tracer) {
            return (self.fun)(inputs);
        }
        let key: Vec<(Shape, DType)> =
            inputs.iter().map(|a| (Shape::from(a.shape()), a.dtype())).collect();
        let found = self.cache.lock().unwrap_or_else(|e| e.into_inner()).get(&key).cloned();
        let compiled = match found {
            Some(c) => c,
            None => {
                let c = Arc::new(trace(&self.fun, inputs, false)?);
                self.traces.fetch_add(1, Ordering::Relaxed);
                self.cache.lock().unwrap_or_else(|e| e.into_inner()).insert(key, c.clone());
                c
            }
        };
        compiled.replay(inputs)
    }

    /// How many times the function was traced.
    pub fn traces(&self) -> u64 {
        self.traces.load(Ordering::Relaxed)
    }

    /// The compiled graph for these inputs' signature, if traced.
    pub fn entry(&self, inputs: &[Array]) -> Option<Arc<Compiled>> {
        let key: Vec<(Shape, DType)> =
            inputs.iter().map(|a| (Shape::from(a.shape()), a.dtype())).collect();
        self.cache.lock().unwrap_or_else(|e| e.into_inner()).get(&key).cloned()
    }
}
