//! kiln for Rust users: the lazy `Array`, the ops as free functions, compile and evaluation,
//! with kiln's backends registered with the core (kiln-cpu for the host, kiln-cuda for an
//! NVIDIA GPU when one is present). Arrays are computed when read or passed to [`eval`].
//!
//! ```
//! use kiln::{ops, Array, DType};
//! let x = ops::arange(0.0, 4.0, 1.0, DType::F32).unwrap();
//! let y = ops::sum(&ops::multiply(&x, &x).unwrap(), None, false).unwrap();
//! assert_eq!(y.item::<f32>().unwrap(), 14.0);
//! ```
//!
//! The backend crates stay reachable as [`cpu`] and [`cuda`] for what only they can answer
//! (their kernel caches and build statistics, custom-kernel source generation).

pub use kiln_base::buffer::HOST;
pub use kiln_core::ops::random;
pub use kiln_core::*;
pub use kiln_cpu as cpu;
pub use kiln_cuda as cuda;
pub use kiln_distributed as distributed;

static CPU: kiln_cpu::CpuBackend = kiln_cpu::CpuBackend;
static GPU: kiln_cuda::CudaBackend = kiln_cuda::CudaBackend;

/// Registers kiln's backends with the core. Runs by itself when the program loads; calling
/// it again (kiln-python does at import, to be sure) changes nothing.
pub fn init() {
    kiln_core::backends::register(kiln_base::DeviceKind::Cpu, &CPU);
    kiln_core::backends::register(kiln_base::DeviceKind::Gpu, &GPU);
}

// SAFETY: runs before main; it only stores two `&'static` references in the core's
// `OnceLock`s, touching no other static, thread-local or the standard library's runtime.
#[ctor::ctor(unsafe)]
fn register_at_load() {
    init();
}

/// Bytes currently allocated for arrays on the host.
pub fn active_memory() -> usize {
    HOST.counters.active()
}

/// The most bytes allocated at once since start (or since [`reset_peak_memory`]).
pub fn peak_memory() -> usize {
    HOST.counters.peak()
}

pub fn reset_peak_memory() {
    HOST.counters.reset_peak()
}
