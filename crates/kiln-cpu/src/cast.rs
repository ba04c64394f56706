//! AsType: every dtype to every dtype. int -> int wraps, x -> bool is `x != 0` (NaN is
//! true), float -> float rounds to nearest. float -> int truncates toward zero and, for NaN
//! and out-of-range values, gives what MLX's x86 build gives (C++ leaves it undefined):
//! the 32-bit `cvtt` result for int32 and narrower (i32::MIN, then wrapped), the 64-bit one
//! for int64 and uint32, and the compiler's unsigned sequence for uint64.

use crate::element::{dispatch, Element};
use crate::strided::{map1, output_full};
use kiln_base::{ArrayData, Result};

pub(crate) fn astype(x: &ArrayData, shape: &[usize], to: kiln_base::DType) -> Result<ArrayData> {
    dispatch!(x.dtype, S => dispatch!(to, D => convert::<S, D>(x, shape)))
}

fn convert<S: Element, D: Element>(x: &ArrayData, shape: &[usize]) -> Result<ArrayData> {
    output_full::<D>("astype", shape, |out| {
        map1(x, out, |s: S| s.cast::<D>());
        Ok(())
    })
}
