//! Unary elementwise ops: the family's closure from scalar.rs, mapped over the input.
//! Floating-point inputs take the vectorised polynomial math of `vecmath.rs` for the
//! transcendental functions it covers (scalar.rs keeps libm's as the reference), and half
//! floats are computed a float32 block at a time (`halfmap.rs`).

use crate::element::{dispatch, Element};
use crate::halfmap::HalfMap;
use crate::scalar::{Num, UnaryVisitor};
use crate::simd::{Exec, Plain, Simd};
use crate::strided::{map1_in, output_full};
use crate::vecmath;
use half::{bf16, f16};
use kiln_base::{ArrayData, DType, Result, UnaryOp};
use std::marker::PhantomData;

pub(crate) fn unary(op: UnaryOp, x: &ArrayData, shape: &[usize]) -> Result<ArrayData> {
    let name = op.facts().name;
    match x.dtype {
        DType::F32 => f32_unary(op, Map::<f32, Simd> { name, x, shape, ty: PhantomData }),
        DType::F16 => f32_unary(op, HalfMap::<f16> { name, x, shape, ty: PhantomData }),
        DType::BF16 => f32_unary(op, HalfMap::<bf16> { name, x, shape, ty: PhantomData }),
        _ => {
            dispatch!(x.dtype, T => <T as Element>::Acc::unary(op, Map::<T, Plain> { name, x, shape, ty: PhantomData }))
        }
    }
}

/// The float32 op table with `vecmath`'s branch-free functions in place of libm's.
fn f32_unary<V: UnaryVisitor<f32>>(op: UnaryOp, v: V) -> Result<ArrayData> {
    match op {
        UnaryOp::Exp => v.visit(vecmath::exp),
        UnaryOp::Expm1 => v.visit(vecmath::expm1),
        UnaryOp::Log => v.visit(vecmath::log),
        UnaryOp::Log1p => v.visit(vecmath::log1p),
        UnaryOp::Tanh => v.visit(vecmath::tanh),
        UnaryOp::Sigmoid => v.visit(vecmath::sigmoid),
        UnaryOp::Erf => v.visit(vecmath::erf),
        _ => f32::unary(op, v),
    }
}

/// The kernel for one dtype; `E` says whether its loops get the SIMD copies (float32 only).
struct Map<'a, T, E> {
    name: &'static str,
    x: &'a ArrayData,
    shape: &'a [usize],
    ty: PhantomData<(T, E)>,
}

impl<T: Element, E: Exec> UnaryVisitor<T::Acc> for Map<'_, T, E> {
    fn dtype(&self) -> DType {
        T::DTYPE
    }

    fn visit<F: Fn(T::Acc) -> T::Acc + Copy + Send + Sync>(self, f: F) -> Result<ArrayData> {
        output_full::<T>(self.name, self.shape, |out| {
            map1_in::<E, T, T>(
                self.x,
                out,
                #[inline(always)]
                |a: T| T::from_acc(f(a.to_acc())),
            );
            Ok(())
        })
    }
}
