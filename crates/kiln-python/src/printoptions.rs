//! MLX's print options: `set_printoptions(precision=...)`, `get_printoptions()`, the
//! `printoptions(...)` context manager and the `PrintOptions` class. A precision `p >= 0`
//! prints floats in fixed notation with `p` decimals (C++'s `std::fixed`); any negative
//! precision is the default `%g` form.

use pyo3::prelude::*;
use std::sync::atomic::{AtomicI32, Ordering};

/// The process-wide precision (as MLX: one global setting, not per thread).
static PRECISION: AtomicI32 = AtomicI32::new(-1);

/// A float element as `repr` prints it under the current options.
pub fn format_float(v: f64) -> String {
    let p = PRECISION.load(Ordering::Relaxed);
    if p < 0 || !v.is_finite() {
        return crate::format::format_g(v);
    }
    format!("{v:.prec$}", prec = p as usize)
}

/// Options for printing arrays: `precision`, the decimals of floats (-1: the default
/// `%g`-style form).
#[pyclass(name = "PrintOptions", module = "kiln.core", from_py_object)]
#[derive(Clone)]
pub struct PrintOptions {
    /// Number of decimal places of floats (-1: the default form).
    #[pyo3(get, set)]
    precision: i32,
}

#[pymethods]
impl PrintOptions {
    #[new]
    fn new() -> Self {
        PrintOptions { precision: -1 }
    }

    fn __repr__(&self) -> String {
        format!("PrintOptions(precision={})", self.precision)
    }
}

/// Set global printing precision for array formatting (`precision`: decimal places of
/// floats; -1 restores the default).
#[pyfunction]
#[pyo3(signature = (precision = -1))]
fn set_printoptions(precision: i32) {
    PRECISION.store(precision, Ordering::Relaxed);
}

/// The format options used for printing arrays, as a `PrintOptions`.
#[pyfunction]
fn get_printoptions() -> PrintOptions {
    PrintOptions { precision: PRECISION.load(Ordering::Relaxed) }
}

/// The context manager `printoptions(...)` returns: sets the options on entry and restores
/// the previous ones on exit.
#[pyclass(name = "_PrintOptionsContext", module = "kiln.core")]
pub struct PrintOptionsContext {
    precision: i32,
    saved: Vec<i32>,
}

#[pymethods]
impl PrintOptionsContext {
    fn __enter__(mut slf: PyRefMut<'_, Self>) -> PyRefMut<'_, Self> {
        let old = PRECISION.swap(slf.precision, Ordering::Relaxed);
        slf.saved.push(old);
        slf
    }

    #[pyo3(signature = (*_exc))]
    fn __exit__(&mut self, _exc: &Bound<'_, pyo3::types::PyTuple>) -> bool {
        if let Some(old) = self.saved.pop() {
            PRECISION.store(old, Ordering::Relaxed);
        }
        false // never swallow the exception
    }
}

/// Context manager for setting print options temporarily (`precision`: decimal places of
/// floats; -1 for the default).
#[pyfunction]
#[pyo3(signature = (precision = -1))]
fn printoptions(precision: i32) -> PrintOptionsContext {
    PrintOptionsContext { precision, saved: Vec::new() }
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PrintOptions>()?;
    m.add_class::<PrintOptionsContext>()?;
    m.add_function(wrap_pyfunction!(set_printoptions, m)?)?;
    m.add_function(wrap_pyfunction!(get_printoptions, m)?)?;
    m.add_function(wrap_pyfunction!(printoptions, m)?)?;
    Ok(())
}
