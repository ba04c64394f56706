//! The Python buffer protocol for `kiln.core.array` (`memoryview(a)`, `np.asarray(a)`):
//! an evaluated array on the host is exported in place, with its strides (negative and zero
//! strides included), so numpy shares the memory instead of copying it.
//!
//! Exports are read-only: kiln buffers are shared between arrays and views and are never
//! written after evaluation (the Rust side reads them through shared slices), so a writable
//! export would let numpy change other arrays' values. Each export owns a handle to the
//! buffer until the consumer releases it, so neither rebinding the Python object
//! (`a[i] = v`) nor dropping every kiln array frees memory numpy still reads; and kiln only
//! writes into a buffer while it holds the sole handle (fresh outputs), which an export
//! prevents.

use crate::array::PyArray;
use crate::error::OrRaise;
use kiln_base::{ArrayData, DType};
use pyo3::exceptions::PyBufferError;
use pyo3::ffi;
use pyo3::prelude::*;
use std::ffi::{c_char, c_int, c_void};

/// What one export keeps alive until `__releasebuffer__`: the memory (a buffer handle, or
/// a row-major copy when the consumer asked for contiguous data the layout lacks) and the
/// shape and strides arrays the `Py_buffer` points into.
struct Export {
    _memory: Memory,
    shape: Vec<ffi::Py_ssize_t>,
    strides: Vec<ffi::Py_ssize_t>,
}

#[allow(dead_code)] // never read: held so the memory outlives the export
enum Memory {
    Shared(ArrayData),
    Copy(Vec<u8>),
}

/// The PEP 3118 (struct module) format of a dtype; None for dtypes it cannot express
/// (bfloat16).
fn format(dtype: DType) -> Option<&'static [u8]> {
    Some(match dtype {
        DType::Bool => b"?\0",
        DType::U8 => b"B\0",
        DType::U16 => b"H\0",
        DType::U32 => b"I\0",
        DType::U64 => b"Q\0",
        DType::I8 => b"b\0",
        DType::I16 => b"h\0",
        DType::I32 => b"i\0",
        DType::I64 => b"q\0",
        DType::F16 => b"e\0",
        DType::F32 => b"f\0",
        DType::F64 => b"d\0",
        // bfloat16, and dtypes added later until listed here
        _ => return None,
    })
}

fn row_major_strides(shape: &[usize]) -> Vec<isize> {
    let mut strides = vec![0isize; shape.len()];
    let mut step = 1isize;
    for (s, &n) in strides.iter_mut().zip(shape).rev() {
        *s = step;
        step = step.wrapping_mul(n.max(1) as isize);
    }
    strides
}

/// Fills `view` for `slf` (the body of `array.__getbuffer__`).
///
/// # Safety
/// `view` must be null or point to a `Py_buffer` the caller owns (CPython's contract for
/// `bf_getbuffer`).
pub unsafe fn get_buffer(
    slf: &Bound<'_, PyArray>,
    view: *mut ffi::Py_buffer,
    flags: c_int,
) -> PyResult<()> {
    if view.is_null() {
        return Err(PyBufferError::new_err("[buffer] View is null."));
    }
    if flags & ffi::PyBUF_WRITABLE == ffi::PyBUF_WRITABLE {
        return Err(PyBufferError::new_err(
            "[buffer] kiln arrays export read-only buffers (their memory is shared); copy \
             with np.array(a) for a writable array.",
        ));
    }
    let array = slf.borrow().0.clone();
    let dtype = array.dtype();
    let Some(fmt) = format(dtype) else {
        return Err(PyBufferError::new_err(format!(
            "[buffer] {dtype} has no buffer format; convert first, e.g. a.astype(float32)."
        )));
    };
    let py = slf.py();
    // GPU data is exported through its host copy (made once per array).
    let data =
        crate::interrupt::detached(py, || array.data_on(kiln_base::Device::CPU)).or_raise()?;
    let itemsize = dtype.size();
    let layout = &data.layout;
    // What the consumer accepts: no strides means C-contiguous memory.
    let strided = flags & ffi::PyBUF_STRIDES == ffi::PyBUF_STRIDES;
    let want_c = !strided
        || flags & ffi::PyBUF_C_CONTIGUOUS == ffi::PyBUF_C_CONTIGUOUS
        || (flags & ffi::PyBUF_ANY_CONTIGUOUS == ffi::PyBUF_ANY_CONTIGUOUS
            && !layout.col_contiguous);
    let want_f = flags & ffi::PyBUF_F_CONTIGUOUS == ffi::PyBUF_F_CONTIGUOUS;
    if want_f && !layout.col_contiguous {
        return Err(PyBufferError::new_err("[buffer] The array is not column-contiguous."));
    }
    let (memory, ptr, strides) = if want_c && !layout.row_contiguous {
        let bytes = crate::interrupt::detached(py, || array.to_bytes()).or_raise()?;
        let ptr = bytes.as_ptr() as *mut c_void;
        (Memory::Copy(bytes), ptr, row_major_strides(&layout.shape))
    } else {
        let offset = layout.offset.wrapping_mul(itemsize);
        // In bounds: `offset` addresses element [0, ..., 0] of the buffer (or its end for
        // an empty array).
        let ptr = data.buffer.as_ptr().wrapping_add(offset) as *mut c_void;
        let strides = layout.strides.to_vec();
        (Memory::Shared(data.clone()), ptr, strides)
    };
    let shape: Vec<ffi::Py_ssize_t> = layout.shape.iter().map(|&n| n as ffi::Py_ssize_t).collect();
    let strides: Vec<ffi::Py_ssize_t> =
        strides.iter().map(|&s| s.wrapping_mul(itemsize as isize) as ffi::Py_ssize_t).collect();
    let mut export = Box::new(Export { _memory: memory, shape, strides });
    let ndim = export.shape.len();
    let with_shape = flags & ffi::PyBUF_ND == ffi::PyBUF_ND;
    // SAFETY: `view` is non-null and owned by the caller (this function's contract); every
    // pointer stored in it points into `export`, which lives (boxed, so it does not move)
    // until `release_buffer` frees it, and `obj` holds a reference to `slf` for as long.
    unsafe {
        (*view).buf = ptr;
        (*view).len = (array.size() * itemsize) as ffi::Py_ssize_t;
        (*view).itemsize = itemsize as ffi::Py_ssize_t;
        (*view).readonly = 1;
        (*view).ndim = if with_shape { ndim as c_int } else { 1 };
        (*view).format = if flags & ffi::PyBUF_FORMAT == ffi::PyBUF_FORMAT {
            fmt.as_ptr() as *mut c_char // static, never freed
        } else {
            std::ptr::null_mut()
        };
        (*view).shape =
            if with_shape && ndim > 0 { export.shape.as_mut_ptr() } else { std::ptr::null_mut() };
        (*view).strides =
            if strided && ndim > 0 { export.strides.as_mut_ptr() } else { std::ptr::null_mut() };
        (*view).suboffsets = std::ptr::null_mut();
        (*view).internal = Box::into_raw(export) as *mut c_void;
        (*view).obj = slf.clone().into_any().into_ptr();
    }
    Ok(())
}

/// Frees what [`get_buffer`] allocated for `view` (the body of `array.__releasebuffer__`).
///
/// # Safety
/// `view` must be a buffer [`get_buffer`] filled, released once (CPython's contract for
/// `bf_releasebuffer`).
pub unsafe fn release_buffer(view: *mut ffi::Py_buffer) {
    // SAFETY: `internal` is the `Box<Export>` `get_buffer` leaked for this view, and CPython
    // releases each view once.
    unsafe {
        let internal = (*view).internal as *mut Export;
        if !internal.is_null() {
            drop(Box::from_raw(internal));
            (*view).internal = std::ptr::null_mut();
        }
    }
}

/// `(buffer address, allocated bytes)` of an evaluated array, None before evaluation
/// (for `get_array_buffer_size`, which counts each buffer once).
#[pyfunction]
fn _buffer_info(a: &Bound<'_, PyArray>) -> PyResult<Option<(usize, usize)>> {
    let array = a.borrow().0.clone();
    if !array.is_evaluated() {
        return Ok(None);
    }
    let data = array.data().or_raise()?;
    Ok(Some((data.buffer.as_ptr() as usize, data.buffer.nbytes())))
}

/// A row-contiguous array (column-contiguous allowed with `allow_col_major`), copying only
/// when the evaluated layout is not one.
#[pyfunction]
#[pyo3(signature = (a, allow_col_major = false, *, stream = None))]
fn _contiguous(
    a: &Bound<'_, PyArray>,
    allow_col_major: bool,
    stream: Option<&Bound<'_, PyAny>>,
) -> PyResult<PyArray> {
    let array = a.borrow().0.clone();
    crate::device::with_stream(stream, || kiln::ops::contiguous(&array, allow_col_major))
        .map(PyArray)
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(_buffer_info, m)?)?;
    m.add_function(wrap_pyfunction!(_contiguous, m)?)?;
    Ok(())
}
