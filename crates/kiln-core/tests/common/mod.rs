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
