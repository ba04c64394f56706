//! Moving array data between host and device memory. A view moves with its whole buffer and
//! keeps its layout, so strided views need no host-side copy.

use crate::alloc::{check_on_gpu, DEVICE};
use crate::runtime::{driver_error, gpu};
use cudarc::driver::{result, sys};
use kiln_base::{ArrayData, Device, Result, HOST};

/// Host data up to this size goes to the device as a kernel's arguments while launches are
/// batched (see `store_words`).
const SMALL_UPLOAD: usize = 64;

/// A device copy of host data.
pub fn upload(data: &ArrayData) -> Result<ArrayData> {
    let _issuing = crate::issuing::issuing();
    let gpu = gpu()?;
    let bytes = data.buffer.host_slice::<u8>();
    let buffer = DEVICE.alloc(bytes.len())?;
    // Not while the stream records a graph: the value would be frozen into it, where a copy
    // from host memory fails the capture as it always has.
    let small = !bytes.is_empty() && bytes.len() <= SMALL_UPLOAD && crate::batch::eager_graphs();
    if small && !crate::runtime::capturing(gpu.raw_stream()) {
        store_words(buffer.as_ptr() as u64, bytes)?;
    } else if !bytes.is_empty() {
        // SAFETY: the destination holds at least bytes.len() bytes; from pageable memory the
        // call returns once the source is staged, so the host buffer may go right after.
        unsafe { result::memcpy_htod_async(buffer.as_ptr() as u64, bytes, gpu.stream()?) }
            .map_err(|e| driver_error("to_gpu", e))?;
    }
    Ok(ArrayData { buffer, layout: data.layout.clone(), dtype: data.dtype })
}

/// Writes `bytes` (at most `SMALL_UPLOAD`) to `dst` by a kernel that takes them as its
/// arguments: a scalar made from a Python number each step (RoPE's offset in mlx-lm's decode
/// step) then joins the evaluation's batch of launches and its graph (`batch.rs`), where a
/// copy would flush the batch and wait for the pageable source to be staged.
fn store_words(dst: u64, bytes: &[u8]) -> Result<()> {
    static KERNEL: crate::nvrtc::KernelCache<()> = crate::nvrtc::KernelCache::new();
    const SOURCE: &str = "struct kiln_words { unsigned long long w[8]; };\n\
        extern \"C\" __global__ void kiln_store_words(unsigned long long *dst, kiln_words v, \
        long long n) { if (threadIdx.x < n) dst[threadIdx.x] = v.w[threadIdx.x]; }\n";
    let mut words = [0u64; SMALL_UPLOAD / 8];
    for (i, b) in bytes.iter().enumerate() {
        words[i / 8] |= (*b as u64) << (8 * (i % 8));
    }
    let n = bytes.len().div_ceil(8);
    let f = KERNEL.get(&(), "kiln_store_words", || SOURCE.to_string())?;
    let mut args = crate::launch::Args::new();
    args.ptr(dst).i64_struct(&words.map(|w| w as i64)).i64(n as i64);
    // The block holds whole words: allocations are at least 256 bytes (alloc.rs).
    crate::launch::launch("to_gpu", f, 1, 32, 0, &mut args)
}

/// A host copy of device data (waits for the work that produces it).
pub fn download(data: &ArrayData) -> Result<ArrayData> {
    download_after(data, None)
}

/// A host copy of device data. `after`: an event recorded after the work producing `data`
/// (`ready.rs`); the copy runs on the copy stream once the event is reached, without
/// waiting for work issued later. Without one, the copy queues behind all issued work.
pub(crate) fn download_after(data: &ArrayData, after: Option<sys::CUevent>) -> Result<ArrayData> {
    check_on_gpu("to_host", &data.buffer)?;
    let _issuing = crate::issuing::issuing();
    let gpu = gpu()?;
    let mut buffer = HOST.alloc_for_overwrite(data.buffer.nbytes())?;
    let dst = buffer.host_slice_mut::<u8>().expect("a fresh buffer has one handle");
    if !dst.is_empty() {
        let stream = match after {
            Some(event) => {
                let wait = sys::CUevent_wait_flags::CU_EVENT_WAIT_DEFAULT;
                // SAFETY: both handles are live; the copy stream waits for the event.
                unsafe { result::stream::wait_event(gpu.copy_stream, event, wait) }
                    .map_err(|e| driver_error("to_host", e))?;
                gpu.copy_stream
            }
            None => gpu.stream()?,
        };
        // SAFETY: the source block holds nbytes bytes and its writers are done when the copy
        // starts (stream order, or the event waited for). `data` holds the block until the
        // copy has finished (the synchronize below), so no later kernel reuses it first; the
        // call returns when the copy to pageable memory is done.
        unsafe { result::memcpy_dtoh_async(dst, data.buffer.as_ptr() as u64, stream) }
            .map_err(|e| driver_error("to_host", e))?;
        // SAFETY: the stream is live.
        unsafe { result::stream::synchronize(stream) }.map_err(|e| driver_error("to_host", e))?;
    }
    Ok(ArrayData { buffer, layout: data.layout.clone(), dtype: data.dtype })
}

/// `data` on `device`, copied only when it lives elsewhere.
pub fn to_device(data: &ArrayData, device: Device) -> Result<ArrayData> {
    match (data.buffer.device() == device, device) {
        (true, _) => Ok(data.clone()),
        (false, Device { kind: kiln_base::DeviceKind::Gpu, .. }) => upload(data),
        (false, _) => download(data),
    }
}
