//! The one place where kiln errors become Python exceptions. The message keeps kiln's
//! `[op] ...` form, so every exception names the op that raised it.

use kiln_base::Error;
use pyo3::exceptions::{
    PyIndexError, PyNotImplementedError, PyRuntimeError, PyTypeError, PyValueError,
};
use pyo3::{PyErr, Python};

/// The Python exception for a kiln error: Value -> ValueError, Index -> IndexError,
/// Type -> TypeError, Runtime -> RuntimeError, Unsupported -> NotImplementedError,
/// Interrupted -> what the SIGINT handler raises (KeyboardInterrupt by default).
pub fn to_pyerr(err: Error) -> PyErr {
    let msg = err.to_string();
    match err {
        Error::Value { .. } => PyValueError::new_err(msg),
        Error::Index { .. } => PyIndexError::new_err(msg),
        Error::Type { .. } => PyTypeError::new_err(msg),
        Error::Runtime { .. } => PyRuntimeError::new_err(msg),
        Error::Unsupported { .. } => PyNotImplementedError::new_err(msg),
        Error::Interrupted { .. } => Python::attach(|py| crate::interrupt::raised(py, msg)),
    }
}

/// `result.or_raise()?` turns a kiln result into a Python one (the orphan rule forbids a
/// `From` impl between two foreign types).
pub trait OrRaise<T> {
    fn or_raise(self) -> pyo3::PyResult<T>;
}

impl<T> OrRaise<T> for kiln_base::Result<T> {
    fn or_raise(self) -> pyo3::PyResult<T> {
        self.map_err(to_pyerr)
    }
}

/// Builds a binding-level error of the given kind: `raise!(Value, "array", "bad {x}")`.
/// Going through `kiln_base::Error` keeps the `[op] msg` format and the class mapping here.
macro_rules! raise {
    ($kind:ident, $op:expr, $($fmt:tt)+) => {
        $crate::error::to_pyerr(kiln_base::Error::$kind { op: $op, msg: format!($($fmt)+) })
    };
}
pub(crate) use raise;
