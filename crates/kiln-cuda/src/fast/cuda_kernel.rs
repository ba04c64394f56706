//! User CUDA kernels (`mx.fast.cuda_kernel`): the user's body wrapped in a generated kernel
//! whose parameters name each input and output, compiled by NVRTC (`nvrtc::function`, cached
//! in memory and on disk by source) and launched with MLX's grid semantics.
//!
//! The generated source, for an input `inp` (float16, 2-d), an output `out` and
//! `template=[("T", mx.float32)]`:
//!
//! ```cuda
//! <prelude: int types, __half / __nv_bfloat16, cooperative_groups, elem_to_loc>
//! #line 1 "myexp_header"
//! <header>
//! template <typename T>
//! __device__ __forceinline__ void kiln_custom_body(const __half* inp,
//!     const KilnShape<2>& inp_shape, const KilnStrides<2>& inp_strides, const int inp_ndim,
//!     float* out) {
//! #line 1 "myexp"
//! <source>
//! }
//! extern "C" __global__ void kiln_custom_myexp(const __half* inp,
//!     const __grid_constant__ KilnShape<2> inp_shape, ..., float* out) {
//!     kiln_custom_body<float>(inp, inp_shape, inp_strides, inp_ndim, out);
//! }
//! ```
//!
//! Every input always gets `name_shape` (int32), `name_strides` (int64, in elements) and
//! `name_ndim` (MLX passes them only when the body names them; passing them always is
//! equivalent for the body). A 0-d input is a pointer to its one element. Templates are real
//! C++ template parameters (dtype -> `typename`, int -> `int`, bool -> `bool`), so the body
//! sees them as MLX's kernels do; the `extern "C"` wrapper gives the instantiation a plain
//! symbol. `#line` directives make NVRTC's errors count lines from the start of the user's
//! header and body. Like kiln's other kernels the source is headerless (NVRTC has no include
//! path, and CUDA 13's NVRTC has no cuda_fp16.h built in): the prelude gives the int types,
//! `__half` / `__nv_bfloat16` (bits, converting to and from float, arithmetic through
//! float), the usual conversion intrinsics, and the `cooperative_groups` calls a body uses
//! (`this_grid()`, `this_thread_block()`, ranks, `sync()`; no grid-wide sync).

use crate::alloc::device_ptr;
use crate::nvrtc::{self, Function};
use crate::runtime::{driver_error, gpu};
use cudarc::driver::{result as driver, sys as dsys};
use kiln_base::{bail, ArrayData, CudaKernelSpec, DType, Result, Scalar, TemplateArg};

const OP: &str = "cuda_kernel";

/// Declarations every user kernel sees before its header.
const PRELUDE: &str = r#"/* kiln mx.fast.cuda_kernel prelude */
typedef signed char int8_t;
typedef unsigned char uint8_t;
typedef short int16_t;
typedef unsigned short uint16_t;
typedef int int32_t;
typedef unsigned int uint32_t;
typedef long long int64_t;
typedef unsigned long long uint64_t;

/* IEEE half stored as bits; arithmetic goes through float (round to nearest even). */
struct __align__(2) __half {
    unsigned short __x;
    __half() = default;
    __device__ __half(float f) { asm("cvt.rn.f16.f32 %0, %1;" : "=h"(__x) : "f"(f)); }
    __device__ __half(double f) { asm("cvt.rn.f16.f64 %0, %1;" : "=h"(__x) : "d"(f)); }
    __device__ __half(int v) : __half((float)v) {}
    __device__ __half(unsigned int v) : __half((float)v) {}
    __device__ __half(long long v) : __half((float)v) {}
    __device__ __half(unsigned long long v) : __half((float)v) {}
    __device__ operator float() const { float f; asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(__x)); return f; }
    __device__ __half &operator+=(float o) { return *this = __half(float(*this) + o); }
    __device__ __half &operator-=(float o) { return *this = __half(float(*this) - o); }
    __device__ __half &operator*=(float o) { return *this = __half(float(*this) * o); }
    __device__ __half &operator/=(float o) { return *this = __half(float(*this) / o); }
};
typedef __half half;
__device__ __forceinline__ __half __float2half(float f) { return __half(f); }
__device__ __forceinline__ __half __float2half_rn(float f) { return __half(f); }
__device__ __forceinline__ float __half2float(__half h) { return float(h); }

/* bfloat16 stored as bits; arithmetic goes through float (round to nearest even). */
struct __align__(2) __nv_bfloat16 {
    unsigned short __x;
    __nv_bfloat16() = default;
    __device__ __nv_bfloat16(float f) { asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(__x) : "f"(f)); }
    __device__ __nv_bfloat16(double f) { asm("cvt.rn.bf16.f64 %0, %1;" : "=h"(__x) : "d"(f)); }
    __device__ __nv_bfloat16(int v) : __nv_bfloat16((float)v) {}
    __device__ __nv_bfloat16(unsigned int v) : __nv_bfloat16((float)v) {}
    __device__ __nv_bfloat16(long long v) : __nv_bfloat16((float)v) {}
    __device__ __nv_bfloat16(unsigned long long v) : __nv_bfloat16((float)v) {}
    __device__ operator float() const { return __uint_as_float(((unsigned int)__x) << 16); }
    __device__ __nv_bfloat16 &operator+=(float o) { return *this = __nv_bfloat16(float(*this) + o); }
    __device__ __nv_bfloat16 &operator-=(float o) { return *this = __nv_bfloat16(float(*this) - o); }
    __device__ __nv_bfloat16 &operator*=(float o) { return *this = __nv_bfloat16(float(*this) * o); }
    __device__ __nv_bfloat16 &operator/=(float o) { return *this = __nv_bfloat16(float(*this) / o); }
};
typedef __nv_bfloat16 nv_bfloat16;
__device__ __forceinline__ __nv_bfloat16 __float2bfloat16(float f) { return __nv_bfloat16(f); }
__device__ __forceinline__ __nv_bfloat16 __float2bfloat16_rn(float f) { return __nv_bfloat16(f); }
__device__ __forceinline__ float __bfloat162float(__nv_bfloat16 h) { return float(h); }

/* The parts of cooperative_groups a kernel body reaches for (no grid-wide sync). */
namespace cooperative_groups {
struct thread_block {
    __device__ void sync() const { __syncthreads(); }
    __device__ unsigned int thread_rank() const {
        return (threadIdx.z * blockDim.y + threadIdx.y) * blockDim.x + threadIdx.x;
    }
    __device__ unsigned int size() const { return blockDim.x * blockDim.y * blockDim.z; }
    __device__ unsigned int num_threads() const { return size(); }
    __device__ dim3 group_index() const { return blockIdx; }
    __device__ dim3 thread_index() const { return threadIdx; }
    __device__ dim3 dim_threads() const { return blockDim; }
    __device__ dim3 group_dim() const { return blockDim; }
};
struct grid_group {
    __device__ unsigned long long block_rank() const {
        return ((unsigned long long)blockIdx.z * gridDim.y + blockIdx.y) * gridDim.x + blockIdx.x;
    }
    __device__ unsigned long long thread_rank() const {
        return block_rank() * (blockDim.x * blockDim.y * blockDim.z) + thread_block().thread_rank();
    }
    __device__ unsigned long long num_blocks() const {
        return (unsigned long long)gridDim.x * gridDim.y * gridDim.z;
    }
    __device__ unsigned long long num_threads() const {
        return num_blocks() * (blockDim.x * blockDim.y * blockDim.z);
    }
    __device__ unsigned long long size() const { return num_threads(); }
    __device__ dim3 dim_blocks() const { return gridDim; }
    __device__ dim3 block_index() const { return blockIdx; }
    __device__ dim3 group_dim() const { return gridDim; }
};
__device__ __forceinline__ thread_block this_thread_block() { return thread_block(); }
__device__ __forceinline__ grid_group this_grid() { return grid_group(); }
__device__ __forceinline__ void sync(const thread_block &b) { b.sync(); }
}  // namespace cooperative_groups

/* An input's shape (int32, as MLX's Shape) and strides (int64, in elements). */
template <int N> struct KilnShape {
    int32_t d[N];
    __device__ __forceinline__ const int32_t &operator[](int i) const { return d[i]; }
    __device__ __forceinline__ const int32_t *data() const { return d; }
};
template <int N> struct KilnStrides {
    int64_t d[N];
    __device__ __forceinline__ const int64_t &operator[](int i) const { return d[i]; }
    __device__ __forceinline__ const int64_t *data() const { return d; }
};

/* The memory offset of row-major element `elem` of a strided array (MLX's helper). */
template <typename IdxT = int64_t>
__device__ __forceinline__ IdxT elem_to_loc(IdxT elem, const int32_t *shape,
                                            const int64_t *strides, int ndim) {
    IdxT loc = 0;
    for (int i = ndim - 1; i >= 0 && elem > 0; --i) {
        loc += (elem % shape[i]) * IdxT(strides[i]);
        elem /= shape[i];
    }
    return loc;
}
template <typename IdxT = int64_t, int N>
__device__ __forceinline__ IdxT elem_to_loc(IdxT elem, const KilnShape<N> &shape,
                                            const KilnStrides<N> &strides, int ndim) {
    return elem_to_loc<IdxT>(elem, shape.d, strides.d, ndim);
}
"#;

/// The CUDA type of a dtype's elements (MLX's names).
pub fn cuda_type(d: DType) -> Result<&'static str> {
    Ok(match d {
        DType::Bool => "bool",
        DType::U8 => "uint8_t",
        DType::U16 => "uint16_t",
        DType::U32 => "uint32_t",
        DType::U64 => "uint64_t",
        DType::I8 => "int8_t",
        DType::I16 => "int16_t",
        DType::I32 => "int32_t",
        DType::I64 => "int64_t",
        DType::F16 => "__half",
        DType::BF16 => "__nv_bfloat16",
        DType::F32 => "float",
        DType::F64 => "double",
        DType::C64 => bail!(Type, OP, "complex64 is not supported in CUDA kernels."),
    })
}

fn is_ident(s: &str) -> bool {
    !s.is_empty()
        && !s.starts_with(|c: char| c.is_ascii_digit())
        && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// One input of a kernel: its name, dtype and number of dimensions.
pub struct InputDecl<'a> {
    pub name: &'a str,
    pub dtype: DType,
    pub ndim: usize,
}

/// The complete source of a kernel and its entry point's symbol.
#[allow(clippy::too_many_arguments)]
pub fn source(
    name: &str,
    inputs: &[InputDecl<'_>],
    outputs: &[(&str, DType)],
    template: &[(String, TemplateArg)],
    header: &str,
    body: &str,
) -> Result<(String, String)> {
    let mut seen = std::collections::HashSet::new();
    let names = inputs.iter().map(|i| i.name).chain(outputs.iter().map(|o| o.0));
    for n in names.chain(template.iter().map(|t| t.0.as_str())) {
        if !is_ident(n) {
            bail!(Value, OP, "`{n}` is not a valid C++ identifier.");
        }
        if !seen.insert(n) {
            bail!(Value, OP, "The name `{n}` is used twice.");
        }
    }
    let label: String = name.chars().filter(|c| c.is_ascii_alphanumeric() || *c == '_').collect();
    let symbol = format!("kiln_custom_{label}");
    // Parameters as declared by the wrapper (`grid`) and the body function (by reference:
    // the wrapper's parameters are __grid_constant__, so no copy is made).
    let (mut kernel_params, mut body_params, mut call_args) = (vec![], vec![], vec![]);
    for i in inputs {
        let (t, n, rank) = (cuda_type(i.dtype)?, i.name, i.ndim.max(1));
        kernel_params.push(format!("const {t}* {n}"));
        kernel_params.push(format!("const __grid_constant__ KilnShape<{rank}> {n}_shape"));
        kernel_params.push(format!("const __grid_constant__ KilnStrides<{rank}> {n}_strides"));
        kernel_params.push(format!("const int {n}_ndim"));
        body_params.push(format!("const {t}* {n}"));
        body_params.push(format!("const KilnShape<{rank}>& {n}_shape"));
        body_params.push(format!("const KilnStrides<{rank}>& {n}_strides"));
        body_params.push(format!("const int {n}_ndim"));
        call_args.extend([n.to_string(), format!("{n}_shape"), format!("{n}_strides")]);
        call_args.push(format!("{n}_ndim"));
    }
    for (n, d) in outputs {
        let t = cuda_type(*d)?;
        kernel_params.push(format!("{t}* {n}"));
        body_params.push(format!("{t}* {n}"));
        call_args.push(n.to_string());
    }
    let (mut params, mut args) = (vec![], vec![]);
    for (n, a) in template {
        let (kind, value) = match a {
            TemplateArg::Int(v) => ("int", v.to_string()),
            TemplateArg::Bool(b) => ("bool", b.to_string()),
            TemplateArg::DType(d) => ("typename", cuda_type(*d)?.to_string()),
        };
        params.push(format!("{kind} {n}"));
        args.push(value);
    }
    let mut s = String::from(PRELUDE);
    s += &format!("#line 1 \"{label}_header\"\n{header}\n");
    s += "#line 1 \"kiln_custom_kernel\"\n";
    if !params.is_empty() {
        s += &format!("template <{}>\n", params.join(", "));
    }
    s += &format!(
        "__device__ __forceinline__ void kiln_custom_body({}) {{\n#line 1 \"{label}\"\n{body}\n}}\n",
        body_params.join(", ")
    );
    s += "#line 1 \"kiln_custom_kernel_entry\"\n";
    let inst = if args.is_empty() { String::new() } else { format!("<{}>", args.join(", ")) };
    s += &format!(
        "extern \"C\" __global__ void {symbol}({}) {{\n    kiln_custom_body{inst}({});\n}}\n",
        kernel_params.join(", "),
        call_args.join(", ")
    );
    Ok((s, symbol))
}

/// Builds (or finds cached) the kernel of `source`; NVRTC's errors become RuntimeError with
/// the compiler log.
pub fn build(source: &str, symbol: &str) -> Result<Function> {
    nvrtc::function(source, symbol).map_err(|e| match e {
        kiln_base::Error::Value { op: "cuda_compile", msg }
        | kiln_base::Error::Runtime { op: "cuda_compile", msg } => {
            kiln_base::Error::Runtime { op: OP, msg }
        }
        e => e,
    })
}

/// The kernel that sets every element of an output of `dtype` to a value.
fn fill_source(dtype: DType) -> Result<String> {
    let t = cuda_type(dtype)?;
    Ok(format!(
        "{PRELUDE}\nextern \"C\" __global__ void kiln_custom_fill({t}* out, double v, long long n) {{\n\
         for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;\n\
         i += (long long)gridDim.x * blockDim.x) out[i] = ({t})v;\n}}\n"
    ))
}

/// Builds every kernel `spec` launches (at the call, so that compile errors raise there and
/// no module is loaded while a compiled function's launches are being captured).
pub fn prepare(spec: &CudaKernelSpec) -> Result<()> {
    build(&spec.source, &spec.symbol)?;
    if spec.init_value.is_some() {
        for &d in &spec.output_dtypes {
            build(&fill_source(d)?, "kiln_custom_fill")?;
        }
    }
    Ok(())
}

/// Sets every element of `out` (row-major, fresh) to `v` converted to its dtype.
fn fill(out: &ArrayData, v: Scalar) -> Result<()> {
    let n = out.layout.size();
    if n == 0 {
        return Ok(());
    }
    let f = build(&fill_source(out.dtype)?, "kiln_custom_fill")?;
    let value = match v {
        Scalar::Bool(b) => b as i32 as f64,
        Scalar::Int(i) => i as f64,
        Scalar::UInt(u) => u as f64,
        Scalar::Float(f) | Scalar::Complex(f, _) => f,
    };
    let mut args = crate::launch::Args::new();
    args.ptr(crate::fast::ptr(out)).i64(value.to_bits() as i64).i64(n as i64);
    let block = crate::launch::BLOCK;
    crate::launch::launch(
        OP,
        f,
        crate::launch::blocks_for(n as u64, block as u64),
        block,
        0,
        &mut args,
    )
}

/// Runs `spec` on `inputs` (on the GPU): compiles (cached), allocates the outputs, fills them
/// with the init value, launches.
pub(crate) fn run(spec: &CudaKernelSpec, inputs: &[ArrayData]) -> Result<Vec<ArrayData>> {
    let f = build(&spec.source, &spec.symbol)?;
    let ins: Vec<ArrayData> = if spec.ensure_row_contiguous {
        inputs.iter().map(crate::copy::contiguous).collect::<Result<_>>()?
    } else {
        inputs.to_vec()
    };
    let mut outs = Vec::with_capacity(spec.output_shapes.len());
    for (s, &d) in spec.output_shapes.iter().zip(&spec.output_dtypes) {
        let o = crate::copy::empty(s, d)?;
        if let Some(v) = spec.init_value {
            fill(&o, v)?;
        }
        outs.push(o);
    }
    let (blocks, threads) = spec.launch_dims();
    if spec.grid.contains(&0) {
        return Ok(outs);
    }
    // Each parameter's bytes, in order; the driver reads each parameter's size from its
    // pointer (an `int` reads the low half of its little-endian word).
    let mut words: Vec<Vec<u64>> = Vec::new();
    for x in &ins {
        let shape = &x.layout.shape;
        let mut dims = Vec::with_capacity(shape.len().max(1));
        for &d in shape {
            let Ok(d) = i32::try_from(d) else {
                bail!(Value, OP, "A dimension of {d} does not fit the kernel's int32 shapes.");
            };
            dims.push(d as u32 as u64);
        }
        dims.resize(shape.len().max(1), 0);
        let packed: Vec<u64> =
            dims.chunks(2).map(|p| p[0] | (p.get(1).unwrap_or(&0) << 32)).collect();
        let mut strides: Vec<u64> = x.layout.strides.iter().map(|&s| s as i64 as u64).collect();
        strides.resize(shape.len().max(1), 0);
        words.push(vec![crate::fast::ptr(x)]);
        words.push(packed);
        words.push(strides);
        words.push(vec![shape.len() as u64]);
    }
    for o in &outs {
        words.push(vec![device_ptr(&o.buffer, 0, o.dtype.size())]);
    }
    let gpu = gpu()?;
    if spec.shared_memory > 48 * 1024 {
        // SAFETY: `f` is a loaded kernel; this only raises its dynamic shared memory limit
        // (the launch fails cleanly when the device has less).
        unsafe {
            driver::function::set_function_attribute(
                f.0,
                dsys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                spec.shared_memory as i32,
            )
        }
        .map_err(|e| driver_error(OP, e))?;
    }
    let mut params: Vec<*mut std::ffi::c_void> =
        words.iter_mut().map(|w| w.as_mut_ptr() as *mut std::ffi::c_void).collect();
    // SAFETY: the generated kernel's parameters are, in order, exactly what `words` holds
    // (pointer, KilnShape<rank> of int32, KilnStrides<rank> of int64, int per input; a
    // pointer per output), each word vector at least as large as its parameter. Inputs
    // and outputs are live device buffers held by `ins` / `outs`, which the caller keeps
    // until the stream reaches the kernel. The body is trusted to stay inside the sizes it
    // is given (as with MLX's custom kernels).
    unsafe {
        driver::launch_kernel(
            f.0,
            (blocks[0], blocks[1], blocks[2]),
            (threads[0], threads[1], threads[2]),
            spec.shared_memory,
            gpu.stream()?,
            &mut params,
        )
    }
    .map_err(|e| driver_error(OP, e))?;
    Ok(outs)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ins(list: &[(&'static str, DType, usize)]) -> Vec<InputDecl<'static>> {
        list.iter().map(|&(name, dtype, ndim)| InputDecl { name, dtype, ndim }).collect()
    }

    /// A few user kernels' sources, named; with `KILN_CUDA_DUMP=dir` they are written there
    /// for an offline NVRTC check (`python3 /work/tools/nvrtc_check.py dir/custom_*.cu`).
    pub(crate) fn sources() -> Vec<(String, String)> {
        let mut out = vec![];
        let exp_body = "auto elem = cooperative_groups::this_grid().thread_rank();\n\
                        T tmp = inp[elem];\nout[elem] = exp(tmp);";
        for d in [DType::F32, DType::F16, DType::BF16] {
            let t = [("T".to_string(), TemplateArg::DType(d))];
            let (s, _) =
                source("myexp", &ins(&[("inp", d, 2)]), &[("out", d)], &t, "", exp_body).unwrap();
            out.push((format!("custom_exp_{d}"), s));
        }
        // A block reduction through dynamic shared memory.
        let sum = "extern __shared__ float partial[];\n\
                   uint32_t tid = threadIdx.x;\n\
                   int64_t i = blockIdx.x * (int64_t)blockDim.x + tid;\n\
                   partial[tid] = i < x_shape[0] ? float(x[i]) : 0.0f;\n\
                   __syncthreads();\n\
                   for (uint32_t s = blockDim.x / 2; s > 0; s >>= 1) {\n\
                     if (tid < s) partial[tid] += partial[tid + s];\n\
                     __syncthreads();\n\
                   }\n\
                   if (tid == 0) atomicAdd(&total[0], partial[0]);";
        let (s, _) = source(
            "block_sum",
            &ins(&[("x", DType::BF16, 1)]),
            &[("total", DType::F32)],
            &[],
            "",
            sum,
        )
        .unwrap();
        out.push(("custom_block_sum".into(), s));
        // Strided access, two outputs, int and bool templates, a header helper, a 0-d input.
        let header = "__device__ inline float twice(float v) { return 2.0f * v; }";
        let body = "uint32_t e = blockIdx.x * blockDim.x + threadIdx.x;\n\
                    if (e >= N) return;\n\
                    int64_t loc = elem_to_loc(int64_t(e), a_shape, a_strides, a_ndim);\n\
                    float v = float(a[loc]) + float(s[0]);\n\
                    doubled[e] = FLAG ? twice(v) : v;\n\
                    idx[e] = (int32_t)loc;";
        let t = [
            ("N".to_string(), TemplateArg::Int(12)),
            ("FLAG".to_string(), TemplateArg::Bool(true)),
        ];
        let (s, _) = source(
            "strided",
            &ins(&[("a", DType::F16, 3), ("s", DType::I64, 0)]),
            &[("doubled", DType::F64), ("idx", DType::I32)],
            &t,
            header,
            body,
        )
        .unwrap();
        out.push(("custom_strided".into(), s));
        for d in [DType::Bool, DType::U8, DType::I64, DType::F16, DType::BF16, DType::F64] {
            out.push((format!("custom_fill_{d}"), fill_source(d).unwrap()));
        }
        out
    }

    #[test]
    fn dump() {
        let sources = sources();
        assert!(sources.iter().all(|(_, s)| s.contains("__global__")));
        if let Some(dir) = std::env::var_os("KILN_CUDA_DUMP") {
            let dir = std::path::PathBuf::from(dir);
            std::fs::create_dir_all(&dir).unwrap();
            for (name, src) in &sources {
                std::fs::write(dir.join(format!("{name}.cu")), src).unwrap();
            }
        }
    }

    #[test]
    fn signature_and_template() {
        let t =
            [("T".to_string(), TemplateArg::DType(DType::F16)), ("K".into(), TemplateArg::Int(-3))];
        let (s, sym) = source(
            "my-exp",
            &ins(&[("inp", DType::F32, 0)]),
            &[("out", DType::BF16)],
            &t,
            "// hdr",
            "out[0] = inp[0];",
        )
        .unwrap();
        assert_eq!(sym, "kiln_custom_myexp");
        assert!(s.contains("template <typename T, int K>"));
        assert!(
            s.contains("kiln_custom_body<__half, -3>(inp, inp_shape, inp_strides, inp_ndim, out)")
        );
        assert!(s.contains("const __grid_constant__ KilnShape<1> inp_shape"));
        assert!(s.contains("__nv_bfloat16* out"));
        assert!(s.contains("#line 1 \"myexp\"\nout[0] = inp[0];"));
        assert!(s.contains("#line 1 \"myexp_header\"\n// hdr"));
    }

    #[test]
    fn bad_names_and_dtypes() {
        let bad = |inputs: &[(&'static str, DType, usize)], outs: &[(&str, DType)]| {
            source("k", &ins(inputs), outs, &[], "", "").unwrap_err().to_string()
        };
        assert!(bad(&[("1a", DType::F32, 1)], &[("o", DType::F32)]).contains("identifier"));
        assert!(bad(&[("a b", DType::F32, 1)], &[("o", DType::F32)]).contains("identifier"));
        assert!(bad(&[("a", DType::F32, 1)], &[("a", DType::F32)]).contains("twice"));
        assert!(bad(&[("a", DType::C64, 1)], &[("o", DType::F32)]).contains("complex64"));
        assert!(bad(&[], &[("", DType::F32)]).contains("identifier"));
    }
}
