//! Sorting ops: sort, argsort, partition, argpartition, topk, searchsorted. `axis: None`
//! works on the flattened array, as MLX. Floats order NaN last.

use super::{astype, record, reshape, slice};
use crate::array::Array;
use kiln_base::shape::{fmt_shape, normalize_axis};
use kiln_base::{ensure, Primitive, Result};

/// The array to work on and the normalised axis (flattened when `axis` is `None`).
fn along(op: &'static str, x: &Array, axis: Option<i64>) -> Result<(Array, usize)> {
    match axis {
        None => Ok((reshape(x, &[-1])?, 0)),
        Some(a) => Ok((x.clone(), normalize_axis(op, a, x.ndim())?)),
    }
}

fn sort_impl(x: &Array, axis: Option<i64>, arg: bool) -> Result<Array> {
    let name = Primitive::Sort { axis: 0, arg }.name();
    let (x, axis) = along(name, x, axis)?;
    record(Primitive::Sort { axis, arg }, vec![x])
}

/// A stably sorted copy along `axis` (-1 in MLX's signature; `None` flattens).
pub fn sort(x: &Array, axis: Option<i64>) -> Result<Array> {
    sort_impl(x, axis, false)
}

/// The uint32 indices that stably sort along `axis`.
pub fn argsort(x: &Array, axis: Option<i64>) -> Result<Array> {
    sort_impl(x, axis, true)
}

fn partition_impl(x: &Array, kth: i64, axis: Option<i64>, arg: bool) -> Result<Array> {
    let op = Primitive::Partition { kth: 0, axis: 0, arg }.name();
    let (x, ax) = along(op, x, axis)?;
    let n = x.shape()[ax] as i64;
    let k = if kth < 0 { kth + n } else { kth };
    ensure!(
        (0..n).contains(&k),
        Value,
        op,
        "Received invalid kth {kth} along axis {} for array with shape {}.",
        axis.unwrap_or(0),
        fmt_shape(x.shape())
    );
    record(Primitive::Partition { kth: k as usize, axis: ax, arg }, vec![x])
}

/// A copy with the element of sorted rank `kth` (negative counts from the end) in place,
/// no greater element before it and no smaller one after; otherwise in no set order.
pub fn partition(x: &Array, kth: i64, axis: Option<i64>) -> Result<Array> {
    partition_impl(x, kth, axis, false)
}

/// The uint32 indices that partition along `axis` (see `partition`).
pub fn argpartition(x: &Array, kth: i64, axis: Option<i64>) -> Result<Array> {
    partition_impl(x, kth, axis, true)
}

/// The `k` largest elements along `axis`, in ascending order (MLX leaves their order
/// unspecified; this is one of its valid orders).
pub fn topk(x: &Array, k: i64, axis: Option<i64>) -> Result<Array> {
    let op = "topk";
    let (x, ax) = along(op, x, axis)?;
    let n = x.shape()[ax];
    ensure!(
        (0..=n as i64).contains(&k),
        Value,
        op,
        "Received invalid k={k} along axis {} for array with shape {}.",
        axis.unwrap_or(0),
        fmt_shape(x.shape())
    );
    let k = k as usize;
    if k == n {
        return sort(&x, Some(ax as i64));
    }
    // The last k after a partition at n - k are the largest; only they get sorted.
    let top = if k == 0 { x } else { partition(&x, (n - k) as i64, Some(ax as i64))? };
    let mut starts = vec![None; ax + 1];
    starts[ax] = Some((n - k) as i64);
    let top = slice(&top, &starts, &vec![None; ax + 1], &vec![1; ax + 1])?;
    if k <= 1 {
        return Ok(top);
    }
    sort(&top, Some(ax as i64))
}

/// For each of `values`, the uint32 index at which inserting it keeps the 1-d `sorted`
/// sorted: before equal elements, or after them when `right`. Compared in the promoted
/// dtype, NaN last.
pub fn searchsorted(sorted: &Array, values: &Array, right: bool) -> Result<Array> {
    let op = "searchsorted";
    ensure!(
        sorted.ndim() == 1,
        Value,
        op,
        "The sorted sequence must be 1-D but has {} dimensions.",
        sorted.ndim()
    );
    let dtype = sorted.dtype().promote(values.dtype());
    record(Primitive::SearchSorted { right }, vec![astype(sorted, dtype)?, astype(values, dtype)?])
}
