//! Convolutions with MLX's layouts (channels last): input `(N, ..., C_in)`, weight
//! `(C_out, ..., C_in / groups)`. One `Conv` primitive covers 1-3 spatial axes, strides,
//! asymmetric padding, kernel and input dilation, groups and kernel flipping.

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
