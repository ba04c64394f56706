//! Inverse error function. f32 uses the single-precision approximation MLX uses (N. Juffa's,
//! max error ~2.4 ulp); f64 starts from the same polynomial evaluated in f64 and refines with
//! Newton steps on erf (or on ln erfc near ±1, where 1 - |y| is exact and erf loses digits).

// The published decimal forms of the f32 coefficients (as in MLX's source).
#[allow(clippy::excessive_precision)]
const TAIL: [f32; 9] = [
    3.03697567e-10,
    2.93243101e-8,
    1.22150334e-6,
    2.84108955e-5,
    3.93552968e-4,
    3.02698812e-3,
    4.83185798e-3,
    -2.64646143e-1,
    8.40016484e-1,
];
#[allow(clippy::excessive_precision)]
const CENTRE: [f32; 10] = [
    5.43877832e-9,
    1.43285448e-7,
    1.22774793e-6,
    1.12963626e-7,
    -5.61530760e-5,
    -1.47697632e-4,
    2.31468678e-3,
    1.15392581e-2,
    -2.32015476e-1,
    8.86226892e-1,
];

macro_rules! juffa {
    ($name:ident, $t:ty) => {
        /// a * P(log(1 - a^2)), the two-branch polynomial; ±1 gives ±inf, |a| > 1 NaN.
        fn $name(a: $t) -> $t {
            let t = a.mul_add(-a, 1.0).ln();
            let coeffs: &[f32] = if t.abs() > 6.125 { &TAIL } else { &CENTRE };
            let p = coeffs[1..].iter().fold(coeffs[0] as $t, |p: $t, &c| p.mul_add(t, c as $t));
            a * p
        }
    };
}

juffa!(juffa_f32, f32);
juffa!(juffa_f64, f64);

pub fn erfinv_f32(a: f32) -> f32 {
    juffa_f32(a)
}

pub fn erfinv_f64(y: f64) -> f64 {
    let a = y.abs();
    if a == 1.0 {
        return y * f64::INFINITY;
    }
    if a > 1.0 || a.is_nan() {
        return f64::NAN;
    }
    if a == 0.0 {
        return y;
    }
    let two_over_sqrt_pi = std::f64::consts::FRAC_2_SQRT_PI;
    // 1 - a is exact for a in [0.5, 1]; the tail works with it, not with a.
    let c = 1.0 - a;
    let mut x = if c > 1e-7 {
        juffa_f64(a)
    } else {
        // Past the polynomial's range: erfc(x) ~ exp(-x^2) / (x sqrt(pi)).
        let l = -c.ln();
        (l - (std::f64::consts::PI * l).sqrt().ln()).sqrt()
    };
    for _ in 0..8 {
        let slope = two_over_sqrt_pi * (-x * x).exp();
        let step = if a <= 0.5 {
            (libm::erf(x) - a) / slope
        } else {
            // Newton on ln(erfc(x)) = ln(c): near-quadratic in x, so it converges from afar.
            let e = libm::erfc(x);
            (c.ln() - e.ln()) * e / slope
        };
        if !step.is_finite() {
            break;
        }
        x -= step;
        if step.abs() <= x.abs() * 1e-17 {
            break;
        }
    }
    x.copysign(y)
}

#[cfg(test)]
mod tests {
    use super::*;

    // Reference values from scipy.special.erfinv / mpmath.
    const KNOWN: [(f64, f64); 6] = [
        (0.5, 0.476_936_276_204_469_9),
        (0.1, 0.088_855_990_494_257_69),
        (0.9, 1.163_087_153_676_674_3),
        (0.999, 2.326_753_765_513_524_6),
        (-0.75, -0.813_419_847_597_618_5),
        (1e-10, 8.862_269_254_527_58e-11),
    ];

    #[test]
    fn known_values() {
        for (y, x) in KNOWN {
            let r64 = erfinv_f64(y);
            assert!((r64 - x).abs() <= 4.0 * f64::EPSILON * x.abs(), "{y}: {r64} vs {x}");
            // f32 against the exact value at the f32-rounded argument (~2.4 ulp).
            let (y32, r32) = (y as f32, erfinv_f32(y as f32));
            let x32 = erfinv_f64(y32 as f64);
            assert!((r32 as f64 - x32).abs() <= 4e-7 * x32.abs(), "{y}: {r32} vs {x32}");
        }
    }

    #[test]
    fn edges_and_round_trip() {
        assert_eq!(erfinv_f64(1.0), f64::INFINITY);
        assert_eq!(erfinv_f64(-1.0), f64::NEG_INFINITY);
        assert!(erfinv_f64(1.5).is_nan() && erfinv_f64(f64::NAN).is_nan());
        assert_eq!(erfinv_f32(1.0), f32::INFINITY);
        assert_eq!(erfinv_f32(-1.0), f32::NEG_INFINITY);
        assert!(erfinv_f32(-1.01).is_nan() && erfinv_f32(f32::NAN).is_nan());
        assert_eq!(erfinv_f64(0.0), 0.0);
        for i in 1..1000 {
            let y = i as f64 / 1000.0 - 1e-9;
            let x = erfinv_f64(y);
            assert!((libm::erf(x) - y).abs() <= 4.0 * f64::EPSILON, "{y}");
        }
        // Deep tail: erfc(erfinv(1 - d)) == d.
        for d in [1e-12, 1e-15, f64::EPSILON / 2.0] {
            let (y, x) = (1.0 - d, erfinv_f64(1.0 - d));
            assert!((libm::erfc(x) / (1.0 - y) - 1.0).abs() < 1e-13, "{d}: {x}");
        }
    }
}
