//! The Rust side of `export_function` / `import_function` / `exporter`: tracing a Python
//! function of a flat list of arrays into a savable graph, writing and reading files, and
//! calling an imported trace. Argument handling, trace matching and MLX's messages live in
//! `kiln/core/_export.py`; the file format in kiln-core's `export.rs`.

use crate::array::PyArray;
use crate::dtype::Dtype;
use crate::error::to_pyerr;
use crate::transforms::rust_fun;
use kiln::export::{self, Exported, Imported, Trace};
use kiln::{compile, Array};
use pyo3::prelude::*;
use std::cell::RefCell;
use std::path::PathBuf;
use std::sync::Arc;

/// One traced signature, held until the file is written.
#[pyclass(name = "ExportedTrace", module = "kiln._core", frozen)]
pub struct PyTrace(Trace);

/// An imported function's traces.
#[pyclass(name = "ImportedGraph", module = "kiln._core", frozen)]
pub struct PyImported(Arc<Imported>);

/// A trace's signature for Python: `(positional, keywords, [(shape, dtype), ...])`.
type Signature = (usize, Vec<String>, Vec<(Vec<usize>, Dtype)>);

fn arrays(list: &[PyRef<'_, PyArray>]) -> Vec<Array> {
    list.iter().map(|a| a.0.clone()).collect()
}

/// Traces `fun(list[array]) -> list[array]` on placeholders shaped like `inputs` (the first
/// `positional`, then the keyword arguments named `keywords`).
#[pyfunction]
#[pyo3(signature = (fun, inputs, positional, keywords, shapeless = false))]
fn _export_trace(
    fun: &Bound<'_, PyAny>,
    inputs: Vec<PyRef<'_, PyArray>>,
    positional: usize,
    keywords: Vec<String>,
    shapeless: bool,
) -> PyResult<PyTrace> {
    let raised = RefCell::new(None);
    let graph = compile::capture(rust_fun(fun, &raised), &arrays(&inputs), shapeless)
        .map_err(|e| raised.take().unwrap_or_else(|| to_pyerr(e)))?;
    export::check_exportable(&graph).map_err(to_pyerr)?;
    Ok(PyTrace(Trace { positional, keywords, graph }))
}

/// Where a node reads from, for Python: `("input", i)`, `("const", i)`, `("node", n, k)`.
type Source = (&'static str, usize, usize);

fn source(v: &compile::Value) -> Source {
    match *v {
        compile::Value::Input(i) => ("input", i, 0),
        compile::Value::Const(i) => ("const", i, 0),
        compile::Value::Node(n, k) => ("node", n, k),
    }
}

/// One node for Python: primitive name, its parameters as JSON, inputs, output metas.
type NodeInfo = (String, String, Vec<Source>, Vec<(Vec<usize>, Dtype)>);

#[pymethods]
impl PyTrace {
    /// The traced graph's nodes in order (the callback form of `export_function`).
    fn nodes(&self) -> Vec<NodeInfo> {
        self.0
            .graph
            .nodes
            .iter()
            .map(|n| {
                (
                    n.prim.name().to_string(),
                    export::primitive_json(&n.prim),
                    n.inputs.iter().map(source).collect(),
                    n.outputs.iter().map(|(s, d)| (s.to_vec(), Dtype(*d))).collect(),
                )
            })
            .collect()
    }

    /// The input metas `[(shape, dtype)]`.
    fn inputs(&self) -> Vec<(Vec<usize>, Dtype)> {
        self.0.graph.inputs.iter().map(|(s, d)| (s.to_vec(), Dtype(*d))).collect()
    }

    /// The frozen constants.
    fn constants(&self) -> Vec<PyArray> {
        self.0.graph.consts.iter().cloned().map(PyArray).collect()
    }

    /// Where each output comes from.
    fn outputs(&self) -> Vec<Source> {
        self.0.graph.outputs.iter().map(source).collect()
    }
}

/// Writes `traces` to `file` (evaluating their constants, without the GIL).
#[pyfunction]
#[pyo3(signature = (file, traces, shapeless, metadata = None))]
fn _export_write(
    py: Python<'_>,
    file: PathBuf,
    traces: Vec<PyRef<'_, PyTrace>>,
    shapeless: bool,
    metadata: Option<String>,
) -> PyResult<()> {
    let exported =
        Exported { shapeless, metadata, traces: traces.iter().map(|t| t.0.clone()).collect() };
    let bytes = py.detach(|| export::encode(&exported)).map_err(to_pyerr)?;
    std::fs::write(&file, bytes).map_err(|e| {
        pyo3::exceptions::PyRuntimeError::new_err(format!(
            "[export_function] Failed to open {}: {e}.",
            file.display()
        ))
    })
}

/// Reads and checks a file written by `export_function`.
#[pyfunction]
fn _import_graph(py: Python<'_>, file: PathBuf) -> PyResult<PyImported> {
    let imported = py.detach(|| Imported::load(&file)).map_err(to_pyerr)?;
    Ok(PyImported(Arc::new(imported)))
}

#[pymethods]
impl PyImported {
    #[getter]
    fn shapeless(&self) -> bool {
        self.0.shapeless
    }

    /// The string saved with `metadata=` ("" when none, as MLX).
    #[getter]
    fn metadata(&self) -> String {
        self.0.metadata.clone().unwrap_or_default()
    }

    /// Per trace: `(positional, keywords, [(shape, dtype), ...])`.
    fn signatures(&self) -> Vec<Signature> {
        self.0
            .traces
            .iter()
            .map(|t| {
                let inputs = t.inputs().iter().map(|(s, d)| (s.to_vec(), Dtype(*d))).collect();
                (t.positional, t.keywords.clone(), inputs)
            })
            .collect()
    }

    /// Records trace `index` over `inputs` and returns its (lazy) outputs.
    fn call(&self, index: usize, inputs: Vec<PyRef<'_, PyArray>>) -> PyResult<Vec<PyArray>> {
        let trace = self.0.traces.get(index).ok_or_else(|| {
            pyo3::exceptions::PyIndexError::new_err(format!("[import_function] No trace {index}."))
        })?;
        let out = trace.call(&arrays(&inputs)).map_err(to_pyerr)?;
        Ok(out.into_iter().map(PyArray).collect())
    }
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyTrace>()?;
    m.add_class::<PyImported>()?;
    m.add_function(wrap_pyfunction!(_export_trace, m)?)?;
    m.add_function(wrap_pyfunction!(_export_write, m)?)?;
    m.add_function(wrap_pyfunction!(_import_graph, m)?)?;
    Ok(())
}
