//! Runtime SIMD dispatch. Kernels are written as plain loops over slices; `run` calls them
//! through one of three copies compiled for AVX-512, AVX2+FMA or the baseline target, picked
//! once per process from the CPU's features (no `-C target-cpu=native` build: the machines
//! that run one wheel differ). The loop body is inlined into the copy, so LLVM vectorises it
//! at that copy's width. Every copy computes the same bits: polynomials use `mul_add`, which
//! is a fused multiply-add on every level (a hardware FMA, or libm's exact `fmaf` on the
//! baseline), and all other operations are IEEE.

use std::sync::OnceLock;

/// An instruction-set level kernels are compiled for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Level {
    Avx512,
    Avx2,
    Base,
}

impl Level {
    /// Whether this CPU can run code of this level.
    pub fn available(self) -> bool {
        #[cfg(target_arch = "x86_64")]
        {
            match self {
                Level::Avx512 => {
                    std::is_x86_feature_detected!("avx512f")
                        && std::is_x86_feature_detected!("avx512bw")
                        && std::is_x86_feature_detected!("avx512dq")
                        && std::is_x86_feature_detected!("avx512vl")
                        && Level::Avx2.available()
                }
                Level::Avx2 => {
                    std::is_x86_feature_detected!("avx2")
                        && std::is_x86_feature_detected!("fma")
                        && std::is_x86_feature_detected!("f16c")
                }
                Level::Base => true,
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            self == Level::Base
        }
    }
}

/// The level kernels run at: the best one available, or `KILN_SIMD=avx2|base` to cap it
/// (for comparing levels; an unavailable request falls back to the best available).
pub fn level() -> Level {
    static LEVEL: OnceLock<Level> = OnceLock::new();
    *LEVEL.get_or_init(|| {
        let best = [Level::Avx512, Level::Avx2, Level::Base]
            .into_iter()
            .find(|l| l.available())
            .unwrap_or(Level::Base);
        let cap = match std::env::var("KILN_SIMD").as_deref() {
            Ok("avx2") => Level::Avx2,
            Ok("base") => Level::Base,
            _ => best,
        };
        if cap.available() && rank(cap) < rank(best) {
            cap
        } else {
            best
        }
    })
}

fn rank(l: Level) -> u8 {
    match l {
        Level::Base => 0,
        Level::Avx2 => 1,
        Level::Avx512 => 2,
    }
}

/// How a kernel runs its loops: `Simd` through `run` (three compiled copies), `Plain` as
/// they are (one copy, baseline vectorisation). Kernels take it as a type parameter, so only
/// the hot float paths pay for the extra copies in code size and build time.
pub trait Exec {
    fn exec<R>(f: impl FnOnce() -> R) -> R;
}

/// Loops compiled for the CPU's best level.
pub struct Simd;

/// Loops compiled once for the baseline.
pub struct Plain;

impl Exec for Simd {
    #[inline(always)]
    fn exec<R>(f: impl FnOnce() -> R) -> R {
        run(f)
    }
}

impl Exec for Plain {
    #[inline(always)]
    fn exec<R>(f: impl FnOnce() -> R) -> R {
        f()
    }
}

/// Runs `f` compiled for the process's level.
#[inline(always)]
pub fn run<R>(f: impl FnOnce() -> R) -> R {
    run_at(level(), f)
}

/// Runs `f` compiled for `level`, or for the baseline when this CPU lacks it.
#[inline(always)]
pub fn run_at<R>(level: Level, f: impl FnOnce() -> R) -> R {
    #[cfg(target_arch = "x86_64")]
    {
        if level == Level::Avx512 && Level::Avx512.available() {
            // SAFETY: the CPU has every feature the function is compiled for (checked above).
            return unsafe { avx512(f) };
        }
        if level != Level::Base && Level::Avx2.available() {
            // SAFETY: as above, for AVX2, FMA and F16C.
            return unsafe { avx2(f) };
        }
    }
    let _ = level;
    f()
}

/// The sum of a kernel's float32 lanes, halves added pairwise: a fixed order on every level,
/// so lane-wise kernels give the same bits whatever their vector width.
#[inline(always)]
pub(crate) fn pairwise<const N: usize>(lanes: &[f32; N]) -> f32 {
    debug_assert!(N.is_power_of_two(), "pairwise takes a power of two lanes");
    let mut v = *lanes;
    let mut width = N;
    while width > 1 {
        width /= 2;
        for l in 0..width {
            v[l] += v[l + width];
        }
    }
    v[0]
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vl,avx2,fma,f16c")]
unsafe fn avx512<R>(f: impl FnOnce() -> R) -> R {
    f()
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn avx2<R>(f: impl FnOnce() -> R) -> R {
    f()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vecmath;

    /// `f` over `xs` compiled at each level (a generic, so each copy inlines its own `f`).
    fn agree<F: Fn(f32) -> f32 + Copy>(xs: &[f32], f: F) {
        let at = |level| run_at(level, || xs.iter().map(|&x| f(x).to_bits()).collect::<Vec<_>>());
        let base = at(Level::Base);
        assert_eq!(at(Level::Avx2), base);
        assert_eq!(at(Level::Avx512), base);
    }

    /// Every level computes the same bits (FMA everywhere, IEEE otherwise).
    #[test]
    fn levels_agree_bitwise() {
        let xs: Vec<f32> = (0..u32::MAX / 65_521).map(|i| f32::from_bits(i * 65_521)).collect();
        agree(&xs, vecmath::exp);
        agree(&xs, vecmath::expm1);
        agree(&xs, vecmath::log);
        agree(&xs, vecmath::log1p);
        agree(&xs, vecmath::tanh);
        agree(&xs, vecmath::sigmoid);
        agree(&xs, vecmath::erf);
    }
}
