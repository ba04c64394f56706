//! Branch-free float32 math for the vectorised kernels: exp, expm1, log, log1p, tanh,
//! sigmoid and erf. Each is a plain function of one `f32` made of multiplies, fused
//! multiply-adds, one division at most, bit operations and selects (`if c { a } else { b }`
//! with both sides computed), so a loop over a slice compiles to straight-line vector code
//! at any width (see `simd.rs`). Special values (NaN, ±inf, ±0, denormals, overflow) are
//! handled by the same selects, never by branches.
//!
//! The polynomials are Taylor series (exp, expm1, log's atanh series) or least-squares fits
//! on Chebyshev nodes (erf, and tanh's rational function; `scripts/fit_vecmath.py`
//! reproduces them). Coefficients are listed highest degree first, for Horner's rule with
//! FMA. They live in kiln-codegen's `math.rs`, which writes the same functions for generated
//! C kernels (vector code, one operation for each here): compiled and eager results are
//! equal bit for bit (kiln-cpu's `fused_vectors` test).
//!
//! Maximum error against an f64 reference, in units in the last place of the float32 result
//! (measured by the tests below over a sweep of every 241st float32 plus dense grids, and
//! asserted there with a small margin):
//!
//! | function | max error (ulp) | notes |
//! |---|---|---|
//! | exp     | 0.92 | 0 below -103.97, inf above 88.72, denormal results rounded once |
//! | expm1   | 1.52 | Taylor below 0.5 in magnitude, `exp(x) - 1` above |
//! | log     | 1.95 | NaN below 0 (and for -inf), -inf at ±0, denormal inputs exact |
//! | log1p   | 2.66 | series on `x / (2 + x)` near 0, else `log(1+x)` corrected by `x / ((1+x) - 1)` |
//! | tanh    | 5.25 | `x P(x^2) / Q(x^2)`, a rational fit; odd by construction, ±1 past 9 |
//! | sigmoid | 2.30 | `exp(-|x|)` over `1 + exp(-|x|)`: no overflow, tiny results exact |
//! | erf     | 5.35 | `x P(x^2) / Q(x^2)`, a rational fit, up to 3.925, ±1 past it |

// The constants are kiln-codegen's (`math.rs`): generated C kernels compute the same
// functions from them, operation for operation, so compiled and eager results are equal.
use kiln_codegen::math::{
    ERF_CLAMP, ERF_P, ERF_Q, EXPM1_TAYLOR, EXP_HI, EXP_LO, EXP_TAYLOR, LN2_HI, LN2_LO, LOG1P_NEAR,
    LOG_ATANH, ROUND_SHIFT, TANH_P, TANH_Q,
};

/// Horner's rule with fused multiply-adds; `c` from the highest degree down.
#[inline(always)]
fn poly<const N: usize>(x: f32, c: &[f32; N]) -> f32 {
    let mut acc = c[0];
    for &k in &c[1..] {
        acc = acc.mul_add(x, k);
    }
    acc
}

/// 2^k for k in [-126, 127], built from its exponent bits.
#[inline(always)]
fn pow2i(k: i32) -> f32 {
    f32::from_bits((k.wrapping_add(127) as u32) << 23)
}

/// e^x (max error 0.92 ulp).
#[inline(always)]
pub fn exp(x: f32) -> f32 {
    // Beyond these e^x rounds to inf / 0 anyway; clamping keeps 2^n representable in two
    // factors. A NaN fails both comparisons and flows through to the result.
    let x = if x > EXP_HI { EXP_HI } else { x };
    let x = if x < EXP_LO { EXP_LO } else { x };
    // x = n ln2 + r with n = round(x / ln2), |r| <= ln2/2.
    let t = x.mul_add(std::f32::consts::LOG2_E, ROUND_SHIFT);
    let n = t - ROUND_SHIFT;
    let ni = (t.to_bits() as i32).wrapping_sub(ROUND_SHIFT.to_bits() as i32);
    let r = n.mul_add(-LN2_HI, x);
    let r = n.mul_add(-LN2_LO, r);
    let p = poly(r, &EXP_TAYLOR);
    // p 2^n as p 2^k1 2^k2 (n in [-150, 129] leaves the exponent range): the first product
    // is exact, the second rounds once, also into the denormals.
    let k1 = ni >> 1;
    let k2 = ni.wrapping_sub(k1);
    p * pow2i(k1) * pow2i(k2)
}

/// e^x - 1, accurate near 0 (max error 1.52 ulp).
#[inline(always)]
pub fn expm1(x: f32) -> f32 {
    let small = x * poly(x, &EXPM1_TAYLOR);
    // For |x| >= 0.5 the subtraction cancels at most a factor of about 2.5.
    let big = exp(x) - 1.0;
    if x.abs() < 0.5 {
        small
    } else {
        big
    }
}

/// log m = 2 atanh(s) from s = (m-1)/(m+1), for m in [sqrt(1/2), sqrt(2)].
#[inline(always)]
fn log_series(s: f32) -> f32 {
    let s2 = s + s;
    let z = s * s;
    s2.mul_add(poly(z, &LOG_ATANH) * z, s2)
}

/// Natural log (max error 1.95 ulp).
#[inline(always)]
pub fn log(x: f32) -> f32 {
    // Denormals: scale by 2^23 into the normal range first.
    let tiny = x < f32::MIN_POSITIVE;
    let xs = if tiny { x * 8_388_608.0 } else { x };
    // x = m 2^e with m in [sqrt(1/2), sqrt(2)): the exponent of x / sqrt(1/2), read from the
    // bits (0x3f3504f3 is sqrt(1/2)).
    let bits = xs.to_bits() as i32;
    let e = bits.wrapping_sub(0x3f35_04f3) >> 23;
    let m = f32::from_bits(bits.wrapping_sub(e << 23) as u32);
    let e = e as f32 - if tiny { 23.0 } else { 0.0 };
    let log_m = log_series((m - 1.0) / (m + 1.0));
    let r = e.mul_add(LN2_HI, e.mul_add(LN2_LO, log_m));
    let r = if x == f32::INFINITY { x } else { r };
    let r = if x == 0.0 { f32::NEG_INFINITY } else { r };
    // Negative numbers, -inf and NaN.
    if x < 0.0 || x.is_nan() {
        f32::NAN
    } else {
        r
    }
}

/// log(1 + x), accurate near 0 (max error 2.66 ulp).
#[inline(always)]
pub fn log1p(x: f32) -> f32 {
    let u = 1.0 + x;
    // Near 0 the series takes s = x / (2 + x) straight from x (no rounded 1 + x); elsewhere
    // log(u) is the log of the rounded 1 + x and x / (u - 1) scales it to the exact one.
    let near = log_series(x / (2.0 + x));
    let far = log(u) * (x / (u - 1.0));
    let r = if x > LOG1P_NEAR.0 && x < LOG1P_NEAR.1 { near } else { far };
    // u == 1: x is below half an ulp of 1, where log1p(x) rounds to x (also keeps -0).
    let r = if u == 1.0 { x } else { r };
    if u == f32::INFINITY {
        u
    } else {
        r
    }
}

/// Hyperbolic tangent (max error 5.25 ulp).
#[inline(always)]
pub fn tanh(x: f32) -> f32 {
    let a = x.abs();
    let t = a * a;
    let r = a * poly(t, &TANH_P) / poly(t, &TANH_Q);
    // Rounding can lift the rational just above 1 near 9: cap it. Past 9 tanh is within
    // 0.52 ulp of 1 (it rounds to 1 past 9.01); that select also covers a = inf and huge
    // a, whose rational is inf / inf. NaN fails both comparisons and passes.
    let r = if r > 1.0 || a > 9.0 { 1.0 } else { r };
    r.copysign(x)
}

/// The logistic function 1 / (1 + e^-x) (max error 2.30 ulp).
#[inline(always)]
pub fn sigmoid(x: f32) -> f32 {
    // t = e^-|x| never overflows; for x < 0, t / (1 + t) keeps tiny results exact.
    let t = exp(-x.abs());
    let num = if x < 0.0 { t } else { 1.0 };
    num / (1.0 + t)
}

/// The error function (max error 2.36 ulp).
#[inline(always)]
pub fn erf(x: f32) -> f32 {
    // Past the clamp erf rounds to ±1 (erfc(3.925) = 2.7e-8); NaN fails every comparison.
    let lo = if x < -ERF_CLAMP { -ERF_CLAMP } else { x };
    let c = if lo > ERF_CLAMP { ERF_CLAMP } else { lo };
    let z = c * c;
    let r = c * (poly(z, &ERF_P) / poly(z, &ERF_Q));
    // Rounding lifts the rational just past 1 near the clamp.
    let hi = if r > 1.0 { 1.0 } else { r };
    if hi < -1.0 {
        -1.0
    } else {
        hi
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// |y - reference| in ulps of the reference rounded to f32 (denormal ulp 2^-149).
    fn ulps(y: f32, reference: f64) -> f64 {
        if reference.is_nan() {
            return if y.is_nan() { 0.0 } else { f64::INFINITY };
        }
        if reference.is_infinite() || y.is_infinite() {
            // Overflow: right when the reference rounds to the same infinity.
            return if y == reference as f32 { 0.0 } else { f64::INFINITY };
        }
        let r = (reference as f32).abs();
        let ulp = if r >= f32::MAX {
            2f64.powi(104)
        } else {
            (f32::from_bits(r.to_bits() + 1) - r) as f64
        }
        .max(2f64.powi(-149));
        (y as f64 - reference).abs() / ulp
    }

    /// Test inputs: every 241st bit pattern (both signs, all magnitudes) and dense grids.
    fn inputs(grid: &[(f32, f32)]) -> Vec<f32> {
        let mut xs: Vec<f32> = (0..u32::MAX / 241).map(|i| f32::from_bits(i * 241)).collect();
        for &(lo, hi) in grid {
            let n = 200_000;
            xs.extend((0..=n).map(|i| lo + (hi - lo) * (i as f32 / n as f32)));
        }
        xs
    }

    /// The worst error of `f` against `reference` over `xs`, and where.
    fn worst(xs: &[f32], f: fn(f32) -> f32, reference: fn(f64) -> f64) -> (f64, f32) {
        let mut worst = (0.0, 0.0);
        for &x in xs {
            let e = ulps(f(x), reference(x as f64));
            if e > worst.0 || e.is_nan() {
                worst = (e, x);
            }
        }
        worst
    }

    fn check(
        name: &str,
        f: fn(f32) -> f32,
        reference: fn(f64) -> f64,
        bound: f64,
        grid: &[(f32, f32)],
    ) {
        let (e, at) = worst(&inputs(grid), f, reference);
        println!("{name}: max error {e:.3} ulp at {at:e}");
        assert!(e <= bound, "{name}: {e} ulp at {at:e} (bound {bound})");
    }

    #[test]
    fn exp_error() {
        check("exp", exp, f64::exp, 1.0, &[(-104.0, 89.0), (-1.0, 1.0)]);
    }

    #[test]
    fn expm1_error() {
        check("expm1", expm1, f64::exp_m1, 1.6, &[(-20.0, 89.0), (-1.0, 1.0), (-1e-3, 1e-3)]);
    }

    #[test]
    fn log_error() {
        check("log", log, f64::ln, 2.0, &[(0.0, 4.0), (0.9, 1.1), (0.0, 1e-37)]);
    }

    #[test]
    fn log1p_error() {
        check("log1p", log1p, f64::ln_1p, 2.7, &[(-1.0, 4.0), (-1e-3, 1e-3), (1e6, 1e9)]);
    }

    #[test]
    fn tanh_error() {
        check("tanh", tanh, f64::tanh, 5.3, &[(-10.0, 10.0), (-0.6, 0.6), (-1e-4, 1e-4)]);
    }

    /// tanh stays in [-1, 1] and is odd bit for bit (on a dense grid through the rational's
    /// whole range and past the switch to ±1 at 9).
    #[test]
    fn tanh_shape() {
        for i in 0..=2_000_000 {
            let x = -10.0 + 20.0 * (i as f32 / 2_000_000.0);
            let y = tanh(x);
            assert!((-1.0..=1.0).contains(&y), "tanh({x:e}) = {y:e}");
            assert_eq!((-y).to_bits(), tanh(-x).to_bits(), "odd at {x:e}");
        }
    }

    #[test]
    fn sigmoid_error() {
        fn reference(x: f64) -> f64 {
            1.0 / (1.0 + (-x).exp())
        }
        check("sigmoid", sigmoid, reference, 2.4, &[(-110.0, 20.0), (-5.0, 5.0)]);
    }

    #[test]
    fn erf_error() {
        check("erf", erf, libm::erf, 5.4, &[(-5.0, 5.0), (0.9, 1.1), (3.5, 4.5)]);
    }

    #[test]
    fn special_values() {
        let (inf, nan) = (f32::INFINITY, f32::NAN);
        for f in [exp, expm1, log, log1p, tanh, sigmoid, erf] {
            assert!(f(nan).is_nan());
        }
        assert_eq!((exp(inf), exp(-inf), exp(0.0), exp(-0.0)), (inf, 0.0, 1.0, 1.0));
        assert_eq!((exp(88.8), exp(-103.98), exp(-87.5) > 0.0), (inf, 0.0, true));
        assert_eq!(exp(-100.0).to_bits(), ((-100f64).exp() as f32).to_bits()); // denormal
        assert_eq!((expm1(inf), expm1(-inf), expm1(100.0)), (inf, -1.0, inf));
        assert_eq!(expm1(-0.0).to_bits(), (-0.0f32).to_bits());
        assert_eq!((log(0.0), log(-0.0), log(inf), log(1.0)), (-inf, -inf, inf, 0.0));
        assert!(log(-1.0).is_nan() && log(-inf).is_nan() && log(-1e-45).is_nan());
        assert_eq!(log(f32::from_bits(1)), (2f64.powi(-149).ln()) as f32);
        assert_eq!((log1p(-1.0), log1p(inf), log1p(f32::MAX)), (-inf, inf, f32::MAX.ln_1p()));
        assert!(log1p(-2.0).is_nan() && log1p(-inf).is_nan());
        assert_eq!(log1p(-0.0).to_bits(), (-0.0f32).to_bits());
        assert_eq!((log1p(1e-30), expm1(1e-30)), (1e-30, 1e-30));
        assert_eq!((tanh(inf), tanh(-inf), tanh(20.0), tanh(-9.05)), (1.0, -1.0, 1.0, -1.0));
        assert_eq!(tanh(-0.0).to_bits(), (-0.0f32).to_bits());
        assert_eq!((tanh(1e-30), erf(1e-30) > 0.0), (1e-30, true));
        assert_eq!((sigmoid(inf), sigmoid(-inf), sigmoid(0.0)), (1.0, 0.0, 0.5));
        assert_eq!(sigmoid(-100.0), (-100f64).exp() as f32); // tiny, not flushed
        assert_eq!((erf(inf), erf(-inf), erf(4.5), erf(-10.0)), (1.0, -1.0, 1.0, -1.0));
        assert_eq!(erf(-0.0).to_bits(), (-0.0f32).to_bits());
    }
}
