//! Shape ops. Most are views: the primitive records the new layout and eval shares the
//! input's buffer.

use super::{astype, record};
use crate::array::Array;
use kiln_base::shape::{fmt_shape, normalize_axes, normalize_axis, Shape};
use kiln_base::{bail, ensure, Primitive, Result};

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
    if out.as_slice() == x.shape() {
        return Ok(x.clone());
    }
    record(Primitive::Reshape { shape: out }, vec![x.clone()])
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
    let mut shape = Vec::with_capacity(out_ndim);
    let mut src = x.shape().iter();
    for i in 0..out_ndim {
        shape.push(if axes.contains(&i) { 1 } else { *src.next().expect("sizes add up") as i64 });
    }
    reshape(x, &shape)
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
    let shape: Vec<i64> =
        (0..x.ndim()).filter(|i| !axes.contains(i)).map(|i| x.shape()[i] as i64).collect();
    reshape(x, &shape)
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
fn python_slice(
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
