//! The error bounds of generated code's float32 exp, tanh, erf and sigmoid (documented in
//! docs/compile.md), measured against float64 libm over a dense sweep. Builds a small C
//! program from kiln-codegen's preamble; skipped where there is no C compiler.

use std::process::Command;

const SWEEP: &str = r#"
#include <stdio.h>
static double ulps(float got, double want) {
    if (isnan(want)) return isnan(got) ? 0 : 1e9;
    if (isinf(want)) return got == (float)want ? 0 : 1e9;
    float w = fabsf((float)want);
    if (w < 1.17549435e-38f) return fabs((double)got - want) < 1e-38 ? 0 : 1e9;
    return fabs((double)got - want) / (double)(nextafterf(w, INFINITY) - w);
}
int main(void) {
    double e = 0, t = 0, s = 0, ea = 0;
    for (double v = -110; v <= 110; v += 3.1e-5) {
        float x = (float)v;
        double a = ulps(k_expf(x), exp((double)x)); if (a > e) e = a;
        double b = ulps(k_tanhf(x), tanh((double)x)); if (b > t) t = b;
        double c = ulps(k_sigmoidf(x), 1.0 / (1.0 + exp(-(double)x))); if (c > s) s = c;
        double d = fabs((double)k_erff(x) - erf((double)x)); if (d > ea) ea = d;
    }
    for (double v = 1e-30; v < 1; v *= 1.001) {
        float x = (float)v;
        double b = ulps(k_tanhf(x), tanh((double)x)); if (b > t) t = b;
        double b2 = ulps(k_tanhf(-x), tanh(-(double)x)); if (b2 > t) t = b2;
    }
    int specials = isnan(k_expf(NAN)) && k_expf(INFINITY) == INFINITY && k_expf(-INFINITY) == 0
        && k_tanhf(INFINITY) == 1 && k_tanhf(-INFINITY) == -1 && isnan(k_tanhf(NAN))
        && k_erff(INFINITY) == 1 && k_erff(-INFINITY) == -1 && isnan(k_erff(NAN))
        && k_sigmoidf(INFINITY) == 1 && k_sigmoidf(-INFINITY) == 0 && isnan(k_sigmoidf(NAN))
        && k_expf(100) == INFINITY && k_expf(-100) > 0;
    printf("%g %g %g %g %d\n", e, t, s, ea, specials);
    return 0;
}
"#;

#[test]
fn fast_math_error_bounds() {
    let cc = std::env::var("KILN_CC").unwrap_or_else(|_| "cc".into());
    if Command::new(&cc).arg("--version").output().is_err() {
        eprintln!("no C compiler: skipped");
        return;
    }
    let dir = std::env::temp_dir().join(format!("kiln-fused-math-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (src, exe) = (dir.join("sweep.c"), dir.join("sweep"));
    std::fs::write(&src, format!("{}{SWEEP}", kiln_codegen::c::PREAMBLE)).unwrap();
    let built = Command::new(&cc)
        .args(["-O2", "-march=native", "-std=gnu11", "-fwrapv", "-ffp-contract=off"])
        .args(["-fno-math-errno", "-o"])
        .arg(&exe)
        .arg(&src)
        .arg("-lm")
        .output()
        .unwrap();
    assert!(built.status.success(), "{}", String::from_utf8_lossy(&built.stderr));
    let out = Command::new(&exe).output().unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    let v: Vec<f64> = text.split_whitespace().map(|s| s.parse().unwrap()).collect();
    let _ = std::fs::remove_dir_all(&dir);
    assert!(v[0] <= 1.0, "exp: {} ulp", v[0]);
    assert!(v[1] <= 2.0, "tanh: {} ulp", v[1]);
    assert!(v[2] <= 3.0, "sigmoid: {} ulp", v[2]);
    assert!(v[3] <= 2.0e-7, "erf: {} absolute", v[3]);
    assert_eq!(v[4], 1.0, "special values");
}
