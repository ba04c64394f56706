//! `kiln.profiler`'s recorder (`kiln::profile`): start, stop (events as dicts), the
//! clock Python's own ranges stamp themselves with.

use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};

/// Starts recording (`device_times`: CUDA events around GPU calls); false if a session is
/// active already.
#[pyfunction]
#[pyo3(signature = (device_times = true))]
fn _profiler_start(device_times: bool) -> bool {
    kiln::profile::start(device_times)
}

/// Stops recording and returns the events (GPU times resolved: waits for the GPU).
#[pyfunction]
fn _profiler_stop(py: Python<'_>) -> PyResult<Bound<'_, PyList>> {
    let events = py.detach(kiln::profile::stop);
    let out = PyList::empty(py);
    for e in events {
        let d = PyDict::new(py);
        d.set_item("name", e.name)?;
        d.set_item("kind", e.kind)?;
        d.set_item("device", e.device)?;
        d.set_item("start_ns", e.start_ns)?;
        d.set_item("host_ns", e.host_ns)?;
        d.set_item("device_ms", e.device_ms)?;
        d.set_item("thread", e.thread)?;
        d.set_item("inputs", e.inputs)?;
        d.set_item("outputs", e.outputs)?;
        d.set_item("fallback", e.fallback)?;
        out.append(d)?;
    }
    Ok(out)
}

/// Whether a session records.
#[pyfunction]
fn _profiler_active() -> bool {
    kiln::profile::is_active()
}

/// The profiler's clock, in nanoseconds.
#[pyfunction]
fn _profiler_now_ns() -> u64 {
    kiln::profile::now_ns()
}

/// The calling thread's number in the profile's events.
#[pyfunction]
fn _profiler_thread() -> u64 {
    kiln::profile::thread_index()
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(_profiler_start, m)?)?;
    m.add_function(wrap_pyfunction!(_profiler_stop, m)?)?;
    m.add_function(wrap_pyfunction!(_profiler_active, m)?)?;
    m.add_function(wrap_pyfunction!(_profiler_now_ns, m)?)?;
    m.add_function(wrap_pyfunction!(_profiler_thread, m)?)?;
    Ok(())
}
