//! The scalar math of every elementwise op, per type family (floats, signed and unsigned
//! integers, bool). Each family matches the op exhaustively once and hands the chosen
//! closure to a visitor (the kernel), so a new `UnaryOp`/`BinaryOp` fails to compile here
//! until every family defines it, and kernels' inner loops see one inlined closure.

use crate::math::{self, FloatMath, IntMath};
use kiln_base::{ArrayData, BinaryOp, DType, Error, Result, UnaryOp};

/// A kernel that applies a one-input scalar function.
pub trait UnaryVisitor<A> {
    fn dtype(&self) -> DType;
    fn visit<F: Fn(A) -> A + Copy + Send + Sync>(self, f: F) -> Result<ArrayData>;
}

/// A kernel that applies a two-input scalar function (arithmetic or comparison).
pub trait BinaryVisitor<A> {
    fn dtype(&self) -> DType;
    fn arith<F: Fn(A, A) -> A + Copy + Send + Sync>(self, f: F) -> Result<ArrayData>;
    fn compare<F: Fn(A, A) -> bool + Copy + Send + Sync>(self, f: F) -> Result<ArrayData>;
}

/// A compute type (`Element::Acc`): the family's op table plus what reductions need.
pub trait Num: Copy + PartialOrd + Send + Sync + 'static {
    const ZERO: Self;
    const ONE: Self;
    fn is_nan(self) -> bool;
    fn unary<V: UnaryVisitor<Self>>(op: UnaryOp, v: V) -> Result<ArrayData>;
    fn binary<V: BinaryVisitor<Self>>(op: BinaryOp, v: V) -> Result<ArrayData>;
}

fn unsupported(op: &'static str, dtype: DType) -> Result<ArrayData> {
    Err(Error::Type { op, msg: format!("The CPU backend does not support {op} on {dtype}.") })
}

/// NaN-propagating maximum (MLX: a NaN on either side wins).
#[inline(always)]
pub fn maximum<A: Num>(a: A, b: A) -> A {
    if a.is_nan() || a > b {
        a
    } else {
        b
    }
}

/// NaN-propagating minimum.
#[inline(always)]
pub fn minimum<A: Num>(a: A, b: A) -> A {
    if a.is_nan() || a < b {
        a
    } else {
        b
    }
}

/// The six comparisons are the same for every family (IEEE for floats).
macro_rules! comparisons {
    ($op:expr, $v:expr, $t:ty, { $($arith:tt)* }) => {
        match $op {
            $($arith)*
            BinaryOp::Equal => $v.compare(|a: $t, b: $t| a == b),
            BinaryOp::NotEqual => $v.compare(|a: $t, b: $t| a != b),
            BinaryOp::Less => $v.compare(|a: $t, b: $t| a < b),
            BinaryOp::LessEqual => $v.compare(|a: $t, b: $t| a <= b),
            BinaryOp::Greater => $v.compare(|a: $t, b: $t| a > b),
            BinaryOp::GreaterEqual => $v.compare(|a: $t, b: $t| a >= b),
        }
    };
}

macro_rules! float_num {
    ($t:ty, $erf:path, $erfinv:path, $asinh:path, $acosh:path, $atanh:path) => {
        impl Num for $t {
            const ZERO: Self = 0.0;
            const ONE: Self = 1.0;
            fn is_nan(self) -> bool {
                <$t>::is_nan(self)
            }
            fn unary<V: UnaryVisitor<Self>>(op: UnaryOp, v: V) -> Result<ArrayData> {
                match op {
                    UnaryOp::Negative => v.visit(|x: $t| -x),
                    UnaryOp::Abs => v.visit(<$t>::abs),
                    UnaryOp::Exp => v.visit(<$t>::exp),
                    UnaryOp::Log => v.visit(<$t>::ln),
                    UnaryOp::Sqrt => v.visit(<$t>::sqrt),
                    UnaryOp::Sin => v.visit(<$t>::sin),
                    UnaryOp::Tanh => v.visit(<$t>::tanh),
                    // MLX's form: exp(|x|) overflows to inf harmlessly, never inf/inf.
                    UnaryOp::Sigmoid => v.visit(|x: $t| {
                        let y = 1.0 / (1.0 + x.abs().exp());
                        if x < 0.0 {
                            y
                        } else {
                            1.0 - y
                        }
                    }),
                    UnaryOp::Erf => v.visit($erf),
                    UnaryOp::ErfInv => v.visit($erfinv),
                    UnaryOp::Sign => v.visit(<$t as FloatMath>::sign),
                    UnaryOp::Floor => v.visit(<$t>::floor),
                    UnaryOp::Ceil => v.visit(<$t>::ceil),
                    UnaryOp::Round => v.visit(<$t>::round_ties_even),
                    UnaryOp::Rsqrt => v.visit(|x: $t| 1.0 / x.sqrt()),
                    UnaryOp::Expm1 => v.visit(<$t>::exp_m1),
                    UnaryOp::Log1p => v.visit(<$t>::ln_1p),
                    UnaryOp::Log2 => v.visit(<$t>::log2),
                    UnaryOp::Log10 => v.visit(<$t>::log10),
                    UnaryOp::Cos => v.visit(<$t>::cos),
                    UnaryOp::Tan => v.visit(<$t>::tan),
                    UnaryOp::ArcSin => v.visit(<$t>::asin),
                    UnaryOp::ArcCos => v.visit(<$t>::acos),
                    UnaryOp::ArcTan => v.visit(<$t>::atan),
                    UnaryOp::Sinh => v.visit(<$t>::sinh),
                    UnaryOp::Cosh => v.visit(<$t>::cosh),
                    // libm's (musl's) forms stay accurate where the textbook logs overflow.
                    UnaryOp::ArcSinh => v.visit($asinh),
                    UnaryOp::ArcCosh => v.visit($acosh),
                    UnaryOp::ArcTanh => v.visit($atanh),
                    UnaryOp::LogicalNot | UnaryOp::BitwiseInvert => {
                        unsupported(op.facts().name, v.dtype())
                    }
                }
            }
            fn binary<V: BinaryVisitor<Self>>(op: BinaryOp, v: V) -> Result<ArrayData> {
                comparisons!(op, v, $t, {
                    BinaryOp::Add => v.arith(|a: $t, b: $t| a + b),
                    BinaryOp::Subtract => v.arith(|a: $t, b: $t| a - b),
                    BinaryOp::Multiply => v.arith(|a: $t, b: $t| a * b),
                    BinaryOp::Divide => v.arith(|a: $t, b: $t| a / b),
                    BinaryOp::Maximum => v.arith(maximum::<$t>),
                    BinaryOp::Minimum => v.arith(minimum::<$t>),
                    BinaryOp::Power => v.arith(<$t>::powf),
                    BinaryOp::FloorDivide => v.arith(<$t as FloatMath>::floor_div),
                    BinaryOp::Remainder => v.arith(<$t as FloatMath>::floor_rem),
                    BinaryOp::LogAddExp => v.arith(<$t as FloatMath>::logaddexp),
                    BinaryOp::ArcTan2 => v.arith(<$t>::atan2),
                    BinaryOp::LogicalAnd
                    | BinaryOp::LogicalOr
                    | BinaryOp::BitwiseAnd
                    | BinaryOp::BitwiseOr
                    | BinaryOp::BitwiseXor
                    | BinaryOp::LeftShift
                    | BinaryOp::RightShift => unsupported(op.facts().name, v.dtype()),
                })
            }
        }
    };
}

float_num!(f32, libm::erff, crate::erfinv::erfinv_f32, libm::asinhf, math::acosh_f32, libm::atanhf);
float_num!(f64, libm::erf, crate::erfinv::erfinv_f64, libm::asinh, math::acosh_f64, libm::atanh);

// Integers wrap. Power is MLX's square-and-multiply; any negative exponent gives 0.
macro_rules! int_num {
    ($t:ty, $abs:expr, $negative:expr) => {
        impl Num for $t {
            const ZERO: Self = 0;
            const ONE: Self = 1;
            fn is_nan(self) -> bool {
                false
            }
            fn unary<V: UnaryVisitor<Self>>(op: UnaryOp, v: V) -> Result<ArrayData> {
                match op {
                    UnaryOp::Negative => v.visit(<$t>::wrapping_neg),
                    UnaryOp::Abs => v.visit($abs),
                    UnaryOp::Sign => v.visit(<$t as IntMath>::sign),
                    UnaryOp::Floor | UnaryOp::Ceil | UnaryOp::Round => v.visit(|x: $t| x),
                    UnaryOp::BitwiseInvert => v.visit(|x: $t| !x),
                    UnaryOp::Exp
                    | UnaryOp::Log
                    | UnaryOp::Sqrt
                    | UnaryOp::Sin
                    | UnaryOp::Tanh
                    | UnaryOp::Sigmoid
                    | UnaryOp::Erf
                    | UnaryOp::ErfInv
                    | UnaryOp::Rsqrt
                    | UnaryOp::Expm1
                    | UnaryOp::Log1p
                    | UnaryOp::Log2
                    | UnaryOp::Log10
                    | UnaryOp::Cos
                    | UnaryOp::Tan
                    | UnaryOp::ArcSin
                    | UnaryOp::ArcCos
                    | UnaryOp::ArcTan
                    | UnaryOp::Sinh
                    | UnaryOp::Cosh
                    | UnaryOp::ArcSinh
                    | UnaryOp::ArcCosh
                    | UnaryOp::ArcTanh
                    | UnaryOp::LogicalNot => unsupported(op.facts().name, v.dtype()),
                }
            }
            fn binary<V: BinaryVisitor<Self>>(op: BinaryOp, v: V) -> Result<ArrayData> {
                comparisons!(op, v, $t, {
                    BinaryOp::Add => v.arith(<$t>::wrapping_add),
                    BinaryOp::Subtract => v.arith(<$t>::wrapping_sub),
                    BinaryOp::Multiply => v.arith(<$t>::wrapping_mul),
                    BinaryOp::Divide => unsupported(op.facts().name, v.dtype()),
                    BinaryOp::Maximum => v.arith(maximum::<$t>),
                    BinaryOp::Minimum => v.arith(minimum::<$t>),
                    BinaryOp::Power => v.arith(|mut base: $t, mut exp: $t| {
                        if $negative(exp) {
                            return 0;
                        }
                        let mut acc: $t = 1;
                        while exp != 0 {
                            if exp & 1 != 0 {
                                acc = acc.wrapping_mul(base);
                            }
                            exp >>= 1;
                            base = base.wrapping_mul(base);
                        }
                        acc
                    }),
                    BinaryOp::FloorDivide => v.arith(<$t as IntMath>::floor_div),
                    BinaryOp::Remainder => v.arith(<$t as IntMath>::floor_rem),
                    BinaryOp::BitwiseAnd => v.arith(|a: $t, b: $t| a & b),
                    BinaryOp::BitwiseOr => v.arith(|a: $t, b: $t| a | b),
                    BinaryOp::BitwiseXor => v.arith(|a: $t, b: $t| a ^ b),
                    BinaryOp::LeftShift => v.arith(<$t as IntMath>::shl),
                    BinaryOp::RightShift => v.arith(<$t as IntMath>::shr),
                    BinaryOp::LogicalAnd
                    | BinaryOp::LogicalOr
                    | BinaryOp::LogAddExp
                    | BinaryOp::ArcTan2 => unsupported(op.facts().name, v.dtype()),
                })
            }
        }
    };
}

int_num!(i8, i8::wrapping_abs, |e: i8| e < 0);
int_num!(i16, i16::wrapping_abs, |e: i16| e < 0);
int_num!(i32, i32::wrapping_abs, |e: i32| e < 0);
int_num!(i64, i64::wrapping_abs, |e: i64| e < 0);
int_num!(u8, |x: u8| x, |_: u8| false);
int_num!(u16, |x: u16| x, |_: u16| false);
int_num!(u32, |x: u32| x, |_: u32| false);
int_num!(u64, |x: u64| x, |_: u64| false);

// Bool arithmetic is integer arithmetic on 0/1 mapped back through `!= 0`.
impl Num for bool {
    const ZERO: Self = false;
    const ONE: Self = true;
    fn is_nan(self) -> bool {
        false
    }
    fn unary<V: UnaryVisitor<Self>>(op: UnaryOp, v: V) -> Result<ArrayData> {
        match op {
            UnaryOp::Abs | UnaryOp::Sign | UnaryOp::Floor | UnaryOp::Ceil | UnaryOp::Round => {
                v.visit(|x: bool| x)
            }
            UnaryOp::LogicalNot | UnaryOp::BitwiseInvert => v.visit(|x: bool| !x),
            UnaryOp::Negative
            | UnaryOp::Exp
            | UnaryOp::Log
            | UnaryOp::Sqrt
            | UnaryOp::Sin
            | UnaryOp::Tanh
            | UnaryOp::Sigmoid
            | UnaryOp::Erf
            | UnaryOp::ErfInv
            | UnaryOp::Rsqrt
            | UnaryOp::Expm1
            | UnaryOp::Log1p
            | UnaryOp::Log2
            | UnaryOp::Log10
            | UnaryOp::Cos
            | UnaryOp::Tan
            | UnaryOp::ArcSin
            | UnaryOp::ArcCos
            | UnaryOp::ArcTan
            | UnaryOp::Sinh
            | UnaryOp::Cosh
            | UnaryOp::ArcSinh
            | UnaryOp::ArcCosh
            | UnaryOp::ArcTanh => unsupported(op.facts().name, v.dtype()),
        }
    }
    fn binary<V: BinaryVisitor<Self>>(op: BinaryOp, v: V) -> Result<ArrayData> {
        comparisons!(op, v, bool, {
            BinaryOp::Add => v.arith(|a: bool, b: bool| a | b),
            BinaryOp::Subtract => v.arith(|a: bool, b: bool| a ^ b),
            BinaryOp::Multiply => v.arith(|a: bool, b: bool| a & b),
            BinaryOp::Divide => unsupported(op.facts().name, v.dtype()),
            BinaryOp::Maximum => v.arith(|a: bool, b: bool| a | b),
            BinaryOp::Minimum => v.arith(|a: bool, b: bool| a & b),
            // 0^0 = 1^k = 1, 0^1 = 0.
            BinaryOp::Power => v.arith(|a: bool, b: bool| a | !b),
            // As 0/1 integers: x // 1 = x, x // 0 = 0; x % 1 = 0, x % 0 = x.
            BinaryOp::FloorDivide => v.arith(|a: bool, b: bool| a & b),
            BinaryOp::Remainder => v.arith(|a: bool, b: bool| a & !b),
            BinaryOp::LogicalAnd | BinaryOp::BitwiseAnd => v.arith(|a: bool, b: bool| a & b),
            BinaryOp::LogicalOr | BinaryOp::BitwiseOr => v.arith(|a: bool, b: bool| a | b),
            BinaryOp::BitwiseXor => v.arith(|a: bool, b: bool| a ^ b),
            // The front end shifts bool as uint8 (MLX).
            BinaryOp::LeftShift
            | BinaryOp::RightShift
            | BinaryOp::LogAddExp
            | BinaryOp::ArcTan2 => unsupported(op.facts().name, v.dtype()),
        })
    }
}
