//! `kiln.core.Dtype` and the dtype objects (`float32`, `bool_`, ...).

use kiln_base::DType;
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
    Ok(())
}
