//! Stream management as `mlx.core` has it: `new_stream`, `set_default_stream`,
//! thread-local streams, `clear_streams`, `synchronize`, and the device probes
//! `device_count`/`device_info`. Streams are labels on the CPU (evaluation is synchronous on
//! the calling thread), so `synchronize` has nothing to wait for.

use crate::device::{to_device, to_stream, PyDevice, PyStream};
use crate::error::OrRaise;
use kiln::device;
use kiln_base::{Device, DeviceKind};
use pyo3::prelude::*;
use pyo3::types::PyDict;

/// A stream that is a different stream in each thread that uses it (MLX's
/// `ThreadLocalStream`); pass it wherever a `Stream` is accepted.
#[pyclass(name = "ThreadLocalStream", module = "kiln.core", frozen, from_py_object)]
#[derive(Clone, Copy)]
pub struct ThreadLocalStream {
    pub device: Device,
    pub id: u32,
}

impl ThreadLocalStream {
    /// The stream this thread-local stream stands for in the calling thread.
    pub fn resolve(&self) -> PyResult<kiln_base::Stream> {
        device::resolve_thread_local(self.device, self.id).or_raise()
    }
}

#[pymethods]
impl ThreadLocalStream {
    /// The device the stream runs on.
    #[getter]
    fn device(&self) -> PyDevice {
        PyDevice(self.device)
    }

    fn __repr__(&self) -> String {
        format!("ThreadLocalStream({}, {})", self.device, self.id)
    }

    fn __eq__(&self, other: &Bound<'_, PyAny>) -> bool {
        other.cast::<ThreadLocalStream>().is_ok_and(|s| s.get().id == self.id)
    }

    fn __hash__(&self) -> u64 {
        u64::from(self.id)
    }
}

/// Make a new stream on `device` (a Device or DeviceType).
#[pyfunction]
fn new_stream(device: &Bound<'_, PyAny>) -> PyResult<PyStream> {
    device::new_stream(to_device(device)?).map(PyStream).or_raise()
}

/// Make a new stream on `device` that may be used from any thread (streams are not tied to
/// threads here, so this is `new_stream`).
#[pyfunction]
fn new_thread_unsafe_stream(device: &Bound<'_, PyAny>) -> PyResult<PyStream> {
    new_stream(device)
}

/// Make a new stream that is a distinct stream in every thread that uses it.
#[pyfunction]
fn new_thread_local_stream(device: &Bound<'_, PyAny>) -> PyResult<ThreadLocalStream> {
    let device = to_device(device)?;
    let id = device::new_thread_local_stream(device).or_raise()?;
    Ok(ThreadLocalStream { device, id })
}

/// Make `stream` this thread's default stream for its device (the default device is not
/// changed).
#[pyfunction]
fn set_default_stream(stream: &Bound<'_, PyAny>) -> PyResult<()> {
    let stream = if let Ok(s) = stream.cast::<PyStream>() {
        s.get().0
    } else if let Ok(t) = stream.cast::<ThreadLocalStream>() {
        t.get().resolve()?
    } else {
        return Err(crate::error::raise!(
            Type,
            "set_default_stream",
            "Expected a Stream, got {}.",
            stream.get_type().name().map(|n| n.to_string()).unwrap_or_default()
        ));
    };
    device::set_default_stream(stream).or_raise()
}

/// Destroy all streams created in the current thread: this thread's default streams go
/// back to each device's stream 0.
#[pyfunction]
fn clear_streams() {
    device::clear_streams();
}

/// Synchronize with the given stream (a Stream, ThreadLocalStream, Device or DeviceType;
/// the default stream when None): waits for the GPU work issued so far (the CPU evaluates
/// synchronously).
#[pyfunction]
#[pyo3(signature = (stream = None))]
fn synchronize(stream: Option<&Bound<'_, PyAny>>) -> PyResult<()> {
    if let Some(s) = stream.filter(|s| !s.is_none()) {
        let s = to_stream(s)?;
        device::default_stream_of(s.device).map_err(|_| {
            crate::error::raise!(Value, "synchronize", "{} is not available.", s.device)
        })?;
    }
    // Work handed to the issuing thread first (it never needs the GIL).
    kiln::background::drain();
    kiln::backends::synchronize(kiln_base::Device::GPU).map_err(crate::error::to_pyerr)
}

/// The number of available devices of a type (one CPU; the first GPU when there is one).
#[pyfunction]
fn device_count(device_type: crate::device::DeviceType) -> usize {
    let kind: DeviceKind = device_type.into();
    (0..1).filter(|&i| device::is_available(Device { kind, index: i })).count()
}

/// Information about a device (the default device when None): for the CPU its
/// `architecture` and `device_name` as MLX reports them on Linux; empty for an unavailable
/// device.
#[pyfunction]
#[pyo3(signature = (d = None))]
fn device_info<'py>(
    py: Python<'py>,
    d: Option<&Bound<'py, PyAny>>,
) -> PyResult<Bound<'py, PyDict>> {
    let dev = match d.filter(|d| !d.is_none()) {
        Some(d) => to_device(d)?,
        None => device::default_device(),
    };
    let out = PyDict::new(py);
    if dev.kind == DeviceKind::Cpu && device::is_available(dev) {
        out.set_item("architecture", std::env::consts::ARCH)?;
        out.set_item("device_name", cpu_model_name())?;
    }
    if dev.kind == DeviceKind::Gpu && device::is_available(dev) {
        if let Ok(gpu) = kiln::cuda::runtime::gpu() {
            out.set_item("architecture", format!("sm_{}{}", gpu.arch.0, gpu.arch.1))?;
            out.set_item("device_name", gpu.name.clone())?;
            out.set_item("memory_size", gpu.total_memory)?;
        }
    }
    Ok(out)
}

/// The CPU's model name from `/proc/cpuinfo` (the architecture where there is none).
fn cpu_model_name() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|info| {
            info.lines().find_map(|l| {
                let (k, v) = l.split_once(':')?;
                (k.trim() == "model name").then(|| v.trim().to_string())
            })
        })
        .unwrap_or_else(|| std::env::consts::ARCH.to_string())
}

#[allow(clippy::unsafe_removed_from_name)] // MLX's name, not a Rust `unsafe` item
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<ThreadLocalStream>()?;
    m.add_function(wrap_pyfunction!(new_stream, m)?)?;
    m.add_function(wrap_pyfunction!(new_thread_unsafe_stream, m)?)?;
    m.add_function(wrap_pyfunction!(new_thread_local_stream, m)?)?;
    m.add_function(wrap_pyfunction!(set_default_stream, m)?)?;
    m.add_function(wrap_pyfunction!(clear_streams, m)?)?;
    m.add_function(wrap_pyfunction!(synchronize, m)?)?;
    m.add_function(wrap_pyfunction!(device_count, m)?)?;
    m.add_function(wrap_pyfunction!(device_info, m)?)?;
    Ok(())
}
