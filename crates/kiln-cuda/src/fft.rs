//! `Primitive::Fft` through cuFFT, one axis at a time as kiln-cpu does: the axis is moved
//! last by a strided copy into a fresh row-major buffer (any input layout, negative strides
//! included), every row is transformed by one batched plan, and the result is viewed back in
//! the original axis order. Real transforms: the forward one (R2C) runs first on the halved
//! axis, then complex transforms over the others; the inverse one (C2R) runs last after the
//! others, on rows whose DC and Nyquist imaginary parts are zeroed first (the CPU takes the
//! real part of the Hermitian-extended inverse, which ignores them; cuFFT leaves them
//! undefined). Inverse transforms are scaled by `1 / n` per axis (numpy's "backward"), the
//! forward ones unscaled, as on the CPU.
//!
//! Plans are cached per (kind, n, rows) and take no work area of their own
//! (`cufftSetAutoAllocation(0)`): each call gives one from kiln's allocator, freed in stream
//! order, so a CUDA-graph capture records only kernels (a plan is never created while
//! capturing: the capture then fails and the entry falls back to plain launches).
//! cuFFT is loaded at run time; where it is missing FFT runs on the CPU (`available`).

use crate::alloc::{device_ptr, DEVICE};
use crate::copy::{copy_into, empty};
use crate::elementwise::{run_program, single_op_program};
use crate::launch::{blocks_for, launch, Args, BLOCK};
use crate::nvrtc::KernelCache;
use crate::runtime::gpu;
use cudarc::cufft::{result as fft, sys as fsys};
use kiln_base::{bail, ArrayData, ComplexOp, DType, FftKind, Layout, Primitive, Result};
use rustc_hash::FxHashMap;
use std::fmt::Write;
use std::sync::{Arc, Mutex, OnceLock};

const FORWARD: i32 = -1;
const INVERSE: i32 = 1;

/// Whether cuFFT can be used: a GPU and the library (probed: cudarc panics on a missing one).
pub fn available() -> bool {
    static PRESENT: OnceLock<bool> = OnceLock::new();
    *PRESENT.get_or_init(|| {
        // SAFETY: the probe only tries to dlopen the library.
        crate::is_available() && unsafe { fsys::is_culib_present() }
    })
}

#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
enum Kind {
    C2C,
    R2C,
    C2R,
}

/// A plan and the work area size it needs.
#[derive(Clone, Copy)]
struct Plan {
    handle: fsys::cufftHandle,
    work: usize,
}

/// Plans by (kind, n, rows); the mutex also serialises their use (a plan's work area and
/// stream are per-plan state).
type PlanKey = (Kind, usize, usize);
static PLANS: OnceLock<Mutex<FxHashMap<PlanKey, Plan>>> = OnceLock::new();

fn cufft_error(op: &'static str, e: fft::CufftError) -> kiln_base::Error {
    kiln_base::Error::Runtime { op, msg: format!("cuFFT error: {e:?}") }
}

fn capturing() -> Result<bool> {
    let gpu = gpu()?;
    let mut status = cudarc::driver::sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE;
    // SAFETY: the stream is live; plain out-parameter.
    unsafe { cudarc::driver::sys::cuStreamIsCapturing(gpu.stream()?, &mut status) }
        .result()
        .map_err(|e| crate::runtime::driver_error("fft", e))?;
    Ok(status != cudarc::driver::sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE)
}

fn make_plan(op: &'static str, kind: Kind, n: usize, rows: usize) -> Result<Plan> {
    let gpu = gpu()?;
    let handle = fft::create().map_err(|e| cufft_error(op, e))?;
    let ty = match kind {
        Kind::C2C => fsys::cufftType::CUFFT_C2C,
        Kind::R2C => fsys::cufftType::CUFFT_R2C,
        Kind::C2R => fsys::cufftType::CUFFT_C2R,
    };
    let mut dims = [n as i64];
    // SAFETY: a fresh plan; null embeddings select the basic layout (rows of `n` reals or
    // complex values back to back, `n / 2 + 1` on the complex side of real transforms).
    let made = unsafe {
        fft::set_auto_allocation(handle, false)
            .and_then(|_| {
                fft::make_plan_many64(
                    handle,
                    1,
                    dims.as_mut_ptr(),
                    std::ptr::null_mut(),
                    1,
                    0,
                    std::ptr::null_mut(),
                    1,
                    0,
                    ty,
                    rows as i64,
                )
            })
            .and_then(|work| {
                fft::set_stream(handle, gpu.raw_stream() as fsys::cudaStream_t).map(|_| work)
            })
    };
    match made {
        Ok(work) => Ok(Plan { handle, work }),
        Err(e) => {
            // SAFETY: the plan is not used after.
            let _ = unsafe { fft::destroy(handle) };
            Err(cufft_error(op, e))
        }
    }
}

/// Runs one batched transform of `rows` rows of length `n` from `input` to `output` (device
/// addresses; equal for in place); `inverse` picks a complex transform's direction.
fn execute(
    op: &'static str,
    (kind, inverse): (Kind, bool),
    n: usize,
    rows: usize,
    input: u64,
    output: u64,
) -> Result<()> {
    if n > i32::MAX as usize {
        bail!(Value, op, "FFT lengths above 2^31 are not supported on the GPU.");
    }
    let plans = PLANS.get_or_init(|| Mutex::new(FxHashMap::default()));
    let mut plans = plans.lock().unwrap_or_else(|e| e.into_inner());
    let key = (kind, n, rows);
    let plan = match plans.get(&key) {
        Some(p) => *p,
        None => {
            if capturing()? {
                bail!(Unsupported, op, "A new cuFFT plan cannot be made during graph capture.");
            }
            let p = make_plan(op, kind, n, rows)?;
            plans.insert(key, p);
            p
        }
    };
    // The work area comes from kiln's allocator and goes back after the call is issued:
    // later work on the one stream is ordered after the transform (after the launches held
    // back so far, which go to the stream first).
    gpu()?.stream()?;
    let work = DEVICE.alloc(plan.work.max(1))?;
    // SAFETY: the plan is live (plans are never destroyed); the work area is a live block of
    // the size the plan asked for; input and output hold `rows` rows of the plan's layout
    // (the callers allocate them so); the plan's stream is kiln's stream.
    unsafe {
        fft::set_work_area(plan.handle, work.as_ptr() as *mut std::ffi::c_void)
            .and_then(|_| match kind {
                Kind::C2C => fft::exec_c2c(
                    plan.handle,
                    input as *mut fsys::cufftComplex,
                    output as *mut fsys::cufftComplex,
                    if inverse { INVERSE } else { FORWARD },
                ),
                Kind::R2C => fft::exec_r2c(
                    plan.handle,
                    input as *mut fsys::cufftReal,
                    output as *mut fsys::cufftComplex,
                ),
                Kind::C2R => fft::exec_c2r(
                    plan.handle,
                    input as *mut fsys::cufftComplex,
                    output as *mut fsys::cufftReal,
                ),
            })
            .map_err(|e| cufft_error(op, e))
    }
}

const SCALE: &str = "kiln_fft_scale";
const HERMITIAN: &str = "kiln_fft_hermitian";

/// `data[i] *= s` over `n` floats (a complex value's two parts alike, as the CPU's
/// `z * scale`); `s` arrives as a double holding a float32 exactly.
fn scale_source() -> String {
    let mut s = String::from(kiln_codegen::cuda::preamble());
    let _ = write!(
        s,
        r#"
extern "C" __global__ void {SCALE}(const int64_t n, float *__restrict__ data, const double s) {{
    const float f = (float)s;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {{
        data[i] = data[i] * f;
    }}
}}
"#
    );
    s
}

/// Zeroes the imaginary parts of each row's DC term and, for even `n`, its Nyquist term
/// (rows of `m = n / 2 + 1` values).
fn hermitian_source() -> String {
    let mut s = String::from(kiln_codegen::cuda::preamble());
    let _ = write!(
        s,
        r#"
extern "C" __global__ void {HERMITIAN}(const int64_t rows, kc64 *__restrict__ data, const int64_t n) {{
    const int64_t m = n / 2 + 1;
    for (int64_t r = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; r < rows;
         r += (int64_t)gridDim.x * blockDim.x) {{
        data[r * m].im = 0.0f;
        if (n % 2 == 0) data[r * m + n / 2].im = 0.0f;
    }}
}}
"#
    );
    s
}

static HELPERS: KernelCache<&'static str> = KernelCache::new();

fn scale(data: &ArrayData, n: usize) -> Result<()> {
    let floats = data.layout.shape.iter().product::<usize>() * data.dtype.size() / 4;
    if floats == 0 {
        return Ok(());
    }
    let factor = 1.0f32 / n as f32;
    let f = HELPERS.get(&SCALE, SCALE, scale_source)?;
    let mut args = Args::new();
    args.i64(floats as i64)
        .ptr(device_ptr(&data.buffer, 0, 4))
        .i64((factor as f64).to_bits() as i64);
    launch("fft", f, blocks_for(floats as u64, BLOCK as u64), BLOCK, 0, &mut args)
}

/// `x` with `axis` moved last, copied into a fresh row-major buffer; the permutation used.
fn axis_last(x: &ArrayData, axis: usize) -> Result<(ArrayData, Vec<usize>)> {
    let nd = x.layout.ndim();
    let perm: Vec<usize> = (0..nd).filter(|&d| d != axis).chain(std::iter::once(axis)).collect();
    let view = ArrayData { layout: x.layout.transpose(&perm), ..x.clone() };
    let dense = empty(&view.layout.shape, x.dtype)?;
    copy_into(&view, &dense.buffer, &dense.layout)?;
    Ok((dense, perm))
}

/// Row-major data of the permuted shape seen in the original axis order.
fn axis_back(dense: ArrayData, perm: &[usize]) -> ArrayData {
    let mut inverse = vec![0; perm.len()];
    for (i, &p) in perm.iter().enumerate() {
        inverse[p] = i;
    }
    let layout = dense.layout.transpose(&inverse);
    ArrayData { layout, ..dense }
}

/// A complex transform of every line along `axis`.
fn complex_axis(op: &'static str, x: ArrayData, axis: usize, inverse: bool) -> Result<ArrayData> {
    let n = x.layout.shape[axis];
    // Length 0 or 1: nothing to do (the inverse scales by 1).
    if n <= 1 {
        return Ok(x);
    }
    let (dense, perm) = axis_last(&x, axis)?;
    let rows = dense.layout.shape.iter().product::<usize>() / n;
    let p = dense.buffer.as_ptr() as u64;
    execute(op, (Kind::C2C, inverse), n, rows, p, p)?;
    if inverse {
        scale(&dense, n)?;
    }
    Ok(axis_back(dense, &perm))
}

/// The forward real transform of every line along `axis` (float32 in, `n / 2 + 1` complex
/// values out).
fn real_forward_axis(x: &ArrayData, axis: usize) -> Result<ArrayData> {
    let n = x.layout.shape[axis];
    if n == 1 {
        // One frequency: the value itself.
        let program = single_op_program(&Primitive::AsType(DType::C64), &[DType::F32], DType::C64)
            .expect("astype is elementwise");
        let shape = x.layout.shape.clone();
        return Ok(run_program(&Arc::new(program), std::slice::from_ref(x), &shape)?.remove(0));
    }
    let (dense, perm) = axis_last(x, axis)?;
    let rows = dense.layout.shape.iter().product::<usize>() / n;
    let mut out_shape = dense.layout.shape.clone();
    *out_shape.last_mut().expect("an axis") = n / 2 + 1;
    let out = empty(&out_shape, DType::C64)?;
    execute(
        "rfft",
        (Kind::R2C, false),
        n,
        rows,
        dense.buffer.as_ptr() as u64,
        out.buffer.as_ptr() as u64,
    )?;
    Ok(axis_back(out, &perm))
}

/// The inverse real transform of every line along `axis` (`n / 2 + 1` complex values in,
/// `n` float32 values out, scaled by `1 / n`).
fn real_inverse_axis(x: &ArrayData, axis: usize, n: usize) -> Result<ArrayData> {
    if n == 1 {
        // One value: the real part of the one frequency.
        let part = crate::complex::complex_part(ComplexOp::Real, x, &x.layout.shape)?;
        return Ok(part);
    }
    let (dense, perm) = axis_last(x, axis)?;
    let m = n / 2 + 1;
    let rows = dense.layout.shape.iter().product::<usize>() / m;
    let f = HELPERS.get(&HERMITIAN, HERMITIAN, hermitian_source)?;
    let mut args = Args::new();
    args.i64(rows as i64).ptr(dense.buffer.as_ptr() as u64).i64(n as i64);
    launch("irfft", f, blocks_for(rows as u64, BLOCK as u64), BLOCK, 0, &mut args)?;
    let mut out_shape = dense.layout.shape.clone();
    *out_shape.last_mut().expect("an axis") = n;
    let out = empty(&out_shape, DType::F32)?;
    // C2R overwrites its input: `dense` is this call's own copy.
    execute(
        "irfft",
        (Kind::C2R, true),
        n,
        rows,
        dense.buffer.as_ptr() as u64,
        out.buffer.as_ptr() as u64,
    )?;
    scale(&out, n)?;
    Ok(axis_back(out, &perm))
}

/// `Primitive::Fft` on the GPU; the result is row-major with `shape`.
pub fn fft(
    axes: &[usize],
    inverse: bool,
    kind: FftKind,
    x: &ArrayData,
    shape: &[usize],
) -> Result<ArrayData> {
    let op = Primitive::Fft { axes: axes.to_vec(), inverse, kind }.name();
    let out_dtype =
        if matches!(kind, FftKind::RealInverse { .. }) { DType::F32 } else { DType::C64 };
    let size: usize = shape.iter().product();
    let in_size: usize = x.layout.shape.iter().product();
    if size == 0 || in_size == 0 || axes.is_empty() {
        // Nothing to transform: zeros (an empty input gives an empty or all-zero spectrum).
        let out = empty(shape, out_dtype)?;
        if size > 0 {
            let gpu = gpu()?;
            // SAFETY: `out` is a fresh block of `size` elements.
            unsafe {
                cudarc::driver::result::memset_d8_async(
                    out.buffer.as_ptr() as u64,
                    0,
                    size * out_dtype.size(),
                    gpu.stream()?,
                )
            }
            .map_err(|e| crate::runtime::driver_error(op, e))?;
        }
        return Ok(out);
    }
    let (&last, rest) = axes.split_last().expect("nonempty");
    let result = match kind {
        FftKind::Complex => {
            let mut cur = x.clone();
            for &axis in axes {
                cur = complex_axis(op, cur, axis, inverse)?;
            }
            cur
        }
        FftKind::RealForward => {
            let mut cur = real_forward_axis(x, last)?;
            for &axis in rest {
                cur = complex_axis(op, cur, axis, false)?;
            }
            cur
        }
        FftKind::RealInverse { n } => {
            let mut cur = x.clone();
            for &axis in rest {
                cur = complex_axis(op, cur, axis, true)?;
            }
            real_inverse_axis(&cur, last, n)?
        }
    };
    if result.layout.shape.as_slice() != shape {
        bail!(Runtime, op, "FFT result {:?} where {shape:?} was expected.", result.layout.shape);
    }
    // Row-major output (a fresh copy when the last transform left another axis order, or
    // when no axis needed a transform and `result` is still the input).
    if result.layout.row_contiguous && result.layout.offset == 0 && !result.buffer.same(&x.buffer) {
        return Ok(ArrayData { layout: Layout::contiguous(shape), ..result });
    }
    let out = empty(shape, out_dtype)?;
    copy_into(&result, &out.buffer, &out.layout)?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn helper_sources() {
        let s = scale_source();
        assert!(s.contains("data[i] = data[i] * f;"));
        let h = hermitian_source();
        assert!(h.contains("if (n % 2 == 0) data[r * m + n / 2].im = 0.0f;"));
        crate::nvrtc::dump_sources(&[
            ("fft_scale.cu".to_string(), s),
            ("fft_hermitian.cu".to_string(), h),
        ]);
    }

    #[test]
    fn axis_back_inverts_the_permutation() {
        let dense = ArrayData {
            buffer: kiln_base::HOST.from_slice(&[0f32; 24]).unwrap(),
            layout: Layout::contiguous(&[2, 4, 3]),
            dtype: DType::F32,
        };
        // perm [0, 2, 1]: the original shape was (2, 3, 4) with axis 1 moved last.
        let back = axis_back(dense, &[0, 2, 1]);
        assert_eq!(back.layout.shape.as_slice(), &[2, 3, 4]);
        assert_eq!(back.layout.strides.as_slice(), &[12, 1, 3]);
    }
}
