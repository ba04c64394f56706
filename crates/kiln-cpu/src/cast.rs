//! AsType: every dtype to every dtype. int -> int wraps, x -> bool is `x != 0` (NaN is
//! true), float -> float rounds to nearest. float -> int truncates toward zero and, for NaN
//! and out-of-range values, gives what MLX's x86 build gives (C++ leaves it undefined):
//! the 32-bit `cvtt` result for int32 and narrower (i32::MIN, then wrapped), the 64-bit one
//! for int64 and uint32, and the compiler's unsigned sequence for uint64.

use crate::element::{dispatch, Element};
use crate::strided::{map1, output_full};
use kiln_base::{ArrayData, Result};

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

pub(crate) fn astype(x: &ArrayData, shape: &[usize], to: kiln_base::DType) -> Result<ArrayData> {
    dispatch!(x.dtype, S => dispatch!(to, D => convert::<S, D>(x, shape)))
}

fn convert<S: Element, D: Element>(x: &ArrayData, shape: &[usize]) -> Result<ArrayData> {
    output_full::<D>("astype", shape, |out| {
        map1(x, out, |s: S| s.cast::<D>());
        Ok(())
    })
}
