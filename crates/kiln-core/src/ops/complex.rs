//! complex64 ops: `real`, `imag`, `conjugate`, and the complex cases of the elementwise front
//! end (which ops MLX accepts on complex64, and `abs` giving float32).

use super::{record, zeros_like};
use crate::array::Array;
use kiln_base::{bail, BinaryOp, ComplexOp, ComplexSupport, DType, Primitive, Result, UnaryOp};

/// The real part: float32 for complex64, the input itself for real dtypes (as MLX).
pub fn real(x: &Array) -> Result<Array> {
    if x.dtype() == DType::C64 {
        return record(Primitive::Complex(ComplexOp::Real), vec![x.clone()]);
    }
    Ok(x.clone())
}

/// The imaginary part: float32 for complex64, zeros of the input's dtype otherwise.
pub fn imag(x: &Array) -> Result<Array> {
    if x.dtype() == DType::C64 {
        return record(Primitive::Complex(ComplexOp::Imag), vec![x.clone()]);
    }
    zeros_like(x, None)
}

/// The complex conjugate; real dtypes are returned unchanged.
pub fn conjugate(x: &Array) -> Result<Array> {
    if x.dtype() == DType::C64 {
        return record(Primitive::Complex(ComplexOp::Conj), vec![x.clone()]);
    }
    Ok(x.clone())
}

/// A unary op on a complex64 input (already through its domain rule).
pub(crate) fn complex_unary(op: UnaryOp, x: &Array) -> Result<Array> {
    let facts = op.facts();
    match (op, facts.complex) {
        (_, ComplexSupport::Rejected(msg)) => bail!(Value, facts.name, "{msg}"),
        (UnaryOp::Abs, _) => record(Primitive::Complex(ComplexOp::Abs), vec![x.clone()]),
        _ => record(Primitive::Unary(op), vec![x.clone()]),
    }
}

/// Binary ops MLX rejects once the operands promote to complex64.
pub(crate) fn check_binary(op: BinaryOp) -> Result<()> {
    let facts = op.facts();
    match facts.complex {
        ComplexSupport::Rejected(msg) => bail!(Value, facts.name, "{msg}"),
        ComplexSupport::Supported => Ok(()),
    }
}
