//! `contiguous`: a row-major (or, when allowed, column-major) array, copied only when the
//! input's layout is not one already.

use super::record;
use crate::array::Array;
use kiln_base::{Primitive, Result};

/// `x` itself when it is evaluated and row-contiguous (or column-contiguous with
/// `allow_col_major`), else a row-contiguous copy.
pub fn contiguous(x: &Array, allow_col_major: bool) -> Result<Array> {
    if x.is_evaluated() {
        let l = &x.data()?.layout;
        if l.row_contiguous || (allow_col_major && l.col_contiguous) {
            return Ok(x.clone());
        }
    }
    record(Primitive::Copy, vec![x.clone()])
}
