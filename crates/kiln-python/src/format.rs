//! `repr(array)` in MLX's exact format: `array([[1.5, 2],\n       [3, 4]], dtype=float32)`.
//! Floats print like C++ streams (`%g`, 6 significant digits), bools as `True`/`False`,
//! and an axis longer than 6 shows its first and last 3 entries around `...`.

use crate::convert::read_scalar;
use kiln::Array;
use kiln_base::{DType, Scalar};
use std::fmt::Write;

/// Entries kept at each end of a summarised axis.
const EDGE_ITEMS: usize = 3;

/// The repr of `array` (evaluates it).
pub fn array_repr(array: &Array) -> kiln_base::Result<String> {
    let bytes = array.to_bytes()?;
    let dtype = array.dtype();
    let element = |i: usize| format_scalar(read_scalar(&bytes, dtype, i), dtype);
    let mut out = String::from("array(");
    if array.ndim() == 0 {
        out.push_str(&element(0));
    } else {
        let shape = array.shape();
        let mut strides = vec![1usize; shape.len()];
        for d in (0..shape.len().saturating_sub(1)).rev() {
            strides[d] = strides[d + 1] * shape[d + 1];
        }
        subarray(&mut out, shape, &strides, 0, 0, &element);
    }
    let _ = write!(out, ", dtype={dtype})");
    Ok(out)
}

/// Prints axis `dim` starting at element `index`: MLX's `print_subarray`. Inner axes nest
/// with one more space of indent and rows end with `,\n`; the last axis uses `, `.
fn subarray(
    out: &mut String,
    shape: &[usize],
    strides: &[usize],
    index: usize,
    dim: usize,
    element: &dyn Fn(usize) -> String,
) {
    let n = shape[dim];
    let last = dim == shape.len() - 1;
    let prefix = if last { String::new() } else { " ".repeat(7 + dim) };
    let sep = if last { ", " } else { ",\n" };
    out.push('[');
    let mut i = 0;
    while i < n {
        if i > 0 {
            out.push_str(&prefix);
        }
        if i == EDGE_ITEMS && n > 2 * EDGE_ITEMS {
            out.push_str("...");
            i = n - EDGE_ITEMS - 1; // the loop step moves to the first of the last 3
        } else if last {
            out.push_str(&element(index + i * strides[dim]));
        } else {
            subarray(out, shape, strides, index + i * strides[dim], dim + 1, element);
        }
        if i != n - 1 {
            out.push_str(sep);
        }
        i += 1;
    }
    out.push(']');
}

fn format_scalar(value: Scalar, dtype: DType) -> String {
    match value {
        Scalar::Bool(b) => if b { "True" } else { "False" }.into(),
        Scalar::Int(i) => i.to_string(),
        Scalar::UInt(u) => u.to_string(),
        Scalar::Float(f) => {
            debug_assert!(dtype.is_float());
            crate::printoptions::format_float(f)
        }
        // MLX prints `re+imj`, or `re-imj` when `im < 0` (so -0 and NaN show `+-0j`, `+nanj`).
        Scalar::Complex(re, im) => {
            let sign = if im < 0.0 { "" } else { "+" };
            format!("{}{sign}{}j", format_g(re), format_g(im))
        }
    }
}

/// C's `%g` with precision 6 (what `std::ostream << double` prints): 6 significant
/// digits, trailing zeros dropped, exponent form when the exponent is < -4 or >= 6.
pub fn format_g(v: f64) -> String {
    const PRECISION: i32 = 6;
    if v.is_nan() {
        return if v.is_sign_negative() { "-nan" } else { "nan" }.into();
    }
    if v.is_infinite() {
        return if v < 0.0 { "-inf" } else { "inf" }.into();
    }
    if v == 0.0 {
        return if v.is_sign_negative() { "-0" } else { "0" }.into();
    }
    // The exponent after rounding to 6 significant digits decides the style (as in C).
    let sci = format!("{:.*e}", (PRECISION - 1) as usize, v);
    let (mantissa, exp) = sci.split_once('e').expect("exponent form");
    let exp: i32 = exp.parse().expect("integer exponent");
    if !(-4..PRECISION).contains(&exp) {
        let sign = if exp < 0 { '-' } else { '+' };
        format!("{}e{sign}{:02}", strip_zeros(mantissa), exp.abs())
    } else {
        let decimals = (PRECISION - 1 - exp) as usize;
        strip_zeros(&format!("{v:.decimals$}")).to_string()
    }
}

/// Drops trailing fractional zeros and a bare trailing point.
fn strip_zeros(s: &str) -> &str {
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.')
    } else {
        s
    }
}

#[cfg(test)]
mod tests {
    use super::format_g;

    #[test]
    fn matches_printf_g() {
        let cases = [
            (1.5, "1.5"),
            (2.0, "2"),
            (1e10, "1e+10"),
            (123456.7, "123457"),
            (123456.5, "123456"),
            (999999.5, "1e+06"),
            (1e-5, "1e-05"),
            (0.0001, "0.0001"),
            (1.234567e-5, "1.23457e-05"),
            (1.0 / 3.0, "0.333333"),
            (-0.0, "-0"),
            (1e100, "1e+100"),
            (1e-300, "1e-300"),
            (f64::NAN, "nan"),
            (-f64::NAN, "-nan"),
            (f64::NEG_INFINITY, "-inf"),
            (123456789.0, "1.23457e+08"),
        ];
        for (v, want) in cases {
            assert_eq!(format_g(v), want, "{v}");
        }
    }
}
