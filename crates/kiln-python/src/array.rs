//! The `kiln.core.array` class: construction, properties, operators, methods and repr.
//! Methods share their implementation with the free functions in `ops.rs`.

use crate::convert::{self, arrays_of, Operand};
use crate::dtype::Dtype;
use crate::error::{raise, OrRaise};
use crate::indexing;
use crate::math;
use crate::ops::{self, ReduceFn};
use crate::reductions;
use kiln::ops::IndexItem;
use kiln::{ops as kops, Array};
use kiln_base::Scalar;
use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::{PyComplex, PyFloat, PyInt, PyTuple};

/// A lazily evaluated n-dimensional array (MLX's `mlx.core.array`). The data are immutable;
/// item assignment (`a[i] = v`) rebinds the Python object to a new graph node, as in MLX.
#[pyclass(name = "array", module = "kiln.core", weakref)]
pub struct PyArray(pub Array);

type BinaryFn = fn(&Array, &Array) -> kiln_base::Result<Array>;

impl PyArray {
    /// `self <op> other` (or `other <op> self` when `reflected`) with weak Python scalars;
    /// NotImplemented for operand types kiln does not know, so Python can try the other
    /// side.
    fn binary(
        &self,
        other: &Bound<'_, PyAny>,
        f: BinaryFn,
        name: &'static str,
        reflected: bool,
    ) -> PyResult<Py<PyAny>> {
        if let Some(answer) = convert::refused_operand(other, name) {
            return answer;
        }
        match convert::operand(other)? {
            Some(other_op) => self.apply(other.py(), other_op, f, reflected),
            None => Ok(other.py().NotImplemented()),
        }
    }

    /// `@`: arrays only (a Python number is no matrix), as MLX.
    fn matmul(&self, other: &Bound<'_, PyAny>, reflected: bool) -> PyResult<Py<PyAny>> {
        match convert::operand(other)? {
            Some(a @ Operand::Array(_)) => self.apply(other.py(), a, kops::matmul, reflected),
            _ => Ok(other.py().NotImplemented()),
        }
    }

    fn apply(
        &self,
        py: Python<'_>,
        other: Operand,
        f: BinaryFn,
        reflected: bool,
    ) -> PyResult<Py<PyAny>> {
        let me = Operand::Array(self.0.clone());
        let (a, b) = if reflected { arrays_of(other, me)? } else { arrays_of(me, other)? };
        let out = f(&a, &b).or_raise()?;
        Ok(PyArray(out).into_pyobject(py)?.into_any().unbind())
    }

    fn reduce(
        &self,
        f: ReduceFn,
        axis: Option<&Bound<'_, PyAny>>,
        keepdims: bool,
        stream: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<PyArray> {
        ops::reduce(f, &self.0, axis, keepdims, stream)
    }

    fn unary(
        &self,
        f: fn(&Array) -> kiln_base::Result<Array>,
        stream: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<PyArray> {
        crate::device::with_stream(stream, || f(&self.0)).map(PyArray)
    }
}

/// Variadic shape or axes arguments: `f(2, 3)` or `f((2, 3))` / `f([2, 3])`.
fn variadic_ints(args: &Bound<'_, PyTuple>) -> PyResult<Vec<i64>> {
    if args.len() == 1 {
        let first = args.get_item(0)?;
        if !first.is_instance_of::<PyInt>() {
            return first.extract::<Vec<i64>>();
        }
    }
    args.iter().map(|a| a.extract::<i64>()).collect()
}

/// Points `slf` at the result of an operator (`NotImplemented` raises TypeError). The result
/// is read before `slf` is borrowed mutably: it may be `slf` itself (`a += a`).
fn rebind(
    slf: &Bound<'_, PyArray>,
    other: &Bound<'_, PyAny>,
    result: Py<PyAny>,
    op: &str,
) -> PyResult<()> {
    let result = result.bind(other.py());
    let Ok(array) = result.cast::<PyArray>() else {
        return Err(pyo3::exceptions::PyTypeError::new_err(format!(
            "unsupported operand type(s) for {op}: 'array' and '{}'",
            convert::type_name(other)
        )));
    };
    let value = array.try_borrow()?.0.clone();
    slf.try_borrow_mut()?.0 = value;
    Ok(())
}

#[pymethods]
impl PyArray {
    #[new]
    #[pyo3(signature = (val, dtype = None))]
    fn new(val: &Bound<'_, PyAny>, dtype: Option<Dtype>) -> PyResult<Self> {
        convert::to_array(val, dtype.map(|d| d.0)).map(PyArray)
    }

    // ---- properties -------------------------------------------------------------------

    #[getter]
    fn shape<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        PyTuple::new(py, self.0.shape())
    }

    #[getter]
    fn dtype(&self) -> Dtype {
        Dtype(self.0.dtype())
    }

    #[getter]
    fn ndim(&self) -> usize {
        self.0.ndim()
    }

    #[getter]
    fn size(&self) -> usize {
        self.0.size()
    }

    #[getter]
    fn nbytes(&self) -> usize {
        self.0.nbytes()
    }

    #[getter]
    fn itemsize(&self) -> usize {
        self.0.dtype().size()
    }

    /// The real part (float32 for complex64).
    #[getter]
    fn real(&self) -> PyResult<PyArray> {
        kops::real(&self.0).map(PyArray).or_raise()
    }

    /// The imaginary part (float32 for complex64).
    #[getter]
    fn imag(&self) -> PyResult<PyArray> {
        kops::imag(&self.0).map(PyArray).or_raise()
    }

    /// The transpose (axes reversed).
    #[getter(T)]
    fn t(&self) -> PyResult<PyArray> {
        kops::transpose(&self.0, None).map(PyArray).or_raise()
    }

    /// The last two axes swapped (`self.transpose()` of each matrix).
    #[getter(mT)]
    fn m_t(&self) -> PyResult<PyArray> {
        let n = self.0.ndim();
        if n < 2 {
            return Err(raise!(
                Value,
                "matrix_transpose",
                "Input array must have at least 2 dimensions."
            ));
        }
        kops::swapaxes(&self.0, -2, -1).map(PyArray).or_raise()
    }

    /// The buffer protocol: `memoryview(a)` and `np.asarray(a)` share the evaluated memory
    /// (read-only; see `buffer.rs`).
    unsafe fn __getbuffer__(
        slf: Bound<'_, Self>,
        view: *mut pyo3::ffi::Py_buffer,
        flags: std::ffi::c_int,
    ) -> PyResult<()> {
        // SAFETY: CPython passes the view it owns (`bf_getbuffer`'s contract).
        unsafe { crate::buffer::get_buffer(&slf, view, flags) }
    }

    unsafe fn __releasebuffer__(&self, view: *mut pyo3::ffi::Py_buffer) {
        // SAFETY: CPython releases each view it got from `__getbuffer__` once.
        unsafe { crate::buffer::release_buffer(view) }
    }

    // ---- conversion -------------------------------------------------------------------

    /// The single element as a Python scalar.
    fn item<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        convert::item(py, &self.0, "item")
    }

    /// The elements as nested lists of Python scalars.
    fn tolist<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        convert::to_list(py, &self.0)
    }

    /// DLPack export (`torch.from_dlpack(a)`, `np.from_dlpack(a)`): a host copy of the
    /// values, handed over through numpy's exporter (kiln's buffers are not shared with
    /// other frameworks). bfloat16 has no numpy dtype: BufferError, as `memoryview(a)`.
    #[pyo3(signature = (*, stream = None, max_version = None, dl_device = None, copy = None))]
    fn __dlpack__<'py>(
        &self,
        py: Python<'py>,
        stream: Option<&Bound<'py, PyAny>>,
        max_version: Option<&Bound<'py, PyAny>>,
        dl_device: Option<&Bound<'py, PyAny>>,
        copy: Option<bool>,
    ) -> PyResult<Bound<'py, PyAny>> {
        if copy == Some(false) {
            return Err(pyo3::exceptions::PyBufferError::new_err(
                "[__dlpack__] kiln arrays are exported as a copy; copy=False is not possible.",
            ));
        }
        let _ = (stream, dl_device);
        let host = convert::to_numpy(py, &self.0)?;
        let kwargs = pyo3::types::PyDict::new(py);
        if let Some(v) = max_version {
            kwargs.set_item("max_version", v)?;
        }
        host.call_method("__dlpack__", (), Some(&kwargs))
    }

    /// Where a DLPack consumer finds the exported data: host memory (kDLCPU, device 0).
    fn __dlpack_device__(&self) -> (i32, i32) {
        (1, 0)
    }

    /// numpy's conversion hook (`np.array(a)`): always a fresh copy.
    #[pyo3(signature = (dtype = None, copy = None))]
    fn __array__<'py>(
        &self,
        py: Python<'py>,
        dtype: Option<&Bound<'py, PyAny>>,
        copy: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let _ = copy; // the result never shares memory, so every `copy` request is met
        let out = convert::to_numpy(py, &self.0)?;
        match dtype {
            Some(d) if !d.is_none() => out.call_method1("astype", (d,)),
            _ => Ok(out),
        }
    }

    fn __bool__(&self, py: Python<'_>) -> PyResult<bool> {
        Ok(convert::item_scalar(py, &self.0, "__bool__")?.as_bool())
    }

    fn __float__(&self, py: Python<'_>) -> PyResult<f64> {
        Ok(convert::item_scalar(py, &self.0, "__float__")?.as_f64())
    }

    fn __int__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        match convert::item_scalar(py, &self.0, "__int__")? {
            // Python's own rules (truncation; errors for nan and inf).
            Scalar::Float(f) => PyFloat::new(py, f).call_method0("__int__"),
            Scalar::Bool(b) => Ok(i64::from(b).into_pyobject(py)?.into_any()),
            s => convert::scalar_to_py(py, s),
        }
    }

    /// The array API namespace of kiln arrays: the `kiln.core` module.
    #[pyo3(signature = (api_version = None))]
    fn __array_namespace__<'py>(
        &self,
        py: Python<'py>,
        api_version: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyModule>> {
        let _ = api_version; // one namespace for every version
        py.import("kiln.core")
    }

    /// `operator.index(a)`: 0-d integer arrays only, as MLX (so `seq[a]`, `range(a)` work).
    fn __index__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        if self.0.ndim() != 0 || !self.0.dtype().is_integer() {
            return Err(pyo3::exceptions::PyTypeError::new_err(
                "Only 0-dimensional integer arrays can be converted to an index.",
            ));
        }
        convert::item(py, &self.0, "__index__")
    }

    fn __len__(&self) -> PyResult<usize> {
        match self.0.shape().first() {
            Some(&n) => Ok(n),
            None => Err(raise!(Type, "__len__", "len() of a 0-dimensional array.")),
        }
    }

    fn __iter__(&self) -> PyResult<ArrayIterator> {
        match self.0.shape().first() {
            Some(&n) => Ok(ArrayIterator {
                array: self.0.clone(),
                next: std::sync::atomic::AtomicUsize::new(0),
                len: n,
            }),
            None => Err(raise!(Type, "__iter__", "iteration over a 0-dimensional array.")),
        }
    }

    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        let array = self.0.clone();
        crate::interrupt::detached(py, || crate::format::array_repr(&array)).or_raise()
    }

    fn __str__(&self, py: Python<'_>) -> PyResult<String> {
        self.__repr__(py)
    }

    /// Identity hash (arrays compare elementwise, so equal values need not hash alike).
    fn __hash__(&self) -> u64 {
        self.0.id()
    }

    /// A new array object over the same lazy value: item assignment rebinds the object, so
    /// writes to the copy never reach the original.
    fn __copy__(&self) -> PyArray {
        PyArray(self.0.clone())
    }

    /// As `__copy__`: values are immutable, and a buffer with two owners is never donated.
    fn __deepcopy__(&self, _memo: &Bound<'_, PyAny>) -> PyArray {
        PyArray(self.0.clone())
    }

    fn __complex__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyComplex>> {
        let (re, im) = match convert::item_scalar(py, &self.0, "__complex__")? {
            Scalar::Complex(re, im) => (re, im),
            s => (s.as_f64(), 0.0),
        };
        Ok(PyComplex::from_doubles(py, re, im))
    }

    /// f-strings: a 0-d array formats as its Python value; others only without a spec.
    fn __format__(&self, py: Python<'_>, spec: &str) -> PyResult<String> {
        if self.0.ndim() == 0 {
            let value = convert::item(py, &self.0, "__format__")?;
            return value.call_method1("__format__", (spec,))?.extract();
        }
        if spec.is_empty() {
            return self.__str__(py);
        }
        Err(PyTypeError::new_err("unsupported format string passed to mx.array.__format__"))
    }

    // ---- indexing ---------------------------------------------------------------------

    fn __getitem__(&self, key: &Bound<'_, PyAny>) -> PyResult<PyArray> {
        indexing::getitem(&self.0, key).map(PyArray)
    }

    /// `a[key] = value`: `a` now refers to a copy with the indexed elements replaced
    /// (other references to the old array keep the old values).
    fn __setitem__(
        slf: &Bound<'_, Self>,
        key: &Bound<'_, PyAny>,
        value: &Bound<'_, PyAny>,
    ) -> PyResult<()> {
        let old = slf.try_borrow()?.0.clone();
        let new = indexing::setitem(&old, key, value)?;
        slf.try_borrow_mut()?.0 = new;
        Ok(())
    }

    /// Out-of-place updates at an index: `a.at[idx].add(v)` (duplicates accumulate).
    #[getter]
    fn at(&self) -> indexing::ArrayAt {
        indexing::ArrayAt::new(self.0.clone())
    }

    // ---- operators --------------------------------------------------------------------

    fn __add__(&self, other: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        self.binary(other, kops::add, "addition", false)
    }
    fn __radd__(&self, other: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        self.binary(other, kops::add, "addition", true)
    }
    fn __sub__(&self, other: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        self.binary(other, kops::subtract, "subtraction", false)
    }
    fn __rsub__(&self, other: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        self.binary(other, kops::subtract, "subtraction", true)
    }
    fn __mul__(&self, other: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        self.binary(other, kops::multiply, "multiplication", false)
    }
    fn __rmul__(&self, other: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        self.binary(other, kops::multiply, "multiplication", true)
    }
    fn __truediv__(&self, other: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        self.binary(other, kops::divide, "division", false)
    }
    fn __rtruediv__(&self, other: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        self.binary(other, kops::divide, "division", true)
    }
    fn __pow__(
        &self,
        other: &Bound<'_, PyAny>,
        _modulo: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Py<PyAny>> {
        self.binary(other, kops::power, "power", false)
    }
    fn __rpow__(
        &self,
        other: &Bound<'_, PyAny>,
        _modulo: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Py<PyAny>> {
        self.binary(other, kops::power, "power", true)
    }
    fn __matmul__(&self, other: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        self.matmul(other, false)
    }
    fn __rmatmul__(&self, other: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        self.matmul(other, true)
    }
    fn __eq__(&self, other: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        self.binary(other, kops::equal, "equal", false)
    }
    fn __ne__(&self, other: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        self.binary(other, kops::not_equal, "not equal", false)
    }
    fn __lt__(&self, other: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        self.binary(other, kops::less, "less than", false)
    }
    fn __le__(&self, other: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        self.binary(other, kops::less_equal, "less than or equal", false)
    }
    fn __gt__(&self, other: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        self.binary(other, kops::greater, "greater than", false)
    }
    fn __ge__(&self, other: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        self.binary(other, kops::greater_equal, "greater than or equal", false)
    }
    // In-place operators rebind this array object to the result, as MLX does, so every
    // Python reference to it sees the new value.
    fn __iadd__(slf: &Bound<'_, Self>, other: &Bound<'_, PyAny>) -> PyResult<()> {
        let r = slf.try_borrow()?.__add__(other)?;
        rebind(slf, other, r, "+=")
    }
    fn __isub__(slf: &Bound<'_, Self>, other: &Bound<'_, PyAny>) -> PyResult<()> {
        let r = slf.try_borrow()?.__sub__(other)?;
        rebind(slf, other, r, "-=")
    }
    fn __imul__(slf: &Bound<'_, Self>, other: &Bound<'_, PyAny>) -> PyResult<()> {
        let r = slf.try_borrow()?.__mul__(other)?;
        rebind(slf, other, r, "*=")
    }
    fn __itruediv__(slf: &Bound<'_, Self>, other: &Bound<'_, PyAny>) -> PyResult<()> {
        let r = slf.try_borrow()?.__truediv__(other)?;
        rebind(slf, other, r, "/=")
    }
    fn __ifloordiv__(slf: &Bound<'_, Self>, other: &Bound<'_, PyAny>) -> PyResult<()> {
        let r = slf.try_borrow()?.__floordiv__(other)?;
        rebind(slf, other, r, "//=")
    }
    fn __imod__(slf: &Bound<'_, Self>, other: &Bound<'_, PyAny>) -> PyResult<()> {
        let r = slf.try_borrow()?.__mod__(other)?;
        rebind(slf, other, r, "%=")
    }
    fn __ipow__(
        slf: &Bound<'_, Self>,
        other: &Bound<'_, PyAny>,
        _modulo: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        let r = slf.try_borrow()?.__pow__(other, None)?;
        rebind(slf, other, r, "**=")
    }
    fn __imatmul__(slf: &Bound<'_, Self>, other: &Bound<'_, PyAny>) -> PyResult<()> {
        let r = slf.try_borrow()?.__matmul__(other)?;
        rebind(slf, other, r, "@=")
    }
    fn __iand__(slf: &Bound<'_, Self>, other: &Bound<'_, PyAny>) -> PyResult<()> {
        let r = slf.try_borrow()?.__and__(other)?;
        rebind(slf, other, r, "&=")
    }
    fn __ior__(slf: &Bound<'_, Self>, other: &Bound<'_, PyAny>) -> PyResult<()> {
        let r = slf.try_borrow()?.__or__(other)?;
        rebind(slf, other, r, "|=")
    }
    fn __ixor__(slf: &Bound<'_, Self>, other: &Bound<'_, PyAny>) -> PyResult<()> {
        let r = slf.try_borrow()?.__xor__(other)?;
        rebind(slf, other, r, "^=")
    }
    fn __ilshift__(slf: &Bound<'_, Self>, other: &Bound<'_, PyAny>) -> PyResult<()> {
        let r = slf.try_borrow()?.__lshift__(other)?;
        rebind(slf, other, r, "<<=")
    }
    fn __irshift__(slf: &Bound<'_, Self>, other: &Bound<'_, PyAny>) -> PyResult<()> {
        let r = slf.try_borrow()?.__rshift__(other)?;
        rebind(slf, other, r, ">>=")
    }
    /// Pickling: the row-major bytes, shape and dtype name, rebuilt by `kiln.core._io`.
    fn __reduce__<'py>(
        &self,
        py: Python<'py>,
    ) -> PyResult<(Bound<'py, PyAny>, Bound<'py, PyTuple>)> {
        let rebuild = py.import("kiln.core._io")?.getattr("_unpickle")?;
        let bytes = pyo3::types::PyBytes::new(py, &convert::host_bytes(py, &self.0)?);
        let args = (bytes, self.0.shape().to_vec(), self.0.dtype().name()).into_pyobject(py)?;
        Ok((rebuild, args))
    }
    fn __pos__(&self) -> PyArray {
        PyArray(self.0.clone())
    }
    fn __neg__(&self) -> PyResult<PyArray> {
        kops::negative(&self.0).map(PyArray).or_raise()
    }
    fn __abs__(&self) -> PyResult<PyArray> {
        kops::abs(&self.0).map(PyArray).or_raise()
    }
    fn __floordiv__(&self, other: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        self.binary(other, kops::floor_divide, "floor division", false)
    }
    fn __rfloordiv__(&self, other: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        self.binary(other, kops::floor_divide, "floor division", true)
    }
    fn __mod__(&self, other: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        self.binary(other, kops::remainder, "modulus", false)
    }
    fn __rmod__(&self, other: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        self.binary(other, kops::remainder, "modulus", true)
    }
    fn __divmod__(&self, other: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        math::divmod_operator(&self.0, other, false)
    }
    fn __rdivmod__(&self, other: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        math::divmod_operator(&self.0, other, true)
    }
    // Bitwise operators; the reflected forms are kiln's (MLX's arrays lack them).
    fn __and__(&self, other: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        math::bitwise_operator(&self.0, other, kops::bitwise_and, false, "bitwise_and")
    }
    fn __rand__(&self, other: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        math::bitwise_operator(&self.0, other, kops::bitwise_and, true, "bitwise_and")
    }
    fn __or__(&self, other: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        math::bitwise_operator(&self.0, other, kops::bitwise_or, false, "bitwise_or")
    }
    fn __ror__(&self, other: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        math::bitwise_operator(&self.0, other, kops::bitwise_or, true, "bitwise_or")
    }
    fn __xor__(&self, other: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        math::bitwise_operator(&self.0, other, kops::bitwise_xor, false, "bitwise_xor")
    }
    fn __rxor__(&self, other: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        math::bitwise_operator(&self.0, other, kops::bitwise_xor, true, "bitwise_xor")
    }
    fn __lshift__(&self, other: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        math::bitwise_operator(&self.0, other, kops::left_shift, false, "left_shift")
    }
    fn __rlshift__(&self, other: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        math::bitwise_operator(&self.0, other, kops::left_shift, true, "left_shift")
    }
    fn __rshift__(&self, other: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        math::bitwise_operator(&self.0, other, kops::right_shift, false, "right_shift")
    }
    fn __rrshift__(&self, other: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        math::bitwise_operator(&self.0, other, kops::right_shift, true, "right_shift")
    }
    fn __invert__(&self) -> PyResult<PyArray> {
        if self.0.dtype().is_float() {
            let msg = "Floating point types not allowed with bitwise inversion.";
            return Err(raise!(Value, "bitwise_invert", "{msg}"));
        }
        kops::bitwise_invert(&self.0).map(PyArray).or_raise()
    }

    // ---- methods ----------------------------------------------------------------------

    #[pyo3(signature = (dtype, stream = None))]
    fn astype(&self, dtype: Dtype, stream: Option<&Bound<'_, PyAny>>) -> PyResult<PyArray> {
        crate::device::with_stream(stream, || kops::astype(&self.0, dtype.0)).map(PyArray)
    }

    /// `a.reshape(2, 3)` or `a.reshape((2, 3))`.
    #[pyo3(signature = (*shape, stream = None))]
    fn reshape(
        &self,
        shape: &Bound<'_, PyTuple>,
        stream: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<PyArray> {
        let shape = variadic_ints(shape)?;
        crate::device::with_stream(stream, || kops::reshape(&self.0, &shape)).map(PyArray)
    }

    /// `a.transpose()`, `a.transpose(1, 0)` or `a.transpose((1, 0))`.
    #[pyo3(signature = (*axes, stream = None))]
    fn transpose(
        &self,
        axes: &Bound<'_, PyTuple>,
        stream: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<PyArray> {
        let axes = if axes.is_empty() { None } else { Some(variadic_ints(axes)?) };
        crate::device::with_stream(stream, || kops::transpose(&self.0, axes.as_deref()))
            .map(PyArray)
    }

    #[pyo3(signature = (axis = None, keepdims = false, *, stream = None))]
    fn sum(
        &self,
        axis: Option<&Bound<'_, PyAny>>,
        keepdims: bool,
        stream: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<PyArray> {
        self.reduce(kops::sum, axis, keepdims, stream)
    }

    #[pyo3(signature = (axis = None, keepdims = false, *, stream = None))]
    fn prod(
        &self,
        axis: Option<&Bound<'_, PyAny>>,
        keepdims: bool,
        stream: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<PyArray> {
        self.reduce(kops::prod, axis, keepdims, stream)
    }

    #[pyo3(signature = (axis = None, keepdims = false, *, stream = None))]
    fn max(
        &self,
        axis: Option<&Bound<'_, PyAny>>,
        keepdims: bool,
        stream: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<PyArray> {
        self.reduce(kops::max, axis, keepdims, stream)
    }

    #[pyo3(signature = (axis = None, keepdims = false, *, stream = None))]
    fn min(
        &self,
        axis: Option<&Bound<'_, PyAny>>,
        keepdims: bool,
        stream: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<PyArray> {
        self.reduce(kops::min, axis, keepdims, stream)
    }

    #[pyo3(signature = (axis = None, keepdims = false, *, stream = None))]
    fn mean(
        &self,
        axis: Option<&Bound<'_, PyAny>>,
        keepdims: bool,
        stream: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<PyArray> {
        self.reduce(kops::mean, axis, keepdims, stream)
    }

    #[pyo3(signature = (axis = None, keepdims = false, *, stream = None))]
    fn argmax(
        &self,
        axis: Option<i64>,
        keepdims: bool,
        stream: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<PyArray> {
        crate::device::with_stream(stream, || kops::argmax(&self.0, axis, keepdims)).map(PyArray)
    }

    #[pyo3(signature = (axis = None, keepdims = false, *, stream = None))]
    fn argmin(
        &self,
        axis: Option<i64>,
        keepdims: bool,
        stream: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<PyArray> {
        crate::device::with_stream(stream, || kops::argmin(&self.0, axis, keepdims)).map(PyArray)
    }

    #[pyo3(signature = (axis = None, *, stream = None))]
    fn squeeze(
        &self,
        axis: Option<&Bound<'_, PyAny>>,
        stream: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<PyArray> {
        let axes = ops::axes_arg(axis)?;
        crate::device::with_stream(stream, || kops::squeeze(&self.0, axes.as_deref())).map(PyArray)
    }

    #[pyo3(signature = (start_axis = 0, end_axis = -1, *, stream = None))]
    fn flatten(
        slf: &Bound<'_, Self>,
        start_axis: i64,
        end_axis: i64,
        stream: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<PyArray> {
        indexing::flatten(slf.as_any(), start_axis, end_axis, stream)
    }

    #[pyo3(signature = (axis1, axis2, *, stream = None))]
    fn swapaxes(
        slf: &Bound<'_, Self>,
        axis1: i64,
        axis2: i64,
        stream: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<PyArray> {
        indexing::swapaxes(slf.as_any(), axis1, axis2, stream)
    }

    #[pyo3(signature = (source, destination, *, stream = None))]
    fn moveaxis(
        slf: &Bound<'_, Self>,
        source: i64,
        destination: i64,
        stream: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<PyArray> {
        indexing::moveaxis(slf.as_any(), source, destination, stream)
    }

    #[pyo3(signature = (indices_or_sections, axis = 0, *, stream = None))]
    fn split(
        &self,
        indices_or_sections: &Bound<'_, PyAny>,
        axis: i64,
        stream: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Vec<PyArray>> {
        indexing::split_impl(&self.0, indices_or_sections, axis, stream)
    }

    #[pyo3(signature = (dtype, *, stream = None))]
    fn view(
        slf: &Bound<'_, Self>,
        dtype: Dtype,
        stream: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<PyArray> {
        indexing::view(slf.as_any(), dtype, stream)
    }

    /// The complex conjugate.
    #[pyo3(signature = (*, stream = None))]
    fn conj(&self, stream: Option<&Bound<'_, PyAny>>) -> PyResult<PyArray> {
        self.unary(kops::conjugate, stream)
    }

    #[pyo3(signature = (*, stream = None))]
    fn abs(&self, stream: Option<&Bound<'_, PyAny>>) -> PyResult<PyArray> {
        self.unary(kops::abs, stream)
    }

    #[pyo3(signature = (*, stream = None))]
    fn exp(&self, stream: Option<&Bound<'_, PyAny>>) -> PyResult<PyArray> {
        self.unary(kops::exp, stream)
    }

    #[pyo3(signature = (*, stream = None))]
    fn log(&self, stream: Option<&Bound<'_, PyAny>>) -> PyResult<PyArray> {
        self.unary(kops::log, stream)
    }

    #[pyo3(signature = (*, stream = None))]
    fn sqrt(&self, stream: Option<&Bound<'_, PyAny>>) -> PyResult<PyArray> {
        self.unary(kops::sqrt, stream)
    }

    #[pyo3(signature = (*, stream = None))]
    fn sin(&self, stream: Option<&Bound<'_, PyAny>>) -> PyResult<PyArray> {
        self.unary(kops::sin, stream)
    }

    #[pyo3(signature = (*, stream = None))]
    fn cos(&self, stream: Option<&Bound<'_, PyAny>>) -> PyResult<PyArray> {
        self.unary(kops::cos, stream)
    }

    #[pyo3(signature = (*, stream = None))]
    fn log2(&self, stream: Option<&Bound<'_, PyAny>>) -> PyResult<PyArray> {
        self.unary(kops::log2, stream)
    }

    #[pyo3(signature = (*, stream = None))]
    fn log10(&self, stream: Option<&Bound<'_, PyAny>>) -> PyResult<PyArray> {
        self.unary(kops::log10, stream)
    }

    #[pyo3(signature = (*, stream = None))]
    fn log1p(&self, stream: Option<&Bound<'_, PyAny>>) -> PyResult<PyArray> {
        self.unary(kops::log1p, stream)
    }

    #[pyo3(signature = (*, stream = None))]
    fn square(&self, stream: Option<&Bound<'_, PyAny>>) -> PyResult<PyArray> {
        self.unary(kops::square, stream)
    }

    #[pyo3(signature = (*, stream = None))]
    fn rsqrt(&self, stream: Option<&Bound<'_, PyAny>>) -> PyResult<PyArray> {
        self.unary(kops::rsqrt, stream)
    }

    #[pyo3(signature = (*, stream = None))]
    fn reciprocal(&self, stream: Option<&Bound<'_, PyAny>>) -> PyResult<PyArray> {
        self.unary(kops::reciprocal, stream)
    }

    #[pyo3(signature = (decimals = 0, *, stream = None))]
    fn round(&self, decimals: i32, stream: Option<&Bound<'_, PyAny>>) -> PyResult<PyArray> {
        crate::device::with_stream(stream, || kops::round(&self.0, decimals)).map(PyArray)
    }

    #[pyo3(signature = (k = 0, *, stream = None))]
    fn diag(&self, k: i64, stream: Option<&Bound<'_, PyAny>>) -> PyResult<PyArray> {
        crate::device::with_stream(stream, || kops::diag(&self.0, k)).map(PyArray)
    }

    #[pyo3(signature = (offset = 0, axis1 = 0, axis2 = 1, stream = None))]
    fn diagonal(
        &self,
        offset: i64,
        axis1: i64,
        axis2: i64,
        stream: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<PyArray> {
        crate::device::with_stream(stream, || kops::diagonal(&self.0, offset, axis1, axis2))
            .map(PyArray)
    }

    // Reductions and scans of `reductions.rs`.

    #[pyo3(signature = (axis = None, keepdims = false, *, stream = None))]
    fn all(
        &self,
        axis: Option<&Bound<'_, PyAny>>,
        keepdims: bool,
        stream: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<PyArray> {
        self.reduce(kops::all, axis, keepdims, stream)
    }

    #[pyo3(signature = (axis = None, keepdims = false, *, stream = None))]
    fn any(
        &self,
        axis: Option<&Bound<'_, PyAny>>,
        keepdims: bool,
        stream: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<PyArray> {
        self.reduce(kops::any, axis, keepdims, stream)
    }

    #[pyo3(signature = (axis = None, keepdims = false, *, stream = None))]
    fn logsumexp(
        &self,
        axis: Option<&Bound<'_, PyAny>>,
        keepdims: bool,
        stream: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<PyArray> {
        self.reduce(kops::logsumexp, axis, keepdims, stream)
    }

    #[pyo3(signature = (axis = None, keepdims = false, ddof = 0, *, correction = None, stream = None))]
    fn var(
        &self,
        axis: Option<&Bound<'_, PyAny>>,
        keepdims: bool,
        ddof: i64,
        correction: Option<i64>,
        stream: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<PyArray> {
        reductions::moment_of(false, &self.0, axis, keepdims, ddof, correction, stream)
    }

    #[pyo3(signature = (axis = None, keepdims = false, ddof = 0, *, correction = None, stream = None))]
    fn std(
        &self,
        axis: Option<&Bound<'_, PyAny>>,
        keepdims: bool,
        ddof: i64,
        correction: Option<i64>,
        stream: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<PyArray> {
        reductions::moment_of(true, &self.0, axis, keepdims, ddof, correction, stream)
    }

    #[pyo3(signature = (axis = None, *, reverse = false, inclusive = true, stream = None))]
    fn cumsum(
        &self,
        axis: Option<i64>,
        reverse: bool,
        inclusive: bool,
        stream: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<PyArray> {
        reductions::scan_of(kops::cumsum, &self.0, axis, reverse, inclusive, None, stream)
    }

    #[pyo3(signature = (axis = None, *, reverse = false, inclusive = true, stream = None))]
    fn cumprod(
        &self,
        axis: Option<i64>,
        reverse: bool,
        inclusive: bool,
        stream: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<PyArray> {
        reductions::scan_of(kops::cumprod, &self.0, axis, reverse, inclusive, None, stream)
    }

    #[pyo3(signature = (axis = None, *, reverse = false, inclusive = true, stream = None))]
    fn cummax(
        &self,
        axis: Option<i64>,
        reverse: bool,
        inclusive: bool,
        stream: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<PyArray> {
        reductions::scan_of(kops::cummax, &self.0, axis, reverse, inclusive, None, stream)
    }

    #[pyo3(signature = (axis = None, *, reverse = false, inclusive = true, stream = None))]
    fn cummin(
        &self,
        axis: Option<i64>,
        reverse: bool,
        inclusive: bool,
        stream: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<PyArray> {
        reductions::scan_of(kops::cummin, &self.0, axis, reverse, inclusive, None, stream)
    }

    #[pyo3(signature = (axis = None, *, reverse = false, inclusive = true, stream = None))]
    fn logcumsumexp(
        &self,
        axis: Option<i64>,
        reverse: bool,
        inclusive: bool,
        stream: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<PyArray> {
        reductions::scan_of(kops::logcumsumexp, &self.0, axis, reverse, inclusive, None, stream)
    }
}

/// Iterates over axis 0 (`for row in a`).
#[pyclass(name = "ArrayIterator", module = "kiln.core", frozen)]
pub struct ArrayIterator {
    array: Array,
    next: std::sync::atomic::AtomicUsize,
    len: usize,
}

#[pymethods]
impl ArrayIterator {
    fn __iter__(slf: Bound<'_, Self>) -> Bound<'_, Self> {
        slf
    }

    fn __next__(&self) -> PyResult<Option<PyArray>> {
        let i = self.next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        if i >= self.len {
            return Ok(None);
        }
        kops::index(&self.array, &[IndexItem::Int(i as i64)]).map(|a| Some(PyArray(a))).or_raise()
    }
}
