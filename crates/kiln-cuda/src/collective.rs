//! Collectives on GPU arrays, for groups whose backend moves device memory itself (NCCL):
//! the input made row-major, a fresh output, and the group's `DeviceCollectives` issued on
//! kiln's stream, so the exchange queues behind the kernels that made its input and is
//! captured into CUDA graphs like any kernel. A send's output is its input.

use crate::alloc::device_ptr;
use crate::copy::{contiguous, empty};
use crate::runtime::gpu;
use kiln_base::distributed::{group, Collective, CollectiveOp};
use kiln_base::{bail, ArrayData, DType, Result};

/// Whether the group of `c` has device collectives (else the core runs it on the host).
pub(crate) fn on_device(c: &Collective) -> bool {
    group(c.group).is_ok_and(|g| g.device().is_some())
}

pub(crate) fn collective(
    c: &Collective,
    inputs: &[ArrayData],
    shape: &[usize],
    dtype: DType,
) -> Result<ArrayData> {
    let g = group(c.group)?;
    let Some(device) = g.device() else {
        bail!(Unsupported, c.name(), "This group's backend has no GPU collectives.");
    };
    let stream = gpu()?.stream()? as usize;
    let input = inputs.first().map(contiguous).transpose()?;
    let in_ptr = input
        .as_ref()
        .map_or(0, |x| device_ptr(&x.buffer, x.layout.offset as isize, x.dtype.size()));
    let in_shape = input.as_ref().map(|x| x.layout.shape.as_slice()).unwrap_or(&[]);
    if let CollectiveOp::Send { dst } = c.op {
        device.send(in_ptr, dst, dtype, in_shape, stream)?;
        return Ok(inputs[0].clone());
    }
    let out = empty(shape, dtype)?;
    let out_ptr = device_ptr(&out.buffer, 0, dtype.size());
    match (&c.op, c.reduction()) {
        (CollectiveOp::Recv { src, .. }, _) => device.recv(out_ptr, *src, dtype, shape, stream)?,
        (CollectiveOp::AllGather, _) => {
            device.all_gather(in_ptr, out_ptr, dtype, in_shape, stream)?
        }
        (CollectiveOp::SumScatter, _) => {
            device.sum_scatter(in_ptr, out_ptr, dtype, in_shape, stream)?
        }
        (_, Some(r)) => device.all_reduce(r, in_ptr, out_ptr, dtype, in_shape, stream)?,
        (op, None) => unreachable!("{op:?} has a reduction"),
    }
    Ok(out)
}
