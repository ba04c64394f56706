//! The real backends for the core's unit tests, registered before they run (the facade
//! crate does this for users).

static CPU: kiln_cpu::CpuBackend = kiln_cpu::CpuBackend;
static GPU: kiln_cuda::CudaBackend = kiln_cuda::CudaBackend;

// SAFETY: runs before main and only stores two `&'static` references in the registry's
// `OnceLock`s.
#[ctor::ctor(unsafe)]
fn register_backends() {
    crate::backends::register(kiln_base::DeviceKind::Cpu, &CPU);
    crate::backends::register(kiln_base::DeviceKind::Gpu, &GPU);
}
