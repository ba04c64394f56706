//! `mx.fast.cuda_kernel`'s op: checks the launch, compiles the generated source once (so
//! compile errors raise at the call, with NVRTC's log) and records one `FastOp::CudaKernel`
//! with all its outputs. The GPU backend generates the source and builds it.

use super::record_all;
use crate::array::Array;
use kiln_base::{bail, ensure, CudaKernelSpec, DeviceKind, FastOp, Primitive, Result};
use std::sync::Arc;

/// Threads per block a CUDA launch may have.
const MAX_BLOCK_THREADS: u64 = 1024;

/// Records the user kernel `spec` applied to `inputs` (`spec.num_inputs` is set here).
pub fn cuda_kernel(mut spec: CudaKernelSpec, inputs: &[Array]) -> Result<Vec<Array>> {
    let op = "cuda_kernel";
    ensure!(!spec.output_shapes.is_empty(), Value, op, "Expected at least one output.");
    ensure!(
        spec.output_shapes.len() == spec.output_dtypes.len(),
        Value,
        op,
        "Got {} output shapes and {} output dtypes.",
        spec.output_shapes.len(),
        spec.output_dtypes.len()
    );
    let threads: u64 = spec.threadgroup.iter().map(|&t| t as u64).product();
    ensure!(
        spec.threadgroup.iter().all(|&t| t > 0) && threads <= MAX_BLOCK_THREADS,
        Value,
        op,
        "threadgroup {:?} must be positive with at most {MAX_BLOCK_THREADS} threads in all.",
        spec.threadgroup
    );
    let (blocks, _) = spec.launch_dims();
    ensure!(
        blocks[1] <= 65535 && blocks[2] <= 65535,
        Value,
        op,
        "grid {:?} needs more than 65535 blocks in y or z.",
        spec.grid
    );
    if let Some(why) = crate::backends::unavailable_reason(kiln_base::Device::GPU) {
        bail!(
            Runtime,
            op,
            "The GPU is not available ({why}); use mx.fast.c_kernel for a CPU kernel."
        );
    }
    let stream = crate::device::default_stream();
    if stream.device.kind != DeviceKind::Gpu {
        bail!(
            Value,
            op,
            "CUDA kernels run on the GPU only (got a CPU stream); use mx.fast.c_kernel there."
        );
    }
    spec.num_inputs = inputs.len();
    let fop = FastOp::CudaKernel(Arc::new(spec));
    crate::backends::backend(op, stream.device)?.prepare_kernel(&fop)?;
    record_all(Primitive::Fast(fop), inputs.to_vec())
}
