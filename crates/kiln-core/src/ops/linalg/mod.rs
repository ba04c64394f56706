//! Matrix products (`matmul`, `addmm`, `outer`, `inner`, `tensordot`) and, in the
//! submodules, the `mx.linalg` namespace: factorisations and solvers (`factor`), norms
//! (`norm`) and the cross product (`cross`).

mod cross;
mod eig;
mod factor;
mod norm;

pub use cross::cross;
pub use eig::{eig, eigvals};
pub use factor::{
    cholesky, cholesky_inv, det, eigh, eigvalsh, inv, lu, lu_factor, pinv, qr, slogdet, solve,
    solve_triangular, svd, tri_inv,
};
pub use norm::{norm, NormOrd};

use super::{
    add, astype, broadcast_to, expand_dims, multiply, record, reshape, scalar, squeeze, transpose,
};
use crate::array::Array;
use kiln_base::shape::{broadcast_shapes, fmt_shape, normalize_axis};
use kiln_base::{bail, ensure, Primitive, Result, Scalar};

/// numpy's `matmul`: 1-d operands gain and lose an axis, batch dims broadcast.
pub fn matmul(a: &Array, b: &Array) -> Result<Array> {
    let op = "matmul";
    ensure!(
        a.ndim() >= 1 && b.ndim() >= 1,
        Value,
        op,
        "Got 0-dimension input. Inputs must have at least one dimension."
    );
    let dtype = a.dtype().promote(b.dtype());
    if !dtype.is_inexact() {
        bail!(Value, op, "Only real floating point types are supported but {dtype} was given.");
    }
    let a1 = if a.ndim() == 1 { expand_dims(a, &[0])? } else { a.clone() };
    let b1 = if b.ndim() == 1 { expand_dims(b, &[-1])? } else { b.clone() };
    let (ra, rb) = (a1.ndim(), b1.ndim());
    ensure!(
        a1.shape()[ra - 1] == b1.shape()[rb - 2],
        Value,
        op,
        "Last dimension of first input with shape {} must match second to last dimension of \
         second input with shape {}.",
        fmt_shape(a.shape()),
        fmt_shape(b.shape())
    );
    if ra > 2 && rb == 2 && !crate::transforms::in_shapeless_trace() {
        // A stack of matrices times one matrix is one product with the batch folded into
        // the rows: one large GEMM, and its gradient for `b` is one product contracting
        // over batch and rows (not a batch of products summed afterwards). Shapeless traces
        // keep the batched form, whose shape follows new batch sizes.
        let m: usize = a1.shape()[..ra - 1].iter().product();
        let k = a1.shape()[ra - 1];
        let rows = reshape(&astype(&a1, dtype)?, &[m as i64, k as i64])?;
        let mut shape: Vec<i64> = a1.shape()[..ra - 1].iter().map(|&d| d as i64).collect();
        shape.push(b1.shape()[1] as i64);
        let folded = record(Primitive::Matmul, vec![rows, astype(&b1, dtype)?])?;
        let out = reshape(&folded, &shape)?;
        return if b.ndim() == 1 { squeeze(&out, Some(&[-1])) } else { Ok(out) };
    }
    let batch = broadcast_shapes(op, &a1.shape()[..ra - 2], &b1.shape()[..rb - 2])?;
    let with_batch = |x: &Array, r: usize| -> Result<Array> {
        let mut shape = batch.to_vec();
        shape.extend_from_slice(&x.shape()[r - 2..]);
        broadcast_to(&astype(x, dtype)?, &shape)
    };
    let mut out = record(Primitive::Matmul, vec![with_batch(&a1, ra)?, with_batch(&b1, rb)?])?;
    if b.ndim() == 1 {
        out = squeeze(&out, Some(&[-1]))?;
    }
    if a.ndim() == 1 {
        out = squeeze(&out, Some(&[if b.ndim() == 1 { -1 } else { -2 }]))?;
    }
    Ok(out)
}

/// `alpha * (a @ b) + beta * c`; `c` must broadcast to the product's shape.
pub fn addmm(c: &Array, a: &Array, b: &Array, alpha: f64, beta: f64) -> Result<Array> {
    let op = "addmm";
    let dtype = a.dtype().promote(b.dtype()).promote(c.dtype());
    if !dtype.is_inexact() {
        bail!(
            Value,
            op,
            "Only real floating point types are supported but {}, {} and {} were provided which \
             results in {dtype}, which is not a real floating point type.",
            a.dtype(),
            b.dtype(),
            c.dtype()
        );
    }
    let ab = matmul(&astype(a, dtype)?, &astype(b, dtype)?)?;
    let shape = broadcast_shapes(op, c.shape(), ab.shape())?;
    ensure!(
        shape.as_slice() == ab.shape(),
        Value,
        op,
        "input c must broadcast to the output shape"
    );
    let scale = |x: Array, k: f64| -> Result<Array> {
        if k == 1.0 {
            Ok(x)
        } else {
            multiply(&x, &scalar(Scalar::Float(k), dtype)?)
        }
    };
    add(&scale(ab, alpha)?, &scale(astype(c, dtype)?, beta)?)
}

/// Outer product of the flattened inputs: `(a.size, b.size)`.
pub fn outer(a: &Array, b: &Array) -> Result<Array> {
    multiply(&reshape(a, &[-1, 1])?, &reshape(b, &[1, -1])?)
}

/// Sum product over the last axes (a plain product when either is 0-d).
pub fn inner(a: &Array, b: &Array) -> Result<Array> {
    if a.ndim() == 0 || b.ndim() == 0 {
        return multiply(a, b);
    }
    ensure!(
        a.shape().last() == b.shape().last(),
        Value,
        "inner",
        "a and b must have the same last dimension."
    );
    tensordot(a, b, &TensordotAxes::Pairs(vec![-1], vec![-1]))
}

/// Which axes `tensordot` contracts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TensordotAxes {
    /// The last `n` axes of `a` with the first `n` of `b`.
    Count(i64),
    /// Axis `a_axes[i]` of `a` with `b_axes[i]` of `b`.
    Pairs(Vec<i64>, Vec<i64>),
}

/// Sum of products over the contracted axes; the result has `a`'s free axes, then `b`'s.
pub fn tensordot(a: &Array, b: &Array, axes: &TensordotAxes) -> Result<Array> {
    let op = "tensordot";
    let (ax_a, ax_b): (Vec<usize>, Vec<usize>) = match axes {
        TensordotAxes::Count(n) => {
            ensure!(*n >= 0, Value, op, "axis must be greater or equal to 0.");
            let n = *n as usize;
            ensure!(
                n <= a.ndim() && n <= b.ndim(),
                Value,
                op,
                "axis must be less than the number of dimensions of a and b."
            );
            ((a.ndim() - n..a.ndim()).collect(), (0..n).collect())
        }
        TensordotAxes::Pairs(xa, xb) => {
            ensure!(xa.len() == xb.len(), Value, op, "axes must have the same size.");
            let norm = |axes: &[i64], ndim| -> Result<Vec<usize>> {
                let out: Vec<usize> =
                    axes.iter().map(|&x| normalize_axis(op, x, ndim)).collect::<Result<_>>()?;
                let mut sorted = out.clone();
                sorted.sort_unstable();
                sorted.dedup();
                ensure!(sorted.len() == out.len(), Value, op, "Repeated axis in {axes:?}.");
                Ok(out)
            };
            (norm(xa, a.ndim())?, norm(xb, b.ndim())?)
        }
    };
    for (&i, &j) in ax_a.iter().zip(&ax_b) {
        ensure!(
            a.shape()[i] == b.shape()[j],
            Value,
            op,
            "a and b must have the same shape on the contracted axes."
        );
    }
    let free_a: Vec<usize> = (0..a.ndim()).filter(|i| !ax_a.contains(i)).collect();
    let free_b: Vec<usize> = (0..b.ndim()).filter(|i| !ax_b.contains(i)).collect();
    let size =
        |x: &Array, axes: &[usize]| axes.iter().map(|&i| x.shape()[i] as i64).product::<i64>();
    let k = size(a, &ax_a);
    let perm_a: Vec<i64> = free_a.iter().chain(&ax_a).map(|&i| i as i64).collect();
    let perm_b: Vec<i64> = ax_b.iter().chain(&free_b).map(|&i| i as i64).collect();
    let a2 = reshape(&transpose(a, Some(&perm_a))?, &[size(a, &free_a), k])?;
    let b2 = reshape(&transpose(b, Some(&perm_b))?, &[k, size(b, &free_b)])?;
    let out = matmul(&a2, &b2)?;
    let shape: Vec<i64> = free_a
        .iter()
        .map(|&i| a.shape()[i] as i64)
        .chain(free_b.iter().map(|&i| b.shape()[i] as i64))
        .collect();
    reshape(&out, &shape)
}
