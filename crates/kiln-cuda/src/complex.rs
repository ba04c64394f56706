//! complex64 on the GPU: the parts of a complex value (`Primitive::Complex`: real, imag, abs, conj) as one strided kernel, and the
//! element count behind shapeless `mean` (`Primitive::NumberOfElements`). The elementwise
//! math itself is generated (the `kc64` type and its `k_*` overloads in kiln-codegen's CUDA
//! preamble), so fused programs mix complex and real values freely.

use crate::alloc::device_ptr;
use crate::collapse::collapse;
use crate::copy::empty;
use crate::launch::{blocks_for, launch, Args, BLOCK};
use crate::nvrtc::KernelCache;
use crate::runtime::{driver_error, gpu};
use kiln_base::{bail, ArrayData, ComplexOp, DType, Primitive, Result};
use std::fmt::Write;

/// The expression of one part of `z`, and its result type.
fn part(op: ComplexOp) -> (&'static str, &'static str) {
    match op {
        ComplexOp::Real => ("z.re", "float"),
        ComplexOp::Imag => ("z.im", "float"),
        ComplexOp::Abs => ("k_cabs(z)", "float"),
        ComplexOp::Conj => ("k_c64(z.re, -z.im)", "kc64"),
    }
}

const SYMBOL: &str = "kiln_complex_part";

/// `dst[e] = part(src[at(e)])` over `ndim` dims; the table holds the dims, then the source's
/// element strides (the output is row-major).
fn source(op: ComplexOp, ndim: usize) -> String {
    let (expr, tout) = part(op);
    let mut s = String::from(kiln_codegen::cuda::preamble());
    let _ = write!(
        s,
        r#"
struct KTable {{ int64_t v[{two}]; }};
extern "C" __global__ void {SYMBOL}(const int64_t n, const kc64 *__restrict__ src, {tout} *__restrict__ dst,
                                   const KTable t) {{
    for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < n;
         e += (int64_t)gridDim.x * blockDim.x) {{
        int64_t r = e, from = 0;
        #pragma unroll
        for (int d = {last}; d >= 0; --d) {{
            const int64_t i = r % t.v[d];
            r /= t.v[d];
            from += i * t.v[{ndim} + d];
        }}
        const kc64 z = src[from];
        dst[e] = {expr};
    }}
}}
"#,
        two = 2 * ndim,
        last = ndim - 1,
    );
    s
}

static KERNELS: KernelCache<(ComplexOp, usize)> = KernelCache::new();

/// `Primitive::Complex`: a part of each element of `x` (any layout), row-major.
pub fn complex_part(op: ComplexOp, x: &ArrayData, shape: &[usize]) -> Result<ArrayData> {
    let name = Primitive::Complex(op).name();
    if x.dtype != DType::C64 {
        bail!(Type, name, "Expected a complex64 input, got {}.", x.dtype);
    }
    let out_dtype = if op == ComplexOp::Conj { DType::C64 } else { DType::F32 };
    let out = empty(shape, out_dtype)?;
    let n: usize = shape.iter().product();
    if n == 0 {
        return Ok(out);
    }
    let (dims, strides) = collapse(&x.layout.shape, std::slice::from_ref(x));
    let mut table = dims.clone();
    table.extend_from_slice(&strides[0]);
    let f = KERNELS.get(&(op, dims.len()), SYMBOL, || source(op, dims.len()))?;
    let mut args = Args::new();
    args.i64(n as i64)
        .ptr(device_ptr(&x.buffer, x.layout.offset as isize, 8))
        .ptr(device_ptr(&out.buffer, 0, out_dtype.size()))
        .i64_struct(&table);
    launch(name, f, blocks_for(n as u64, BLOCK as u64), BLOCK, 0, &mut args)?;
    Ok(out)
}

/// The bits of `value` stored as `dtype` (a float dtype: the front end checks), rounded once
/// from float64 as kiln-cpu's `arange` stores it.
fn float_bits(value: f64, dtype: DType) -> Result<(u32, usize)> {
    Ok(match dtype {
        DType::F32 => ((value as f32).to_bits(), 4),
        DType::F16 => (half::f16::from_f64(value).to_bits() as u32, 2),
        DType::BF16 => (half::bf16::from_f64(value).to_bits() as u32, 2),
        d => bail!(Type, "number_of_elements", "Expected a float dtype, got {d}."),
    })
}

/// `Primitive::NumberOfElements`: the count of `x` over `axes` (or its inverse), computed on
/// the host from the shape and written by one memset node, so a shapeless compiled `mean`
/// stays on the GPU and inside CUDA graphs (the value is baked into the captured node, as
/// every kernel's sizes are).
pub fn number_of_elements(
    axes: &[usize],
    inverted: bool,
    dtype: DType,
    x: &ArrayData,
) -> Result<ArrayData> {
    let n: f64 = axes.iter().map(|&a| x.layout.shape[a] as f64).product();
    let value = if inverted { 1.0 / n } else { n };
    let (bits, width) = float_bits(value, dtype)?;
    let out = empty(&[], dtype)?;
    let gpu = gpu()?;
    let ptr = out.buffer.as_ptr() as u64;
    // SAFETY: `out` is a fresh live block of at least `width` bytes (one element); the memset
    // is ordered on the one stream before any reader.
    let status = unsafe {
        if width == 4 {
            cudarc::driver::sys::cuMemsetD32Async(ptr, bits, 1, gpu.stream()?)
        } else {
            cudarc::driver::sys::cuMemsetD16Async(ptr, bits as u16, 1, gpu.stream()?)
        }
    };
    status.result().map_err(|e| driver_error("number_of_elements", e))?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn part_sources_read_strided_complex() {
        let s = source(ComplexOp::Abs, 3);
        assert!(s.contains("struct KTable { int64_t v[6]; };"));
        assert!(s.contains("const kc64 *__restrict__ src, float *__restrict__ dst"));
        assert!(s.contains("dst[e] = k_cabs(z);"));
        assert!(s.contains("from += i * t.v[3 + d];"));
        let c = source(ComplexOp::Conj, 1);
        assert!(c.contains("kc64 *__restrict__ dst"));
        assert!(c.contains("dst[e] = k_c64(z.re, -z.im);"));
        let mut all = Vec::new();
        for (k, op) in [ComplexOp::Real, ComplexOp::Imag, ComplexOp::Abs, ComplexOp::Conj]
            .into_iter()
            .enumerate()
        {
            all.push((format!("complex_part_{k}.cu"), source(op, 2)));
        }
        crate::nvrtc::dump_sources(&all);
    }

    #[test]
    fn element_counts_round_once() {
        assert_eq!(float_bits(3.0, DType::F32).unwrap(), (3.0f32.to_bits(), 4));
        let third = float_bits(1.0 / 3.0, DType::F16).unwrap();
        assert_eq!(third, (half::f16::from_f64(1.0 / 3.0).to_bits() as u32, 2));
        assert!(float_bits(1.0, DType::I32).is_err());
    }
}
