//! Python values <-> kiln arrays: scalars, nested lists/tuples and numpy arrays in;
//! Python scalars, nested lists and numpy arrays out. Dtype inference follows MLX.

use crate::array::PyArray;
use crate::error::{raise, OrRaise};
use half::{bf16, f16};
use kiln::{ops, Array, HostElement};
use kiln_base::{DType, Scalar};
use numpy::prelude::*;
use numpy::{Element, PyArrayDyn, PyUntypedArray};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyBool, PyComplex, PyFloat, PyInt, PyList, PyTuple, PyType};

// ---------------------------------------------------------------------------------------
// Python -> kiln
// ---------------------------------------------------------------------------------------

/// `numpy.generic`, the base class of numpy's scalar types.
fn numpy_generic(py: Python<'_>) -> PyResult<&Bound<'_, PyType>> {
    static GENERIC: PyOnceLock<Py<PyType>> = PyOnceLock::new();
    GENERIC.import(py, "numpy", "generic")
}

fn is_numpy_scalar(obj: &Bound<'_, PyAny>) -> PyResult<bool> {
    obj.is_instance(numpy_generic(obj.py())?)
}

pub fn type_name(obj: &Bound<'_, PyAny>) -> String {
    obj.get_type().name().map(|n| n.to_string()).unwrap_or_else(|_| "?".into())
}

/// A Python int as a scalar: `Int` when it fits in i64, `UInt` up to u64::MAX.
fn int_scalar(obj: &Bound<'_, PyAny>) -> PyResult<Scalar> {
    if let Ok(i) = obj.extract::<i64>() {
        return Ok(Scalar::Int(i));
    }
    if let Ok(u) = obj.extract::<u64>() {
        return Ok(Scalar::UInt(u));
    }
    Err(raise!(Value, "array", "Integer {obj} does not fit in 64 bits."))
}

/// A Python bool/int/float or numpy scalar as a kiln scalar; `None` for anything else.
/// Used for weak operands (`a + 1`), where numpy scalars count as Python numbers (as MLX).
pub fn py_scalar(obj: &Bound<'_, PyAny>) -> PyResult<Option<Scalar>> {
    // bool before int: Python's bool is a subclass of int.
    if let Ok(b) = obj.cast::<PyBool>() {
        return Ok(Some(Scalar::Bool(b.is_true())));
    }
    if obj.is_instance_of::<PyInt>() {
        return int_scalar(obj).map(Some);
    }
    if let Ok(f) = obj.cast::<PyFloat>() {
        return Ok(Some(Scalar::Float(f.value())));
    }
    if let Ok(c) = obj.cast::<PyComplex>() {
        return Ok(Some(Scalar::Complex(c.real(), c.imag())));
    }
    if is_numpy_scalar(obj)? {
        let value = obj.call_method0("item")?;
        if !is_numpy_scalar(&value)? {
            return py_scalar(&value);
        }
    }
    Ok(None)
}

/// The dtype MLX gives a lone Python scalar: bool, int32 (int64 when it does not fit),
/// float32.
pub fn scalar_dtype(value: Scalar) -> DType {
    match value {
        Scalar::Bool(_) => DType::Bool,
        Scalar::Int(i) if i32::try_from(i).is_ok() => DType::I32,
        Scalar::Int(_) => DType::I64,
        Scalar::UInt(_) => DType::U64,
        Scalar::Float(_) => DType::F32,
        Scalar::Complex(..) => DType::C64,
    }
}

/// A 0-d array from a Python scalar, in `dtype` or the inferred one.
pub fn scalar_array(value: Scalar, dtype: Option<DType>) -> PyResult<Array> {
    from_scalars(&[value], &[], dtype.unwrap_or_else(|| scalar_dtype(value)))
}

/// One operand of an arithmetic op.
pub enum Operand {
    Array(Array),
    /// A Python number: it takes the other operand's dtype where it fits (weak typing).
    Scalar(Scalar),
}

/// An op operand: arrays, numpy arrays and nested lists are arrays, Python numbers weak
/// scalars; `None` when `obj` is neither (the dunder methods return NotImplemented).
pub fn operand(obj: &Bound<'_, PyAny>) -> PyResult<Option<Operand>> {
    if let Ok(a) = obj.cast::<PyArray>() {
        return Ok(Some(Operand::Array(a.borrow().0.clone())));
    }
    if let Some(s) = py_scalar(obj)? {
        return Ok(Some(Operand::Scalar(s)));
    }
    if obj.cast::<PyUntypedArray>().is_ok()
        || obj.cast::<PyList>().is_ok()
        || obj.cast::<PyTuple>().is_ok()
    {
        return Ok(Some(Operand::Array(to_array(obj, None)?)));
    }
    Ok(None)
}

/// MLX's answer when an operator's other operand is a list, tuple or string: `==` is
/// False, `!=` True, anything else a ValueError naming the operation (`name`, as MLX words
/// it: "addition", "bitwise and"). None for other operands.
pub fn refused_operand(other: &Bound<'_, PyAny>, name: &str) -> Option<PyResult<Py<PyAny>>> {
    let kind = if other.cast::<PyList>().is_ok() {
        "list"
    } else if other.cast::<PyTuple>().is_ok() {
        "tuple"
    } else if other.cast::<pyo3::types::PyString>().is_ok() {
        "str"
    } else {
        return None;
    };
    let py = other.py();
    let answer = |b: bool| pyo3::types::PyBool::new(py, b).to_owned().into_any().unbind();
    Some(match name {
        "equal" => Ok(answer(false)),
        "not equal" => Ok(answer(true)),
        _ => Err(pyo3::exceptions::PyValueError::new_err(format!(
            "Cannot perform {name} on an mlx.core.array and {kind}"
        ))),
    })
}

/// Two operands as arrays, applying the weak-scalar rule to Python numbers.
pub fn operand_pair(
    op: &'static str,
    a: &Bound<'_, PyAny>,
    b: &Bound<'_, PyAny>,
) -> PyResult<(Array, Array)> {
    let get = |x: &Bound<'_, PyAny>| -> PyResult<Operand> {
        operand(x)?.ok_or_else(|| {
            raise!(Type, op, "Cannot use an object of type {} as an operand.", type_name(x))
        })
    };
    arrays_of(get(a)?, get(b)?)
}

/// Resolves two operands to arrays (weak scalars take the array's dtype, as MLX; two
/// scalars: the first is a strong array, the second weak next to it).
pub fn arrays_of(a: Operand, b: Operand) -> PyResult<(Array, Array)> {
    match (a, b) {
        (Operand::Array(x), Operand::Array(y)) => Ok((x, y)),
        (Operand::Array(x), Operand::Scalar(s)) => {
            let y = ops::weak_scalar(s, &x).or_raise()?;
            Ok((x, y))
        }
        (Operand::Scalar(s), Operand::Array(y)) => Ok((ops::weak_scalar(s, &y).or_raise()?, y)),
        (Operand::Scalar(s), Operand::Scalar(t)) => {
            let x = scalar_array(s, None)?;
            let y = ops::weak_scalar(t, &x).or_raise()?;
            Ok((x, y))
        }
    }
}

/// `kiln.core.array(val, dtype)`: arrays, Python scalars, nested lists/tuples (of scalars
/// and arrays) and numpy arrays/scalars.
pub fn to_array(obj: &Bound<'_, PyAny>, dtype: Option<DType>) -> PyResult<Array> {
    let array = if let Ok(a) = obj.cast::<PyArray>() {
        a.borrow().0.clone()
    } else if let Ok(np) = obj.cast::<PyUntypedArray>() {
        return from_numpy(np, dtype);
    } else if is_numpy_scalar(obj)? {
        // Keeps the numpy dtype (np.int64(1) -> int64), as MLX.
        let np = obj.py().import("numpy")?.call_method1("asarray", (obj,))?;
        return from_numpy(np.cast::<PyUntypedArray>()?, dtype);
    } else if let Some(s) = py_scalar(obj)? {
        return scalar_array(s, dtype);
    } else if obj.cast::<PyList>().is_ok() || obj.cast::<PyTuple>().is_ok() {
        return from_nested(obj, dtype);
    } else if let Some(array) = from_protocols(obj)? {
        return from_numpy(&array, dtype);
    } else if obj.hasattr("__mlx_array__")? {
        // MLX's conversion protocol: an object that returns an array.
        let out = obj.call_method0("__mlx_array__")?;
        let array = out.cast::<PyArray>().map_err(|_| {
            raise!(Type, "array", "__mlx_array__ must return an array, got {}.", type_name(&out))
        })?;
        array.borrow().0.clone()
    } else {
        return Err(raise!(
            Value,
            "array",
            "Invalid type {} received in array initialization.",
            type_name(obj)
        ));
    };
    match dtype {
        Some(d) => ops::astype(&array, d).or_raise(),
        None => Ok(array),
    }
}

/// Buffer-protocol objects (`memoryview`, `bytearray`, `array.array`, ...) as a numpy view
/// of their memory; None for objects without a buffer.
fn from_protocols<'py>(obj: &Bound<'py, PyAny>) -> PyResult<Option<Bound<'py, PyUntypedArray>>> {
    let py = obj.py();
    let numpy = py.import("numpy")?;
    if obj.hasattr("__dlpack__")? && obj.hasattr("__dlpack_device__")? {
        // torch, jax, cupy and other DLPack producers: read through numpy (copied below).
        if let Ok(np) = numpy.call_method1("from_dlpack", (obj,)) {
            return Ok(Some(np.cast_into::<PyUntypedArray>()?));
        }
    }
    if py.import("builtins")?.getattr("memoryview")?.call1((obj,)).is_err() {
        return Ok(None);
    }
    if obj.cast::<pyo3::types::PyBytes>().is_ok() {
        // As bytearray (and MLX): the bytes as uint8, not numpy's fixed-width string dtype.
        let np = numpy.call_method1("frombuffer", (obj, numpy.getattr("uint8")?))?;
        return Ok(Some(np.cast_into::<PyUntypedArray>()?));
    }
    let np = numpy.call_method1("asarray", (obj,))?;
    Ok(Some(np.cast_into::<PyUntypedArray>()?))
}

/// What a walk over nested lists found: the shape, the leaves in row-major order and which
/// kinds of values occurred.
#[derive(Default)]
struct Nested {
    shape: Vec<usize>,
    /// Depth of the leaves, fixed by the first leaf.
    leaf_depth: Option<usize>,
    values: Vec<Scalar>,
    /// The promoted dtype of embedded arrays.
    array_dtype: Option<DType>,
    /// The dtype the Python numbers alone would give.
    py_dtype: Option<DType>,
}

impl Nested {
    fn ragged() -> PyErr {
        raise!(Value, "array", "Initialization encountered non-uniform length.")
    }

    /// A list (or an array axis) of length `n` at `depth`.
    fn dim(&mut self, depth: usize, n: usize) -> PyResult<()> {
        if depth < self.shape.len() {
            if self.shape[depth] != n {
                return Err(Self::ragged());
            }
        } else if depth == self.shape.len() && self.leaf_depth.is_none() {
            self.shape.push(n);
        } else {
            return Err(Self::ragged());
        }
        Ok(())
    }

    /// A value at `depth`: every value must sit at the same depth, below all the lists.
    fn leaf(&mut self, depth: usize) -> PyResult<()> {
        match self.leaf_depth {
            None if depth == self.shape.len() => self.leaf_depth = Some(depth),
            Some(d) if d == depth => {}
            _ => return Err(Self::ragged()),
        }
        Ok(())
    }

    fn visit(&mut self, obj: &Bound<'_, PyAny>, depth: usize) -> PyResult<()> {
        if let Ok(list) = obj.cast::<PyList>() {
            self.dim(depth, list.len())?;
            for item in list.iter() {
                self.visit(&item, depth + 1)?;
            }
            return Ok(());
        }
        if let Ok(tuple) = obj.cast::<PyTuple>() {
            self.dim(depth, tuple.len())?;
            for item in tuple.iter() {
                self.visit(&item, depth + 1)?;
            }
            return Ok(());
        }
        if let Some(s) = py_scalar(obj)? {
            self.leaf(depth)?;
            let d = scalar_dtype(s);
            // Any float -> float32, else any int -> int32 (int64/uint64 when needed).
            self.py_dtype = Some(match self.py_dtype {
                None => d,
                Some(p) => p.promote(d),
            });
            self.values.push(s);
            return Ok(());
        }
        let is_array = obj.cast::<PyArray>().is_ok() || obj.cast::<PyUntypedArray>().is_ok();
        if !is_array {
            return Err(raise!(
                Value,
                "array",
                "Invalid type {} received in array initialization.",
                type_name(obj)
            ));
        }
        // An embedded array is a nested list of its shape, its dtype joining the promotion.
        let array = to_array(obj, None)?;
        for (k, &n) in array.shape().iter().enumerate() {
            self.dim(depth + k, n)?;
        }
        self.leaf(depth + array.ndim())?;
        self.array_dtype = Some(match self.array_dtype {
            None => array.dtype(),
            Some(d) => d.promote(array.dtype()),
        });
        let bytes = host_bytes(obj.py(), &array)?;
        let dtype = array.dtype();
        self.values.extend((0..array.size()).map(|i| read_scalar(&bytes, dtype, i)));
        Ok(())
    }

    /// MLX's inference: embedded arrays promote together; Python numbers are weak next to
    /// them; Python numbers alone give bool < int32 < int64 < float32.
    fn dtype(&self) -> DType {
        let kind_of = |d: DType| match d {
            DType::Bool => Scalar::Bool(false),
            d if d.is_float() => Scalar::Float(0.0),
            d if d.is_complex() => Scalar::Complex(0.0, 0.0),
            _ => Scalar::Int(0),
        };
        match (self.array_dtype, self.py_dtype) {
            (None, None) => DType::F32,
            (Some(a), None) => a,
            (None, Some(p)) => p,
            (Some(a), Some(p)) => ops::weak_scalar_dtype(kind_of(p), a),
        }
    }
}

fn from_nested(obj: &Bound<'_, PyAny>, dtype: Option<DType>) -> PyResult<Array> {
    let mut nested = Nested::default();
    nested.visit(obj, 0)?;
    let dtype = dtype.unwrap_or_else(|| nested.dtype());
    from_scalars(&nested.values, &nested.shape, dtype)
}

/// An integer's two's-complement bits (C-style: floats truncate toward zero first), so
/// `as` narrows with wrap-around like MLX's casts (`array(300, dtype=int8)` is 44).
fn int_bits(value: Scalar) -> i64 {
    match value {
        Scalar::Bool(b) => b as i64,
        Scalar::Int(i) => i,
        Scalar::UInt(u) => u as i64,
        Scalar::Float(f) | Scalar::Complex(f, _) if f >= 2f64.powi(63) => f as u64 as i64,
        Scalar::Float(f) | Scalar::Complex(f, _) => f as i64,
    }
}

/// A row-major array of `shape` holding `values` converted to `dtype`.
fn from_scalars(values: &[Scalar], shape: &[usize], dtype: DType) -> PyResult<Array> {
    fn build<T: HostElement>(
        values: &[Scalar],
        shape: &[usize],
        f: impl Fn(Scalar) -> T,
    ) -> kiln_base::Result<Array> {
        Array::from_slice(&values.iter().map(|&s| f(s)).collect::<Vec<T>>(), shape)
    }
    let v = values;
    match dtype {
        DType::Bool => {
            let bytes: Vec<u8> = v.iter().map(|s| s.as_bool() as u8).collect();
            Array::from_bytes(&bytes, shape, DType::Bool)
        }
        DType::U8 => build(v, shape, |s| int_bits(s) as u8),
        DType::U16 => build(v, shape, |s| int_bits(s) as u16),
        DType::U32 => build(v, shape, |s| int_bits(s) as u32),
        DType::U64 => build(v, shape, |s| int_bits(s) as u64),
        DType::I8 => build(v, shape, |s| int_bits(s) as i8),
        DType::I16 => build(v, shape, |s| int_bits(s) as i16),
        DType::I32 => build(v, shape, |s| int_bits(s) as i32),
        DType::I64 => build(v, shape, int_bits),
        DType::F16 => build(v, shape, |s| f16::from_f64(s.as_f64())),
        DType::BF16 => build(v, shape, |s| bf16::from_f64(s.as_f64())),
        // Direct casts: one rounding step (large ints, f64 -> f32).
        DType::F32 => build(v, shape, |s| match s {
            Scalar::Int(i) => i as f32,
            Scalar::UInt(u) => u as f32,
            s => s.as_f64() as f32,
        }),
        DType::F64 => build(v, shape, Scalar::as_f64),
        // Real part then imaginary part, as float32 pairs.
        DType::C64 => {
            let parts: Vec<f32> =
                v.iter().flat_map(|s| [s.as_f64() as f32, s.imag() as f32]).collect();
            Array::from_bytes(bytemuck::cast_slice(&parts), shape, DType::C64)
        }
    }
    .or_raise()
}

/// The kiln dtype of a numpy dtype (kind code and item size).
fn numpy_dtype(kind: u8, size: usize) -> Option<DType> {
    Some(match (kind, size) {
        (b'b', 1) => DType::Bool,
        (b'u', 1) => DType::U8,
        (b'u', 2) => DType::U16,
        (b'u', 4) => DType::U32,
        (b'u', 8) => DType::U64,
        (b'i', 1) => DType::I8,
        (b'i', 2) => DType::I16,
        (b'i', 4) => DType::I32,
        (b'i', 8) => DType::I64,
        (b'f', 2) => DType::F16,
        (b'f', 4) => DType::F32,
        (b'f', 8) => DType::F64,
        // complex128 arrives as complex64 (numpy converts it), as MLX.
        (b'c', 8) | (b'c', 16) => DType::C64,
        _ => return None,
    })
}

/// Copies a C-contiguous numpy array of element type `T`.
fn numpy_copy<T: Element + HostElement>(
    arr: &Bound<'_, PyUntypedArray>,
    shape: &[usize],
) -> PyResult<Array> {
    let typed = arr.cast::<PyArrayDyn<T>>()?;
    let view = typed.try_readonly()?;
    Array::from_slice(view.as_slice()?, shape).or_raise()
}

/// A copy of a numpy array. Its dtype is kept, except float64 becomes float32 (as MLX)
/// unless `dtype` asks otherwise.
fn from_numpy(arr: &Bound<'_, PyUntypedArray>, dtype: Option<DType>) -> PyResult<Array> {
    let py = arr.py();
    let descr = arr.dtype();
    let Some(natural) = numpy_dtype(descr.kind(), descr.itemsize()) else {
        return Err(raise!(Value, "array", "Unsupported numpy dtype {}.", descr.str()?));
    };
    // Strided or byte-swapped input: let numpy make a native row-major copy first.
    let mut arr = arr.clone();
    if natural == DType::C64 {
        // numpy converts complex128 and lays out the parts; they are read as float32 pairs.
        let np = py.import("numpy")?;
        let c64 = np.getattr("complex64")?;
        let dense = np.call_method1("ascontiguousarray", (&arr, c64))?;
        let shape = arr.shape().to_vec();
        let parts = dense.call_method1("view", (np.getattr("float32")?,))?;
        let parts = parts.call_method0("ravel")?.cast_into::<PyUntypedArray>()?;
        let typed = parts.cast::<PyArrayDyn<f32>>()?;
        let view = typed.try_readonly()?;
        let bytes: &[u8] = bytemuck::cast_slice(view.as_slice()?);
        let array = Array::from_bytes(bytes, &shape, DType::C64).or_raise()?;
        return host_astype(&array, dtype.unwrap_or(DType::C64));
    }
    if !arr.is_c_contiguous() || descr.is_native_byteorder() == Some(false) {
        let native = descr.call_method1("newbyteorder", ("=",))?;
        let np = py.import("numpy")?;
        arr =
            np.call_method1("ascontiguousarray", (&arr, native))?.cast_into::<PyUntypedArray>()?;
    }
    let shape = arr.shape().to_vec();
    let array = match natural {
        DType::Bool => {
            let typed = arr.cast::<PyArrayDyn<bool>>()?;
            let view = typed.try_readonly()?;
            let bytes: Vec<u8> = view.as_slice()?.iter().map(|&b| b as u8).collect();
            Array::from_bytes(&bytes, &shape, DType::Bool).or_raise()?
        }
        DType::U8 => numpy_copy::<u8>(&arr, &shape)?,
        DType::U16 => numpy_copy::<u16>(&arr, &shape)?,
        DType::U32 => numpy_copy::<u32>(&arr, &shape)?,
        DType::U64 => numpy_copy::<u64>(&arr, &shape)?,
        DType::I8 => numpy_copy::<i8>(&arr, &shape)?,
        DType::I16 => numpy_copy::<i16>(&arr, &shape)?,
        DType::I32 => numpy_copy::<i32>(&arr, &shape)?,
        DType::I64 => numpy_copy::<i64>(&arr, &shape)?,
        DType::F16 => numpy_copy::<f16>(&arr, &shape)?,
        DType::F32 => numpy_copy::<f32>(&arr, &shape)?,
        DType::F64 => numpy_copy::<f64>(&arr, &shape)?,
        DType::BF16 | DType::C64 => unreachable!("no bfloat16 in numpy; complex handled above"),
    };
    let target = dtype.unwrap_or(if natural == DType::F64 { DType::F32 } else { natural });
    host_astype(&array, target)
}

/// Host data converted to `dtype` on the host, now: the source may be float64, which the
/// GPU does not have, and the converted values are what the new array holds.
fn host_astype(array: &Array, dtype: DType) -> PyResult<Array> {
    if array.dtype() == dtype {
        return Ok(array.clone());
    }
    let _cpu = kiln::device::StreamScope::enter(kiln::device::host_stream()).or_raise()?;
    let converted = ops::astype(array, dtype).or_raise()?;
    kiln::eval(std::slice::from_ref(&converted)).or_raise()?;
    Ok(converted)
}

// ---------------------------------------------------------------------------------------
// kiln -> Python
// ---------------------------------------------------------------------------------------

/// Evaluates `array` with the GIL released and returns its elements, row-major.
pub fn host_bytes(py: Python<'_>, array: &Array) -> PyResult<Vec<u8>> {
    crate::interrupt::detached(py, || array.to_bytes()).or_raise()
}

/// Element `i` of row-major `bytes` of `dtype`.
pub fn read_scalar(bytes: &[u8], dtype: DType, i: usize) -> Scalar {
    let w = dtype.size();
    let b = &bytes[i * w..(i + 1) * w];
    use bytemuck::pod_read_unaligned as read;
    match dtype {
        DType::Bool => Scalar::Bool(b[0] != 0),
        DType::U8 => Scalar::UInt(u64::from(b[0])),
        DType::U16 => Scalar::UInt(u64::from(read::<u16>(b))),
        DType::U32 => Scalar::UInt(u64::from(read::<u32>(b))),
        DType::U64 => Scalar::UInt(read::<u64>(b)),
        DType::I8 => Scalar::Int(i64::from(read::<i8>(b))),
        DType::I16 => Scalar::Int(i64::from(read::<i16>(b))),
        DType::I32 => Scalar::Int(i64::from(read::<i32>(b))),
        DType::I64 => Scalar::Int(read::<i64>(b)),
        DType::F16 => Scalar::Float(read::<f16>(b).to_f64()),
        DType::BF16 => Scalar::Float(read::<bf16>(b).to_f64()),
        DType::F32 => Scalar::Float(f64::from(read::<f32>(b))),
        DType::F64 => Scalar::Float(read::<f64>(b)),
        DType::C64 => {
            let [re, im] = read::<[f32; 2]>(b);
            Scalar::Complex(f64::from(re), f64::from(im))
        }
    }
}

/// A scalar as the Python object of its kind (bool, int or float).
pub fn scalar_to_py(py: Python<'_>, value: Scalar) -> PyResult<Bound<'_, PyAny>> {
    Ok(match value {
        Scalar::Bool(b) => PyBool::new(py, b).to_owned().into_any(),
        Scalar::Int(i) => i.into_pyobject(py)?.into_any(),
        Scalar::UInt(u) => u.into_pyobject(py)?.into_any(),
        Scalar::Float(f) => PyFloat::new(py, f).into_any(),
        Scalar::Complex(re, im) => PyComplex::from_doubles(py, re, im).into_any(),
    })
}

/// The single element of a size-1 array as a Python scalar.
pub fn item<'py>(py: Python<'py>, array: &Array, op: &'static str) -> PyResult<Bound<'py, PyAny>> {
    item_scalar(py, array, op).and_then(|s| scalar_to_py(py, s))
}

/// The single element of a size-1 array.
pub fn item_scalar(py: Python<'_>, array: &Array, op: &'static str) -> PyResult<Scalar> {
    if array.size() != 1 {
        return Err(raise!(
            Value,
            op,
            "Only size-1 arrays can be converted to Python scalars, got {} elements.",
            array.size()
        ));
    }
    let bytes = host_bytes(py, array)?;
    Ok(read_scalar(&bytes, array.dtype(), 0))
}

/// Nested Python lists of the elements (a scalar for 0-d arrays).
pub fn to_list<'py>(py: Python<'py>, array: &Array) -> PyResult<Bound<'py, PyAny>> {
    fn nested<'py>(
        py: Python<'py>,
        bytes: &[u8],
        dtype: DType,
        shape: &[usize],
        next: &mut usize,
    ) -> PyResult<Bound<'py, PyAny>> {
        let Some((&n, rest)) = shape.split_first() else {
            *next += 1;
            return scalar_to_py(py, read_scalar(bytes, dtype, *next - 1));
        };
        let list = PyList::empty(py);
        for _ in 0..n {
            list.append(nested(py, bytes, dtype, rest, next)?)?;
        }
        Ok(list.into_any())
    }
    let bytes = host_bytes(py, array)?;
    nested(py, &bytes, array.dtype(), array.shape(), &mut 0)
}

/// A numpy array holding a copy of the elements (numpy has no bfloat16: ValueError, as
/// MLX raises).
pub fn to_numpy<'py>(py: Python<'py>, array: &Array) -> PyResult<Bound<'py, PyAny>> {
    fn typed<'py, T: Element + bytemuck::Pod>(
        py: Python<'py>,
        bytes: &[u8],
        shape: &[usize],
    ) -> PyResult<Bound<'py, PyAny>> {
        let values: Vec<T> = bytemuck::pod_collect_to_vec(bytes);
        Ok(numpy::PyArray::from_vec(py, values).reshape(shape.to_vec())?.into_any())
    }
    if array.dtype() == DType::BF16 {
        return Err(raise!(
            Value,
            "__array__",
            "numpy has no bfloat16 dtype; convert first, e.g. np.array(a.astype(kiln.core.float32))."
        ));
    }
    let bytes = host_bytes(py, array)?;
    let shape = array.shape();
    match array.dtype() {
        DType::Bool => {
            let values: Vec<bool> = bytes.iter().map(|&b| b != 0).collect();
            Ok(numpy::PyArray::from_vec(py, values).reshape(shape.to_vec())?.into_any())
        }
        DType::U8 => typed::<u8>(py, &bytes, shape),
        DType::U16 => typed::<u16>(py, &bytes, shape),
        DType::U32 => typed::<u32>(py, &bytes, shape),
        DType::U64 => typed::<u64>(py, &bytes, shape),
        DType::I8 => typed::<i8>(py, &bytes, shape),
        DType::I16 => typed::<i16>(py, &bytes, shape),
        DType::I32 => typed::<i32>(py, &bytes, shape),
        DType::I64 => typed::<i64>(py, &bytes, shape),
        DType::F16 => typed::<f16>(py, &bytes, shape),
        DType::F32 => typed::<f32>(py, &bytes, shape),
        DType::F64 => typed::<f64>(py, &bytes, shape),
        DType::C64 => {
            // float32 pairs viewed by numpy as complex64.
            let mut pairs = shape.to_vec();
            pairs.push(2);
            let parts = typed::<f32>(py, &bytes, &pairs)?;
            let np = py.import("numpy")?;
            let c = parts.call_method1("view", (np.getattr("complex64")?,))?;
            c.call_method1("reshape", (shape.to_vec(),))
        }
        DType::BF16 => unreachable!("rejected above"),
    }
}
