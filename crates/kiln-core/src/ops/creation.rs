//! Arrays made from nothing (or from another array's shape): constants, fills, ranges,
//! `eye`/`tri` masks and coordinate grids.

use super::elementwise::int_range;
use super::{
    add, astype, broadcast_to, divide, equal, less_equal, multiply, record, reshape, subtract,
};
use crate::array::Array;
use kiln_base::shape::{broadcast_shapes, Shape};
use kiln_base::{bail, ensure, DType, Primitive, Result, Scalar};

/// A 0-d array holding `value` converted to `dtype`.
pub fn scalar(value: Scalar, dtype: DType) -> Result<Array> {
    let bytes = scalar_bytes(value, dtype);
    Array::from_bytes(&bytes, &[], dtype)
}

/// The value of a one-element array as a scalar of its kind (exact: f64 holds every float
/// dtype's values). Evaluates the array.
pub fn scalar_value(a: &Array) -> Result<Scalar> {
    kiln_base::ensure!(a.size() == 1, Value, "item", "Expected one element, got {}.", a.size());
    let b = a.to_bytes()?;
    let word = |n: usize| {
        let mut w = [0u8; 8];
        w[..n].copy_from_slice(&b[..n]);
        u64::from_le_bytes(w)
    };
    let sext = |n: usize| ((word(n) << (64 - 8 * n)) as i64) >> (64 - 8 * n);
    Ok(match a.dtype() {
        DType::Bool => Scalar::Bool(b[0] != 0),
        DType::U8 | DType::U16 | DType::U32 | DType::U64 => Scalar::UInt(word(a.dtype().size())),
        DType::I8 | DType::I16 | DType::I32 | DType::I64 => Scalar::Int(sext(a.dtype().size())),
        DType::F16 => Scalar::Float(half::f16::from_bits(word(2) as u16).to_f64()),
        DType::BF16 => Scalar::Float(half::bf16::from_bits(word(2) as u16).to_f64()),
        DType::F32 => Scalar::Float(f32::from_bits(word(4) as u32) as f64),
        DType::F64 => Scalar::Float(f64::from_bits(word(8))),
        DType::C64 => {
            let part = |i: usize| f32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]) as f64;
            Scalar::Complex(part(0), part(4))
        }
    })
}

/// The bytes of `value` cast to `dtype` (C-style casts; floats saturate through i64).
fn scalar_bytes(value: Scalar, dtype: DType) -> Vec<u8> {
    use half::{bf16, f16};
    let (i, u, f) = (value.as_i64(), value.as_u64(), value.as_f64());
    let int = |v: i64| v.to_le_bytes();
    let uint = matches!(value, Scalar::UInt(_)) || matches!(value, Scalar::Bool(_));
    let wide = if uint { u as i64 } else { i };
    match dtype {
        DType::Bool => vec![value.as_bool() as u8],
        DType::U8 | DType::I8 => int(wide)[..1].to_vec(),
        DType::U16 | DType::I16 => int(wide)[..2].to_vec(),
        DType::U32 | DType::I32 => int(wide)[..4].to_vec(),
        DType::U64 => (if uint { u } else { i as u64 }).to_le_bytes().to_vec(),
        DType::I64 => int(wide).to_vec(),
        DType::F16 => f16::from_f64(f).to_le_bytes().to_vec(),
        DType::BF16 => bf16::from_f64(f).to_le_bytes().to_vec(),
        DType::F32 => (f as f32).to_le_bytes().to_vec(),
        DType::F64 => f.to_le_bytes().to_vec(),
        DType::C64 => [(f as f32).to_le_bytes(), (value.imag() as f32).to_le_bytes()].concat(),
    }
}

/// An array of `shape` filled with `value` (a broadcast view of one element).
pub fn full(shape: &[usize], value: Scalar, dtype: DType) -> Result<Array> {
    broadcast_to(&scalar(value, dtype)?, shape)
}

pub fn zeros(shape: &[usize], dtype: DType) -> Result<Array> {
    full(shape, Scalar::Int(0), dtype)
}

pub fn ones(shape: &[usize], dtype: DType) -> Result<Array> {
    full(shape, Scalar::Int(1), dtype)
}

/// `start, start + step, ...` below `stop` (numpy's length rule), in `dtype`.
pub fn arange(start: f64, stop: f64, step: f64, dtype: DType) -> Result<Array> {
    let op = "arange";
    ensure!(step != 0.0, Value, op, "Cannot compute length: step is zero.");
    ensure!(
        start.is_finite() && stop.is_finite() && step.is_finite(),
        Value,
        op,
        "Cannot compute length: start, stop and step must be finite."
    );
    ensure!(dtype != DType::Bool, Value, op, "Cannot make an arange of bool.");
    let len = ((stop - start) / step).ceil().max(0.0);
    if len > (i32::MAX as f64) {
        bail!(Value, op, "Maximum size exceeded ({len} elements).");
    }
    let (start, step) = if dtype.is_float() {
        (Scalar::Float(start), Scalar::Float(step))
    } else {
        (Scalar::Int(start as i64), Scalar::Int(step as i64))
    };
    record(Primitive::Arange { start, step, len: len as usize, dtype }, vec![])
}

/// Zeros with the shape (and, unless given, the dtype) of `x`.
pub fn zeros_like(x: &Array, dtype: Option<DType>) -> Result<Array> {
    zeros(x.shape(), dtype.unwrap_or(x.dtype()))
}

/// Ones with the shape (and, unless given, the dtype) of `x`.
pub fn ones_like(x: &Array, dtype: Option<DType>) -> Result<Array> {
    ones(x.shape(), dtype.unwrap_or(x.dtype()))
}

/// `vals` converted to `dtype` (default: the dtype of `x`) and broadcast to the shape of `x`.
pub fn full_like(x: &Array, vals: &Array, dtype: Option<DType>) -> Result<Array> {
    let vals = astype(vals, dtype.unwrap_or(x.dtype()))?;
    broadcast_shapes("full_like", vals.shape(), x.shape())?;
    broadcast_to(&vals, x.shape())
}

/// A 0-d array of `value` in `dtype`; an integer that does not fit an integer dtype is an
/// error (`full_like(int8_array, 300)`), a float converts as C does.
pub fn scalar_checked(op: &'static str, value: Scalar, dtype: DType) -> Result<Array> {
    let int = match value {
        Scalar::Int(i) => Some(i as i128),
        Scalar::UInt(u) => Some(u as i128),
        _ => None,
    };
    if let Some(i) = int.filter(|_| dtype.is_integer()) {
        ensure!(
            int_range(dtype).contains(&i),
            Value,
            op,
            "Converting {i} to {dtype} would result in overflow."
        );
    }
    scalar(value, dtype)
}

/// `num` evenly spaced values from `start` to `stop` (excluded unless `endpoint`). As MLX:
/// `(1 - t) * start + t * stop` with `t = i / (num - 1)` computed in float32 (float64 for a
/// float64 result), then converted to `dtype` (integers truncate).
pub fn linspace(start: f64, stop: f64, num: i64, endpoint: bool, dtype: DType) -> Result<Array> {
    let op = "linspace";
    ensure!(num >= 0, Value, op, "number of samples, {num}, must be non-negative.");
    ensure!(num <= i32::MAX as i64, Value, op, "Maximum size exceeded ({num} samples).");
    let compute = if dtype == DType::F64 { DType::F64 } else { DType::F32 };
    if num <= 1 {
        let one = reshape(&scalar(Scalar::Float(start), compute)?, &[1])?;
        let one = super::slice(&one, &[Some(0)], &[Some(num)], &[1])?;
        return astype(&one, dtype);
    }
    let steps = if endpoint { num - 1 } else { num };
    let t = divide(
        &arange(0.0, num as f64, 1.0, compute)?,
        &scalar(Scalar::Float(steps as f64), compute)?,
    )?;
    let f = |v: f64| scalar(Scalar::Float(v), compute);
    let t_bar = subtract(&f(1.0)?, &t)?;
    let out = add(&multiply(&t_bar, &f(start)?)?, &multiply(&t, &f(stop)?)?)?;
    astype(&out, dtype)
}

/// Row and column indices of an `n x m` grid as int64 `(n, 1)` and `(m,)` arrays.
fn grid(n: usize, m: usize) -> Result<(Array, Array)> {
    let rows = reshape(&arange(0.0, n as f64, 1.0, DType::I64)?, &[n as i64, 1])?;
    Ok((rows, arange(0.0, m as f64, 1.0, DType::I64)?))
}

/// Bool `n x m` mask of `j - i <= k` (the lower triangle through diagonal `k`).
pub(crate) fn tri_mask(n: usize, m: usize, k: i64) -> Result<Array> {
    // Diagonals beyond the matrix all give the same mask, so k can be clamped (no overflow).
    let k = k.clamp(-(n as i64) - 1, m as i64 + 1);
    let (rows, cols) = grid(n, m)?;
    less_equal(&subtract(&cols, &rows)?, &scalar(Scalar::Int(k), DType::I64)?)
}

/// Ones on diagonal `k` (above the main one when positive) of an `n x m` matrix.
pub fn eye(n: i64, m: Option<i64>, k: i64, dtype: DType) -> Result<Array> {
    let m = m.unwrap_or(n);
    ensure!(n >= 0 && m >= 0, Value, "eye", "N and M must be positive integers.");
    let (n, m) = (n as usize, m as usize);
    let k = k.clamp(-(n as i64) - 1, m as i64 + 1);
    let (rows, cols) = grid(n, m)?;
    let mask = equal(&subtract(&cols, &rows)?, &scalar(Scalar::Int(k), DType::I64)?)?;
    astype(&mask, dtype)
}

/// The `n x n` identity matrix.
pub fn identity(n: i64, dtype: DType) -> Result<Array> {
    eye(n, Some(n), 0, dtype)
}

/// Ones at and below diagonal `k` of an `n x m` matrix (negative sizes count as 0, as MLX).
pub fn tri(n: i64, m: Option<i64>, k: i64, dtype: DType) -> Result<Array> {
    let m = m.unwrap_or(n).max(0) as usize;
    astype(&tri_mask(n.max(0) as usize, m, k)?, dtype)
}

/// Coordinate arrays from 1-d coordinate vectors (other inputs are flattened first).
/// `ij` indexing gives shape `(len0, len1, ...)`, `xy` swaps the first two; `sparse` keeps
/// size-1 axes instead of broadcasting.
pub fn meshgrid(arrays: &[Array], sparse: bool, indexing: &str) -> Result<Vec<Array>> {
    let op = "meshgrid";
    ensure!(
        indexing == "xy" || indexing == "ij",
        Value,
        op,
        "Invalid indexing value. Valid values are 'xy' and 'ij'."
    );
    let n = arrays.len();
    let mut out = Vec::with_capacity(n);
    for (i, a) in arrays.iter().enumerate() {
        let mut shape = vec![1i64; n];
        // xy: the first array varies along axis 1, the second along axis 0.
        let axis = match (indexing, i) {
            ("xy", 0) if n > 1 => 1,
            ("xy", 1) => 0,
            _ => i,
        };
        shape[axis] = a.size() as i64;
        out.push(reshape(a, &shape)?);
    }
    if sparse {
        return Ok(out);
    }
    let mut shape = Shape::new();
    for a in &out {
        shape = broadcast_shapes(op, &shape, a.shape())?;
    }
    out.iter().map(|a| broadcast_to(a, &shape)).collect()
}
