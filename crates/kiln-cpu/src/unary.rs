//! Unary elementwise ops: the family's closure from scalar.rs, mapped over the input.

use crate::element::{dispatch, Element};
use crate::scalar::{Num, UnaryVisitor};
use crate::strided::{map1, output};
use kiln_base::{ArrayData, DType, Result, UnaryOp};
use std::marker::PhantomData;

pub(crate) fn unary(op: UnaryOp, x: &ArrayData, shape: &[usize]) -> Result<ArrayData> {
    let name = op.facts().name;
    dispatch!(x.dtype, T => <T as Element>::Acc::unary(op, Map::<T> { name, x, shape, ty: PhantomData }))
}

struct Map<'a, T> {
    name: &'static str,
    x: &'a ArrayData,
    shape: &'a [usize],
    ty: PhantomData<T>,
}

impl<T: Element> UnaryVisitor<T::Acc> for Map<'_, T> {
    fn dtype(&self) -> DType {
        T::DTYPE
    }

    fn visit<F: Fn(T::Acc) -> T::Acc + Copy + Send + Sync>(self, f: F) -> Result<ArrayData> {
        output::<T>(self.name, self.shape, |out| {
            map1(self.x, out, |a: T| T::from_acc(f(a.to_acc())));
            Ok(())
        })
    }
}
