//! Batched launches: the kernels one thread issues while it holds the issuing guard (an
//! evaluation, see `issuing.rs`) are held back and go to the stream together when the guard
//! drops, anything else needs the stream or 128 have gathered; a batch whose kernel sequence
//! came before runs as one CUDA graph, its nodes' arguments updated in place.
//!
//! Why: an eager decode step of an 8B model is about 560 kernels, and on the H200 machine a
//! driver launch costs about 4.4 us of host time while updating a graph node's arguments
//! costs about 0.55 us and a graph launch 6-40 us (`.carry/graphcost.cu`-style probe, one
//! run): the step was bound by the host issuing it. mlx-lm's step repeats its kernels with
//! new offsets and buffers every token, which is what an update handles.
//!
//! Order: every other use of the stream (copies, events, cuBLAS, cuFFT, NCCL, captures,
//! synchronising) goes through `Gpu::stream()`, which flushes the batch first, and a block
//! given back to the driver flushes too, so work reaches the stream in the order it was
//! issued. A thread that does not own the batch launches directly after flushing it.
//!
//! Off by default for now: `KILN_EAGER_GRAPHS=1` (or `set_eager_graphs`) turns it on. In its
//! first measurement (8B 4-bit decode on the H200) it issued a step in 3.2 ms instead of 4.2
//! but the step's rate rose only from 164 to 171 tokens/s, and an evaluation waited for
//! alone took longer (6.6 ms against 4.3): the device side of the graphs needs a look first.
//! `KILN_LOG=graphs` reports each graph made.

use crate::runtime::{driver_error, gpu};
use cudarc::driver::{result, sys};
use kiln_base::Result;
use rustc_hash::FxHashMap;
use std::cell::Cell;
use std::hash::{Hash, Hasher};
use std::sync::{Mutex, MutexGuard, OnceLock};

/// Fewer kernels than this launch directly (a graph launch costs about one kernel launch).
const MIN_GRAPH: usize = 8;
/// A batch goes to the stream once it holds this many kernels, so the GPU starts on an
/// evaluation while the rest is issued (a whole 8B decode step held back ran after its
/// 3.2 ms of issuing); the chunks of a repeating step repeat too, each its own graph.
const MAX_BATCH: usize = 128;
/// Executable graphs kept (each is a few bytes per node on the device).
const MAX_EXECS: usize = 64;
/// A kernel sequence becomes a graph the second time it is flushed.
const SEEN_BEFORE_GRAPH: u32 = 2;

/// A kernel's arguments laid out by value: every argument's 8-byte words one after another
/// in one vector (one allocation however many arguments), and where each starts.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct ArgWords {
    words: Vec<u64>,
    starts: Vec<u32>,
}

impl ArgWords {
    /// Appends one argument made of `words`.
    pub(crate) fn push(&mut self, words: impl IntoIterator<Item = u64>) {
        self.starts.push(self.words.len() as u32);
        self.words.extend(words);
    }

    /// A pointer to each argument's first word, as the driver takes them (valid while `self`
    /// is neither moved nor changed).
    fn params(&mut self) -> Vec<*mut std::ffi::c_void> {
        let base = self.words.as_mut_ptr();
        // SAFETY: every start is an index into `words` (pushed with its words).
        self.starts
            .iter()
            .map(|&s| unsafe { base.add(s as usize) } as *mut std::ffi::c_void)
            .collect()
    }
}

/// One kernel launch as the driver takes it.
#[derive(Clone, PartialEq)]
pub(crate) struct Launch {
    /// The primitive, for errors.
    pub op: &'static str,
    pub func: sys::CUfunction,
    pub blocks: u32,
    pub threads: u32,
    pub shared: u32,
    /// Its arguments' bytes as 8-byte words.
    pub words: ArgWords,
}

impl Launch {
    fn params(&mut self) -> Vec<*mut std::ffi::c_void> {
        self.words.params()
    }

    fn node_params(&self, params: &mut [*mut std::ffi::c_void]) -> sys::CUDA_KERNEL_NODE_PARAMS {
        sys::CUDA_KERNEL_NODE_PARAMS {
            func: self.func,
            gridDimX: self.blocks,
            gridDimY: 1,
            gridDimZ: 1,
            blockDimX: self.threads,
            blockDimY: 1,
            blockDimZ: 1,
            sharedMemBytes: self.shared,
            kernelParams: params.as_mut_ptr(),
            extra: std::ptr::null_mut(),
            kern: std::ptr::null_mut(),
            ctx: std::ptr::null_mut(),
        }
    }

    /// Launches on `stream`: as a programmatic dependent launch where kernels go out early
    /// (not while capturing, unless `early_in_graphs`), so the kernel may be scheduled before the one ahead of it has
    /// flushed its writes; its first statement waits for them (`nvrtc::GRID_WAIT`), so only
    /// the launch gap is overlapped.
    fn run(&mut self, stream: sys::CUstream) -> Result<()> {
        let mut params = self.params();
        let node = self.node_params(&mut params);
        let early = early_launches() && (!CAPTURING.with(Cell::get) || early_in_graphs());
        let launched = if early {
            let mut attr = sys::CUlaunchAttribute {
                id: sys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION,
                pad: [0; 4],
                value: sys::CUlaunchAttributeValue { programmaticStreamSerializationAllowed: 1 },
            };
            let config = sys::CUlaunchConfig {
                gridDimX: node.gridDimX,
                gridDimY: node.gridDimY,
                gridDimZ: node.gridDimZ,
                blockDimX: node.blockDimX,
                blockDimY: node.blockDimY,
                blockDimZ: node.blockDimZ,
                sharedMemBytes: node.sharedMemBytes,
                hStream: stream,
                attrs: &mut attr,
                numAttrs: 1,
            };
            // SAFETY: as below; `config` and `attr` outlive the call, and every kernel kiln
            // builds for this architecture starts with the grid wait.
            unsafe { sys::cuLaunchKernelEx(&config, node.func, node.kernelParams, node.extra) }
                .result()
        } else {
            // SAFETY: `func` is a loaded kernel whose parameters match `words` (the caller
            // laid them out for its signature); every pointer argument is a live device
            // allocation kept alive by its buffers until the stream reaches the kernel
            // (blocks are reused only by work issued later on the same stream).
            unsafe {
                result::launch_kernel(
                    node.func,
                    (node.gridDimX, 1, 1),
                    (node.blockDimX, 1, 1),
                    node.sharedMemBytes,
                    stream,
                    &mut params,
                )
            }
        };
        launched.map_err(|e| driver_error(self.op, e))
    }
}

thread_local! {
    /// Set while this thread captures a graph (cuda_graph.rs; a capture holds the issuing
    /// lock, so no other thread launches meanwhile): its launches go out plain.
    static CAPTURING: Cell<bool> = const { Cell::new(false) };
}

/// Marks this thread as capturing a graph until dropped (also when a capture fails or
/// panics).
pub(crate) struct CapturingLaunches(());

impl CapturingLaunches {
    pub(crate) fn start() -> CapturingLaunches {
        CAPTURING.with(|c| c.set(true));
        CapturingLaunches(())
    }
}

impl Drop for CapturingLaunches {
    fn drop(&mut self) {
        CAPTURING.with(|c| c.set(false));
    }
}

/// The driver's CUDA version (12030 for 12.3), 0 if it cannot say.
fn driver_version() -> i32 {
    static VERSION: OnceLock<i32> = OnceLock::new();
    *VERSION.get_or_init(|| {
        let mut version = 0;
        // SAFETY: an out-parameter; the driver is loaded (a GPU is open).
        let ok = unsafe { sys::cuDriverGetVersion(&mut version) }.result().is_ok();
        if ok {
            version
        } else {
            0
        }
    })
}

/// Whether the driver takes programmatic graph edges (`cuGraphAddDependencies_v2`, CUDA 12.3;
/// on an older driver the missing symbol would panic, not fail).
fn programmatic_edges() -> bool {
    driver_version() >= 12030
}

/// Whether launches being captured into a graph (compile's replays) go out early too, so the
/// graph keeps programmatic edges: `KILN_EARLY_LAUNCH_IN_GRAPHS=1`, with a CUDA 12.3 driver.
/// Off by default until it has run on a GPU (session 27 built it after its last device
/// call); a training step replayed as a graph is what it is for.
fn early_in_graphs() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| {
        std::env::var("KILN_EARLY_LAUNCH_IN_GRAPHS").is_ok_and(|v| v.trim() == "1")
            && programmatic_edges()
    })
}

/// Whether kernels go out as programmatic dependent launches: on sm_90 and later (whose
/// kernels kiln builds with the grid wait), unless `KILN_EARLY_LAUNCH=0`.
fn early_launches() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| {
        let off = std::env::var("KILN_EARLY_LAUNCH").is_ok_and(|v| v.trim() == "0");
        // (`cuLaunchKernelEx` and the attribute are CUDA 12's)
        !off && gpu().is_ok_and(|g| g.arch.0 >= 9) && driver_version() >= 12000
    })
}

/// An executable graph of one kernel sequence, with the arguments its nodes hold now.
struct Exec {
    graph: sys::CUgraph,
    exec: sys::CUgraphExec,
    nodes: Vec<sys::CUgraphNode>,
    last: Vec<Launch>,
    used: u64,
}

impl Exec {
    /// A graph of `launches` in order, each node after the one before (through a
    /// programmatic edge where kernels go out early: the graph keeps their overlap).
    fn build(launches: &mut [Launch]) -> Result<Exec> {
        let mut graph = std::ptr::null_mut();
        // SAFETY: creates an empty graph owned by the returned Exec (or destroyed below).
        unsafe { sys::cuGraphCreate(&mut graph, 0) }
            .result()
            .map_err(|e| driver_error("launch", e))?;
        let early = early_launches() && programmatic_edges();
        let edge = sys::CUgraphEdgeData {
            from_port: sys::CU_GRAPH_KERNEL_NODE_PORT_PROGRAMMATIC as u8,
            to_port: 0,
            type_: sys::CUgraphDependencyType::CU_GRAPH_DEPENDENCY_TYPE_PROGRAMMATIC as u8,
            reserved: [0; 5],
        };
        let mut nodes: Vec<sys::CUgraphNode> = Vec::with_capacity(launches.len());
        for l in launches.iter_mut() {
            let mut params = l.params();
            let p = l.node_params(&mut params);
            let mut node = std::ptr::null_mut();
            let prev = nodes.last().copied();
            let deps = match prev {
                Some(ref n) if !early => n as *const _,
                _ => std::ptr::null(),
            };
            // SAFETY: `graph` is live; `p` points at `params`, which outlives the call (the
            // driver copies the argument values); the dependency is a node of this graph.
            let added = unsafe {
                sys::cuGraphAddKernelNode_v2(&mut node, graph, deps, (!deps.is_null()) as usize, &p)
            }
            .result()
            .and_then(|()| match prev {
                // SAFETY: both nodes belong to `graph`; `edge` outlives the call.
                Some(prev) if early => unsafe {
                    sys::cuGraphAddDependencies_v2(graph, &prev, &node, &edge, 1).result()
                },
                _ => Ok(()),
            });
            if let Err(e) = added {
                // SAFETY: the graph is ours and not instantiated.
                let _ = unsafe { result::graph::destroy(graph) };
                return Err(driver_error("launch", e));
            }
            nodes.push(node);
        }
        // SAFETY: the graph is complete.
        match unsafe { result::graph::instantiate(graph, sys::CUgraphInstantiate_flags(0)) } {
            Ok(exec) => Ok(Exec { graph, exec, nodes, last: launches.to_vec(), used: 0 }),
            Err(e) => {
                // SAFETY: as above.
                let _ = unsafe { result::graph::destroy(graph) };
                Err(driver_error("launch", e))
            }
        }
    }

    /// Gives the nodes whose launch differs from the last one `launches`' arguments; returns
    /// how many there were.
    fn update(&mut self, launches: &mut [Launch]) -> Result<u64> {
        if launches.len() != self.nodes.len() {
            kiln_base::bail!(Runtime, "launch", "A different kernel sequence (hash collision).");
        }
        let mut updated = 0;
        for ((l, old), &node) in launches.iter_mut().zip(&self.last).zip(&self.nodes) {
            if l != old {
                updated += 1;
                let mut params = l.params();
                let p = l.node_params(&mut params);
                // SAFETY: `node` belongs to the graph `exec` was made from; a launch already
                // queued keeps the arguments it was queued with (the update applies to later
                // launches only).
                unsafe { sys::cuGraphExecKernelNodeSetParams_v2(self.exec, node, &p) }
                    .result()
                    .map_err(|e| driver_error("launch", e))?;
            }
        }
        Ok(updated)
    }

    /// Destroys the graph once no launch of it can still run.
    fn destroy(self) {
        let _ = gpu().map(|g| {
            // SAFETY: the stream is live; waiting for it leaves no launch of this graph.
            unsafe { result::stream::synchronize(g.raw_stream()) }
        });
        // SAFETY: both handles are owned here and nothing runs the graph any more.
        unsafe {
            let _ = result::graph::exec_destroy(self.exec);
            let _ = result::graph::destroy(self.graph);
        }
    }
}

/// What the batches did so far (`eager_graph_stats`).
#[derive(Clone, Copy, Debug, Default)]
pub struct BatchStats {
    /// Non-empty flushes.
    pub flushes: u64,
    /// Kernels launched one by one (small batches, first sightings, refusals).
    pub direct_launches: u64,
    /// Flushes that ran as a graph.
    pub graph_launches: u64,
    /// Graph nodes whose arguments or grid were updated.
    pub nodes_updated: u64,
    /// Graphs made.
    pub builds: u64,
    /// Graphs dropped because the driver refused an update or a build.
    pub refused: u64,
}

/// The counters since the process started.
pub fn eager_graph_stats() -> BatchStats {
    BATCH.get().map(|m| m.lock().unwrap_or_else(|e| e.into_inner()).stats).unwrap_or_default()
}

#[derive(Default)]
struct Batch {
    stats: BatchStats,
    pending: Vec<Launch>,
    /// Whether some thread owns the batch (its launches are held back).
    owned: bool,
    execs: FxHashMap<u64, Exec>,
    /// Flushes seen per kernel sequence; `u32::MAX`: its graph failed, launch directly.
    seen: FxHashMap<u64, u32>,
    clock: u64,
    /// A failed launch of a flush no caller could be told about.
    error: Option<kiln_base::Error>,
}

// SAFETY: the raw driver handles (functions, graphs) are process-wide objects usable from any
// thread with the context current; the mutex serialises every use.
unsafe impl Send for Batch {}

static BATCH: OnceLock<Mutex<Batch>> = OnceLock::new();

thread_local! {
    /// Whether this thread owns the batch.
    static OWNER: Cell<bool> = const { Cell::new(false) };
}

fn batch() -> MutexGuard<'static, Batch> {
    BATCH.get_or_init(Default::default).lock().unwrap_or_else(|e| e.into_inner())
}

/// 0: read `KILN_EAGER_GRAPHS` on first use; 1: off; 2: on.
static SWITCH: std::sync::atomic::AtomicU8 = std::sync::atomic::AtomicU8::new(0);

/// Whether launches are batched (off unless `KILN_EAGER_GRAPHS=1` or [`set_eager_graphs`]).
pub fn eager_graphs() -> bool {
    use std::sync::atomic::Ordering::Relaxed;
    match SWITCH.load(Relaxed) {
        0 => {
            let on = std::env::var("KILN_EAGER_GRAPHS").is_ok_and(|v| v.trim() == "1");
            SWITCH.store(if on { 2 } else { 1 }, Relaxed);
            on
        }
        s => s == 2,
    }
}

/// Turns batching on or off from the next issuing guard on (tests, and programs that want it).
pub fn set_eager_graphs(on: bool) {
    SWITCH.store(if on { 2 } else { 1 }, std::sync::atomic::Ordering::Relaxed);
}

/// This thread's launches are held back until [`end`] (unless another thread holds them).
pub(crate) fn begin() {
    if !eager_graphs() || !crate::runtime::is_available() {
        return;
    }
    let mut b = batch();
    if !b.owned {
        b.owned = true;
        OWNER.with(|o| o.set(true));
    }
}

/// Flushes this thread's held-back launches and lets the batch go; a launch that fails
/// here (a guard dropping) is reported by the next flush.
pub(crate) fn end_keeping_error() {
    if !OWNER.try_with(|o| o.replace(false)).unwrap_or(false) {
        return;
    }
    let mut b = batch();
    b.owned = false;
    if let Err(e) = b.flush() {
        b.error.get_or_insert(e);
    }
}

/// Queues a launch: held back in this thread's batch, else straight onto the stream after
/// whatever the batch holds.
pub(crate) fn launch(mut l: Launch) -> Result<()> {
    let mut b = batch();
    if OWNER.with(Cell::get) {
        b.pending.push(l);
        if b.pending.len() >= MAX_BATCH {
            return b.flush();
        }
        return Ok(());
    }
    b.flush()?;
    l.run(gpu()?.raw_stream())
}

/// Puts every held-back launch on the stream (called before any other use of it).
pub(crate) fn flush() -> Result<()> {
    match BATCH.get() {
        Some(m) => m.lock().unwrap_or_else(|e| e.into_inner()).flush(),
        None => Ok(()),
    }
}

/// The kernel sequence of a batch: which functions, in order (their grids and arguments
/// may change from one flush to the next: graph updates take those).
fn signature(launches: &[Launch]) -> u64 {
    let mut h = rustc_hash::FxHasher::default();
    launches.len().hash(&mut h);
    for l in launches {
        (l.func as usize).hash(&mut h);
    }
    h.finish()
}

impl Batch {
    fn flush(&mut self) -> Result<()> {
        if let Some(e) = self.error.take() {
            return Err(e);
        }
        if self.pending.is_empty() {
            return Ok(());
        }
        let mut launches = std::mem::take(&mut self.pending);
        let stream = gpu()?.raw_stream();
        self.stats.flushes += 1;
        if launches.len() < MIN_GRAPH {
            return self.direct(&mut launches, stream);
        }
        let key = signature(&launches);
        self.clock += 1;
        if let Some(mut exec) = self.execs.remove(&key) {
            match exec.update(&mut launches) {
                Ok(updated) => {
                    self.stats.nodes_updated += updated;
                    self.stats.graph_launches += 1;
                    // SAFETY: the executable graph is live; the buffers its nodes touch are
                    // kept by their owners until the stream passes them, as for launches.
                    let launched = unsafe { result::graph::launch(exec.exec, stream) };
                    exec.last = launches;
                    exec.used = self.clock;
                    self.execs.insert(key, exec);
                    return launched.map_err(|e| driver_error("launch", e));
                }
                Err(_) => {
                    // An update the driver refuses: this sequence launches directly from now.
                    exec.destroy();
                    self.seen.insert(key, u32::MAX);
                    self.stats.refused += 1;
                    return self.direct(&mut launches, stream);
                }
            }
        }
        if self.seen.len() > 4096 {
            self.seen.clear();
        }
        let seen = self.seen.entry(key).or_insert(0);
        *seen = seen.saturating_add(1);
        if *seen != SEEN_BEFORE_GRAPH {
            return self.direct(&mut launches, stream);
        }
        match Exec::build(&mut launches) {
            Ok(mut exec) => {
                if self.execs.len() >= MAX_EXECS {
                    let oldest = self.execs.iter().min_by_key(|(_, x)| x.used).map(|(k, _)| *k);
                    if let Some(x) = oldest.and_then(|k| self.execs.remove(&k)) {
                        x.destroy();
                    }
                }
                exec.used = self.clock;
                self.stats.builds += 1;
                self.stats.graph_launches += 1;
                if std::env::var("KILN_LOG").is_ok_and(|v| v.contains("graphs")) {
                    eprintln!("kiln: {} kernels issued again: now one CUDA graph", launches.len());
                }
                // SAFETY: as for the update above.
                let launched = unsafe { result::graph::launch(exec.exec, stream) };
                self.execs.insert(key, exec);
                launched.map_err(|e| driver_error("launch", e))
            }
            Err(_) => {
                self.seen.insert(key, u32::MAX);
                self.stats.refused += 1;
                self.direct(&mut launches, stream)
            }
        }
    }

    fn direct(&mut self, launches: &mut [Launch], stream: sys::CUstream) -> Result<()> {
        self.stats.direct_launches += launches.len() as u64;
        launches.iter_mut().try_for_each(|l| l.run(stream))
    }
}

#[cfg(test)]
mod tests {
    use super::ArgWords;

    /// Each parameter pointer points at its own argument's first word; a struct argument's
    /// words stay together.
    #[test]
    fn arguments_lie_one_after_another() {
        let mut a = ArgWords::default();
        a.push([7]);
        a.push([1, 2, 3]);
        a.push(std::iter::empty());
        a.push([9]);
        let params = a.params();
        assert_eq!(params.len(), 4);
        // SAFETY: the pointers point into `a.words`, alive and unchanged here.
        let read = |p: *mut std::ffi::c_void, i: usize| unsafe { *(p as *const u64).add(i) };
        assert_eq!(read(params[0], 0), 7);
        assert_eq!([read(params[1], 0), read(params[1], 1), read(params[1], 2)], [1, 2, 3]);
        assert_eq!(read(params[3], 0), 9);
        assert_eq!(a.words, [7, 1, 2, 3, 9]);
        assert_eq!(a.clone(), a);
    }
}
