//! Parallel kernel builds. A compiled function's first call would build each of its kernels
//! at its first launch, one after another (tens of milliseconds of NVRTC each). When the
//! kernels can be named up front (kiln-core's compile predicts them from the entry's graph
//! and input layouts), `build_batch` builds the ones not cached in memory on several threads
//! at once (disk-cache hits load in parallel too) and publishes them to `nvrtc`'s memory
//! cache, where the launches then find them. Kernels not predicted still build lazily; a
//! failed build is kept and raised by the launch that needs the kernel, as before.
//!
//! `KILN_CUDA_PREBUILD=0` turns batches off (every kernel builds at its first launch);
//! `KILN_NVRTC_THREADS=n` bounds the threads (default: the machine's parallelism).

use crate::build_threads::{run_parallel, threads_for};
use crate::nvrtc::{self, Request, Target};
use kiln_base::backend::{BuildKernel, BuildOutcome, BuildReport, KernelNode};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Instant;

static BATCHES: Mutex<Vec<BuildReport>> = Mutex::new(Vec::new());
static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// Every batch that had work to do, in order (explain).
pub fn batches() -> Vec<BuildReport> {
    BATCHES.lock().unwrap_or_else(|e| e.into_inner()).clone()
}

/// Whether batches are on (`KILN_CUDA_PREBUILD=0` turns them off).
pub fn enabled() -> bool {
    !std::env::var("KILN_CUDA_PREBUILD").is_ok_and(|v| v == "0")
}

/// The distinct requests (by source) in first-seen order, each with whether `known` says it
/// needs no work.
pub fn distinct(requests: &[Request], known: impl Fn(&str) -> bool) -> Vec<(&Request, bool)> {
    let mut seen = rustc_hash::FxHashSet::default();
    requests
        .iter()
        .filter(|r| seen.insert(r.source.as_str()))
        .map(|r| (r, known(&r.source)))
        .collect()
}

/// Builds (or loads from disk) every requested kernel not loaded yet, in parallel, and
/// publishes them to the memory cache. Failures are kept for the launch that needs the
/// kernel. `None` without a GPU or with batches off (kernels then build at first launch).
pub fn build_batch(requests: &[Request]) -> Option<BuildReport> {
    if requests.is_empty() || !enabled() {
        return None;
    }
    let target = Target::of_gpu().ok()?;
    let start = Instant::now();
    let jobs = distinct(requests, nvrtc::in_memory);
    let todo: Vec<&Request> = jobs.iter().filter(|(_, known)| !known).map(|(r, _)| *r).collect();
    let threads = if todo.is_empty() { 0 } else { threads_for(todo.len()) };
    let results = run_parallel(&todo, threads, |r| nvrtc::obtain(&r.source, &r.symbol, &target));
    let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
    let mut results = results.into_iter();
    let kernels = jobs
        .iter()
        .map(|(r, known)| {
            let (outcome, build_ms) = if *known {
                (BuildOutcome::Memory, 0.0)
            } else {
                match results.next().expect("one result per job") {
                    Ok(loaded) => {
                        nvrtc::publish(&r.source, &r.symbol, &loaded, Some(id));
                        let outcome =
                            if loaded.from_disk { BuildOutcome::Disk } else { BuildOutcome::Built };
                        (outcome, loaded.build_ms)
                    }
                    Err(e) => {
                        nvrtc::remember_failure(&r.source, e);
                        (BuildOutcome::Failed, 0.0)
                    }
                }
            };
            BuildKernel { symbol: r.symbol.clone(), outcome, build_ms }
        })
        .collect();
    let report = BuildReport { id, kernels, threads, wall_ms: start.elapsed().as_secs_f64() * 1e3 };
    if threads > 0 {
        BATCHES.lock().unwrap_or_else(|e| e.into_inner()).push(report.clone());
    }
    Some(report)
}

/// The elementwise kernels among `nodes` (fused regions and single ops, for the layouts
/// given) built as one batch; other families build at their first launch.
pub(crate) fn prebuild_nodes(nodes: &[KernelNode], progress: bool) -> Option<BuildReport> {
    if !enabled() || !crate::is_available() {
        return None;
    }
    let requests: Vec<Request> = nodes
        .iter()
        .filter(|n| {
            let dtypes = n.inputs.iter().map(|x| x.1).chain(n.outputs.iter().map(|o| o.1));
            crate::supports(&n.prim, dtypes)
        })
        .filter_map(|n| crate::elementwise::predict(&n.prim, &n.inputs, n.outputs.first()?))
        .collect();
    let _progress = progress.then(|| kiln_base::build_progress::building(requests.len()));
    build_batch(&requests)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(source: &str, symbol: &str) -> Request {
        Request { source: source.into(), symbol: symbol.into() }
    }

    #[test]
    fn distinct_drops_repeats_and_marks_known() {
        let reqs = [req("a", "ka"), req("b", "kb"), req("a", "ka"), req("c", "kc"), req("b", "x")];
        let jobs = distinct(&reqs, |s| s == "c");
        let got: Vec<(&str, bool)> = jobs.iter().map(|(r, k)| (r.source.as_str(), *k)).collect();
        assert_eq!(got, [("a", false), ("b", false), ("c", true)]);
        assert!(distinct(&[], |_| false).is_empty());
    }

    #[test]
    fn run_parallel_keeps_order_and_errors() {
        let jobs: Vec<u32> = (0..50).collect();
        let seen = Mutex::new(std::collections::HashSet::new());
        let out = run_parallel(&jobs, 4, |&j| {
            seen.lock().unwrap().insert(std::thread::current().id());
            // Uneven work, so threads finish out of order.
            std::thread::sleep(std::time::Duration::from_micros(((j * 37) % 11) as u64 * 50));
            if j % 7 == 3 {
                Err(format!("job {j} failed"))
            } else {
                Ok(j * 2)
            }
        });
        assert_eq!(out.len(), 50);
        for (j, r) in out.iter().enumerate() {
            let j = j as u32;
            if j % 7 == 3 {
                assert_eq!(r, &Err(format!("job {j} failed")));
            } else {
                assert_eq!(r, &Ok(j * 2));
            }
        }
        let used = seen.lock().unwrap().len();
        assert!((1..=4).contains(&used), "{used} threads");
        // One thread (the caller's) and no jobs both work.
        assert_eq!(run_parallel(&jobs[..3], 1, |&j| j + 1), [1, 2, 3]);
        assert!(run_parallel(&[] as &[u32], 8, |&j| j).is_empty());
    }

    #[test]
    fn threads_are_bounded_by_jobs() {
        assert_eq!(threads_for(1), 1);
        assert!(threads_for(1000) >= 1);
        assert!(threads_for(3) <= 3);
    }

    #[test]
    fn without_a_gpu_a_batch_does_nothing() {
        if crate::is_available() {
            return;
        }
        assert!(build_batch(&[req("extern \"C\" __global__ void k() {}", "k")]).is_none());
        assert!(build_batch(&[]).is_none());
    }
}
