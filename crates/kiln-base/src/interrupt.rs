//! Interrupting evaluations (Ctrl-C). A signal handler calls [`request`]; long kernels poll
//! [`requested`] between chunks of their work and stop early, and evaluation then discards
//! what the interrupted call produced and reports [`crate::Error::Interrupted`]. Requests
//! count only while an evaluation runs ([`Evaluating`]), so a Ctrl-C that Python handled
//! between evaluations does not stop the next one.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

static REQUESTED: AtomicBool = AtomicBool::new(false);
static EVALUATING: AtomicUsize = AtomicUsize::new(0);

/// Asks running evaluations to stop. Async-signal-safe: two atomic operations, no locks.
pub fn request() {
    if EVALUATING.load(Ordering::Relaxed) > 0 {
        REQUESTED.store(true, Ordering::Relaxed);
    }
}

/// Whether running evaluations were asked to stop (one relaxed load: cheap enough for
/// every chunk of a kernel).
#[inline]
pub fn requested() -> bool {
    REQUESTED.load(Ordering::Relaxed)
}

/// `Err(Interrupted)` once a stop was requested.
pub fn check(op: &'static str) -> crate::Result<()> {
    if requested() {
        return Err(crate::Error::Interrupted { op });
    }
    Ok(())
}

/// Marks an evaluation as running while it lives; when the last running one ends, a
/// pending request is dropped (it was answered, or came too late to matter).
pub struct Evaluating(());

impl Evaluating {
    pub fn start() -> Evaluating {
        EVALUATING.fetch_add(1, Ordering::Relaxed);
        Evaluating(())
    }
}

impl Drop for Evaluating {
    fn drop(&mut self) {
        if EVALUATING.fetch_sub(1, Ordering::Relaxed) == 1 {
            REQUESTED.store(false, Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_count_only_while_evaluating() {
        request();
        assert!(!requested(), "no evaluation runs: nothing to stop");
        {
            let _outer = Evaluating::start();
            let inner = Evaluating::start();
            request();
            assert!(requested());
            assert!(matches!(check("sum"), Err(crate::Error::Interrupted { op: "sum" })));
            drop(inner);
            assert!(requested(), "the outer evaluation still runs");
        }
        assert!(!requested());
        assert!(check("sum").is_ok());
    }
}
