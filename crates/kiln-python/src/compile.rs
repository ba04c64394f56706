//! The Rust side of `kiln.core.compile`: tracing a Python function of a flat list of arrays
//! into an optimised graph, replaying it, and what explain reports. Pytrees, constants, the
//! cache and captured state live in `kiln/core/_compile.py`.

use crate::array::PyArray;
use crate::error::to_pyerr;
use crate::transforms::rust_fun;
use kiln_core::compile::{self, Compiled};
use kiln_core::Array;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};
use std::cell::RefCell;
use std::sync::Arc;

/// One traced and optimised graph (a cache entry's compiled function).
#[pyclass(name = "CompiledGraph", module = "kiln._core", frozen)]
pub struct PyCompiled(Arc<Compiled>);

fn arrays(list: &[PyRef<'_, PyArray>]) -> Vec<Array> {
    list.iter().map(|a| a.0.clone()).collect()
}

#[pymethods]
impl PyCompiled {
    /// Records the graph over `inputs` and returns its (lazy) outputs.
    fn replay(&self, inputs: Vec<PyRef<'_, PyArray>>) -> PyResult<Vec<PyArray>> {
        let out = self.0.replay(&arrays(&inputs)).map_err(to_pyerr)?;
        Ok(out.into_iter().map(PyArray).collect())
    }

    /// Number of primitive calls one replay records.
    #[getter]
    fn num_nodes(&self) -> usize {
        self.0.num_nodes()
    }

    /// The graphs (as traced, simplified, final) and the fused regions, as data.
    fn explain<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let d = PyDict::new(py);
        d.set_item("traced", PyList::new(py, &self.0.traced)?)?;
        d.set_item("simplified", PyList::new(py, &self.0.simplified)?)?;
        d.set_item("graph", PyList::new(py, self.0.graph().describe())?)?;
        let regions = PyList::empty(py);
        for r in &self.0.regions {
            let rd = PyDict::new(py);
            rd.set_item("name", &r.name)?;
            rd.set_item("size", r.size)?;
            rd.set_item("borders", PyList::new(py, &r.borders)?)?;
            regions.append(rd)?;
        }
        d.set_item("regions", regions)?;
        Ok(d)
    }
}

/// Traces `fun(list[array]) -> list[array]` on placeholders shaped like `inputs`.
#[pyfunction]
#[pyo3(signature = (fun, inputs, shapeless = false))]
fn _compile_trace(
    fun: &Bound<'_, PyAny>,
    inputs: Vec<PyRef<'_, PyArray>>,
    shapeless: bool,
) -> PyResult<PyCompiled> {
    let raised = RefCell::new(None);
    let result = compile::trace(rust_fun(fun, &raised), &arrays(&inputs), shapeless);
    match result {
        Ok(c) => Ok(PyCompiled(Arc::new(c))),
        Err(e) => Err(raised.into_inner().unwrap_or_else(|| to_pyerr(e))),
    }
}

/// Whether an array is a placeholder of a running transform (compile, grad, vmap).
#[pyfunction]
fn _is_tracer(x: PyRef<'_, PyArray>) -> bool {
    x.0.is_tracer()
}

/// Turns compile off globally and at once (compiled functions call the original).
#[pyfunction]
fn disable_compile() {
    compile::disable_compile();
}

/// Turns compile back on.
#[pyfunction]
fn enable_compile() {
    compile::enable_compile();
}

#[pyfunction]
fn _compile_enabled() -> bool {
    compile::is_enabled()
}

/// Kernel build counters: `{builds, disk_hits, failures, build_ms}`.
#[pyfunction]
fn _jit_stats(py: Python<'_>) -> PyResult<Bound<'_, PyDict>> {
    let s = kiln_cpu::fused::jit::stats();
    let d = PyDict::new(py);
    d.set_item("builds", s.builds)?;
    d.set_item("disk_hits", s.disk_hits)?;
    d.set_item("failures", s.failures)?;
    d.set_item("build_ms", s.build_micros as f64 / 1000.0)?;
    d.set_item("errors", PyList::new(py, kiln_cpu::fused::jit::failures())?)?;
    Ok(d)
}

/// Waits until no kernel is building in the background.
#[pyfunction]
fn _wait_for_builds(py: Python<'_>) {
    py.detach(kiln_cpu::fused::jit::wait_for_builds);
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyCompiled>()?;
    m.add_function(wrap_pyfunction!(_compile_trace, m)?)?;
    m.add_function(wrap_pyfunction!(_is_tracer, m)?)?;
    m.add_function(wrap_pyfunction!(disable_compile, m)?)?;
    m.add_function(wrap_pyfunction!(enable_compile, m)?)?;
    m.add_function(wrap_pyfunction!(_compile_enabled, m)?)?;
    m.add_function(wrap_pyfunction!(_jit_stats, m)?)?;
    m.add_function(wrap_pyfunction!(_wait_for_builds, m)?)?;
    Ok(())
}
