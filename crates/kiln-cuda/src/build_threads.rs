//! The build thread pool: many NVRTC builds at once (batches of a compiled function's kernels
//! and the tests that time them), each thread taking the next job as it finishes one.

use std::sync::atomic::{AtomicUsize, Ordering};

/// Threads for `jobs` builds: the machine's parallelism, `KILN_NVRTC_THREADS` if set, never
/// more than the jobs.
pub fn threads_for(jobs: usize) -> usize {
    let limit = std::env::var("KILN_NVRTC_THREADS")
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
        .filter(|&n| n > 0)
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    limit.min(jobs).max(1)
}

/// `work` over every job on up to `threads` threads (the calling thread is one of them),
/// each taking the next job as it finishes one, so a slow build never holds up the rest;
/// results in job order.
pub fn run_parallel<J: Sync, R: Send>(
    jobs: &[J],
    threads: usize,
    work: impl Fn(&J) -> R + Sync,
) -> Vec<R> {
    let next = AtomicUsize::new(0);
    let worker = || {
        let mut done = Vec::new();
        loop {
            let i = next.fetch_add(1, Ordering::Relaxed);
            let Some(job) = jobs.get(i) else { return done };
            done.push((i, work(job)));
        }
    };
    let mut results: Vec<(usize, R)> = std::thread::scope(|s| {
        let helpers: Vec<_> =
            (1..threads.clamp(1, jobs.len().max(1))).map(|_| s.spawn(worker)).collect();
        let mut all = worker();
        for h in helpers {
            match h.join() {
                Ok(done) => all.extend(done),
                // A panicking build is a bug: re-raise it on the calling thread.
                Err(panic) => std::panic::resume_unwind(panic),
            }
        }
        all
    });
    results.sort_by_key(|(i, _)| *i);
    results.into_iter().map(|(_, r)| r).collect()
}
