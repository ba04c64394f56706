//! The bindings under `kiln.core.distributed` (python/kiln/core/distributed.py holds the
//! `Group` class and MLX's signatures): backends and groups from kiln-distributed, the
//! collectives as kiln-core ops. A group is its number in kiln-base's table.

use crate::array::PyArray;
use crate::convert::to_array;
use crate::device::with_stream;
use crate::dtype::Dtype;
use crate::error::{raise, OrRaise};
use kiln::ops::distributed as dist;
use pyo3::prelude::*;

type Stream<'a, 'py> = Option<&'a Bound<'py, PyAny>>;

/// `(group, rank, size, backend)` of the group numbered `id`.
fn describe(id: usize) -> PyResult<(usize, usize, usize, &'static str)> {
    let g = kiln_base::distributed::group(id).or_raise()?;
    Ok((id, g.rank(), g.size(), g.backend()))
}

#[pyfunction]
fn _distributed_init(backend: &str, strict: bool) -> PyResult<(usize, usize, usize, &'static str)> {
    describe(kiln::distributed::init(backend, strict).or_raise()?)
}

#[pyfunction]
fn _distributed_is_available(backend: &str) -> bool {
    kiln::distributed::is_available(backend)
}

#[pyfunction]
fn _distributed_split(
    group: usize,
    color: i32,
    key: i32,
) -> PyResult<(usize, usize, usize, &'static str)> {
    describe(kiln::distributed::split(group, color, key).or_raise()?)
}

#[pyfunction]
fn _distributed_finalize() {
    kiln::distributed::finalize()
}

/// One of the collectives of one input, by name.
#[pyfunction]
#[pyo3(signature = (name, x, group, stream = None))]
fn _distributed_collective(
    name: &str,
    x: &Bound<'_, PyAny>,
    group: usize,
    stream: Stream<'_, '_>,
) -> PyResult<PyArray> {
    let x = to_array(x, None)?;
    let op = match name {
        "all_sum" => dist::all_sum,
        "all_max" => dist::all_max,
        "all_min" => dist::all_min,
        "all_gather" => dist::all_gather,
        "sum_scatter" => dist::sum_scatter,
        _ => return Err(raise!(Value, "distributed", "No collective named {name}.")),
    };
    with_stream(stream, || op(&x, group)).map(PyArray)
}

#[pyfunction]
#[pyo3(signature = (x, dst, group, stream = None))]
fn _distributed_send(
    x: &Bound<'_, PyAny>,
    dst: usize,
    group: usize,
    stream: Stream<'_, '_>,
) -> PyResult<PyArray> {
    let x = to_array(x, None)?;
    with_stream(stream, || dist::send(&x, dst, group)).map(PyArray)
}

#[pyfunction]
#[pyo3(signature = (shape, dtype, src, group, stream = None))]
fn _distributed_recv(
    shape: Vec<usize>,
    dtype: Dtype,
    src: usize,
    group: usize,
    stream: Stream<'_, '_>,
) -> PyResult<PyArray> {
    with_stream(stream, || dist::recv(&shape, dtype.0, src, group)).map(PyArray)
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(_distributed_init, m)?)?;
    m.add_function(wrap_pyfunction!(_distributed_is_available, m)?)?;
    m.add_function(wrap_pyfunction!(_distributed_split, m)?)?;
    m.add_function(wrap_pyfunction!(_distributed_finalize, m)?)?;
    m.add_function(wrap_pyfunction!(_distributed_collective, m)?)?;
    m.add_function(wrap_pyfunction!(_distributed_send, m)?)?;
    m.add_function(wrap_pyfunction!(_distributed_recv, m)?)?;
    Ok(())
}
