//! The real backends for the core's integration tests (the facade crate registers them for
//! users; these tests link the core alone). `dummy_backend.rs` registers its own instead.

static CPU: kiln_cpu::CpuBackend = kiln_cpu::CpuBackend;
static GPU: kiln_cuda::CudaBackend = kiln_cuda::CudaBackend;

// SAFETY: runs before main and only stores two `&'static` references in the core's
// `OnceLock`s.
#[ctor::ctor(unsafe)]
fn register_backends() {
    kiln_core::backends::register(kiln_base::DeviceKind::Cpu, &CPU);
    kiln_core::backends::register(kiln_base::DeviceKind::Gpu, &GPU);
}

/// Checks `g`, the gradient of the scalar function `f` at the float64 values `v` of `shape`,
/// against central differences (step 1e-6, relative tolerance 1e-6); `label` names the case.
#[allow(dead_code)] // (not every test file that includes this module checks gradients)
pub fn assert_central_differences(
    f: impl Fn(&[kiln_core::Array]) -> kiln_base::Result<kiln_core::Array>,
    v: &[f64],
    shape: &[usize],
    g: &[f64],
    label: &str,
) {
    let eps = 1e-6;
    for i in 0..v.len() {
        let at = |d: f64| {
            let mut vv = v.to_vec();
            vv[i] += d;
            f(&[kiln_core::Array::from_slice(&vv, shape).unwrap()]).unwrap().item::<f64>().unwrap()
        };
        let fd = (at(eps) - at(-eps)) / (2.0 * eps);
        assert!((g[i] - fd).abs() <= 1e-6 * (1.0 + fd.abs()), "{label} [{i}]: {} vs {fd}", g[i]);
    }
}
