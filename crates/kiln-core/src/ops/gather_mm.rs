//! Gathered matrix products (a mixture of experts' layers): `gather_mm` and the quantized
//! `gather_qmm`. Each records one fused primitive that reads every picked matrix in place
//! (kiln-cpu's and kiln-cuda's kernels); their transforms, and `gather_qmm` without
//! `transpose`, are the compositions below (take the matrices, then multiply).

use super::quantize::{check_packed, dequantize};
use super::{arange, astype, broadcast_to, matmul, reshape, swapaxes, take};
use crate::array::Array;
use kiln_base::shape::broadcast_shapes;
use kiln_base::{bail, ensure, DType, FastOp, Primitive, Result};

/// `x` as `(batch, rows, cols)`: its batch axes flattened (one matrix: batch 1).
fn flat_batch(x: &Array) -> Result<Array> {
    let s = x.shape();
    let nd = s.len();
    reshape(x, &[-1, s[nd - 2] as i64, s[nd - 1] as i64])
}

/// The flat index of every matrix of `x`, shaped as its batch axes.
fn every_matrix(x: &Array) -> Result<Array> {
    let batch = &x.shape()[..x.ndim() - 2];
    let n: usize = batch.iter().product();
    let shape: Vec<i64> = batch.iter().map(|&d| d as i64).collect();
    reshape(&arange(0.0, n as f64, 1.0, DType::U32)?, &shape)
}

/// The two index arrays as uint32 of their broadcast shape (`None`: every matrix of `x`).
fn index_pair(
    op: &'static str,
    a: &Array,
    b: &Array,
    lhs: Option<&Array>,
    rhs: Option<&Array>,
) -> Result<(Array, Array)> {
    let mut out = Vec::with_capacity(2);
    for (idx, x) in [(lhs, a), (rhs, b)] {
        let idx = match idx {
            Some(i) => {
                ensure!(i.dtype().is_integer(), Value, op, "Indices must be integers.");
                astype(i, DType::U32)?
            }
            None => every_matrix(x)?,
        };
        out.push(idx);
    }
    let shape = broadcast_shapes(op, out[0].shape(), out[1].shape())?;
    Ok((broadcast_to(&out[0], &shape)?, broadcast_to(&out[1], &shape)?))
}

/// `a[lhs] @ b[rhs]`: matrices gathered by flat indices over the batch axes of `a` and `b`
/// (every matrix, in order, when an index array is None), the output's batch shape the
/// indices' broadcast shape. Both None: `a @ b`.
pub fn gather_mm(a: &Array, b: &Array, lhs: Option<&Array>, rhs: Option<&Array>) -> Result<Array> {
    let op = "gather_mm";
    ensure!(a.ndim() >= 2 && b.ndim() >= 2, Value, op, "Inputs must have at least 2 dimensions.");
    if lhs.is_none() && rhs.is_none() {
        return matmul(a, b);
    }
    let dtype = a.dtype().promote(b.dtype());
    ensure!(
        dtype.is_float() && dtype != DType::C64,
        Value,
        op,
        "Only real floating point types are supported but {dtype} was provided."
    );
    let (a, b) = (astype(a, dtype)?, astype(b, dtype)?);
    let (k, kb) = (a.shape()[a.ndim() - 1], b.shape()[b.ndim() - 2]);
    ensure!(
        k == kb,
        Value,
        op,
        "Last dimension of first input with shape {:?} must match second to last dimension \
         of second input with shape {:?}.",
        a.shape(),
        b.shape()
    );
    let (lhs, rhs) = index_pair(op, &a, &b, lhs, rhs)?;
    super::record(Primitive::Fast(FastOp::GatherMm), vec![a, b, lhs, rhs])
}

/// `gather_mm` as take-then-matmul over `[a, b, lhs, rhs]` (indices uint32 of one shape):
/// the GPU's path and the definition the fused kernel's transforms follow.
pub(crate) fn composed_gather_mm(inputs: &[Array]) -> Result<Array> {
    let [a, b, lhs, rhs] = inputs else {
        bail!(Value, "gather_mm", "Expected a, b and two index arrays.");
    };
    let a = take(&flat_batch(a)?, lhs, Some(0))?;
    matmul(&a, &take(&flat_batch(b)?, rhs, Some(0))?)
}

/// `x[lhs] @ dequantize(w[rhs]).T` (`dequantize(w[rhs])` when `transpose` is false) for
/// MLX's affine quantization: `w`, `scales` and `biases` share their batch axes (experts).
#[allow(clippy::too_many_arguments)]
pub fn gather_qmm(
    x: &Array,
    w: &Array,
    scales: &Array,
    biases: &Array,
    lhs: Option<&Array>,
    rhs: Option<&Array>,
    transpose: bool,
    group_size: usize,
    bits: u32,
) -> Result<Array> {
    let op = "gather_qmm";
    let (_, n, _) = check_packed(op, w, scales, biases, group_size, bits)?;
    ensure!(x.ndim() >= 2, Value, op, "x must have at least 2 dimensions.");
    let out_rows = w.shape()[w.ndim() - 2];
    let (k, _) = if transpose { (n, out_rows) } else { (out_rows, n) };
    let last = x.shape()[x.ndim() - 1];
    ensure!(
        last == k,
        Value,
        op,
        "Last dimension of first input with shape (..., {last}) does not match the expanded \
         quantized matrix with {k} rows."
    );
    let dtype = x.dtype().promote(scales.dtype()).to_float();
    let (x, scales, biases) = (astype(x, dtype)?, astype(scales, dtype)?, astype(biases, dtype)?);
    let (lhs, rhs) = index_pair(op, &x, w, lhs, rhs)?;
    let inputs = vec![x, w.clone(), scales, biases, lhs, rhs];
    if transpose && dtype != DType::F64 {
        let fop = FastOp::GatherQmm { group_size, bits };
        return super::record(Primitive::Fast(fop), inputs);
    }
    composed_gather_qmm(&inputs, transpose, group_size, bits)
}

/// `gather_qmm` as a composition over `[x, w, scales, biases, lhs, rhs]`: with fewer picks
/// than experts (a decode step) the packed matrices are gathered and only those
/// dequantized; otherwise every expert is dequantized once and the dense ones gathered.
pub(crate) fn composed_gather_qmm(
    inputs: &[Array],
    transpose: bool,
    group_size: usize,
    bits: u32,
) -> Result<Array> {
    let [x, w, scales, biases, lhs, rhs] = inputs else {
        bail!(Value, "gather_qmm", "Expected x, w, scales, biases and two index arrays.");
    };
    let experts: usize = w.shape()[..w.ndim() - 2].iter().product();
    let x = take(&flat_batch(x)?, lhs, Some(0))?;
    let dense = if rhs.size() < experts {
        let pick = |t: &Array| take(&flat_batch(t)?, rhs, Some(0));
        dequantize(&pick(w)?, &pick(scales)?, &pick(biases)?, group_size, bits, Some(x.dtype()))?
    } else {
        let all = dequantize(w, scales, biases, group_size, bits, Some(x.dtype()))?;
        take(&flat_batch(&all)?, rhs, Some(0))?
    };
    let dense = if transpose { swapaxes(&dense, -1, -2)? } else { dense };
    matmul(&x, &dense)
}
