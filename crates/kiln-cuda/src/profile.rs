//! GPU time for the profiler (`kiln.profiler`): a pair of CUDA events recorded on kiln's
//! stream around a call; the elapsed time is read when the session ends. Nothing here runs
//! without a GPU, and nothing is recorded while the stream captures a CUDA graph (an event
//! recorded then would become a graph node).

use crate::runtime::{capturing, gpu};
use cudarc::driver::{result, sys};

/// Two events around GPU work on kiln's stream.
pub struct Span {
    start: sys::CUevent,
    end: Option<sys::CUevent>,
}

// SAFETY: CUevent handles are driver objects usable from any thread once the context is
// current (`gpu()` binds it); the span owns its events and destroys them once.
unsafe impl Send for Span {}

fn record(stream: sys::CUstream) -> Option<sys::CUevent> {
    let event = result::event::create(sys::CUevent_flags::CU_EVENT_DEFAULT).ok()?;
    // SAFETY: `event` was just created; the stream is live.
    if unsafe { result::event::record(event, stream) }.is_err() {
        // SAFETY: created above, recorded nowhere.
        let _ = unsafe { result::event::destroy(event) };
        return None;
    }
    Some(event)
}

impl Span {
    /// Records the start event; `None` without a GPU or while the stream captures.
    pub fn begin() -> Option<Span> {
        let stream = gpu().ok()?.stream().ok()?;
        if capturing(stream) {
            return None;
        }
        record(stream).map(|start| Span { start, end: None })
    }

    /// Records the end event (after the call's work was issued).
    pub fn end(&mut self) {
        let Ok(stream) = gpu().and_then(|g| g.stream()) else { return };
        if self.end.is_none() && !capturing(stream) {
            self.end = record(stream);
        }
    }

    /// Waits for the end event and returns the GPU time between the two, in milliseconds.
    pub fn elapsed_ms(self) -> Option<f64> {
        gpu().ok()?;
        let end = self.end?;
        // SAFETY: both events were created and recorded on the same stream by this span,
        // and are destroyed only by its Drop.
        unsafe {
            result::event::synchronize(end).ok()?;
            result::event::elapsed(self.start, end).ok().map(f64::from)
        }
    }
}

impl Drop for Span {
    fn drop(&mut self) {
        if gpu().is_err() {
            return;
        }
        // SAFETY: the span owns both events; nothing uses them after this.
        unsafe {
            let _ = result::event::destroy(self.start);
            if let Some(end) = self.end {
                let _ = result::event::destroy(end);
            }
        }
    }
}

impl kiln_base::backend::DeviceSpan for Span {
    fn end(&mut self) {
        Span::end(self)
    }

    fn elapsed_ms(self: Box<Self>) -> Option<f64> {
        Span::elapsed_ms(*self)
    }
}
