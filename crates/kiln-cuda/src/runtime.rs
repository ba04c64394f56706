//! The GPU and its one ordered stream: found once per process, lazily. cudarc loads the CUDA
//! libraries at run time and panics when one is missing, so every library is probed before
//! its first call; a machine without a driver simply has no GPU.

use cudarc::driver::{result, sys};
use kiln_base::{bail, Result};
use std::cell::Cell;
use std::sync::OnceLock;

/// The device kiln runs GPU work on (device 0) and its stream.
pub struct Gpu {
    pub ctx: sys::CUcontext,
    /// All GPU work is issued on this stream, so kernels, copies and buffer reuse are ordered
    /// (reached through `stream()`, which first flushes the launches held back in `batch`).
    stream: sys::CUstream,
    /// Copies to the host of results whose work has finished (`ready.rs`): on `stream`
    /// they would queue behind work issued later (the next token's graph).
    pub copy_stream: sys::CUstream,
    /// Compute capability (major, minor): NVRTC builds for exactly this architecture.
    pub arch: (i32, i32),
    pub name: String,
    pub multiprocessors: u32,
    pub total_memory: usize,
    /// Shared memory one block may ask for (beyond the default 48 KiB by opting in).
    pub shared_per_block: usize,
    /// `COUNTERS` zeroed 32-bit words of device memory for kernels whose last block to finish
    /// a unit of work merges it (decode attention's spans): such a kernel leaves each word it
    /// used at zero again. Made here, before any graph capture could forbid the allocation;
    /// the one stream keeps two such kernels from running at once.
    pub counters: u64,
}

/// Words in [`Gpu::counters`].
pub const COUNTERS: usize = 1 << 16;

// SAFETY: the context and stream handles are process-wide driver objects; the driver API
// is thread-safe, and each thread binds the context before use (`bind`).
unsafe impl Send for Gpu {}
// SAFETY: as for Send; Gpu holds no interior mutability.
unsafe impl Sync for Gpu {}

static GPU: OnceLock<std::result::Result<Gpu, String>> = OnceLock::new();

thread_local! {
    static BOUND: Cell<bool> = const { Cell::new(false) };
}

fn attribute(
    dev: sys::CUdevice,
    attr: sys::CUdevice_attribute,
) -> std::result::Result<i32, String> {
    // SAFETY: `dev` came from device::get.
    unsafe { result::device::get_attribute(dev, attr) }.map_err(|e| e.to_string())
}

fn open() -> std::result::Result<Gpu, String> {
    if std::env::var_os("KILN_DISABLE_GPU").is_some_and(|v| !v.is_empty() && v != "0") {
        return Err("the GPU is disabled by KILN_DISABLE_GPU".into());
    }
    // SAFETY: the probes only try to dlopen the libraries.
    let present = unsafe {
        (
            cudarc::driver::sys::is_culib_present(),
            cudarc::nvrtc::sys::is_culib_present(),
            cudarc::cublas::sys::is_culib_present(),
        )
    };
    match present {
        (false, ..) => return Err("no CUDA driver (libcuda) was found".into()),
        (_, false, _) => return Err("the CUDA runtime compiler (libnvrtc) was not found".into()),
        (_, _, false) => return Err("cuBLAS (libcublas) was not found".into()),
        _ => {}
    }
    result::init().map_err(|e| format!("cuInit failed: {e}"))?;
    let count = result::device::get_count().map_err(|e| e.to_string())?;
    if count < 1 {
        return Err("no CUDA device was found".into());
    }
    let dev = result::device::get(0).map_err(|e| e.to_string())?;
    // SAFETY: `dev` came from device::get; the primary context is retained for the process.
    let ctx = unsafe { result::primary_ctx::retain(dev) }.map_err(|e| e.to_string())?;
    // SAFETY: ctx is a live context.
    unsafe { result::ctx::set_current(ctx) }.map_err(|e| e.to_string())?;
    let stream = result::stream::create(result::stream::StreamKind::NonBlocking)
        .map_err(|e| e.to_string())?;
    let copy_stream = result::stream::create(result::stream::StreamKind::NonBlocking)
        .map_err(|e| e.to_string())?;
    use sys::CUdevice_attribute as A;
    let major = attribute(dev, A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)?;
    let minor = attribute(dev, A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)?;
    let sms = attribute(dev, A::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)?;
    let shared = attribute(dev, A::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)?;
    // SAFETY: `dev` came from device::get.
    let total_memory = unsafe { result::device::total_mem(dev) }.unwrap_or(0);
    // SAFETY: the context is current; a plain device allocation, held for the process, then
    // zeroed in full before any kernel can read it.
    let counters = unsafe {
        let p = result::malloc_sync(COUNTERS * 4).map_err(|e| e.to_string())?;
        result::memset_d8_sync(p, 0, COUNTERS * 4).map_err(|e| e.to_string())?;
        p
    };
    Ok(Gpu {
        ctx,
        stream,
        copy_stream,
        arch: (major, minor),
        name: result::device::get_name(dev).unwrap_or_else(|_| "CUDA device".into()),
        multiprocessors: sms.max(1) as u32,
        total_memory,
        shared_per_block: shared.max(48 << 10) as usize,
        counters,
    })
}

impl Gpu {
    /// The stream, once the launches held back so far (`batch.rs`) are on it: everything
    /// issued to it other than kernel launches comes through here, so it stays in order.
    pub fn stream(&self) -> Result<sys::CUstream> {
        crate::batch::flush()?;
        Ok(self.stream)
    }

    /// The stream as it is, for the batch's own launches.
    pub(crate) fn raw_stream(&self) -> sys::CUstream {
        self.stream
    }
}

/// Why there is no GPU, or `None` when there is one.
pub fn unavailable_reason() -> Option<String> {
    GPU.get_or_init(open).as_ref().err().cloned()
}

/// Whether a GPU can run kiln's work in this process.
pub fn is_available() -> bool {
    GPU.get_or_init(open).is_ok()
}

/// The GPU, with its context current on the calling thread.
pub fn gpu() -> Result<&'static Gpu> {
    match GPU.get_or_init(open) {
        Ok(gpu) => {
            if !BOUND.with(Cell::get) {
                // SAFETY: gpu.ctx is the live primary context.
                if let Err(e) = unsafe { result::ctx::set_current(gpu.ctx) } {
                    bail!(Runtime, "gpu", "Cannot use the GPU on this thread: {e}");
                }
                BOUND.with(|b| b.set(true));
            }
            Ok(gpu)
        }
        Err(why) => bail!(Value, "gpu", "The GPU is not available: {why}."),
    }
}

/// Waits until all GPU work issued so far has finished.
pub fn synchronize() -> Result<()> {
    if !is_available() {
        return Ok(());
    }
    let gpu = gpu()?;
    let _issuing = crate::issuing::issuing();
    let stream = gpu.stream()?;
    // SAFETY: the stream is live for the process.
    unsafe { result::stream::synchronize(stream) }.map_err(|e| driver_error("synchronize", e))
}

/// Whether `stream` is recording a CUDA graph (work issued now becomes graph nodes).
pub(crate) fn capturing(stream: sys::CUstream) -> bool {
    // SAFETY: the stream is one of kiln's live streams.
    let status = unsafe { result::stream::is_capturing(stream) };
    !matches!(status, Ok(sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE))
}

/// A driver error as kiln's error type (asynchronous kernel faults surface here too).
pub fn driver_error(op: &'static str, e: result::DriverError) -> kiln_base::Error {
    kiln_base::Error::Runtime { op, msg: format!("CUDA error: {e}") }
}
