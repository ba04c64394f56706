//! The interface every device backend implements: everything the core needs from a device.
//! The core (kiln-core) holds the lazy graph and knows no backend crate; the facade crate
//! (`kiln`) registers the CPU and CUDA backends with it. Evaluating a primitive is the one
//! duty without a default; the rest (transfers, completion events, graph capture, kernel
//! prebuild, fused fast ops) default to what a host-synchronous backend does: nothing.

mod device_work;
mod memory;
mod prebuild;

pub use device_work::{CompletionEvent, DeviceGraph, DeviceSpan, GraphCapture, IssueGuard};
pub use memory::DeviceMemory;
pub use prebuild::{BuildKernel, BuildOutcome, BuildReport, KernelNode};

use crate::{Buffer, DType, Device, FastOp, Layout, Primitive, Result, Shape};

/// Which calls of one primitive a backend runs together (`Backend::runs_together`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Together {
    /// Calls whose first input is the same array (products of one x: q, k, v).
    SharedInput,
    /// Any calls with equal parameters whose inputs are ready (RoPE of q and of k).
    Independent,
}

/// A producer and the consumer of its one output, as [`Backend::eval_chained`] takes them.
pub struct Chained<'a> {
    pub producer: &'a Primitive,
    /// The producer's inputs, evaluated on the device.
    pub p_inputs: &'a [ArrayData],
    /// The producer's output shape and dtype.
    pub p_out: &'a (Shape, DType),
    pub consumer: &'a Primitive,
    /// The consumer's inputs after the first (the producer's output).
    pub c_rest: &'a [ArrayData],
    pub c_out: &'a (Shape, DType),
}

/// An evaluated input or output: a buffer, where its elements sit, and their dtype.
#[derive(Debug, Clone)]
pub struct ArrayData {
    pub buffer: Buffer,
    pub layout: Layout,
    pub dtype: DType,
}

/// A device's kernels and how the core drives the device. Backends never see the lazy
/// graph: only a primitive, its evaluated inputs and the output dtypes/shapes the front end
/// inferred (or, for prebuild, the nodes a compiled call will run).
pub trait Backend: Send + Sync {
    /// Why this device cannot run in this process (no driver, no device), or `None`.
    fn unavailable_reason(&self) -> Option<String> {
        None
    }

    /// Whether this backend has a kernel for `prim` over these dtypes (inputs', then
    /// outputs'); the core sends what it lacks to the CPU.
    fn supports(&self, prim: &Primitive, dtypes: &mut dyn Iterator<Item = DType>) -> bool {
        let _ = (prim, dtypes);
        true
    }

    /// Computes the outputs of `prim`. `outputs` gives each output's shape and dtype;
    /// the backend allocates them (it may reuse an input buffer it solely owns).
    fn eval(
        &self,
        prim: &Primitive,
        inputs: &[ArrayData],
        outputs: &[(Shape, DType)],
    ) -> Result<Vec<ArrayData>>;

    /// `eval` where `donated[i]` says input `i`'s buffer is referenced by nothing but this
    /// call (the caller checked), so the kernel may write an output into it. Backends that
    /// write in place nowhere keep this default.
    fn eval_donating(
        &self,
        prim: &Primitive,
        inputs: &[ArrayData],
        donated: &[bool],
        outputs: &[(Shape, DType)],
    ) -> Result<Vec<ArrayData>> {
        let _ = donated;
        self.eval(prim, inputs, outputs)
    }

    /// How calls of `prim` may be grouped for [`Backend::eval_together`] (`None`: they are
    /// not; the core looks for groups only where this says so).
    fn runs_together(&self, prim: &Primitive) -> Option<Together> {
        let _ = prim;
        None
    }

    /// Runs calls of `prim` (one output each, equal parameters; grouped as `runs_together`
    /// says) as one kernel: `inputs[i]` are call `i`'s inputs, `donated[i]` which of them
    /// only that call holds (see `eval_donating`), `outputs[i]` its output's shape and
    /// dtype. `None`, or an error, where it cannot take them; either way nothing has run,
    /// and the core runs each call on its own.
    fn eval_together(
        &self,
        prim: &Primitive,
        inputs: &[Vec<ArrayData>],
        donated: &[Vec<bool>],
        outputs: &[&(Shape, DType)],
    ) -> Option<Result<Vec<ArrayData>>> {
        let _ = (prim, inputs, donated, outputs);
        None
    }

    /// Whether `consumer` may take the call computing its first input into its kernel
    /// (`Backend::runs_chained` then says which producers); the core looks only then.
    fn chains_into(&self, consumer: &Primitive) -> bool {
        let _ = consumer;
        false
    }

    /// Whether `producer`'s one output, read by `consumer` as its first input, may be
    /// computed in `consumer`'s kernel ([`Backend::eval_chained`]).
    fn runs_chained(&self, producer: &Primitive, consumer: &Primitive) -> bool {
        let _ = (producer, consumer);
        false
    }

    /// `chain.producer` and `chain.consumer` as one kernel: both outputs. `None`, or an
    /// error, where it cannot; either way nothing has run, and the core runs each on its own.
    fn eval_chained(&self, chain: &Chained) -> Option<Result<(ArrayData, ArrayData)>> {
        let _ = chain;
        None
    }

    /// The allocator of this device's memory (counters, cache, limits).
    fn memory(&self) -> &'static dyn DeviceMemory;

    /// `data`, which lives on the host or on this device, copied to `device` (the other
    /// one). Host-only backends never get asked.
    fn transfer(&self, data: &ArrayData, device: Device) -> Result<ArrayData> {
        let _ = data;
        crate::bail!(Unsupported, "transfer", "This backend cannot move data to {device}.")
    }

    /// Waits until all work issued to the device has finished (faults surface here).
    fn synchronize(&self) -> Result<()> {
        Ok(())
    }

    /// Marks the calling thread as issuing device work until the guard drops, so a graph
    /// capture on another thread does not record it (`None`: nothing to guard).
    fn issuing(&self) -> Option<IssueGuard> {
        None
    }

    /// An event marking the end of the work issued so far (`None`: work is done when
    /// issued, or the device is recording a graph).
    fn completion_event(&self) -> Result<Option<Box<dyn CompletionEvent>>> {
        Ok(None)
    }

    /// Starts timing the device work issued from now on, for the profiler.
    fn profile_span(&self) -> Option<Box<dyn DeviceSpan>> {
        None
    }

    /// Recording issued work into a graph that relaunches as one unit, where the device
    /// has it (CUDA graphs).
    fn graph_capture(&self) -> Option<&dyn GraphCapture> {
        None
    }

    /// Builds, in parallel and ahead of the first run, the kernels `nodes` will need;
    /// `None` when this backend builds nothing ahead (or batches are turned off).
    /// `progress`: count the builds on the terminal's progress line.
    fn prebuild(&self, nodes: &[KernelNode], progress: bool) -> Option<BuildReport> {
        let _ = (nodes, progress);
        None
    }

    /// Whether a fused kernel here takes the fast op `op` over inputs of these shapes and
    /// dtypes; otherwise the core records its composition of basic ops.
    fn fuses(&self, op: &FastOp, inputs: &[(&[usize], DType)]) -> bool {
        let _ = (op, inputs);
        true
    }

    /// Whether attention under grad takes the fused training primitives here
    /// (`AttentionTrain`, whose vjp is `AttentionVjp`) for these q, k, v.
    fn fuses_attention_training(
        &self,
        dtype: DType,
        q: &[usize],
        k: &[usize],
        v: &[usize],
    ) -> bool {
        let _ = (dtype, q, k, v);
        false
    }

    /// Checks a user kernel (`FastOp::CKernel`, `FastOp::CudaKernel`) and builds it, so that
    /// its errors raise where it is defined; other ops pass.
    fn prepare_kernel(&self, op: &FastOp) -> Result<()> {
        let _ = op;
        Ok(())
    }
}
