//! Memory counters and limits, with MLX's names (`mx.get_active_memory()` ...).

use kiln_base::buffer::HOST;
use pyo3::prelude::*;

/// Bytes currently held by arrays (not counting the cache).
#[pyfunction]
fn get_active_memory() -> usize {
    HOST.counters.active()
}

/// The most bytes held at once since start or the last `reset_peak_memory()`.
#[pyfunction]
fn get_peak_memory() -> usize {
    HOST.counters.peak()
}

/// Resets the peak memory to zero.
#[pyfunction]
fn reset_peak_memory() {
    HOST.counters.reset_peak()
}

/// Bytes kept in the cache: freed by arrays, not yet returned to the system.
#[pyfunction]
fn get_cache_memory() -> usize {
    HOST.cache_memory()
}

/// Returns the cached memory to the system (`get_cache_memory()` is 0 afterwards).
#[pyfunction]
fn clear_cache() {
    HOST.clear_cache()
}

/// Sets the memory limit, a guideline: past it, allocation first returns cached memory.
/// Returns the previous limit in bytes.
#[pyfunction]
fn set_memory_limit(limit: usize) -> usize {
    HOST.set_memory_limit(limit)
}

/// Sets the cache limit in bytes (0 disables the cache); returns the previous limit.
#[pyfunction]
fn set_cache_limit(limit: usize) -> usize {
    HOST.set_cache_limit(limit)
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(get_active_memory, m)?)?;
    m.add_function(wrap_pyfunction!(get_peak_memory, m)?)?;
    m.add_function(wrap_pyfunction!(reset_peak_memory, m)?)?;
    m.add_function(wrap_pyfunction!(get_cache_memory, m)?)?;
    m.add_function(wrap_pyfunction!(clear_cache, m)?)?;
    m.add_function(wrap_pyfunction!(set_memory_limit, m)?)?;
    m.add_function(wrap_pyfunction!(set_cache_limit, m)?)?;
    Ok(())
}
