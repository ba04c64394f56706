//! Devices and streams: `DeviceType` (`kiln.core.cpu`/`gpu`), `Device`, `Stream`, the
//! `stream(...)` context manager, the default device, and the `stream=` keyword every op
//! takes.

use crate::error::{raise, OrRaise};
use kiln::device::{self, StreamScope};
use kiln_base::{Device, DeviceKind, Stream};
use pyo3::prelude::*;

/// The kind of a device, as MLX's `DeviceType` enum.
#[pyclass(name = "DeviceType", module = "kiln.core", eq, eq_int, hash, frozen, from_py_object)]
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub enum DeviceType {
    #[pyo3(name = "cpu")]
    Cpu,
    #[pyo3(name = "gpu")]
    Gpu,
}

#[pymethods]
impl DeviceType {
    /// The member's name, as `enum.Enum.name`.
    #[getter]
    fn name(&self) -> &'static str {
        match self {
            DeviceType::Cpu => "cpu",
            DeviceType::Gpu => "gpu",
        }
    }

    /// The member's value, as `enum.Enum.value` (MLX numbers cpu 0, gpu 1).
    #[getter]
    fn value(&self) -> u32 {
        *self as u32
    }
}

impl From<DeviceKind> for DeviceType {
    fn from(kind: DeviceKind) -> Self {
        match kind {
            DeviceKind::Cpu => DeviceType::Cpu,
            DeviceKind::Gpu => DeviceType::Gpu,
        }
    }
}

impl From<DeviceType> for DeviceKind {
    fn from(kind: DeviceType) -> Self {
        match kind {
            DeviceType::Cpu => DeviceKind::Cpu,
            DeviceType::Gpu => DeviceKind::Gpu,
        }
    }
}

/// A device: a kind and an index.
#[pyclass(name = "Device", module = "kiln.core", frozen, from_py_object)]
#[derive(Clone, Copy)]
pub struct PyDevice(pub Device);

#[pymethods]
impl PyDevice {
    #[new]
    #[pyo3(signature = (r#type, index = 0))]
    fn new(r#type: DeviceType, index: u32) -> Self {
        PyDevice(Device { kind: r#type.into(), index })
    }

    #[getter(r#type)]
    fn kind(&self) -> DeviceType {
        self.0.kind.into()
    }

    fn __repr__(&self) -> String {
        self.0.to_string()
    }

    /// Equal to another `Device`, or to a `DeviceType` meaning index 0 (as MLX).
    fn __eq__(&self, other: &Bound<'_, PyAny>) -> bool {
        to_device(other).is_ok_and(|d| d == self.0)
    }

    fn __hash__(&self) -> u64 {
        (self.0.kind as u64) << 32 | u64::from(self.0.index)
    }
}

/// A queue of work on a device.
#[pyclass(name = "Stream", module = "kiln.core", frozen, from_py_object)]
#[derive(Clone, Copy)]
pub struct PyStream(pub Stream);

#[pymethods]
impl PyStream {
    #[getter]
    fn device(&self) -> PyDevice {
        PyDevice(self.0.device)
    }

    fn __repr__(&self) -> String {
        self.0.to_string()
    }

    fn __eq__(&self, other: &Bound<'_, PyAny>) -> bool {
        other.cast::<PyStream>().is_ok_and(|s| s.get().0 == self.0)
    }

    fn __hash__(&self) -> u64 {
        (self.0.device.kind as u64) << 48
            | u64::from(self.0.device.index) << 16
            | u64::from(self.0.index)
    }
}

/// A `Device` or `DeviceType` argument as a device.
pub fn to_device(obj: &Bound<'_, PyAny>) -> PyResult<Device> {
    if let Ok(d) = obj.cast::<PyDevice>() {
        return Ok(d.get().0);
    }
    if let Ok(t) = obj.cast::<DeviceType>() {
        return Ok(Device { kind: (*t.get()).into(), index: 0 });
    }
    Err(raise!(Type, "device", "Expected a Device or DeviceType, got {}.", type_name(obj)))
}

/// A `Stream`, `Device` or `DeviceType` argument as a stream (a device's default stream).
pub fn to_stream(obj: &Bound<'_, PyAny>) -> PyResult<Stream> {
    if let Ok(s) = obj.cast::<PyStream>() {
        return Ok(s.get().0);
    }
    if let Ok(t) = obj.cast::<crate::streams::ThreadLocalStream>() {
        return t.get().resolve();
    }
    match to_device(obj) {
        Ok(d) => device::default_stream_of(d).or_raise(),
        Err(_) => Err(raise!(
            Type,
            "stream",
            "Expected a Stream, Device or DeviceType, got {}.",
            type_name(obj)
        )),
    }
}

fn type_name(obj: &Bound<'_, PyAny>) -> String {
    obj.get_type().name().map(|n| n.to_string()).unwrap_or_else(|_| "?".into())
}

/// Runs `f` (which records ops) on the stream named by an op's `stream=` argument, or on
/// the current default stream when it is `None`.
pub fn with_stream<T>(
    stream: Option<&Bound<'_, PyAny>>,
    f: impl FnOnce() -> kiln_base::Result<T>,
) -> PyResult<T> {
    let _scope = match stream {
        Some(s) if !s.is_none() => Some(StreamScope::enter(to_stream(s)?).or_raise()?),
        _ => None,
    };
    f().or_raise()
}

/// The context manager `stream(s)` returns: ops created inside the `with` block run on
/// `s`. Unsendable because the scope it holds is per thread.
#[pyclass(name = "StreamContext", module = "kiln.core", unsendable)]
pub struct StreamContext {
    stream: Stream,
    scopes: Vec<StreamScope>,
}

#[pymethods]
impl StreamContext {
    fn __enter__(&mut self) -> PyResult<()> {
        self.scopes.push(StreamScope::enter(self.stream).or_raise()?);
        Ok(())
    }

    #[pyo3(signature = (*_exc))]
    fn __exit__(&mut self, _exc: &Bound<'_, pyo3::types::PyTuple>) -> bool {
        self.scopes.pop();
        false // never swallow the exception
    }
}

/// A context manager making `s` (a Stream, Device or DeviceType) the default stream.
#[pyfunction]
fn stream(s: &Bound<'_, PyAny>) -> PyResult<StreamContext> {
    Ok(StreamContext { stream: to_stream(s)?, scopes: Vec::new() })
}

/// The device ops run on unless a stream says otherwise.
#[pyfunction]
fn default_device() -> PyDevice {
    PyDevice(device::default_device())
}

/// Sets the default device (a Device or DeviceType).
#[pyfunction]
fn set_default_device(device: &Bound<'_, PyAny>) -> PyResult<()> {
    device::set_default_device(to_device(device)?).or_raise()
}

/// This thread's default stream of `device` (of the default device when omitted).
#[pyfunction]
#[pyo3(signature = (device = None))]
fn default_stream(device: Option<&Bound<'_, PyAny>>) -> PyResult<PyStream> {
    let device = match device {
        Some(d) => to_device(d)?,
        None => device::default_device(),
    };
    device::default_stream_of(device).map(PyStream).or_raise()
}

/// Whether kiln can run on `device` in this process.
#[pyfunction]
fn is_available(device: &Bound<'_, PyAny>) -> PyResult<bool> {
    Ok(device::is_available(to_device(device)?))
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<DeviceType>()?;
    m.add_class::<PyDevice>()?;
    m.add_class::<PyStream>()?;
    m.add_class::<StreamContext>()?;
    m.add("cpu", DeviceType::Cpu)?;
    m.add("gpu", DeviceType::Gpu)?;
    m.add_function(wrap_pyfunction!(stream, m)?)?;
    m.add_function(wrap_pyfunction!(default_device, m)?)?;
    m.add_function(wrap_pyfunction!(set_default_device, m)?)?;
    m.add_function(wrap_pyfunction!(default_stream, m)?)?;
    m.add_function(wrap_pyfunction!(is_available, m)?)?;
    Ok(())
}
