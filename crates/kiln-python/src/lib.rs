//! `kiln._core`: the Python extension module behind `kiln.core`, mirroring `mlx.core`
//! (code written for MLX runs with `import kiln.core as mx`).
//!
//! Each file has one job: `array` (the array class), `convert` (Python values <-> arrays),
//! `ops` (free functions), `random` (the `random` submodule), `device` (devices and
//! streams), `memory` (allocation counters), `dtype` (the Dtype class), `format` (MLX's repr format) and `error` (the one
//! mapping from kiln errors to Python exceptions).
//! `reductions` (var, std, logsumexp, softmax, median, scans, ...) and `sort` (sorting and
//! searching) hold the reduction, scan and sort families.

mod array;
mod convert;
mod device;
mod dtype;
mod error;
mod format;
mod memory;
mod ops;
mod random;
mod reductions;
mod sort;

use pyo3::prelude::*;

#[pymodule]
fn _core(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add_class::<array::PyArray>()?;
    m.add_class::<array::ArrayIterator>()?;
    dtype::register(m)?;
    device::register(m)?;
    ops::register(m)?;
    memory::register(m)?;
    random::register(m)?;
    reductions::register(m)?;
    Ok(())
}
