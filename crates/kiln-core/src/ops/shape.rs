//! Shape ops. Most are views: the primitive records the new layout and eval shares the
//! input's buffer.

use super::{astype, record};
use crate::array::Array;
use kiln_base::shape::{
    broadcast_shapes, checked_size, fmt_shape, normalize_axes, normalize_axis, Shape,
};
use kiln_base::{bail, ensure, Primitive, ReshapeDim, Result};

/// A new shape of the same size; one entry may be -1 (inferred).
pub fn reshape(x: &Array, shape: &[i64]) -> Result<Array> {
    let op = "reshape";
    let mut infer = None;
    let mut known = 1usize;
    for (i, &d) in shape.iter().enumerate() {
        match d {
            -1 if infer.is_none() => infer = Some(i),
            -1 => bail!(Value, op, "Can only infer one dimension."),
            d if d < 0 => bail!(Value, op, "Invalid dimension {d}."),
            d => known = known.saturating_mul(d as usize),
        }
    }
    let mut out: Shape = shape.iter().map(|&d| d.max(0) as usize).collect();
    if let Some(i) = infer {
        if known == 0 || !x.size().is_multiple_of(known) {
            bail!(
                Value,
                op,
                "Cannot infer the shape of an empty array or reshape array of size {} into {}.",
                x.size(),
                fmt_i64_shape(shape)
            );
        }
        out[i] = x.size() / known;
    }
    // A `-1` is inferred again at shapeless replay; literal sizes are baked in (as MLX).
    let rule = match infer {
        Some(_) => shape
            .iter()
            .map(|&d| if d < 0 { ReshapeDim::Rest } else { ReshapeDim::Fixed(d as usize) })
            .collect(),
        None => Vec::new(),
    };
    reshape_by_rule(x, out, rule)
}

/// A reshape to `shape` (already checked to fit) that shapeless compile recomputes with
/// `rule` (empty: baked in).
pub(crate) fn reshape_by_rule(x: &Array, shape: Shape, rule: Vec<ReshapeDim>) -> Result<Array> {
    if shape.as_slice() == x.shape() {
        return Ok(x.clone());
    }
    record(Primitive::Reshape { shape, rule }, vec![x.clone()])
}

/// Keeps input axis `i` as it is (a rule entry).
fn keep(i: usize) -> ReshapeDim {
    ReshapeDim::Axes(i, i + 1)
}

fn fmt_i64_shape(shape: &[i64]) -> String {
    let parts: Vec<String> = shape.iter().map(|d| d.to_string()).collect();
    if parts.len() == 1 {
        format!("({},)", parts[0])
    } else {
        format!("({})", parts.join(", "))
    }
}

/// Permutes axes (reverses them when `axes` is `None`).
pub fn transpose(x: &Array, axes: Option<&[i64]>) -> Result<Array> {
    let op = "transpose";
    let n = x.ndim();
    let perm: Vec<usize> = match axes {
        None => (0..n).rev().collect(),
        Some(axes) => {
            ensure!(
                axes.len() == n,
                Value,
                op,
                "Received {} axes for array with {n} dimensions.",
                axes.len()
            );
            let perm: Vec<usize> =
                axes.iter().map(|&a| normalize_axis(op, a, n)).collect::<Result<_>>()?;
            let mut sorted = perm.clone();
            sorted.sort_unstable();
            sorted.dedup();
            ensure!(sorted.len() == n, Value, op, "Repeated axes in {axes:?}.");
            perm
        }
    };
    if perm.iter().enumerate().all(|(i, &p)| i == p) {
        return Ok(x.clone());
    }
    record(Primitive::Transpose { perm }, vec![x.clone()])
}

/// Broadcasts to `shape` with numpy's rules (a view).
pub fn broadcast_to(x: &Array, shape: &[usize]) -> Result<Array> {
    if x.shape() == shape {
        return Ok(x.clone());
    }
    record(Primitive::BroadcastTo { shape: shape.into() }, vec![x.clone()])
}

/// Inserts size-1 axes at `axes` (positions in the result).
pub fn expand_dims(x: &Array, axes: &[i64]) -> Result<Array> {
    let out_ndim = x.ndim() + axes.len();
    let axes = normalize_axes("expand_dims", axes, out_ndim)?;
    let mut rule = Vec::with_capacity(out_ndim);
    let mut src = 0;
    for i in 0..out_ndim {
        rule.push(if axes.contains(&i) {
            ReshapeDim::Fixed(1)
        } else {
            src += 1;
            keep(src - 1)
        });
    }
    let shape = kiln_base::primitive::resolve_reshape(&rule, x.shape()).expect("sizes add up");
    reshape_by_rule(x, shape, rule)
}

/// Removes size-1 axes (all of them when `axes` is `None`).
pub fn squeeze(x: &Array, axes: Option<&[i64]>) -> Result<Array> {
    let op = "squeeze";
    let axes = match axes {
        None => (0..x.ndim()).filter(|&i| x.shape()[i] == 1).collect(),
        Some(axes) => normalize_axes(op, axes, x.ndim())?,
    };
    for &a in &axes {
        ensure!(x.shape()[a] == 1, Value, op, "Cannot squeeze axis {a} with size other than 1.");
    }
    let kept: Vec<usize> = (0..x.ndim()).filter(|i| !axes.contains(i)).collect();
    let shape = kept.iter().map(|&i| x.shape()[i]).collect();
    reshape_by_rule(x, shape, kept.into_iter().map(keep).collect())
}

/// Python slicing per axis: `starts`, `stops` (`None` = open end) and `steps` as in
/// `x[a:b:c]`; axes not listed are taken whole.
pub fn slice(
    x: &Array,
    starts: &[Option<i64>],
    stops: &[Option<i64>],
    steps: &[i64],
) -> Result<Array> {
    let op = "slice";
    let n = x.ndim();
    ensure!(
        starts.len() <= n && stops.len() == starts.len() && steps.len() == starts.len(),
        Value,
        op,
        "Expected at most {n} (start, stop, step) triples."
    );
    let (mut start, mut step, mut len) = (vec![0; n], vec![1isize; n], x.shape().to_vec());
    for ax in 0..starts.len() {
        let (s, l) = python_slice(op, starts[ax], stops[ax], steps[ax], x.shape()[ax])?;
        start[ax] = s;
        // One element or none: the step is irrelevant, and 1 keeps stride arithmetic small.
        step[ax] = if l <= 1 { 1 } else { steps[ax] as isize };
        len[ax] = l;
    }
    if start.iter().all(|&s| s == 0) && step.iter().all(|&s| s == 1) && len == x.shape() {
        return Ok(x.clone());
    }
    record(Primitive::Slice { start, step, len }, vec![x.clone()])
}

/// Python's `slice.indices`: the first index and element count of `start:stop:step` over a
/// dimension of `dim` elements.
pub(crate) fn python_slice(
    op: &'static str,
    start: Option<i64>,
    stop: Option<i64>,
    step: i64,
    dim: usize,
) -> Result<(usize, usize)> {
    ensure!(step != 0, Value, op, "Slice step cannot be zero.");
    let d = dim as i64;
    let clamp = |v: Option<i64>, default: i64, lo: i64, hi: i64| match v {
        None => default,
        Some(v) if v < 0 => (v + d).max(lo),
        Some(v) => v.min(hi),
    };
    let (first, end) = if step > 0 {
        (clamp(start, 0, 0, d), clamp(stop, d, 0, d))
    } else {
        (clamp(start, d - 1, -1, d - 1), clamp(stop, -1, -1, d - 1))
    };
    // i128: steps near i64::MAX/MIN must not overflow.
    let (first, end, step) = (first as i128, end as i128, step as i128);
    let len = if step > 0 && end > first {
        (end - first - 1) / step + 1
    } else if step < 0 && first > end {
        (first - end - 1) / -step + 1
    } else {
        0
    };
    Ok((if len > 0 { first as usize } else { 0 }, len as usize))
}

/// Joins arrays along `axis` (dtypes promoted together).
pub fn concatenate(arrays: &[Array], axis: i64) -> Result<Array> {
    let op = "concatenate";
    ensure!(!arrays.is_empty(), Value, op, "No arrays provided for concatenation.");
    let ndim = arrays[0].ndim();
    ensure!(ndim > 0, Value, op, "Cannot concatenate 0-d arrays.");
    let axis = normalize_axis(op, axis, ndim)?;
    let dtype = arrays.iter().skip(1).fold(arrays[0].dtype(), |d, a| d.promote(a.dtype()));
    for a in arrays {
        let ok = a.ndim() == ndim
            && (0..ndim).all(|i| i == axis || a.shape()[i] == arrays[0].shape()[i]);
        ensure!(
            ok,
            Value,
            op,
            "All the input array dimensions must match exactly except for the concatenation \
             axis. However, the provided shapes are {} and {}, and the concatenation axis is {axis}.",
            fmt_shape(arrays[0].shape()),
            fmt_shape(a.shape())
        );
    }
    if arrays.len() == 1 {
        return astype(&arrays[0], dtype);
    }
    let inputs = arrays.iter().map(|a| astype(a, dtype)).collect::<Result<Vec<_>>>()?;
    record(Primitive::Concatenate { axis }, inputs)
}

/// Merges axes `start_axis..=end_axis` into one (negative axes count from the end; out of
/// range axes are clamped, as in MLX). A 0-d array becomes 1-d.
pub fn flatten(x: &Array, start_axis: i64, end_axis: i64) -> Result<Array> {
    let op = "flatten";
    let n = x.ndim() as i64;
    if n == 0 {
        return reshape(x, &[1]);
    }
    let norm = |a: i64| if a < 0 { a.saturating_add(n) } else { a };
    let (start, end) = (norm(start_axis).max(0), norm(end_axis).min(n - 1));
    ensure!(start <= end, Value, op, "start_axis must be less than or equal to end_axis");
    let (start, end) = (start as usize, end as usize);
    let rule: Vec<ReshapeDim> = (0..start)
        .map(keep)
        .chain([ReshapeDim::Axes(start, end + 1)])
        .chain((end + 1..x.ndim()).map(keep))
        .collect();
    let shape = kiln_base::primitive::resolve_reshape(&rule, x.shape()).expect("sizes multiply");
    reshape_by_rule(x, shape, rule)
}

/// Splits `axis` into `shape` (one entry may be -1, inferred).
pub fn unflatten(x: &Array, axis: i64, shape: &[i64]) -> Result<Array> {
    let op = "unflatten";
    let n = x.ndim();
    ensure!(
        axis >= -(n as i64) && axis < n as i64,
        Index,
        op,
        "Invalid axes {axis} for array with {n} dimensions."
    );
    let ax = normalize_axis(op, axis, n)?;
    ensure!(!shape.is_empty(), Value, op, "Shape to unflatten to cannot be empty.");
    let dim = x.shape()[ax];
    let mut infer = None;
    let mut known = 1usize;
    for (i, &d) in shape.iter().enumerate() {
        match d {
            -1 if infer.is_none() => infer = Some(i),
            -1 => bail!(Value, op, "Can only infer one dimension."),
            d if d < 0 => bail!(Value, op, "Invalid dimension {d} in {shape:?}."),
            d => known = known.saturating_mul(d as usize),
        }
    }
    let mut dims: Vec<i64> = shape.to_vec();
    if let Some(i) = infer {
        if known > 0 && dim.is_multiple_of(known) {
            dims[i] = (dim / known) as i64;
        }
    }
    let total = dims.iter().try_fold(1usize, |acc, &d| acc.checked_mul(usize::try_from(d).ok()?));
    ensure!(
        total == Some(dim),
        Value,
        op,
        "Cannot unflatten axis {axis} with size {dim} into shape {}.",
        fmt_i64_shape(&dims)
    );
    let mut out: Shape = x.shape()[..ax].into();
    out.extend(dims.iter().map(|&d| d as usize));
    out.extend_from_slice(&x.shape()[ax + 1..]);
    // The other axes follow the input; the split sizes are MLX's (a -1 inferred again).
    let rule: Vec<ReshapeDim> = (0..ax)
        .map(keep)
        .chain(shape.iter().map(|&d| match d {
            -1 => ReshapeDim::Rest,
            d => ReshapeDim::Fixed(d as usize),
        }))
        .chain((ax + 1..n).map(keep))
        .collect();
    reshape_by_rule(x, out, rule)
}

/// An axis for ops whose message is MLX's `Invalid axis` (swapaxes, moveaxis, roll).
fn valid_axis(op: &'static str, axis: i64, ndim: usize) -> Result<usize> {
    ensure!(
        axis >= -(ndim as i64) && axis < ndim as i64,
        Index,
        op,
        "Invalid axis {axis} for array with {ndim} dimensions."
    );
    normalize_axis(op, axis, ndim)
}

/// Exchanges two axes (a view).
pub fn swapaxes(x: &Array, axis1: i64, axis2: i64) -> Result<Array> {
    let op = "swapaxes";
    let (a, b) = (valid_axis(op, axis1, x.ndim())?, valid_axis(op, axis2, x.ndim())?);
    let mut perm: Vec<i64> = (0..x.ndim() as i64).collect();
    perm.swap(a, b);
    transpose(x, Some(&perm))
}

/// Moves axis `source` to position `destination` (a view).
pub fn moveaxis(x: &Array, source: i64, destination: i64) -> Result<Array> {
    let op = "moveaxis";
    let (s, d) = (valid_axis(op, source, x.ndim())?, valid_axis(op, destination, x.ndim())?);
    let mut perm: Vec<i64> = (0..x.ndim() as i64).filter(|&a| a != s as i64).collect();
    perm.insert(d, s as i64);
    transpose(x, Some(&perm))
}

/// Broadcasts arrays against one another (numpy's rules; views).
pub fn broadcast_arrays(arrays: &[Array]) -> Result<Vec<Array>> {
    let mut shape = Shape::new();
    for a in arrays {
        shape = broadcast_shapes("broadcast_arrays", &shape, a.shape())?;
    }
    arrays.iter().map(|a| broadcast_to(a, &shape)).collect()
}

/// Joins arrays of one shape along a new axis (dtypes promoted together).
pub fn stack(arrays: &[Array], axis: i64) -> Result<Array> {
    let op = "stack";
    ensure!(!arrays.is_empty(), Value, op, "No arrays provided for stacking");
    let shape = arrays[0].shape();
    ensure!(
        arrays.iter().all(|a| a.shape() == shape),
        Value,
        op,
        "All arrays must have the same shape"
    );
    let axis = normalize_axis(op, axis, shape.len() + 1)?;
    let expanded =
        arrays.iter().map(|a| expand_dims(a, &[axis as i64])).collect::<Result<Vec<_>>>()?;
    concatenate(&expanded, axis as i64)
}

/// How `split` divides an axis.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SplitSpec {
    /// This many equal parts.
    Sections(i64),
    /// Boundaries: parts are `[..i0], [i0..i1], ..., [ik..]` with Python slicing.
    Indices(Vec<i64>),
}

/// Splits `x` along `axis` into equal sections or at indices.
pub fn split(x: &Array, spec: &SplitSpec, axis: i64) -> Result<Vec<Array>> {
    let op = "split";
    let ax = normalize_axis(op, axis, x.ndim())?;
    let dim = x.shape()[ax];
    let bounds: Vec<i64> = match spec {
        SplitSpec::Sections(n) => {
            ensure!(*n > 0, Value, op, "num_splits must be positive and non-zero but got {n}.");
            ensure!(
                dim.is_multiple_of(*n as usize),
                Value,
                op,
                "Array split does not result in sub arrays with equal size: attempting {n} \
                 splits along axis {ax} for shape {}.",
                fmt_shape(x.shape())
            );
            let step = (dim / *n as usize) as i64;
            (1..*n).map(|i| i * step).collect()
        }
        SplitSpec::Indices(v) => v.clone(),
    };
    let mut parts = Vec::with_capacity(bounds.len() + 1);
    let mut prev = None;
    let open = vec![None; ax];
    for b in bounds.iter().map(|&b| Some(b)).chain([None]) {
        let mut starts = open.clone();
        let mut stops = open.clone();
        let mut steps = vec![1; ax + 1];
        starts.push(prev);
        stops.push(b);
        steps[ax] = 1;
        parts.push(slice(x, &starts, &stops, &steps)?);
        prev = b;
    }
    Ok(parts)
}

/// Repeats each element `repeats` times along `axis` (of the flattened array when `None`).
pub fn repeat(x: &Array, repeats: i64, axis: Option<i64>) -> Result<Array> {
    let op = "repeat";
    ensure!(repeats >= 0, Value, op, "Number of repeats cannot be negative");
    let (x, axis) = match axis {
        None => (reshape(x, &[-1])?, 0),
        Some(a) => (x.clone(), normalize_axis(op, a, x.ndim())?),
    };
    let s = x.shape();
    let mut wide: Shape = s.into();
    wide.insert(axis + 1, repeats as usize);
    checked_size(op, &wide)?;
    let mut out: Vec<i64> = s.iter().map(|&d| d as i64).collect();
    out[axis] = (s[axis] * repeats as usize) as i64;
    let e = expand_dims(&x, &[axis as i64 + 1])?;
    reshape(&broadcast_to(&e, &wide)?, &out)
}

/// `x` repeated `reps[i]` times along each axis (numpy's `tile`: the shorter of x's shape
/// and `reps` is padded with leading 1s).
pub fn tile(x: &Array, reps: &[i64]) -> Result<Array> {
    let op = "tile";
    if let Some(r) = reps.iter().find(|&&r| r < 0) {
        bail!(Value, op, "Negative dimensions not allowed, got {r}.");
    }
    let n = x.ndim().max(reps.len());
    let mut dims = vec![1usize; n - x.ndim()];
    dims.extend_from_slice(x.shape());
    let mut r = vec![1usize; n - reps.len()];
    r.extend(reps.iter().map(|&v| v as usize));
    let mut inter = Vec::with_capacity(2 * n);
    let mut wide = Shape::new();
    let mut out = Vec::with_capacity(n);
    for i in 0..n {
        inter.extend([1, dims[i] as i64]);
        wide.extend([r[i], dims[i]]);
        out.push(r[i].saturating_mul(dims[i]) as i64);
    }
    checked_size(op, &wide)?;
    let e = reshape(x, &inter)?;
    reshape(&broadcast_to(&e, &wide)?, &out)
}

/// Rolls elements along axes: `shifts` pair with `axes` (one shift applies to every axis;
/// several shifts on one axis add up). With `axes` None the flattened array rolls by the
/// sum of the shifts.
pub fn roll(x: &Array, shifts: &[i64], axes: Option<&[i64]>) -> Result<Array> {
    let op = "roll";
    let Some(axes) = axes else {
        let total: i128 = shifts.iter().map(|&s| s as i128).sum();
        let flat = roll_axis(&reshape(x, &[-1])?, 0, total)?;
        let shape: Vec<i64> = x.shape().iter().map(|&d| d as i64).collect();
        return reshape(&flat, &shape);
    };
    let mut totals = vec![0i128; x.ndim()];
    let pairs: Vec<(i64, i64)> = match (shifts, axes) {
        ([s], _) => axes.iter().map(|&a| (a, *s)).collect(),
        (_, [a]) => shifts.iter().map(|&s| (*a, s)).collect(),
        _ => {
            ensure!(
                shifts.len() >= axes.len(),
                Value,
                op,
                "At least one shift value per axis is required, {} provided for {} axes.",
                shifts.len(),
                axes.len()
            );
            axes.iter().copied().zip(shifts.iter().copied()).collect()
        }
    };
    for (a, s) in pairs {
        totals[valid_axis(op, a, x.ndim())?] += s as i128;
    }
    let mut out = x.clone();
    for (axis, &total) in totals.iter().enumerate() {
        out = roll_axis(&out, axis, total)?;
    }
    Ok(out)
}

/// One axis rolled right by `shift` (mod its size): the last `k` elements move to the front.
fn roll_axis(x: &Array, axis: usize, shift: i128) -> Result<Array> {
    let dim = x.shape()[axis];
    if dim == 0 {
        return Ok(x.clone());
    }
    let k = shift.rem_euclid(dim as i128) as i64;
    if k == 0 {
        return Ok(x.clone());
    }
    let cut = dim as i64 - k;
    let mut parts = split(x, &SplitSpec::Indices(vec![cut]), axis as i64)?;
    parts.swap(0, 1);
    concatenate(&parts, axis as i64)
}

#[cfg(test)]
mod tests {
    use super::python_slice;

    #[test]
    fn python_slice_rules() {
        let s = |a, b, c, d| python_slice("t", a, b, c, d).unwrap();
        assert_eq!(s(None, None, 1, 5), (0, 5));
        assert_eq!(s(None, None, -1, 5), (4, 5));
        assert_eq!(s(Some(1), Some(4), 2, 5), (1, 2));
        assert_eq!(s(Some(-2), None, 1, 5), (3, 2));
        assert_eq!(s(Some(10), None, 1, 5), (0, 0));
        assert_eq!(s(None, Some(-10), -1, 5), (4, 5));
        assert_eq!(s(Some(3), Some(0), -2, 5), (3, 2));
        assert_eq!(s(None, None, 1, 0), (0, 0));
        assert_eq!(s(None, None, i64::MAX, 5), (0, 1));
        assert_eq!(s(None, None, i64::MIN, 5), (4, 1));
    }
}
