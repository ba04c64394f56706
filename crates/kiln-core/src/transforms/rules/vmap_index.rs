//! Batching rules of the data-dependent indexing primitives. Batched operands gain a batch
//! axis in front and the gathers/scatters an extra indexed axis addressed by `arange(B)`,
//! so one batched primitive replaces the loop.

use super::vmap::to_front;
use crate::array::Array;
use crate::ops::{self, record};
use kiln_base::{DType, Primitive, Result};

fn dims(shape: &[usize]) -> Vec<i64> {
    shape.iter().map(|&d| d as i64).collect()
}

/// `x` with its batch axis in front, or broadcast to the batch when unbatched.
fn front(x: &Array, axis: Option<usize>, b: usize) -> Result<Array> {
    match axis {
        Some(a) => to_front(x, a),
        None => {
            let mut shape = vec![b];
            shape.extend_from_slice(x.shape());
            ops::broadcast_to(&ops::expand_dims(x, &[0])?, &shape)
        }
    }
}

/// `arange(b)` along axis 0, broadcast to `shape` (whose first entry is `b`).
fn batch_index(shape: &[usize], dtype: DType) -> Result<Array> {
    let iota = ops::arange(0.0, shape[0] as f64, 1.0, dtype)?;
    let mut s = vec![1i64; shape.len()];
    s[0] = shape[0] as i64;
    ops::broadcast_to(&ops::reshape(&iota, &s)?, shape)
}

/// The batched index arrays `(B, I...)` of a gather/scatter, with the batch index first
/// when `with_batch` (the operand is batched too).
fn indices(
    idx: &[Array],
    axes: &[Option<usize>],
    b: usize,
    index_shape: &[usize],
    with_batch: bool,
) -> Result<Vec<Array>> {
    let mut shape = vec![b];
    shape.extend_from_slice(index_shape);
    let mut out = Vec::with_capacity(idx.len() + 1);
    if with_batch {
        out.push(batch_index(&shape, idx.first().map_or(DType::I32, |i| i.dtype()))?);
    }
    for (i, a) in idx.iter().zip(axes) {
        out.push(ops::broadcast_to(&front(i, *a, b)?, &shape)?);
    }
    Ok(out)
}

/// The per-entry shape of the index arrays (their batch axis removed).
fn entry_shape(idx: &[Array], axes: &[Option<usize>]) -> Vec<usize> {
    idx.first().zip(axes.first()).map_or(vec![], |(i, a)| {
        let mut s = i.shape().to_vec();
        if let Some(a) = a {
            s.remove(*a);
        }
        s
    })
}

fn batch_size(inputs: &[Array], axes: &[Option<usize>]) -> usize {
    inputs.iter().zip(axes).find_map(|(x, a)| a.map(|a| x.shape()[a])).unwrap_or(1)
}

/// The batched primitive's single output, batched on axis 0.
pub(super) fn vmap(prim: &Primitive, inputs: &[Array], axes: &[Option<usize>]) -> Result<Array> {
    let b = batch_size(inputs, axes);
    match prim {
        Primitive::Gather { axes: gaxes, slice_sizes } => {
            let idx = &inputs[1..];
            let index_shape = entry_shape(idx, &axes[1..]);
            let Some(_) = axes[0] else {
                // Shared operand: only the indices carry the batch.
                let mut ins = vec![inputs[0].clone()];
                ins.extend(indices(idx, &axes[1..], b, &index_shape, false)?);
                return record(prim.clone(), ins);
            };
            let mut ins = vec![front(&inputs[0], axes[0], b)?];
            ins.extend(indices(idx, &axes[1..], b, &index_shape, true)?);
            let new_axes = std::iter::once(0).chain(gaxes.iter().map(|a| a + 1)).collect();
            let sizes = std::iter::once(1).chain(slice_sizes.iter().copied()).collect();
            let out = record(Primitive::Gather { axes: new_axes, slice_sizes: sizes }, ins)?;
            // (B, I..., 1, slice...): drop the batch's block axis.
            ops::squeeze(&out, Some(&[1 + index_shape.len() as i64]))
        }
        Primitive::Scatter { axes: saxes, reduce } => {
            let n = inputs.len();
            let idx = &inputs[1..n - 1];
            let index_shape = entry_shape(idx, &axes[1..n - 1]);
            let mut ins = vec![front(&inputs[0], axes[0], b)?];
            ins.extend(indices(idx, &axes[1..n - 1], b, &index_shape, true)?);
            let upd = front(&inputs[n - 1], axes[n - 1], b)?;
            ins.push(ops::expand_dims(&upd, &[1 + index_shape.len() as i64])?);
            let new_axes = std::iter::once(0).chain(saxes.iter().map(|a| a + 1)).collect();
            record(Primitive::Scatter { axes: new_axes, reduce: *reduce }, ins)
        }
        Primitive::SearchSorted { right } => {
            let v = front(&inputs[1], axes[1], b)?;
            if axes[0].is_none() {
                return record(prim.clone(), vec![inputs[0].clone(), v]);
            }
            // One sorted row per entry: count the elements before each value (NaN last).
            let a = to_front(&inputs[0], axes[0].expect("batched"))?;
            let mut s = vec![b as i64];
            s.extend(std::iter::repeat_n(1, v.ndim() - 1));
            s.push(a.shape()[1] as i64);
            let a = ops::reshape(&a, &s)?;
            let v = ops::expand_dims(&v, &[-1])?;
            let v_nan = ops::isnan(&v)?;
            let before = if *right {
                ops::logical_or(&ops::less_equal(&a, &v)?, &v_nan)?
            } else {
                let not_nan = ops::logical_not(&ops::isnan(&a)?)?;
                ops::logical_or(&ops::less(&a, &v)?, &ops::logical_and(&v_nan, &not_nan)?)?
            };
            let count = ops::sum(&ops::astype(&before, DType::U32)?, Some(&[-1]), false)?;
            ops::astype(&count, DType::U32)
        }
        Primitive::MaskedScatter => {
            let x = front(&inputs[0], axes[0], b)?;
            let mask = front(&inputs[1], axes[1], b)?;
            let values = front(&inputs[2], axes[2], b)?;
            let rows = values.shape()[1];
            let m = super::indexing::mask_like(&mask, &x)?;
            if rows == 0 {
                return Ok(x); // nothing to fill from: the mask selects nothing
            }
            // Each entry fills from its own rows: rank of each position within its entry.
            let flat = ops::astype(&ops::reshape(&mask, &[b as i64, -1])?, DType::I32)?;
            let rank = ops::cumsum(&flat, Some(1), false, false)?;
            let rank = ops::reshape(&rank, &dims(mask.shape()))?;
            let ins = vec![values.clone(), batch_index(mask.shape(), DType::I32)?, rank];
            let mut sizes = vec![1, 1];
            sizes.extend_from_slice(&values.shape()[2..]);
            let picked =
                record(Primitive::Gather { axes: vec![0, 1], slice_sizes: sizes.into() }, ins)?;
            let picked = ops::reshape(&picked, &dims(x.shape()))?;
            ops::where_(&m, &picked, &x)
        }
        Primitive::AsStrided { shape, strides, offset } => {
            // Entry `e` reads the row-major elements `e * size ..` of the batch-first input.
            let x = front(&inputs[0], axes[0], b)?;
            let per = x.size() / b.max(1);
            let prim = Primitive::AsStrided {
                shape: std::iter::once(b).chain(shape.iter().copied()).collect(),
                strides: std::iter::once(per as isize).chain(strides.iter().copied()).collect(),
                offset: *offset,
            };
            record(prim, vec![x])
        }
        _ => unreachable!("dispatched by class"),
    }
}
