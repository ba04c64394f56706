//! float16 and bfloat16 elementwise ops computed in float32 with bulk conversions: each run
//! is converted a block at a time into a float32 scratch buffer (`half`'s slice converters,
//! F16C on x86, for float16; vectorised bit operations for bfloat16), the float32 function
//! is applied there as one vectorised loop, and the block is rounded back once. Same values
//! as converting element by element, fewer instructions.

use crate::element::Element;
use crate::scalar::{BinaryVisitor, UnaryVisitor};
use crate::simd;
use crate::strided::{map2, output_full};
use crate::walk::{par_chunks, Plan};
use half::slice::HalfFloatSliceExt;
use half::{bf16, f16};
use kiln_base::{ArrayData, DType, Result};
use std::marker::PhantomData;

/// Elements converted per block (two float32 blocks stay in L1).
const BLOCK: usize = 256;

/// A half-precision element type with bulk conversions to and from float32.
pub(crate) trait Half: Element<Acc = f32> {
    fn widen(src: &[Self], dst: &mut [f32]);
    fn narrow(src: &[f32], dst: &mut [Self]);
}

impl Half for f16 {
    fn widen(src: &[Self], dst: &mut [f32]) {
        src.convert_to_f32_slice(dst);
    }
    fn narrow(src: &[f32], dst: &mut [Self]) {
        dst.convert_from_f32_slice(src);
    }
}

// `half`'s bfloat16 slice converters are scalar; these loops are the same conversions in a
// form LLVM vectorises (bf16 softmax over (8, 1024, 1024): 3.05 to 1.84 ms; bf16 matmul
// (8, 1024, 64) @ (8, 64, 1024): 7.2 to 3.6 ms).
impl Half for bf16 {
    fn widen(src: &[Self], dst: &mut [f32]) {
        assert_eq!(src.len(), dst.len(), "bf16 widen: lengths differ");
        simd::run(
            #[inline(always)]
            || {
                for (d, s) in dst.iter_mut().zip(src) {
                    *d = f32::from_bits(u32::from(s.to_bits()) << 16);
                }
            },
        )
    }
    fn narrow(src: &[f32], dst: &mut [Self]) {
        assert_eq!(src.len(), dst.len(), "bf16 narrow: lengths differ");
        simd::run(
            #[inline(always)]
            || {
                for (d, &x) in dst.iter_mut().zip(src) {
                    *d = bf16::from_bits(bf16_bits(x));
                }
            },
        )
    }
}

/// `x` rounded to bfloat16 as its bits: to nearest, ties to even, a NaN stays a NaN (`half`'s
/// rounding, written so that it vectorises).
#[inline(always)]
pub(crate) fn bf16_bits(x: f32) -> u16 {
    let b = x.to_bits();
    if x.is_nan() {
        ((b >> 16) | 0x0040) as u16
    } else {
        ((b + 0x7fff + ((b >> 16) & 1)) >> 16) as u16
    }
}

/// Block `[c, c + m)` of a run of `src` starting at `i` with stride `s`, as float32.
#[inline(always)]
fn load<H: Half>(src: &[H], i: usize, s: isize, c: usize, m: usize, dst: &mut [f32]) {
    if s == 1 {
        H::widen(&src[i + c..i + c + m], &mut dst[..m]);
    } else {
        for (t, d) in dst[..m].iter_mut().enumerate() {
            let k = (i as isize).wrapping_add(((c + t) as isize).wrapping_mul(s)) as usize;
            *d = src[k].to_acc();
        }
    }
}

/// A unary kernel on a half dtype: visits with the float32 function.
pub(crate) struct HalfMap<'a, H> {
    pub name: &'static str,
    pub x: &'a ArrayData,
    pub shape: &'a [usize],
    pub ty: PhantomData<H>,
}

impl<H: Half> UnaryVisitor<f32> for HalfMap<'_, H> {
    fn dtype(&self) -> DType {
        H::DTYPE
    }

    fn visit<F: Fn(f32) -> f32 + Copy + Send + Sync>(self, f: F) -> Result<ArrayData> {
        let src = self.x.buffer.host_slice::<H>();
        let plan = Plan::new(&self.x.layout.shape, [&self.x.layout]);
        output_full::<H>(self.name, self.shape, |out| {
            par_chunks(out, |chunk, start| {
                let mut a = [0f32; BLOCK];
                simd::run(
                    #[inline(always)]
                    || {
                        plan.runs(
                            start,
                            start + chunk.len(),
                            #[inline(always)]
                            |pos, [i], [s], n| {
                                let dst = &mut chunk[pos - start..pos - start + n];
                                for c in (0..n).step_by(BLOCK) {
                                    let m = BLOCK.min(n - c);
                                    load(src, i as usize, s, c, m, &mut a);
                                    a[..m].iter_mut().for_each(
                                        #[inline(always)]
                                        |v| *v = f(*v),
                                    );
                                    H::narrow(&a[..m], &mut dst[c..c + m]);
                                }
                            },
                        )
                    },
                )
            });
            Ok(())
        })
    }
}

/// A binary kernel on a half dtype: arithmetic in float32 blocks, comparisons per element.
pub(crate) struct HalfMap2<'a, H> {
    pub name: &'static str,
    pub x: &'a ArrayData,
    pub y: &'a ArrayData,
    pub shape: &'a [usize],
    pub ty: PhantomData<H>,
}

impl<H: Half> BinaryVisitor<f32> for HalfMap2<'_, H> {
    fn dtype(&self) -> DType {
        H::DTYPE
    }

    fn arith<F: Fn(f32, f32) -> f32 + Copy + Send + Sync>(self, f: F) -> Result<ArrayData> {
        let (sa, sb) = (self.x.buffer.host_slice::<H>(), self.y.buffer.host_slice::<H>());
        let plan = Plan::new(&self.x.layout.shape, [&self.x.layout, &self.y.layout]);
        output_full::<H>(self.name, self.shape, |out| {
            par_chunks(out, |chunk, start| {
                let (mut a, mut b) = ([0f32; BLOCK], [0f32; BLOCK]);
                simd::run(
                    #[inline(always)]
                    || {
                        plan.runs(
                            start,
                            start + chunk.len(),
                            #[inline(always)]
                            |pos, [i, j], [si, sj], n| {
                                let dst = &mut chunk[pos - start..pos - start + n];
                                for c in (0..n).step_by(BLOCK) {
                                    let m = BLOCK.min(n - c);
                                    load(sa, i as usize, si, c, m, &mut a);
                                    load(sb, j as usize, sj, c, m, &mut b);
                                    a[..m].iter_mut().zip(&b[..m]).for_each(
                                        #[inline(always)]
                                        |(p, &q)| *p = f(*p, q),
                                    );
                                    H::narrow(&a[..m], &mut dst[c..c + m]);
                                }
                            },
                        )
                    },
                )
            });
            Ok(())
        })
    }

    fn compare<F: Fn(f32, f32) -> bool + Copy + Send + Sync>(self, f: F) -> Result<ArrayData> {
        use crate::element::Bool8;
        output_full::<Bool8>(self.name, self.shape, |out| {
            map2(self.x, self.y, out, |a: H, b: H| Bool8(f(a.to_acc(), b.to_acc()) as u8));
            Ok(())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The vectorised bfloat16 conversions give `half`'s bits, NaN payloads and ties included.
    #[test]
    fn bf16_conversions_match_half() {
        let ties =
            [0x3f80_8000u32, 0x3f81_8000, 0x3f80_8001, 0x7f7f_ffff, 0xff80_0001, 0x7fc0_1234];
        let xs: Vec<f32> =
            (0..u32::MAX / 65_521).map(|i| i * 65_521).chain(ties).map(f32::from_bits).collect();
        let mut ours = vec![bf16::ZERO; xs.len()];
        <bf16 as Half>::narrow(&xs, &mut ours);
        for (x, o) in xs.iter().zip(&ours) {
            assert_eq!(o.to_bits(), bf16::from_f32(*x).to_bits(), "{:#x}", x.to_bits());
        }
        let mut back = vec![0f32; xs.len()];
        <bf16 as Half>::widen(&ours, &mut back);
        for (o, b) in ours.iter().zip(&back) {
            assert_eq!(b.to_bits(), o.to_f32().to_bits());
        }
    }
}
