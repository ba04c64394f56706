//! Reductions. The primitive keeps reduced axes as size 1; the op squeezes them unless
//! `keepdims`. var, std, median and count_nonzero are compositions; logsumexp and softmax
//! record their fused primitives over one axis (or all, flattened) and compose otherwise.

use super::{
    abs, add, astype, divide, equal, exp, log, maximum, multiply, not_equal, partition, record,
    reshape, scalar, slice, sqrt, squeeze, subtract, transpose, where_,
};
use crate::array::Array;
use kiln_base::shape::{normalize_axes, normalize_axis};
use kiln_base::{bail, ensure, ArgReduceOp, DType, Primitive, ReduceOp, Result, Scalar};

fn op_name(op: ReduceOp) -> &'static str {
    Primitive::Reduce { op, axes: vec![] }.name()
}

/// Axes to reduce: all when `None`.
fn reduce_axes(op: &'static str, x: &Array, axes: Option<&[i64]>) -> Result<Vec<usize>> {
    match axes {
        None => Ok((0..x.ndim()).collect()),
        Some(axes) => normalize_axes(op, axes, x.ndim()),
    }
}

/// Drops the reduced (size-1) axes unless `keepdims` (a squeeze, so shapeless compile
/// follows new shapes).
fn finish(out: Array, axes: &[usize], keepdims: bool) -> Result<Array> {
    if keepdims {
        return Ok(out);
    }
    let axes: Vec<i64> = axes.iter().map(|&a| a as i64).collect();
    squeeze(&out, Some(&axes))
}

/// Whether ops run inside a compile trace, where sizes taken from a shape must stay nodes
/// (compile folds them back into constants unless the trace is shapeless).
fn in_compile_trace() -> bool {
    crate::transforms::active().contains(&crate::transforms::Transform::Compile)
}

/// The number of elements of `x` over `axes` (or its inverse) as a 0-d array of `dtype`:
/// a constant, or inside a compile trace a `NumberOfElements` node over `x`.
fn count(x: &Array, axes: &[usize], inverted: bool, dtype: DType) -> Result<Array> {
    if in_compile_trace() {
        let prim = Primitive::NumberOfElements { axes: axes.to_vec(), inverted, dtype };
        return record(prim, vec![x.clone()]);
    }
    let n = axes.iter().map(|&a| x.shape()[a] as f64).product::<f64>();
    scalar(Scalar::Float(if inverted { 1.0 / n } else { n }), dtype)
}

fn reduce(op: ReduceOp, x: &Array, axes: Option<&[i64]>, keepdims: bool) -> Result<Array> {
    let name = op_name(op);
    let axes = reduce_axes(name, x, axes)?;
    if axes.is_empty() {
        return Ok(x.clone());
    }
    if matches!(op, ReduceOp::Max | ReduceOp::Min) {
        if let Some(&a) = axes.iter().find(|&&a| x.shape()[a] == 0) {
            bail!(Value, name, "Cannot {name} reduce over axis {a} with size 0.");
        }
    }
    // Sums and products of small integers accumulate in 32 bits, as in MLX.
    let dtype = match (op, x.dtype()) {
        (ReduceOp::Sum | ReduceOp::Prod, DType::Bool | DType::I8 | DType::I16) => DType::I32,
        (ReduceOp::Sum | ReduceOp::Prod, DType::U8 | DType::U16) => DType::U32,
        (_, d) => d,
    };
    let out = record(Primitive::Reduce { op, axes: axes.clone() }, vec![astype(x, dtype)?])?;
    finish(out, &axes, keepdims)
}

macro_rules! reductions {
    ($($name:ident => $op:ident),*) => {$(
        #[doc = concat!("`", stringify!($name), "` over `axes` (all when `None`).")]
        pub fn $name(x: &Array, axes: Option<&[i64]>, keepdims: bool) -> Result<Array> {
            reduce(ReduceOp::$op, x, axes, keepdims)
        }
    )*};
}
reductions!(sum => Sum, prod => Prod, max => Max, min => Min);

/// Arithmetic mean over `axes`; integers give float32.
pub fn mean(x: &Array, axes: Option<&[i64]>, keepdims: bool) -> Result<Array> {
    let axes_n = reduce_axes("mean", x, axes)?;
    let dtype = x.dtype().to_float();
    let total = sum(&astype(x, dtype)?, axes, keepdims)?;
    // Times 1/n in the result's dtype, as MLX: a float16 count above 65504 would be inf
    // (inf / inf = NaN), while inf * (1/n) stays MLX's inf.
    multiply(&total, &count(x, &axes_n, true, dtype)?)
}

fn logical(op: ReduceOp, x: &Array, axes: Option<&[i64]>, keepdims: bool) -> Result<Array> {
    let axes = reduce_axes(op_name(op), x, axes)?;
    let x = astype(x, DType::Bool)?;
    if axes.is_empty() {
        return Ok(x);
    }
    let out = record(Primitive::Reduce { op, axes: axes.clone() }, vec![x])?;
    finish(out, &axes, keepdims)
}

/// Whether every element over `axes` is nonzero (true over none), bool.
pub fn all(x: &Array, axes: Option<&[i64]>, keepdims: bool) -> Result<Array> {
    logical(ReduceOp::And, x, axes, keepdims)
}

/// Whether any element over `axes` is nonzero (NaN counts), bool.
pub fn any(x: &Array, axes: Option<&[i64]>, keepdims: bool) -> Result<Array> {
    logical(ReduceOp::Or, x, axes, keepdims)
}

/// Variance over `axes` with `ddof` delta degrees of freedom; integers give float32. As MLX,
/// the mean of squared deviations scaled by `n / max(n - ddof, 0)` (inf or NaN when
/// `ddof >= n`).
pub fn var(x: &Array, axes: Option<&[i64]>, keepdims: bool, ddof: i64) -> Result<Array> {
    let axes_n = reduce_axes("var", x, axes)?;
    let dtype = x.dtype().to_float();
    let x = astype(x, dtype)?;
    let dev = subtract(&x, &mean(&x, axes, true)?)?;
    // complex64: the mean squared magnitude, a float32 (as MLX).
    let (dev, dtype) =
        if dtype.is_complex() { (super::abs(&dev)?, DType::F32) } else { (dev, dtype) };
    let v = mean(&multiply(&dev, &dev)?, axes, keepdims)?;
    if ddof == 0 {
        return Ok(v);
    }
    if !in_compile_trace() {
        let n = axes_n.iter().map(|&a| x.shape()[a] as f64).product::<f64>();
        let factor = n / (n - ddof as f64).max(0.0);
        return multiply(&v, &scalar(Scalar::Float(factor), dtype)?);
    }
    // The same factor from the traced shape's count, in float32 for every float32-or-narrower
    // input (the GPU has no float64; the factor may differ from eager's by one rounding).
    let ct = if dtype == DType::F64 { DType::F64 } else { DType::F32 };
    let n = count(&x, &axes_n, false, ct)?;
    let ddof = scalar(Scalar::Float(ddof as f64), ct)?;
    let zero = scalar(Scalar::Float(0.0), ct)?;
    let factor = divide(&n, &maximum(&subtract(&n, &ddof)?, &zero)?)?;
    multiply(&v, &astype(&factor, dtype)?)
}

/// Standard deviation: `sqrt(var(...))`.
pub fn std(x: &Array, axes: Option<&[i64]>, keepdims: bool, ddof: i64) -> Result<Array> {
    sqrt(&var(x, axes, keepdims, ddof)?)
}

/// Raises MLX's error for a 0-d input given axes.
fn no_axes_of_scalar(op: &'static str, x: &Array, axes: Option<&[i64]>) -> Result<()> {
    ensure!(
        x.ndim() > 0 || axes.is_none_or(|a| a.is_empty()),
        Value,
        op,
        "Received non-empty axes for array with 0 dimensions."
    );
    Ok(())
}

/// `log(sum(exp(x)))` over `axes`, computed as `m + log(sum(exp(x - m)))` with `m` the max
/// (no overflow); where the max is infinite the result is the max, and NaN anywhere gives NaN.
/// One axis (or `None`) of a real float is the fused `LogSumExp` primitive (half floats
/// accumulate in float32 and round once); several axes and complex64 are the composition.
/// Integers and bools give float32 and are converted first (MLX subtracts the max in the
/// integer type, so unsigned and bool inputs wrap to inf or wrong values there).
pub fn logsumexp(x: &Array, axes: Option<&[i64]>, keepdims: bool) -> Result<Array> {
    let op = "logsumexp";
    ensure!(x.size() > 0, Value, op, "Received empty array.");
    no_axes_of_scalar(op, x, axes)?;
    let axes_n = reduce_axes(op, x, axes)?;
    let dtype = x.dtype().to_float();
    let x = astype(x, dtype)?;
    // One axis (or all, flattened to one row) of a real float runs MLX's fused primitive over
    // the last axis: one pass over each row, half floats in float32.
    let single = match axes {
        None => Some(None),
        Some([a]) => Some(Some(normalize_axis(op, *a, x.ndim())?)),
        _ => None,
    };
    if let (Some(axis), true) = (single, dtype.is_float()) {
        let prim = Primitive::LogSumExp;
        return match axis {
            None => {
                let row = record(prim, vec![reshape(&x, &[-1])?])?;
                let kept = if keepdims { vec![1; x.ndim()] } else { Vec::new() };
                reshape(&row, &kept)
            }
            Some(a) => {
                let last = x.ndim() as i64 - 1;
                let out = record(prim, vec![super::moveaxis(&x, a as i64, last)?])?;
                if keepdims {
                    super::moveaxis(&out, last, a as i64)
                } else {
                    squeeze(&out, Some(&[last]))
                }
            }
        };
    }
    // The result does not depend on the shift: without stop_gradient its gradient would
    // flow through max (an equality mask over x and a count, two more passes over x) only
    // to cancel.
    let m = super::math::stop_gradient(&max(&x, axes, true)?)?;
    let out = add(&log(&sum(&exp(&subtract(&x, &m)?)?, axes, true)?)?, &m)?;
    // An infinite max makes x - m NaN (inf - inf) or -inf everywhere.
    let infinite = equal(&abs(&m)?, &scalar(Scalar::Float(f64::INFINITY), dtype)?)?;
    finish(where_(&infinite, &m, &out)?, &axes_n, keepdims)
}

/// `exp(x) / sum(exp(x))` over `axes` (all when `None`), shifted by the max for stability.
/// `precise` computes half floats in float32. Integers give float32 (on every axis: MLX
/// casts back to the integer type off the last axis, which rounds to zeros).
pub fn softmax(x: &Array, axes: Option<&[i64]>, precise: bool) -> Result<Array> {
    let op = "softmax";
    no_axes_of_scalar(op, x, axes)?;
    reduce_axes(op, x, axes)?;
    let dtype = x.dtype().to_float();
    let compute = match dtype {
        DType::F16 | DType::BF16 if precise => DType::F32,
        d => d,
    };
    // One axis (or all, flattened) runs MLX's fused primitive over the last axis; the kernel
    // computes half floats in float32 either way.
    let single = match axes {
        None if x.ndim() > 0 => Some(None),
        Some([a]) => Some(Some(normalize_axis(op, *a, x.ndim())?)),
        _ => None,
    };
    if let Some(axis) = single {
        let x = astype(x, dtype)?;
        let prim = Primitive::Softmax { precise };
        return match axis {
            None => {
                let shape: Vec<i64> = x.shape().iter().map(|&d| d as i64).collect();
                reshape(&record(prim, vec![reshape(&x, &[-1])?])?, &shape)
            }
            Some(a) => {
                let last = x.ndim() as i64 - 1;
                let moved = super::moveaxis(&x, a as i64, last)?;
                super::moveaxis(&record(prim, vec![moved])?, last, a as i64)
            }
        };
    }
    let x = astype(x, compute)?;
    if x.size() == 0 {
        return astype(&x, dtype);
    }
    let e = exp(&subtract(&x, &max(&x, axes, true)?)?)?;
    astype(&divide(&e, &sum(&e, axes, true)?)?, dtype)
}

/// The number of nonzero elements over `axes` (NaN counts), int32.
pub fn count_nonzero(x: &Array, axes: Option<&[i64]>, keepdims: bool) -> Result<Array> {
    reduce_axes("count_nonzero", x, axes)?;
    // A bool sum counts in int32; over no axes it is the input, so convert as well.
    astype(&sum(&astype(x, DType::Bool)?, axes, keepdims)?, DType::I32)
}

/// `(min, max)` over `axes`, as two calls would give.
pub fn minmax(x: &Array, axes: Option<&[i64]>, keepdims: bool) -> Result<(Array, Array)> {
    Ok((min(x, axes, keepdims)?, max(x, axes, keepdims)?))
}

/// The median over `axes` (all when `None`): the middle element, or the mean of the two
/// middle ones, of each group; NaN where the group holds a NaN (numpy). Integers give
/// float32. Over no axes it is the input as float (MLX raises there).
pub fn median(x: &Array, axes: Option<&[i64]>, keepdims: bool) -> Result<Array> {
    let op = "median";
    let axes_n = reduce_axes(op, x, axes)?;
    let x = astype(x, x.dtype().to_float())?;
    if axes_n.is_empty() {
        return Ok(x);
    }
    let n: usize = axes_n.iter().map(|&a| x.shape()[a]).product();
    ensure!(n > 0, Value, op, "Cannot take median along empty axis.");
    // Kept axes first, the reduced ones merged into one last axis.
    let kept: Vec<usize> = (0..x.ndim()).filter(|a| !axes_n.contains(a)).collect();
    let perm: Vec<i64> = kept.iter().chain(&axes_n).map(|&a| a as i64).collect();
    let mut groups: Vec<i64> = kept.iter().map(|&a| x.shape()[a] as i64).collect();
    groups.push(n as i64);
    let flat = reshape(&transpose(&x, Some(&perm))?, &groups)?;
    // One partition at n / 2 puts the upper middle in place and the lower half before it.
    let last = kept.len();
    let half = n / 2;
    let part = partition(&flat, half as i64, Some(-1))?;
    let pick = |start: usize, stop: usize| -> Result<Array> {
        let mut starts = vec![None; last + 1];
        let mut stops = vec![None; last + 1];
        (starts[last], stops[last]) = (Some(start as i64), Some(stop as i64));
        slice(&part, &starts, &stops, &vec![1; last + 1])
    };
    let upper = pick(half, half + 1)?;
    let mid = if n % 2 == 1 {
        upper
    } else {
        // Halves first: no overflow for values near the dtype's max, and +-inf stay exact.
        let lower = max(&pick(0, half)?, Some(&[-1]), true)?;
        let h = scalar(Scalar::Float(0.5), x.dtype())?;
        add(&multiply(&lower, &h)?, &multiply(&upper, &h)?)?
    };
    // NaNs order last, so a group's max is NaN exactly when it holds one.
    let top = max(&flat, Some(&[-1]), true)?;
    let mid = where_(&not_equal(&top, &top)?, &top, &mid)?;
    let shape: Vec<i64> = if keepdims {
        (0..x.ndim()).map(|a| if axes_n.contains(&a) { 1 } else { x.shape()[a] as i64 }).collect()
    } else {
        groups[..last].to_vec()
    };
    reshape(&mid, &shape)
}

fn arg_reduce(op: ArgReduceOp, x: &Array, axis: Option<i64>, keepdims: bool) -> Result<Array> {
    let name = Primitive::ArgReduce { op, axis: 0 }.name();
    if x.size() == 0 {
        bail!(Value, name, "Cannot {name} reduce zero size array.");
    }
    let Some(axis) = axis else {
        let flat = record(Primitive::ArgReduce { op, axis: 0 }, vec![reshape(x, &[-1])?])?;
        let ones = vec![1; if keepdims { x.ndim() } else { 0 }];
        return reshape(&flat, &ones);
    };
    let axis = normalize_axis(name, axis, x.ndim())?;
    let out = record(Primitive::ArgReduce { op, axis }, vec![x.clone()])?;
    finish(out, &[axis], keepdims)
}

/// Index of the first maximum along `axis` (of the flattened array when `None`), uint32.
pub fn argmax(x: &Array, axis: Option<i64>, keepdims: bool) -> Result<Array> {
    arg_reduce(ArgReduceOp::ArgMax, x, axis, keepdims)
}

/// Index of the first minimum along `axis` (of the flattened array when `None`), uint32.
pub fn argmin(x: &Array, axis: Option<i64>, keepdims: bool) -> Result<Array> {
    arg_reduce(ArgReduceOp::ArgMin, x, axis, keepdims)
}
