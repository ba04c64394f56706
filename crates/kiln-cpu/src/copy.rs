//! Data movement: Copy, the view primitives (Reshape, Transpose, BroadcastTo, Slice) and
//! Concatenate. Elements move as raw bits of their width, so one kernel serves every dtype.

use crate::element::{dispatch_bits, Element};
use crate::strided::{flat, map1, output, output_full};
use kiln_base::shape::size_of;
use kiln_base::{ArrayData, Layout, Primitive, Result};

/// A row-contiguous copy of any view.
pub(crate) fn copy(x: &ArrayData, shape: &[usize]) -> Result<ArrayData> {
    dispatch_bits!(x.dtype, T => {
        let mut data = output_full::<T>("copy", shape, |out| {
            map1(x, out, |v: T| v);
            Ok(())
        })?;
        data.dtype = x.dtype;
        Ok(data)
    })
}

/// A view primitive: a new layout over the input's buffer, or for a reshape the strides
/// cannot express, a contiguous copy under the new shape.
pub(crate) fn view(prim: &Primitive, x: &ArrayData, shape: &[usize]) -> Result<ArrayData> {
    match prim.view_layout(&x.layout) {
        Some(layout) => Ok(ArrayData { buffer: x.buffer.clone(), layout, dtype: x.dtype }),
        None => {
            let mut data = copy(x, &x.layout.shape)?;
            data.layout = Layout::contiguous(shape);
            Ok(data)
        }
    }
}

/// Joins inputs along `axis`: each input fills a run of `inner` elements in each of the
/// `outer` rows of the output.
pub(crate) fn concatenate(xs: &[ArrayData], axis: usize, shape: &[usize]) -> Result<ArrayData> {
    let dtype = xs.first().map_or(kiln_base::DType::F32, |x| x.dtype);
    dispatch_bits!(dtype, T => {
        let mut data = output::<T>("concatenate", shape, |out| {
            join::<T>(xs, axis, shape, out);
            Ok(())
        })?;
        data.dtype = dtype;
        Ok(data)
    })
}

fn join<T: Element>(xs: &[ArrayData], axis: usize, shape: &[usize], out: &mut [T]) {
    let outer = size_of(&shape[..axis]);
    let row = size_of(&shape[axis..]);
    let mut start = 0;
    for x in xs {
        let inner = size_of(&x.layout.shape[axis..]);
        if inner > 0 {
            let rows = out.chunks_mut(row).take(outer).map(|r| &mut r[start..start + inner]);
            if let Some(src) = flat::<T>(x) {
                for (dst, src) in rows.zip(src.chunks(inner)) {
                    dst.copy_from_slice(src);
                }
            } else {
                let src = x.buffer.host_slice::<T>();
                let mut idx = x.layout.indices();
                for dst in rows {
                    for (d, i) in dst.iter_mut().zip(idx.by_ref()) {
                        *d = src[i];
                    }
                }
            }
        }
        start += inner;
    }
}
