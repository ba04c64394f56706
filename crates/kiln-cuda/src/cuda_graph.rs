//! CUDA graphs: a sequence of GPU work captured once from the stream and relaunched as one
//! unit, so a compiled function's hundreds of kernels cost one launch per call.
//!
//! Capture records the launches instead of running them, so every buffer a captured kernel
//! touches must stay put for the graph's life: the caller keeps its inputs and outputs, and
//! the blocks freed during capture (intermediates) are reserved for the graph by the
//! allocator (see `alloc.rs`). Capture is "relaxed" so that a block the cache lacks can still
//! be allocated; nothing else may touch the stream meanwhile, which the one-stream design and
//! the caller's lock on its plan guarantee.

use crate::alloc;
use crate::runtime::{driver_error, gpu};
use cudarc::driver::{result, sys};
use kiln_base::backend::{DeviceGraph, GraphCapture};
use kiln_base::{ArrayData, Buffer, Result};

/// An instantiated graph and the blocks it owns.
pub struct CudaGraph {
    graph: sys::CUgraph,
    exec: sys::CUgraphExec,
    blocks: Vec<(u64, usize)>,
    nodes: usize,
}

// SAFETY: graph handles are driver objects usable from any thread with the context bound
// (`gpu()` binds it before every use).
unsafe impl Send for CudaGraph {}
// SAFETY: as for Send; launching takes `&self` but the driver serialises launches itself.
unsafe impl Sync for CudaGraph {}

/// Records `work`'s GPU launches into a graph instead of running them. On any failure the
/// capture is abandoned and the blocks it reserved go back to the cache.
pub fn capture<T>(work: impl FnOnce() -> Result<T>) -> Result<(CudaGraph, T)> {
    let Some(_alone) = crate::issuing::alone() else {
        // This thread is issuing work already: waiting for the lock would never end.
        kiln_base::bail!(
            Runtime,
            "compile",
            "A CUDA graph cannot be captured while this thread issues GPU work."
        );
    };
    let gpu = gpu()?;
    let stream = gpu.stream()?;
    alloc::begin_capture();
    // Launches go out plain while capturing, whichever way this function is left.
    let _plain = crate::batch::CapturingLaunches::start();
    let mode = sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED;
    // SAFETY: the stream is live; capture mode only changes what the stream records.
    if let Err(e) = unsafe { result::stream::begin_capture(stream, mode) } {
        alloc::release(alloc::end_capture());
        return Err(driver_error("compile", e));
    }
    let value = work();
    // SAFETY: the stream is capturing (begun above); ending returns the recorded graph.
    let ended = unsafe { result::stream::end_capture(stream) };
    let blocks = alloc::end_capture();
    let built = match (value, ended) {
        (Ok(value), Ok(graph)) => {
            instantiate(graph).map(|(exec, nodes)| (graph, exec, nodes, value))
        }
        (Err(e), ended) => {
            if let Ok(graph) = ended {
                // SAFETY: a graph just returned by end_capture, used nowhere else.
                let _ = unsafe { result::graph::destroy(graph) };
            }
            Err(e)
        }
        (Ok(_), Err(e)) => Err(driver_error("compile", e)),
    };
    match built {
        Ok((graph, exec, nodes, value)) => Ok((CudaGraph { graph, exec, blocks, nodes }, value)),
        Err(e) => {
            alloc::release(blocks);
            Err(e)
        }
    }
}

fn instantiate(graph: sys::CUgraph) -> Result<(sys::CUgraphExec, usize)> {
    let mut nodes = 0usize;
    // SAFETY: `graph` is live; a null node array asks only for the count.
    unsafe { sys::cuGraphGetNodes(graph, std::ptr::null_mut(), &mut nodes) }
        .result()
        .map_err(|e| driver_error("compile", e))?;
    // SAFETY: `graph` is live and complete (capture ended).
    let exec = unsafe { result::graph::instantiate(graph, sys::CUgraphInstantiate_flags(0)) };
    match exec {
        Ok(exec) => Ok((exec, nodes)),
        Err(e) => {
            // SAFETY: nothing else holds the graph.
            let _ = unsafe { result::graph::destroy(graph) };
            Err(driver_error("compile", e))
        }
    }
}

impl CudaGraph {
    /// Queues one run of the graph on the stream.
    pub fn launch(&self) -> Result<()> {
        let gpu = gpu()?;
        // SAFETY: the executable graph is live, and every buffer it touches is kept by its
        // owner (the reserved blocks here, the rest by the caller) while it may run.
        unsafe { result::graph::launch(self.exec, gpu.stream()?) }
            .map_err(|e| driver_error("compile", e))
    }

    /// Number of nodes (kernels, copies, memsets) the graph runs.
    pub fn nodes(&self) -> usize {
        self.nodes
    }
}

impl Drop for CudaGraph {
    fn drop(&mut self) {
        // A launch may still be running: stream order hands the blocks to later work only,
        // but destroying a graph in flight is not allowed, so wait for it first.
        let _ = crate::runtime::synchronize();
        // SAFETY: both handles are live and owned here; nothing runs the graph any more.
        unsafe {
            let _ = result::graph::exec_destroy(self.exec);
            let _ = result::graph::destroy(self.graph);
        }
        alloc::release(std::mem::take(&mut self.blocks));
    }
}

/// Copies `nbytes` between device buffers on the stream.
pub fn copy_device(dst: u64, src: u64, nbytes: usize) -> Result<()> {
    if nbytes == 0 {
        return Ok(());
    }
    let gpu = gpu()?;
    // SAFETY: both ranges lie in live device allocations kept by the caller until the
    // stream reaches the copy.
    unsafe { result::memcpy_dtod_async(dst, src, nbytes, gpu.stream()?) }
        .map_err(|e| driver_error("copy", e))
}

/// Whether `layout` addresses its elements row-major (dims of one may have any stride).
fn is_row_major(layout: &kiln_base::Layout) -> bool {
    layout
        .shape
        .iter()
        .zip(kiln_base::shape::row_major_strides(&layout.shape).iter().zip(&layout.strides))
        .all(|(&n, (want, have))| n == 1 || want == have)
}

/// Writes each `src`'s elements row-major into its `dst` (at least `src`'s bytes): the
/// strided copy kernel for a source that is not row-major already. The row-major ones (a graph replay's hundreds
/// of inputs and outputs) go in one kernel launch reading a table of (dst, src, bytes), not
/// a driver call each: at a few microseconds of host time per call, those calls had kept
/// the GPU waiting for the graph's launch.
pub fn copy_all_row_major(items: &[(&kiln_base::ArrayData, &kiln_base::Buffer)]) -> Result<()> {
    let mut table: Vec<u64> = Vec::with_capacity(items.len() * 3);
    for (src, dst) in items {
        let layout = &src.layout;
        let size = src.dtype.size();
        let bytes = layout.size() * size;
        if !is_row_major(layout) {
            crate::copy::copy_into(src, dst, &kiln_base::Layout::contiguous(&layout.shape))?;
        } else if bytes > 0 {
            let from = alloc::device_ptr(&src.buffer, layout.offset as isize, size);
            table.extend([dst.as_ptr() as u64, from, bytes as u64]);
        }
    }
    match table.len() / 3 {
        0 => Ok(()),
        1 => copy_device(table[0], table[1], table[2] as usize),
        n => copy_many(&table, n),
    }
}

const COPY_MANY: &str = "kiln_copy_many";

/// Every thread walks the whole table and copies its share of each range, 16 bytes at a
/// time where both ends are 16-byte aligned.
fn copy_many_source() -> String {
    format!(
        r#"extern "C" __global__ void {COPY_MANY}(const unsigned long long* table, long long n) {{
    unsigned long long tid = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x;
    unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    for (long long t = 0; t < n; ++t) {{
        unsigned char* dst = (unsigned char*)table[3 * t];
        const unsigned char* src = (const unsigned char*)table[3 * t + 1];
        unsigned long long bytes = table[3 * t + 2];
        unsigned long long head = 0;
        if ((((unsigned long long)dst | (unsigned long long)src) & 15) == 0) {{
            unsigned long long words = bytes >> 4;
            uint4* d = (uint4*)dst;
            const uint4* s = (const uint4*)src;
            for (unsigned long long i = tid; i < words; i += stride) d[i] = s[i];
            head = words << 4;
        }}
        for (unsigned long long i = head + tid; i < bytes; i += stride) dst[i] = src[i];
    }}
}}
"#
    )
}

fn copy_many(table: &[u64], n: usize) -> Result<()> {
    static KERNEL: crate::nvrtc::KernelCache<()> = crate::nvrtc::KernelCache::new();
    let f = KERNEL.get(&(), COPY_MANY, copy_many_source)?;
    let gpu = gpu()?;
    let device_table = alloc::DEVICE.alloc(std::mem::size_of_val(table))?;
    // SAFETY: the block holds the table's bytes; from pageable memory the call returns once
    // the source is staged, and the stream orders the upload before the kernel reading it
    // (the block is reused only by later work on the same stream).
    unsafe { result::memcpy_htod_async(device_table.as_ptr() as u64, table, gpu.stream()?) }
        .map_err(|e| driver_error("copy", e))?;
    let words: u64 = table.chunks(3).map(|r| r[2].div_ceil(16)).max().unwrap_or(1);
    let blocks = crate::launch::blocks_for(words, crate::launch::BLOCK as u64);
    let mut args = crate::launch::Args::new();
    args.ptr(device_table.as_ptr() as u64).i64(n as i64);
    crate::launch::launch("copy", f, blocks, crate::launch::BLOCK, 0, &mut args)
}

/// The GPU's `GraphCapture` (see `Backend::graph_capture`).
pub(crate) struct CudaGraphs;

impl GraphCapture for CudaGraphs {
    fn capture(
        &self,
        work: &mut dyn FnMut() -> Result<Vec<ArrayData>>,
    ) -> Result<(Box<dyn DeviceGraph>, Vec<ArrayData>)> {
        let (graph, outputs) = capture(work)?;
        Ok((Box::new(graph), outputs))
    }

    fn copy_all_row_major(&self, copies: &[(&ArrayData, &Buffer)]) -> Result<()> {
        copy_all_row_major(copies)
    }
}

impl DeviceGraph for CudaGraph {
    fn launch(&self) -> Result<()> {
        CudaGraph::launch(self)
    }

    fn nodes(&self) -> usize {
        CudaGraph::nodes(self)
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn copy_many_source_compiles() {
        crate::nvrtc::dump_sources(&[("copy_many.cu".into(), super::copy_many_source())]);
        assert!(super::copy_many_source().contains("uint4"));
    }
}
