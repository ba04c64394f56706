//! `kiln._core`: the Python extension module behind `kiln.core`, mirroring `mlx.core`
//! (code written for MLX runs with `import kiln.core as mx`).
//!
//! Each file has one job: `array` (the array class), `convert` (Python values <-> arrays),
//! `ops` (free functions), `indexing` (shape and indexing functions, index expressions), `random` (the `random` submodule), `device` (devices and
//! streams), `memory` (allocation counters), `dtype` (the Dtype class), `format` (MLX's repr format) and `error` (the one
//! mapping from kiln errors to Python exceptions), `interrupt` (Ctrl-C during an evaluation).
//! `reductions` (var, std, logsumexp, softmax, median, scans, ...) and `sort` (sorting and
//! searching) hold the reduction, scan and sort families.

/// Every Rust allocation of the extension goes through mimalloc: a decode step allocates
/// and frees about a thousand graph nodes, and with `async_eval`'s issuing thread one
/// thread frees what the other allocated, where glibc's arenas contend (a 2-layer decode
/// loop on 2 cores: 3.61 ms a step against 4.02).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

mod array;
mod buffer;
mod compile;
mod complex;
mod conv;
mod convert;
mod creation;
mod device;
mod distributed;
mod dtype;
mod elementwise;
mod error;
mod export;
mod fast;
mod fft;
mod format;
mod gather_mm;
mod indexing;
mod interrupt;
mod io;
mod linalg;
mod math;
mod memory;
mod ops;
mod printoptions;
mod profile;
mod quantize;
mod random;
mod reductions;
mod report;
mod sort;
mod streams;
mod transforms;

use pyo3::prelude::*;

#[pymodule]
fn _core(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    interrupt::chain_handler();
    kiln::init();
    kiln::device::mark_main_thread();
    m.add_class::<array::PyArray>()?;
    m.add_class::<array::ArrayIterator>()?;
    dtype::register(m)?;
    device::register(m)?;
    ops::register(m)?;
    elementwise::register(m)?;
    memory::register(m)?;
    io::register(m)?;
    transforms::register(m)?;
    random::register(m)?;
    math::register(m)?;
    creation::register(m)?;
    linalg::register(m)?;
    conv::register(m)?;
    indexing::register(m)?;
    reductions::register(m)?;
    compile::register(m)?;
    export::register(m)?;
    profile::register(m)?;
    streams::register(m)?;
    printoptions::register(m)?;
    quantize::register(m)?;
    gather_mm::register(m)?;
    buffer::register(m)?;
    complex::register(m)?;
    fft::register(m)?;
    fast::register(m)?;
    distributed::register(m)?;
    Ok(())
}
