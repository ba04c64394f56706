//! `kiln.core.Dtype` and the dtype objects (`float32`, `bool_`, ...).

use kiln_base::{DType, DTypeKind};
use pyo3::prelude::*;

/// An element type, as MLX's `mlx.core.Dtype`.
#[pyclass(name = "Dtype", module = "kiln.core", frozen, eq, hash, from_py_object)]
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Dtype(pub DType);

#[pymethods]
impl Dtype {
    /// Bytes per element.
    #[getter]
    fn size(&self) -> usize {
        self.0.size()
    }

    fn __repr__(&self) -> String {
        format!("kiln.core.{}", self.0.name())
    }

    fn __str__(&self) -> String {
        self.__repr__()
    }
}

/// The module attribute name of a dtype (`bool` is a Python builtin, hence `bool_`).
fn attr_name(dtype: DType) -> &'static str {
    match dtype {
        DType::Bool => "bool_",
        d => d.name(),
    }
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Dtype>()?;
    for dtype in DType::ALL {
        m.add(attr_name(dtype), Dtype(dtype))?;
    }
    register_categories(m)
}

/// Abstract dtype families, as numpy's and MLX's (`mx.floating`, `mx.integer`, ...).
#[pyclass(name = "DtypeCategory", module = "kiln.core", frozen, eq, hash, from_py_object)]
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum DtypeCategory {
    #[pyo3(name = "complexfloating")]
    ComplexFloating,
    #[pyo3(name = "floating")]
    Floating,
    #[pyo3(name = "inexact")]
    Inexact,
    #[pyo3(name = "signedinteger")]
    SignedInteger,
    #[pyo3(name = "unsignedinteger")]
    UnsignedInteger,
    #[pyo3(name = "integer")]
    Integer,
    #[pyo3(name = "number")]
    Number,
    #[pyo3(name = "generic")]
    Generic,
}

impl DtypeCategory {
    const ALL: [DtypeCategory; 8] = [
        DtypeCategory::ComplexFloating,
        DtypeCategory::Floating,
        DtypeCategory::Inexact,
        DtypeCategory::SignedInteger,
        DtypeCategory::UnsignedInteger,
        DtypeCategory::Integer,
        DtypeCategory::Number,
        DtypeCategory::Generic,
    ];

    fn name(self) -> &'static str {
        match self {
            DtypeCategory::ComplexFloating => "complexfloating",
            DtypeCategory::Floating => "floating",
            DtypeCategory::Inexact => "inexact",
            DtypeCategory::SignedInteger => "signedinteger",
            DtypeCategory::UnsignedInteger => "unsignedinteger",
            DtypeCategory::Integer => "integer",
            DtypeCategory::Number => "number",
            DtypeCategory::Generic => "generic",
        }
    }

    /// The next wider family (`None` above `generic`).
    fn parent(self) -> Option<DtypeCategory> {
        use DtypeCategory::*;
        match self {
            ComplexFloating | Floating => Some(Inexact),
            SignedInteger | UnsignedInteger => Some(Integer),
            Inexact | Integer => Some(Number),
            Number => Some(Generic),
            Generic => None,
        }
    }

    /// The narrowest family of a dtype (bool belongs to `generic` only, as in MLX).
    fn of(dtype: DType) -> DtypeCategory {
        match dtype.kind() {
            DTypeKind::Bool => DtypeCategory::Generic,
            DTypeKind::Unsigned => DtypeCategory::UnsignedInteger,
            DTypeKind::Signed => DtypeCategory::SignedInteger,
            DTypeKind::Float => DtypeCategory::Floating,
            DTypeKind::Complex => DtypeCategory::ComplexFloating,
        }
    }

    /// Whether `self` is `other` or inside it.
    fn within(self, other: DtypeCategory) -> bool {
        std::iter::successors(Some(self), |c| c.parent()).any(|c| c == other)
    }
}

#[pymethods]
impl DtypeCategory {
    fn __repr__(&self) -> String {
        format!("DtypeCategory.{}", self.name())
    }
}

/// A dtype or a dtype family, as `issubdtype` accepts.
#[derive(FromPyObject)]
enum DtypeLike {
    Dtype(Dtype),
    Category(DtypeCategory),
}

/// Whether `arg1` is `arg2` or belongs to the family `arg2` (numpy's rule).
#[pyfunction]
fn issubdtype(arg1: DtypeLike, arg2: DtypeLike) -> bool {
    match (arg1, arg2) {
        (DtypeLike::Dtype(a), DtypeLike::Dtype(b)) => a == b,
        (DtypeLike::Dtype(a), DtypeLike::Category(c)) => DtypeCategory::of(a.0).within(c),
        (DtypeLike::Category(a), DtypeLike::Category(c)) => a.within(c),
        (DtypeLike::Category(_), DtypeLike::Dtype(_)) => false,
    }
}

/// Limits of a floating point dtype.
#[pyclass(name = "finfo", module = "kiln.core", frozen)]
pub struct Finfo {
    #[pyo3(get)]
    min: f64,
    #[pyo3(get)]
    max: f64,
    #[pyo3(get)]
    eps: f64,
    #[pyo3(get)]
    smallest_normal: f64,
    #[pyo3(get)]
    bits: usize,
    #[pyo3(get)]
    dtype: Dtype,
}

#[pymethods]
impl Finfo {
    #[new]
    fn new(dtype: Dtype) -> PyResult<Finfo> {
        use half::{bf16, f16};
        let (max, eps, smallest_normal) = match dtype.0 {
            DType::F16 => (f16::MAX.to_f64(), f16::EPSILON.to_f64(), f16::MIN_POSITIVE.to_f64()),
            DType::BF16 => {
                (bf16::MAX.to_f64(), bf16::EPSILON.to_f64(), bf16::MIN_POSITIVE.to_f64())
            }
            DType::F32 => (f32::MAX as f64, f32::EPSILON as f64, f32::MIN_POSITIVE as f64),
            DType::F64 => (f64::MAX, f64::EPSILON, f64::MIN_POSITIVE),
            // complex64's limits are those of its float32 parts (MLX: dtype float32).
            DType::C64 => (f32::MAX as f64, f32::EPSILON as f64, f32::MIN_POSITIVE as f64),
            d => {
                return Err(pyo3::exceptions::PyValueError::new_err(format!(
                    "[finfo] dtype {d} is not inexact."
                )))
            }
        };
        let dtype = if dtype.0 == DType::C64 { Dtype(DType::F32) } else { dtype };
        let bits = dtype.0.size() * 8;
        Ok(Finfo { min: -max, max, eps, smallest_normal, bits, dtype })
    }

    fn __repr__(&self) -> String {
        format!("finfo(min={}, max={}, dtype={})", self.min, self.max, self.dtype.0.name())
    }
}

/// Limits of an integer dtype.
#[pyclass(name = "iinfo", module = "kiln.core", frozen)]
pub struct Iinfo {
    #[pyo3(get)]
    min: i128,
    #[pyo3(get)]
    max: i128,
    #[pyo3(get)]
    dtype: Dtype,
}

#[pymethods]
impl Iinfo {
    #[new]
    fn new(dtype: Dtype) -> PyResult<Iinfo> {
        let bits = dtype.0.size() as u32 * 8;
        let (min, max) = match dtype.0.kind() {
            DTypeKind::Signed => (-(1i128 << (bits - 1)), (1i128 << (bits - 1)) - 1),
            DTypeKind::Unsigned => (0, (1i128 << bits) - 1),
            _ => {
                return Err(pyo3::exceptions::PyValueError::new_err(format!(
                    "[iinfo] dtype {} is not an integer type.",
                    dtype.0
                )))
            }
        };
        Ok(Iinfo { min, max, dtype })
    }

    fn __repr__(&self) -> String {
        format!("iinfo(min={}, max={}, dtype={})", self.min, self.max, self.dtype.0.name())
    }
}

pub fn register_categories(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<DtypeCategory>()?;
    for c in DtypeCategory::ALL {
        m.add(c.name(), c)?;
    }
    m.add_class::<Finfo>()?;
    m.add_class::<Iinfo>()?;
    m.add_function(wrap_pyfunction!(issubdtype, m)?)?;
    Ok(())
}
