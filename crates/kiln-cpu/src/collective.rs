//! Collectives on host arrays: the input's row-major bytes go to the group's communicator
//! (MPI), which writes a fresh output, or reduces a donated input in place (a gradient the
//! step reads only through its all_sum: no allocation, and the data stays in cache). A
//! send's output is its input.

use crate::copy::copy;
use kiln_base::distributed::{group, Collective, CollectiveOp};
use kiln_base::shape::size_of;
use kiln_base::{ArrayData, DType, Layout, Result, HOST};

pub(crate) fn collective(
    c: &Collective,
    inputs: &[ArrayData],
    shape: &[usize],
    dtype: DType,
    donated: &[bool],
) -> Result<ArrayData> {
    let g = group(c.group)?;
    if let (Some(r), [x], [true]) = (c.reduction(), inputs, donated) {
        let n = size_of(shape) * dtype.size();
        let whole = x.layout == Layout::contiguous(shape) && x.dtype == dtype;
        if c.op != CollectiveOp::SumScatter && whole && x.buffer.host_slice::<u8>().len() >= n {
            // SAFETY: n bytes of x's host buffer (checked above); the buffer is donated, so
            // no other handle reads or writes it while the communicator does.
            let data = unsafe { std::slice::from_raw_parts_mut(x.buffer.as_ptr() as *mut u8, n) };
            g.all_reduce_in_place(r, data, dtype, shape)?;
            return Ok(x.clone());
        }
    }
    let input = inputs.first().map(row_major).transpose()?;
    let in_bytes = input.as_ref().map(bytes).unwrap_or(&[]);
    let in_shape = inputs.first().map(|x| x.layout.shape.as_slice()).unwrap_or(&[]);
    if let CollectiveOp::Send { dst } = c.op {
        g.send(in_bytes, dst, dtype, in_shape)?;
        return Ok(inputs[0].clone());
    }
    let mut buffer = HOST.alloc_for_overwrite(size_of(shape) * dtype.size())?;
    let out = buffer.host_slice_mut::<u8>().expect("a fresh buffer has one handle");
    match (&c.op, c.reduction()) {
        (CollectiveOp::Recv { src, .. }, _) => g.recv(out, *src, dtype, shape)?,
        (CollectiveOp::AllGather, _) => g.all_gather(in_bytes, out, dtype, in_shape)?,
        (CollectiveOp::SumScatter, _) => g.sum_scatter(in_bytes, out, dtype, in_shape)?,
        (_, Some(r)) => g.all_reduce(r, in_bytes, out, dtype, in_shape)?,
        (op, None) => unreachable!("{op:?} has a reduction"),
    }
    Ok(ArrayData { buffer, layout: Layout::contiguous(shape), dtype })
}

/// `x` itself when its elements are row-major from its offset, else a row-major copy.
fn row_major(x: &ArrayData) -> Result<ArrayData> {
    if x.layout.row_contiguous {
        Ok(x.clone())
    } else {
        copy(x, &x.layout.shape)
    }
}

/// The bytes of a row-major array.
fn bytes(x: &ArrayData) -> &[u8] {
    let start = x.layout.offset * x.dtype.size();
    &x.buffer.host_slice::<u8>()[start..start + size_of(&x.layout.shape) * x.dtype.size()]
}
