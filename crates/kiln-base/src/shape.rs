//! Shapes, strides, broadcasting and axis normalisation.

use crate::{bail, Result};
use smallvec::SmallVec;

/// Dimensions of an array (row-major). Inline up to 6 dims: no allocation for common ranks.
pub type Shape = SmallVec<[usize; 6]>;
/// Element strides of a view; negative for reversed slices, 0 for broadcast dims.
pub type Strides = SmallVec<[isize; 6]>;

/// Number of elements of a shape (1 for a 0-d array).
pub fn size_of(shape: &[usize]) -> usize {
    shape.iter().product()
}

/// Number of elements of a shape, or an error when it does not fit in `usize` (shapes
/// computed from user arguments: repeat counts, pad widths, strided views).
pub fn checked_size(op: &'static str, shape: &[usize]) -> Result<usize> {
    match shape.iter().try_fold(1usize, |acc, &d| acc.checked_mul(d)) {
        Some(n) => Ok(n),
        None => bail!(Value, op, "Shape {} is too large.", fmt_shape(shape)),
    }
}

/// Row-major (C order) strides of a contiguous array.
pub fn row_major_strides(shape: &[usize]) -> Strides {
    let mut strides: Strides = smallvec::smallvec![0; shape.len()];
    let mut acc = 1isize;
    for (s, &d) in strides.iter_mut().zip(shape).rev() {
        *s = acc;
        // Saturating: only an empty array can have dims whose product overflows, and its
        // strides are never used.
        acc = acc.saturating_mul(isize::try_from(d.max(1)).unwrap_or(isize::MAX));
    }
    strides
}

/// numpy's broadcasting of two shapes, aligned at the trailing dimension.
pub fn broadcast_shapes(op: &'static str, a: &[usize], b: &[usize]) -> Result<Shape> {
    let n = a.len().max(b.len());
    let mut out: Shape = smallvec::smallvec![0; n];
    for i in 0..n {
        let da = if i + a.len() >= n { a[i + a.len() - n] } else { 1 };
        let db = if i + b.len() >= n { b[i + b.len() - n] } else { 1 };
        out[i] = match (da, db) {
            _ if da == db => da,
            (1, d) | (d, 1) => d,
            _ => bail!(
                Value,
                op,
                "Shapes {} and {} cannot be broadcast.",
                fmt_shape(a),
                fmt_shape(b)
            ),
        };
    }
    Ok(out)
}

/// Turns a possibly negative axis into an index below `ndim`.
pub fn normalize_axis(op: &'static str, axis: i64, ndim: usize) -> Result<usize> {
    let n = ndim as i64;
    if axis < -n || axis >= n {
        bail!(Index, op, "Axis {axis} is out of bounds for array with {ndim} dimensions.");
    }
    Ok(if axis < 0 { axis + n } else { axis } as usize)
}

/// Normalises a list of axes, rejecting duplicates; the result is sorted.
pub fn normalize_axes(op: &'static str, axes: &[i64], ndim: usize) -> Result<Vec<usize>> {
    let mut out = Vec::with_capacity(axes.len());
    for &a in axes {
        let ax = normalize_axis(op, a, ndim)?;
        if out.contains(&ax) {
            bail!(Value, op, "Received duplicate axis {a}.");
        }
        out.push(ax);
    }
    out.sort_unstable();
    Ok(out)
}

/// Formats a shape as Python does: `(2, 3)`, `(4,)`, `()`.
pub fn fmt_shape(shape: &[usize]) -> String {
    match shape {
        [] => "()".into(),
        [d] => format!("({d},)"),
        _ => {
            let parts: Vec<String> = shape.iter().map(|d| d.to_string()).collect();
            format!("({})", parts.join(", "))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn broadcasting() {
        assert_eq!(broadcast_shapes("t", &[3, 1], &[4]).unwrap().as_slice(), &[3, 4]);
        assert_eq!(broadcast_shapes("t", &[], &[2, 0]).unwrap().as_slice(), &[2, 0]);
        assert!(broadcast_shapes("t", &[3], &[4]).is_err());
    }

    #[test]
    fn strides_and_axes() {
        assert_eq!(row_major_strides(&[2, 3, 4]).as_slice(), &[12, 4, 1]);
        assert_eq!(normalize_axis("t", -1, 3).unwrap(), 2);
        assert!(normalize_axis("t", 3, 3).is_err());
        assert!(normalize_axes("t", &[0, -2], 2).is_err());
        assert_eq!(fmt_shape(&[4]), "(4,)");
    }
}
