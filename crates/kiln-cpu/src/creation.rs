//! Arange: element i is `start + i * step`, in f64 for float (and bool) dtypes, in wrapping
//! i64 for integer dtypes so large integer ranges stay exact.

use crate::element::{dispatch, Element};
use crate::strided::output;
use kiln_base::{ArrayData, DType, Result, Scalar};

pub(crate) fn arange(
    start: Scalar,
    step: Scalar,
    dtype: DType,
    shape: &[usize],
) -> Result<ArrayData> {
    dispatch!(dtype, T => output::<T>("arange", shape, |out| {
        if dtype.is_integer() {
            let (s, d) = (start.as_i64(), step.as_i64());
            for (i, o) in out.iter_mut().enumerate() {
                *o = T::from_i64(s.wrapping_add((i as i64).wrapping_mul(d)));
            }
        } else {
            let (s, d) = (start.as_f64(), step.as_f64());
            for (i, o) in out.iter_mut().enumerate() {
                // Element 0 is `start` itself (-0.0 + 0.0 would lose the sign), as numpy.
                *o = T::from_f64(if i == 0 { s } else { s + i as f64 * d });
            }
        }
        Ok(())
    }))
}
