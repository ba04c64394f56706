//! MLX's affine quantization: `quantize`, `dequantize` and `quantized_matmul`.
//!
//! Each group of `group_size` consecutive elements of a row shares a scale and a bias; each
//! element becomes a `bits`-bit integer, packed little-endian into a bit stream of uint32
//! words (element `i` of a row occupies stream bits `[i*bits, (i+1)*bits)`). The numbers
//! follow MLX's algorithm step by step in float32, so the packed words, scales and biases
//! equal MLX's for the same input. Everything is a composition of existing ops, so
//! gradients, vmap and every backend come for free.

use super::{
    abs, add, arange, astype, divide, equal, greater, matmul, max, maximum, min, multiply,
    negative, not_equal, reshape, round, scalar, subtract, sum, swapaxes, where_,
};
use crate::array::Array;
use kiln_base::shape::fmt_shape;
use kiln_base::{bail, ensure, DType, Result, Scalar};

/// Group sizes and bit widths MLX's affine mode supports.
const GROUP_SIZES: [usize; 3] = [32, 64, 128];
const BITS: [u32; 7] = [1, 2, 3, 4, 5, 6, 8];

fn check_params(op: &'static str, group_size: usize, bits: u32) -> Result<()> {
    ensure!(
        GROUP_SIZES.contains(&group_size),
        Value,
        op,
        "The requested group size {group_size} is not supported. The supported group sizes \
         are 32, 64, and 128."
    );
    ensure!(
        BITS.contains(&bits),
        Value,
        op,
        "The requested number of bits {bits} is not supported. The supported bits are 1, 2, \
         3, 4, 5, 6 and 8."
    );
    Ok(())
}

fn f32_scalar(v: f64) -> Result<Array> {
    scalar(Scalar::Float(v), DType::F32)
}

fn u32_scalar(v: u64) -> Result<Array> {
    scalar(Scalar::UInt(v), DType::U32)
}

/// `w` as a shape with its last axis replaced by `last`.
fn with_last(shape: &[usize], last: usize) -> Vec<i64> {
    let mut out: Vec<i64> = shape.iter().map(|&n| n as i64).collect();
    if let Some(l) = out.last_mut() {
        *l = last as i64;
    }
    out
}

/// Quantizes `w` (at least 2-d, real floating, last axis divisible by `group_size`):
/// returns the packed uint32 words (last axis `n * bits / 32`) and the scales and biases
/// (last axis `n / group_size`, `w`'s dtype).
pub fn quantize(w: &Array, group_size: usize, bits: u32) -> Result<(Array, Array, Array)> {
    let op = "quantize";
    check_params(op, group_size, bits)?;
    ensure!(
        w.ndim() >= 2,
        Value,
        op,
        "The matrix to be quantized must have at least 2 dimension but it has only {}.",
        w.ndim()
    );
    ensure!(
        w.dtype().is_float(),
        Value,
        op,
        "Only real floating types can be quantized but w has type {}.",
        w.dtype()
    );
    let n = w.shape()[w.ndim() - 1];
    if !n.is_multiple_of(group_size) {
        bail!(
            Value,
            op,
            "The last dimension of the matrix needs to be divisible by the quantization group \
             size {group_size}. However the provided  matrix has shape {}",
            fmt_shape(w.shape()).replace(' ', "")
        );
    }
    let groups = n / group_size;
    let rows: usize = w.shape()[..w.ndim() - 1].iter().product();
    let grouped = reshape(w, &[rows as i64, groups as i64, group_size as i64])?;
    let w_max = astype(&max(&grouped, Some(&[-1]), true)?, DType::F32)?;
    let w_min = astype(&min(&grouped, Some(&[-1]), true)?, DType::F32)?;
    let n_bins = f32_scalar(f64::from((1u32 << bits) - 1))?;
    let eps = f32_scalar(1e-7)?;
    let zero = f32_scalar(0.0)?;
    let (scales, biases) = if bits == 1 {
        // One bit: the two levels are the group's min and max.
        (maximum(&subtract(&w_max, &w_min)?, &eps)?, w_min)
    } else {
        // MLX's rule: anchor the level grid at the endpoint of larger magnitude so it is
        // represented exactly, and put 0 on the grid when possible (bias 0 then).
        let mask = greater(&abs(&w_min)?, &abs(&w_max)?)?;
        let scales = maximum(&divide(&subtract(&w_max, &w_min)?, &n_bins)?, &eps)?;
        let scales = where_(&mask, &scales, &negative(&scales)?)?;
        let edge = where_(&mask, &w_min, &w_max)?;
        let q0 = round(&divide(&edge, &scales)?, 0)?;
        let scales = where_(&not_equal(&q0, &zero)?, &divide(&edge, &q0)?, &scales)?;
        let biases = where_(&equal(&q0, &zero)?, &zero, &edge)?;
        (scales, biases)
    };
    let q = round(&divide(&subtract(&astype(&grouped, DType::F32)?, &biases)?, &scales)?, 0)?;
    let q = astype(&super::clip(&q, Some(&zero), Some(&n_bins))?, DType::U32)?;
    let packed = pack(&reshape(&q, &[rows as i64, n as i64])?, bits)?;
    let shape = w.shape();
    let packed = reshape(&packed, &with_last(shape, n * bits as usize / 32))?;
    let scales = reshape(&astype(&scales, w.dtype())?, &with_last(shape, groups))?;
    let biases = reshape(&astype(&biases, w.dtype())?, &with_last(shape, groups))?;
    Ok((packed, scales, biases))
}

/// Packs `(rows, n)` uint32 values of `bits` bits into `(rows, n * bits / 32)` words.
/// Widths dividing 32 shift whole values into place; the others (3, 5, 6 bits straddle word
/// boundaries) split each value into its bits, cut the bit stream into 32-bit words and sum
/// each word's set bits' powers of two.
fn pack(q: &Array, bits: u32) -> Result<Array> {
    let (rows, n) = (q.shape()[0], q.shape()[1]);
    let words = n * bits as usize / 32;
    if 32u32.is_multiple_of(bits) {
        let per = (32 / bits) as i64;
        let grouped = reshape(q, &[rows as i64, words as i64, per])?;
        let shifts = arange(0.0, 32.0, f64::from(bits), DType::U32)?;
        return sum(&super::left_shift(&grouped, &shifts)?, Some(&[-1]), false);
    }
    let shifts = arange(0.0, f64::from(bits), 1.0, DType::U32)?;
    let expanded = reshape(q, &[rows as i64, n as i64, 1])?;
    let bit = super::bitwise_and(&super::right_shift(&expanded, &shifts)?, &u32_scalar(1)?)?;
    let stream = reshape(&bit, &[rows as i64, words as i64, 32])?;
    let powers = super::left_shift(&u32_scalar(1)?, &arange(0.0, 32.0, 1.0, DType::U32)?)?;
    sum(&multiply(&stream, &powers)?, Some(&[-1]), false)
}

/// The `(rows, words * 32 / bits)` values packed by [`pack`].
fn unpack(packed: &Array, bits: u32) -> Result<Array> {
    let (rows, words) = (packed.shape()[0], packed.shape()[1]);
    let n = words * 32 / bits as usize;
    let expanded = reshape(packed, &[rows as i64, words as i64, 1])?;
    if 32u32.is_multiple_of(bits) {
        let shifts = arange(0.0, 32.0, f64::from(bits), DType::U32)?;
        let mask = u32_scalar((1u64 << bits) - 1)?;
        let values = super::bitwise_and(&super::right_shift(&expanded, &shifts)?, &mask)?;
        return reshape(&values, &[rows as i64, n as i64]);
    }
    let stream = super::bitwise_and(
        &super::right_shift(&expanded, &arange(0.0, 32.0, 1.0, DType::U32)?)?,
        &u32_scalar(1)?,
    )?;
    let bits_of = reshape(&stream, &[rows as i64, n as i64, bits as i64])?;
    let powers =
        super::left_shift(&u32_scalar(1)?, &arange(0.0, f64::from(bits), 1.0, DType::U32)?)?;
    sum(&multiply(&bits_of, &powers)?, Some(&[-1]), false)
}

/// Validates the packed matrix against its scales and biases; returns (rows, n, groups).
pub(super) fn check_packed(
    op: &'static str,
    w: &Array,
    scales: &Array,
    biases: &Array,
    group_size: usize,
    bits: u32,
) -> Result<(usize, usize, usize)> {
    check_params(op, group_size, bits)?;
    ensure!(w.dtype() == DType::U32, Value, op, "The matrix should be given as a uint32");
    ensure!(
        w.ndim() >= 2,
        Value,
        op,
        "The matrix must have at least 2 dimensions but it has only {}.",
        w.ndim()
    );
    ensure!(
        scales.shape() == biases.shape(),
        Value,
        op,
        "Shape of scales and biases does not match the matrix"
    );
    ensure!(
        scales.dtype().is_float(),
        Value,
        op,
        "Scales and biases must be floating point, got {}.",
        scales.dtype()
    );
    let words = w.shape()[w.ndim() - 1];
    let stream_bits = words.saturating_mul(32);
    let n = stream_bits / bits as usize;
    let groups = n / group_size;
    let mut want = w.shape().to_vec();
    if let Some(l) = want.last_mut() {
        *l = groups;
    }
    if scales.shape() != want.as_slice()
        || !stream_bits.is_multiple_of(bits as usize)
        || !n.is_multiple_of(group_size)
    {
        bail!(
            Value,
            op,
            "Shape of scales and biases does not match the matrix given the quantization \
             parameters. Provided matrix of shape {} and scales/biases of shape {} with \
             group_size={group_size} and bits={bits}.",
            fmt_shape(w.shape()).replace(' ', ""),
            fmt_shape(scales.shape()).replace(' ', "")
        );
    }
    let rows = w.shape()[..w.ndim() - 1].iter().product();
    Ok((rows, n, groups))
}

/// The values `w = scale * q + bias` of a quantized matrix, in `dtype` (the scales' dtype
/// when `None`).
pub fn dequantize(
    w: &Array,
    scales: &Array,
    biases: &Array,
    group_size: usize,
    bits: u32,
    dtype: Option<DType>,
) -> Result<Array> {
    let op = "dequantize";
    let (rows, n, groups) = check_packed(op, w, scales, biases, group_size, bits)?;
    if let Some(d) = dtype {
        ensure!(d.is_float(), Value, op, "The output dtype must be floating point, got {d}.");
    }
    let words = w.shape()[w.ndim() - 1];
    let q = unpack(&reshape(w, &[rows as i64, words as i64])?, bits)?;
    let q = reshape(&q, &[rows as i64, groups as i64, group_size as i64])?;
    let s = reshape(scales, &[rows as i64, groups as i64, 1])?;
    let b = reshape(biases, &[rows as i64, groups as i64, 1])?;
    let out = add(&multiply(&s, &astype(&q, scales.dtype())?)?, &b)?;
    let out = reshape(&out, &with_last(w.shape(), n))?;
    astype(&out, dtype.unwrap_or(scales.dtype()))
}

/// `x @ dequantize(w).T` (or `x @ dequantize(w)` when `transpose` is false).
pub fn quantized_matmul(
    x: &Array,
    w: &Array,
    scales: &Array,
    biases: &Array,
    transpose: bool,
    group_size: usize,
    bits: u32,
) -> Result<Array> {
    let op = "quantized_matmul";
    let (_, n, _) = check_packed(op, w, scales, biases, group_size, bits)?;
    let out_rows = w.shape()[w.ndim() - 2];
    let (k, cols) = if transpose { (n, out_rows) } else { (out_rows, n) };
    let last = x.shape().last().copied().unwrap_or(0);
    if x.ndim() == 0 || last != k {
        bail!(
            Value,
            op,
            "Last dimension of first input with shape (..., {last}) does not match the \
             expanded quantized matrix ({k}, {cols}) computed from shape {} with \
             group_size={group_size}, bits={bits} and transpose={transpose}",
            fmt_shape(w.shape()).replace(' ', "")
        );
    }
    let dtype = x.dtype().promote(scales.dtype()).to_float();
    let (x, scales, biases) = (astype(x, dtype)?, astype(scales, dtype)?, astype(biases, dtype)?);
    // 2-d weights: one kernel, whatever the rows. A few rows (a decode step) read the packed
    // weights in place; many rows are bound by the product's arithmetic, and the kernels
    // dequantize a panel of weights at a time for a dense product (faer on the CPU, cuBLAS
    // on the GPU), so the dense weights never exist whole and no elementwise pass runs over
    // them (the composition's four passes cost three times the product on the CPU).
    if transpose && w.ndim() == 2 && dtype != DType::F64 {
        let fop = kiln_base::FastOp::QuantizedMatmul { group_size, bits };
        return super::record(kiln_base::Primitive::Fast(fop), vec![x, w.clone(), scales, biases]);
    }
    composed_quantized_matmul(&[x, w.clone(), scales, biases], transpose, group_size, bits)
}

/// `quantized_matmul` as dequantize-then-matmul over `[x, w, scales, biases]` (one float
/// dtype): the many-row path, and the definition the fused kernel's transforms follow.
pub(crate) fn composed_quantized_matmul(
    inputs: &[Array],
    transpose: bool,
    group_size: usize,
    bits: u32,
) -> Result<Array> {
    let [x, w, scales, biases] = inputs else {
        bail!(Value, "quantized_matmul", "Expected x, w, scales and biases.");
    };
    let dense = dequantize(w, scales, biases, group_size, bits, Some(x.dtype()))?;
    let dense = if transpose { swapaxes(&dense, -1, -2)? } else { dense };
    matmul(x, &dense)
}
