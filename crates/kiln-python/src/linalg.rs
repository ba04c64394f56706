//! Matrix products at the top level (`addmm`, `outer`, `inner`, `tensordot`, `einsum`) and
//! the `kiln.core.linalg` submodule (norms, factorisations, solvers) with MLX's signatures.

use crate::array::PyArray;
use crate::convert::to_array;
use crate::device::with_stream;
use crate::error::raise;
use kiln::ops::linalg::{self, NormOrd};
use kiln::ops::{self as kops, TensordotAxes};
use kiln::Array;
use pyo3::prelude::*;
use pyo3::types::{PyFloat, PyInt, PyString, PyTuple};

type Stream<'a, 'py> = Option<&'a Bound<'py, PyAny>>;

fn arr(obj: &Bound<'_, PyAny>) -> PyResult<Array> {
    to_array(obj, None)
}

/// `alpha * (a @ b) + beta * c`.
#[pyfunction]
#[pyo3(signature = (c, a, b, /, alpha = 1.0, beta = 1.0, *, stream = None))]
fn addmm(
    c: &Bound<'_, PyAny>,
    a: &Bound<'_, PyAny>,
    b: &Bound<'_, PyAny>,
    alpha: f64,
    beta: f64,
    stream: Stream<'_, '_>,
) -> PyResult<PyArray> {
    let (c, a, b) = (arr(c)?, arr(a)?, arr(b)?);
    with_stream(stream, || kops::addmm(&c, &a, &b, alpha, beta)).map(PyArray)
}

/// Outer product of the flattened inputs.
#[pyfunction]
#[pyo3(signature = (a, b, /, *, stream = None))]
fn outer(a: &Bound<'_, PyAny>, b: &Bound<'_, PyAny>, stream: Stream<'_, '_>) -> PyResult<PyArray> {
    let (a, b) = (arr(a)?, arr(b)?);
    with_stream(stream, || kops::outer(&a, &b)).map(PyArray)
}

/// Sum product over the last axes.
#[pyfunction]
#[pyo3(signature = (a, b, /, *, stream = None))]
fn inner(a: &Bound<'_, PyAny>, b: &Bound<'_, PyAny>, stream: Stream<'_, '_>) -> PyResult<PyArray> {
    let (a, b) = (arr(a)?, arr(b)?);
    with_stream(stream, || kops::inner(&a, &b)).map(PyArray)
}

/// `axes=`: an int, or a pair of axis lists (or of single axes).
fn tensordot_axes(axes: &Bound<'_, PyAny>) -> PyResult<TensordotAxes> {
    if axes.is_instance_of::<PyInt>() {
        return Ok(TensordotAxes::Count(axes.extract()?));
    }
    let bad =
        || raise!(Type, "tensordot", "axes must be an int or a pair of axis lists, got {axes}.");
    let pair: Vec<Bound<'_, PyAny>> = axes.extract().map_err(|_| bad())?;
    let [a, b] = pair.as_slice() else { return Err(bad()) };
    let list = |x: &Bound<'_, PyAny>| -> PyResult<Vec<i64>> {
        if x.is_instance_of::<PyInt>() {
            Ok(vec![x.extract()?])
        } else {
            x.extract().map_err(|_| bad())
        }
    };
    Ok(TensordotAxes::Pairs(list(a)?, list(b)?))
}

/// Tensor contraction over `axes` (default: the last two of `a` with the first two of `b`).
#[pyfunction]
#[pyo3(signature = (a, b, /, axes = None, *, stream = None))]
fn tensordot(
    a: &Bound<'_, PyAny>,
    b: &Bound<'_, PyAny>,
    axes: Option<&Bound<'_, PyAny>>,
    stream: Stream<'_, '_>,
) -> PyResult<PyArray> {
    let (a, b) = (arr(a)?, arr(b)?);
    let axes = axes.map(tensordot_axes).transpose()?.unwrap_or(TensordotAxes::Count(2));
    with_stream(stream, || kops::tensordot(&a, &b, &axes)).map(PyArray)
}

/// Einstein summation over the operands.
#[pyfunction]
#[pyo3(signature = (subscripts, *operands, stream = None))]
fn einsum(
    subscripts: &str,
    operands: &Bound<'_, PyTuple>,
    stream: Stream<'_, '_>,
) -> PyResult<PyArray> {
    let operands = operands.iter().map(|o| arr(&o)).collect::<PyResult<Vec<_>>>()?;
    with_stream(stream, || kops::einsum(subscripts, &operands)).map(PyArray)
}

// ---- the linalg submodule ----

/// `ord=`: None, a number (inf included) or a name.
fn norm_ord(ord: Option<&Bound<'_, PyAny>>) -> PyResult<Option<NormOrd>> {
    let Some(ord) = ord.filter(|o| !o.is_none()) else { return Ok(None) };
    if let Ok(s) = ord.cast::<PyString>() {
        return Ok(Some(NormOrd::Name(s.to_str()?.to_string())));
    }
    if ord.is_instance_of::<PyInt>() || ord.is_instance_of::<PyFloat>() {
        return Ok(Some(NormOrd::Num(ord.extract()?)));
    }
    Err(raise!(Type, "linalg::norm", "ord must be None, a number or a string, got {ord}."))
}

/// `axis=`: None, an int or a sequence of ints.
fn axis_list(axis: Option<&Bound<'_, PyAny>>) -> PyResult<Option<Vec<i64>>> {
    match axis {
        None => Ok(None),
        Some(a) if a.is_none() => Ok(None),
        Some(a) if a.is_instance_of::<PyInt>() => Ok(Some(vec![a.extract()?])),
        Some(a) => a.extract::<Vec<i64>>().map(Some),
    }
}

/// Vector or matrix norm.
#[pyfunction]
#[pyo3(signature = (a, /, ord = None, axis = None, keepdims = false, *, stream = None))]
fn norm(
    a: &Bound<'_, PyAny>,
    ord: Option<&Bound<'_, PyAny>>,
    axis: Option<&Bound<'_, PyAny>>,
    keepdims: bool,
    stream: Stream<'_, '_>,
) -> PyResult<PyArray> {
    let (a, ord, axis) = (arr(a)?, norm_ord(ord)?, axis_list(axis)?);
    with_stream(stream, || linalg::norm(&a, ord.as_ref(), axis.as_deref(), keepdims)).map(PyArray)
}

macro_rules! unary_linalg {
    ($($name:ident => $doc:literal),* $(,)?) => {$(
        #[doc = $doc]
        #[pyfunction]
        #[pyo3(signature = (a, *, stream = None))]
        fn $name(a: &Bound<'_, PyAny>, stream: Stream<'_, '_>) -> PyResult<PyArray> {
            let a = arr(a)?;
            with_stream(stream, || linalg::$name(&a)).map(PyArray)
        }
    )*};
}
unary_linalg!(
    inv => "Inverse of square matrices.",
    det => "Determinant of square matrices.",
    pinv => "Moore-Penrose pseudo-inverse.",
);

macro_rules! upper_linalg {
    ($($name:ident => $doc:literal),* $(,)?) => {$(
        #[doc = $doc]
        #[pyfunction]
        #[pyo3(signature = (a, upper = false, *, stream = None))]
        fn $name(a: &Bound<'_, PyAny>, upper: bool, stream: Stream<'_, '_>) -> PyResult<PyArray> {
            let a = arr(a)?;
            with_stream(stream, || linalg::$name(&a, upper)).map(PyArray)
        }
    )*};
}
upper_linalg!(
    tri_inv => "Inverse of triangular matrices (lower unless `upper`).",
    cholesky => "Cholesky factor `L` (`A = L L^T`), or `U = L^T` when `upper`.",
    cholesky_inv => "Inverse of `A` from its Cholesky factor.",
);

/// `(Q, R)` of the reduced QR factorisation.
#[pyfunction]
#[pyo3(signature = (a, *, stream = None))]
fn qr(a: &Bound<'_, PyAny>, stream: Stream<'_, '_>) -> PyResult<(PyArray, PyArray)> {
    let a = arr(a)?;
    let (q, r) = with_stream(stream, || linalg::qr(&a))?;
    Ok((PyArray(q), PyArray(r)))
}

/// `(U, S, Vt)` with `A = U diag(S) Vt`, or just `S` when not `compute_uv`.
#[pyfunction]
#[pyo3(signature = (a, compute_uv = true, *, stream = None))]
fn svd<'py>(
    py: Python<'py>,
    a: &Bound<'py, PyAny>,
    compute_uv: bool,
    stream: Stream<'_, 'py>,
) -> PyResult<Bound<'py, PyAny>> {
    let a = arr(a)?;
    let mut out = with_stream(stream, || linalg::svd(&a, compute_uv))?;
    if !compute_uv {
        return Bound::new(py, PyArray(out.swap_remove(0))).map(Bound::into_any);
    }
    let items: Vec<PyArray> = out.into_iter().map(PyArray).collect();
    Ok(PyTuple::new(py, items)?.into_any())
}

fn uplo(op: &'static str, s: &str) -> PyResult<bool> {
    match s {
        "L" => Ok(false),
        "U" => Ok(true),
        _ => Err(raise!(Value, op, "UPLO must be 'L' or 'U', got '{s}'.")),
    }
}

/// `(eigenvalues, eigenvectors)` of symmetric matrices, from the `UPLO` triangle.
#[pyfunction]
#[pyo3(signature = (a, UPLO = "L", *, stream = None))]
#[allow(non_snake_case)]
fn eigh(a: &Bound<'_, PyAny>, UPLO: &str, stream: Stream<'_, '_>) -> PyResult<(PyArray, PyArray)> {
    let (a, upper) = (arr(a)?, uplo("linalg::eigh", UPLO)?);
    let (w, v) = with_stream(stream, || linalg::eigh(&a, upper))?;
    Ok((PyArray(w), PyArray(v)))
}

/// Eigenvalues of symmetric matrices, from the `UPLO` triangle.
#[pyfunction]
#[pyo3(signature = (a, UPLO = "L", *, stream = None))]
#[allow(non_snake_case)]
fn eigvalsh(a: &Bound<'_, PyAny>, UPLO: &str, stream: Stream<'_, '_>) -> PyResult<PyArray> {
    let (a, upper) = (arr(a)?, uplo("linalg::eigvalsh", UPLO)?);
    with_stream(stream, || linalg::eigvalsh(&a, upper)).map(PyArray)
}

/// `(eigenvalues, eigenvectors)` of general square matrices, complex64 (unit eigenvectors
/// as columns).
#[pyfunction]
#[pyo3(signature = (a, *, stream = None))]
fn eig(a: &Bound<'_, PyAny>, stream: Stream<'_, '_>) -> PyResult<(PyArray, PyArray)> {
    let a = arr(a)?;
    let (w, v) = with_stream(stream, || linalg::eig(&a))?;
    Ok((PyArray(w), PyArray(v)))
}

/// Eigenvalues of general square matrices, complex64.
#[pyfunction]
#[pyo3(signature = (a, *, stream = None))]
fn eigvals(a: &Bound<'_, PyAny>, stream: Stream<'_, '_>) -> PyResult<PyArray> {
    let a = arr(a)?;
    with_stream(stream, || linalg::eigvals(&a)).map(PyArray)
}

/// Solves `A X = B`.
#[pyfunction]
#[pyo3(signature = (a, b, *, stream = None))]
fn solve(a: &Bound<'_, PyAny>, b: &Bound<'_, PyAny>, stream: Stream<'_, '_>) -> PyResult<PyArray> {
    let (a, b) = (arr(a)?, arr(b)?);
    with_stream(stream, || linalg::solve(&a, &b)).map(PyArray)
}

/// Solves `A X = B` for triangular `A`.
#[pyfunction]
#[pyo3(signature = (a, b, *, upper = false, stream = None))]
fn solve_triangular(
    a: &Bound<'_, PyAny>,
    b: &Bound<'_, PyAny>,
    upper: bool,
    stream: Stream<'_, '_>,
) -> PyResult<PyArray> {
    let (a, b) = (arr(a)?, arr(b)?);
    with_stream(stream, || linalg::solve_triangular(&a, &b, upper)).map(PyArray)
}

/// `(sign, log|det|)` of square matrices.
#[pyfunction]
#[pyo3(signature = (a, *, stream = None))]
fn slogdet(a: &Bound<'_, PyAny>, stream: Stream<'_, '_>) -> PyResult<(PyArray, PyArray)> {
    let a = arr(a)?;
    let (s, l) = with_stream(stream, || linalg::slogdet(&a))?;
    Ok((PyArray(s), PyArray(l)))
}

/// `(p, L, U)` with `A = L[p] U`.
#[pyfunction]
#[pyo3(signature = (a, *, stream = None))]
fn lu(a: &Bound<'_, PyAny>, stream: Stream<'_, '_>) -> PyResult<(PyArray, PyArray, PyArray)> {
    let a = arr(a)?;
    let (p, l, u) = with_stream(stream, || linalg::lu(&a))?;
    Ok((PyArray(p), PyArray(l), PyArray(u)))
}

/// `(LU, pivots)`: the packed factorisation and LAPACK's row swaps.
#[pyfunction]
#[pyo3(signature = (a, *, stream = None))]
fn lu_factor(a: &Bound<'_, PyAny>, stream: Stream<'_, '_>) -> PyResult<(PyArray, PyArray)> {
    let a = arr(a)?;
    let (lu, pivots) = with_stream(stream, || linalg::lu_factor(&a))?;
    Ok((PyArray(lu), PyArray(pivots)))
}

/// Cross product along `axis`.
#[pyfunction]
#[pyo3(signature = (a, b, axis = -1, *, stream = None))]
fn cross(
    a: &Bound<'_, PyAny>,
    b: &Bound<'_, PyAny>,
    axis: i64,
    stream: Stream<'_, '_>,
) -> PyResult<PyArray> {
    let (a, b) = (arr(a)?, arr(b)?);
    with_stream(stream, || linalg::cross(&a, &b, axis)).map(PyArray)
}

pub fn register(parent: &Bound<'_, PyModule>) -> PyResult<()> {
    macro_rules! add {
        ($m:expr; $($f:ident),* $(,)?) => {$( $m.add_function(wrap_pyfunction!($f, $m)?)?; )*};
    }
    add!(parent; addmm, outer, inner, tensordot, einsum);
    let m = PyModule::new(parent.py(), "linalg")?;
    add!(&m; norm, inv, tri_inv, cholesky, cholesky_inv, qr, svd, eigh, eigvalsh, solve);
    add!(&m; solve_triangular, det, slogdet, pinv, cross, lu, lu_factor, eig, eigvals);
    parent.add_submodule(&m)
}
