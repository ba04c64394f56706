//! Binary elementwise ops (arithmetic and comparisons) and Where. Half floats compute in
//! float32 blocks (`halfmap.rs`).

use crate::element::{dispatch, dispatch_bits, Bool8, Element};
use crate::halfmap::HalfMap2;
use crate::scalar::{BinaryVisitor, Num};
use crate::simd::{Exec, Plain, Simd};
use crate::strided::{map2_in, map3, output_full};
use kiln_base::{ArrayData, BinaryOp, DType, Result};
use std::marker::PhantomData;

pub(crate) fn binary(
    op: BinaryOp,
    x: &ArrayData,
    y: &ArrayData,
    shape: &[usize],
) -> Result<ArrayData> {
    let name = op.facts().name;
    match x.dtype {
        DType::F32 => f32::binary(op, Map2::<f32, Simd> { name, x, y, shape, ty: PhantomData }),
        DType::F16 => f32::binary(op, HalfMap2::<half::f16> { name, x, y, shape, ty: PhantomData }),
        DType::BF16 => {
            f32::binary(op, HalfMap2::<half::bf16> { name, x, y, shape, ty: PhantomData })
        }
        _ => dispatch!(x.dtype, T => {
            <T as Element>::Acc::binary(op, Map2::<T, Plain> { name, x, y, shape, ty: PhantomData })
        }),
    }
}

/// The kernel for one dtype; `E` says whether its loops get the SIMD copies (float32 only).
struct Map2<'a, T, E> {
    name: &'static str,
    x: &'a ArrayData,
    y: &'a ArrayData,
    shape: &'a [usize],
    ty: PhantomData<(T, E)>,
}

impl<T: Element, E: Exec> BinaryVisitor<T::Acc> for Map2<'_, T, E> {
    fn dtype(&self) -> DType {
        T::DTYPE
    }

    fn arith<F: Fn(T::Acc, T::Acc) -> T::Acc + Copy + Send + Sync>(
        self,
        f: F,
    ) -> Result<ArrayData> {
        output_full::<T>(self.name, self.shape, |out| {
            map2_in::<E, T, T, T>(
                self.x,
                self.y,
                out,
                #[inline(always)]
                |a: T, b: T| T::from_acc(f(a.to_acc(), b.to_acc())),
            );
            Ok(())
        })
    }

    fn compare<F: Fn(T::Acc, T::Acc) -> bool + Copy + Send + Sync>(
        self,
        f: F,
    ) -> Result<ArrayData> {
        output_full::<Bool8>(self.name, self.shape, |out| {
            map2_in::<E, T, T, Bool8>(
                self.x,
                self.y,
                out,
                #[inline(always)]
                |a: T, b: T| Bool8(f(a.to_acc(), b.to_acc()) as u8),
            );
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
    let mut data = output_full::<T>("where", shape, |out| {
        map3(cond, x, y, out, |c: u8, a: T, b: T| if c != 0 { a } else { b });
        Ok(())
    })?;
    data.dtype = dtype;
    Ok(data)
}
