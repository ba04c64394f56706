//! Ctrl-C during an evaluation. While kiln computes with the GIL released, Python's own
//! SIGINT handler only records the signal; the KeyboardInterrupt would come after the whole
//! evaluation. So kiln's handler comes first: it asks running evaluations to stop
//! (kiln_base::interrupt), then hands the signal on to the handler it displaced (Python's,
//! which runs the script's `signal` handler, by default raising KeyboardInterrupt). Python
//! replaces the process's handler whenever a script calls `signal.signal(SIGINT, ...)`, so
//! every evaluation started from Python puts kiln's first again.

use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use std::sync::atomic::{AtomicBool, Ordering};

/// Whether a Ctrl-C should stop evaluations: only while the script's SIGINT handler is
/// Python's default (raise KeyboardInterrupt). A script with its own handler (say, one
/// that saves a checkpoint after the current step) gets its evaluation finished first.
static DEFAULT_HANDLER: AtomicBool = AtomicBool::new(true);

/// Runs `work` (an evaluation) with the GIL released and Ctrl-C able to stop it.
pub fn detached<T: Send>(py: Python<'_>, work: impl Send + FnOnce() -> T) -> T {
    chain_handler();
    DEFAULT_HANDLER.store(default_handler(py), Ordering::Relaxed);
    py.detach(work)
}

/// Whether the script's SIGINT handler is `signal.default_int_handler`. Asked of `_signal`,
/// the C module under `signal`: `signal.getsignal` wraps the answer in an enum, which cost
/// about 2 us of every evaluation.
fn default_handler(py: Python<'_>) -> bool {
    /// `_signal.getsignal` and `_signal.default_int_handler`.
    type SignalNames = Option<(Py<PyAny>, Py<PyAny>)>;
    static SIGNAL: PyOnceLock<SignalNames> = PyOnceLock::new();
    let names = SIGNAL.get_or_init(py, || {
        let signal = py.import("_signal").ok()?;
        let get = |name| signal.getattr(name).ok().map(Bound::unbind);
        Some((get("getsignal")?, get("default_int_handler")?))
    });
    let Some((getsignal, default)) = names else { return false };
    // SIGINT is 2 on every platform Python runs on (POSIX, Windows).
    getsignal.call1(py, (2,)).is_ok_and(|h| h.is(default))
}

/// The KeyboardInterrupt (or whatever the script's SIGINT handler raises) for an
/// evaluation stopped by Ctrl-C.
pub fn raised(py: Python<'_>, message: String) -> pyo3::PyErr {
    match py.check_signals() {
        Err(from_handler) => from_handler,
        // The signal reached a handler that raised nothing (or another thread runs it).
        Ok(()) => pyo3::exceptions::PyKeyboardInterrupt::new_err(message),
    }
}

#[cfg(unix)]
pub use unix::chain_handler;

#[cfg(not(unix))]
pub fn chain_handler() {}

#[cfg(unix)]
mod unix {
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

    /// The displaced handler (an address, or SIG_DFL / SIG_IGN) and whether it takes
    /// `siginfo`.
    static PREVIOUS: AtomicUsize = AtomicUsize::new(libc::SIG_DFL);
    static PREVIOUS_SIGINFO: AtomicBool = AtomicBool::new(false);

    type Handler = extern "C" fn(libc::c_int);
    type InfoHandler = extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void);

    extern "C" fn on_sigint(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
        if super::DEFAULT_HANDLER.load(Ordering::Relaxed) {
            kiln_base::interrupt::request();
        }
        match PREVIOUS.load(Ordering::Relaxed) {
            libc::SIG_IGN => {}
            libc::SIG_DFL => {
                // SAFETY: signal and raise are async-signal-safe; the default action (the
                // process ends) is what would have happened without kiln's handler.
                unsafe {
                    libc::signal(sig, libc::SIG_DFL);
                    libc::raise(sig);
                }
            }
            address if PREVIOUS_SIGINFO.load(Ordering::Relaxed) => {
                // SAFETY: the address came from sigaction with SA_SIGINFO set, so it is a
                // three-argument handler, called with the arguments the kernel gave us.
                let handler: InfoHandler = unsafe { std::mem::transmute(address) };
                handler(sig, info, ctx);
            }
            address => {
                // SAFETY: the address came from sigaction without SA_SIGINFO: a one-argument
                // handler (sa_handler).
                let handler: Handler = unsafe { std::mem::transmute(address) };
                handler(sig);
            }
        }
    }

    /// Installs kiln's SIGINT handler in front of the current one, unless it is in front.
    /// Called with the GIL held, so Python cannot replace handlers meanwhile.
    pub fn chain_handler() {
        let ours = on_sigint as InfoHandler as usize;
        // SAFETY: sigaction with a zeroed struct to read into, then one fully initialised
        // (handler, flags, mask) to install; neither pointer outlives the call.
        unsafe {
            let mut current: libc::sigaction = std::mem::zeroed();
            if libc::sigaction(libc::SIGINT, std::ptr::null(), &mut current) != 0 {
                return;
            }
            if current.sa_sigaction == ours {
                return;
            }
            // Stored before ours is installed: a signal in between still finds the old one.
            PREVIOUS_SIGINFO.store(current.sa_flags & libc::SA_SIGINFO != 0, Ordering::Relaxed);
            PREVIOUS.store(current.sa_sigaction, Ordering::Relaxed);
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = ours;
            action.sa_flags = (current.sa_flags | libc::SA_SIGINFO) & !libc::SA_RESETHAND;
            action.sa_mask = current.sa_mask;
            libc::sigaction(libc::SIGINT, &action, std::ptr::null_mut());
        }
    }
}
