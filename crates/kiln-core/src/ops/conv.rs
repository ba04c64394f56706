//! Convolutions with MLX's layouts (channels last): input `(N, ..., C_in)`, weight
//! `(C_out, ..., C_in / groups)`. One `Conv` primitive covers 1-3 spatial axes, strides,
//! asymmetric padding, kernel and input dilation, groups and kernel flipping; transposed
//! convolutions are compositions of it.

use super::{astype, record};
use crate::array::Array;
use kiln_base::{ensure, ConvParams, Primitive, Result};

const OP: &str = "conv";

/// General convolution; each per-axis argument has one entry per spatial axis.
#[allow(clippy::too_many_arguments)]
pub fn conv_general(
    input: &Array,
    weight: &Array,
    stride: &[usize],
    padding_lo: &[i64],
    padding_hi: &[i64],
    kernel_dilation: &[usize],
    input_dilation: &[usize],
    groups: usize,
    flip: bool,
) -> Result<Array> {
    for (x, what) in [(input, "input"), (weight, "weight")] {
        ensure!(
            x.dtype().is_float(),
            Value,
            OP,
            "Invalid {what} array with type {}. Convolution currently only supports floating \
             point types",
            x.dtype()
        );
    }
    ensure!(
        (3..=5).contains(&input.ndim()),
        Value,
        OP,
        "Only works for inputs with 1-3 spatial dimensions. The inputs must be in the format \
         [N, ..., C_in]"
    );
    let d = input.ndim() - 2;
    let check = |n: usize, what: &str| -> Result<()> {
        ensure!(n == d, Value, OP, "Invalid {what} with {n} values for {d}D convolution.");
        Ok(())
    };
    check(stride.len(), "stride")?;
    check(padding_lo.len(), "padding")?;
    check(padding_hi.len(), "padding")?;
    check(kernel_dilation.len(), "kernel dilation")?;
    check(input_dilation.len(), "input dilation")?;
    let dtype = input.dtype().promote(weight.dtype());
    let params = ConvParams {
        stride: stride.to_vec(),
        padding_lo: padding_lo.to_vec(),
        padding_hi: padding_hi.to_vec(),
        kernel_dilation: kernel_dilation.to_vec(),
        input_dilation: input_dilation.to_vec(),
        groups,
        flip,
    };
    record(Primitive::Conv(params), vec![astype(input, dtype)?, astype(weight, dtype)?])
}

/// Convolution with symmetric padding over the spatial axes the input has (`stride`,
/// `padding` and `dilation` have one entry per spatial axis).
fn conv_nd(
    input: &Array,
    weight: &Array,
    stride: &[usize],
    padding: &[i64],
    dilation: &[usize],
    groups: usize,
) -> Result<Array> {
    let ones = vec![1; stride.len()];
    conv_general(input, weight, stride, padding, padding, dilation, &ones, groups, false)
}

/// 1-d convolution: input `(N, L, C_in)`, weight `(C_out, K, C_in / groups)`.
pub fn conv1d(
    input: &Array,
    weight: &Array,
    stride: usize,
    padding: i64,
    dilation: usize,
    groups: usize,
) -> Result<Array> {
    conv_nd(input, weight, &[stride], &[padding], &[dilation], groups)
}

/// 2-d convolution: input `(N, H, W, C_in)`, weight `(C_out, KH, KW, C_in / groups)`.
pub fn conv2d(
    input: &Array,
    weight: &Array,
    stride: [usize; 2],
    padding: [i64; 2],
    dilation: [usize; 2],
    groups: usize,
) -> Result<Array> {
    conv_nd(input, weight, &stride, &padding, &dilation, groups)
}

/// 3-d convolution: input `(N, D, H, W, C_in)`, weight `(C_out, KD, KH, KW, C_in / groups)`.
pub fn conv3d(
    input: &Array,
    weight: &Array,
    stride: [usize; 3],
    padding: [i64; 3],
    dilation: [usize; 3],
    groups: usize,
) -> Result<Array> {
    conv_nd(input, weight, &stride, &padding, &dilation, groups)
}

/// Transposed convolution (the gradient of `conv` with respect to its input), as MLX builds
/// it: the input dilated by `stride`, padded by `dilated kernel - 1 - padding` (plus
/// `output_padding` at the end), convolved with the flipped kernel.
#[allow(clippy::too_many_arguments)]
fn conv_transpose_nd(
    input: &Array,
    weight: &Array,
    stride: &[usize],
    padding: &[i64],
    dilation: &[usize],
    output_padding: &[i64],
    groups: usize,
) -> Result<Array> {
    let d = stride.len();
    let (mut lo, mut hi) = (Vec::with_capacity(d), Vec::with_capacity(d));
    for i in 0..d {
        let k = weight.shape().get(i + 1).copied().unwrap_or(1) as i64;
        let extent = (k - 1).saturating_mul(dilation[i] as i64).saturating_add(1);
        lo.push(extent - 1 - padding[i]);
        hi.push(extent - 1 - padding[i] + output_padding[i]);
    }
    let ones = vec![1; d];
    conv_general(input, weight, &ones, &lo, &hi, dilation, stride, groups, true)
}

/// 1-d transposed convolution: input `(N, L, C_in)`, weight `(C_out, K, C_in / groups)`.
pub fn conv_transpose1d(
    input: &Array,
    weight: &Array,
    stride: usize,
    padding: i64,
    dilation: usize,
    output_padding: i64,
    groups: usize,
) -> Result<Array> {
    conv_transpose_nd(input, weight, &[stride], &[padding], &[dilation], &[output_padding], groups)
}

/// 2-d transposed convolution: input `(N, H, W, C_in)`, weight `(C_out, KH, KW, C_in / groups)`.
pub fn conv_transpose2d(
    input: &Array,
    weight: &Array,
    stride: [usize; 2],
    padding: [i64; 2],
    dilation: [usize; 2],
    output_padding: [i64; 2],
    groups: usize,
) -> Result<Array> {
    conv_transpose_nd(input, weight, &stride, &padding, &dilation, &output_padding, groups)
}

/// 3-d transposed convolution: input `(N, D, H, W, C_in)`, weight
/// `(C_out, KD, KH, KW, C_in / groups)`.
pub fn conv_transpose3d(
    input: &Array,
    weight: &Array,
    stride: [usize; 3],
    padding: [i64; 3],
    dilation: [usize; 3],
    output_padding: [i64; 3],
    groups: usize,
) -> Result<Array> {
    conv_transpose_nd(input, weight, &stride, &padding, &dilation, &output_padding, groups)
}
