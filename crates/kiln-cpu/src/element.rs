//! The Rust type behind each dtype: how it enters math (`Acc`, the type its scalar ops
//! compute in) and how it converts to every other dtype (`cast`). Kernels are generic over
//! `Element` and instantiated per dtype by `dispatch!`, so inner loops are monomorphic.

use crate::c64::C64;
use crate::scalar::Num;
use bytemuck::{Pod, Zeroable};
use half::{bf16, f16};
use kiln_base::DType;

/// Bool storage: one byte holding 0 or 1 (`bool` itself is not `Pod`: 2..=255 are invalid).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Pod, Zeroable)]
#[repr(transparent)]
pub struct Bool8(pub u8);

/// One element type. The `from_*` constructors are the C conversions of the cast table;
/// `cast` picks the one matching the source family, so a cast is one call per element.
pub trait Element: Pod + Send + Sync + 'static {
    const DTYPE: DType;
    /// The type scalar math runs in: f16/bf16 compute in f32, bool as `bool`.
    type Acc: Num;
    fn to_acc(self) -> Self::Acc;
    fn from_acc(a: Self::Acc) -> Self;
    fn from_i64(v: i64) -> Self;
    fn from_u64(v: u64) -> Self;
    fn from_f64(v: f64) -> Self;
    /// f32 widens to f64 exactly, so only float targets need their own rounding here.
    fn from_f32(v: f32) -> Self {
        Self::from_f64(v as f64)
    }
    fn from_bool(v: bool) -> Self {
        Self::from_u64(v as u64)
    }
    /// complex64 to a real type keeps the real part (as MLX).
    fn from_c64(v: C64) -> Self {
        Self::from_f32(v.re())
    }
    fn cast<D: Element>(self) -> D;
}

impl Element for Bool8 {
    const DTYPE: DType = DType::Bool;
    type Acc = bool;
    fn to_acc(self) -> bool {
        self.0 != 0
    }
    fn from_acc(a: bool) -> Self {
        Bool8(a as u8)
    }
    fn from_i64(v: i64) -> Self {
        Bool8((v != 0) as u8)
    }
    fn from_u64(v: u64) -> Self {
        Bool8((v != 0) as u8)
    }
    // NaN != 0, so NaN is true.
    fn from_f64(v: f64) -> Self {
        Bool8((v != 0.0) as u8)
    }
    // Either part nonzero (or NaN) is true.
    fn from_c64(v: C64) -> Self {
        Bool8((v.re() != 0.0 || v.im() != 0.0) as u8)
    }
    fn cast<D: Element>(self) -> D {
        D::from_bool(self.0 != 0)
    }
}

// Integers: int -> int wraps (`as`), float -> int follows x86 (see cast.rs).
macro_rules! int_element {
    ($t:ty, $dt:ident, $wide:ty, $from_wide:ident, $from_float:expr) => {
        impl Element for $t {
            const DTYPE: DType = DType::$dt;
            type Acc = $t;
            fn to_acc(self) -> $t {
                self
            }
            fn from_acc(a: $t) -> Self {
                a
            }
            fn from_i64(v: i64) -> Self {
                v as $t
            }
            fn from_u64(v: u64) -> Self {
                v as $t
            }
            fn from_f64(v: f64) -> Self {
                $from_float(v) as $t
            }
            fn cast<D: Element>(self) -> D {
                D::$from_wide(self as $wide)
            }
        }
    };
}

int_element!(i8, I8, i64, from_i64, float_to_i32);
int_element!(i16, I16, i64, from_i64, float_to_i32);
int_element!(i32, I32, i64, from_i64, float_to_i32);
int_element!(i64, I64, i64, from_i64, float_to_i64);
int_element!(u8, U8, u64, from_u64, float_to_i32);
int_element!(u16, U16, u64, from_u64, float_to_i32);
int_element!(u32, U32, u64, from_u64, float_to_i64);
int_element!(u64, U64, u64, from_u64, float_to_u64);

// Native floats: `as` rounds to nearest (and int -> float is C's conversion).
macro_rules! float_element {
    ($t:ty, $dt:ident, $from_self:ident) => {
        impl Element for $t {
            const DTYPE: DType = DType::$dt;
            type Acc = $t;
            fn to_acc(self) -> $t {
                self
            }
            fn from_acc(a: $t) -> Self {
                a
            }
            fn from_i64(v: i64) -> Self {
                v as $t
            }
            fn from_u64(v: u64) -> Self {
                v as $t
            }
            fn from_f64(v: f64) -> Self {
                v as $t
            }
            fn from_f32(v: f32) -> Self {
                v as $t
            }
            fn cast<D: Element>(self) -> D {
                D::$from_self(self)
            }
        }
    };
}

float_element!(f32, F32, from_f32);
float_element!(f64, F64, from_f64);

// Half floats compute in f32 (exact widening); conversions round once, via the half crate.
// Integers go through f32 as C++ does (any double rounding only past f16's range or 2^24).
macro_rules! half_element {
    ($t:ty, $dt:ident) => {
        impl Element for $t {
            const DTYPE: DType = DType::$dt;
            type Acc = f32;
            fn to_acc(self) -> f32 {
                self.to_f32()
            }
            fn from_acc(a: f32) -> Self {
                <$t>::from_f32(a)
            }
            fn from_i64(v: i64) -> Self {
                <$t>::from_f32(v as f32)
            }
            fn from_u64(v: u64) -> Self {
                <$t>::from_f32(v as f32)
            }
            fn from_f64(v: f64) -> Self {
                <$t>::from_f64(v)
            }
            fn from_f32(v: f32) -> Self {
                <$t>::from_f32(v)
            }
            fn cast<D: Element>(self) -> D {
                D::from_f32(self.to_f32())
            }
        }
    };
}

half_element!(f16, F16);
half_element!(bf16, BF16);

/// Runs `$body` with `$T` aliased to the element type of `$dtype` (every dtype).
macro_rules! dispatch {
    ($dtype:expr, $T:ident => $body:expr) => {{
        use $crate::element::Bool8;
        match $dtype {
            kiln_base::DType::Bool => {
                type $T = Bool8;
                $body
            }
            kiln_base::DType::U8 => {
                type $T = u8;
                $body
            }
            kiln_base::DType::U16 => {
                type $T = u16;
                $body
            }
            kiln_base::DType::U32 => {
                type $T = u32;
                $body
            }
            kiln_base::DType::U64 => {
                type $T = u64;
                $body
            }
            kiln_base::DType::I8 => {
                type $T = i8;
                $body
            }
            kiln_base::DType::I16 => {
                type $T = i16;
                $body
            }
            kiln_base::DType::I32 => {
                type $T = i32;
                $body
            }
            kiln_base::DType::I64 => {
                type $T = i64;
                $body
            }
            kiln_base::DType::F16 => {
                type $T = half::f16;
                $body
            }
            kiln_base::DType::BF16 => {
                type $T = half::bf16;
                $body
            }
            kiln_base::DType::F32 => {
                type $T = f32;
                $body
            }
            kiln_base::DType::F64 => {
                type $T = f64;
                $body
            }
            kiln_base::DType::C64 => {
                type $T = $crate::c64::C64;
                $body
            }
        }
    }};
}

/// Runs `$body` with `$T` an unsigned integer of the dtype's width: moving elements
/// (copies, concatenation, where) only needs their bytes.
macro_rules! dispatch_bits {
    ($dtype:expr, $T:ident => $body:expr) => {{
        match $dtype.size() {
            1 => {
                type $T = u8;
                $body
            }
            2 => {
                type $T = u16;
                $body
            }
            4 => {
                type $T = u32;
                $body
            }
            _ => {
                type $T = u64;
                $body
            }
        }
    }};
}

pub(crate) use {dispatch, dispatch_bits};

// float -> int conversions as MLX's x86 build does them (cast.rs explains).

/// x86 `cvttsd2si` (32-bit): truncation, or i32::MIN when NaN or out of range.
pub(crate) fn float_to_i32(v: f64) -> i32 {
    if v > -2_147_483_649.0 && v < 2_147_483_648.0 {
        v as i32
    } else {
        i32::MIN
    }
}

/// x86 `cvttsd2si` (64-bit): truncation, or i64::MIN when NaN or out of range.
pub(crate) fn float_to_i64(v: f64) -> i64 {
    const TWO_63: f64 = 9_223_372_036_854_775_808.0;
    if (-TWO_63..TWO_63).contains(&v) {
        v as i64
    } else {
        i64::MIN
    }
}

/// The x86 float -> uint64 sequence: values from 2^63 up convert `v - 2^63` and set the top
/// bit back; the rest (NaN included) take the signed path. Matches MLX: -1 -> 2^64 - 1,
/// NaN -> 2^63, 1e20 -> 0.
pub(crate) fn float_to_u64(v: f64) -> u64 {
    const TWO_63: f64 = 9_223_372_036_854_775_808.0;
    if v >= TWO_63 {
        (float_to_i64(v - TWO_63) as u64) ^ (1 << 63)
    } else {
        float_to_i64(v) as u64
    }
}
