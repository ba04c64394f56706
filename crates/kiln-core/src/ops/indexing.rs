//! Indexing ops: gather/scatter with index arrays (take, take_along_axis, put_along_axis, the
//! scatter family behind `x.at[...]`), slices at positions held in an array (`mx.slice`,
//! `mx.slice_update`), and reinterpreting views (`view`, `as_strided`).
//!
//! Out-of-range index values are data, only seen at eval: gathers clamp them into range and
//! scatters drop their updates (MLX leaves both undefined); negative values count from the
//! end once, as in MLX.

use super::{
    add, arange, astype, broadcast_to, greater_equal, maximum, minimum, record, reshape, scalar,
    transpose, where_, zeros,
};
use crate::array::Array;
use kiln_base::shape::{broadcast_shapes, fmt_shape, normalize_axis, row_major_strides, Shape};
use kiln_base::{bail, ensure, DType, Primitive, Result, Scalar, ScatterReduce, Strides};

/// Checks that `x` can index: integer dtype (bool and floats are rejected as MLX does).
pub(crate) fn check_index_dtype(op: &'static str, x: &Array) -> Result<()> {
    ensure!(
        x.dtype() != DType::Bool,
        Value,
        op,
        "Boolean indices are not supported, got an index array of dtype bool."
    );
    ensure!(
        x.dtype().is_integer(),
        Value,
        op,
        "Got indices with invalid dtype {}. Indices must be integral.",
        x.dtype()
    );
    Ok(())
}

/// Broadcasts index arrays to one shape (numpy's rules).
pub(crate) fn broadcast_indices(
    op: &'static str,
    indices: &[Array],
) -> Result<(Vec<Array>, Shape)> {
    let mut shape = Shape::new();
    for idx in indices {
        check_index_dtype(op, idx)?;
        shape = broadcast_shapes(op, &shape, idx.shape())?;
    }
    let out = indices.iter().map(|i| broadcast_to(i, &shape)).collect::<Result<_>>()?;
    Ok((out, shape))
}

/// Normalised, unique axes with their index arrays, ordered by axis (the primitives want
/// sorted axes).
fn sorted_axes(
    op: &'static str,
    axes: &[i64],
    indices: Vec<Array>,
    ndim: usize,
) -> Result<(Vec<usize>, Vec<Array>)> {
    ensure!(
        axes.len() == indices.len(),
        Value,
        op,
        "Got {} index arrays for {} axes.",
        indices.len(),
        axes.len()
    );
    let mut pairs: Vec<(usize, Array)> = axes
        .iter()
        .map(|&a| normalize_axis(op, a, ndim))
        .zip(indices)
        .map(|(a, i)| a.map(|a| (a, i)))
        .collect::<Result<_>>()?;
    pairs.sort_by_key(|p| p.0);
    ensure!(pairs.windows(2).all(|w| w[0].0 != w[1].0), Value, op, "Repeated axes in {axes:?}.");
    Ok(pairs.into_iter().unzip())
}

/// MLX's `gather`: for each position of the (broadcast) index arrays, the block of
/// `slice_sizes` of `x` that starts at the indexed positions on `axes` (0 elsewhere).
/// Output shape: index shape ++ `slice_sizes`.
pub fn gather(x: &Array, indices: &[Array], axes: &[i64], slice_sizes: &[usize]) -> Result<Array> {
    let op = "gather";
    let (indices, _) = broadcast_indices(op, indices)?;
    let (axes, indices) = sorted_axes(op, axes, indices, x.ndim())?;
    let mut inputs = vec![x.clone()];
    inputs.extend(indices);
    record(Primitive::Gather { axes, slice_sizes: slice_sizes.into() }, inputs)
}

/// MLX's `scatter` family: `x` with `updates` (index shape ++ block shape, cast to x's
/// dtype) combined in at the indexed positions. Duplicate indices accumulate for the
/// reductions; for `None` the last one wins.
pub fn scatter_reduce(
    x: &Array,
    indices: &[Array],
    updates: &Array,
    axes: &[i64],
    reduce: ScatterReduce,
) -> Result<Array> {
    let op = Primitive::Scatter { axes: vec![], reduce }.name();
    let (indices, idx_shape) = broadcast_indices(op, indices)?;
    let (axes, indices) = sorted_axes(op, axes, indices, x.ndim())?;
    ensure!(
        updates.ndim() == idx_shape.len() + x.ndim(),
        Value,
        op,
        "Updates of shape {} must have {} dimensions (indices {} then one per input axis).",
        fmt_shape(updates.shape()),
        idx_shape.len() + x.ndim(),
        fmt_shape(&idx_shape)
    );
    let mut upd_shape = idx_shape.clone();
    upd_shape.extend_from_slice(&updates.shape()[idx_shape.len()..]);
    let updates = broadcast_to(&astype(updates, x.dtype())?, &upd_shape)?;
    let mut inputs = vec![x.clone()];
    inputs.extend(indices);
    inputs.push(updates);
    record(Primitive::Scatter { axes, reduce }, inputs)
}

/// `scatter_reduce` replacing elements.
pub fn scatter(x: &Array, indices: &[Array], updates: &Array, axes: &[i64]) -> Result<Array> {
    scatter_reduce(x, indices, updates, axes, ScatterReduce::None)
}

/// `scatter_reduce` adding (duplicates accumulate, as `np.add.at`).
pub fn scatter_add(x: &Array, indices: &[Array], updates: &Array, axes: &[i64]) -> Result<Array> {
    scatter_reduce(x, indices, updates, axes, ScatterReduce::Add)
}

/// An int64 `arange(n)` shaped to lie along axis `at` of an `ndim`-d array.
fn iota_along(n: usize, at: usize, ndim: usize) -> Result<Array> {
    let r = arange(0.0, n as f64, 1.0, DType::I64)?;
    let shape: Vec<i64> = (0..ndim).map(|d| if d == at { n as i64 } else { 1 }).collect();
    reshape(&r, &shape)
}

/// Elements along `axis` (of the flattened array when `None`) at integer `indices` of any
/// shape; the indices' dims replace the axis.
pub fn take(x: &Array, indices: &Array, axis: Option<i64>) -> Result<Array> {
    let op = "take";
    check_index_dtype(op, indices)?;
    let (x, axis) = match axis {
        None => (reshape(x, &[-1])?, 0),
        Some(a) => {
            ensure!(
                a >= -(x.ndim() as i64) && a < x.ndim() as i64,
                Index,
                op,
                "Received invalid axis {a} for array with {} dimensions.",
                x.ndim()
            );
            (x.clone(), normalize_axis(op, a, x.ndim())?)
        }
    };
    let s = x.shape();
    let k = indices.ndim();
    let mut out: Vec<usize> = s[..axis].to_vec();
    out.extend_from_slice(indices.shape());
    out.extend_from_slice(&s[axis + 1..]);
    if out.contains(&0) {
        ensure!(
            s[axis] > 0 || indices.size() == 0,
            Value,
            op,
            "Cannot do a non-empty take from an empty axis."
        );
        return zeros(&out, x.dtype());
    }
    ensure!(s[axis] > 0, Value, op, "Cannot do a non-empty take from an empty axis.");
    let mut sizes = Shape::from(s);
    sizes[axis] = 1;
    let g = record(
        Primitive::Gather { axes: vec![axis], slice_sizes: sizes },
        vec![x.clone(), indices.clone()],
    )?;
    // (idx..., s[..axis], 1, s[axis+1..]) -> (s[..axis], idx..., s[axis+1..])
    let mut flat: Vec<i64> = indices.shape().iter().map(|&d| d as i64).collect();
    flat.extend(s.iter().enumerate().filter(|&(d, _)| d != axis).map(|(_, &d)| d as i64));
    let g = reshape(&g, &flat)?;
    let perm: Vec<i64> =
        (k..k + axis).chain(0..k).chain(k + axis..k + s.len() - 1).map(|d| d as i64).collect();
    transpose(&g, Some(&perm))
}

/// The shared checks of take/put_along_axis: the array and axis to work on (flattened when
/// `axis` is None) and the broadcast shape of the non-axis dims.
fn along_axis(
    op: &'static str,
    x: &Array,
    indices: &Array,
    axis: Option<i64>,
) -> Result<(Array, usize)> {
    check_index_dtype(op, indices)?;
    let (x, axis) = match axis {
        None => (reshape(x, &[-1])?, 0),
        Some(a) => (x.clone(), normalize_axis(op, a, x.ndim())?),
    };
    ensure!(
        indices.ndim() == x.ndim(),
        Value,
        op,
        "Indices of dimension {} does not match array of dimension {}.",
        indices.ndim(),
        x.ndim()
    );
    Ok((x, axis))
}

/// One index array per axis for a Gather/Scatter over every axis of an array of `shape`:
/// `indices` on `axis`, a broadcast `arange` on the others.
fn all_axis_indices(indices: &Array, axis: usize, shape: &[usize]) -> Result<Vec<Array>> {
    (0..shape.len())
        .map(|d| {
            let i = if d == axis { indices.clone() } else { iota_along(shape[d], d, shape.len())? };
            broadcast_to(&i, shape)
        })
        .collect()
}

/// `out[..., i, ...] = x[..., indices[..., i, ...], ...]` along `axis` (numpy's
/// `take_along_axis`: the other dims broadcast).
pub fn take_along_axis(x: &Array, indices: &Array, axis: Option<i64>) -> Result<Array> {
    let op = "take_along_axis";
    let (x, axis) = along_axis(op, x, indices, axis)?;
    let n = x.ndim();
    let mut xs = Shape::from(x.shape());
    xs[axis] = 1;
    let mut shape = broadcast_shapes(op, &xs, indices.shape())?;
    shape[axis] = indices.shape()[axis];
    let mut x_shape = shape.clone();
    x_shape[axis] = x.shape()[axis];
    if shape.contains(&0) {
        return zeros(&shape, x.dtype());
    }
    ensure!(x.shape()[axis] > 0, Value, op, "Cannot do a non-empty take from an empty axis.");
    let x = broadcast_to(&x, &x_shape)?;
    let mut inputs = vec![x.clone()];
    inputs.extend(all_axis_indices(indices, axis, &shape)?);
    let prim = Primitive::Gather { axes: (0..n).collect(), slice_sizes: vec![1; n].into() };
    let g = record(prim, inputs)?;
    let shape: Vec<i64> = shape.iter().map(|&d| d as i64).collect();
    reshape(&g, &shape)
}

/// `x` with `values` written along `axis` at `indices` (MLX's `put_along_axis`: indices and
/// values broadcast together, then over x's other dims; the last duplicate wins).
pub fn put_along_axis(
    x: &Array,
    indices: &Array,
    values: &Array,
    axis: Option<i64>,
) -> Result<Array> {
    let op = "put_along_axis";
    let (flat, axis) = along_axis(op, x, indices, axis)?;
    let n = flat.ndim();
    let mut shape = broadcast_shapes(op, indices.shape(), values.shape())?;
    ensure!(
        shape.len() == n,
        Value,
        op,
        "Values of shape {} do not broadcast with indices of shape {}.",
        fmt_shape(values.shape()),
        fmt_shape(indices.shape())
    );
    for d in (0..n).filter(|&d| d != axis) {
        let (t, a) = (shape[d], flat.shape()[d]);
        ensure!(
            t == a || t == 1,
            Value,
            op,
            "Indices and values of shape {} do not fit an array of shape {}.",
            fmt_shape(&shape),
            fmt_shape(flat.shape())
        );
        shape[d] = a;
    }
    let values = broadcast_to(&astype(values, x.dtype())?, &shape)?;
    let out = if shape.contains(&0) {
        flat
    } else {
        let mut inputs = vec![flat];
        let indices = broadcast_to(indices, &shape)?;
        inputs.extend(all_axis_indices(&indices, axis, &shape)?);
        let mut upd: Vec<i64> = shape.iter().map(|&d| d as i64).collect();
        upd.extend(std::iter::repeat_n(1, n));
        inputs.push(reshape(&values, &upd)?);
        let axes = (0..n).collect();
        record(Primitive::Scatter { axes, reduce: ScatterReduce::None }, inputs)?
    };
    let back: Vec<i64> = x.shape().iter().map(|&d| d as i64).collect();
    reshape(&out, &back)
}

/// The start positions of a slice held in an array: ints of ndim <= 1, one per axis.
fn dynamic_starts(
    op: &'static str,
    x: &Array,
    start: &Array,
    axes: &[i64],
) -> Result<(Vec<usize>, Vec<Array>)> {
    ensure!(
        start.dtype().is_integer(),
        Value,
        op,
        "Start indices must be integers, got type {}.",
        start.dtype()
    );
    ensure!(
        start.ndim() <= 1,
        Value,
        op,
        "array of starting indices must be zero or one dimensional but has dimension {}.",
        start.ndim()
    );
    ensure!(
        start.size() == axes.len(),
        Value,
        op,
        "Number of starting indices {} does not match number of axes {}.",
        start.size(),
        axes.len()
    );
    let mut norm = Vec::with_capacity(axes.len());
    for &a in axes {
        ensure!(
            a >= -(x.ndim() as i64) && a < x.ndim() as i64,
            Index,
            op,
            "Invalid axis {a} for array with dimension {}.",
            x.ndim()
        );
        let a = normalize_axis(op, a, x.ndim())?;
        ensure!(!norm.contains(&a), Value, op, "Repeat axes not allowed.");
        norm.push(a);
    }
    let flat = reshape(start, &[-1])?;
    let starts = (0..axes.len())
        .map(|j| {
            let s = super::slice(&flat, &[Some(j as i64)], &[Some(j as i64 + 1)], &[1])?;
            reshape(&astype(&s, DType::I64)?, &[])
        })
        .collect::<Result<Vec<_>>>()?;
    Ok((norm, starts))
}

/// MLX's `mx.slice`: the block of `slice_size` (one size per axis of `x`) starting at
/// `start` (an int array, one entry per axis in `axes`; 0 on the others). Starts are
/// clamped so the block fits.
pub fn slice_dynamic(x: &Array, start: &Array, axes: &[i64], slice_size: &[i64]) -> Result<Array> {
    let op = "slice";
    let (axes, starts) = dynamic_starts(op, x, start, axes)?;
    let ok = slice_size.len() == x.ndim()
        && slice_size.iter().zip(x.shape()).all(|(&s, &d)| s >= 0 && s as u64 <= d as u64);
    ensure!(
        ok,
        Value,
        op,
        "Invalid slice size {slice_size:?} for array with shape {}.",
        fmt_shape(x.shape())
    );
    let sizes: Vec<usize> = slice_size.iter().map(|&s| s as usize).collect();
    let axes: Vec<i64> = axes.iter().map(|&a| a as i64).collect();
    gather(x, &starts, &axes, &sizes)
}

/// A start clamped so a block of `size` fits in `dim` (after counting negatives from the
/// end), in the graph.
fn clamp_start(start: &Array, dim: usize, size: usize) -> Result<Array> {
    let zero = scalar(Scalar::Int(0), DType::I64)?;
    let wrapped = add(start, &scalar(Scalar::Int(dim as i64), DType::I64)?)?;
    let s = where_(&greater_equal(start, &zero)?, start, &wrapped)?;
    minimum(&maximum(&s, &zero)?, &scalar(Scalar::Int((dim - size) as i64), DType::I64)?)
}

/// MLX's `mx.slice_update`: `x` with the block at `start` (as in `slice_dynamic`; starts are
/// clamped so `update` fits) replaced by `update` (cast to x's dtype, leading dims of size 1
/// added).
pub fn slice_update_dynamic(
    x: &Array,
    update: &Array,
    start: &Array,
    axes: &[i64],
) -> Result<Array> {
    let op = "slice_update";
    let (axes, starts) = dynamic_starts(op, x, start, axes)?;
    let n = x.ndim();
    ensure!(
        update.ndim() <= n,
        Value,
        op,
        "Update of shape {} has more dimensions than the array of shape {}.",
        fmt_shape(update.shape()),
        fmt_shape(x.shape())
    );
    let mut block = vec![1usize; n - update.ndim()];
    block.extend_from_slice(update.shape());
    ensure!(
        block.iter().zip(x.shape()).all(|(&b, &d)| b <= d),
        Value,
        op,
        "Update of shape {} does not fit in the array of shape {}.",
        fmt_shape(update.shape()),
        fmt_shape(x.shape())
    );
    if block.contains(&0) {
        return Ok(x.clone());
    }
    let starts = axes
        .iter()
        .zip(&starts)
        .map(|(&a, s)| clamp_start(s, x.shape()[a], block[a]))
        .collect::<Result<Vec<_>>>()?;
    let block: Vec<i64> = block.iter().map(|&b| b as i64).collect();
    let update = reshape(&astype(update, x.dtype())?, &block)?;
    let axes: Vec<i64> = axes.iter().map(|&a| a as i64).collect();
    scatter(x, &starts, &update, &axes)
}

/// The bytes of `x` (row-major) as `dtype`; the last axis rescales when the sizes differ.
pub fn view(x: &Array, dtype: DType) -> Result<Array> {
    if x.dtype() == dtype {
        return Ok(x.clone());
    }
    record(Primitive::View(dtype), vec![x.clone()])
}

/// A strided view of the row-major elements of `x` (default shape: x's; default strides:
/// row-major for the shape). Every addressed element must lie inside `x`.
pub fn as_strided(
    x: &Array,
    shape: Option<&[usize]>,
    strides: Option<&[i64]>,
    offset: i64,
) -> Result<Array> {
    let op = "as_strided";
    ensure!(offset >= 0, Value, op, "Offset must be non-negative, got {offset}.");
    let shape: Shape = shape.unwrap_or(x.shape()).into();
    let strides: Strides = match strides {
        None => row_major_strides(&shape),
        Some(s) => {
            let mut out = Strides::new();
            for &v in s {
                let Ok(v) = isize::try_from(v) else {
                    bail!(Value, op, "Stride {v} is too large.")
                };
                out.push(v);
            }
            out
        }
    };
    let prim = Primitive::AsStrided { shape, strides, offset: offset as usize };
    record(prim, vec![x.clone()])
}

/// MLX's boolean-mask assignment `x[mask] = values`. `mask` has the shape of x's leading
/// dims. `values` with at most as many dims as the rest of x is broadcast to every selected
/// row; otherwise its rows (axis 0) fill the selected positions in row-major order (running
/// out of rows is an error at eval, as in MLX).
pub fn masked_scatter(x: &Array, mask: &Array, values: &Array) -> Result<Array> {
    let op = "masked_scatter";
    ensure!(mask.dtype() == DType::Bool, Type, op, "The mask must be a bool array.");
    let k = mask.ndim();
    ensure!(
        k <= x.ndim() && mask.shape() == &x.shape()[..k],
        Value,
        op,
        "The boolean mask should have the same shape as the beginning of the indexed array \
         but the mask has shape {} and the array has shape {}.",
        fmt_shape(mask.shape()),
        fmt_shape(x.shape())
    );
    let rest = &x.shape()[k..];
    let values = astype(values, x.dtype())?;
    let (rows, row_shape) = if values.ndim() <= rest.len() {
        (mask.size(), values.shape())
    } else {
        (values.shape()[0], &values.shape()[1..])
    };
    let fits = broadcast_shapes(op, row_shape, rest).is_ok_and(|s| s.as_slice() == rest);
    ensure!(
        fits,
        Value,
        op,
        "Value array shape must be broadcastable with the last {} dimensions of the input.",
        rest.len()
    );
    let mut lead: Vec<i64> = vec![if values.ndim() <= rest.len() { 1 } else { rows as i64 }];
    lead.extend(std::iter::repeat_n(1, rest.len() - row_shape.len()));
    lead.extend(row_shape.iter().map(|&d| d as i64));
    let mut shape = vec![rows];
    shape.extend_from_slice(rest);
    let values = broadcast_to(&reshape(&values, &lead)?, &shape)?;
    record(Primitive::MaskedScatter, vec![x.clone(), mask.clone(), values])
}
