//! MLX's gathered products (`gather_mm`, affine `gather_qmm`): matrices picked by flat
//! batch indices and multiplied, the picked matrices read in place (kiln-core's ops).

use crate::array::PyArray;
use crate::convert::to_array;
use crate::device::with_stream;
use crate::error::raise;
use kiln::ops as kops;
use pyo3::prelude::*;

type Stream<'a, 'py> = Option<&'a Bound<'py, PyAny>>;

/// An optional index argument (None stays None).
fn indices(x: Option<&Bound<'_, PyAny>>) -> PyResult<Option<kiln::Array>> {
    x.filter(|x| !x.is_none()).map(|x| to_array(x, None)).transpose()
}

/// `a[lhs_indices] @ b[rhs_indices]` over the flat batch indices of `a` and `b`.
#[pyfunction]
#[pyo3(signature = (a, b, /, lhs_indices = None, rhs_indices = None, *, sorted_indices = false, stream = None))]
fn gather_mm(
    a: &Bound<'_, PyAny>,
    b: &Bound<'_, PyAny>,
    lhs_indices: Option<&Bound<'_, PyAny>>,
    rhs_indices: Option<&Bound<'_, PyAny>>,
    sorted_indices: bool,
    stream: Stream<'_, '_>,
) -> PyResult<PyArray> {
    // Sorted or not, each used matrix is read once (the kernel groups by index itself).
    let _ = sorted_indices;
    let (a, b) = (to_array(a, None)?, to_array(b, None)?);
    let (lhs, rhs) = (indices(lhs_indices)?, indices(rhs_indices)?);
    with_stream(stream, || kops::gather_mm(&a, &b, lhs.as_ref(), rhs.as_ref())).map(PyArray)
}

/// Affine `gather_qmm`: `x[lhs_indices] @ dequantize(w[rhs_indices]).T` (without `.T` when
/// `transpose` is False).
#[pyfunction]
#[pyo3(signature = (x, w, /, scales, biases = None, lhs_indices = None, rhs_indices = None, transpose = true, group_size = 64, bits = 4, *, sorted_indices = false, stream = None))]
#[allow(clippy::too_many_arguments)] // MLX's signature
fn gather_qmm(
    x: &Bound<'_, PyAny>,
    w: &Bound<'_, PyAny>,
    scales: &Bound<'_, PyAny>,
    biases: Option<&Bound<'_, PyAny>>,
    lhs_indices: Option<&Bound<'_, PyAny>>,
    rhs_indices: Option<&Bound<'_, PyAny>>,
    transpose: bool,
    group_size: usize,
    bits: u32,
    sorted_indices: bool,
    stream: Stream<'_, '_>,
) -> PyResult<PyArray> {
    let op = "gather_qmm";
    let _ = sorted_indices;
    let Some(biases) = biases.filter(|b| !b.is_none()) else {
        return Err(raise!(Value, op, "Biases must be provided for affine quantization."));
    };
    let x = to_array(x, None)?;
    let (w, scales, biases) =
        (to_array(w, None)?, to_array(scales, None)?, to_array(biases, None)?);
    let (lhs, rhs) = (indices(lhs_indices)?, indices(rhs_indices)?);
    with_stream(stream, || {
        kops::gather_qmm(
            &x,
            &w,
            &scales,
            &biases,
            lhs.as_ref(),
            rhs.as_ref(),
            transpose,
            group_size,
            bits,
        )
    })
    .map(PyArray)
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(gather_mm, m)?)?;
    m.add_function(wrap_pyfunction!(gather_qmm, m)?)?;
    Ok(())
}
