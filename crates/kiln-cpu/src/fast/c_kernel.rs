//! User C kernels (`mx.fast.c_kernel`): the user's body wrapped in a generated function
//! whose locals name each input and output, built by the compile tier's C builder
//! (`fused::jit::build_source`: system compiler, on-disk cache) and kept loaded in memory.
//!
//! The generated function, called once per evaluation on one thread:
//!
//! ```c
//! void kiln_c_kernel(const void *const *in, void *const *out, const int64_t *const *shapes,
//!                    const int64_t *const *strides, const int64_t *ndims,
//!                    const int64_t *sizes);
//! ```
//!
//! Inside it, for an input `a` of dtype float32: `const float *a`, `const int64_t *a_shape`,
//! `const int64_t *a_strides` (in elements), `int a_ndim`, `int64_t a_size`; outputs
//! likewise, without `const` on the data and without strides (they are row-major). Template
//! arguments are `#define`d before the header (dtypes as C type names). `#line` directives
//! make compiler errors point at the lines of the user's body.

use crate::fused::jit;
use kiln_base::{bail, ArrayData, CKernelSpec, DType, Layout, Result, Scalar, HOST};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

/// The entry point's C type.
type EntryFn = unsafe extern "C" fn(
    *const *const u8,
    *const *mut u8,
    *const *const i64,
    *const *const i64,
    *const i64,
    *const i64,
);

const SYMBOL: &str = "kiln_c_kernel";

/// The C type a dtype's elements have in a kernel.
pub fn c_type(op: &'static str, d: DType) -> Result<&'static str> {
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
        DType::F16 => "_Float16",
        DType::BF16 => "__bf16",
        DType::F32 => "float",
        DType::F64 => "double",
        DType::C64 => bail!(Type, op, "complex64 is not supported in C kernels."),
    })
}

/// A template argument: `#define NAME value` (shared with CUDA kernels, in kiln-base).
pub use kiln_base::TemplateArg;

/// The complete C source of a kernel for these names, dtypes and template arguments.
#[allow(clippy::too_many_arguments)]
pub fn c_kernel_source(
    name: &str,
    inputs: &[(String, DType)],
    outputs: &[(String, DType)],
    template: &[(String, TemplateArg)],
    header: &str,
    body: &str,
) -> Result<String> {
    let op = "c_kernel";
    let ident = |s: &str| {
        !s.is_empty()
            && !s.starts_with(|c: char| c.is_ascii_digit())
            && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
    };
    for n in inputs
        .iter()
        .map(|i| &i.0)
        .chain(outputs.iter().map(|o| &o.0))
        .chain(template.iter().map(|t| &t.0))
    {
        if !ident(n) {
            bail!(Value, op, "`{n}` is not a valid C identifier.");
        }
    }
    let label: String = name.chars().filter(|c| c.is_ascii_alphanumeric() || *c == '_').collect();
    let mut s = String::from(
        "#include <stdint.h>\n#include <stddef.h>\n#include <stdbool.h>\n#include <math.h>\n\
         #include <string.h>\n",
    );
    for (n, arg) in template {
        let v = match arg {
            TemplateArg::Int(i) => i.to_string(),
            TemplateArg::Bool(b) => (*b as i32).to_string(),
            TemplateArg::DType(d) => c_type(op, *d)?.to_string(),
        };
        s += &format!("#define {n} {v}\n");
    }
    s += &format!("#line 1 \"{label}_header\"\n{header}\n");
    s += "void kiln_c_kernel(const void *const *kiln_in, void *const *kiln_out, \
          const int64_t *const *kiln_shapes, const int64_t *const *kiln_strides, \
          const int64_t *kiln_ndims, const int64_t *kiln_sizes) {\n";
    for (i, (n, d)) in inputs.iter().enumerate() {
        let t = c_type(op, *d)?;
        s += &format!(
            "  const {t} *{n} = (const {t} *)kiln_in[{i}];\n  const int64_t *{n}_shape = \
             kiln_shapes[{i}];\n  const int64_t *{n}_strides = kiln_strides[{i}];\n  \
             const int {n}_ndim = (int)kiln_ndims[{i}];\n  const int64_t {n}_size = \
             kiln_sizes[{i}];\n  (void){n}; (void){n}_shape; (void){n}_strides; \
             (void){n}_ndim; (void){n}_size;\n"
        );
    }
    for (j, (n, d)) in outputs.iter().enumerate() {
        let t = c_type(op, *d)?;
        let i = inputs.len() + j;
        s += &format!(
            "  {t} *{n} = ({t} *)kiln_out[{j}];\n  const int64_t *{n}_shape = \
             kiln_shapes[{i}];\n  const int {n}_ndim = (int)kiln_ndims[{i}];\n  \
             const int64_t {n}_size = kiln_sizes[{i}];\n  (void){n}; (void){n}_shape; \
             (void){n}_ndim; (void){n}_size;\n"
        );
    }
    s += &format!("#line 1 \"{label}\"\n{body}\n}}\n");
    Ok(s)
}

struct Loaded {
    _library: libloading::Library,
    entry: EntryFn,
}

fn loaded() -> &'static Mutex<HashMap<String, Arc<Loaded>>> {
    static LOADED: OnceLock<Mutex<HashMap<String, Arc<Loaded>>>> = OnceLock::new();
    LOADED.get_or_init(|| Mutex::new(HashMap::new()))
}

/// Builds (or finds in memory or on disk) and loads the kernel of `source`; compile errors
/// carry the compiler's message.
pub fn c_kernel_check(source: &str) -> Result<()> {
    kernel(source).map(|_| ())
}

fn kernel(source: &str) -> Result<Arc<Loaded>> {
    if let Some(k) = loaded().lock().unwrap_or_else(|e| e.into_inner()).get(source) {
        return Ok(k.clone());
    }
    let library = jit::build_source(source).map_err(|e| match e {
        kiln_base::Error::Runtime { msg, .. } => kiln_base::Error::Runtime { op: "c_kernel", msg },
        e => e,
    })?;
    // SAFETY: the generated source defines `kiln_c_kernel` with exactly `EntryFn`'s C
    // signature; the library stays loaded while the pointer is reachable (`Loaded` owns it).
    let entry = unsafe { library.get::<EntryFn>(SYMBOL.as_bytes()).map(|f| *f) }
        .map_err(|e| kiln_base::Error::Runtime { op: "c_kernel", msg: e.to_string() })?;
    let k = Arc::new(Loaded { _library: library, entry });
    loaded().lock().unwrap_or_else(|e| e.into_inner()).insert(source.to_string(), k.clone());
    Ok(k)
}

/// Sets every element of the fresh `out` to `v` (converted as `astype` would).
fn fill(out: &mut ArrayData, v: Scalar) -> Result<()> {
    let (src, from) = match v {
        Scalar::Bool(b) => ((b as i64).to_ne_bytes(), DType::I64),
        Scalar::Int(i) => (i.to_ne_bytes(), DType::I64),
        Scalar::UInt(u) => (u.to_ne_bytes(), DType::U64),
        Scalar::Float(f) | Scalar::Complex(f, _) => (f.to_ne_bytes(), DType::F64),
    };
    let mut one = zeros(&[], from)?;
    if let Some(b) = one.buffer.host_slice_mut::<u8>() {
        b[..8].copy_from_slice(&src);
    }
    let one = crate::cast::astype(&one, &[], out.dtype)?;
    let width = out.dtype.size();
    let value = one.buffer.host_slice::<u8>()[..width].to_vec();
    let Some(dst) = out.buffer.host_slice_mut::<u8>() else {
        bail!(Runtime, "c_kernel", "Fresh output buffer is shared.");
    };
    let n = out.layout.size() * width;
    for chunk in dst[..n].chunks_exact_mut(width) {
        chunk.copy_from_slice(&value);
    }
    Ok(())
}

pub(super) fn run(spec: &CKernelSpec, inputs: &[ArrayData]) -> Result<Vec<ArrayData>> {
    let k = kernel(&spec.source)?;
    let ins: Vec<ArrayData> = if spec.ensure_row_contiguous {
        inputs.iter().map(|x| super::dense_as(x, x.dtype)).collect::<Result<_>>()?
    } else {
        inputs.to_vec()
    };
    let mut outs = Vec::with_capacity(spec.output_shapes.len());
    for (s, &d) in spec.output_shapes.iter().zip(&spec.output_dtypes) {
        let mut o = zeros(s, d)?;
        if let Some(v) = spec.init_value {
            fill(&mut o, v)?;
        }
        outs.push(o);
    }
    let mut shapes: Vec<Vec<i64>> = Vec::new();
    let mut strides: Vec<Vec<i64>> = Vec::new();
    for l in ins.iter().map(|x| &x.layout).chain(outs.iter().map(|o| &o.layout)) {
        shapes.push(l.shape.iter().map(|&d| d as i64).collect());
        strides.push(l.strides.iter().map(|&s| s as i64).collect());
    }
    let ndims: Vec<i64> = shapes.iter().map(|s| s.len() as i64).collect();
    let sizes: Vec<i64> = shapes.iter().map(|s| s.iter().product()).collect();
    let shape_ptrs: Vec<*const i64> = shapes.iter().map(|s| s.as_ptr()).collect();
    let stride_ptrs: Vec<*const i64> = strides.iter().map(|s| s.as_ptr()).collect();
    // `wrapping_add`: the offset lies inside the buffer (validated by the backend).
    let in_ptrs: Vec<*const u8> = ins
        .iter()
        .map(|x| {
            x.buffer.host_slice::<u8>().as_ptr().wrapping_add(x.layout.offset * x.dtype.size())
        })
        .collect();
    let mut out_ptrs = Vec::with_capacity(outs.len());
    for o in outs.iter_mut() {
        let Some(slice) = o.buffer.host_slice_mut::<u8>() else {
            bail!(Runtime, "c_kernel", "Fresh output buffer is shared.");
        };
        out_ptrs.push(slice.as_mut_ptr());
    }
    // SAFETY: every pointer is valid for the call: inputs and outputs point into live
    // buffers of the sizes the shapes say, shape/stride arrays outlive the call, and the
    // outputs are fresh, unshared buffers. The user's body is trusted to stay inside the
    // sizes it is given (as with MLX's custom kernels).
    unsafe {
        (k.entry)(
            in_ptrs.as_ptr(),
            out_ptrs.as_ptr(),
            shape_ptrs.as_ptr(),
            stride_ptrs.as_ptr(),
            ndims.as_ptr(),
            sizes.as_ptr(),
        );
    }
    Ok(outs)
}

/// A zeroed row-major array.
pub(super) fn zeros(shape: &[usize], dtype: DType) -> Result<ArrayData> {
    let n: usize = shape.iter().product();
    let Some(bytes) = n.checked_mul(dtype.size()) else {
        bail!(Value, "c_kernel", "Output of {n} elements is too large.");
    };
    let buffer = HOST.alloc(bytes)?;
    Ok(ArrayData { buffer, layout: Layout::contiguous(shape), dtype })
}
