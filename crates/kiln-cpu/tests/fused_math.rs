//! The error bounds of generated code's float32 exp, tanh, erf and sigmoid (the eager
//! kernels' vecmath functions, written in C by kiln-codegen's math.rs), measured against
//! float64 libm over a dense sweep. Builds a small C program from kiln-codegen's preamble;
//! skipped where there is no C compiler. (`fused_vectors` checks they equal eager's bits.)

use std::process::Command;

const SWEEP: &str = r#"
#include <stdio.h>
#include <stdlib.h>
static double ulps(float got, double want) {
    if (isnan(want)) return isnan(got) ? 0 : 1e9;
    if (isinf(want)) return got == (float)want ? 0 : 1e9;
    float w = fabsf((float)want);
    if (w < 1.17549435e-38f) return fabs((double)got - want) < 1e-38 ? 0 : 1e9;
    return fabs((double)got - want) / (double)(nextafterf(w, INFINITY) - w);
}
/* The scalar forms: one lane of the vector functions. */
static void apply(int which, const float *restrict x, float *restrict y, long n) {
    for (long i = 0; i < n; ++i)
        y[i] = which == 0 ? k_expf(x[i]) : which == 1 ? k_tanhf(x[i])
             : which == 2 ? k_sigmoidf(x[i]) : k_erff(x[i]);
}
int main(void) {
    long n = 0, cap = 8000000;
    float *x = malloc(cap * sizeof(float)), *y = malloc(cap * sizeof(float));
    for (double v = -110; v <= 110; v += 3.1e-5) x[n++] = (float)v;
    for (double v = 1e-30; v < 1; v *= 1.001) { x[n++] = (float)v; x[n++] = -(float)v; }
    const float sp[] = {NAN, INFINITY, -INFINITY, 100, -100};
    for (int k = 0; k < 5; ++k) x[n++] = sp[k];
    double worst[4] = {0, 0, 0, 0};
    for (int f = 0; f < 4; ++f) {
        apply(f, x, y, n);
        for (long i = 0; i < n - 5; ++i) {
            double v = x[i], want = f == 0 ? exp(v) : f == 1 ? tanh(v)
                : f == 2 ? 1.0 / (1.0 + exp(-v)) : erf(v);
            double err = f == 3 ? fabs((double)y[i] - want) : ulps(y[i], want);
            if (err > worst[f]) worst[f] = err;
        }
        const float *s = y + n - 5; /* NaN, inf, -inf, 100, -100 */
        int ok = isnan(s[0]) && (f == 0 ? s[1] == INFINITY && s[2] == 0 && s[3] == INFINITY && s[4] > 0
                                        : s[1] == 1 && s[2] == (f == 2 ? 0 : -1));
        if (!ok) worst[f] = 1e9;
    }
    printf("%g %g %g %g\n", worst[0], worst[1], worst[2], worst[3]);
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
    std::fs::write(&src, format!("{}{SWEEP}", kiln_codegen::c::preamble())).unwrap();
    // Plain and with the vector math built for AVX2 (one lane of each).
    for define in ["-DKILN_PLAIN", "-march=x86-64-v3"] {
        if define.starts_with("-march") && !cfg!(target_arch = "x86_64") {
            continue;
        }
        let built = Command::new(&cc)
            .args(["-O3", "-std=gnu11", "-fwrapv", "-ffp-contract=off"])
            .args(["-fno-math-errno", define, "-o"])
            .arg(&exe)
            .arg(&src)
            .arg("-lm")
            .output()
            .unwrap();
        assert!(built.status.success(), "{}", String::from_utf8_lossy(&built.stderr));
        let out = Command::new(&exe).output().unwrap();
        let text = String::from_utf8(out.stdout).unwrap();
        let v: Vec<f64> = text.split_whitespace().map(|s| s.parse().unwrap()).collect();
        // (exp, tanh, sigmoid in ulp; erf absolute, 5.35 ulp of 1 near erf = 1): vecmath's bounds.
        let bounds = [0.93, 5.3, 2.4, 3.2e-7];
        for (k, name) in ["exp", "tanh", "sigmoid", "erf"].iter().enumerate() {
            assert!(v[k] <= bounds[k], "{define} {name}: error {} over {}", v[k], bounds[k]);
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}
