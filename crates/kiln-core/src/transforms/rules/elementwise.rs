//! Gradients of elementwise primitives: each op's derivative once, used by vjp (times the
//! cotangent) and jvp (times the tangent).

use super::zeros_like;
use crate::array::Array;
use crate::ops::{self, scalar};
use kiln_base::{BinaryOp, DType, Primitive, Result, Scalar, UnaryOp};

fn constant(value: f64, like: &Array) -> Result<Array> {
    scalar(Scalar::Float(value), like.dtype())
}

/// `1 / sqrt(c + sign * x^2)`: the derivative shape shared by the inverse trig functions.
fn inv_sqrt_quadratic(x: &Array, c: f64, sign: f64) -> Result<Array> {
    let q = ops::add(&constant(c, x)?, &ops::multiply(&constant(sign, x)?, &ops::square(x)?)?)?;
    ops::rsqrt(&q)
}

/// d out / d x of a unary op.
fn unary_derivative(op: UnaryOp, x: &Array, out: &Array) -> Result<Array> {
    use std::f64::consts::{LN_10, LN_2, PI};
    let recip = |v: &Array| ops::divide(&constant(1.0, x)?, v);
    match op {
        UnaryOp::Negative => constant(-1.0, x),
        UnaryOp::Abs => {
            let pos = ops::astype(&ops::greater(x, &constant(0.0, x)?)?, x.dtype())?;
            let neg = ops::astype(&ops::less(x, &constant(0.0, x)?)?, x.dtype())?;
            ops::subtract(&pos, &neg)
        }
        UnaryOp::Exp => Ok(out.clone()),
        UnaryOp::Log => ops::divide(&constant(1.0, x)?, x),
        UnaryOp::Sqrt => ops::divide(&constant(0.5, x)?, out),
        UnaryOp::Sin => ops::cos(x),
        UnaryOp::Tanh => ops::subtract(&constant(1.0, x)?, &ops::multiply(out, out)?),
        UnaryOp::Sigmoid => ops::multiply(out, &ops::subtract(&constant(1.0, x)?, out)?),
        UnaryOp::Erf => {
            let e = ops::exp(&ops::negative(&ops::multiply(x, x)?)?)?;
            ops::multiply(&constant(2.0 / PI.sqrt(), x)?, &e)
        }
        UnaryOp::ErfInv => {
            let e = ops::exp(&ops::multiply(out, out)?)?;
            ops::multiply(&constant(PI.sqrt() / 2.0, x)?, &e)
        }
        // Piecewise constant, or not defined on numbers: no gradient.
        UnaryOp::Sign
        | UnaryOp::Floor
        | UnaryOp::Ceil
        | UnaryOp::Round
        | UnaryOp::LogicalNot
        | UnaryOp::BitwiseInvert => zeros_like(x),
        UnaryOp::Rsqrt => ops::multiply(&constant(-0.5, x)?, &ops::divide(out, x)?),
        UnaryOp::Expm1 => ops::exp(x),
        UnaryOp::Log1p => recip(&ops::add(x, &constant(1.0, x)?)?),
        UnaryOp::Log2 => recip(&ops::multiply(x, &constant(LN_2, x)?)?),
        UnaryOp::Log10 => recip(&ops::multiply(x, &constant(LN_10, x)?)?),
        UnaryOp::Cos => ops::negative(&ops::sin(x)?),
        UnaryOp::Tan => ops::add(&constant(1.0, x)?, &ops::square(out)?),
        UnaryOp::ArcSin => inv_sqrt_quadratic(x, 1.0, -1.0),
        UnaryOp::ArcCos => ops::negative(&inv_sqrt_quadratic(x, 1.0, -1.0)?),
        UnaryOp::ArcTan => recip(&ops::add(&constant(1.0, x)?, &ops::square(x)?)?),
        UnaryOp::Sinh => ops::cosh(x),
        UnaryOp::Cosh => ops::sinh(x),
        UnaryOp::ArcSinh => inv_sqrt_quadratic(x, 1.0, 1.0),
        UnaryOp::ArcCosh => inv_sqrt_quadratic(x, -1.0, 1.0),
        UnaryOp::ArcTanh => recip(&ops::subtract(&constant(1.0, x)?, &ops::square(x)?)?),
    }
}

/// (d out / d a, d out / d b) of a binary op; `None` where the op is not differentiable.
fn binary_partials(op: BinaryOp, a: &Array, b: &Array, out: &Array) -> Result<Option<[Array; 2]>> {
    let one = || constant(1.0, a);
    let mask = |m: Array| ops::astype(&m, a.dtype());
    Ok(Some(match op {
        BinaryOp::Add => [one()?, one()?],
        BinaryOp::Subtract => [one()?, constant(-1.0, a)?],
        BinaryOp::Multiply => [b.clone(), a.clone()],
        BinaryOp::Divide => [ops::divide(&one()?, b)?, ops::negative(&ops::divide(out, b)?)?],
        // Ties send the gradient to the first operand.
        BinaryOp::Maximum => [mask(ops::greater_equal(a, b)?)?, mask(ops::less(a, b)?)?],
        BinaryOp::Minimum => [mask(ops::less_equal(a, b)?)?, mask(ops::greater(a, b)?)?],
        BinaryOp::Power => {
            let da = ops::multiply(&ops::power(a, &ops::subtract(b, &one()?)?)?, b)?;
            // d/db a^b = a^b log a, taken as 0 where a^b is 0 (base 0: 0 * -inf), as MLX.
            let db = ops::multiply(out, &ops::log(a)?)?;
            let zero = zeros_like(out)?;
            [da, ops::where_(&ops::equal(out, &zero)?, &zero, &db)?]
        }
        BinaryOp::Remainder => {
            let q = ops::floor(&ops::divide(a, b)?)?;
            [one()?, ops::negative(&q)?]
        }
        BinaryOp::LogAddExp => {
            [ops::exp(&ops::subtract(a, out)?)?, ops::exp(&ops::subtract(b, out)?)?]
        }
        BinaryOp::ArcTan2 => {
            let r2 = ops::add(&ops::square(a)?, &ops::square(b)?)?;
            [ops::divide(b, &r2)?, ops::negative(&ops::divide(a, &r2)?)?]
        }
        BinaryOp::FloorDivide
        | BinaryOp::LogicalAnd
        | BinaryOp::LogicalOr
        | BinaryOp::BitwiseAnd
        | BinaryOp::BitwiseOr
        | BinaryOp::BitwiseXor
        | BinaryOp::LeftShift
        | BinaryOp::RightShift
        | BinaryOp::Equal
        | BinaryOp::NotEqual
        | BinaryOp::Less
        | BinaryOp::LessEqual
        | BinaryOp::Greater
        | BinaryOp::GreaterEqual => return Ok(None),
    }))
}

pub(super) fn vjp(
    prim: &Primitive,
    primals: &[Array],
    g: &Array,
    argnums: &[usize],
    out: &Array,
) -> Result<Vec<Array>> {
    match prim {
        Primitive::Unary(op) => {
            let d = unary_derivative(*op, &primals[0], out)?;
            argnums.iter().map(|_| ops::multiply(g, &d)).collect()
        }
        Primitive::Binary(op) => match binary_partials(*op, &primals[0], &primals[1], out)? {
            Some(partials) => argnums.iter().map(|&i| ops::multiply(g, &partials[i])).collect(),
            None => argnums.iter().map(|&i| zeros_like(&primals[i])).collect(),
        },
        Primitive::Where => {
            let cond = &primals[0];
            argnums
                .iter()
                .map(|&i| match i {
                    1 => ops::where_(cond, g, &zeros_like(g)?),
                    2 => ops::where_(cond, &zeros_like(g)?, g),
                    _ => zeros_like(cond),
                })
                .collect()
        }
        Primitive::AsType(_) => {
            argnums.iter().map(|_| ops::astype(g, primals[0].dtype())).collect()
        }
        _ => unreachable!("dispatched by class"),
    }
}

pub(super) fn jvp(
    prim: &Primitive,
    primals: &[Array],
    tangents: &[Array],
    argnums: &[usize],
    out: &Array,
) -> Result<Vec<Array>> {
    let t = |i: usize| argnums.iter().position(|&a| a == i).map(|k| &tangents[k]);
    let result = match prim {
        Primitive::Unary(op) => {
            ops::multiply(t(0).expect("one input"), &unary_derivative(*op, &primals[0], out)?)?
        }
        Primitive::Binary(op) => match binary_partials(*op, &primals[0], &primals[1], out)? {
            None => zeros_like(out)?,
            Some(partials) => {
                let mut acc: Option<Array> = None;
                for (i, d) in partials.iter().enumerate() {
                    if let Some(ti) = t(i) {
                        let term = ops::multiply(ti, d)?;
                        acc = Some(match acc {
                            Some(a) => ops::add(&a, &term)?,
                            None => term,
                        });
                    }
                }
                acc.map_or_else(|| zeros_like(out), Ok)?
            }
        },
        Primitive::Where => {
            let x = t(1).cloned().map_or_else(|| zeros_like(out), Ok)?;
            let y = t(2).cloned().map_or_else(|| zeros_like(out), Ok)?;
            ops::where_(&primals[0], &x, &y)?
        }
        Primitive::AsType(dtype) => match t(0) {
            Some(t0) if *dtype != DType::Bool => ops::astype(t0, *dtype)?,
            _ => zeros_like(out)?,
        },
        _ => unreachable!("dispatched by class"),
    };
    Ok(vec![result])
}
