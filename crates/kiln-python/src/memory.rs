//! Memory counters, with MLX's names (`mx.get_active_memory()` ...).

use kiln_base::buffer::HOST;
use pyo3::prelude::*;

/// Bytes currently held by arrays (buffers not yet freed).
#[pyfunction]
fn get_active_memory() -> usize {
    HOST.counters.active()
}

/// The most bytes held at once since start or the last `reset_peak_memory()`.
#[pyfunction]
fn get_peak_memory() -> usize {
    HOST.counters.peak()
}

/// Restarts peak tracking from the current active memory.
#[pyfunction]
fn reset_peak_memory() {
    HOST.counters.reset_peak()
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(get_active_memory, m)?)?;
    m.add_function(wrap_pyfunction!(get_peak_memory, m)?)?;
    m.add_function(wrap_pyfunction!(reset_peak_memory, m)?)?;
    Ok(())
}
