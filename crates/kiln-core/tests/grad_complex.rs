//! Gradients through complex64 values (MLX's convention: the gradient of a real loss at
//! `z = x + iy` is `dL/dx + i dL/dy`), against central finite differences on the real and
//! imaginary parts separately, and vjp against jvp with the real part of the complex inner
//! product: `Re<vjp(u), v> == Re<u, jvp(v)>`.

mod common;

use kiln_core::ops::fft::{fft1, fftn, FftNorm, FftType};
use kiln_core::ops::{self};
use kiln_core::transforms::{grad, jvp, vjp};
use kiln_core::{Array, DType, Result, Scalar};

type Fun = fn(&[Array]) -> Result<Array>;

fn values(seed: u64, n: usize, lo: f32, hi: f32) -> Vec<f32> {
    // A small LCG: deterministic inputs without a dependency.
    let mut state = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
    (0..n)
        .map(|_| {
            state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            lo + (hi - lo) * ((state >> 40) as f32 / (1u64 << 24) as f32)
        })
        .collect()
}

fn real_arr(v: &[f32], shape: &[usize]) -> Array {
    Array::from_slice(v, shape).unwrap()
}

fn complex_arr(re: &[f32], im: &[f32], shape: &[usize]) -> Array {
    let i = ops::scalar(Scalar::Complex(0.0, 1.0), DType::C64).unwrap();
    let re = ops::astype(&real_arr(re, shape), DType::C64).unwrap();
    let im = ops::astype(&real_arr(im, shape), DType::C64).unwrap();
    ops::add(&re, &ops::multiply(&im, &i).unwrap()).unwrap()
}

fn parts(a: &Array) -> (Vec<f32>, Vec<f32>) {
    let re = ops::real(a).unwrap().to_vec::<f32>().unwrap();
    let im = ops::imag(a).unwrap().to_vec::<f32>().unwrap();
    (re, im)
}

/// One argument: its real parts, imaginary parts (`None`: a float32 input) and shape.
#[derive(Clone)]
struct Input {
    re: Vec<f32>,
    im: Option<Vec<f32>>,
    shape: Vec<usize>,
}

impl Input {
    fn array(&self) -> Array {
        match &self.im {
            Some(im) => complex_arr(&self.re, im, &self.shape),
            None => real_arr(&self.re, &self.shape),
        }
    }
}

/// A complex input with real parts in `(0.2, 0.9)` and imaginary parts in `(-0.7, 0.7)`:
/// away from the branch cuts of log, sqrt and the inverse functions.
fn cin(seed: u64, shape: &[usize]) -> Input {
    let n = shape.iter().product();
    Input {
        re: values(seed, n, 0.2, 0.9),
        im: Some(values(seed + 100, n, -0.7, 0.7)),
        shape: shape.to_vec(),
    }
}

/// A float32 input with magnitudes in `(0.2, 1)` and alternating signs (away from kinks).
fn rin(seed: u64, shape: &[usize]) -> Input {
    let re = values(seed, shape.iter().product(), 0.2, 1.0);
    let re = re.iter().enumerate().map(|(i, v)| if i % 2 == 1 { -v } else { *v }).collect();
    Input { re, im: None, shape: shape.to_vec() }
}

/// `Re<a, b> = sum(re a * re b + im a * im b)`, for complex or real arrays.
fn re_inner(a: &Array, b: &Array) -> f64 {
    let (ar, ai) = parts(a);
    let (br, bi) = parts(b);
    ar.iter().zip(&br).chain(ai.iter().zip(&bi)).map(|(x, y)| *x as f64 * *y as f64).sum()
}

/// A real scalar reading every element of the output (real and imaginary parts).
fn loss(out: Array) -> Result<Array> {
    let n = out.size();
    let wr = real_arr(&values(99, n, 0.5, 1.5), out.shape());
    let wi = real_arr(&values(98, n, -1.5, -0.5), out.shape());
    let terms =
        ops::add(&ops::multiply(&ops::real(&out)?, &wr)?, &ops::multiply(&ops::imag(&out)?, &wi)?)?;
    ops::sum(&terms, None, false)
}

fn check_grad(name: &str, f: Fun, inputs: &[Input]) {
    let args: Vec<Array> = inputs.iter().map(Input::array).collect();
    let scalar_f = |a: &[Array]| loss(f(a)?);
    let argnums: Vec<usize> = (0..args.len()).collect();
    let grads = grad(scalar_f, &args, &argnums).unwrap();
    let eps = 1e-2f32;
    for (k, input) in inputs.iter().enumerate() {
        let complex = input.im.is_some();
        assert_eq!(grads[k].dtype(), args[k].dtype(), "{name}: gradient dtype");
        let (g_re, g_im) = parts(&grads[k]);
        // Perturb the real part, then (complex inputs) the imaginary part, of each element.
        for part in 0..if complex { 2 } else { 1 } {
            for i in 0..input.re.len() {
                let eval_at = |delta: f32| {
                    let mut moved = input.clone();
                    match part {
                        0 => moved.re[i] += delta,
                        _ => moved.im.as_mut().expect("complex")[i] += delta,
                    }
                    let mut a = args.clone();
                    a[k] = moved.array();
                    scalar_f(&a).unwrap().item::<f32>().unwrap() as f64
                };
                let fd = (eval_at(eps) - eval_at(-eps)) / (2.0 * eps as f64);
                let got = if part == 0 { g_re[i] } else { g_im[i] } as f64;
                let tol = 5e-3 * (1.0 + fd.abs());
                let which = if part == 0 { "re" } else { "im" };
                assert!((got - fd).abs() <= tol, "{name}: d/d{which} x{k}[{i}] = {got} vs fd {fd}");
            }
        }
    }
}

/// `Re<vjp(u), v> == Re<u, jvp(v)>` for random complex (or real) `u` and `v`.
fn check_dot(name: &str, f: Fun, inputs: &[Input]) {
    let args: Vec<Array> = inputs.iter().map(Input::array).collect();
    let fl = |a: &[Array]| Ok(vec![f(a)?]);
    let out = f(&args).unwrap();
    let like = |seed: u64, a: &Array| {
        let n = a.size();
        let re = values(seed, n, -1.0, 1.0);
        if a.dtype() == DType::C64 {
            complex_arr(&re, &values(seed + 1, n, -1.0, 1.0), a.shape())
        } else {
            real_arr(&re, a.shape())
        }
    };
    let u = like(31, &out);
    let vs: Vec<Array> = args.iter().enumerate().map(|(k, a)| like(40 + 2 * k as u64, a)).collect();
    let (_, cots) = vjp(fl, &args, std::slice::from_ref(&u)).unwrap();
    let (_, tans) = jvp(fl, &args, &vs).unwrap();
    for (c, a) in cots.iter().zip(&args) {
        assert_eq!(c.dtype(), a.dtype(), "{name}: cotangent dtype");
    }
    assert_eq!(tans[0].dtype(), out.dtype(), "{name}: tangent dtype");
    let lhs: f64 = cots.iter().zip(&vs).map(|(c, v)| re_inner(c, v)).sum();
    let rhs = re_inner(&u, &tans[0]);
    assert!((lhs - rhs).abs() <= 1e-4 * (1.0 + lhs.abs()), "{name}: {lhs} vs {rhs}");
}

fn check_both(name: &str, f: Fun, inputs: &[Input]) {
    check_grad(name, f, inputs);
    check_dot(name, f, inputs);
}

#[test]
fn complex_parts() {
    let z = [cin(1, &[2, 3])];
    let cases: [(&str, Fun); 6] = [
        ("real", |a| ops::real(&a[0])),
        ("imag", |a| ops::imag(&a[0])),
        ("conjugate", |a| ops::conjugate(&a[0])),
        ("abs", |a| ops::abs(&a[0])),
        ("abs(z*z)", |a| ops::abs(&ops::multiply(&a[0], &a[0])?)),
        ("real(z)*imag(z)", |a| ops::multiply(&ops::real(&a[0])?, &ops::imag(&a[0])?)),
    ];
    for (name, f) in cases {
        check_both(name, f, &z);
    }
}

#[test]
fn abs_at_zero_is_zero() {
    // MLX: the gradient of |z| at 0 is 0, not NaN (forward and reverse).
    let z = complex_arr(&[0.0, 3.0], &[0.0, 4.0], &[2]);
    let g =
        grad(|a| ops::sum(&ops::abs(&a[0])?, None, false), std::slice::from_ref(&z), &[0]).unwrap();
    assert_eq!(parts(&g[0]), (vec![0.0, 0.6], vec![0.0, 0.8]));
    let t = complex_arr(&[1.0, 1.0], &[1.0, 0.0], &[2]);
    let (_, tans) = jvp(|a| Ok(vec![ops::abs(&a[0])?]), &[z], &[t]).unwrap();
    assert_eq!(tans[0].to_vec::<f32>().unwrap(), vec![0.0, 0.6]);
}

#[test]
fn unary_ops() {
    let z = [cin(2, &[5])];
    let cases: [(&str, Fun); 17] = [
        ("negative", |a| ops::negative(&a[0])),
        ("exp", |a| ops::exp(&a[0])),
        ("log", |a| ops::log(&a[0])),
        ("log2", |a| ops::log2(&a[0])),
        ("log10", |a| ops::log10(&a[0])),
        ("log1p", |a| ops::log1p(&a[0])),
        ("sqrt", |a| ops::sqrt(&a[0])),
        ("rsqrt", |a| ops::rsqrt(&a[0])),
        ("square", |a| ops::square(&a[0])),
        ("reciprocal", |a| ops::reciprocal(&a[0])),
        ("sin", |a| ops::sin(&a[0])),
        ("cos", |a| ops::cos(&a[0])),
        ("tan", |a| ops::tan(&a[0])),
        ("tanh", |a| ops::tanh(&a[0])),
        ("sinh", |a| ops::sinh(&a[0])),
        ("cosh", |a| ops::cosh(&a[0])),
        ("arctan", |a| ops::arctan(&a[0])),
    ];
    for (name, f) in cases {
        check_both(name, f, &z);
    }
}

#[test]
fn binary_ops_and_mixed_dtypes() {
    let zw = [cin(3, &[2, 3]), cin(4, &[2, 3])];
    let cases: [(&str, Fun); 5] = [
        ("add", |a| ops::add(&a[0], &a[1])),
        ("subtract", |a| ops::subtract(&a[0], &a[1])),
        ("multiply", |a| ops::multiply(&a[0], &a[1])),
        ("divide", |a| ops::divide(&a[0], &a[1])),
        ("power", |a| ops::power(&a[0], &a[1])),
    ];
    for (name, f) in cases {
        check_both(name, f, &zw);
    }
    // Broadcasting, and a float32 operand promoted to complex64: its gradient is the real
    // part of the complex one.
    let mixed = [cin(5, &[2, 3]), rin(6, &[3])];
    let cases: [(&str, Fun); 3] = [
        ("z * x", |a| ops::multiply(&a[0], &a[1])),
        ("z / x", |a| {
            ops::divide(&a[0], &ops::add(&a[1], &ops::scalar(Scalar::Float(2.0), DType::F32)?)?)
        }),
        ("exp(z) - x^2", |a| ops::subtract(&ops::exp(&a[0])?, &ops::square(&a[1])?)),
    ];
    for (name, f) in cases {
        check_both(name, f, &mixed);
    }
    // astype both ways.
    check_both(
        "astype c64",
        |a| ops::multiply(&ops::astype(&a[0], DType::C64)?, &a[1]),
        &[rin(7, &[4]), cin(8, &[4])],
    );
    check_both("astype f32", |a| ops::astype(&ops::exp(&a[0])?, DType::F32), &[cin(9, &[4])]);
    // A real loss of a real input through complex intermediates (x + i x).
    check_both(
        "abs(x + ix)",
        |a| {
            let i = ops::scalar(Scalar::Complex(0.0, 1.0), DType::C64)?;
            ops::abs(&ops::add(&a[0], &ops::multiply(&a[0], &i)?)?)
        },
        &[rin(10, &[5])],
    );
}

#[test]
fn reductions_scans_and_matmul() {
    let z = [cin(11, &[3, 4])];
    let cases: [(&str, Fun); 6] = [
        ("sum", |a| ops::sum(&a[0], Some(&[1]), false)),
        ("prod", |a| ops::prod(&a[0], Some(&[0]), true)),
        ("mean", |a| ops::mean(&a[0], None, false)),
        ("cumsum", |a| ops::cumsum(&a[0], Some(1), false, true)),
        ("cumprod", |a| ops::cumprod(&a[0], Some(1), true, true)),
        ("transpose+sum", |a| ops::sum(&ops::transpose(&a[0], None)?, Some(&[0]), false)),
    ];
    for (name, f) in cases {
        check_both(name, f, &z);
    }
    check_both("matmul", |a| ops::matmul(&a[0], &a[1]), &[cin(12, &[2, 3]), cin(13, &[3, 4])]);
    check_both(
        "batched matmul",
        |a| ops::matmul(&a[0], &a[1]),
        &[cin(14, &[2, 2, 3]), cin(15, &[3, 2])],
    );
}

const B: FftNorm = FftNorm::Backward;

#[test]
fn complex_transforms() {
    let cases: [(&str, Fun); 7] = [
        ("fft", |a| fft1(&a[0], None, -1, FftType::Complex, false, B)),
        ("ifft", |a| fft1(&a[0], None, -1, FftType::Complex, true, B)),
        ("fft axis 0", |a| fft1(&a[0], None, 0, FftType::Complex, false, B)),
        ("fft padded", |a| fft1(&a[0], Some(7), -1, FftType::Complex, false, B)),
        ("fft truncated", |a| fft1(&a[0], Some(3), -1, FftType::Complex, false, B)),
        ("fft2", |a| fftn(&a[0], None, None, FftType::Complex, false, B)),
        ("ifft2 ortho", |a| fftn(&a[0], None, None, FftType::Complex, true, FftNorm::Ortho)),
    ];
    for (name, f) in cases {
        check_both(name, f, &[cin(20, &[3, 5])]);
    }
}

#[test]
fn real_transforms() {
    // rfft of a real input, even and odd lengths, over one axis and two.
    let cases: [(&str, Fun); 5] = [
        ("rfft", |a| fft1(&a[0], None, -1, FftType::Real, false, B)),
        ("rfft axis 0", |a| fft1(&a[0], None, 0, FftType::Real, false, B)),
        ("rfft n=3", |a| fft1(&a[0], Some(3), -1, FftType::Real, false, B)),
        ("rfft2", |a| fftn(&a[0], None, None, FftType::Real, false, B)),
        ("rfft2 forward", |a| fftn(&a[0], None, None, FftType::Real, false, FftNorm::Forward)),
    ];
    for shape in [[3, 4], [2, 5]] {
        for (name, f) in cases {
            check_both(&format!("{name} {shape:?}"), f, &[rin(21, &shape)]);
        }
    }
    // irfft of a complex input: even and odd output lengths (the Nyquist term differs).
    let cases: [(&str, Fun); 5] = [
        ("irfft", |a| fft1(&a[0], None, -1, FftType::Real, true, B)),
        ("irfft n=5", |a| fft1(&a[0], Some(5), -1, FftType::Real, true, B)),
        ("irfft axis 0 n=4", |a| fft1(&a[0], Some(4), 0, FftType::Real, true, B)),
        ("irfft2", |a| fftn(&a[0], None, None, FftType::Real, true, B)),
        ("irfft2 ortho s=(3,5)", |a| {
            fftn(&a[0], Some(&[3, 5]), Some(&[0, 1]), FftType::Real, true, FftNorm::Ortho)
        }),
    ];
    for (name, f) in cases {
        check_both(name, f, &[cin(22, &[3, 3])]);
    }
    // The round trip irfft(rfft(x)) is the identity on real x.
    let x = rin(23, &[6]);
    let g = grad(
        |a| {
            let y = fft1(&a[0], None, -1, FftType::Real, false, B)?;
            let back = fft1(&y, Some(6), -1, FftType::Real, true, B)?;
            ops::sum(&ops::multiply(&back, &a[0])?, None, false)
        },
        &[x.array()],
        &[0],
    )
    .unwrap();
    let want: Vec<f32> = x.re.iter().map(|v| 2.0 * v).collect();
    for (g, w) in g[0].to_vec::<f32>().unwrap().iter().zip(&want) {
        assert!((g - w).abs() < 1e-5, "{g} vs {w}");
    }
}

#[test]
fn complex_loss_uses_a_unit_cotangent() {
    // grad of a complex-valued scalar: MLX seeds the cotangent with 1, giving conj(f'(z)).
    let z = complex_arr(&[1.0, 0.5], &[2.0, -1.0], &[2]);
    let g = grad(|a| ops::sum(&ops::multiply(&a[0], &a[0])?, None, false), &[z], &[0]).unwrap();
    assert_eq!(parts(&g[0]), (vec![2.0, 1.0], vec![-4.0, 2.0]));
}
