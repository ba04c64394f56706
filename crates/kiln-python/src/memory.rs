//! Memory counters and limits, with MLX's names (`mx.get_active_memory()` ...). As in MLX,
//! they describe the default device's memory: the GPU's when it is the default, else the
//! host's.

use kiln_base::buffer::MemoryCounters;
use kiln_base::{Device, DeviceKind, DeviceMemory, HOST};
use pyo3::prelude::*;

fn on_gpu() -> bool {
    kiln::device::default_device().kind == DeviceKind::Gpu
}

/// The default device's memory (the host's when the GPU's backend cannot run).
fn memory() -> &'static dyn DeviceMemory {
    let device = kiln::device::default_device();
    kiln::backends::backend("memory", device).map_or(&HOST, |b| b.memory())
}

/// The GPU's memory when a GPU can run here.
fn gpu_memory() -> Option<&'static dyn DeviceMemory> {
    kiln::backends::backend("memory", Device::GPU).ok().map(|b| b.memory())
}

fn counters() -> &'static MemoryCounters {
    memory().counters()
}

/// Bytes currently held by arrays (not counting the cache).
#[pyfunction]
fn get_active_memory() -> usize {
    counters().active()
}

/// The most bytes held at once since start or the last `reset_peak_memory()`.
#[pyfunction]
fn get_peak_memory() -> usize {
    counters().peak()
}

/// Resets the peak memory to zero.
#[pyfunction]
fn reset_peak_memory() {
    counters().reset_peak()
}

/// Bytes kept in the cache: freed by arrays, not yet returned to the system.
#[pyfunction]
fn get_cache_memory() -> usize {
    memory().cache_memory()
}

/// Returns the cached memory to the system (`get_cache_memory()` is 0 afterwards).
#[pyfunction]
fn clear_cache() {
    HOST.clear_cache();
    if let Some(gpu) = gpu_memory() {
        gpu.clear_cache();
    }
}

/// Sets the memory limit, a guideline: past it, allocation first returns cached memory.
/// Returns the previous limit in bytes.
#[pyfunction]
fn set_memory_limit(limit: &Bound<'_, PyAny>) -> PyResult<usize> {
    let limit = non_negative("set_memory_limit", limit)?;
    Ok(memory().set_memory_limit(limit))
}

/// A byte count from Python (up to the largest `usize`, which a previous call may have
/// returned): negative values are a ValueError naming the function.
fn non_negative(op: &str, limit: &Bound<'_, PyAny>) -> PyResult<usize> {
    limit.extract::<usize>().map_err(|e| match limit.extract::<i64>() {
        Ok(n) if n < 0 => pyo3::exceptions::PyValueError::new_err(format!(
            "[{op}] The limit must be a non-negative number of bytes, got {n}."
        )),
        _ => e,
    })
}

/// Sets the cache limit in bytes (0 disables the cache); returns the previous limit.
#[pyfunction]
fn set_cache_limit(limit: &Bound<'_, PyAny>) -> PyResult<usize> {
    let limit = non_negative("set_cache_limit", limit)?;
    if on_gpu() {
        if let Some(gpu) = gpu_memory() {
            gpu.set_cache_limit(limit);
        }
    }
    Ok(HOST.set_cache_limit(limit))
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
