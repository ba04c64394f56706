//! kiln-base: the vocabulary every kiln layer shares. Dtypes and their promotion table,
//! shapes and strided layouts, devices, device-tagged buffers, the primitive set with its
//! per-op facts, the counter-based random hash, the error type, and the `Backend` trait
//! (everything the core asks of a device).
//! It knows nothing of the lazy graph (kiln-core) or of kernels (kiln-cpu, kiln-cuda).

pub mod backend;
pub mod buffer;
pub mod build_progress;
pub mod conv;
pub mod device;
pub mod distributed;
pub mod dtype;
pub mod elementwise;
pub mod error;
pub mod fast;
pub mod fused;
pub mod interrupt;
pub mod layout;
pub mod linalg;
pub mod primitive;
pub mod random;
pub mod shape;

pub use backend::{ArrayData, Backend, Chained, DeviceMemory, Together};
pub use buffer::{Buffer, HOST};
pub use conv::ConvParams;
pub use device::{Device, DeviceKind, Stream};
pub use distributed::{Collective, CollectiveOp, Communicator, Reduction};
pub use dtype::{DType, DTypeKind, Scalar};
pub use elementwise::{BinaryOp, ComplexSupport, Domain, UnaryOp};
pub use error::{Error, Result};
pub use fast::{AttentionMask, CKernelSpec, CudaKernelSpec, FastOp, TemplateArg};
pub use fused::{FusedOp, FusedProgram, FusedStep};
pub use layout::Layout;
pub use linalg::LinalgOp;
pub use primitive::{
    ArgReduceOp, ComplexOp, FftKind, Opaque, Primitive, ReduceOp, ReshapeDim, ScanOp, ScatterReduce,
};
pub use shape::{Shape, Strides};
