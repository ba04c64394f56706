//! Arrays made from nothing: constants, fills and ranges.

use super::{broadcast_to, record};
use crate::array::Array;
use kiln_base::{bail, ensure, DType, Primitive, Result, Scalar};

/// A 0-d array holding `value` converted to `dtype`.
pub fn scalar(value: Scalar, dtype: DType) -> Result<Array> {
    let bytes = scalar_bytes(value, dtype);
    Array::from_bytes(&bytes, &[], dtype)
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
