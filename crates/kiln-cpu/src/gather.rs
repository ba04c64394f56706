//! Gather: blocks of the input at indexed positions. Also the index helpers scatter shares:
//! index arrays of any integer dtype and layout read as i64, and the clamping rule.

use crate::element::dispatch_bits;
use crate::strided::{map1, output};
use kiln_base::shape::size_of;
use kiln_base::{bail, ArrayData, DType, Result};

/// The elements of an integer index array in row-major order, as i64 (uint64 values past
/// i64::MAX saturate: they are out of bounds either way).
pub(crate) fn index_values(op: &'static str, x: &ArrayData) -> Result<Vec<i64>> {
    let mut out = vec![0i64; x.layout.size()];
    match x.dtype {
        DType::I8 => map1(x, &mut out, |v: i8| v as i64),
        DType::I16 => map1(x, &mut out, |v: i16| v as i64),
        DType::I32 => map1(x, &mut out, |v: i32| v as i64),
        DType::I64 => map1(x, &mut out, |v: i64| v),
        DType::U8 => map1(x, &mut out, |v: u8| v as i64),
        DType::U16 => map1(x, &mut out, |v: u16| v as i64),
        DType::U32 => map1(x, &mut out, |v: u32| v as i64),
        DType::U64 => map1(x, &mut out, |v: u64| i64::try_from(v).unwrap_or(i64::MAX)),
        other => bail!(Value, op, "Indices must be integral, got {other}."),
    }
    Ok(out)
}

/// An index counted from the end when negative (as MLX and numpy do, once).
fn wrap(index: i64, dim: usize) -> i128 {
    let i = index as i128;
    if i < 0 {
        i + dim as i128
    } else {
        i
    }
}

/// Gather's start of a block of `size` on an axis of `dim`: wrapped, then clamped so the
/// block fits (never a read out of bounds; MLX leaves out-of-range indices undefined).
pub(crate) fn clamped_start(index: i64, dim: usize, size: usize) -> usize {
    wrap(index, dim).clamp(0, (dim - size) as i128) as usize
}

/// Scatter's start of a block: wrapped, or `None` when the block would not fit (the
/// update is dropped).
pub(crate) fn checked_start(index: i64, dim: usize, size: usize) -> Option<usize> {
    let i = wrap(index, dim);
    (i >= 0 && i <= (dim - size) as i128).then_some(i as usize)
}

/// Element offsets (relative to the block's first element) of a block of `sizes` under
/// `strides`, in row-major order.
pub(crate) fn block_offsets(sizes: &[usize], strides: &[isize]) -> Vec<isize> {
    let mut offsets = Vec::with_capacity(size_of(sizes));
    if size_of(sizes) == 0 {
        return offsets;
    }
    let mut index = vec![0usize; sizes.len()];
    let mut pos = 0isize;
    loop {
        offsets.push(pos);
        let mut ax = sizes.len();
        loop {
            if ax == 0 {
                return offsets;
            }
            ax -= 1;
            index[ax] += 1;
            pos += strides[ax];
            if index[ax] < sizes[ax] {
                break;
            }
            pos -= strides[ax] * sizes[ax] as isize;
            index[ax] = 0;
        }
    }
}

/// `out[i, ...] = src[block at (idx_0[i], ..., idx_k[i]) on axes]`.
pub(crate) fn gather(
    axes: &[usize],
    slice_sizes: &[usize],
    inputs: &[ArrayData],
    shape: &[usize],
) -> Result<ArrayData> {
    let op = "gather";
    let src = &inputs[0];
    let l = &src.layout;
    let idx = inputs[1..].iter().map(|x| index_values(op, x)).collect::<Result<Vec<_>>>()?;
    let block = block_offsets(slice_sizes, &l.strides);
    dispatch_bits!(src.dtype, T => {
        let data = src.buffer.host_slice::<T>();
        let mut out = output::<T>(op, shape, |out| {
            if block.is_empty() {
                return Ok(());
            }
            for (i, chunk) in out.chunks_mut(block.len()).enumerate() {
                let mut base = l.offset as isize;
                for (j, &ax) in axes.iter().enumerate() {
                    let start = clamped_start(idx[j][i], l.shape[ax], slice_sizes[ax]);
                    base += start as isize * l.strides[ax];
                }
                // In bounds: the block fits at a clamped start inside a validated layout.
                for (o, &off) in chunk.iter_mut().zip(&block) {
                    *o = data[(base + off) as usize];
                }
            }
            Ok(())
        })?;
        out.dtype = src.dtype;
        Ok(out)
    })
}
