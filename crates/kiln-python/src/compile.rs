//! The Rust side of `kiln.core.compile`: tracing a Python function of a flat list of arrays
//! into an optimised graph, replaying it, and what explain reports. Pytrees, constants, the
//! cache and captured state live in `kiln/core/_compile.py`.

use crate::array::PyArray;
use crate::error::to_pyerr;
use crate::transforms::rust_fun;
use kiln::compile::{self, Compiled};
use kiln::Array;
use pyo3::gc::{PyTraverseError, PyVisit};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyDict, PyList, PyTuple};
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
        let graph = match self.0.cuda_graph_status() {
            Some(s) => {
                let g = PyDict::new(py);
                g.set_item("state", s.state)?;
                g.set_item("nodes", s.nodes)?;
                g.set_item("launches", s.launches)?;
                Some(g)
            }
            None => None,
        };
        d.set_item("cuda_graph", graph)?;
        let prebuild = match self.0.prebuild_report() {
            Some(r) => Some(batch_dict(py, r)?),
            None => None,
        };
        d.set_item("gpu_prebuild", prebuild)?;
        crate::report::add_report_data(&d, &self.0)?;
        Ok(d)
    }
}

/// A parallel kernel build as data: each kernel with how it was obtained, the threads, the
/// batch's wall time and the NVRTC time summed over its threads.
fn batch_dict<'py>(
    py: Python<'py>,
    r: &kiln_base::backend::BuildReport,
) -> PyResult<Bound<'py, PyDict>> {
    use kiln_base::backend::BuildOutcome as Outcome;
    let d = PyDict::new(py);
    d.set_item("id", r.id)?;
    let kernels = PyList::empty(py);
    for k in &r.kernels {
        let kd = PyDict::new(py);
        kd.set_item("name", &k.symbol)?;
        kd.set_item("state", k.outcome.name())?;
        kd.set_item("build_ms", k.build_ms)?;
        kernels.append(kd)?;
    }
    d.set_item("kernels", kernels)?;
    d.set_item("built", r.count(Outcome::Built))?;
    d.set_item("disk_hits", r.count(Outcome::Disk))?;
    d.set_item("memory_hits", r.count(Outcome::Memory))?;
    d.set_item("failed", r.count(Outcome::Failed))?;
    d.set_item("threads", r.threads)?;
    d.set_item("wall_ms", r.wall_ms)?;
    d.set_item("build_ms", r.build_ms())?;
    Ok(d)
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

/// The fast cache key of a call whose arguments are all arrays (the common case):
/// `(-1, dtype, ndim, *shape, dtype, ndim, *shape, ...)` (no shapes when `shapeless`).
/// `None` when compile is off, an argument is not an array, or one is a tracer: the general
/// path handles those. The leading -1 keeps these keys apart from the general keys (tuples
/// whose first item is a tuple).
fn signature(args: &Bound<'_, PyTuple>, shapeless: bool) -> Option<Vec<i64>> {
    if !compile::is_enabled() {
        return None;
    }
    let mut key: Vec<i64> = Vec::with_capacity(1 + args.len() * 4);
    key.push(-1);
    for item in args.iter() {
        let a = item.cast::<PyArray>().ok()?.borrow();
        if a.0.is_tracer() {
            return None;
        }
        key.push(a.0.dtype() as u8 as i64);
        key.push(a.0.ndim() as i64);
        if !shapeless {
            key.extend(a.0.shape().iter().map(|&d| d as i64));
        }
    }
    Some(key)
}

/// `signature` as a tuple, for the general path's cache keys.
#[pyfunction]
fn _compile_signature<'py>(
    args: &Bound<'py, PyTuple>,
    shapeless: bool,
) -> PyResult<Option<Bound<'py, PyTuple>>> {
    signature(args, shapeless).map(|key| PyTuple::new(args.py(), key)).transpose()
}

/// The calls of a compiled function; `_compile.py`'s `_CompiledFunction` derives from it
/// and holds the rest. A call of arrays only (no keywords, no captured state) whose
/// signature has a cache entry replays it here without running Python (that Python cost
/// about 1.5 us a call); every other call goes to the subclass's
/// `_call(args, kwargs, signature)`.
#[pyclass(name = "CompiledCall", module = "kiln._core", subclass)]
pub struct CompiledCall {
    /// Calls and cache hits, counted here and by `_call` (`explain`'s counters).
    #[pyo3(get, set, name = "_calls")]
    calls: u64,
    #[pyo3(get, set, name = "_hits")]
    hits: u64,
    /// The key of the entry the last call used (the next retrace says what changed).
    #[pyo3(get, set, name = "_last_key")]
    last_key: Option<Py<PyAny>>,
    /// The entries: an OrderedDict of key -> (graph, output spec, outputs, key), least
    /// recently used first.
    #[pyo3(get, set, name = "_cache")]
    cache: Option<Py<PyAny>>,
    /// No captured state (`inputs=` / `outputs=`): calls may take the fast path.
    #[pyo3(get, set, name = "_plain")]
    plain: bool,
    #[pyo3(get, set, name = "_shapeless")]
    shapeless: bool,
    /// The last fast hit (signature, graph, output spec): a loop calling with the same
    /// shapes skips the lookup and the LRU update. Forgotten whenever `_call` runs, the only
    /// code that adds or evicts entries.
    last: Option<(Vec<i64>, Py<PyCompiled>, Py<PyAny>)>,
}

#[pymethods]
impl CompiledCall {
    #[new]
    #[pyo3(signature = (*_args, **_kwargs))]
    fn new(_args: &Bound<'_, PyTuple>, _kwargs: Option<&Bound<'_, PyDict>>) -> Self {
        CompiledCall {
            calls: 0,
            hits: 0,
            last_key: None,
            cache: None,
            plain: false,
            shapeless: false,
            last: None,
        }
    }

    #[pyo3(signature = (*args, **kwargs))]
    fn __call__(
        slf: &Bound<'_, Self>,
        args: &Bound<'_, PyTuple>,
        kwargs: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<Py<PyAny>> {
        let py = slf.py();
        let (plain, shapeless) = {
            let s = slf.borrow();
            (s.plain, s.shapeless)
        };
        let sig = match kwargs.is_none_or(|k| k.is_empty()) && plain {
            true => signature(args, shapeless),
            false => None,
        };
        let Some(sig) = sig else { return general(slf, args, kwargs, None) };
        let last = match &slf.borrow().last {
            Some((k, graph, spec)) if *k == sig => Some((graph.clone_ref(py), spec.clone_ref(py))),
            _ => None,
        };
        let (graph, spec) = match last {
            Some(hit) => hit,
            None => {
                let key = PyTuple::new(py, &sig)?;
                let cache = match &slf.borrow().cache {
                    Some(c) => c.clone_ref(py).into_bound(py),
                    None => return general(slf, args, kwargs, Some(key)),
                };
                let Some(entry) = cache.cast::<PyDict>()?.get_item(&key)? else {
                    return general(slf, args, kwargs, Some(key));
                };
                cache.call_method1("move_to_end", (&key,))?;
                let graph = entry.get_item(0)?.cast_into::<PyCompiled>()?.unbind();
                let spec = entry.get_item(1)?.unbind();
                let mut s = slf.borrow_mut();
                s.last_key = Some(entry.get_item(3)?.unbind());
                s.last = Some((sig, graph.clone_ref(py), spec.clone_ref(py)));
                (graph, spec)
            }
        };
        {
            let mut s = slf.borrow_mut();
            s.calls += 1;
            s.hits += 1;
        }
        let inputs = args
            .iter()
            .map(|a| Ok(a.cast::<PyArray>()?.borrow().0.clone()))
            .collect::<PyResult<Vec<Array>>>()?;
        let outputs = graph.get().0.replay(&inputs).map_err(to_pyerr)?;
        let spec = spec.into_bound(py);
        if spec.cast::<pyo3::types::PyString>().is_ok_and(|s| s.to_str().is_ok_and(|s| s == "A")) {
            let out = outputs.into_iter().next().expect("a graph of one output");
            return Ok(Py::new(py, PyArray(out))?.into_any());
        }
        static DECODE: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
        let decode = DECODE.get_or_try_init(py, || {
            Ok::<_, PyErr>(py.import("kiln.core._compile")?.getattr("_decode")?.unbind())
        })?;
        let outputs = PyList::new(py, outputs.into_iter().map(PyArray))?;
        decode.call1(py, (spec, outputs.try_iter()?))
    }

    // The Python objects held here, for the garbage collector (a cycle through the cache
    // is then collected like one through the subclass's __dict__).
    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        visit.call(&self.cache)?;
        visit.call(&self.last_key)?;
        if let Some((_, graph, spec)) = &self.last {
            visit.call(graph)?;
            visit.call(spec)?;
        }
        Ok(())
    }

    fn __clear__(&mut self) {
        (self.cache, self.last_key, self.last) = (None, None, None);
    }
}

/// A call the fast path does not take: the subclass's `_call` (which may add or evict
/// entries, so the remembered hit is dropped first).
fn general(
    slf: &Bound<'_, CompiledCall>,
    args: &Bound<'_, PyTuple>,
    kwargs: Option<&Bound<'_, PyDict>>,
    key: Option<Bound<'_, PyTuple>>,
) -> PyResult<Py<PyAny>> {
    slf.borrow_mut().last = None;
    let kwargs = match kwargs {
        Some(k) => k.clone(),
        None => PyDict::new(slf.py()),
    };
    Ok(slf.call_method1("_call", (args, kwargs, key))?.unbind())
}

/// Nesting depth past which captured state is taken to be cyclic.
const STATE_DEPTH_LIMIT: usize = 500;

/// The array leaves of captured state (`inputs=` / `outputs=` of compile) in a fixed order:
/// `(slots, values)`, each slot a `(container, key)` pair to write a new value back
/// through. Lists and dicts (and their subclasses, such as modules) are walked and hold
/// arrays; tuples are walked but cannot hold arrays (they cannot be updated in place);
/// other objects are walked through their `__dict__` (not classes or callables). Runs on
/// every call of a compiled function with state, so it is done here rather than in Python.
#[pyfunction]
fn _state_leaves<'py>(
    tree: &Bound<'py, PyAny>,
) -> PyResult<(Bound<'py, PyList>, Bound<'py, PyList>)> {
    let py = tree.py();
    let slots = PyList::empty(py);
    let values = PyList::empty(py);
    walk_state(tree, &slots, &values, 0)?;
    Ok((slots, values))
}

fn walk_state<'py>(
    node: &Bound<'py, PyAny>,
    slots: &Bound<'py, PyList>,
    values: &Bound<'py, PyList>,
    depth: usize,
) -> PyResult<()> {
    if depth > STATE_DEPTH_LIMIT {
        return Err(pyo3::exceptions::PyValueError::new_err(
            "[compile] Captured state is nested too deeply (or contains itself).",
        ));
    }
    let visit = |key: Bound<'py, PyAny>, v: Bound<'py, PyAny>| -> PyResult<()> {
        if v.is_instance_of::<PyArray>() {
            slots.append((node, key))?;
            values.append(v)
        } else {
            walk_state(&v, slots, values, depth + 1)
        }
    };
    // Subclasses (`mx.random.state`, modules) may override iteration: they go through
    // Python's protocol, plain lists and dicts through their storage. Both snapshot first.
    if node.is_instance_of::<PyList>() {
        let items: Vec<_> = if let Ok(list) = node.cast_exact::<PyList>() {
            list.iter().collect()
        } else {
            node.try_iter()?.collect::<PyResult<_>>()?
        };
        for (i, v) in items.into_iter().enumerate() {
            visit(i.into_pyobject(node.py())?.into_any(), v)?;
        }
    } else if node.is_instance_of::<PyDict>() {
        let items = if let Ok(dict) = node.cast_exact::<PyDict>() {
            dict.items()
        } else {
            PyList::new(
                node.py(),
                node.call_method0("items")?.try_iter()?.collect::<PyResult<Vec<_>>>()?,
            )?
        };
        for item in items.iter() {
            let (k, v): (Bound<'py, PyAny>, Bound<'py, PyAny>) = item.extract()?;
            visit(k, v)?;
        }
    } else if let Ok(tuple) = node.cast::<PyTuple>() {
        for v in tuple.iter() {
            if v.is_instance_of::<PyArray>() {
                return Err(pyo3::exceptions::PyValueError::new_err(
                    "[compile] Captured state must hold its arrays in lists or dicts (tuples \
                     cannot be updated in place).",
                ));
            }
            walk_state(&v, slots, values, depth + 1)?;
        }
    } else if !node.is_instance_of::<pyo3::types::PyType>()
        && !node.is_callable()
        && node.hasattr("__dict__")?
    {
        walk_state(&node.getattr("__dict__")?, slots, values, depth + 1)?;
    }
    Ok(())
}

/// Writes the graph behind `args` to `file` in Graphviz's DOT format (MLX's
/// `export_to_dot(file, *args, **kwargs)`).
///
/// `file` is a path or an object with `write`. The graph includes every unevaluated input
/// of the given arrays, recursively; keyword arguments name arrays (`x=x`). Fused kernels of
/// compiled functions appear as one node named `Compiled_` followed by their primitives.
#[pyfunction]
#[pyo3(signature = (file, *args, **kwargs))]
fn export_to_dot(
    file: &Bound<'_, PyAny>,
    args: &Bound<'_, PyTuple>,
    kwargs: Option<&Bound<'_, PyDict>>,
) -> PyResult<()> {
    let as_array = |v: &Bound<'_, PyAny>| -> PyResult<Array> {
        match v.cast::<PyArray>() {
            Ok(a) => Ok(a.borrow().0.clone()),
            Err(_) => Err(pyo3::exceptions::PyTypeError::new_err(format!(
                "[export_to_dot] Expected arrays, got {}.",
                crate::convert::type_name(v)
            ))),
        }
    };
    let outputs = args.iter().map(|v| as_array(&v)).collect::<PyResult<Vec<_>>>()?;
    let mut named = Vec::new();
    if let Some(kw) = kwargs {
        for (k, v) in kw.iter() {
            named.push((k.str()?.to_string(), as_array(&v)?));
        }
    }
    let text = compile::to_dot(&outputs, &named);
    if file.hasattr("write")? {
        file.call_method1("write", (text,))?;
        return Ok(());
    }
    let path: std::path::PathBuf = file.extract().map_err(|_| {
        pyo3::exceptions::PyTypeError::new_err(format!(
            "[export_to_dot] Expected a file path or a writable file, got {}.",
            crate::convert::type_name(file)
        ))
    })?;
    std::fs::write(&path, text).map_err(|e| {
        pyo3::exceptions::PyOSError::new_err(format!(
            "[export_to_dot] Cannot write {}: {e}",
            path.display()
        ))
    })
}

/// Whether an array is a placeholder of a running transform (compile, grad, vmap).
#[pyfunction]
fn _is_tracer(x: PyRef<'_, PyArray>) -> bool {
    x.0.is_tracer()
}

/// Whether `x` can never be evaluated because its graph reaches a trace's placeholder.
#[pyfunction]
fn _depends_on_placeholder(x: PyRef<'_, PyArray>) -> bool {
    x.0.depends_on_placeholder()
}

/// Fault injection for tests: the next evaluation of primitive `op` panics in its kernel
/// (None: disarm).
#[pyfunction]
#[pyo3(signature = (op = None))]
fn _inject_eval_panic(op: Option<&str>) {
    kiln::eval::inject_panic(op);
}

/// Fault injection for tests: a Ctrl-C arrives while the next evaluation of primitive `op`
/// runs its kernel (None: disarm).
#[pyfunction]
#[pyo3(signature = (op = None))]
fn _inject_eval_interrupt(op: Option<&str>) {
    kiln::eval::inject_interrupt(op);
}

/// Batches eager GPU launches into CUDA graphs from the next evaluation on, or stops
/// (kiln-cuda's batch.rs; `KILN_EAGER_GRAPHS=1` sets it at start).
#[pyfunction]
fn _set_eager_graphs(on: bool) {
    kiln::cuda::set_eager_graphs(on);
}

/// What `async_eval` hands to kiln's issuing thread from now on: work on any device
/// (True), none (False), GPU work ("gpu"), or the `KILN_ASYNC_THREAD` choice (None); see
/// kiln-core's background.rs.
#[pyfunction]
#[pyo3(signature = (mode = None))]
fn _set_async_thread(mode: Option<&Bound<'_, PyAny>>) -> PyResult<()> {
    use kiln::background::Handover;
    let mode = match mode.filter(|m| !m.is_none()) {
        None => None,
        Some(m) if m.extract::<String>().is_ok_and(|s| s == "gpu") => Some(Handover::Gpu),
        Some(m) => match m.extract::<bool>() {
            Ok(true) => Some(Handover::All),
            Ok(false) => Some(Handover::Off),
            Err(_) => {
                return Err(pyo3::exceptions::PyValueError::new_err(
                    "[_set_async_thread] Expected True, False, 'gpu' or None.",
                ))
            }
        },
    };
    kiln::background::set_async_thread(mode);
    Ok(())
}

/// Waits until everything handed to the issuing thread has been issued (registered at
/// exit: the interpreter and the driver must not go away under a job).
#[pyfunction]
fn _drain_async_eval(py: Python<'_>) {
    py.detach(kiln::background::drain);
}

/// The issuing thread's jobs so far and the seconds it spent issuing them.
#[pyfunction]
fn _async_thread_stats() -> (u64, f64) {
    kiln::background::issuing_thread_stats()
}

/// The eager-graph batches' counters so far (flushes, direct and graph launches, nodes
/// updated, graphs built and refused).
#[pyfunction]
fn _eager_graph_stats(py: Python<'_>) -> PyResult<Bound<'_, PyDict>> {
    let s = kiln::cuda::eager_graph_stats();
    let out = PyDict::new(py);
    out.set_item("flushes", s.flushes)?;
    out.set_item("direct_launches", s.direct_launches)?;
    out.set_item("graph_launches", s.graph_launches)?;
    out.set_item("nodes_updated", s.nodes_updated)?;
    out.set_item("builds", s.builds)?;
    out.set_item("refused", s.refused)?;
    Ok(out)
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
    let s = kiln::cpu::fused::jit::stats();
    let d = PyDict::new(py);
    d.set_item("builds", s.builds)?;
    d.set_item("disk_hits", s.disk_hits)?;
    d.set_item("failures", s.failures)?;
    d.set_item("build_ms", s.build_micros as f64 / 1000.0)?;
    d.set_item("errors", PyList::new(py, kiln::cpu::fused::jit::failures())?)?;
    let kernels = PyList::empty(py);
    for k in kiln::cpu::fused::jit::kernels() {
        let kd = PyDict::new(py);
        kd.set_item("name", k.name)?;
        kd.set_item("variant", k.variant)?;
        kd.set_item("state", k.state)?;
        kd.set_item("build_ms", k.build_ms)?;
        kd.set_item("from_disk", k.from_disk)?;
        kd.set_item("runs", k.runs)?;
        kd.set_item("run_ms", k.run_ms)?;
        kernels.append(kd)?;
    }
    d.set_item("kernels", kernels)?;
    d.set_item("disk_cache_limit", kiln::cpu::fused::jit::disk_cache_limit())?;
    d.set_item("cuda", cuda_stats(py)?)?;
    Ok(d)
}

/// The GPU's kernel builds (NVRTC): counters, and each kernel with its source.
fn cuda_stats(py: Python<'_>) -> PyResult<Bound<'_, PyDict>> {
    let s = kiln::cuda::nvrtc::stats();
    let d = PyDict::new(py);
    d.set_item("builds", s.compiled)?;
    d.set_item("disk_hits", s.disk_hits)?;
    d.set_item("memory_hits", s.memory_hits)?;
    d.set_item("build_ms", s.compile_time.as_secs_f64() * 1e3)?;
    let kernels = PyList::empty(py);
    for k in kiln::cuda::nvrtc::built() {
        let kd = PyDict::new(py);
        kd.set_item("name", k.symbol)?;
        kd.set_item("build_ms", k.build_ms)?;
        kd.set_item("from_disk", k.from_disk)?;
        kd.set_item("source", k.source)?;
        kd.set_item("batch", k.batch)?;
        kernels.append(kd)?;
    }
    d.set_item("kernels", kernels)?;
    let batches = PyList::empty(py);
    for b in kiln::cuda::prebuild::batches() {
        batches.append(batch_dict(py, &b)?)?;
    }
    d.set_item("batches", batches)?;
    Ok(d)
}

/// Sets the kernel disk cache's size limit in bytes (`None`: `KILN_CACHE_LIMIT_MB`, else
/// 256 MiB); returns the previous limit.
#[pyfunction]
#[pyo3(signature = (limit=None))]
fn _set_disk_cache_limit(limit: Option<u64>) -> u64 {
    let previous = kiln::cpu::fused::jit::disk_cache_limit();
    kiln::cpu::fused::jit::set_disk_cache_limit(limit);
    previous
}

/// Waits until no kernel is building in the background.
#[pyfunction]
fn _wait_for_builds(py: Python<'_>) {
    py.detach(kiln::cpu::fused::jit::wait_for_builds);
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyCompiled>()?;
    m.add_class::<CompiledCall>()?;
    m.add_function(wrap_pyfunction!(_compile_trace, m)?)?;
    m.add_function(wrap_pyfunction!(_is_tracer, m)?)?;
    m.add_function(wrap_pyfunction!(_compile_signature, m)?)?;
    m.add_function(wrap_pyfunction!(_state_leaves, m)?)?;
    m.add_function(wrap_pyfunction!(_depends_on_placeholder, m)?)?;
    m.add_function(wrap_pyfunction!(_inject_eval_panic, m)?)?;
    m.add_function(wrap_pyfunction!(_inject_eval_interrupt, m)?)?;
    m.add_function(wrap_pyfunction!(_set_eager_graphs, m)?)?;
    m.add_function(wrap_pyfunction!(_set_async_thread, m)?)?;
    m.add_function(wrap_pyfunction!(_drain_async_eval, m)?)?;
    m.add_function(wrap_pyfunction!(_eager_graph_stats, m)?)?;
    m.add_function(wrap_pyfunction!(_async_thread_stats, m)?)?;
    m.add_function(wrap_pyfunction!(export_to_dot, m)?)?;
    m.add_function(wrap_pyfunction!(disable_compile, m)?)?;
    m.add_function(wrap_pyfunction!(enable_compile, m)?)?;
    m.add_function(wrap_pyfunction!(_compile_enabled, m)?)?;
    m.add_function(wrap_pyfunction!(_jit_stats, m)?)?;
    m.add_function(wrap_pyfunction!(_wait_for_builds, m)?)?;
    m.add_function(wrap_pyfunction!(_set_disk_cache_limit, m)?)?;
    Ok(())
}
