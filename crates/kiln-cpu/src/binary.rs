//! Binary elementwise ops (arithmetic and comparisons) and Where.

use crate::element::{dispatch, dispatch_bits, Bool8, Element};
use crate::scalar::{BinaryVisitor, Num};
use crate::strided::{map2, map3, output};
use kiln_base::{ArrayData, BinaryOp, DType, Result};
use std::marker::PhantomData;

pub(crate) fn binary(
    op: BinaryOp,
    x: &ArrayData,
    y: &ArrayData,
    shape: &[usize],
) -> Result<ArrayData> {
    let name = op.facts().name;
    dispatch!(x.dtype, T => {
        <T as Element>::Acc::binary(op, Map2::<T> { name, x, y, shape, ty: PhantomData })
    })
}

struct Map2<'a, T> {
    name: &'static str,
    x: &'a ArrayData,
    y: &'a ArrayData,
    shape: &'a [usize],
    ty: PhantomData<T>,
}

impl<T: Element> BinaryVisitor<T::Acc> for Map2<'_, T> {
    fn dtype(&self) -> DType {
        T::DTYPE
    }

    fn arith<F: Fn(T::Acc, T::Acc) -> T::Acc + Copy + Send + Sync>(
        self,
        f: F,
    ) -> Result<ArrayData> {
        output::<T>(self.name, self.shape, |out| {
            map2(self.x, self.y, out, |a: T, b: T| T::from_acc(f(a.to_acc(), b.to_acc())));
            Ok(())
        })
    }

    fn compare<F: Fn(T::Acc, T::Acc) -> bool + Copy + Send + Sync>(
        self,
        f: F,
    ) -> Result<ArrayData> {
        output::<Bool8>(self.name, self.shape, |out| {
            map2(self.x, self.y, out, |a: T, b: T| Bool8(f(a.to_acc(), b.to_acc()) as u8));
            Ok(())
        })
    }
}

/// `cond ? x : y`, moving raw element bits (any nonzero cond byte counts as true).
pub(crate) fn where_(
    cond: &ArrayData,
    x: &ArrayData,
    y: &ArrayData,
    shape: &[usize],
) -> Result<ArrayData> {
    dispatch_bits!(x.dtype, T => select::<T>(cond, x, y, shape, x.dtype))
}

fn select<T: Element>(
    cond: &ArrayData,
    x: &ArrayData,
    y: &ArrayData,
    shape: &[usize],
    dtype: DType,
) -> Result<ArrayData> {
    let mut data = output::<T>("where", shape, |out| {
        map3(cond, x, y, out, |c: u8, a: T, b: T| if c != 0 { a } else { b });
        Ok(())
    })?;
    data.dtype = dtype;
    Ok(data)
}
