//! Matmul through cuBLAS (`cublasGemmStridedBatchedEx`): float32, float16, bfloat16 and
//! complex64 (`CUDA_C_32F`), accumulated in float32 (TF32 off unless KILN_CUDA_TF32=1). Operands are read in place
//! when each matrix is row- or column-major: with one stride through the batch (stride 0 for
//! a broadcast batch) as a strided batch, otherwise (attention's heads split out of a wider
//! row) through per-matrix pointer arrays that a small kernel fills (`cublasGemmBatchedEx`).
//! Other layouts are copied row-major first.

use crate::alloc::{device_ptr, DEVICE};
use crate::elementwise::{run_program, single_op_program};
use crate::launch::{blocks_for, launch, Args, BLOCK};
use crate::nvrtc::KernelCache;
use crate::runtime::gpu;
use cudarc::cublas::{result as blas, sys as bsys};
use cudarc::driver::result as driver;
use kiln_base::Buffer;
use kiln_base::{bail, ArrayData, DType, Layout, Primitive, Result};
use std::fmt::Write;
use std::sync::{Arc, OnceLock};

/// The cuBLAS handle and the fixed workspace it is given, so that no call allocates (CUDA-graph
/// capture must not).
struct Handle(bsys::cublasHandle_t);
// SAFETY: the handle is only used under cuBLAS's thread-safety rules: one handle bound to
// the one stream; calls are serialised by the `HANDLE` mutex below.
unsafe impl Send for Handle {}

static HANDLE: OnceLock<std::result::Result<std::sync::Mutex<Handle>, String>> = OnceLock::new();

/// The handle, once the launches held back so far are on its stream (cuBLAS issues there).
fn handle() -> Result<std::sync::MutexGuard<'static, Handle>> {
    let gpu = gpu()?;
    gpu.stream()?;
    let h = HANDLE.get_or_init(|| {
        let h = blas::create_handle().map_err(|e| e.to_string())?;
        // SAFETY: live handle and stream; the runtime stream type is the driver's.
        unsafe { blas::set_stream(h, gpu.raw_stream() as bsys::cudaStream_t) }
            .map_err(|e| e.to_string())?;
        // 32 MiB, as NVIDIA recommends for Hopper.
        const WORKSPACE: usize = 32 << 20;
        // Outside the allocator's counters: it is cuBLAS's, held for the process.
        // SAFETY: the context is current (gpu()); a plain device allocation, never freed.
        let workspace = unsafe { driver::malloc_sync(WORKSPACE) }.map_err(|e| e.to_string())?;
        // SAFETY: live handle; the workspace lives as long as the handle (the process).
        let status = unsafe {
            bsys::cublasSetWorkspace_v2(h, workspace as *mut std::ffi::c_void, WORKSPACE)
        };
        if status != bsys::cublasStatus_t::CUBLAS_STATUS_SUCCESS {
            return Err(format!("cublasSetWorkspace failed: {status:?}"));
        }
        if std::env::var("KILN_CUDA_TF32").is_ok_and(|v| v == "1") {
            // SAFETY: live handle.
            unsafe { bsys::cublasSetMathMode(h, bsys::cublasMath_t::CUBLAS_TF32_TENSOR_OP_MATH) };
        }
        Ok(std::sync::Mutex::new(Handle(h)))
    });
    match h {
        Ok(m) => Ok(m.lock().unwrap_or_else(|e| e.into_inner())),
        Err(e) => bail!(Runtime, "matmul", "cuBLAS could not start: {e}"),
    }
}

/// How one operand is read: `transposed` = column-major in memory; `ld` its leading
/// dimension; `batch_stride` between consecutive matrices.
struct Operand {
    ptr: u64,
    transposed: bool,
    ld: i64,
    /// `None` when no single stride steps through the batch (a transposed head split):
    /// the matrices are then found through a pointer array (`batch_pointers`).
    batch_stride: Option<i64>,
    keep: ArrayData,
}

/// The single stride stepping through every batch element in row-major batch order.
fn batch_stride(shape: &[usize], strides: &[isize]) -> Option<i64> {
    let mut stride: Option<i64> = None;
    let mut span = 1i64;
    for d in (0..shape.len()).rev() {
        if shape[d] == 1 {
            continue;
        }
        let s = strides[d] as i64;
        match stride {
            None => stride = Some(s),
            Some(base) if s == base * span => {}
            Some(_) => return None,
        }
        span *= shape[d] as i64;
    }
    Some(stride.unwrap_or(0))
}

fn operand(x: &ArrayData) -> Result<Operand> {
    let nd = x.layout.ndim();
    let (rows, cols) = (x.layout.shape[nd - 2], x.layout.shape[nd - 1]);
    let (sr, sc) = (x.layout.strides[nd - 2] as i64, x.layout.strides[nd - 1] as i64);
    let batch_stride = batch_stride(&x.layout.shape[..nd - 2], &x.layout.strides[..nd - 2]);
    let row_major = (sc == 1 || cols == 1) && (rows == 1 || sr >= cols as i64);
    let col_major = (sr == 1 || rows == 1) && (cols == 1 || sc >= rows as i64);
    let negative = x.layout.strides[..nd - 2].iter().any(|&s| s < 0);
    let ptr = device_ptr(&x.buffer, x.layout.offset as isize, x.dtype.size());
    let (transposed, ld) = if negative || !(row_major || col_major) {
        // Copied row-major, which always qualifies.
        let program =
            Arc::new(single_op_program(&Primitive::Copy, &[x.dtype], x.dtype).expect("copy"));
        let copy = run_program(&program, std::slice::from_ref(x), &x.layout.shape)?.remove(0);
        return operand(&copy);
    } else if row_major {
        (false, if rows == 1 { cols as i64 } else { sr }.max(cols as i64))
    } else {
        (true, if cols == 1 { rows as i64 } else { sc }.max(rows as i64))
    };
    Ok(Operand { ptr, transposed, ld: ld.max(1), batch_stride, keep: x.clone() })
}

/// Fills a device array with each batch element's matrix pointers: A's, then B's, then C's
/// (`batch` each), from the batch dims and each operand's element strides along them.
fn pointers_source(dims: usize) -> String {
    let mut s = String::from(kiln_codegen::cuda::preamble());
    let _ = write!(
        s,
        r#"
struct KTable {{ int64_t v[{three}]; }};
extern "C" __global__ void {POINTERS}(const int64_t batch, const int64_t width, const char *a,
                                     const char *b, char *c, const int64_t c_step,
                                     const KTable t, const char **out) {{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < batch;
         i += (int64_t)gridDim.x * blockDim.x) {{
        int64_t r = i, oa = 0, ob = 0;
        for (int d = {last}; d >= 0; --d) {{
            const int64_t j = r % t.v[d];
            r /= t.v[d];
            oa += j * t.v[{dims} + d];
            ob += j * t.v[{two} + d];
        }}
        out[i] = a + oa * width;
        out[batch + i] = b + ob * width;
        out[2 * batch + i] = c + i * c_step;
    }}
}}
"#,
        three = 3 * dims,
        two = 2 * dims,
        last = dims - 1,
    );
    s
}

const POINTERS: &str = "kiln_matmul_pointers";
static POINTER_KERNELS: KernelCache<usize> = KernelCache::new();

/// The pointer arrays of a batched product whose operands have no single batch stride.
fn batch_pointers(a: &Operand, b: &Operand, out: &ArrayData, m: usize, n: usize) -> Result<Buffer> {
    let nd = out.layout.ndim();
    let batch_shape = &out.layout.shape[..nd - 2];
    let batch: usize = batch_shape.iter().product();
    let dims = batch_shape.len();
    let mut table: Vec<i64> = batch_shape.iter().map(|&d| d as i64).collect();
    for x in [&a.keep, &b.keep] {
        table.extend(x.layout.strides[..nd - 2].iter().map(|&s| s as i64));
    }
    let width = out.dtype.size();
    let pointers = DEVICE.alloc(3 * batch * 8)?;
    let f = POINTER_KERNELS.get(&dims, POINTERS, || pointers_source(dims))?;
    let mut args = Args::new();
    args.i64(batch as i64)
        .i64(width as i64)
        .ptr(a.ptr)
        .ptr(b.ptr)
        .ptr(out.buffer.as_ptr() as u64)
        .i64((m * n * width) as i64)
        .i64_struct(&table)
        .ptr(pointers.as_ptr() as u64);
    launch("matmul", f, blocks_for(batch as u64, BLOCK as u64), BLOCK, 0, &mut args)?;
    Ok(pointers)
}

fn data_type(op: &'static str, dtype: DType) -> Result<bsys::cudaDataType> {
    Ok(match dtype {
        DType::F32 => bsys::cudaDataType::CUDA_R_32F,
        DType::F16 => bsys::cudaDataType::CUDA_R_16F,
        DType::BF16 => bsys::cudaDataType::CUDA_R_16BF,
        DType::C64 => bsys::cudaDataType::CUDA_C_32F,
        d => bail!(Type, op, "The GPU does not support matmul on {d}."),
    })
}

/// `out[:, col0 .. col0 + n] = x @ w.T` for x (m, k) and w (n, k), both row-major device
/// addresses of `dtype`, into a row-major output whose rows are `ldc` elements apart: one
/// column block of a wider product (`fast/quantized_prefill.rs` dequantizes a block of
/// weights at a time). The caller keeps the buffers alive until the stream has run it.
pub(crate) fn linear_into(
    dtype: DType,
    (m, n, k): (usize, usize, usize),
    x: u64,
    w: u64,
    out: u64,
    ldc: usize,
) -> Result<()> {
    let ty = data_type("quantized_matmul", dtype)?;
    for &v in &[m, n, k, ldc] {
        if v > i32::MAX as usize {
            bail!(Value, "quantized_matmul", "Dimensions above 2^31 are not supported on the GPU.");
        }
    }
    let (one, zero) = ([1.0f32, 0.0], [0.0f32, 0.0]);
    let h = handle()?;
    // Row-major out = x w^T is column-major out^T (n x m, ld ldc) = w (read transposed: w's
    // rows are its columns in column-major terms) times x^T.
    // SAFETY: x holds m*k, w n*k elements, out m rows of ldc; alpha/beta are host floats
    // living to the end of this function (compute 32F); the stream orders the call after
    // the kernels that wrote x and w.
    unsafe {
        blas::gemm_strided_batched_ex(
            h.0,
            bsys::cublasOperation_t::CUBLAS_OP_T,
            bsys::cublasOperation_t::CUBLAS_OP_N,
            n as i32,
            m as i32,
            k as i32,
            one.as_ptr() as *const _,
            w as *const _,
            ty,
            k as i32,
            0,
            x as *const _,
            ty,
            k as i32,
            0,
            zero.as_ptr() as *const _,
            out as *mut _,
            ty,
            ldc as i32,
            0,
            1,
            bsys::cublasComputeType_t::CUBLAS_COMPUTE_32F,
            bsys::cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT,
        )
    }
    .map_err(|e| kiln_base::Error::Runtime { op: "quantized_matmul", msg: e.to_string() })
}

/// `a @ b` over matching batch dims; the result is row-major with `shape`.
pub fn matmul(a: &ArrayData, b: &ArrayData, shape: &[usize]) -> Result<ArrayData> {
    let dtype = a.dtype;
    let ty = data_type("matmul", dtype)?;
    let nd = shape.len();
    let (m, n, k) = (shape[nd - 2], shape[nd - 1], a.layout.shape[nd - 1]);
    let batch: usize = shape[..nd - 2].iter().product();
    // A few rows against a linear layer's weight: one pass over the weight.
    if m * batch <= crate::gemv::MAX_ROWS && m * n * batch * k > 0 {
        if let Some(out) = crate::gemv::dense_transposed(a, b, shape)? {
            return Ok(out);
        }
    }
    let out = ArrayData {
        buffer: DEVICE.alloc(shape.iter().product::<usize>() * dtype.size())?,
        layout: Layout::contiguous(shape),
        dtype,
    };
    if m * n * batch == 0 {
        return Ok(out);
    }
    let gpu = gpu()?;
    if k == 0 {
        // SAFETY: the output block holds m*n*batch elements.
        unsafe {
            driver::memset_d8_async(
                out.buffer.as_ptr() as u64,
                0,
                m * n * batch * dtype.size(),
                gpu.stream()?,
            )
        }
        .map_err(|e| crate::runtime::driver_error("matmul", e))?;
        return Ok(out);
    }
    for &v in &[m, n, k, batch] {
        if v > i32::MAX as usize {
            bail!(Value, "matmul", "Dimensions above 2^31 are not supported on the GPU.");
        }
    }
    let (oa, ob) = (operand(a)?, operand(b)?);
    let op = |t: bool| {
        if t {
            bsys::cublasOperation_t::CUBLAS_OP_T
        } else {
            bsys::cublasOperation_t::CUBLAS_OP_N
        }
    };
    // alpha = 1 and beta = 0 as (re, im) pairs: a real scale type reads the first float,
    // complex64's (CUDA_C_32F under CUBLAS_COMPUTE_32F) both.
    let (one, zero) = ([1.0f32, 0.0], [0.0f32, 0.0]);
    let (alpha, beta) = (one.as_ptr() as *const _, zero.as_ptr() as *const _);
    let (ta, tb) = (op(ob.transposed), op(oa.transposed));
    let (n32, m32, k32) = (n as i32, m as i32, k as i32);
    let (compute, algo) = (
        bsys::cublasComputeType_t::CUBLAS_COMPUTE_32F,
        bsys::cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT,
    );
    let h = handle()?;
    // Row-major C = A B is column-major C^T = B^T A^T: B's buffer is the first operand.
    let status = match (oa.batch_stride, ob.batch_stride) {
        (Some(sa), Some(sb)) => {
            // SAFETY: pointers are live device blocks kept alive by `oa`, `ob` and `out`
            // until the stream runs the call (their buffers are only reused by later stream
            // work); sizes and leading dimensions describe those blocks; alpha/beta are host
            // float pairs living to the end of this function (compute 32F).
            unsafe {
                blas::gemm_strided_batched_ex(
                    h.0,
                    ta,
                    tb,
                    n32,
                    m32,
                    k32,
                    alpha,
                    ob.ptr as *const _,
                    ty,
                    ob.ld as i32,
                    sb,
                    oa.ptr as *const _,
                    ty,
                    oa.ld as i32,
                    sa,
                    beta,
                    out.buffer.as_ptr() as *mut _,
                    ty,
                    n32,
                    (m * n) as i64,
                    batch as i32,
                    compute,
                    algo,
                )
            }
            .map_err(|e| e.to_string())
        }
        _ => {
            let pointers = batch_pointers(&oa, &ob, &out, m, n)?;
            let base = pointers.as_ptr() as *const *const std::ffi::c_void;
            // SAFETY: as above; the three pointer arrays (A's, B's, C's, `batch` each) were
            // written by the kernel just queued on the same stream, and `pointers` is only
            // reused by later stream work.
            let status = unsafe {
                bsys::cublasGemmBatchedEx(
                    h.0,
                    ta,
                    tb,
                    n32,
                    m32,
                    k32,
                    alpha,
                    base.add(batch),
                    ty,
                    ob.ld as i32,
                    base,
                    ty,
                    oa.ld as i32,
                    beta,
                    base.add(2 * batch) as *const *mut std::ffi::c_void,
                    ty,
                    n32,
                    batch as i32,
                    compute,
                    algo,
                )
            };
            match status {
                bsys::cublasStatus_t::CUBLAS_STATUS_SUCCESS => Ok(()),
                s => Err(format!("{s:?}")),
            }
        }
    };
    status.map_err(|e| kiln_base::Error::Runtime {
        op: "matmul",
        msg: format!("cuBLAS failed: {e}"),
    })?;
    Ok(out)
}
