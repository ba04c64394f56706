//! Masked scatter (`x[mask] = values`): the mask's true rows take consecutive rows of the
//! values, in row-major order. An inclusive running count of the mask numbers the true rows;
//! one kernel then writes every element from the values or from `x`. As on the CPU, too few
//! value rows is an error, which costs reading the count back (a wait for the GPU).

use crate::alloc::device_ptr;
use crate::copy::{bits_type, contiguous, empty};
use crate::elementwise::{run_program, single_op_program};
use crate::launch::{blocks_for, launch, Args, BLOCK};
use crate::nvrtc::KernelCache;
use crate::runtime::{driver_error, gpu};
use cudarc::driver::result;
use kiln_base::{bail, ArrayData, DType, Layout, Primitive, Result, ScanOp};
use std::fmt::Write;
use std::sync::Arc;

const SYMBOL: &str = "kiln_masked_scatter";

/// `out[e] = mask[r] ? values[(count[r] - 1) * inner + j] : x[e]` for `e = r * inner + j`.
fn source(width: usize) -> String {
    let t = bits_type(width);
    let mut s = String::from(kiln_codegen::cuda::preamble());
    let _ = write!(
        s,
        r#"
extern "C" __global__ void {SYMBOL}(const int64_t n, const int64_t inner, const {t} *__restrict__ x,
                                   const uint8_t *__restrict__ mask, const int64_t *__restrict__ count,
                                   const {t} *__restrict__ values, {t} *__restrict__ out) {{
    for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < n;
         e += (int64_t)gridDim.x * blockDim.x) {{
        const int64_t r = e / inner, j = e - r * inner;
        out[e] = mask[r] ? values[(count[r] - 1) * inner + j] : x[e];
    }}
}}
"#
    );
    s
}

static KERNELS: KernelCache<usize> = KernelCache::new();

pub(crate) fn masked_scatter(
    x: &ArrayData,
    mask: &ArrayData,
    values: &ArrayData,
    shape: &[usize],
) -> Result<ArrayData> {
    let op = "masked_scatter";
    let out = empty(shape, x.dtype)?;
    let rows = mask.layout.size();
    let n = out.layout.size();
    if n == 0 {
        return Ok(out);
    }
    let inner = n / rows;
    let mask = contiguous(mask)?;
    // The mask's rows as one axis.
    let mask = ArrayData {
        layout: Layout::new((&[rows][..]).into(), (&[1][..]).into(), mask.layout.offset),
        ..mask
    };
    let program = single_op_program(&Primitive::AsType(DType::I64), &[DType::Bool], DType::I64);
    let flags = run_program(
        &Arc::new(program.expect("bool -> int64")),
        std::slice::from_ref(&mask),
        &[rows],
    )?;
    let scan = Primitive::Scan { op: ScanOp::Sum, axis: 0, reverse: false, inclusive: true };
    let count = crate::scan::scan(&scan, (ScanOp::Sum, 0, false, true), &flags[0], &[rows])?;
    let mut total = [0i64];
    let stream = gpu()?.stream()?;
    let last = device_ptr(&count.buffer, rows as isize - 1, 8);
    // SAFETY: `last` is the count's final element (8 bytes); the stream orders the copy after
    // the scan, and synchronising makes the host value complete.
    unsafe {
        result::memcpy_dtoh_async(&mut total[..], last, stream)
            .and_then(|_| result::stream::synchronize(stream))
    }
    .map_err(|e| driver_error(op, e))?;
    if total[0] as usize > values.layout.shape.first().copied().unwrap_or(0) {
        bail!(Runtime, op, "Source does not have enough elements for mask.");
    }
    let (x, values) = (contiguous(x)?, contiguous(values)?);
    let width = x.dtype.size();
    let f = KERNELS.get(&width, SYMBOL, || source(width))?;
    let mut args = Args::new();
    args.i64(n as i64)
        .i64(inner as i64)
        .ptr(device_ptr(&x.buffer, x.layout.offset as isize, width))
        .ptr(device_ptr(&mask.buffer, mask.layout.offset as isize, 1))
        .ptr(count.buffer.as_ptr() as u64)
        .ptr(device_ptr(&values.buffer, values.layout.offset as isize, width))
        .ptr(out.buffer.as_ptr() as u64);
    launch(op, f, blocks_for(n as u64, BLOCK as u64), BLOCK, 0, &mut args)?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    /// The kernel's source for an offline NVRTC check (`nvrtc::dump_sources`).
    #[test]
    fn dump() {
        crate::nvrtc::dump_sources(&[("masked_scatter_2.cu".into(), super::source(2))]);
    }
}
