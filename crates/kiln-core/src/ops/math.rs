//! The math ops MLX defines as compositions of the elementwise primitives (whose functions
//! `elementwise.rs` generates from the op tables): square, reciprocal, the `isnan` family, `nan_to_num`, `round` with
//! decimals, `clip`, `isclose`/`allclose`/`array_equal`, `divmod` and `stop_gradient`.

use super::*;
use crate::array::Array;
use kiln_base::shape::broadcast_shapes;
use kiln_base::{bail, DType, DTypeKind, Primitive, Result, Scalar, UnaryOp};

/// `x * x` (bool stays bool, integers wrap).
pub fn square(x: &Array) -> Result<Array> {
    multiply(x, x)
}

/// `1 / x` in the float dtype of `x`.
pub fn reciprocal(x: &Array) -> Result<Array> {
    let dtype = x.dtype().to_float();
    super::divide(&scalar(Scalar::Float(1.0), dtype)?, &astype(x, dtype)?)
}

/// Round half to even to `decimals` places (negative: to tens, hundreds, ...). Integers keep
/// their dtype. Floats as MLX: `round(x * 10^d) * 10^-d` with both factors in the array's
/// dtype (so scales past the dtype's range give NaN).
pub fn round(x: &Array, decimals: i32) -> Result<Array> {
    let dtype = x.dtype();
    if decimals == 0 || (decimals > 0 && !dtype.is_inexact()) {
        return unary(UnaryOp::Round, x);
    }
    if !dtype.is_inexact() {
        // Integers (negative decimals) round in float64 as numpy does: x / 10^-d is
        // correctly rounded, so ties stay ties (exact below 2^53). Past 10^20 every
        // 64-bit integer rounds to 0, so the power is capped there (no overflow). float64
        // lives on the CPU (the GPU has none), so this runs there.
        let _host = crate::device::StreamScope::enter(crate::device::host_stream())?;
        let p = scalar(Scalar::Float(10f64.powi(decimals.saturating_neg().min(20))), DType::F64)?;
        let rounded = unary(UnaryOp::Round, &super::divide(&astype(x, DType::F64)?, &p)?)?;
        return astype(&multiply(&rounded, &p)?, dtype);
    }
    let (scale, inv) = if dtype == DType::F64 {
        let scale = 10f64.powi(decimals);
        (scale, 1.0 / scale)
    } else {
        // MLX's float arithmetic: scale = float(10^d), inverse = 1.0f / scale.
        let scale = 10f64.powi(decimals) as f32;
        (scale as f64, (1.0f32 / scale) as f64)
    };
    let scaled = multiply(x, &scalar(Scalar::Float(scale), dtype)?)?;
    let rounded = unary(UnaryOp::Round, &scaled)?;
    multiply(&rounded, &scalar(Scalar::Float(inv), dtype)?)
}

/// A 0-d array of `value` in float `dtype`.
fn float_scalar(value: f64, dtype: DType) -> Result<Array> {
    scalar(Scalar::Float(value), dtype)
}

/// An all-`value` bool array shaped like `x` (the answer of `isnan` for integers).
fn constant_bool(x: &Array, value: bool) -> Result<Array> {
    broadcast_to(&scalar(Scalar::Bool(value), DType::Bool)?, x.shape())
}

/// True where `x` is NaN (never for integers and bool).
pub fn isnan(x: &Array) -> Result<Array> {
    if !x.dtype().is_inexact() {
        return constant_bool(x, false);
    }
    not_equal(x, x)
}

/// True where `x` is +inf or -inf.
pub fn isinf(x: &Array) -> Result<Array> {
    if !x.dtype().is_inexact() {
        return constant_bool(x, false);
    }
    equal(&abs(x)?, &float_scalar(f64::INFINITY, x.dtype())?)
}

/// True where `x` is +inf.
pub fn isposinf(x: &Array) -> Result<Array> {
    if !x.dtype().is_inexact() {
        return constant_bool(x, false);
    }
    equal(x, &float_scalar(f64::INFINITY, x.dtype())?)
}

/// True where `x` is -inf.
pub fn isneginf(x: &Array) -> Result<Array> {
    if !x.dtype().is_inexact() {
        return constant_bool(x, false);
    }
    equal(x, &float_scalar(f64::NEG_INFINITY, x.dtype())?)
}

/// True where `x` is neither NaN nor infinite (`|x| < inf` is false for both).
pub fn isfinite(x: &Array) -> Result<Array> {
    if !x.dtype().is_inexact() {
        return constant_bool(x, true);
    }
    less(&abs(x)?, &float_scalar(f64::INFINITY, x.dtype())?)
}

/// The largest finite value of a float dtype.
fn float_max(dtype: DType) -> f64 {
    match dtype {
        DType::F16 => 65504.0,
        DType::BF16 => 3.3895313892515355e38,
        DType::F32 => f32::MAX as f64,
        _ => f64::MAX,
    }
}

/// NaN -> `nan`, +inf -> `posinf`, -inf -> `neginf` (defaults: the dtype's largest and
/// lowest finite values). The replacements are converted to the dtype (so 1e10 is inf in
/// float16, as MLX). Integers and bool are returned unchanged.
pub fn nan_to_num(x: &Array, nan: f64, posinf: Option<f64>, neginf: Option<f64>) -> Result<Array> {
    let dtype = x.dtype();
    if dtype.is_complex() {
        bail!(Value, "nan_to_num", "Does not yet support given type: {dtype}.");
    }
    if !dtype.is_float() {
        return Ok(x.clone());
    }
    let posinf = posinf.unwrap_or(float_max(dtype));
    let neginf = neginf.unwrap_or(-float_max(dtype));
    let out = where_(&isnan(x)?, &float_scalar(nan, dtype)?, x)?;
    let out = where_(&isposinf(x)?, &float_scalar(posinf, dtype)?, &out)?;
    where_(&isneginf(x)?, &float_scalar(neginf, dtype)?, &out)
}

/// `minimum(maximum(x, a_min), a_max)` with either bound absent (not both). NaN in `x`
/// propagates.
pub fn clip(x: &Array, a_min: Option<&Array>, a_max: Option<&Array>) -> Result<Array> {
    if a_min.is_none() && a_max.is_none() {
        bail!(Value, "clip", "At most one of a_min and a_max may be None");
    }
    let mut out = x.clone();
    if let Some(lo) = a_min {
        out = maximum(&out, lo)?;
    }
    if let Some(hi) = a_max {
        out = minimum(&out, hi)?;
    }
    Ok(out)
}

/// `(a // b, a % b)` with Python's signs.
pub fn divmod(a: &Array, b: &Array) -> Result<(Array, Array)> {
    if a.dtype().promote(b.dtype()).is_complex() {
        bail!(Value, "divmod", "Complex type not supported.");
    }
    Ok((floor_divide(a, b)?, remainder(a, b)?))
}

/// `|a - b| <= atol + rtol * |b|` elementwise, with infinities equal only to themselves and
/// NaN equal to NaN when `equal_nan` (MLX's and numpy's rule).
pub fn isclose(a: &Array, b: &Array, rtol: f64, atol: f64, equal_nan: bool) -> Result<Array> {
    let dtype = a.dtype().promote(b.dtype());
    broadcast_shapes("isclose", a.shape(), b.shape())?;
    let (a, b) = (astype(a, dtype)?, astype(b, dtype)?);
    // |a - b| without unsigned wraparound (MLX's own formula wraps for uint inputs).
    let diff = if dtype.kind() == DTypeKind::Unsigned {
        super::subtract(&maximum(&a, &b)?, &minimum(&a, &b)?)?
    } else {
        abs(&super::subtract(&a, &b)?)?
    };
    // The tolerances are float32 as in MLX (float64 next to float64 inputs).
    let tol_dtype = DType::F32.promote(dtype);
    let rhs = add(
        &float_scalar(atol, tol_dtype)?,
        &multiply(&float_scalar(rtol, tol_dtype)?, &abs(&b)?)?,
    )?;
    let mut out = super::less_equal(&diff, &rhs)?;
    if dtype.is_float() {
        let any_inf = logical_or(&isinf(&a)?, &isinf(&b)?)?;
        let both_inf = logical_or(
            &logical_and(&isposinf(&a)?, &isposinf(&b)?)?,
            &logical_and(&isneginf(&a)?, &isneginf(&b)?)?,
        )?;
        out = logical_or(&logical_and(&out, &logical_not(&any_inf)?)?, &both_inf)?;
        if equal_nan {
            out = logical_or(&out, &logical_and(&isnan(&a)?, &isnan(&b)?)?)?;
        }
    }
    Ok(out)
}

/// True (0-d bool) when every element is true; true for empty arrays.
fn all_true(x: &Array) -> Result<Array> {
    let falses = sum(&logical_not(x)?, None, false)?;
    equal(&falses, &scalar(Scalar::Int(0), falses.dtype())?)
}

/// `isclose` everywhere (0-d bool).
pub fn allclose(a: &Array, b: &Array, rtol: f64, atol: f64, equal_nan: bool) -> Result<Array> {
    all_true(&isclose(a, b, rtol, atol, equal_nan)?)
}

/// True (0-d bool) when `a` and `b` have one shape and equal values (after promotion);
/// NaN equals NaN when `equal_nan`. Different shapes give false, not an error.
pub fn array_equal(a: &Array, b: &Array, equal_nan: bool) -> Result<Array> {
    if a.shape() != b.shape() {
        return scalar(Scalar::Bool(false), DType::Bool);
    }
    let dtype = a.dtype().promote(b.dtype());
    let (a, b) = (astype(a, dtype)?, astype(b, dtype)?);
    let mut eq = equal(&a, &b)?;
    if equal_nan && dtype.is_inexact() {
        eq = logical_or(&eq, &logical_and(&isnan(&a)?, &isnan(&b)?)?)?;
    }
    all_true(&eq)
}

/// The identity, as a primitive that transforms treat as a constant: gradients stop here.
pub fn stop_gradient(x: &Array) -> Result<Array> {
    record(Primitive::StopGradient, vec![x.clone()])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f32s(v: &[f32]) -> Array {
        Array::from_slice(v, &[v.len()]).unwrap()
    }

    #[test]
    fn compositions() {
        let x = f32s(&[f32::NAN, f32::INFINITY, f32::NEG_INFINITY, 1.5]);
        let out = nan_to_num(&x, 0.0, None, Some(-2.0)).unwrap();
        assert_eq!(out.to_vec::<f32>().unwrap(), vec![0.0, f32::MAX, -2.0, 1.5]);
        let fin = isfinite(&x).unwrap();
        assert_eq!(fin.to_bytes().unwrap(), vec![0, 0, 0, 1]);
        let r = round(&f32s(&[1.25, 2.675, 1234.5]), 1).unwrap();
        assert_eq!(r.to_vec::<f32>().unwrap(), vec![1.2, 2.7, 1234.5]);
        let i = Array::from_slice(&[15i32, 25, -15], &[3]).unwrap();
        assert_eq!(round(&i, -1).unwrap().to_vec::<i32>().unwrap(), vec![20, 20, -20]);
        let (q, m) = divmod(&i, &Array::from_slice(&[-4i32], &[]).unwrap()).unwrap();
        assert_eq!(q.to_vec::<i32>().unwrap(), vec![-4, -7, 3]);
        assert_eq!(m.to_vec::<i32>().unwrap(), vec![-1, -3, -3]);
    }

    #[test]
    fn closeness_and_equality() {
        let a = f32s(&[1.0, f32::NAN, f32::INFINITY, f32::INFINITY]);
        let b = f32s(&[1.0 + 1e-6, f32::NAN, f32::INFINITY, f32::NEG_INFINITY]);
        let c = isclose(&a, &b, 1e-5, 1e-8, false).unwrap();
        assert_eq!(c.to_bytes().unwrap(), vec![1, 0, 1, 0]);
        let c = isclose(&a, &b, 1e-5, 1e-8, true).unwrap();
        assert_eq!(c.to_bytes().unwrap(), vec![1, 1, 1, 0]);
        let u = Array::from_slice(&[1u8, 2], &[2]).unwrap();
        let v = Array::from_slice(&[2u8, 2], &[2]).unwrap();
        assert_eq!(isclose(&u, &v, 0.0, 1.0, false).unwrap().to_bytes().unwrap(), vec![1, 1]);
        assert_eq!(array_equal(&a, &a, true).unwrap().to_bytes().unwrap(), vec![1]);
        assert_eq!(array_equal(&a, &a, false).unwrap().to_bytes().unwrap(), vec![0]);
        assert_eq!(array_equal(&a, &u, false).unwrap().to_bytes().unwrap(), vec![0]);
        let e = f32s(&[]);
        assert_eq!(allclose(&e, &e, 1e-5, 1e-8, false).unwrap().to_bytes().unwrap(), vec![1]);
        assert!(clip(&a, None, None).is_err());
    }
}
