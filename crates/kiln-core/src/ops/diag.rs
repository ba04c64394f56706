//! Diagonals and triangles of matrices: `tril`, `triu`, `diag`, `diagonal`. Built from
//! existing primitives: triangles select with a `tri` mask, a diagonal is a strided slice of
//! the flattened last two axes (a view when those axes are contiguous).

use super::creation::tri_mask;
use super::{concatenate, equal, reshape, scalar, slice, subtract, transpose, where_, zeros};
use crate::array::Array;
use kiln_base::shape::normalize_axis;
use kiln_base::{bail, ensure, DType, Result, Scalar};

/// The sizes of the last two axes; errors below two dimensions.
fn matrix_dims(op: &'static str, x: &Array) -> Result<(usize, usize)> {
    ensure!(x.ndim() >= 2, Value, op, "array must be at least 2-D");
    let s = x.shape();
    Ok((s[s.len() - 2], s[s.len() - 1]))
}

/// A zero of the dtype of `x` (broadcast by `where`).
fn zero_like(x: &Array) -> Result<Array> {
    scalar(Scalar::Int(0), x.dtype())
}

/// Elements at and below diagonal `k` of the last two axes; the rest zero.
pub fn tril(x: &Array, k: i64) -> Result<Array> {
    let (n, m) = matrix_dims("tril", x)?;
    where_(&tri_mask(n, m, k)?, x, &zero_like(x)?)
}

/// Elements at and above diagonal `k` of the last two axes; the rest zero.
pub fn triu(x: &Array, k: i64) -> Result<Array> {
    let (n, m) = matrix_dims("triu", x)?;
    where_(&tri_mask(n, m, k.saturating_sub(1))?, &zero_like(x)?, x)
}

/// Diagonal `offset` of the planes spanned by `axis1` and `axis2`, as a new last axis
/// (the other axes keep their order), as numpy and MLX.
pub fn diagonal(x: &Array, offset: i64, axis1: i64, axis2: i64) -> Result<Array> {
    let op = "diagonal";
    let nd = x.ndim();
    ensure!(
        nd >= 2,
        Value,
        op,
        "Array must have at least two dimensions, but got {nd} dimensions."
    );
    let ax1 = normalize_axis(op, axis1, nd).map_err(|_| index_error(op, "axis1", axis1, nd))?;
    let ax2 = normalize_axis(op, axis2, nd).map_err(|_| index_error(op, "axis2", axis2, nd))?;
    ensure!(ax1 != ax2, Value, op, "axis1 and axis2 cannot be the same axis");
    let mut perm: Vec<i64> = (0..nd).filter(|&a| a != ax1 && a != ax2).map(|a| a as i64).collect();
    perm.extend([ax1 as i64, ax2 as i64]);
    let (n1, n2) = (x.shape()[ax1] as i64, x.shape()[ax2] as i64);
    // Offsets past the matrix give an empty diagonal; clamping keeps the arithmetic small.
    let offset = offset.clamp(-n1, n2);
    let (off1, off2) = ((-offset).max(0), offset.max(0));
    let len = (n1 - off1).min(n2 - off2).max(0);
    let moved = transpose(x, Some(&perm))?;
    let mut flat_shape: Vec<i64> = moved.shape()[..nd - 2].iter().map(|&d| d as i64).collect();
    flat_shape.push(n1 * n2);
    let flat = reshape(&moved, &flat_shape)?;
    // Element (off1 + i, off2 + i) sits at (off1 + i) * n2 + off2 + i of the flattened plane.
    let start = off1 * n2 + off2;
    let stop = if len == 0 { start } else { start + (len - 1) * (n2 + 1) + 1 };
    let mut starts = vec![None; nd - 2];
    let mut stops = vec![None; nd - 2];
    let mut steps = vec![1; nd - 2];
    starts.push(Some(start));
    stops.push(Some(stop));
    steps.push(n2 + 1);
    slice(&flat, &starts, &stops, &steps)
}

fn index_error(op: &'static str, name: &str, axis: i64, nd: usize) -> kiln_base::Error {
    kiln_base::Error::Index {
        op,
        msg: format!("Invalid {name} {axis} for array with {nd} dimensions."),
    }
}

/// 1-d input: a square matrix with `x` on diagonal `k`. 2-d input: its diagonal `k`.
pub fn diag(x: &Array, k: i64) -> Result<Array> {
    let op = "diag";
    match x.ndim() {
        1 => {
            let len = x.shape()[0];
            let Some(n) = usize::try_from(k.unsigned_abs()).ok().and_then(|a| a.checked_add(len))
            else {
                bail!(Value, op, "Diagonal {k} is too far from the main one.");
            };
            ensure!(n <= i32::MAX as usize, Value, op, "Result of {n} x {n} is too large.");
            // x padded with |k| zeros: the value for row i (k >= 0) or column j (k < 0).
            let padded = concatenate(&[x.clone(), zeros(&[n - len], x.dtype())?], 0)?;
            let values = if k >= 0 {
                reshape(&padded, &[n as i64, 1])?
            } else {
                reshape(&padded, &[1, n as i64])?
            };
            let rows = reshape(&super::arange(0.0, n as f64, 1.0, DType::I64)?, &[n as i64, 1])?;
            let cols = super::arange(0.0, n as f64, 1.0, DType::I64)?;
            let on = equal(&subtract(&cols, &rows)?, &scalar(Scalar::Int(k), DType::I64)?)?;
            where_(&on, &values, &zero_like(x)?)
        }
        2 => diagonal(x, k, 0, 1),
        nd => bail!(Value, op, "array must be 1-D or 2-D, got array with {nd} dimensions."),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ints(n: i32, shape: &[usize]) -> Array {
        Array::from_slice(&(0..n).collect::<Vec<_>>(), shape).unwrap()
    }

    #[test]
    fn diagonals() {
        let x = ints(12, &[3, 4]);
        assert_eq!(diag(&x, 0).unwrap().to_vec::<i32>().unwrap(), vec![0, 5, 10]);
        assert_eq!(diag(&x, 2).unwrap().to_vec::<i32>().unwrap(), vec![2, 7]);
        assert_eq!(diag(&x, -1).unwrap().to_vec::<i32>().unwrap(), vec![4, 9]);
        assert_eq!(diag(&x, 10).unwrap().shape(), &[0]);
        assert_eq!(diag(&x, i64::MIN).unwrap().shape(), &[0]);
        let y = ints(24, &[2, 3, 4]);
        let d = diagonal(&y, -1, 2, 0).unwrap();
        assert_eq!(d.shape(), &[3, 2]);
        assert_eq!(d.to_vec::<i32>().unwrap(), vec![1, 14, 5, 18, 9, 22]);
        let m = diag(&ints(3, &[3]), -1).unwrap();
        assert_eq!(
            m.to_vec::<i32>().unwrap(),
            vec![0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 2, 0]
        );
        assert!(diagonal(&y, 0, 1, -2).is_err());
        assert!(matches!(diagonal(&y, 0, 0, 3), Err(kiln_base::Error::Index { .. })));
    }

    #[test]
    fn triangles() {
        let x = ints(6, &[2, 3]);
        assert_eq!(tril(&x, 0).unwrap().to_vec::<i32>().unwrap(), vec![0, 0, 0, 3, 4, 0]);
        assert_eq!(triu(&x, 1).unwrap().to_vec::<i32>().unwrap(), vec![0, 1, 2, 0, 0, 5]);
        assert_eq!(triu(&x, i64::MIN).unwrap().to_vec::<i32>().unwrap(), vec![0, 1, 2, 3, 4, 5]);
        assert!(tril(&ints(3, &[3]), 0).is_err());
    }
}
