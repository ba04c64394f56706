//! `pad`: numpy's modes as MLX offers them. Constant padding writes the input into a filled
//! array (SliceUpdate); edge, reflect and symmetric padding take, along each padded axis, the
//! source position of every output position (a gather with a host-computed index).

use super::{astype, broadcast_to, record, reshape, take};
use crate::array::Array;
use kiln_base::shape::{checked_size, fmt_shape};
use kiln_base::{bail, ensure, Primitive, Result, Scalar};

/// How `pad` fills the new elements.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PadMode {
    /// A constant value.
    Constant,
    /// The nearest edge element.
    Edge,
    /// Mirrored at the edge, the edge itself not repeated (`3 2 | 1 2 3 | 2 1`).
    Reflect,
    /// Mirrored at the edge, the edge repeated (`2 1 | 1 2 3 | 3 2`).
    Symmetric,
}

impl PadMode {
    /// Parses MLX's mode names.
    pub fn from_name(name: &str) -> Result<PadMode> {
        Ok(match name {
            "constant" => PadMode::Constant,
            "edge" => PadMode::Edge,
            "reflect" => PadMode::Reflect,
            "symmetric" => PadMode::Symmetric,
            _ => bail!(Value, "pad", "Invalid padding mode ({name}) passed to pad"),
        })
    }

    fn name(self) -> &'static str {
        match self {
            PadMode::Constant => "constant",
            PadMode::Edge => "edge",
            PadMode::Reflect => "reflect",
            PadMode::Symmetric => "symmetric",
        }
    }
}

/// Pads each axis with `widths[i] = (before, after)` elements (one pair for all axes when
/// `widths` has one entry). `value` (size 1, cast to x's dtype) fills constant padding.
pub fn pad(x: &Array, widths: &[(i64, i64)], mode: PadMode, value: &Array) -> Result<Array> {
    let op = "pad";
    let n = x.ndim();
    let widths: Vec<(i64, i64)> = match widths.len() {
        1 => vec![widths[0]; n],
        l if l == n => widths.to_vec(),
        _ => {
            bail!(Value, op, "Invalid number of padding sizes passed to pad with axes of size {n}")
        }
    };
    for (axis, &(lo, hi)) in widths.iter().enumerate() {
        ensure!(
            lo >= 0,
            Value,
            op,
            "Invalid low padding size ({lo}) passed to pad for axis {axis}. Padding sizes \
             must be non-negative"
        );
        ensure!(
            hi >= 0,
            Value,
            op,
            "Invalid high padding size ({hi}) passed to pad for axis {axis}. Padding sizes \
             must be non-negative"
        );
    }
    ensure!(
        value.size() == 1,
        Value,
        op,
        "The constant value must be a scalar, got shape {}.",
        fmt_shape(value.shape())
    );
    let widths: Vec<(usize, usize)> =
        widths.iter().map(|&(a, b)| (a as usize, b as usize)).collect();
    // The padded shape must exist (and, as in MLX, dims are int32).
    let mut shape = Vec::with_capacity(n);
    for (&d, &(lo, hi)) in x.shape().iter().zip(&widths) {
        match d.checked_add(lo).and_then(|t| t.checked_add(hi)) {
            Some(t) if t <= i32::MAX as usize => shape.push(t),
            _ => bail!(Value, op, "Padded size of an axis of size {d} is too large."),
        }
    }
    checked_size(op, &shape)?;
    if widths.iter().all(|&w| w == (0, 0)) {
        return Ok(x.clone());
    }
    if mode == PadMode::Constant {
        return pad_constant(x, &widths, value);
    }
    let mut out = x.clone();
    for (axis, &(lo, hi)) in widths.iter().enumerate() {
        if lo == 0 && hi == 0 {
            continue;
        }
        let dim = out.shape()[axis];
        if dim == 0 {
            // MLX fills edge padding of an empty axis with zeros; mirroring has no source.
            ensure!(
                mode == PadMode::Edge,
                Value,
                op,
                "Cannot pad empty axis {axis} using mode '{}'.",
                mode.name()
            );
            let mut w = vec![(0, 0); n];
            w[axis] = (lo, hi);
            let zero = super::scalar(Scalar::Int(0), x.dtype())?;
            out = pad_constant(&out, &w, &zero)?;
            continue;
        }
        let total = shape[axis];
        let src: Vec<i64> =
            (0..total).map(|i| source(mode, i as i64 - lo as i64, dim as i64)).collect();
        let index = Array::from_slice(&src, &[total])?;
        out = take(&out, &index, Some(axis as i64))?;
    }
    Ok(out)
}

/// The input position output position `j` (relative to the first input element) copies.
fn source(mode: PadMode, j: i64, dim: i64) -> i64 {
    match mode {
        PadMode::Constant | PadMode::Edge => j.clamp(0, dim - 1),
        PadMode::Reflect => {
            if dim == 1 {
                return 0;
            }
            let period = 2 * (dim - 1);
            let k = j.rem_euclid(period);
            if k < dim {
                k
            } else {
                period - k
            }
        }
        PadMode::Symmetric => {
            let period = 2 * dim;
            let k = j.rem_euclid(period);
            if k < dim {
                k
            } else {
                period - 1 - k
            }
        }
    }
}

fn pad_constant(x: &Array, widths: &[(usize, usize)], value: &Array) -> Result<Array> {
    let shape: Vec<usize> = x.shape().iter().zip(widths).map(|(&d, &(a, b))| d + a + b).collect();
    let value = reshape(&astype(value, x.dtype())?, &[])?;
    let filled = broadcast_to(&value, &shape)?;
    if x.size() == 0 {
        return Ok(filled);
    }
    let start = widths.iter().map(|w| w.0).collect();
    let prim = Primitive::SliceUpdate { start, step: vec![1; x.ndim()], len: x.shape().to_vec() };
    record(prim, vec![filled, x.clone()])
}
