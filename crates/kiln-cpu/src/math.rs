//! Scalar math of the elementwise ops that is more than one std call: MLX's integer floor
//! division and remainder (Python's signs, never trapping), shifts as MLX's x86 build does
//! them, and the float forms of floor division, remainder, sign and logaddexp.

use crate::scalar::{maximum, minimum};

/// Integer helpers, one impl per integer type.
pub trait IntMath: Copy {
    /// `floor(a / b)`; `x // 0` is 0 and `MIN // -1` wraps to MIN (as numpy).
    fn floor_div(self, b: Self) -> Self;
    /// The remainder with the divisor's sign; `x % 0` is x.
    fn floor_rem(self, b: Self) -> Self;
    /// -1, 0 or 1 (0 or 1 when unsigned).
    fn sign(self) -> Self;
    /// `self << b` as x86 computes C's shift: the value promoted to int32 when narrower,
    /// the count taken modulo the promoted width, the result truncated back.
    fn shl(self, b: Self) -> Self;
    /// `self >> b` likewise (arithmetic for signed types).
    fn shr(self, b: Self) -> Self;
}

macro_rules! signed_math {
    ($t:ty, $wide:ty) => {
        impl IntMath for $t {
            fn floor_div(self, b: $t) -> $t {
                if b == 0 {
                    return 0;
                }
                let q = self.wrapping_div(b);
                // `wrapping_rem`: MIN % -1 is 0, so MIN // -1 stays the wrapped MIN.
                if self.wrapping_rem(b) != 0 && ((self < 0) != (b < 0)) {
                    q.wrapping_sub(1)
                } else {
                    q
                }
            }
            fn floor_rem(self, b: $t) -> $t {
                if b == 0 {
                    return self;
                }
                let r = self.wrapping_rem(b);
                // r and b have opposite signs here, so the sum cannot overflow.
                if r != 0 && ((r < 0) != (b < 0)) {
                    r.wrapping_add(b)
                } else {
                    r
                }
            }
            fn sign(self) -> $t {
                self.signum()
            }
            fn shl(self, b: $t) -> $t {
                // `as u32` keeps the count's low bits (sign-extended), and `wrapping_shl`
                // masks them to the promoted width, as x86's shift instructions do.
                (self as $wide).wrapping_shl(b as u32) as $t
            }
            fn shr(self, b: $t) -> $t {
                (self as $wide).wrapping_shr(b as u32) as $t
            }
        }
    };
}

macro_rules! unsigned_math {
    ($t:ty, $wide:ty) => {
        impl IntMath for $t {
            fn floor_div(self, b: $t) -> $t {
                self.checked_div(b).unwrap_or(0)
            }
            fn floor_rem(self, b: $t) -> $t {
                self.checked_rem(b).unwrap_or(self)
            }
            fn sign(self) -> $t {
                (self != 0) as $t
            }
            fn shl(self, b: $t) -> $t {
                (self as $wide).wrapping_shl(b as u32) as $t
            }
            fn shr(self, b: $t) -> $t {
                (self as $wide).wrapping_shr(b as u32) as $t
            }
        }
    };
}

// C promotes types narrower than int to int (signed, also for uint8/uint16).
signed_math!(i8, i32);
signed_math!(i16, i32);
signed_math!(i32, i32);
signed_math!(i64, i64);
unsigned_math!(u8, i32);
unsigned_math!(u16, i32);
unsigned_math!(u32, u32);
unsigned_math!(u64, u64);

/// Float helpers for f32 and f64 (half types compute in f32).
pub trait FloatMath: Copy {
    /// `floor(a / b)` (MLX's rule, not numpy's fmod-based one: `1 // 0.1` is 10).
    fn floor_div(self, b: Self) -> Self;
    /// `fmod` moved to the divisor's sign (Python's `%`); `x % 0` is NaN.
    fn floor_rem(self, b: Self) -> Self;
    /// -1, 0 or 1; NaN and -0 give 0 (MLX).
    fn sign(self) -> Self;
    /// `log(exp(a) + exp(b))` without overflow; NaN wins, infinities are exact.
    fn logaddexp(self, b: Self) -> Self;
}

macro_rules! float_math {
    ($t:ty) => {
        impl FloatMath for $t {
            fn floor_div(self, b: $t) -> $t {
                (self / b).floor()
            }
            fn floor_rem(self, b: $t) -> $t {
                let r = self % b;
                if r != 0.0 && ((r < 0.0) != (b < 0.0)) {
                    r + b
                } else {
                    r
                }
            }
            fn sign(self) -> $t {
                if self > 0.0 {
                    1.0
                } else if self < 0.0 {
                    -1.0
                } else {
                    0.0
                }
            }
            fn logaddexp(self, b: $t) -> $t {
                let (hi, lo) = (maximum(self, b), minimum(self, b));
                if lo == <$t>::NEG_INFINITY || hi == <$t>::INFINITY {
                    hi
                } else {
                    hi + (lo - hi).exp().ln_1p()
                }
            }
        }
    };
}

float_math!(f32);
float_math!(f64);

/// `acosh` with NaN below 1 (musl's `acoshf` reads only |x| and returns a number for x < -1).
pub fn acosh_f32(x: f32) -> f32 {
    if x < 1.0 {
        f32::NAN
    } else {
        libm::acoshf(x)
    }
}

pub fn acosh_f64(x: f64) -> f64 {
    if x < 1.0 {
        f64::NAN
    } else {
        libm::acosh(x)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integer_division_never_traps() {
        assert_eq!(7i32.floor_div(0), 0);
        assert_eq!(7i32.floor_rem(0), 7);
        assert_eq!(i32::MIN.floor_div(-1), i32::MIN);
        assert_eq!(i32::MIN.floor_rem(-1), 0);
        assert_eq!((-7i8).floor_div(2), -4);
        assert_eq!((-7i8).floor_rem(2), 1);
        assert_eq!(7i64.floor_rem(-2), -1);
        assert_eq!(i8::MIN.floor_div(3), -43);
        assert_eq!(i8::MIN.floor_rem(3), 1);
        assert_eq!(5u8.floor_div(0), 0);
        assert_eq!(5u8.floor_rem(0), 5);
    }

    #[test]
    fn shifts_follow_x86() {
        assert_eq!(1i32.shl(32), 1);
        assert_eq!(1i32.shl(-1), i32::MIN);
        assert_eq!((-8i32).shr(33), -4);
        assert_eq!(1i8.shl(8), 0);
        assert_eq!(1i8.shl(100), 16);
        assert_eq!((-1i8).shr(9), -1);
        assert_eq!(1u8.shl(32), 1);
        assert_eq!(200u8.shr(8), 0);
        assert_eq!(1u64.shl(64), 1);
        assert_eq!(1i64.shl(63), i64::MIN);
    }

    #[test]
    fn float_helpers() {
        assert_eq!(1.0f32.floor_div(0.1), 10.0);
        assert_eq!((-5.0f64).floor_rem(3.0), 1.0);
        assert_eq!((-1.0f64).floor_rem(f64::INFINITY), f64::INFINITY);
        assert!(1.0f32.floor_rem(0.0).is_nan());
        assert_eq!(f32::NAN.sign(), 0.0);
        assert_eq!(f64::INFINITY.logaddexp(f64::INFINITY), f64::INFINITY);
        assert_eq!(f64::NEG_INFINITY.logaddexp(f64::NEG_INFINITY), f64::NEG_INFINITY);
        assert!(f32::NAN.logaddexp(1.0).is_nan() && 1.0f32.logaddexp(f32::NAN).is_nan());
        assert_eq!(1000.0f32.logaddexp(1000.0), 1000.0 + std::f32::consts::LN_2);
        assert!(acosh_f32(-100.0).is_nan() && acosh_f64(0.5).is_nan() && acosh_f64(1.0) == 0.0);
    }
}
