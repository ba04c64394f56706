//! `async_eval` on a background thread: the work is handed to one issuing thread, so the
//! caller builds its next graph while this one's kernels are issued. mlx-lm's decode loop
//! builds step n+1 in Python while step n is issued; on the caller's thread a step costs
//! the sum of the two, here about the longer (llama 1B bf16 on an H100: 2.19 ms a step on
//! the caller's thread, 2.02 here). `KILN_ASYNC_THREAD=gpu` hands GPU work over, `=1` CPU
//! work too (as MLX's CPU stream runs apart from the caller), `=0` none; unset means `gpu`
//! (the GPU suite passed with it, and llama 1B bf16 decode on an H100 went from 286 to 455
//! tokens/s), and [`set_async_thread`] chooses at run time.
//!
//! Nothing is lost by deferring: a call that fails marks its outputs failed and a read (or
//! eval) of them reports the error; an interrupted evaluation leaves them pending, and a
//! read runs them on the reader's thread. Readers of an array handed over wait for its job
//! to be issued first (`wait_for`): the GPU event a read waits on is recorded at the end of
//! the job, and two threads issuing one graph would contend for its calls. `drain` waits
//! for every job (`synchronize` does it first).

use crate::array::Array;
use kiln_base::{DeviceKind, Result};
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::{mpsc, Condvar, Mutex, OnceLock};

/// Jobs waiting beyond the one being issued: a caller that runs further ahead blocks (each
/// job holds its graph, and its inputs' memory, until it is issued).
const QUEUED: usize = 4;

struct Worker {
    jobs: Mutex<mpsc::SyncSender<Vec<Array>>>,
    /// Jobs handed over, and jobs issued.
    counts: Mutex<(u64, u64)>,
    issued: Condvar,
}

static WORKER: OnceLock<Option<Worker>> = OnceLock::new();

/// Jobs the issuing thread finished, and the nanoseconds it spent on them: a decode step
/// whose thread is busy for the whole step is bound by issuing, not by the GPU.
static ISSUED_JOBS: AtomicU64 = AtomicU64::new(0);
static BUSY_NS: AtomicU64 = AtomicU64::new(0);

/// (jobs issued, seconds busy) of the issuing thread so far.
pub fn issuing_thread_stats() -> (u64, f64) {
    (ISSUED_JOBS.load(Ordering::Relaxed), BUSY_NS.load(Ordering::Relaxed) as f64 * 1e-9)
}

thread_local! {
    /// Set on the issuing thread: it never waits for its own jobs.
    static IS_WORKER: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Which `async_eval` work goes to the issuing thread.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Handover {
    /// None: every async_eval issues on the caller's thread.
    Off,
    /// Work whose outputs are all on the GPU.
    Gpu,
    /// Work on any device.
    All,
}

/// With `KILN_ASYNC_THREAD` unset: 2 (GPU work).
const DEFAULT: u8 = 2;

/// 0: read `KILN_ASYNC_THREAD` on first use; then 1 + the `Handover` index.
static SWITCH: AtomicU8 = AtomicU8::new(0);

/// What `async_eval` hands to the issuing thread now.
pub fn handover() -> Handover {
    let code = match SWITCH.load(Ordering::Relaxed) {
        0 => {
            let code = match std::env::var("KILN_ASYNC_THREAD").as_deref().map(str::trim) {
                Ok("0") => 1,
                Ok("gpu") => 2,
                Ok("1") => 3,
                _ => DEFAULT,
            };
            SWITCH.store(code, Ordering::Relaxed);
            code
        }
        c => c,
    };
    match code {
        1 => Handover::Off,
        3 => Handover::All,
        _ => Handover::Gpu,
    }
}

/// Chooses what later `async_eval` calls hand over (`None`: back to the environment's
/// choice). Jobs already handed over are issued either way.
pub fn set_async_thread(mode: Option<Handover>) {
    let code = match mode {
        None => 0,
        Some(Handover::Off) => 1,
        Some(Handover::Gpu) => 2,
        Some(Handover::All) => 3,
    };
    SWITCH.store(code, Ordering::Relaxed);
}

fn worker() -> Option<&'static Worker> {
    WORKER
        .get_or_init(|| {
            let (jobs, queue) = mpsc::sync_channel::<Vec<Array>>(QUEUED);
            let spawned = std::thread::Builder::new().name("kiln-issue".into()).spawn(move || {
                IS_WORKER.with(|w| w.set(true));
                for job in queue {
                    let start = std::time::Instant::now();
                    // Errors stay with the arrays (see the module doc); a panic (kernels'
                    // are caught already) must still count the job as issued.
                    let run = std::panic::AssertUnwindSafe(|| {
                        let _ = crate::eval::eval_async(&job);
                        drop(job);
                    });
                    let _ = std::panic::catch_unwind(run);
                    BUSY_NS.fetch_add(start.elapsed().as_nanos() as u64, Ordering::Relaxed);
                    ISSUED_JOBS.fetch_add(1, Ordering::Relaxed);
                    let worker = WORKER.get().and_then(Option::as_ref).expect("set before jobs");
                    worker.counts.lock().unwrap_or_else(|e| e.into_inner()).1 += 1;
                    worker.issued.notify_all();
                }
            });
            spawned.ok().map(|_| Worker {
                jobs: Mutex::new(jobs),
                counts: Mutex::new((0, 0)),
                issued: Condvar::new(),
            })
        })
        .as_ref()
}

/// Issues the work computing `outputs` without waiting for it: from the issuing thread
/// when `handover` takes their device and they are plain lazy arrays; here otherwise
/// (tracers and placeholders, whose errors belong to the caller now).
pub fn async_eval(outputs: &[Array]) -> Result<()> {
    let pending: Vec<Array> = outputs.iter().filter(|a| !a.is_evaluated()).cloned().collect();
    let device_ok = |a: &Array| match handover() {
        Handover::Off => false,
        Handover::Gpu => a.stream().device.kind == DeviceKind::Gpu,
        Handover::All => true,
    };
    let deferrable = !pending.is_empty()
        && pending
            .iter()
            .all(|a| device_ok(a) && !a.is_tracer() && !a.is_placeholder() && a.call().is_some());
    if deferrable && !IS_WORKER.with(|w| w.get()) {
        if let Some(w) = worker() {
            // Numbered and sent under the queue's lock, so jobs arrive in their numbers'
            // order (a reader waiting for job n must not be let go by job n+1 finishing);
            // counted before it is sent, so `drain` never misses a job. The count's lock is
            // not held while a full queue blocks the send (the worker takes it to finish).
            let queue = w.jobs.lock().unwrap_or_else(|e| e.into_inner());
            let job = {
                let mut counts = w.counts.lock().unwrap_or_else(|e| e.into_inner());
                counts.0 += 1;
                counts.0
            };
            pending.iter().for_each(|a| a.0.queued.store(job, Ordering::Relaxed));
            let sent = queue.send(pending);
            drop(queue);
            if let Err(mpsc::SendError(job)) = sent {
                // The worker cannot end, but never lose work: issue here, counted as if
                // the worker had.
                let issued = crate::eval::eval_async(&job).map(|_| ());
                w.counts.lock().unwrap_or_else(|e| e.into_inner()).1 += 1;
                w.issued.notify_all();
                return issued;
            }
            return Ok(());
        }
    }
    crate::eval::eval_async(&pending).map(|_| ())
}

/// Waits until the issuing thread has issued jobs up to `job` (every job handed over: None).
fn wait_until(job: Option<u64>) {
    let Some(w) = WORKER.get().and_then(Option::as_ref) else { return };
    if IS_WORKER.with(|w| w.get()) {
        return;
    }
    let mut counts = w.counts.lock().unwrap_or_else(|e| e.into_inner());
    let job = job.unwrap_or(counts.0);
    while counts.1 < job {
        counts = w.issued.wait(counts).unwrap_or_else(|e| e.into_inner());
    }
}

/// Waits until everything handed to the issuing thread has been issued.
pub fn drain() {
    wait_until(None);
}

/// Waits for the jobs computing any of `arrays` to be issued (a no-op for arrays never
/// handed over).
pub(crate) fn wait_for(arrays: &[Array]) {
    let job = arrays.iter().map(|a| a.0.queued.load(Ordering::Relaxed)).max().unwrap_or(0);
    if job > 0 {
        wait_until(Some(job));
    }
}
