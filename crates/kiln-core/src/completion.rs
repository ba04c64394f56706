//! Which evaluation computed an array on the GPU, and the event marking the end of that
//! evaluation's work (the GPU backend's `CompletionEvent`): reading a result waits for its own work, not
//! for everything issued since. mlx-lm's decode loop issues token n+1 (`async_eval`) and
//! then reads token n (`y.item()`); a whole-stream wait there kept the GPU idle while Python
//! built the step after.
//!
//! Each `eval_async` takes a fresh number, stamps it on the GPU arrays it computes and, once
//! its work is issued, records the event under it. An array with no number (made by a CUDA
//! graph replay, uploaded, or computed before its event was recorded) falls back to waiting
//! for the whole stream, as before.

use kiln_base::backend::CompletionEvent;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// Numbers start at 1: 0 marks an array whose evaluation is unknown.
static NEXT: AtomicU64 = AtomicU64::new(1);

/// The events of the latest evaluations. Older ones are dropped: their readers wait for
/// the whole stream instead, which is always correct.
static RECENT: Mutex<VecDeque<(u64, Arc<dyn CompletionEvent>)>> = Mutex::new(VecDeque::new());
const KEPT: usize = 64;

/// A number for a new evaluation.
pub(crate) fn begin() -> u64 {
    NEXT.fetch_add(1, Ordering::Relaxed)
}

/// Records the end of evaluation `number`'s work (issued to the GPU by now).
pub(crate) fn finish(number: u64) -> kiln_base::Result<()> {
    let Some(gpu) = crate::backends::gpu() else { return Ok(()) };
    let Some(ready) = gpu.completion_event()? else { return Ok(()) };
    let mut recent = RECENT.lock().unwrap_or_else(|e| e.into_inner());
    if recent.len() == KEPT {
        recent.pop_front();
    }
    recent.push_back((number, Arc::from(ready)));
    Ok(())
}

/// The event ending evaluation `number`, while it is kept.
pub(crate) fn ready(number: u64) -> Option<Arc<dyn CompletionEvent>> {
    if number == 0 {
        return None;
    }
    let recent = RECENT.lock().unwrap_or_else(|e| e.into_inner());
    recent.iter().rev().find(|(n, _)| *n == number).map(|(_, r)| r.clone())
}

/// Waits until the GPU work of evaluations `numbers` is done: for their events, or for the
/// whole stream when one is unknown.
pub(crate) fn wait(numbers: impl IntoIterator<Item = u64>) -> kiln_base::Result<()> {
    let mut events: Vec<Arc<dyn CompletionEvent>> = Vec::new();
    for number in numbers {
        match ready(number) {
            Some(r) => {
                if !events.iter().any(|e| Arc::ptr_eq(e, &r)) {
                    events.push(r);
                }
            }
            None => return crate::backends::synchronize(kiln_base::Device::GPU),
        }
    }
    events.iter().try_for_each(|r| r.wait())
}
