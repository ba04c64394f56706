//! `linalg.norm`: vector norms over one axis, matrix norms over two, as MLX (and numpy).

use super::factor::svd;
use crate::array::Array;
use crate::ops::{
    abs, astype, expand_dims, max, min, multiply, not_equal, power, scalar, sqrt, squeeze, sum,
    transpose,
};
use kiln_base::shape::normalize_axis;
use kiln_base::{bail, ensure, Result, Scalar};

const OP: &str = "linalg::norm";

/// The `ord=` of a norm: a number (`inf` and `-inf` included) or a matrix norm's name.
#[derive(Debug, Clone, PartialEq)]
pub enum NormOrd {
    Num(f64),
    /// `'fro'`, `'nuc'` (other names are rejected).
    Name(String),
}

/// Vector or matrix norm of `a` over `axis` (see MLX's table). Without `ord` and `axis`,
/// the 2-norm of the flattened array; integers compute in float32.
pub fn norm(
    a: &Array,
    ord: Option<&NormOrd>,
    axis: Option<&[i64]>,
    keepdims: bool,
) -> Result<Array> {
    // Every norm here depends on complex entries only through their magnitudes.
    let x = if a.dtype().is_complex() { crate::ops::abs(a)? } else { a.clone() };
    let x = astype(&x, x.dtype().to_float())?;
    let axes: Vec<i64> = match axis {
        Some(axes) => axes.to_vec(),
        None if ord.is_none() => return l2(&x, None, keepdims),
        None => (0..x.ndim() as i64).collect(),
    };
    if let Some(NormOrd::Name(name)) = ord {
        ensure!(
            axes.len() == 2,
            Value,
            OP,
            "Norm '{name}' only supported for matrices, but received {} axis/axes.",
            axes.len()
        );
    }
    ensure!(axes.len() == 1 || axes.len() == 2, Value, OP, "Received too many axes for norm.");
    let mut norm_axes = Vec::with_capacity(2);
    for &ax in &axes {
        let ax = normalize_axis(OP, ax, x.ndim())?;
        ensure!(!norm_axes.contains(&ax), Value, OP, "Duplicate axes detected in reduction.");
        norm_axes.push(ax);
    }
    match (ord, norm_axes.as_slice()) {
        (None, _) => l2(&x, Some(&axes), keepdims),
        (Some(NormOrd::Num(p)), &[ax]) => vector_norm(&x, *p, ax as i64, keepdims),
        (Some(ord), &[row, col]) => matrix_norm(&x, ord, row, col, keepdims),
        _ => bail!(Value, OP, "Received too many axes for norm."),
    }
}

fn float(value: f64, like: &Array) -> Result<Array> {
    scalar(Scalar::Float(value), like.dtype())
}

/// `sqrt(sum(x^2))` over `axes` (all when `None`).
fn l2(x: &Array, axes: Option<&[i64]>, keepdims: bool) -> Result<Array> {
    sqrt(&sum(&multiply(x, x)?, axes, keepdims)?)
}

fn vector_norm(x: &Array, p: f64, axis: i64, keepdims: bool) -> Result<Array> {
    let ax = [axis];
    let axes = Some(&ax[..]);
    if p == f64::INFINITY {
        max(&abs(x)?, axes, keepdims)
    } else if p == f64::NEG_INFINITY {
        min(&abs(x)?, axes, keepdims)
    } else if p == 0.0 {
        let nonzero = astype(&not_equal(x, &float(0.0, x)?)?, x.dtype())?;
        sum(&nonzero, axes, keepdims)
    } else if p == 1.0 {
        sum(&abs(x)?, axes, keepdims)
    } else if p == 2.0 {
        l2(x, axes, keepdims)
    } else {
        let powered = sum(&power(&abs(x)?, &float(p, x)?)?, axes, keepdims)?;
        power(&powered, &float(1.0 / p, x)?)
    }
}

/// Matrix norm with rows along `row` and columns along `col`.
fn matrix_norm(x: &Array, ord: &NormOrd, row: usize, col: usize, keepdims: bool) -> Result<Array> {
    let (r, c) = (row as i64, col as i64);
    // Reductions keep both axes as size 1 until the end, so axis numbers stay valid.
    let finish = |y: Array| -> Result<Array> {
        if keepdims {
            Ok(y)
        } else {
            squeeze(&y, Some(&[r, c]))
        }
    };
    match ord {
        NormOrd::Name(name) if name == "fro" => l2(x, Some(&[r, c]), keepdims),
        NormOrd::Name(name) if name == "nuc" => {
            singular_values_reduce(x, row, col, keepdims, Reduce::Sum)
        }
        NormOrd::Name(name) => bail!(Value, OP, "Invalid ord value '{name}' for matrix norm."),
        NormOrd::Num(p) => {
            let p = *p;
            if p == 2.0 {
                return singular_values_reduce(x, row, col, keepdims, Reduce::Max);
            }
            if p == -2.0 {
                return singular_values_reduce(x, row, col, keepdims, Reduce::Min);
            }
            // 1 / -1: column sums (over rows); inf / -inf: row sums (over columns).
            let (summed, pick) = match p {
                _ if p == 1.0 || p == -1.0 => (r, c),
                _ if p.is_infinite() => (c, r),
                _ => bail!(Value, OP, "Invalid ord {p} for matrix norm."),
            };
            let sums = sum(&abs(x)?, Some(&[summed]), true)?;
            let picked = if p > 0.0 {
                max(&sums, Some(&[pick]), true)?
            } else {
                min(&sums, Some(&[pick]), true)?
            };
            finish(picked)
        }
    }
}

enum Reduce {
    Sum,
    Max,
    Min,
}

/// Sum, max or min of the singular values of the matrices along `row` and `col`.
fn singular_values_reduce(
    x: &Array,
    row: usize,
    col: usize,
    keepdims: bool,
    how: Reduce,
) -> Result<Array> {
    let n = x.ndim();
    let perm: Vec<i64> =
        (0..n).filter(|&i| i != row && i != col).chain([row, col]).map(|i| i as i64).collect();
    let moved = transpose(x, Some(&perm))?;
    let s = svd(&moved, false)?.swap_remove(0);
    let last = Some(&[-1i64][..]);
    let reduced = match how {
        Reduce::Sum => sum(&s, last, false)?,
        Reduce::Max => max(&s, last, false)?,
        Reduce::Min => min(&s, last, false)?,
    };
    if keepdims {
        expand_dims(&reduced, &[row.min(col) as i64, row.max(col) as i64])
    } else {
        Ok(reduced)
    }
}
