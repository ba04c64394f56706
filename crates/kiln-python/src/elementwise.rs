//! The Python functions of the elementwise op tables (`exp`, `add`, `bitwise_and`, ...),
//! generated from kiln-base's rows with the signature each row names, and the table itself
//! for the Python side (`_core._elementwise_ops`). Operands may be arrays or anything
//! `array(...)` accepts; Python numbers next to arrays are weak scalars.

use crate::array::PyArray;
use crate::convert::{operand_pair, to_array};
use crate::device::with_stream;
use kiln::{ops as kops, Array};
use kiln_base::{BinaryOp, ComplexSupport, UnaryOp};
use pyo3::prelude::*;

type Stream<'a, 'py> = Option<&'a Bound<'py, PyAny>>;

/// A unary op on anything `array(...)` accepts, under `stream`.
fn apply1(
    a: &Bound<'_, PyAny>,
    stream: Stream<'_, '_>,
    f: fn(&Array) -> kiln_base::Result<Array>,
) -> PyResult<PyArray> {
    let a = to_array(a, None)?;
    with_stream(stream, || f(&a)).map(PyArray)
}

/// A binary op on two operands (weak Python scalars), under `stream`.
fn apply2(
    name: &'static str,
    a: &Bound<'_, PyAny>,
    b: &Bound<'_, PyAny>,
    stream: Stream<'_, '_>,
    f: fn(&Array, &Array) -> kiln_base::Result<Array>,
) -> PyResult<PyArray> {
    let (a, b) = operand_pair(name, a, b)?;
    with_stream(stream, || f(&a, &b)).map(PyArray)
}

/// One `#[pyfunction]` per unary row, in the row's signature form.
macro_rules! unary_bindings {
    ($($variant:ident $name:ident $form:ident,)*) => {
        $(unary_binding!($form $name);)*
        fn register_unary(m: &Bound<'_, PyModule>) -> PyResult<()> {
            $(unary_binding!(@add $form $name m);)*
            Ok(())
        }
    };
}
macro_rules! unary_binding {
    (hand $name:ident) => {};
    (pos $name:ident) => {
        #[doc = concat!("Elementwise `", stringify!($name), "`.")]
        #[pyfunction]
        #[pyo3(signature = (a, /, *, stream = None))]
        fn $name(a: &Bound<'_, PyAny>, stream: Stream<'_, '_>) -> PyResult<PyArray> {
            apply1(a, stream, kops::$name)
        }
    };
    (kw $name:ident) => {
        #[doc = concat!("Elementwise `", stringify!($name), "`.")]
        #[pyfunction]
        #[pyo3(signature = (a, stream = None))]
        fn $name(a: &Bound<'_, PyAny>, stream: Stream<'_, '_>) -> PyResult<PyArray> {
            apply1(a, stream, kops::$name)
        }
    };
    (@add hand $name:ident $m:ident) => {};
    (@add $form:ident $name:ident $m:ident) => {
        $m.add_function(wrap_pyfunction!($name, $m)?)?;
    };
}

/// One `#[pyfunction]` per binary row, operands through the weak-scalar rule.
macro_rules! binary_bindings {
    ($($variant:ident $name:ident $form:ident,)*) => {
        $(binary_binding!($form $name);)*
        fn register_binary(m: &Bound<'_, PyModule>) -> PyResult<()> {
            $(m.add_function(wrap_pyfunction!($name, m)?)?;)*
            Ok(())
        }
    };
}
macro_rules! binary_binding {
    (pos $name:ident) => {
        #[doc = concat!("Elementwise `", stringify!($name), "` with broadcasting.")]
        #[pyfunction]
        #[pyo3(signature = (a, b, /, *, stream = None))]
        fn $name(
            a: &Bound<'_, PyAny>,
            b: &Bound<'_, PyAny>,
            stream: Stream<'_, '_>,
        ) -> PyResult<PyArray> {
            apply2(stringify!($name), a, b, stream, kops::$name)
        }
    };
    (kw $name:ident) => {
        #[doc = concat!("Elementwise `", stringify!($name), "` with broadcasting.")]
        #[pyfunction]
        #[pyo3(signature = (a, b, stream = None))]
        fn $name(
            a: &Bound<'_, PyAny>,
            b: &Bound<'_, PyAny>,
            stream: Stream<'_, '_>,
        ) -> PyResult<PyArray> {
            apply2(stringify!($name), a, b, stream, kops::$name)
        }
    };
}

kiln_base::each_unary_op!(unary_bindings);
kiln_base::each_binary_op!(binary_bindings);

/// The op tables as `(name, mlx_class, arity, domain, complex64_supported)` rows, for the
/// Python side (graph export's class names) and the tests that check every row is covered.
#[pyfunction(name = "_elementwise_ops")]
fn elementwise_ops() -> Vec<(&'static str, &'static str, u8, String, bool)> {
    let row = |f: kiln_base::elementwise::Facts, arity| {
        let domain = format!("{:?}", f.domain).to_lowercase();
        (f.name, f.class, arity, domain, f.complex == ComplexSupport::Supported)
    };
    let unary = UnaryOp::ALL.into_iter().map(|op| row(op.facts(), 1));
    unary.chain(BinaryOp::ALL.into_iter().map(|op| row(op.facts(), 2))).collect()
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    register_unary(m)?;
    register_binary(m)?;
    m.add_function(wrap_pyfunction!(elementwise_ops, m)?)
}
