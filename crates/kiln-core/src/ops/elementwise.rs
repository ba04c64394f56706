//! Elementwise front end: dtype rules from the facts table, promotion, broadcasting.

use super::{broadcast_to, record};
use crate::array::Array;
use kiln_base::shape::broadcast_shapes;
use kiln_base::{bail, BinaryOp, DType, DTypeKind, Domain, Primitive, Result, Scalar, UnaryOp};

/// Converts to `dtype`; the same array when it already has it.
pub fn astype(x: &Array, dtype: DType) -> Result<Array> {
    if x.dtype() == dtype {
        return Ok(x.clone());
    }
    record(Primitive::AsType(dtype), vec![x.clone()])
}

/// Applies a one-input op under its facts row's dtype rule.
pub fn unary(op: UnaryOp, x: &Array) -> Result<Array> {
    let facts = op.facts();
    let x = match facts.domain {
        Domain::Any => x.clone(),
        Domain::Numeric => {
            if x.dtype() == DType::Bool {
                bail!(Value, facts.name, "Not supported for bool, use logical_not instead.");
            }
            x.clone()
        }
        Domain::Float => astype(x, x.dtype().to_float())?,
        Domain::Bool => astype(x, DType::Bool)?,
        // bitwise_invert is the one integer-only unary op (MLX's wording).
        Domain::Integer => {
            if x.dtype().is_inexact() {
                bail!(Value, facts.name, "Bitwise inverse only allowed on integer types.");
            }
            x.clone()
        }
    };
    if x.dtype() == DType::C64 {
        return super::complex::complex_unary(op, &x);
    }
    let (float, kind) = (x.dtype().is_float(), x.dtype().kind());
    let identity = match op {
        UnaryOp::Abs => kind != DTypeKind::Signed && !float, // |x| of unsigned and bool
        UnaryOp::Floor | UnaryOp::Ceil | UnaryOp::Round => !float, // already integral
        UnaryOp::Sign => kind == DTypeKind::Bool,
        _ => false,
    };
    if identity {
        return Ok(x);
    }
    record(Primitive::Unary(op), vec![x])
}

/// Applies a two-input op: promote, broadcast, then record.
pub fn binary(op: BinaryOp, a: &Array, b: &Array) -> Result<Array> {
    let facts = op.facts();
    let promoted = a.dtype().promote(b.dtype());
    let dtype = match facts.domain {
        Domain::Any | Domain::Numeric => promoted,
        Domain::Float => promoted.to_float(),
        Domain::Bool => DType::Bool,
        // MLX raises RuntimeError here (its operators check first and raise ValueError).
        Domain::Integer if promoted.is_inexact() => bail!(
            Runtime,
            facts.name,
            "Only allowed on integer or boolean types but got types {} and {}.",
            a.dtype(),
            b.dtype()
        ),
        // Bool shifts as uint8, as MLX.
        Domain::Integer
            if promoted == DType::Bool
                && matches!(op, BinaryOp::LeftShift | BinaryOp::RightShift) =>
        {
            DType::U8
        }
        Domain::Integer => promoted,
    };
    if dtype == DType::C64 {
        super::complex::check_binary(op)?;
    }
    let shape = broadcast_shapes(facts.name, a.shape(), b.shape())?;
    let prep = |x: &Array| -> Result<Array> { broadcast_to(&astype(x, dtype)?, &shape) };
    record(Primitive::Binary(op), vec![prep(a)?, prep(b)?])
}

/// The dtype a weak Python scalar takes next to an array of `dtype` (MLX's rule: the array
/// wins unless the scalar's kind is wider: a float next to ints gives float32, an int next
/// to bool gives int32).
pub fn weak_scalar_dtype(value: Scalar, dtype: DType) -> DType {
    match value {
        Scalar::Complex(..) => DType::C64,
        Scalar::Float(_) if !dtype.is_inexact() => DType::F32,
        Scalar::Int(_) | Scalar::UInt(_) if dtype == DType::Bool => DType::I32,
        _ => dtype,
    }
}

/// A weak scalar as a 0-d array next to `like` (errors when an integer does not fit).
pub fn weak_scalar(value: Scalar, like: &Array) -> Result<Array> {
    let dtype = weak_scalar_dtype(value, like.dtype());
    if dtype.is_integer() {
        let fits = match value {
            // MLX lets negative ints wrap next to uint64 (and only there).
            Scalar::Int(i) if dtype == DType::U64 => {
                i < 0 || int_range(dtype).contains(&(i as i128))
            }
            Scalar::Int(i) => int_range(dtype).contains(&(i as i128)),
            Scalar::UInt(u) => int_range(dtype).contains(&(u as i128)),
            _ => true,
        };
        if !fits {
            let shown = match value {
                Scalar::UInt(u) => u.to_string(),
                other => other.as_i64().to_string(),
            };
            bail!(Value, "array", "Converting {shown} to {dtype} would result in overflow.");
        }
    }
    super::scalar(value, dtype)
}

pub(crate) fn int_range(dtype: DType) -> std::ops::RangeInclusive<i128> {
    let bits = dtype.size() as u32 * 8;
    if dtype.kind() == DTypeKind::Signed {
        -(1i128 << (bits - 1))..=(1i128 << (bits - 1)) - 1
    } else {
        0..=(1i128 << bits) - 1
    }
}

/// `cond ? x : y` with broadcasting; x and y are promoted together.
pub fn where_(cond: &Array, x: &Array, y: &Array) -> Result<Array> {
    let op = "where";
    let shape = broadcast_shapes(op, cond.shape(), x.shape())?;
    let shape = broadcast_shapes(op, &shape, y.shape())?;
    let dtype = x.dtype().promote(y.dtype());
    let cond = broadcast_to(&astype(cond, DType::Bool)?, &shape)?;
    let x = broadcast_to(&astype(x, dtype)?, &shape)?;
    let y = broadcast_to(&astype(y, dtype)?, &shape)?;
    record(Primitive::Where, vec![cond, x, y])
}

/// `pub fn name(x) -> Result<Array>` for each row of the unary table (`hand` rows are
/// written elsewhere: `round` takes decimals).
macro_rules! unary_front_ends {
    ($($variant:ident $name:ident $form:ident,)*) => {$(
        unary_front_end!($form $variant $name);
    )*};
}
macro_rules! unary_front_end {
    (hand $variant:ident $name:ident) => {};
    ($form:ident $variant:ident $name:ident) => {
        #[doc = concat!("Elementwise `", stringify!($name), "`.")]
        pub fn $name(x: &Array) -> Result<Array> {
            unary(UnaryOp::$variant, x)
        }
    };
}

/// `pub fn name(a, b) -> Result<Array>` (with broadcasting) for each row of the binary table.
macro_rules! binary_front_ends {
    ($($variant:ident $name:ident $form:ident,)*) => {$(
        #[doc = concat!("Elementwise `", stringify!($name), "` with broadcasting.")]
        pub fn $name(a: &Array, b: &Array) -> Result<Array> {
            binary(BinaryOp::$variant, a, b)
        }
    )*};
}

kiln_base::each_unary_op!(unary_front_ends);
kiln_base::each_binary_op!(binary_front_ends);
