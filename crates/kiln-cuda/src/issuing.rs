//! Who may touch kiln's one stream: every thread issuing GPU work (evaluation, transfers,
//! waits) shares it, a CUDA graph capture takes it alone, so no other thread's work lands in
//! a graph being recorded (the stream is shared) or touches the stream while it records.
//! The outermost guard of a thread also batches its kernel launches (`batch.rs`) until it
//! drops. Part of the runtime floor.

use std::cell::Cell;
use std::sync::{RwLock, RwLockReadGuard, RwLockWriteGuard};

static ISSUING: RwLock<()> = RwLock::new(());

thread_local! {
    /// How many `Issuing` guards this thread holds: only the outermost takes the lock, so
    /// nested work (an eval moving data to the host) never waits behind a queued capture.
    static DEPTH: Cell<usize> = const { Cell::new(0) };
}

/// Held while issuing GPU work; re-entrant on one thread.
pub struct Issuing(#[allow(dead_code)] Option<RwLockReadGuard<'static, ()>>);

/// Marks this thread as issuing GPU work until the guard drops.
pub fn issuing() -> Issuing {
    let depth = DEPTH.with(|d| d.replace(d.get() + 1));
    let lock = (depth == 0).then(|| ISSUING.read().unwrap_or_else(|e| e.into_inner()));
    if lock.is_some() {
        crate::batch::begin();
    }
    Issuing(lock)
}

impl Drop for Issuing {
    fn drop(&mut self) {
        let _ = DEPTH.try_with(|d| d.set(d.get().saturating_sub(1)));
        if self.0.is_some() {
            // Before the lock goes: a capture waiting for it must find the batch on the stream.
            crate::batch::end_keeping_error();
        }
    }
}

/// The stream to this thread alone (a capture), until dropped; work the holder issues meanwhile
/// counts as issuing without waiting for the lock it holds.
pub(crate) struct Alone {
    _inside: Issuing,
    _lock: RwLockWriteGuard<'static, ()>,
}

/// `None` when this thread is issuing work already (waiting for the lock would never end).
pub(crate) fn alone() -> Option<Alone> {
    if DEPTH.with(|d| d.get()) > 0 {
        return None;
    }
    let lock = ISSUING.write().unwrap_or_else(|e| e.into_inner());
    DEPTH.with(|d| d.set(d.get() + 1));
    Some(Alone { _inside: Issuing(None), _lock: lock })
}
