//! Element types, MLX's promotion table, and typed scalars.

use std::fmt;

/// The element type of an array.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
#[repr(u8)]
pub enum DType {
    Bool,
    U8,
    U16,
    U32,
    U64,
    I8,
    I16,
    I32,
    I64,
    F16,
    BF16,
    F32,
    F64,
    /// Two float32s, real then imaginary (MLX's `complex64`).
    C64,
}

/// How a dtype behaves in arithmetic.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DTypeKind {
    Bool,
    Unsigned,
    Signed,
    Float,
    Complex,
}

impl DType {
    /// Every dtype, in the order of the promotion table.
    pub const ALL: [DType; 14] = [
        DType::Bool,
        DType::U8,
        DType::U16,
        DType::U32,
        DType::U64,
        DType::I8,
        DType::I16,
        DType::I32,
        DType::I64,
        DType::F16,
        DType::BF16,
        DType::F32,
        DType::F64,
        DType::C64,
    ];

    /// Bytes per element.
    pub const fn size(self) -> usize {
        match self {
            DType::Bool | DType::U8 | DType::I8 => 1,
            DType::U16 | DType::I16 | DType::F16 | DType::BF16 => 2,
            DType::U32 | DType::I32 | DType::F32 => 4,
            DType::U64 | DType::I64 | DType::F64 | DType::C64 => 8,
        }
    }

    /// The arithmetic family.
    pub const fn kind(self) -> DTypeKind {
        match self {
            DType::Bool => DTypeKind::Bool,
            DType::U8 | DType::U16 | DType::U32 | DType::U64 => DTypeKind::Unsigned,
            DType::I8 | DType::I16 | DType::I32 | DType::I64 => DTypeKind::Signed,
            DType::F16 | DType::BF16 | DType::F32 | DType::F64 => DTypeKind::Float,
            DType::C64 => DTypeKind::Complex,
        }
    }

    pub const fn is_float(self) -> bool {
        matches!(self.kind(), DTypeKind::Float)
    }

    pub const fn is_complex(self) -> bool {
        matches!(self, DType::C64)
    }

    /// Float or complex (`mx.inexact`).
    pub const fn is_inexact(self) -> bool {
        self.is_float() || self.is_complex()
    }

    /// Integer (signed or unsigned), not bool.
    pub const fn is_integer(self) -> bool {
        matches!(self.kind(), DTypeKind::Signed | DTypeKind::Unsigned)
    }

    /// The name MLX prints (`float32`, `bool`, ...).
    pub const fn name(self) -> &'static str {
        match self {
            DType::Bool => "bool",
            DType::U8 => "uint8",
            DType::U16 => "uint16",
            DType::U32 => "uint32",
            DType::U64 => "uint64",
            DType::I8 => "int8",
            DType::I16 => "int16",
            DType::I32 => "int32",
            DType::I64 => "int64",
            DType::F16 => "float16",
            DType::BF16 => "bfloat16",
            DType::F32 => "float32",
            DType::F64 => "float64",
            DType::C64 => "complex64",
        }
    }

    /// Parses a dtype name as [`DType::name`] prints it.
    pub fn from_name(name: &str) -> Option<DType> {
        DType::ALL.into_iter().find(|d| d.name() == name)
    }

    /// The type both operands of a binary op are converted to (MLX's table).
    pub fn promote(self, other: DType) -> DType {
        PROMOTION[self as usize][other as usize]
    }

    /// The float type an op with float-only math computes in: floats keep their type,
    /// complex64 stays complex, everything else becomes float32 (as MLX's `exp(int_array)`).
    pub fn to_float(self) -> DType {
        if self.is_inexact() {
            self
        } else {
            DType::F32
        }
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

use DType::{Bool as B, BF16, C64, F16, F32, F64, I16, I32, I64, I8, U16, U32, U64, U8};

/// MLX's type promotion, row = left operand, column = right operand, in [`DType::ALL`] order.
/// Read off `mlx.core` 0.32: unsigned with signed widens to the next signed type, uint64 with
/// any signed type becomes float32, float16 with bfloat16 becomes float32, and complex64 wins
/// over everything (float64 included).
#[rustfmt::skip]
const PROMOTION: [[DType; 14]; 14] = [
    //        b    u8   u16  u32  u64  i8   i16  i32  i64  f16  bf16  f32  f64  c64
    /* b   */ [B,   U8,  U16, U32, U64, I8,  I16, I32, I64, F16, BF16, F32, F64, C64],
    /* u8  */ [U8,  U8,  U16, U32, U64, I16, I16, I32, I64, F16, BF16, F32, F64, C64],
    /* u16 */ [U16, U16, U16, U32, U64, I32, I32, I32, I64, F16, BF16, F32, F64, C64],
    /* u32 */ [U32, U32, U32, U32, U64, I64, I64, I64, I64, F16, BF16, F32, F64, C64],
    /* u64 */ [U64, U64, U64, U64, U64, F32, F32, F32, F32, F16, BF16, F32, F64, C64],
    /* i8  */ [I8,  I16, I32, I64, F32, I8,  I16, I32, I64, F16, BF16, F32, F64, C64],
    /* i16 */ [I16, I16, I32, I64, F32, I16, I16, I32, I64, F16, BF16, F32, F64, C64],
    /* i32 */ [I32, I32, I32, I64, F32, I32, I32, I32, I64, F16, BF16, F32, F64, C64],
    /* i64 */ [I64, I64, I64, I64, F32, I64, I64, I64, I64, F16, BF16, F32, F64, C64],
    /* f16 */ [F16, F16, F16, F16, F16, F16, F16, F16, F16, F16, F32,  F32, F64, C64],
    /* bf16*/ [BF16,BF16,BF16,BF16,BF16,BF16,BF16,BF16,BF16,F32, BF16, F32, F64, C64],
    /* f32 */ [F32, F32, F32, F32, F32, F32, F32, F32, F32, F32, F32,  F32, F64, C64],
    /* f64 */ [F64, F64, F64, F64, F64, F64, F64, F64, F64, F64, F64,  F64, F64, C64],
    /* c64 */ [C64, C64, C64, C64, C64, C64, C64, C64, C64, C64, C64,  C64, C64, C64],
];

/// A typed scalar value: primitive parameters (fill values, arange bounds) and weak Python
/// scalars. Hashable and comparable by bit pattern so primitives can be keys.
#[derive(Debug, Clone, Copy, serde::Serialize, serde::Deserialize)]
#[serde(into = "ScalarBits", from = "ScalarBits")]
pub enum Scalar {
    Bool(bool),
    Int(i64),
    UInt(u64),
    Float(f64),
    /// Real and imaginary parts (Python's `complex`, converted to complex64 in arrays).
    Complex(f64, f64),
}

impl Scalar {
    pub fn as_f64(self) -> f64 {
        match self {
            Scalar::Bool(b) => b as u8 as f64,
            Scalar::Int(i) => i as f64,
            Scalar::UInt(u) => u as f64,
            Scalar::Float(f) | Scalar::Complex(f, _) => f,
        }
    }

    /// Integer value with C-style truncation for floats (NaN becomes 0 here; conversions of
    /// arrays follow the cast table in the backends).
    pub fn as_i64(self) -> i64 {
        match self {
            Scalar::Bool(b) => b as i64,
            Scalar::Int(i) => i,
            Scalar::UInt(u) => u as i64,
            Scalar::Float(f) | Scalar::Complex(f, _) => f as i64,
        }
    }

    pub fn as_u64(self) -> u64 {
        match self {
            Scalar::Bool(b) => b as u64,
            Scalar::Int(i) => i as u64,
            Scalar::UInt(u) => u,
            Scalar::Float(f) | Scalar::Complex(f, _) => f as u64,
        }
    }

    pub fn as_bool(self) -> bool {
        match self {
            Scalar::Bool(b) => b,
            Scalar::Int(i) => i != 0,
            Scalar::UInt(u) => u != 0,
            Scalar::Float(f) => f != 0.0,
            Scalar::Complex(re, im) => re != 0.0 || im != 0.0,
        }
    }

    /// The imaginary part (0 for real scalars).
    pub fn imag(self) -> f64 {
        match self {
            Scalar::Complex(_, im) => im,
            _ => 0.0,
        }
    }

    fn key(self) -> (u8, u64, u64) {
        match self {
            Scalar::Bool(b) => (0, b as u64, 0),
            Scalar::Int(i) => (1, i as u64, 0),
            Scalar::UInt(u) => (2, u, 0),
            Scalar::Float(f) => (3, f.to_bits(), 0),
            Scalar::Complex(re, im) => (4, re.to_bits(), im.to_bits()),
        }
    }
}

/// How a scalar is serialised (function export): floats by bit pattern, so NaN, infinities
/// and -0 survive text formats such as JSON exactly.
#[derive(serde::Serialize, serde::Deserialize)]
enum ScalarBits {
    Bool(bool),
    Int(i64),
    UInt(u64),
    Float(u64),
    Complex(u64, u64),
}

impl From<Scalar> for ScalarBits {
    fn from(s: Scalar) -> ScalarBits {
        match s {
            Scalar::Bool(b) => ScalarBits::Bool(b),
            Scalar::Int(i) => ScalarBits::Int(i),
            Scalar::UInt(u) => ScalarBits::UInt(u),
            Scalar::Float(f) => ScalarBits::Float(f.to_bits()),
            Scalar::Complex(re, im) => ScalarBits::Complex(re.to_bits(), im.to_bits()),
        }
    }
}

impl From<ScalarBits> for Scalar {
    fn from(s: ScalarBits) -> Scalar {
        match s {
            ScalarBits::Bool(b) => Scalar::Bool(b),
            ScalarBits::Int(i) => Scalar::Int(i),
            ScalarBits::UInt(u) => Scalar::UInt(u),
            ScalarBits::Float(f) => Scalar::Float(f64::from_bits(f)),
            ScalarBits::Complex(re, im) => Scalar::Complex(f64::from_bits(re), f64::from_bits(im)),
        }
    }
}

impl PartialEq for Scalar {
    fn eq(&self, other: &Self) -> bool {
        self.key() == other.key()
    }
}
impl Eq for Scalar {}
impl std::hash::Hash for Scalar {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.key().hash(state)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn promotion_is_symmetric_and_idempotent() {
        for a in DType::ALL {
            assert_eq!(a.promote(a), a);
            for b in DType::ALL {
                assert_eq!(a.promote(b), b.promote(a), "{a} {b}");
            }
        }
    }

    #[test]
    fn promotion_matches_mlx_examples() {
        assert_eq!(DType::U8.promote(DType::I8), DType::I16);
        assert_eq!(DType::U64.promote(DType::I64), DType::F32);
        assert_eq!(DType::F16.promote(DType::BF16), DType::F32);
        assert_eq!(DType::I64.promote(DType::F16), DType::F16);
        assert_eq!(DType::Bool.promote(DType::Bool), DType::Bool);
        assert_eq!(DType::F64.promote(DType::C64), DType::C64);
        assert_eq!(DType::C64.size(), 8);
    }

    #[test]
    fn names_round_trip() {
        for d in DType::ALL {
            assert_eq!(DType::from_name(d.name()), Some(d));
        }
    }
}
