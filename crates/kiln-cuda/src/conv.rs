//! Convolution as im2col + cuBLAS: a kernel gathers every output position's receptive field
//! into one row of a matrix (zeros where the tap falls in padding or between dilated input
//! elements), then one batched product per channel group multiplies it by the weight.
//! Channels last, as MLX: input (N, S..., C), weight (O, K..., C / groups), output
//! (N, P..., O). Strides, negative padding (crops), kernel and input dilation, groups and
//! flipped kernels are all index arithmetic in the gather.

use crate::alloc::{device_ptr, DEVICE};
use crate::copy::{bits_type, contiguous, copy_into, empty};
use crate::launch::{blocks_for, launch, Args, BLOCK};
use crate::nvrtc::KernelCache;
use crate::runtime::{driver_error, gpu};
use cudarc::driver::result;
use kiln_base::{ArrayData, ConvParams, Layout, Result};
use std::fmt::Write;

const SYMBOL: &str = "kiln_im2col";

/// Values per spatial axis in the kernel's table (see `im2col_source`).
const PER_AXIS: usize = 8;

/// `cols[g, m, t] = x[n, position(p, tap), g * Cg + c]` or 0, for output position `m = (n,
/// p)` and column `t = (tap, c)`. The table holds N, G, M, Kt, Cg, P (output positions per
/// image), x's batch and channel strides, then per spatial axis: output size, kernel size,
/// stride, padding before, kernel dilation, input dilation, dilated input extent, x stride.
fn im2col_source(dims: usize, width: usize, flip: bool) -> String {
    let t = bits_type(width);
    let mut s = String::from(kiln_codegen::cuda::preamble());
    let _ = write!(
        s,
        r#"
struct KTable {{ int64_t v[{size}]; }};
extern "C" __global__ void {SYMBOL}(const int64_t total, const {t} *__restrict__ x,
                                   {t} *__restrict__ cols, const KTable tb) {{
    const int64_t M = tb.v[2], Kt = tb.v[3], Cg = tb.v[4], P = tb.v[5];
    for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < total;
         e += (int64_t)gridDim.x * blockDim.x) {{
        const int64_t g = e / (M * Kt), r = e - g * (M * Kt);
        const int64_t m = r / Kt, col = r - m * Kt;
        const int64_t c = col % Cg;
        int64_t tap = col / Cg, n = m / P, p = m - n * P;
        int64_t at = n * tb.v[6] + (g * Cg + c) * tb.v[7];
        bool inside = true;
        #pragma unroll
        for (int i = {last}; i >= 0; --i) {{
            const int64_t *a = tb.v + 8 + {PER_AXIS} * i;
            const int64_t pi = p % a[0], ki = tap % a[1];
            p /= a[0];
            tap /= a[1];
            const int64_t kk = {flip} ? a[1] - 1 - ki : ki;
            const int64_t pos = pi * a[2] - a[3] + kk * a[4];
            inside = inside && pos >= 0 && pos < a[6] && pos % a[5] == 0;
            at += (pos / a[5]) * a[7];
        }}
        cols[e] = inside ? x[at] : ({t})0;
    }}
}}
"#,
        size = 8 + PER_AXIS * dims,
        last = dims - 1,
        flip = flip as i32,
    );
    s
}

static KERNELS: KernelCache<(usize, usize, bool)> = KernelCache::new();

/// The convolution of `x` with `w` under `params`; the output is row-major `shape`.
pub fn conv(
    params: &ConvParams,
    x: &ArrayData,
    w: &ArrayData,
    shape: &[usize],
) -> Result<ArrayData> {
    let d = params.spatial();
    let (n, c) = (x.layout.shape[0], x.layout.shape[d + 1]);
    let (o, groups) = (w.layout.shape[0], params.groups.max(1));
    let (cg, og) = (c / groups, o / groups);
    let positions: usize = shape[1..=d].iter().product();
    let m = n * positions;
    let taps: usize = w.layout.shape[1..=d].iter().product();
    let kt = taps * cg;
    let out = empty(shape, x.dtype)?;
    if out.layout.size() == 0 {
        return Ok(out);
    }
    if kt == 0 {
        // No taps: every output is an empty sum.
        let bytes = out.layout.size() * x.dtype.size();
        // SAFETY: the output block holds `bytes` bytes and is only reused by later work.
        unsafe { result::memset_d8_async(out.buffer.as_ptr() as u64, 0, bytes, gpu()?.stream()?) }
            .map_err(|e| driver_error("conv", e))?;
        return Ok(out);
    }
    // The gathered matrix, (G, M, Kt).
    let cols = ArrayData {
        buffer: DEVICE.alloc(groups * m * kt * x.dtype.size())?,
        layout: Layout::contiguous(&[groups, m, kt]),
        dtype: x.dtype,
    };
    let mut table: Vec<i64> = vec![
        n as i64,
        groups as i64,
        m as i64,
        kt as i64,
        cg as i64,
        positions as i64,
        x.layout.strides[0] as i64,
        x.layout.strides[d + 1] as i64,
    ];
    for i in 0..d {
        let size = x.layout.shape[i + 1];
        let dilated = if size == 0 { 0 } else { (size - 1) * params.input_dilation[i] + 1 };
        table.extend_from_slice(&[
            shape[i + 1] as i64,
            w.layout.shape[i + 1] as i64,
            params.stride[i] as i64,
            params.padding_lo[i],
            params.kernel_dilation[i] as i64,
            params.input_dilation[i] as i64,
            dilated as i64,
            x.layout.strides[i + 1] as i64,
        ]);
    }
    let total = groups * m * kt;
    let width = x.dtype.size();
    let f =
        KERNELS.get(&(d, width, params.flip), SYMBOL, || im2col_source(d, width, params.flip))?;
    let mut args = Args::new();
    let x_ptr = device_ptr(&x.buffer, x.layout.offset as isize, width);
    args.i64(total as i64).ptr(x_ptr).ptr(cols.buffer.as_ptr() as u64).i64_struct(&table);
    launch("conv", f, blocks_for(total as u64, BLOCK as u64), BLOCK, 0, &mut args)?;
    // The weight as (G, Kt, Og): each group's (Og, Kt) rows, transposed (column-major).
    let w = contiguous(w)?;
    let weights = ArrayData {
        layout: Layout::new(
            (&[groups, kt, og][..]).into(),
            (&[(og * kt) as isize, 1, kt as isize][..]).into(),
            w.layout.offset,
        ),
        ..w
    };
    let product = crate::matmul::matmul(&cols, &weights, &[groups, m, og])?;
    if groups == 1 {
        return Ok(ArrayData { layout: Layout::contiguous(shape), ..product });
    }
    // (G, M, Og) -> (M, G, Og): each group's channels into their place in every row.
    let target = Layout::new(
        (&[groups, m, og][..]).into(),
        (&[og as isize, (groups * og) as isize, 1][..]).into(),
        0,
    );
    copy_into(&product, &out.buffer, &target)?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The variants' sources for an offline NVRTC check (`nvrtc::dump_sources`).
    #[test]
    fn dump() {
        let variants = [(1, 4, false), (2, 2, true), (3, 4, true)];
        let sources: Vec<(String, String)> = variants
            .iter()
            .map(|&(d, w, f)| (format!("im2col_{d}_{w}_{f}.cu"), im2col_source(d, w, f)))
            .collect();
        crate::nvrtc::dump_sources(&sources);
    }

    #[test]
    fn source_has_one_table_row_per_axis() {
        let s = im2col_source(2, 2, true);
        assert!(s.contains("int64_t v[24]"));
        assert!(s.contains("uint16_t"));
        assert!(s.contains("const int64_t kk = 1 ?"));
    }
}
