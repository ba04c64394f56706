//! Completion events: a CUDA event recorded on the stream after one evaluation's work, so
//! that reading that evaluation's results waits for its work alone. mlx-lm issues token
//! n+1's graph (`async_eval`) before it reads token n (`y.item()`); waiting for the whole
//! stream there left the GPU idle while Python built the step after.

use crate::runtime::{capturing, driver_error, gpu};
use cudarc::driver::{result, sys};
use kiln_base::{ArrayData, Result};

/// `KILN_BLOCKING_EVENTS=1`: a reader waiting for its results sleeps on a blocking-sync
/// event instead of waiting inside the driver (a spinning event sync, or a pageable copy
/// waiting for the event), whose locks the issuing thread (kiln-core's background.rs) takes
/// for every launch. Off until measured on a GPU (it adds a wake-up to each read).
fn blocking() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var("KILN_BLOCKING_EVENTS").is_ok_and(|v| v.trim() == "1"))
}

/// The point in the stream where an evaluation's work ends.
pub struct Ready {
    event: sys::CUevent,
}

// SAFETY: an event is a driver object usable from any thread once the context is current
// (`gpu()` binds it); `Ready` owns its event and destroys it once.
unsafe impl Send for Ready {}
// SAFETY: as for Send; waiting and querying take `&self` and the driver serialises them.
unsafe impl Sync for Ready {}

impl Ready {
    /// Marks the end of the work issued so far; `None` without a GPU or while the stream
    /// captures a graph (an event recorded then would become a graph node).
    pub fn record() -> Result<Option<Ready>> {
        if !crate::is_available() {
            return Ok(None);
        }
        let gpu = gpu()?;
        if capturing(gpu.stream()?) {
            return Ok(None);
        }
        let mut flags = sys::CUevent_flags::CU_EVENT_DISABLE_TIMING as u32;
        if blocking() {
            flags |= sys::CUevent_flags::CU_EVENT_BLOCKING_SYNC as u32;
        }
        let mut event = std::ptr::null_mut();
        // SAFETY: creates an event owned by the returned Ready (destroyed in its Drop).
        unsafe { sys::cuEventCreate(&mut event, flags) }
            .result()
            .map_err(|e| driver_error("eval", e))?;
        let ready = Ready { event };
        // SAFETY: the event was just created; the stream is live.
        unsafe { result::event::record(ready.event, gpu.stream()?) }
            .map_err(|e| driver_error("eval", e))?;
        Ok(Some(ready))
    }

    /// Waits until the work before the event has finished (kernel faults surface here).
    pub fn wait(&self) -> Result<()> {
        gpu()?;
        // SAFETY: the event is live and was recorded.
        unsafe { result::event::synchronize(self.event) }.map_err(|e| driver_error("eval", e))
    }

    /// A host copy of `data`, made as soon as the work before the event is done: on the copy
    /// stream, so work issued after the event does not delay it.
    pub fn download(&self, data: &ArrayData) -> Result<ArrayData> {
        if blocking() {
            // Asleep until the work is done, then the copy (to pageable memory, which the
            // driver would otherwise wait for inside the copy call).
            self.wait()?;
        }
        crate::transfer::download_after(data, Some(self.event))
    }
}

impl Drop for Ready {
    fn drop(&mut self) {
        // SAFETY: owned here; destroying an event still pending is allowed (the driver frees
        // it once the stream passes it).
        let _ = unsafe { result::event::destroy(self.event) };
    }
}

impl kiln_base::backend::CompletionEvent for Ready {
    fn wait(&self) -> Result<()> {
        Ready::wait(self)
    }

    fn download(&self, data: &ArrayData) -> Result<ArrayData> {
        Ready::download(self, data)
    }
}
