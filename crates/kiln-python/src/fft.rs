//! The `kiln.core.fft` submodule with MLX's signatures: one-axis (`n`, `axis`), 2-d and n-d
//! (`s`, `axes`) transforms, complex and real, with `norm`; frequency grids and shifts.

use crate::array::PyArray;
use crate::convert::to_array;
use crate::device::with_stream;
use crate::ops::axes_arg;
use kiln::ops::fft::{self as kfft, FftNorm, FftType};
use pyo3::prelude::*;

type Stream<'a, 'py> = Option<&'a Bound<'py, PyAny>>;

/// A one-axis transform binding.
macro_rules! fft1 {
    ($name:ident, $kind:ident, $inverse:expr, $doc:literal) => {
        #[doc = $doc]
        #[pyfunction]
        #[pyo3(signature = (a, n = None, axis = -1, norm = "backward", *, stream = None))]
        fn $name(
            a: &Bound<'_, PyAny>,
            n: Option<i64>,
            axis: i64,
            norm: &str,
            stream: Stream<'_, '_>,
        ) -> PyResult<PyArray> {
            let a = to_array(a, None)?;
            let op = stringify!($name);
            with_stream(stream, || {
                let norm = FftNorm::parse(op, norm)?;
                kfft::fft1(&a, n, axis, FftType::$kind, $inverse, norm)
            })
            .map(PyArray)
        }
    };
}

/// An n-d transform binding (`axes` default: all axes for the `n` forms, the last two for
/// the `2` forms).
macro_rules! fftn {
    ($name:ident, $kind:ident, $inverse:expr, $axes:expr, $doc:literal) => {
        #[doc = $doc]
        #[pyfunction]
        #[pyo3(signature = (a, s = None, axes = $axes, norm = "backward", *, stream = None))]
        fn $name(
            a: &Bound<'_, PyAny>,
            s: Option<Vec<i64>>,
            axes: Option<Vec<i64>>,
            norm: &str,
            stream: Stream<'_, '_>,
        ) -> PyResult<PyArray> {
            let a = to_array(a, None)?;
            let op = stringify!($name);
            with_stream(stream, || {
                let norm = FftNorm::parse(op, norm)?;
                kfft::fftn(&a, s.as_deref(), axes.as_deref(), FftType::$kind, $inverse, norm)
            })
            .map(PyArray)
        }
    };
}

fft1!(fft, Complex, false, "One-dimensional discrete Fourier transform along `axis`.");
fft1!(ifft, Complex, true, "One-dimensional inverse discrete Fourier transform.");
fft1!(rfft, Real, false, "One-dimensional transform of real input (non-negative frequencies).");
fft1!(irfft, Real, true, "The inverse of `rfft`: `n` real outputs (default `2 * (m - 1)`).");
fftn!(fft2, Complex, false, Some(vec![-2, -1]), "Two-dimensional discrete Fourier transform.");
fftn!(ifft2, Complex, true, Some(vec![-2, -1]), "Two-dimensional inverse transform.");
fftn!(rfft2, Real, false, Some(vec![-2, -1]), "Two-dimensional transform of real input.");
fftn!(irfft2, Real, true, Some(vec![-2, -1]), "The inverse of `rfft2`.");
fftn!(fftn, Complex, false, None, "N-dimensional discrete Fourier transform.");
fftn!(ifftn, Complex, true, None, "N-dimensional inverse discrete Fourier transform.");
fftn!(rfftn, Real, false, None, "N-dimensional transform of real input.");
fftn!(irfftn, Real, true, None, "The inverse of `rfftn`.");

/// Sample frequencies of an `n`-point transform with sample spacing `d` (float32).
#[pyfunction]
#[pyo3(signature = (n, d = 1.0, *, stream = None))]
fn fftfreq(n: i64, d: f64, stream: Stream<'_, '_>) -> PyResult<PyArray> {
    with_stream(stream, || kfft::fftfreq(n, d)).map(PyArray)
}

/// Non-negative sample frequencies of an `n`-point real transform (float32).
#[pyfunction]
#[pyo3(signature = (n, d = 1.0, *, stream = None))]
fn rfftfreq(n: i64, d: f64, stream: Stream<'_, '_>) -> PyResult<PyArray> {
    with_stream(stream, || kfft::rfftfreq(n, d)).map(PyArray)
}

/// Shifts the zero frequency to the centre along `axes` (default: all).
#[pyfunction]
#[pyo3(signature = (a, axes = None, *, stream = None))]
fn fftshift(
    a: &Bound<'_, PyAny>,
    axes: Option<&Bound<'_, PyAny>>,
    stream: Stream<'_, '_>,
) -> PyResult<PyArray> {
    let (a, axes) = (to_array(a, None)?, axes_arg(axes)?);
    with_stream(stream, || kfft::fftshift(&a, axes.as_deref(), false)).map(PyArray)
}

/// The inverse of `fftshift`.
#[pyfunction]
#[pyo3(signature = (a, axes = None, *, stream = None))]
fn ifftshift(
    a: &Bound<'_, PyAny>,
    axes: Option<&Bound<'_, PyAny>>,
    stream: Stream<'_, '_>,
) -> PyResult<PyArray> {
    let (a, axes) = (to_array(a, None)?, axes_arg(axes)?);
    with_stream(stream, || kfft::fftshift(&a, axes.as_deref(), true)).map(PyArray)
}

pub fn register(parent: &Bound<'_, PyModule>) -> PyResult<()> {
    let m = PyModule::new(parent.py(), "fft")?;
    macro_rules! add {
        ($($f:ident),* $(,)?) => {$( m.add_function(wrap_pyfunction!($f, &m)?)?; )*};
    }
    add!(fft, ifft, rfft, irfft, fft2, ifft2, rfft2, irfft2, fftn, ifftn, rfftn, irfftn);
    add!(fftfreq, rfftfreq, fftshift, ifftshift);
    parent.add_submodule(&m)
}
