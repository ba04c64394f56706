//! complex64's scalar math (the type itself is `c64.rs`): the element conversions and the
//! op table of the `Num` family. Division follows C99 Annex G (`1 / 0` is `inf + nan j`, as `std::complex`).

pub use crate::c64::C64;
use crate::element::Element;
use crate::scalar::{maximum, minimum, BinaryVisitor, Num, UnaryVisitor};
use crate::strided::{map1, output};
use kiln_base::{ArrayData, BinaryOp, ComplexOp, DType, Error, Result, UnaryOp};
use num_complex::Complex32;

impl Element for C64 {
    const DTYPE: DType = DType::C64;
    type Acc = C64;
    fn to_acc(self) -> C64 {
        self
    }
    fn from_acc(a: C64) -> Self {
        a
    }
    fn from_i64(v: i64) -> Self {
        C64::new(v as f32, 0.0)
    }
    fn from_u64(v: u64) -> Self {
        C64::new(v as f32, 0.0)
    }
    fn from_f64(v: f64) -> Self {
        C64::new(v as f32, 0.0)
    }
    fn from_f32(v: f32) -> Self {
        C64::new(v, 0.0)
    }
    fn from_c64(v: C64) -> Self {
        v
    }
    fn cast<D: Element>(self) -> D {
        D::from_c64(self)
    }
}

fn unsupported(op: &'static str) -> Result<ArrayData> {
    Err(Error::Value { op, msg: "Not supported for complex64.".into() })
}

#[inline(always)]
fn c(z: Complex32) -> C64 {
    C64(z)
}

/// `a / b` as C99 Annex G: computed in f64 (no overflow of `|b|^2` for f32 inputs), with
/// the infinities recovered where the plain formula gives NaN.
#[inline]
pub fn div(a: C64, b: C64) -> C64 {
    let (ar, ai, br, bi) = (a.re() as f64, a.im() as f64, b.re() as f64, b.im() as f64);
    let denom = br * br + bi * bi;
    let mut x = (ar * br + ai * bi) / denom;
    let mut y = (ai * br - ar * bi) / denom;
    if x.is_nan() && y.is_nan() {
        if denom == 0.0 && (!ar.is_nan() || !ai.is_nan()) {
            x = f64::INFINITY.copysign(br) * ar;
            y = f64::INFINITY.copysign(br) * ai;
        } else if (ar.is_infinite() || ai.is_infinite()) && br.is_finite() && bi.is_finite() {
            let ar = (ar.is_infinite() as u8 as f64).copysign(ar);
            let ai = (ai.is_infinite() as u8 as f64).copysign(ai);
            x = f64::INFINITY * (ar * br + ai * bi);
            y = f64::INFINITY * (ai * br - ar * bi);
        } else if (br.is_infinite() || bi.is_infinite()) && ar.is_finite() && ai.is_finite() {
            let br = (br.is_infinite() as u8 as f64).copysign(br);
            let bi = (bi.is_infinite() as u8 as f64).copysign(bi);
            x = 0.0 * (ar * br + ai * bi);
            y = 0.0 * (ai * br - ar * bi);
        }
    }
    C64::new(x as f32, y as f32)
}

fn mul(a: C64, b: C64) -> C64 {
    c(a.0 * b.0)
}

/// `|z|` without overflow for large parts.
pub fn abs(z: C64) -> f32 {
    z.re().hypot(z.im())
}

/// `z / |z|`, 0 at 0 (MLX's sign).
fn sign(z: C64) -> C64 {
    let r = abs(z);
    if r == 0.0 {
        C64::default()
    } else {
        C64::new(z.re() / r, z.im() / r)
    }
}

fn power(a: C64, b: C64) -> C64 {
    if b.0 == Complex32::new(0.0, 0.0) {
        return C64::new(1.0, 0.0);
    }
    if a.0 == Complex32::new(0.0, 0.0) {
        // 0^b: 0 for b with a positive real part, else undefined (NaN), as numpy.
        return if b.re() > 0.0 { C64::default() } else { C64::new(f32::NAN, f32::NAN) };
    }
    c(a.0.powc(b.0))
}

/// `log(exp(a) + exp(b))` with the larger (lexicographic) operand factored out, as MLX.
pub(crate) fn logaddexp(a: C64, b: C64) -> C64 {
    if a.is_nan() || b.is_nan() {
        return C64::new(f32::NAN, f32::NAN);
    }
    let (hi, lo) = if a > b { (a, b) } else { (b, a) };
    if lo.re() == f32::NEG_INFINITY || hi.re() == f32::INFINITY {
        return hi;
    }
    c(hi.0 + ((lo.0 - hi.0).exp() + 1.0).ln())
}

impl Num for C64 {
    const ZERO: Self = C64::new(0.0, 0.0);
    const ONE: Self = C64::new(1.0, 0.0);
    fn is_nan(self) -> bool {
        self.re().is_nan() || self.im().is_nan()
    }
    fn unary<V: UnaryVisitor<Self>>(op: UnaryOp, v: V) -> Result<ArrayData> {
        let ln10 = std::f32::consts::LN_10;
        let ln2 = std::f32::consts::LN_2;
        match op {
            UnaryOp::Negative => v.visit(|z: C64| c(-z.0)),
            UnaryOp::Exp => v.visit(|z: C64| c(z.0.exp())),
            UnaryOp::Log => v.visit(|z: C64| c(z.0.ln())),
            UnaryOp::Log2 => v.visit(move |z: C64| c(z.0.ln() / ln2)),
            UnaryOp::Log10 => v.visit(move |z: C64| c(z.0.ln() / ln10)),
            UnaryOp::Log1p => v.visit(|z: C64| c((z.0 + 1.0).ln())),
            UnaryOp::Sqrt => v.visit(|z: C64| c(z.0.sqrt())),
            UnaryOp::Rsqrt => v.visit(|z: C64| div(C64::ONE, c(z.0.sqrt()))),
            UnaryOp::Sin => v.visit(|z: C64| c(z.0.sin())),
            UnaryOp::Cos => v.visit(|z: C64| c(z.0.cos())),
            UnaryOp::Tan => v.visit(|z: C64| c(z.0.tan())),
            UnaryOp::Tanh => v.visit(|z: C64| c(z.0.tanh())),
            UnaryOp::Sinh => v.visit(|z: C64| c(z.0.sinh())),
            UnaryOp::Cosh => v.visit(|z: C64| c(z.0.cosh())),
            UnaryOp::ArcSin => v.visit(|z: C64| c(z.0.asin())),
            UnaryOp::ArcCos => v.visit(|z: C64| c(z.0.acos())),
            UnaryOp::ArcTan => v.visit(|z: C64| c(z.0.atan())),
            UnaryOp::ArcSinh => v.visit(|z: C64| c(z.0.asinh())),
            UnaryOp::ArcCosh => v.visit(|z: C64| c(z.0.acosh())),
            UnaryOp::ArcTanh => v.visit(|z: C64| c(z.0.atanh())),
            UnaryOp::Sign => v.visit(sign),
            // Each part rounds half to even, as MLX.
            UnaryOp::Round => {
                v.visit(|z: C64| C64::new(z.re().round_ties_even(), z.im().round_ties_even()))
            }
            // The rows that reject complex64 (the front end never sends them), and `abs`,
            // whose float32 result makes it `Primitive::Complex`. tests/python/
            // test_op_table.py runs every row the table marks supported.
            _ => unsupported(op.facts().name),
        }
    }
    fn binary<V: BinaryVisitor<Self>>(op: BinaryOp, v: V) -> Result<ArrayData> {
        match op {
            BinaryOp::Add => v.arith(|a: C64, b: C64| c(a.0 + b.0)),
            BinaryOp::Subtract => v.arith(|a: C64, b: C64| c(a.0 - b.0)),
            BinaryOp::Multiply => v.arith(mul),
            // MLX's floor_divide on complex64 is plain division.
            BinaryOp::Divide | BinaryOp::FloorDivide => v.arith(div),
            BinaryOp::Maximum => v.arith(maximum::<C64>),
            BinaryOp::Minimum => v.arith(minimum::<C64>),
            BinaryOp::Power => v.arith(power),
            BinaryOp::LogAddExp => v.arith(logaddexp),
            BinaryOp::Equal => v.compare(|a: C64, b: C64| a == b),
            BinaryOp::NotEqual => v.compare(|a: C64, b: C64| a != b),
            BinaryOp::Less => v.compare(|a: C64, b: C64| a < b),
            BinaryOp::LessEqual => v.compare(|a: C64, b: C64| a <= b),
            BinaryOp::Greater => v.compare(|a: C64, b: C64| a > b),
            BinaryOp::GreaterEqual => v.compare(|a: C64, b: C64| a >= b),
            // The rows that reject complex64 (checked as the unary ones).
            _ => unsupported(op.facts().name),
        }
    }
}

/// `Primitive::Complex`: the real part, imaginary part, magnitude or conjugate.
pub(crate) fn complex_part(op: ComplexOp, x: &ArrayData, shape: &[usize]) -> Result<ArrayData> {
    let name = kiln_base::Primitive::Complex(op).name();
    let real = |f: fn(C64) -> f32| {
        output::<f32>(name, shape, |out| {
            map1(x, out, f);
            Ok(())
        })
    };
    match op {
        ComplexOp::Real => real(C64::re),
        ComplexOp::Imag => real(C64::im),
        ComplexOp::Abs => real(abs),
        ComplexOp::Conj => output::<C64>(name, shape, |out| {
            map1(x, out, |z: C64| C64::new(z.re(), -z.im()));
            Ok(())
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn division_recovers_infinities() {
        let q = div(C64::new(1.0, 0.0), C64::new(0.0, 0.0));
        assert!(q.re().is_infinite() && q.im().is_nan());
        assert_eq!(div(C64::new(4.0, 2.0), C64::new(0.0, 2.0)), C64::new(1.0, -2.0));
        let big = div(C64::new(3e38, 3e38), C64::new(3e38, 3e38));
        assert_eq!(big, C64::new(1.0, 0.0));
        let z = div(C64::new(1.0, 1.0), C64::new(f32::INFINITY, 0.0));
        assert_eq!((z.re(), z.im()), (0.0, 0.0));
    }

    #[test]
    fn order_is_lexicographic() {
        assert!(C64::new(1.0, 5.0) < C64::new(2.0, -1.0));
        assert!(C64::new(1.0, 1.0) < C64::new(1.0, 2.0));
        assert!(C64::new(f32::NAN, 0.0).partial_cmp(&C64::new(0.0, 0.0)).is_none());
    }

    #[test]
    fn special_values() {
        assert_eq!(sign(C64::new(3.0, -4.0)), C64::new(0.6, -0.8));
        assert_eq!(sign(C64::default()), C64::default());
        assert_eq!(abs(C64::new(3e30, 4e30)), 5e30);
        assert_eq!(power(C64::new(2.0, 0.0), C64::default()), C64::new(1.0, 0.0));
        assert!(power(C64::default(), C64::new(0.0, 1.0)).is_nan());
        assert_eq!(<f32 as Element>::from_c64(C64::new(-2.5, 7.0)), -2.5);
    }
}
