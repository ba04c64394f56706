//! Merging the dims of a strided walk: neighbouring dims whose strides line up for every
//! operand become one, so kernels do fewer index divisions. Used by every strided kernel
//! (copies, complex parts, generated elementwise code).

use kiln_base::{ArrayData, Layout};

/// Dims of `shape` merged where every input's strides allow (fewer index divisions), with
/// each input's strides over the merged dims.
pub fn collapse(shape: &[usize], inputs: &[ArrayData]) -> (Vec<i64>, Vec<Vec<i64>>) {
    let layouts: Vec<&Layout> = inputs.iter().map(|x| &x.layout).collect();
    collapse_layouts(shape, &layouts)
}

/// `collapse` over layouts.
pub fn collapse_layouts(shape: &[usize], inputs: &[&Layout]) -> (Vec<i64>, Vec<Vec<i64>>) {
    let mut dims: Vec<i64> = Vec::new();
    let mut strides: Vec<Vec<i64>> = vec![Vec::new(); inputs.len()];
    for (d, &extent) in shape.iter().enumerate() {
        if extent == 1 {
            continue;
        }
        let mergeable = !dims.is_empty()
            && inputs.iter().enumerate().all(|(k, x)| {
                let last = *strides[k].last().expect("same length as dims");
                last == x.strides[d] as i64 * extent as i64
            });
        if mergeable {
            *dims.last_mut().expect("nonempty") *= extent as i64;
            for (k, x) in inputs.iter().enumerate() {
                *strides[k].last_mut().expect("nonempty") = x.strides[d] as i64;
            }
        } else {
            dims.push(extent as i64);
            for (k, x) in inputs.iter().enumerate() {
                strides[k].push(x.strides[d] as i64);
            }
        }
    }
    if dims.is_empty() {
        dims.push(1);
        for s in &mut strides {
            s.push(0);
        }
    }
    (dims, strides)
}
