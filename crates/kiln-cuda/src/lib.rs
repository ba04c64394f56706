//! kiln-cuda: kiln's NVIDIA GPU backend on cudarc (libraries loaded at run time, so this
//! crate builds and its CPU-side tests pass on machines without CUDA).
//!
//! - `runtime`: finding the GPU (probing the libraries first: cudarc panics on a missing
//!   one), its context and the one ordered stream all work is issued on;
//! - `issuing`: the lock that keeps other threads' work out of a graph capture (with
//!   `runtime`, the floor: neither uses any other module);
//! - `alloc`: device memory behind a size-class cache, with counters and limits;
//! - `transfer`: host <-> device copies of array data;
//! - `nvrtc`: CUDA C -> CUBIN for the device's architecture, cached in memory and on disk;
//! - `prebuild`: the kernels a compiled function will need, built on several threads at once;
//! - `launch`: kernel argument packing and launches;
//! - `elementwise`: generated kernels (kiln-codegen's CUDA variant) for fused programs and
//!   every eager elementwise primitive;
//! - `reduce`, `rows` (arg reductions, softmax), `scan`, `sort` (bitonic, stable by index),
//!   `matmul` (cuBLAS): the other computing primitives;
//! - `complex`: complex64 support (the parts of complex values, the GPU's complex op table)
//!   and `NumberOfElements`;
//! - `fft`: FFTs through cuFFT (loaded at run time, probed first);
//! - `conv`: convolution (im2col gather + cuBLAS);
//! - `fast`: mx.fast's fused kernels (layer_norm, rms_norm, RoPE, attention);
//! - `copy` (strided copies: concatenate, slice_update, non-view bitcasts), `indexing`
//!   (gather, scatter), `masked` (masked scatter), `creation` (arange, random bits): data
//!   movement and creation;
//! - `cuda_graph`: CUDA graphs (capture, launch) for compiled replays;
//! - `profile`: CUDA events around calls for the profiler's device times;
//! - `ready`: an event at the end of each evaluation's work, so results are read without
//!   waiting for work issued after them;
//! - `backend`: the `Backend` implementation (what kiln-core reaches, through the trait).

pub mod alloc;
mod backend;
mod complex;
mod conv;
mod copy;
mod creation;
mod cuda_graph;
mod elementwise;
pub mod fast;
mod fft;
mod gemv;
mod indexing;
mod issuing;
mod launch;
mod masked;
mod matmul;
pub mod nvrtc;
pub mod prebuild;
mod profile;
mod ready;
mod reduce;
mod rows;
pub mod runtime;
mod scan;
mod sort;
pub mod transfer;

pub use backend::{supports, CudaBackend};
pub use runtime::{is_available, synchronize, unavailable_reason};
