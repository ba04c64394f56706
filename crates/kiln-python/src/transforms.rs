//! The Rust side of `kiln.core`'s function transforms: vjp and jvp over a Python function of
//! a flat list of arrays. Pytrees, argnums and the grad wrappers live in
//! `kiln/core/_transforms.py`.

use crate::array::PyArray;
use crate::error::to_pyerr;
use kiln::{transforms, Array, Result};
use kiln_base::Error;
use pyo3::prelude::*;
use pyo3::types::PyList;
use std::cell::RefCell;

/// Wraps a Python function of `list[array] -> list[array]` as a Rust one. A Python exception
/// raised inside is kept in `raised` and re-raised as itself once the transform returns.
pub(crate) fn rust_fun<'a, 'py>(
    fun: &'a Bound<'py, PyAny>,
    raised: &'a RefCell<Option<PyErr>>,
) -> impl FnOnce(&[Array]) -> Result<Vec<Array>> + 'a {
    move |inputs: &[Array]| {
        let py = fun.py();
        let run = || -> PyResult<Vec<Array>> {
            let args = PyList::new(py, inputs.iter().map(|a| PyArray(a.clone())))?;
            let out = fun.call1((args,))?;
            out.try_iter()?.map(|o| Ok(o?.extract::<PyRef<PyArray>>()?.0.clone())).collect()
        };
        run().map_err(|e| {
            *raised.borrow_mut() = Some(e);
            Error::Runtime { op: "transform", msg: "the function raised".into() }
        })
    }
}

type Pair = (Vec<PyArray>, Vec<PyArray>);

fn finish(
    result: Result<(Vec<Array>, Vec<Array>)>,
    raised: RefCell<Option<PyErr>>,
) -> PyResult<Pair> {
    match result {
        Ok((a, b)) => {
            Ok((a.into_iter().map(PyArray).collect(), b.into_iter().map(PyArray).collect()))
        }
        Err(e) => Err(raised.into_inner().unwrap_or_else(|| to_pyerr(e))),
    }
}

fn arrays(list: Vec<PyRef<'_, PyArray>>) -> Vec<Array> {
    list.iter().map(|a| a.0.clone()).collect()
}

/// `(outputs, cotangents of primals)`; `cotangents=None` means one scalar output seeded 1.
#[pyfunction]
#[pyo3(signature = (fun, primals, cotangents = None))]
fn _vjp(
    fun: &Bound<'_, PyAny>,
    primals: Vec<PyRef<'_, PyArray>>,
    cotangents: Option<Vec<PyRef<'_, PyArray>>>,
) -> PyResult<Pair> {
    let raised = RefCell::new(None);
    let primals = arrays(primals);
    let cotangents = match cotangents {
        Some(c) => arrays(c),
        None => vec![kiln::ops::ones(&[], kiln_base::DType::F32).map_err(to_pyerr)?],
    };
    let result = transforms::vjp(rust_fun(fun, &raised), &primals, &cotangents);
    finish(result, raised)
}

/// `(outputs, tangents of outputs)`.
#[pyfunction]
fn _jvp(
    fun: &Bound<'_, PyAny>,
    primals: Vec<PyRef<'_, PyArray>>,
    tangents: Vec<PyRef<'_, PyArray>>,
) -> PyResult<Pair> {
    let raised = RefCell::new(None);
    let result = transforms::jvp(rust_fun(fun, &raised), &arrays(primals), &arrays(tangents));
    finish(result, raised)
}

/// `(outputs, batch axis of each output or None, batch size)` of `fun` mapped over
/// `in_axes` (one entry per input, None for inputs shared by the whole batch).
#[pyfunction]
fn _vmap(
    fun: &Bound<'_, PyAny>,
    inputs: Vec<PyRef<'_, PyArray>>,
    in_axes: Vec<Option<usize>>,
) -> PyResult<(Vec<PyArray>, Vec<Option<usize>>, usize)> {
    let raised = RefCell::new(None);
    match transforms::vmap_outputs(rust_fun(fun, &raised), &arrays(inputs), &in_axes) {
        Ok((outs, size)) => {
            let (arrays, axes): (Vec<_>, Vec<_>) =
                outs.into_iter().map(|(a, b)| (PyArray(a), b)).unzip();
            Ok((arrays, axes, size))
        }
        Err(e) => Err(raised.into_inner().unwrap_or_else(|| to_pyerr(e))),
    }
}

/// Moves the batch axis `src` of `x` (None: not batched) to `dst` (None: leave unbatched).
#[pyfunction]
fn _place_batch(
    x: PyRef<'_, PyArray>,
    src: Option<usize>,
    dst: Option<usize>,
    size: usize,
) -> PyResult<PyArray> {
    transforms::place_batch(&x.0, src, dst, size).map(PyArray).map_err(to_pyerr)
}

/// A Python `list[array] -> list[array]` callable (any arity of list arguments) as a
/// shareable Rust function; a Python exception becomes a kiln error carrying its text.
fn shared_fun(
    fun: Py<PyAny>,
    op: &'static str,
) -> impl Fn(&[&[Array]]) -> Result<Vec<Array>> + Send + Sync {
    move |lists: &[&[Array]]| {
        Python::attach(|py| {
            let run = || -> PyResult<Vec<Array>> {
                let args: Vec<Bound<'_, PyList>> = lists
                    .iter()
                    .map(|l| PyList::new(py, l.iter().map(|a| PyArray(a.clone()))))
                    .collect::<PyResult<_>>()?;
                let out = fun.bind(py).call1(pyo3::types::PyTuple::new(py, args)?)?;
                out.try_iter()?.map(|o| Ok(o?.extract::<PyRef<PyArray>>()?.0.clone())).collect()
            };
            run().map_err(|e| Error::Runtime { op, msg: format!("the function raised {e}") })
        })
    }
}

/// A Python `(list[array], list[int | None]) -> (list[array], list[int | None])` batching
/// rule as a shareable Rust one.
fn vmap_rule(fun: Py<PyAny>) -> transforms::VmapFun {
    std::sync::Arc::new(move |inputs: &[Array], axes: &[Option<usize>]| {
        Python::attach(|py| {
            let run = || -> PyResult<(Vec<Array>, Vec<Option<usize>>)> {
                let args = PyList::new(py, inputs.iter().map(|a| PyArray(a.clone())))?;
                let out = fun.bind(py).call1((args, axes.to_vec()))?;
                let (outs, out_axes): (Vec<PyRef<'_, PyArray>>, Vec<Option<usize>>) =
                    out.extract()?;
                Ok((outs.iter().map(|a| a.0.clone()).collect(), out_axes))
            };
            run().map_err(|e| {
                // A ValueError (say, a bad axis from the rule) stays a ValueError.
                if e.is_instance_of::<pyo3::exceptions::PyValueError>(py) {
                    Error::Value { op: "custom_function.vmap", msg: e.value(py).to_string() }
                } else {
                    Error::Runtime {
                        op: "custom_function.vmap",
                        msg: format!("the function raised {e}"),
                    }
                }
            })
        })
    })
}

/// Calls `fun(primals)` as a custom function: `vjp(primals, cotangents, outputs)`,
/// `jvp(primals, tangents)` and `vmap(inputs, axes)` replace transforming it (None:
/// transform `fun` itself, recomputing it).
#[pyfunction]
#[pyo3(signature = (fun, primals, vjp = None, jvp = None, vmap = None))]
fn _custom_call(
    fun: Py<PyAny>,
    primals: Vec<PyRef<'_, PyArray>>,
    vjp: Option<Py<PyAny>>,
    jvp: Option<Py<PyAny>>,
    vmap: Option<Py<PyAny>>,
) -> PyResult<Vec<PyArray>> {
    let f = shared_fun(fun, "custom_function");
    let rules = transforms::CustomRules {
        fun: std::sync::Arc::new(move |p: &[Array]| f(&[p])),
        vjp: vjp.map(|v| {
            let v = shared_fun(v, "custom_function.vjp");
            std::sync::Arc::new(move |p: &[Array], c: &[Array], o: &[Array]| v(&[p, c, o]))
                as transforms::VjpFun
        }),
        jvp: jvp.map(|j| {
            let j = shared_fun(j, "custom_function.jvp");
            std::sync::Arc::new(move |p: &[Array], t: &[Array]| j(&[p, t])) as transforms::JvpFun
        }),
        vmap: vmap.map(vmap_rule),
    };
    let outs = transforms::custom_call(rules, &arrays(primals)).map_err(to_pyerr)?;
    Ok(outs.into_iter().map(PyArray).collect())
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(_custom_call, m)?)?;
    m.add_function(wrap_pyfunction!(_vjp, m)?)?;
    m.add_function(wrap_pyfunction!(_jvp, m)?)?;
    m.add_function(wrap_pyfunction!(_vmap, m)?)?;
    m.add_function(wrap_pyfunction!(_place_batch, m)?)?;
    Ok(())
}
