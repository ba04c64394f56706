//! `Array`: a cheap handle to a node of the lazy graph. A node knows its shape, dtype and
//! stream; until evaluated it holds the primitive call that computes it, afterwards a view
//! of a buffer. Evaluation drops the call, and with it the inputs ("detach"), so memory of
//! intermediates is freed as soon as nothing else needs it.

use kiln_base::shape::{size_of, Shape};
use kiln_base::{ArrayData, Buffer, DType, Layout, Primitive, Result, Stream, HOST};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};

/// A lazy n-dimensional array. Cloning is cheap (a reference count).
#[derive(Clone)]
pub struct Array(pub(crate) Arc<Node>);

/// One primitive application shared by its outputs (siblings).
pub(crate) struct OpCall {
    pub(crate) prim: Primitive,
    pub(crate) inputs: Vec<Array>,
    /// The outputs, weakly: an output nobody holds is computed but not kept.
    pub(crate) outputs: OnceLock<Vec<Weak<Node>>>,
    /// Shape and dtype of every output, also of those already dropped.
    pub(crate) output_meta: Vec<(Shape, DType)>,
    /// Held while the call runs, so concurrent evals compute it once.
    pub(crate) running: Mutex<()>,
}

/// What a node is before it has data.
pub(crate) enum Pending {
    /// Computed by a primitive call: output `index` of it.
    Call { call: Arc<OpCall>, index: usize },
    /// A tracer placeholder (compile, vmap): shape and dtype only, never evaluated.
    Placeholder,
    /// Evaluated; the call has been dropped.
    Done,
    /// Its evaluation failed: every later access raises this error again (the kernel may
    /// have written part of a donated buffer, so it is never run a second time).
    Failed(kiln_base::Error),
}

pub(crate) struct Node {
    pub(crate) id: u64,
    pub(crate) shape: Shape,
    pub(crate) dtype: DType,
    pub(crate) stream: Stream,
    pub(crate) pending: Mutex<Pending>,
    pub(crate) data: OnceLock<ArrayData>,
    /// A copy of `data` on the other device (host <-> GPU), made the first time an op, a
    /// print or a numpy conversion needs it there, so each array moves at most once.
    pub(crate) mirror: OnceLock<ArrayData>,
    /// Depends on the inputs of a running transform (grad, jvp, vmap): while a transform is
    /// active, evaluating this node keeps its call so the transform can still walk it.
    pub(crate) tracer: bool,
    /// The evaluation that computed this array on the GPU (`completion.rs`; 0: unknown).
    pub(crate) evaluation: AtomicU64,
    /// The issuing thread's job computing this array (`background.rs`; 0: none).
    pub(crate) queued: AtomicU64,
}

static NEXT_ID: AtomicU64 = AtomicU64::new(1);

impl Node {
    fn new(shape: Shape, dtype: DType, stream: Stream, pending: Pending) -> Node {
        let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
        let (pending, data) = (Mutex::new(pending), OnceLock::new());
        let (mirror, evaluation, queued) = (OnceLock::new(), AtomicU64::new(0), AtomicU64::new(0));
        let tracer = false;
        Node { id, shape, dtype, stream, pending, data, mirror, tracer, evaluation, queued }
    }

    /// Takes the pending call out (poisoning is impossible to observe here: the lock guards a
    /// plain enum swap).
    pub(crate) fn take_call(&self) -> Option<Arc<OpCall>> {
        let mut p = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        match std::mem::replace(&mut *p, Pending::Done) {
            Pending::Call { call, .. } => Some(call),
            other => {
                *p = other;
                None
            }
        }
    }
}

impl Drop for Node {
    /// Frees a graph iteratively: the default recursive drop of a long chain of `Arc`s
    /// overflows the stack. Inputs this node solely owns are unlinked and queued instead.
    fn drop(&mut self) {
        let mut stack: Vec<Arc<OpCall>> = Vec::new();
        stack.extend(self.take_call());
        while let Some(call) = stack.pop() {
            let Some(mut call) = Arc::into_inner(call) else { continue };
            for input in call.inputs.drain(..) {
                if let Some(node) = Arc::into_inner(input.0) {
                    stack.extend(node.take_call());
                    // `node` drops here with no call left: no recursion.
                }
            }
        }
    }
}

impl std::fmt::Debug for Array {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Array(id={}, shape={:?}, dtype={})", self.id(), self.shape(), self.dtype())
    }
}

impl Array {
    /// Builds the outputs of one primitive call (the ops layer validated the inputs and
    /// inferred `outputs`).
    pub fn from_call(
        prim: Primitive,
        inputs: Vec<Array>,
        outputs: Vec<(Shape, DType)>,
        stream: Stream,
    ) -> Vec<Array> {
        let tracer = inputs.iter().any(|a| a.0.tracer);
        Array::build_call(prim, inputs, outputs, stream, tracer)
    }

    fn build_call(
        prim: Primitive,
        inputs: Vec<Array>,
        outputs: Vec<(Shape, DType)>,
        stream: Stream,
        tracer: bool,
    ) -> Vec<Array> {
        let call = Arc::new(OpCall {
            prim,
            inputs,
            outputs: OnceLock::new(),
            output_meta: outputs.clone(),
            running: Mutex::new(()),
        });
        let arrays: Vec<Array> = outputs
            .into_iter()
            .enumerate()
            .map(|(index, (shape, dtype))| {
                let pending = Pending::Call { call: call.clone(), index };
                let mut node = Node::new(shape, dtype, stream, pending);
                node.tracer = tracer;
                Array(Arc::new(node))
            })
            .collect();
        let weak = arrays.iter().map(|a| Arc::downgrade(&a.0)).collect();
        let _ = call.outputs.set(weak);
        arrays
    }

    /// An evaluated array over existing data.
    pub fn from_data(data: ArrayData, stream: Stream) -> Array {
        let node = Node::new(data.layout.shape.clone(), data.dtype, stream, Pending::Done);
        let _ = node.data.set(data);
        Array(Arc::new(node))
    }

    /// A fresh input of a transform: `x` seen through an identity view, marked as a tracer
    /// so that everything computed from it keeps its graph while the transform runs.
    /// On the default stream like every op: on `x`'s own, a host-made input viewed on the
    /// CPU gave each call's tracer new host data for the GPU to copy again.
    pub fn tracer_of(x: &Array) -> Array {
        let meta = vec![(Shape::from(x.shape()), x.dtype())];
        let inputs = vec![x.clone()];
        let stream = crate::device::default_stream();
        Array::build_call(Primitive::Identity, inputs, meta, stream, true).swap_remove(0)
    }

    /// Whether this array depends on the inputs of a transform that is running now.
    pub fn is_tracer(&self) -> bool {
        self.0.tracer && crate::transforms::is_active()
    }

    /// A placeholder standing for the inputs of a running transform (vmap traces its
    /// function on unbatched placeholders).
    pub fn tracer_placeholder(shape: &[usize], dtype: DType, stream: Stream) -> Array {
        let mut node = Node::new(shape.into(), dtype, stream, Pending::Placeholder);
        node.tracer = true;
        Array(Arc::new(node))
    }

    /// A placeholder with shape and dtype but no value (tracing).
    pub fn placeholder(shape: &[usize], dtype: DType, stream: Stream) -> Array {
        Array(Arc::new(Node::new(shape.into(), dtype, stream, Pending::Placeholder)))
    }

    /// A host array from raw row-major bytes (`bytes.len() == size * dtype.size()`).
    pub fn from_bytes(bytes: &[u8], shape: &[usize], dtype: DType) -> Result<Array> {
        kiln_base::ensure!(
            bytes.len() == size_of(shape) * dtype.size(),
            Value,
            "array",
            "Got {} bytes for shape {} of {dtype}.",
            bytes.len(),
            kiln_base::shape::fmt_shape(shape)
        );
        let buffer = HOST.from_slice(bytes)?;
        Ok(Array::from_buffer(buffer, shape, dtype))
    }

    /// A host array from typed row-major values.
    pub fn from_slice<T: HostElement>(values: &[T], shape: &[usize]) -> Result<Array> {
        Array::from_bytes(bytemuck::cast_slice(values), shape, T::DTYPE)
    }

    /// A row-major array over a whole buffer.
    pub fn from_buffer(buffer: Buffer, shape: &[usize], dtype: DType) -> Array {
        let layout = Layout::contiguous(shape);
        Array::from_data(ArrayData { buffer, layout, dtype }, crate::device::host_stream())
    }

    pub fn id(&self) -> u64 {
        self.0.id
    }
    pub fn shape(&self) -> &[usize] {
        &self.0.shape
    }
    pub fn dtype(&self) -> DType {
        self.0.dtype
    }
    pub fn stream(&self) -> Stream {
        self.0.stream
    }
    pub fn ndim(&self) -> usize {
        self.0.shape.len()
    }
    pub fn size(&self) -> usize {
        size_of(&self.0.shape)
    }
    pub fn nbytes(&self) -> usize {
        self.size() * self.dtype().size()
    }

    /// Whether this array has data (evaluated or created from data).
    pub fn is_evaluated(&self) -> bool {
        self.0.data.get().is_some()
    }

    /// Whether this is a tracer placeholder.
    pub fn is_placeholder(&self) -> bool {
        matches!(*self.0.pending.lock().unwrap_or_else(|e| e.into_inner()), Pending::Placeholder)
    }

    /// Whether evaluating this array would reach a placeholder (a graph recorded on a
    /// trace's inputs, left behind after the trace: it can never be evaluated). Walks the
    /// pending part of the graph once, iteratively.
    pub fn depends_on_placeholder(&self) -> bool {
        let mut seen = std::collections::HashSet::new();
        let mut stack = vec![self.clone()];
        while let Some(a) = stack.pop() {
            if a.is_evaluated() || !seen.insert(a.id()) {
                continue;
            }
            if a.is_placeholder() {
                return true;
            }
            if let Some(call) = a.call() {
                stack.extend(call.inputs.iter().cloned());
            }
        }
        false
    }

    /// The error its evaluation failed with, if it did.
    pub fn failure(&self) -> Option<kiln_base::Error> {
        match &*self.0.pending.lock().unwrap_or_else(|e| e.into_inner()) {
            Pending::Failed(e) => Some(e.clone()),
            _ => None,
        }
    }

    /// Whether two handles are the same node.
    pub fn same(&self, other: &Array) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }

    /// The primitive and inputs that compute this array, if still pending.
    pub fn primitive(&self) -> Option<(Primitive, Vec<Array>)> {
        self.call().map(|c| (c.prim.clone(), c.inputs.clone()))
    }

    /// The other outputs of this array's primitive call.
    pub fn siblings(&self) -> Vec<Array> {
        let Some(call) = self.call() else { return vec![] };
        let outs = call.outputs.get().map(|v| v.as_slice()).unwrap_or(&[]);
        outs.iter()
            .filter_map(|w| w.upgrade())
            .filter(|n| !Arc::ptr_eq(n, &self.0))
            .map(Array)
            .collect()
    }

    /// Which output of its primitive call this array is (pending arrays only).
    pub fn output_index(&self) -> Option<usize> {
        match &*self.0.pending.lock().unwrap_or_else(|e| e.into_inner()) {
            Pending::Call { index, .. } => Some(*index),
            _ => None,
        }
    }

    pub(crate) fn call(&self) -> Option<Arc<OpCall>> {
        match &*self.0.pending.lock().unwrap_or_else(|e| e.into_inner()) {
            Pending::Call { call, .. } => Some(call.clone()),
            _ => None,
        }
    }

    /// Evaluates (if needed) and returns the buffer view.
    pub fn data(&self) -> Result<&ArrayData> {
        if self.0.data.get().is_none() {
            crate::eval::eval(std::slice::from_ref(self))?;
        }
        Ok(self.0.data.get().expect("eval sets data"))
    }

    /// The evaluated data on `device`: copied there once (and kept) when it lives elsewhere.
    pub fn data_on(&self, device: kiln_base::Device) -> Result<ArrayData> {
        let data = self.data()?;
        if data.buffer.device() == device {
            return Ok(data.clone());
        }
        if let Some(m) = self.0.mirror.get().filter(|m| m.buffer.device() == device) {
            return Ok(m.clone());
        }
        // Its evaluation's event is recorded once the issuing thread's job ends.
        crate::background::wait_for(std::slice::from_ref(self));
        let evaluation = self.0.evaluation.load(Ordering::Relaxed);
        let moved = match crate::completion::ready(evaluation) {
            // Its own evaluation's end, not the work issued since (see completion.rs).
            Some(ready) if device.kind == kiln_base::DeviceKind::Cpu => ready.download(data)?,
            _ => crate::device::to_device(data, device)?,
        };
        let _ = self.0.mirror.set(moved.clone());
        Ok(moved)
    }

    /// The elements in row-major order as bytes (evaluates; copies strided views).
    pub fn to_bytes(&self) -> Result<Vec<u8>> {
        let host = self.data_on(kiln_base::Device::CPU)?;
        let width = self.dtype().size();
        let src = host.buffer.host_slice::<u8>();
        if host.layout.row_contiguous {
            let start = host.layout.offset * width;
            return Ok(src[start..start + self.nbytes()].to_vec());
        }
        let mut out = Vec::with_capacity(self.nbytes());
        for i in host.layout.indices() {
            out.extend_from_slice(&src[i * width..(i + 1) * width]);
        }
        Ok(out)
    }

    /// The elements as `T` (which must be this array's dtype).
    pub fn to_vec<T: HostElement>(&self) -> Result<Vec<T>> {
        kiln_base::ensure!(
            T::DTYPE == self.dtype(),
            Type,
            "to_vec",
            "Array has dtype {}, asked for {}.",
            self.dtype(),
            T::DTYPE
        );
        Ok(bytemuck::pod_collect_to_vec(&self.to_bytes()?))
    }

    /// The single element of a size-1 array.
    pub fn item<T: HostElement>(&self) -> Result<T> {
        kiln_base::ensure!(
            self.size() == 1,
            Value,
            "item",
            "Only size-1 arrays can be converted to scalars, got {} elements.",
            self.size()
        );
        Ok(self.to_vec::<T>()?[0])
    }
}

/// Rust element types with a kiln dtype (bool is stored as `u8` 0/1, use `from_bytes`).
pub trait HostElement: bytemuck::Pod {
    const DTYPE: DType;
}

macro_rules! host_element {
    ($($t:ty => $d:ident),*) => { $(impl HostElement for $t { const DTYPE: DType = DType::$d; })* };
}
host_element!(u8 => U8, u16 => U16, u32 => U32, u64 => U64, i8 => I8, i16 => I16, i32 => I32,
    i64 => I64, half::f16 => F16, half::bf16 => BF16, f32 => F32, f64 => F64);
