//! Which device new ops run on: a process-wide default device, overridden per thread by
//! stream scopes (`with mx.stream(mx.cpu):`), and the backend that serves each device.

use kiln_base::{bail, ArrayData, Backend, Device, DeviceKind, Result, Stream};
use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{OnceLock, RwLock};
use std::thread::ThreadId;

/// The default device once chosen: the GPU when one is available, else the CPU.
static DEFAULT_DEVICE: RwLock<Option<Device>> = RwLock::new(None);

/// Index of the next stream `new_stream` makes (0 is each device's default stream). Streams
/// are labels here: the CPU backend evaluates synchronously on the calling thread.
static NEXT_STREAM: AtomicU32 = AtomicU32::new(1);
/// Ids of thread-local streams (`new_thread_local_stream`), numbered apart as in MLX.
static NEXT_THREAD_LOCAL: AtomicU32 = AtomicU32::new(0);

thread_local! {
    static STREAM_SCOPES: RefCell<Vec<Stream>> = const { RefCell::new(Vec::new()) };
    /// This thread's default stream per device, where `set_default_stream` changed it.
    static THREAD_DEFAULTS: RefCell<Vec<Stream>> = const { RefCell::new(Vec::new()) };
    /// The stream each thread-local stream id stands for in this thread.
    static THREAD_LOCAL_STREAMS: RefCell<HashMap<u32, Stream>> = RefCell::new(HashMap::new());
}

/// Whether kiln can run on `device` in this process.
pub fn is_available(device: Device) -> bool {
    crate::backends::unavailable_reason(device).is_none()
}

fn check_available(op: &'static str, device: Device) -> Result<()> {
    crate::backends::backend(op, device).map(|_| ())
}

/// The device new arrays go to unless a stream scope says otherwise.
pub fn default_device() -> Device {
    if let Some(device) = *DEFAULT_DEVICE.read().unwrap_or_else(|e| e.into_inner()) {
        return device;
    }
    let found = if is_available(Device::GPU) { Device::GPU } else { Device::CPU };
    *DEFAULT_DEVICE.write().unwrap_or_else(|e| e.into_inner()).get_or_insert(found)
}

pub fn set_default_device(device: Device) -> Result<()> {
    check_available("set_default_device", device)?;
    *DEFAULT_DEVICE.write().unwrap_or_else(|e| e.into_inner()) = Some(device);
    Ok(())
}

/// The stream ops created now run on.
pub fn default_stream() -> Stream {
    STREAM_SCOPES
        .with(|s| s.borrow().last().copied())
        .unwrap_or_else(|| thread_default_stream(default_device()))
}

/// The thread kiln was loaded in (or that first asked for a stream): its default streams
/// are each device's stream 0. Every other thread gets a new stream of its own per device
/// the first time it needs one, as MLX does.
static MAIN_THREAD: OnceLock<ThreadId> = OnceLock::new();

/// Records the calling thread as the main thread (the Python module does at import); a
/// later call changes nothing.
pub fn mark_main_thread() {
    MAIN_THREAD.get_or_init(|| std::thread::current().id());
}

fn is_main_thread() -> bool {
    *MAIN_THREAD.get_or_init(|| std::thread::current().id()) == std::thread::current().id()
}

fn thread_default_stream(device: Device) -> Stream {
    if let Some(s) =
        THREAD_DEFAULTS.with(|d| d.borrow().iter().find(|s| s.device == device).copied())
    {
        return s;
    }
    if is_main_thread() || !is_available(device) {
        return device.default_stream();
    }
    let s = Stream { device, index: NEXT_STREAM.fetch_add(1, Ordering::Relaxed) };
    THREAD_DEFAULTS.with(|d| d.borrow_mut().push(s));
    s
}

/// This thread's default stream of `device` (MLX's `default_stream(device)`): the innermost
/// stream scope on that device, else the thread's default for it.
pub fn default_stream_of(device: Device) -> Result<Stream> {
    if !is_available(device) {
        bail!(Value, "default_stream", "Cannot get {} stream without {0} backend.", kind(device));
    }
    let scoped =
        STREAM_SCOPES.with(|s| s.borrow().iter().rev().find(|s| s.device == device).copied());
    Ok(scoped.unwrap_or_else(|| thread_default_stream(device)))
}

fn kind(device: Device) -> &'static str {
    match device.kind {
        DeviceKind::Cpu => "cpu",
        DeviceKind::Gpu => "gpu",
    }
}

/// A new stream on `device`, with an index no other stream has.
pub fn new_stream(device: Device) -> Result<Stream> {
    if !is_available(device) {
        bail!(Value, "new_stream", "Cannot make {} stream without {0} backend.", kind(device));
    }
    Ok(Stream { device, index: NEXT_STREAM.fetch_add(1, Ordering::Relaxed) })
}

/// Makes `stream` this thread's default for its device (the default device is unchanged).
pub fn set_default_stream(stream: Stream) -> Result<()> {
    check_available("set_default_stream", stream.device)?;
    THREAD_DEFAULTS.with(|d| {
        let mut d = d.borrow_mut();
        d.retain(|s| s.device != stream.device);
        d.push(stream);
    });
    Ok(())
}

/// A new thread-local stream id on `device`: each thread resolves it to a stream of its own
/// ([`resolve_thread_local`]).
pub fn new_thread_local_stream(device: Device) -> Result<u32> {
    if !is_available(device) {
        bail!(Value, "new_stream", "Cannot make {} stream without {0} backend.", kind(device));
    }
    Ok(NEXT_THREAD_LOCAL.fetch_add(1, Ordering::Relaxed))
}

/// This thread's stream for thread-local stream `id` (made on first use).
pub fn resolve_thread_local(device: Device, id: u32) -> Result<Stream> {
    if let Some(s) = THREAD_LOCAL_STREAMS.with(|m| m.borrow().get(&id).copied()) {
        return Ok(s);
    }
    let s = new_stream(device)?;
    THREAD_LOCAL_STREAMS.with(|m| m.borrow_mut().insert(id, s));
    Ok(s)
}

/// Forgets the streams this thread made its defaults and its thread-local streams: each
/// device's default goes back to its stream 0 in the main thread, to a new stream in others.
pub fn clear_streams() {
    THREAD_DEFAULTS.with(|d| d.borrow_mut().clear());
    THREAD_LOCAL_STREAMS.with(|m| m.borrow_mut().clear());
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
    crate::backends::backend("eval", device)
}

/// Host-readable data (a no-op on the CPU; GPU data is copied to the host).
pub fn to_host(data: &ArrayData) -> Result<ArrayData> {
    to_device(data, Device::CPU)
}

/// `data` on `device`: shared when it is there already, else copied.
pub fn to_device(data: &ArrayData, device: Device) -> Result<ArrayData> {
    if data.buffer.device() == device {
        return Ok(data.clone());
    }
    // The backend of the device that is not the host moves the data either way.
    let other = if device.kind == DeviceKind::Cpu { data.buffer.device() } else { device };
    crate::backends::backend("to_device", other)?.transfer(data, device)
}
