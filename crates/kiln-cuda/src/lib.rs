//! kiln-cuda: kiln's NVIDIA GPU backend on cudarc (libraries loaded at run time, so this
//! crate builds and its CPU-side tests pass on machines without CUDA).
//!
//! The modules form layers; each uses only its own layer and those below
//! (`tests/layers.rs` checks it):
//!
//! 1. The floor. `runtime`: finding the GPU (probing the libraries first: cudarc panics on
//!    a missing one), its context and the one ordered stream all work is issued on;
//!    `issuing`: the lock that keeps other threads' work out of a graph capture; `batch`: an
//!    evaluation's kernel launches held back and put on the stream together, as an updated
//!    CUDA graph when the same kernels came before.
//! 2. Device services. `alloc`: device memory behind a size-class cache, with counters and
//!    limits; `transfer`: host <-> device copies of array data; `profile`: CUDA events around
//!    calls for the profiler's device times; `nvrtc`: CUDA C -> CUBIN for the device's
//!    architecture, cached in memory and on disk; `build_threads`: many builds at once;
//!    `launch`: kernel argument packing and launches; `collapse`: merging the dims of
//!    strided walks.
//! 3. `copy`: strided copies (concatenate, slice_update, non-view bitcasts), which every
//!    kernel family uses to make operands contiguous.
//! 4. `elementwise`: generated kernels (kiln-codegen's CUDA variant) for fused programs and
//!    every eager elementwise primitive; other families run single-op programs through it.
//! 5. Kernel families: `reduce`, `rows` (arg reductions, softmax), `scan`, `sort` (bitonic,
//!    stable by index), `matmul` (cuBLAS), `gemv` and `qmv_mma` (4-bit on tensor cores), `complex` (parts of complex values,
//!    `NumberOfElements`), `fft` (cuFFT, loaded at run time, probed first), `conv` (im2col
//!    gather + cuBLAS), `indexing` (gather, scatter), `masked` (masked scatter), `creation`
//!    (arange, random bits), `collective` (NCCL's exchanges of GPU arrays, through kiln-base's
//!    `DeviceCollectives`), `fast` (mx.fast's fused kernels: norms, RoPE, attention,
//!    quantized products, user kernels).
//! 6. What the core reaches through the trait: `prebuild` (the kernels a compiled function
//!    will need, built on several threads at once), `cuda_graph` (capture and launch for
//!    compiled replays), `ready` (an event at the end of each evaluation's work, so results
//!    are read without waiting for work issued after them) and `backend` (the `Backend`
//!    implementation and what the GPU supports).

pub mod alloc;
mod backend;
mod batch;
mod build_threads;
mod collapse;
mod collective;
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
mod qmv_mma;
mod ready;
mod reduce;
mod rows;
pub mod runtime;
mod scan;
mod sort;
mod together;
pub mod transfer;

pub use backend::{supports, CudaBackend};
pub use batch::{eager_graph_stats, eager_graphs, set_eager_graphs, BatchStats};
pub use runtime::{is_available, synchronize, unavailable_reason};
