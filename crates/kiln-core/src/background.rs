//! `async_eval` of GPU work: handed to one background thread that issues it, so that Python
//! builds the next step's graph while this step's kernels are launched (several
//! microseconds of host time each). A decode step then costs the longer of the two, not
//! their sum; MLX's async_eval issues on the caller's thread, at a lower cost per kernel.
//!
//! Nothing is lost by deferring: a call that fails marks its outputs failed and a read (or
//! eval) of them reports the error; an interrupted evaluation leaves them pending, and a
//! read runs them on the reader's thread. A reader that reaches an array first evaluates
//! it itself (each call runs once: calls are locked while they run). `drain` waits for
//! everything handed over to be issued (`synchronize` calls it first).

use crate::array::Array;
use kiln_base::{DeviceKind, Result};
use std::sync::atomic::Ordering;
use std::sync::{mpsc, Condvar, Mutex, OnceLock};

/// Jobs waiting beyond the one being issued: a caller that runs further ahead blocks
/// (each job holds its graph, and its inputs' memory, until it is issued).
const QUEUED: usize = 4;

struct Worker {
    jobs: Mutex<mpsc::SyncSender<Vec<Array>>>,
    /// Jobs handed over and jobs finished.
    counts: Mutex<(u64, u64)>,
    finished: Condvar,
}

static WORKER: OnceLock<Option<Worker>> = OnceLock::new();

thread_local! {
    /// Set on the background thread: it never waits for its own jobs.
    static IS_WORKER: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// `KILN_ASYNC_THREAD=0`: async_eval issues on the caller's thread (read once).
fn enabled() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| std::env::var("KILN_ASYNC_THREAD").map_or(true, |v| v.trim() != "0"))
}

fn worker() -> Option<&'static Worker> {
    WORKER
        .get_or_init(|| {
            let (jobs, queue) = mpsc::sync_channel::<Vec<Array>>(QUEUED);
            let spawned = std::thread::Builder::new().name("kiln-issue".into()).spawn(move || {
                IS_WORKER.with(|w| w.set(true));
                for job in queue {
                    // Errors stay with the arrays (see the module doc); a panic (kernels'
                    // are caught already) must still count the job as finished.
                    let run = std::panic::AssertUnwindSafe(|| {
                        let _ = crate::eval::eval_async(&job);
                        drop(job);
                    });
                    let _ = std::panic::catch_unwind(run);
                    let worker = WORKER.get().and_then(Option::as_ref).expect("set before jobs");
                    worker.counts.lock().unwrap_or_else(|e| e.into_inner()).1 += 1;
                    worker.finished.notify_all();
                }
            });
            spawned.ok().map(|_| Worker {
                jobs: Mutex::new(jobs),
                counts: Mutex::new((0, 0)),
                finished: Condvar::new(),
            })
        })
        .as_ref()
}

/// Issues the work computing `outputs` without waiting for it: from the background thread
/// when every output is a GPU array of a plain graph; on this thread otherwise (CPU work,
/// and tracers or placeholders, whose errors belong to the caller now).
pub fn async_eval(outputs: &[Array]) -> Result<()> {
    let pending: Vec<Array> = outputs.iter().filter(|a| !a.is_evaluated()).cloned().collect();
    let deferrable = !pending.is_empty()
        && pending.iter().all(|a| {
            a.stream().device.kind == DeviceKind::Gpu && !a.is_tracer() && !a.is_placeholder()
        });
    if deferrable && enabled() && !IS_WORKER.with(|w| w.get()) {
        if let Some(w) = worker() {
            // Counted before it is sent, so `drain` never misses a job; the count's lock is
            // not held while a full queue blocks the send (the worker takes it to finish).
            let job = {
                let mut counts = w.counts.lock().unwrap_or_else(|e| e.into_inner());
                counts.0 += 1;
                counts.0
            };
            pending.iter().for_each(|a| a.0.queued.store(job, Ordering::Relaxed));
            let sent = w.jobs.lock().unwrap_or_else(|e| e.into_inner()).send(pending);
            if let Err(mpsc::SendError(job)) = sent {
                // No worker (it cannot end, but never lose work): issue here; the count
                // is finished as if the worker had run it.
                let issued = crate::eval::eval_async(&job).map(|_| ());
                w.counts.lock().unwrap_or_else(|e| e.into_inner()).1 += 1;
                w.finished.notify_all();
                return issued;
            }
            return Ok(());
        }
    }
    crate::eval::eval_async(&pending).map(|_| ())
}

/// Waits until the background thread has issued jobs up to `job` (all handed over: None).
fn wait_until(job: Option<u64>) {
    let Some(w) = WORKER.get().and_then(Option::as_ref) else { return };
    if IS_WORKER.with(|w| w.get()) {
        return;
    }
    let mut counts = w.counts.lock().unwrap_or_else(|e| e.into_inner());
    let job = job.unwrap_or(counts.0);
    while counts.1 < job {
        counts = w.finished.wait(counts).unwrap_or_else(|e| e.into_inner());
    }
}

/// Waits until everything handed to the background thread has been issued.
pub fn drain() {
    wait_until(None);
}

/// Waits for the background jobs that compute any of `arrays` to be issued: their readers
/// then wait for those jobs' events alone (recorded as a job ends).
pub(crate) fn wait_for(arrays: &[Array]) {
    let job = arrays
        .iter()
        .map(|a| a.0.queued.load(Ordering::Relaxed))
        .max()
        .unwrap_or(0);
    if job > 0 {
        wait_until(Some(job));
    }
}

/// `drain`, then wait for all GPU work issued so far.
pub fn synchronize() -> Result<()> {
    drain();
    kiln_cuda::synchronize()
}
