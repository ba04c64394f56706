//! kiln-core: the lazy array graph, the op front end, transforms and evaluation. It links
//! no backend: the facade crate `kiln` registers kiln-cpu's and kiln-cuda's (see
//! [`backends`]); a program using the core alone registers its own.
//!
//! ```
//! use kiln_core::{ops, Array};
//! let a = Array::from_slice(&[1.0f32, 2.0, 3.0], &[3]).unwrap();
//! let b = ops::multiply(&a, &a).unwrap();          // recorded, not computed
//! let s = ops::sum(&b, None, false).unwrap();
//! assert!(s.shape().is_empty() && !s.is_evaluated());
//! // Reading `s` (`s.item::<f32>()`) evaluates it on its device's registered backend.
//! ```

pub mod array;
pub mod backends;
pub mod background;
pub mod compile;
mod completion;
pub mod device;
pub mod eval;
pub mod export;
mod horizontal;
pub mod ops;
pub mod profile;
pub mod transforms;
mod vertical;
mod walk;

#[cfg(test)]
mod tests;

pub use array::{Array, HostElement};
pub use eval::eval;
pub use kiln_base::{
    shape, DType, Device, DeviceKind, Error, Layout, Primitive, Result, Scalar, Shape, Stream,
};
