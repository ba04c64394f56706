//! kiln for Rust users: the lazy `Array`, the ops as free functions, and evaluation.
//! The CPU backend is linked in; arrays are computed when read or passed to [`eval`].
//!
//! ```
//! use kiln::{ops, Array, DType};
//! let x = ops::arange(0.0, 4.0, 1.0, DType::F32).unwrap();
//! let y = ops::sum(&ops::multiply(&x, &x).unwrap(), None, false).unwrap();
//! assert_eq!(y.item::<f32>().unwrap(), 14.0);
//! ```

pub use kiln_base::buffer::HOST;
pub use kiln_core::ops::random;
pub use kiln_core::*;

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
