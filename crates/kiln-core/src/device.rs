//! Which device new ops run on: a process-wide default device, overridden per thread by
//! stream scopes (`with mx.stream(mx.cpu):`), and the backend that serves each device.

use kiln_base::{bail, ArrayData, Backend, Device, DeviceKind, Result, Stream};
use std::cell::RefCell;
use std::sync::RwLock;

static DEFAULT_DEVICE: RwLock<Device> = RwLock::new(Device::CPU);

thread_local! {
    static STREAM_SCOPES: RefCell<Vec<Stream>> = const { RefCell::new(Vec::new()) };
}

/// Whether kiln can run on `device` in this process.
pub fn is_available(device: Device) -> bool {
    match device.kind {
        DeviceKind::Cpu => device.index == 0,
        DeviceKind::Gpu => false,
    }
}

fn check_available(op: &'static str, device: Device) -> Result<()> {
    if !is_available(device) {
        bail!(Value, op, "{device} is not available (this build of kiln has no GPU backend).");
    }
    Ok(())
}

/// The device new arrays go to unless a stream scope says otherwise.
pub fn default_device() -> Device {
    *DEFAULT_DEVICE.read().unwrap_or_else(|e| e.into_inner())
}

pub fn set_default_device(device: Device) -> Result<()> {
    check_available("set_default_device", device)?;
    *DEFAULT_DEVICE.write().unwrap_or_else(|e| e.into_inner()) = device;
    Ok(())
}

/// The stream ops created now run on.
pub fn default_stream() -> Stream {
    STREAM_SCOPES
        .with(|s| s.borrow().last().copied())
        .unwrap_or_else(|| default_device().default_stream())
}

/// The CPU's stream (data made on the host lives here).
pub fn host_stream() -> Stream {
    Device::CPU.default_stream()
}

/// Makes `stream` the default for this thread until the guard drops.
pub struct StreamScope(());

impl StreamScope {
    pub fn enter(stream: Stream) -> Result<StreamScope> {
        check_available("stream", stream.device)?;
        STREAM_SCOPES.with(|s| s.borrow_mut().push(stream));
        Ok(StreamScope(()))
    }
}

impl Drop for StreamScope {
    fn drop(&mut self) {
        STREAM_SCOPES.with(|s| s.borrow_mut().pop());
    }
}

/// The kernels for a device.
pub(crate) fn backend(device: Device) -> Result<&'static dyn Backend> {
    static CPU: kiln_cpu::CpuBackend = kiln_cpu::CpuBackend;
    match device.kind {
        DeviceKind::Cpu => Ok(&CPU),
        DeviceKind::Gpu => bail!(Runtime, "eval", "{device} has no backend in this build."),
    }
}

/// Host-readable data (a no-op on the CPU; the GPU backend will copy here).
pub(crate) fn to_host(data: &ArrayData) -> Result<ArrayData> {
    match data.buffer.device().kind {
        DeviceKind::Cpu => Ok(data.clone()),
        DeviceKind::Gpu => bail!(Runtime, "to_host", "GPU buffers are not supported yet."),
    }
}
