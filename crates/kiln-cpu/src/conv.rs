//! N-d convolution, channels last, as im2col + one faer matrix product per batch element and
//! group: each output position's receptive field (zeros where it falls on padding or between
//! dilated input elements) becomes a row, and the rows times the group's weights (as columns)
//! are the output channels. f16/bf16 compute in f32 and round once.

use crate::element::Element;
use crate::matmul::{Gemm, PARALLEL_FLOPS};
use crate::strided::{dense, output};
use faer::{MatMut, MatRef, Par};
use half::{bf16, f16};
use kiln_base::shape::size_of;
use kiln_base::{bail, ArrayData, ConvParams, DType, Result};

/// At most this many elements of patch rows are materialised at once.
const PATCH_ELEMENTS: usize = 1 << 22;

pub(crate) fn conv(
    p: &ConvParams,
    x: &ArrayData,
    w: &ArrayData,
    shape: &[usize],
) -> Result<ArrayData> {
    match x.dtype {
        DType::F32 => native::<f32>(p, x, w, shape),
        DType::F64 => native::<f64>(p, x, w, shape),
        DType::F16 => widened::<f16>(p, x, w, shape),
        DType::BF16 => widened::<bf16>(p, x, w, shape),
        d => bail!(Type, "conv", "The CPU backend does not support convolution on {d}."),
    }
}

fn native<T: Gemm>(
    p: &ConvParams,
    x: &ArrayData,
    w: &ArrayData,
    shape: &[usize],
) -> Result<ArrayData> {
    let (xs, ws) = (dense::<T>(x), dense::<T>(w));
    let geo = Geometry::new(p, &x.layout.shape, &w.layout.shape, shape);
    output::<T>("conv", shape, |out| {
        geo.run(&xs, &ws, out);
        Ok(())
    })
}

fn widened<T: Element<Acc = f32>>(
    p: &ConvParams,
    x: &ArrayData,
    w: &ArrayData,
    shape: &[usize],
) -> Result<ArrayData> {
    let widen = |a: &ArrayData| -> Vec<f32> { dense::<T>(a).iter().map(|v| v.to_acc()).collect() };
    let (xs, ws) = (widen(x), widen(w));
    let geo = Geometry::new(p, &x.layout.shape, &w.layout.shape, shape);
    let mut acc = vec![0f32; size_of(shape)];
    geo.run(&xs, &ws, &mut acc);
    output::<T>("conv", shape, |out| {
        for (o, &v) in out.iter_mut().zip(&acc) {
            *o = T::from_acc(v);
        }
        Ok(())
    })
}

/// Sizes of one convolution and, per spatial axis, which input element each (output
/// position, kernel tap) pair reads.
struct Geometry {
    batch: usize,
    channels: usize,
    groups: usize,
    group_in: usize,
    group_out: usize,
    out_channels: usize,
    in_spatial: Vec<usize>,
    out_spatial: Vec<usize>,
    kernel: Vec<usize>,
    /// `taps[i][o * kernel[i] + k]`: input index on axis `i` read by output position `o`
    /// through weight tap `k`, or `None` on padding / dilation holes.
    taps: Vec<Vec<Option<usize>>>,
}

impl Geometry {
    fn new(p: &ConvParams, input: &[usize], weight: &[usize], out: &[usize]) -> Geometry {
        let d = p.spatial();
        let mut taps = Vec::with_capacity(d);
        for i in 0..d {
            let (size, k_len, o_len) = (input[i + 1], weight[i + 1], out[i + 1]);
            let dilated =
                if size == 0 { 0 } else { (size as i128 - 1) * p.input_dilation[i] as i128 + 1 };
            let mut t = Vec::with_capacity(o_len * k_len);
            for o in 0..o_len {
                for k in 0..k_len {
                    // Flipping reverses which weight tap meets which input position.
                    let tap = if p.flip { k_len - 1 - k } else { k };
                    let pos = o as i128 * p.stride[i] as i128
                        + tap as i128 * p.kernel_dilation[i] as i128
                        - p.padding_lo[i] as i128;
                    let step = p.input_dilation[i] as i128;
                    let hit = pos >= 0 && pos < dilated && pos % step == 0;
                    t.push(hit.then(|| (pos / step) as usize));
                }
            }
            taps.push(t);
        }
        Geometry {
            batch: input[0],
            channels: input[d + 1],
            groups: p.groups,
            group_in: weight[d + 1],
            group_out: weight[0] / p.groups,
            out_channels: weight[0],
            in_spatial: input[1..=d].to_vec(),
            out_spatial: out[1..=d].to_vec(),
            kernel: weight[1..=d].to_vec(),
            taps,
        }
    }

    /// Writes the row-major output `(N, out..., C_out)` into `out` (zeroed by the caller).
    fn run<T: Gemm>(&self, x: &[T], w: &[T], out: &mut [T]) {
        let positions = size_of(&self.out_spatial);
        let taps = size_of(&self.kernel);
        let cols = taps * self.group_in;
        if out.is_empty() || cols == 0 {
            return; // an empty sum is zero
        }
        let in_size = size_of(&self.in_spatial) * self.channels;
        let chunk = (PATCH_ELEMENTS / cols).clamp(1, positions);
        let flops = positions * cols * self.group_out;
        let par = if flops >= PARALLEL_FLOPS { Par::rayon(0) } else { Par::Seq };
        let mut patches = vec![T::default(); chunk * cols];
        for n in 0..self.batch {
            let image = &x[n * in_size..(n + 1) * in_size];
            let dst = &mut out
                [n * positions * self.out_channels..(n + 1) * positions * self.out_channels];
            for g in 0..self.groups {
                let weights = &w[g * self.group_out * cols..(g + 1) * self.group_out * cols];
                let wt = MatRef::from_row_major_slice(weights, self.group_out, cols).transpose();
                for first in (0..positions).step_by(chunk) {
                    let rows = chunk.min(positions - first);
                    let block = &mut patches[..rows * cols];
                    self.fill_patches(image, g, first, rows, block);
                    let a = MatRef::from_row_major_slice(block, rows, cols);
                    let all = MatMut::from_row_major_slice_mut(dst, positions, self.out_channels);
                    let target = all.submatrix_mut(first, g * self.group_out, rows, self.group_out);
                    T::gemm(target, a, wt, par);
                }
            }
        }
    }

    /// Patch rows for output positions `first..first + rows` of one image and group.
    fn fill_patches<T: Gemm>(
        &self,
        image: &[T],
        g: usize,
        first: usize,
        rows: usize,
        block: &mut [T],
    ) {
        let d = self.kernel.len();
        let taps = size_of(&self.kernel);
        let cg = self.group_in;
        let mut out_idx = vec![0usize; d];
        let mut k_idx = vec![0usize; d];
        for (r, row) in block.chunks_mut(taps * cg).enumerate().take(rows) {
            unravel(first + r, &self.out_spatial, &mut out_idx);
            for (t, cell) in row.chunks_mut(cg).enumerate() {
                unravel(t, &self.kernel, &mut k_idx);
                let mut offset = Some(0usize);
                for i in 0..d {
                    offset = match (offset, self.taps[i][out_idx[i] * self.kernel[i] + k_idx[i]]) {
                        (Some(off), Some(pos)) => Some(off * self.in_spatial[i] + pos),
                        _ => None,
                    };
                }
                match offset {
                    Some(off) => {
                        let start = off * self.channels + g * cg;
                        cell.copy_from_slice(&image[start..start + cg]);
                    }
                    None => cell.fill(T::default()),
                }
            }
        }
    }
}

/// Row-major multi-index of `flat` within `dims`.
fn unravel(mut flat: usize, dims: &[usize], idx: &mut [usize]) {
    for (i, &d) in dims.iter().enumerate().rev() {
        idx[i] = flat % d;
        flat /= d;
    }
}
