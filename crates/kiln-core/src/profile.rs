//! The profiler's recorder (`kiln.profiler`): while a session is active, eval records every
//! primitive call it runs (name, device, host time, input and output shapes; on the GPU
//! also the device time between two CUDA events around the call) and every `eval` as a
//! span around them. With no session active each call costs one relaxed atomic load.

use kiln_base::{DType, Device, DeviceKind, Primitive, Shape};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::Instant;

static ACTIVE: AtomicBool = AtomicBool::new(false);
/// Whether GPU calls get CUDA events around them (off: host times only, nothing added to
/// the stream, so batched launches stay batched).
static DEVICE_TIMES: AtomicBool = AtomicBool::new(true);
static EVENTS: Mutex<Vec<Pending>> = Mutex::new(Vec::new());

/// Whether a profiling session is recording.
#[inline]
pub fn is_active() -> bool {
    ACTIVE.load(Ordering::Relaxed)
}

fn epoch() -> Instant {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    *EPOCH.get_or_init(Instant::now)
}

/// Nanoseconds on the profiler's clock (monotonic, shared by every thread): what Python's
/// own ranges (`record_function`) stamp themselves with.
pub fn now_ns() -> u64 {
    epoch().elapsed().as_nanos() as u64
}

/// A small per-thread number (trace viewers draw one row per thread).
pub fn thread_index() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    thread_local! {
        static INDEX: u64 = NEXT.fetch_add(1, Ordering::Relaxed);
    }
    INDEX.with(|i| *i)
}

/// One recorded call or span.
#[derive(Debug, Clone)]
pub struct Event {
    /// The primitive's name (`Compiled_...` for a fused kernel), or `eval`.
    pub name: String,
    /// `kernel` (a backend ran it), `view` (no kernel: a layout change), `custom` (a custom
    /// function's outputs, passed through), `graph` (a CUDA-graph replay) or `eval`.
    pub kind: &'static str,
    /// The device that ran it (`cpu`, `gpu`).
    pub device: String,
    /// Start on the profiler's clock, and host time, in nanoseconds.
    pub start_ns: u64,
    pub host_ns: u64,
    /// GPU time between CUDA events around the call (GPU calls only), in milliseconds.
    pub device_ms: Option<f64>,
    pub thread: u64,
    /// `(2, 3) float32` per input and output.
    pub inputs: Vec<String>,
    pub outputs: Vec<String>,
    /// The call's stream was on the GPU but it ran on the CPU (no GPU kernel yet).
    pub fallback: bool,
}

struct Pending {
    event: Event,
    gpu: Option<Box<dyn kiln_base::backend::DeviceSpan>>,
}

/// Starts a session (`device_times`: time GPU calls with events too); false if one is
/// active already.
pub fn start(device_times: bool) -> bool {
    let mut events = EVENTS.lock().unwrap_or_else(|e| e.into_inner());
    if ACTIVE.swap(true, Ordering::SeqCst) {
        return false;
    }
    DEVICE_TIMES.store(device_times, Ordering::SeqCst);
    epoch();
    events.clear();
    true
}

/// Ends the session and returns its events in the order they finished (GPU times resolved:
/// this waits for the GPU work recorded).
pub fn stop() -> Vec<Event> {
    ACTIVE.store(false, Ordering::SeqCst);
    let pending = std::mem::take(&mut *EVENTS.lock().unwrap_or_else(|e| e.into_inner()));
    pending
        .into_iter()
        .map(|p| {
            let mut event = p.event;
            event.device_ms = p.gpu.and_then(|span| span.elapsed_ms());
            event
        })
        .collect()
}

fn meta(shape: &[usize], dtype: DType) -> String {
    format!("{} {dtype}", kiln_base::shape::fmt_shape(shape))
}

/// Times one call while a session is active (built by [`Timer::start`], `None` otherwise).
pub(crate) struct Timer {
    start: Instant,
    start_ns: u64,
    gpu: Option<Box<dyn kiln_base::backend::DeviceSpan>>,
}

impl Timer {
    /// `None` (one atomic load) unless a session is active.
    #[inline]
    pub(crate) fn start(device: Device) -> Option<Timer> {
        if !is_active() {
            return None;
        }
        Some(Timer::begin(device))
    }

    #[cold]
    fn begin(device: Device) -> Timer {
        let gpu = match device.kind {
            DeviceKind::Gpu if DEVICE_TIMES.load(Ordering::Relaxed) => {
                crate::backends::gpu().and_then(|b| b.profile_span())
            }
            DeviceKind::Gpu => None,
            DeviceKind::Cpu => None,
        };
        Timer { start: Instant::now(), start_ns: now_ns(), gpu }
    }

    /// Records the call of `prim` that ran on `device` (its stream's device `stream`).
    #[cold]
    pub(crate) fn call(
        mut self,
        prim: &Primitive,
        inputs: &[kiln_base::ArrayData],
        outputs: &[(Shape, DType)],
        device: Device,
        stream: Device,
    ) {
        let host_ns = self.start.elapsed().as_nanos() as u64;
        if let Some(span) = self.gpu.as_mut() {
            span.end();
        }
        let viewed = matches!(inputs, [x] if prim.view_layout(&x.layout).is_some());
        let kind = match prim {
            _ if viewed => "view",
            Primitive::Custom { .. } => "custom",
            _ => "kernel",
        };
        let name = match prim {
            Primitive::Fused(p) => p.name(),
            p => p.name().to_string(),
        };
        let event = Event {
            name,
            kind,
            device: device_name(device),
            start_ns: self.start_ns,
            host_ns,
            device_ms: None,
            thread: thread_index(),
            inputs: inputs.iter().map(|x| meta(&x.layout.shape, x.dtype)).collect(),
            outputs: outputs.iter().map(|(s, d)| meta(s, *d)).collect(),
            fallback: device != stream,
        };
        push(event, self.gpu);
    }

    /// Records a span (`eval`, a CUDA-graph replay) named `name`.
    #[cold]
    pub(crate) fn span(mut self, name: String, kind: &'static str, device: Device) {
        let host_ns = self.start.elapsed().as_nanos() as u64;
        if let Some(span) = self.gpu.as_mut() {
            span.end();
        }
        let event = Event {
            name,
            kind,
            device: device_name(device),
            start_ns: self.start_ns,
            host_ns,
            device_ms: None,
            thread: thread_index(),
            inputs: Vec::new(),
            outputs: Vec::new(),
            fallback: false,
        };
        push(event, self.gpu);
    }
}

fn device_name(device: Device) -> String {
    match device.kind {
        DeviceKind::Cpu => "cpu".into(),
        DeviceKind::Gpu => "gpu".into(),
    }
}

fn push(event: Event, gpu: Option<Box<dyn kiln_base::backend::DeviceSpan>>) {
    // A session that ended meanwhile does not take late events.
    if is_active() {
        EVENTS.lock().unwrap_or_else(|e| e.into_inner()).push(Pending { event, gpu });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{ops, Array};

    #[test]
    fn records_calls_inside_a_session_only() {
        let a = Array::from_slice(&[1.0f32, 2.0, 3.0], &[3]).unwrap();
        crate::eval(&[ops::exp(&a).unwrap()]).unwrap(); // before: not recorded
                                                        // Other tests evaluate on their own threads meanwhile: keep this thread's events.
        let me = thread_index();
        while !start(true) {
            std::thread::yield_now();
        }
        let b = ops::multiply(&a, &a).unwrap();
        crate::eval(&[ops::sum(&b, None, false).unwrap()]).unwrap();
        let events: Vec<Event> = stop().into_iter().filter(|e| e.thread == me).collect();
        let names: Vec<&str> = events.iter().map(|e| e.name.as_str()).collect();
        // The sum keeps a reduced axis, then a reshape (a view) drops it.
        assert_eq!(names, ["multiply", "sum", "reshape", "eval"], "{events:?}");
        assert_eq!(events[0].inputs, ["(3,) float32", "(3,) float32"]);
        assert_eq!(events[1].outputs, ["(1,) float32"]);
        assert_eq!((events[1].kind, events[2].kind), ("kernel", "view"));
        assert!(events.iter().all(|e| e.device == "cpu" && e.device_ms.is_none()));
        let eval = &events[3];
        assert!(events[..3].iter().all(|e| e.start_ns >= eval.start_ns
            && e.start_ns + e.host_ns <= eval.start_ns + eval.host_ns));
        crate::eval(&[ops::exp(&b).unwrap()]).unwrap();
        assert!(!is_active());
    }
}
