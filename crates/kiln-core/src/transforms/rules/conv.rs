//! Gradients and batching of convolutions, composed of the `Conv` primitive itself.
//!
//! Per spatial axis the forward reads `xpad[o * stride + k * kdil]`, where `xpad` is the
//! input dilated by `idil` and padded by `(lo, hi)`. Its two transposes are convolutions too:
//! - input: the cotangent dilated by `stride`, correlated with the flipped kernel (dilation
//!   `kdil`), read with stride `idil` (undoing the input dilation), padding shifted so output
//!   position `i` lands on `xpad[lo + i * idil]`;
//! - weight: the input (batch and channels swapped) correlated with the cotangent as the
//!   kernel (dilation `stride`), read with stride `kdil`.
//!
//! Groups stay groups: the weight's in/out channels swap inside each group, and the weight
//! gradient folds the batch into the channel axis of each group.

use crate::array::Array;
use crate::ops::{self, record};
use kiln_base::{ConvParams, Primitive, Result};

fn dims(shape: &[usize]) -> Vec<i64> {
    shape.iter().map(|&d| d as i64).collect()
}

/// `x` reversed along its spatial axes (1..ndim-1).
fn flip_spatial(x: &Array) -> Result<Array> {
    let n = x.ndim();
    let steps: Vec<i64> = (0..n).map(|i| if i == 0 || i == n - 1 { 1 } else { -1 }).collect();
    ops::slice(x, &vec![None; n], &vec![None; n], &steps)
}

/// Cotangent of the input `(N, S..., C_in)` of `conv(x, w)` given the output cotangent `g`.
fn input_grad(p: &ConvParams, x: &Array, w: &Array, g: &Array) -> Result<Array> {
    let d = p.spatial();
    let groups = p.groups;
    let (c_out, c_in_g) = (w.shape()[0], w.shape()[d + 1]);
    // (C_out, K..., C_in/G) -> (C_in, K..., C_out/G), swapping in/out inside each group.
    let mut split = vec![groups as i64, (c_out / groups) as i64];
    split.extend(dims(&w.shape()[1..]));
    let mut perm: Vec<i64> = vec![0, d as i64 + 2];
    perm.extend((2..d as i64 + 2).collect::<Vec<_>>());
    perm.push(1);
    let mut merged = vec![(groups * c_in_g) as i64];
    merged.extend(dims(&w.shape()[1..d + 1]));
    merged.push((c_out / groups) as i64);
    let wt = ops::reshape(&ops::transpose(&ops::reshape(w, &split)?, Some(&perm))?, &merged)?;
    let mut padding_lo = Vec::with_capacity(d);
    let mut padding_hi = Vec::with_capacity(d);
    for i in 0..d {
        let (len, k, o) = (x.shape()[i + 1], w.shape()[i + 1], g.shape()[i + 1]);
        let k_ext = p.kernel_extent(i, k) as i64;
        let lo = k_ext - 1 - p.padding_lo[i];
        // Read exactly (len - 1) * idil + k_ext positions: one output per input position.
        let total = (len as i64 - 1).max(0) * p.input_dilation[i] as i64 + k_ext;
        let g_dil = if o == 0 { 0 } else { (o as i64 - 1) * p.stride[i] as i64 + 1 };
        padding_lo.push(lo);
        padding_hi.push(total - g_dil - lo);
    }
    let back = ConvParams {
        stride: p.input_dilation.clone(),
        padding_lo,
        padding_hi,
        kernel_dilation: p.kernel_dilation.clone(),
        input_dilation: p.stride.clone(),
        groups,
        flip: !p.flip,
    };
    record(Primitive::Conv(back), vec![g.clone(), wt])
}

/// Cotangent of the weight `(C_out, K..., C_in/G)` of `conv(x, w)`.
fn weight_grad(p: &ConvParams, x: &Array, w: &Array, g: &Array) -> Result<Array> {
    let d = p.spatial();
    let groups = p.groups;
    let n = x.shape()[0];
    let c_in_g = w.shape()[d + 1];
    // x (N, S..., G * C_in/G) -> (C_in/G, S..., G * N): channels of group j are j*N..(j+1)*N.
    let mut split = dims(&x.shape()[..d + 1]);
    split.extend([groups as i64, c_in_g as i64]);
    let mut perm: Vec<i64> = vec![d as i64 + 2];
    perm.extend(1..d as i64 + 1);
    perm.extend([d as i64 + 1, 0]);
    let mut merged = vec![c_in_g as i64];
    merged.extend(dims(&x.shape()[1..d + 1]));
    merged.push((groups * n) as i64);
    let xt = ops::reshape(&ops::transpose(&ops::reshape(x, &split)?, Some(&perm))?, &merged)?;
    // g (N, O..., C_out) -> (C_out, O..., N).
    let mut gperm: Vec<i64> = vec![d as i64 + 1];
    gperm.extend(1..d as i64 + 1);
    gperm.push(0);
    let gt = ops::transpose(g, Some(&gperm))?;
    let mut padding_hi = Vec::with_capacity(d);
    for i in 0..d {
        let (len, k, o) = (x.shape()[i + 1], w.shape()[i + 1], g.shape()[i + 1]);
        let g_ext = if o == 0 { 0 } else { (o as i64 - 1) * p.stride[i] as i64 + 1 };
        let x_dil = if len == 0 { 0 } else { (len as i64 - 1) * p.input_dilation[i] as i64 + 1 };
        // Read exactly (k - 1) * kdil + g_ext positions: one output per kernel tap.
        let total = (k as i64 - 1) * p.kernel_dilation[i] as i64 + g_ext;
        padding_hi.push(total - x_dil - p.padding_lo[i]);
    }
    let back = ConvParams {
        stride: p.kernel_dilation.clone(),
        padding_lo: p.padding_lo.clone(),
        padding_hi,
        kernel_dilation: p.stride.clone(),
        input_dilation: p.input_dilation.clone(),
        groups,
        flip: false,
    };
    // (C_in/G, K..., C_out) -> (C_out, K..., C_in/G).
    let out = record(Primitive::Conv(back), vec![xt, gt])?;
    let mut operm: Vec<i64> = vec![d as i64 + 1];
    operm.extend(1..d as i64 + 1);
    operm.push(0);
    let out = ops::transpose(&out, Some(&operm))?;
    if p.flip {
        flip_spatial(&out)
    } else {
        Ok(out)
    }
}

pub(super) fn vjp(
    prim: &Primitive,
    primals: &[Array],
    g: &Array,
    argnums: &[usize],
) -> Result<Vec<Array>> {
    let Primitive::Conv(p) = prim else { unreachable!("dispatched by class") };
    let (x, w) = (&primals[0], &primals[1]);
    argnums
        .iter()
        .map(|&i| if i == 0 { input_grad(p, x, w, g) } else { weight_grad(p, x, w, g) })
        .collect()
}

/// Bilinear: conv(dx, w) + conv(x, dw).
pub(super) fn jvp(
    prim: &Primitive,
    primals: &[Array],
    tangents: &[Array],
    argnums: &[usize],
) -> Result<Vec<Array>> {
    let mut acc: Option<Array> = None;
    for (k, &i) in argnums.iter().enumerate() {
        let inputs = if i == 0 {
            vec![tangents[k].clone(), primals[1].clone()]
        } else {
            vec![primals[0].clone(), tangents[k].clone()]
        };
        let term = record(prim.clone(), inputs)?;
        acc = Some(match acc {
            Some(a) => ops::add(&a, &term)?,
            None => term,
        });
    }
    Ok(vec![acc.expect("jvp asks for at least one tangent")])
}

/// Batched convolution. A shared weight folds the batch into the images; a batched weight
/// folds it into the channel groups (batch entry `b` is groups `b*G..(b+1)*G`).
pub(super) fn vmap(prim: &Primitive, inputs: &[Array], axes: &[Option<usize>]) -> Result<Array> {
    let Primitive::Conv(p) = prim else { unreachable!("dispatched by class") };
    let d = p.spatial();
    let b = inputs.iter().zip(axes).find_map(|(x, a)| a.map(|a| x.shape()[a])).unwrap_or(1);
    let front = |i: usize| -> Result<Array> {
        match axes[i] {
            Some(a) => super::vmap::to_front(&inputs[i], a),
            None => {
                let mut shape = vec![b];
                shape.extend_from_slice(inputs[i].shape());
                ops::broadcast_to(&ops::expand_dims(&inputs[i], &[0])?, &shape)
            }
        }
    };
    if axes[1].is_none() {
        let x = front(0)?;
        let n = x.shape()[1];
        let mut folded: Vec<i64> = vec![(b * n) as i64];
        folded.extend(dims(&x.shape()[2..]));
        let y = record(prim.clone(), vec![ops::reshape(&x, &folded)?, inputs[1].clone()])?;
        let mut unfolded: Vec<i64> = vec![b as i64, n as i64];
        unfolded.extend(dims(&y.shape()[1..]));
        return ops::reshape(&y, &unfolded);
    }
    let (x, w) = (front(0)?, front(1)?);
    // x (B, N, S..., C) -> (N, S..., B * C); w (B, C_out, K..., C/G) -> (B * C_out, K..., C/G).
    let mut perm: Vec<i64> = (1..d as i64 + 2).collect();
    perm.extend([0, d as i64 + 2]);
    let xt = ops::transpose(&x, Some(&perm))?;
    let mut xs = dims(&xt.shape()[..d + 1]);
    xs.push((b * x.shape()[d + 2]) as i64);
    let xf = ops::reshape(&xt, &xs)?;
    let mut ws = vec![(b * w.shape()[1]) as i64];
    ws.extend(dims(&w.shape()[2..]));
    let wf = ops::reshape(&w, &ws)?;
    let batched = ConvParams { groups: p.groups * b, ..p.clone() };
    let y = record(Primitive::Conv(batched), vec![xf, wf])?;
    // (N, O..., B * C_out) -> (B, N, O..., C_out).
    let mut ys = dims(&y.shape()[..d + 1]);
    ys.extend([b as i64, w.shape()[1] as i64]);
    let y = ops::reshape(&y, &ys)?;
    let mut back: Vec<i64> = vec![d as i64 + 1];
    back.extend(0..d as i64 + 1);
    back.push(d as i64 + 2);
    ops::transpose(&y, Some(&back))
}
