//! Gradients of cumulative ops and of sort/partition values.
//!
//! A scan that runs in reverse or excludes the current element is the inclusive forward scan
//! of the flipped input, shifted by one: the rules undo the flip and the shift around the
//! inclusive forward rule, so each op has one rule:
//! - sum: linear (the cotangent's reverse cumsum);
//! - prod: `y / x_i` before the first zero, the product without that zero at the first zero,
//!   nothing after it (exact with zeros);
//! - max/min: each output is one input element (the last record so far): a gather, whose
//!   vjp scatters back;
//! - logaddexp: `dy_j / dx_i = exp(x_i - y_j)` for `i <= j`.
//!
//! Sort and partition permute: their values are a gather through `argsort`/`argpartition`.

use crate::array::Array;
use crate::ops::{self, record};
use kiln_base::{DType, Primitive, Result, Scalar, ScanOp, ScatterReduce};

fn flip(x: &Array, axis: usize) -> Result<Array> {
    let n = x.ndim();
    let mut steps = vec![1i64; n];
    steps[axis] = -1;
    ops::slice(x, &vec![None; n], &vec![None; n], &steps)
}

/// `x[..., 1:, ...]` followed by one `fill` along `axis` (the transpose of an exclusive shift
/// is this shift the other way).
fn shift(x: &Array, axis: usize, forward: bool, fill: Scalar) -> Result<Array> {
    let n = x.ndim();
    let len = x.shape()[axis] as i64;
    let mut pad_shape = x.shape().to_vec();
    pad_shape[axis] = 1.min(x.shape()[axis]);
    let pad = ops::full(&pad_shape, fill, x.dtype())?;
    let mut starts = vec![None; n];
    let mut stops = vec![None; n];
    if forward {
        // y[j] = x[j - 1], y[0] = fill
        stops[axis] = Some((len - 1).max(0));
        let body = ops::slice(x, &starts, &stops, &vec![1; n])?;
        ops::concatenate(&[pad, body], axis as i64)
    } else {
        // y[j] = x[j + 1], y[n - 1] = fill
        starts[axis] = Some(1.min(len));
        let body = ops::slice(x, &starts, &stops, &vec![1; n])?;
        ops::concatenate(&[body, pad], axis as i64)
    }
}

fn scan(op: ScanOp, x: &Array, axis: usize, reverse: bool) -> Result<Array> {
    record(Primitive::Scan { op, axis, reverse, inclusive: true }, vec![x.clone()])
}

/// Integer positions `0..n` along `axis`, broadcast to `shape`.
fn positions(shape: &[usize], axis: usize) -> Result<Array> {
    let n = shape[axis];
    let iota = ops::arange(0.0, n as f64, 1.0, DType::I32)?;
    let mut s = vec![1i64; shape.len()];
    s[axis] = n as i64;
    ops::broadcast_to(&ops::reshape(&iota, &s)?, shape)
}

/// Per output position, the input position it copies (the last record so far) of an
/// inclusive forward cummax/cummin `y` of `x`.
fn record_positions(x: &Array, y: &Array, axis: usize) -> Result<Array> {
    let pos = positions(x.shape(), axis)?;
    let hit = ops::logical_or(&ops::equal(x, y)?, &ops::isnan(x)?)?;
    let marked = ops::where_(&hit, &pos, &ops::zeros(&[], DType::I32)?)?;
    scan(ScanOp::Max, &marked, axis, false)
}

/// One index array per axis addressing `idx` (positions along `axis`) of an array of `shape`.
fn along(idx: &Array, axis: usize) -> Result<Vec<Array>> {
    let shape = idx.shape();
    (0..shape.len())
        .map(|d| if d == axis { Ok(idx.clone()) } else { positions(shape, d) })
        .collect()
}

fn take_along(x: &Array, idx: &Array, axis: usize) -> Result<Array> {
    let n = x.ndim();
    let mut inputs = vec![x.clone()];
    inputs.extend(along(idx, axis)?);
    let g = record(
        Primitive::Gather { axes: (0..n).collect(), slice_sizes: vec![1; n].into() },
        inputs,
    )?;
    let shape: Vec<i64> = idx.shape().iter().map(|&d| d as i64).collect();
    ops::reshape(&g, &shape)
}

/// Zeros of `g`'s shape with `g` added in at `idx` along `axis`.
fn scatter_add_along(g: &Array, idx: &Array, axis: usize) -> Result<Array> {
    let n = g.ndim();
    let mut inputs = vec![ops::zeros(g.shape(), g.dtype())?];
    inputs.extend(along(idx, axis)?);
    let mut upd: Vec<i64> = g.shape().iter().map(|&d| d as i64).collect();
    upd.extend(std::iter::repeat_n(1, n));
    inputs.push(ops::reshape(g, &upd)?);
    record(Primitive::Scatter { axes: (0..n).collect(), reduce: ScatterReduce::Add }, inputs)
}

/// Masks of the positions before the first zero (inclusive of the position itself) and of
/// the first zero itself, along `axis`.
fn zero_masks(x: &Array, axis: usize) -> Result<(Array, Array)> {
    let nonzero = ops::not_equal(x, &ops::zeros(&[], x.dtype())?)?;
    let alive = scan(ScanOp::Min, &ops::astype(&nonzero, DType::I32)?, axis, false)?;
    let alive_excl = shift(&alive, axis, true, Scalar::Int(1))?;
    let alive = ops::astype(&alive, DType::Bool)?;
    let first =
        ops::logical_and(&ops::astype(&alive_excl, DType::Bool)?, &ops::logical_not(&alive)?)?;
    Ok((alive, first))
}

/// vjp of the inclusive forward scan `y = scan(x)`.
fn forward_vjp(op: ScanOp, x: &Array, y: &Array, g: &Array, axis: usize) -> Result<Array> {
    let zero = || ops::zeros(&[], x.dtype());
    match op {
        ScanOp::Sum => scan(ScanOp::Sum, g, axis, true),
        ScanOp::Prod => {
            let (alive, first) = zero_masks(x, axis)?;
            let one = ops::ones(&[], x.dtype())?;
            let safe = ops::where_(&alive, x, &one)?;
            let before =
                ops::divide(&scan(ScanOp::Sum, &ops::multiply(g, y)?, axis, true)?, &safe)?;
            let without = scan(ScanOp::Prod, &ops::where_(&first, &one, x)?, axis, false)?;
            let at = scan(ScanOp::Sum, &ops::multiply(g, &without)?, axis, true)?;
            ops::where_(&alive, &before, &ops::where_(&first, &at, &zero()?)?)
        }
        ScanOp::Max | ScanOp::Min => scatter_add_along(g, &record_positions(x, y, axis)?, axis),
        ScanOp::LogAddExp => {
            // sum_{j >= i} g_j exp(x_i - y_j), factored around c = the last (largest) y so
            // the exponentials stay in range; c cancels, so it carries no gradient.
            let c = ops::stop_gradient(&ops::max(y, Some(&[axis as i64]), true)?)?;
            let w = ops::multiply(g, &ops::exp(&ops::subtract(&c, y)?)?)?;
            ops::multiply(&ops::exp(&ops::subtract(x, &c)?)?, &scan(ScanOp::Sum, &w, axis, true)?)
        }
    }
}

/// jvp of the inclusive forward scan `y = scan(x)`.
fn forward_jvp(op: ScanOp, x: &Array, y: &Array, t: &Array, axis: usize) -> Result<Array> {
    match op {
        ScanOp::Sum => scan(ScanOp::Sum, t, axis, false),
        ScanOp::Prod => {
            let (alive, first) = zero_masks(x, axis)?;
            let one = ops::ones(&[], x.dtype())?;
            let zero = ops::zeros(&[], x.dtype())?;
            let safe = ops::where_(&alive, x, &one)?;
            let before = ops::multiply(
                y,
                &scan(
                    ScanOp::Sum,
                    &ops::divide(&ops::where_(&alive, t, &zero)?, &safe)?,
                    axis,
                    false,
                )?,
            )?;
            let without = scan(ScanOp::Prod, &ops::where_(&first, &one, x)?, axis, false)?;
            let t_first = scan(ScanOp::Sum, &ops::where_(&first, t, &zero)?, axis, false)?;
            ops::where_(&alive, &before, &ops::multiply(&t_first, &without)?)
        }
        ScanOp::Max | ScanOp::Min => take_along(t, &record_positions(x, y, axis)?, axis),
        ScanOp::LogAddExp => {
            // sum_{i <= j} t_i exp(x_i - y_j), factored around c = max(x) (see the vjp).
            let c = ops::stop_gradient(&ops::max(x, Some(&[axis as i64]), true)?)?;
            let w = ops::multiply(t, &ops::exp(&ops::subtract(x, &c)?)?)?;
            ops::multiply(&scan(ScanOp::Sum, &w, axis, false)?, &ops::exp(&ops::subtract(&c, y)?)?)
        }
    }
}

/// The input in forward order, and the inclusive forward scan of it.
fn forward(op: ScanOp, x: &Array, axis: usize, reverse: bool) -> Result<(Array, Array)> {
    let xf = if reverse { flip(x, axis)? } else { x.clone() };
    let y = scan(op, &xf, axis, false)?;
    Ok((xf, y))
}

pub(super) fn scan_vjp(prim: &Primitive, x: &Array, g: &Array) -> Result<Array> {
    let Primitive::Scan { op, axis, reverse, inclusive } = *prim else {
        unreachable!("dispatched by class")
    };
    if op == ScanOp::Sum {
        let back = Primitive::Scan { op, axis, reverse: !reverse, inclusive };
        return record(back, vec![g.clone()]);
    }
    let (xf, y) = forward(op, x, axis, reverse)?;
    let mut gf = if reverse { flip(g, axis)? } else { g.clone() };
    if !inclusive {
        gf = shift(&gf, axis, false, Scalar::Float(0.0))?;
    }
    let back = forward_vjp(op, &xf, &y, &gf, axis)?;
    if reverse {
        flip(&back, axis)
    } else {
        Ok(back)
    }
}

pub(super) fn scan_jvp(prim: &Primitive, x: &Array, t: &Array) -> Result<Array> {
    let Primitive::Scan { op, axis, reverse, inclusive } = *prim else {
        unreachable!("dispatched by class")
    };
    if op == ScanOp::Sum {
        return record(prim.clone(), vec![t.clone()]);
    }
    let (xf, y) = forward(op, x, axis, reverse)?;
    let tf = if reverse { flip(t, axis)? } else { t.clone() };
    let mut out = forward_jvp(op, &xf, &y, &tf, axis)?;
    if !inclusive {
        out = shift(&out, axis, true, Scalar::Float(0.0))?;
    }
    if reverse {
        flip(&out, axis)
    } else {
        Ok(out)
    }
}

/// The permutation sort/partition apply along their axis.
fn permutation(prim: &Primitive, x: &Array) -> Result<(Array, usize)> {
    match *prim {
        Primitive::Sort { axis, .. } => {
            Ok((record(Primitive::Sort { axis, arg: true }, vec![x.clone()])?, axis))
        }
        Primitive::Partition { kth, axis, .. } => {
            Ok((record(Primitive::Partition { kth, axis, arg: true }, vec![x.clone()])?, axis))
        }
        _ => unreachable!("dispatched by class"),
    }
}

/// Sorted values are `x` gathered through the permutation: the cotangent goes back through
/// its inverse (the permutation's argsort).
pub(super) fn sort_vjp(prim: &Primitive, x: &Array, g: &Array) -> Result<Array> {
    let (perm, axis) = permutation(prim, x)?;
    scatter_add_along(g, &perm, axis)
}

pub(super) fn sort_jvp(prim: &Primitive, x: &Array, t: &Array) -> Result<Array> {
    let (perm, axis) = permutation(prim, x)?;
    take_along(t, &perm, axis)
}
