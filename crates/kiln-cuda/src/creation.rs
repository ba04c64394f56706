//! Arrays made on the GPU: Arange, and RandomBits (threefry2x32 laid out exactly as
//! `kiln_base::random::fill_bits`, so a key gives the same numbers on every device).

use crate::alloc::device_ptr;
use crate::copy::{contiguous, empty};
use crate::launch::{blocks_for, launch, Args, BLOCK};
use crate::nvrtc::KernelCache;
use kiln_base::shape::size_of;
use kiln_base::{bail, ArrayData, DType, Layout, Result, Scalar};
use std::fmt::Write;

/// `out[i] = start + i * step`: floats computed in double and rounded once (as the CPU;
/// element 0 is `start` itself, keeping a -0.0),
/// integers in wrapping 64-bit arithmetic and truncated.
fn arange_source(dtype: DType) -> String {
    let storage = kiln_codegen::c_type(dtype);
    let (params, value) = if dtype.is_float() {
        let store = match dtype {
            DType::F16 => "k_f64_to_f16(v)",
            DType::BF16 => "k_f64_to_bf16(v)",
            _ => "(float)v",
        };
        (
            "const double s, const double d",
            format!("const double v = i == 0 ? s : s + (double)i * d; out[i] = {store};"),
        )
    } else {
        let store = if dtype == DType::Bool { "v != 0" } else { "(S)(int64_t)v" };
        (
            "const int64_t s, const int64_t d",
            format!(
                "const uint64_t v = (uint64_t)s + (uint64_t)i * (uint64_t)d; out[i] = {store};"
            ),
        )
    };
    let mut s = String::from(kiln_codegen::cuda::preamble());
    let _ = write!(
        s,
        r#"
typedef {storage} S;
extern "C" __global__ void kiln_arange(const int64_t n, {params}, S *__restrict__ out) {{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {{
        {value}
    }}
}}
"#
    );
    s
}

static ARANGES: KernelCache<DType> = KernelCache::new();

pub(crate) fn arange(
    start: Scalar,
    step: Scalar,
    dtype: DType,
    shape: &[usize],
) -> Result<ArrayData> {
    let out = empty(shape, dtype)?;
    let n = out.layout.size();
    if n == 0 {
        return Ok(out);
    }
    let f = ARANGES.get(&dtype, "kiln_arange", || arange_source(dtype))?;
    let mut args = Args::new();
    args.i64(n as i64);
    if dtype.is_float() {
        args.i64(start.as_f64().to_bits() as i64).i64(step.as_f64().to_bits() as i64);
    } else {
        args.i64(start.as_i64()).i64(step.as_i64());
    }
    args.ptr(device_ptr(&out.buffer, 0, dtype.size()));
    launch("arange", f, blocks_for(n as u64, BLOCK as u64), BLOCK, 0, &mut args)?;
    Ok(out)
}

/// One thread per counter pair of one key: words `i` and `i + second` of the key's bytes
/// from one threefry hash (an odd last word from the pair `(half, 0)`), written as whole
/// words when every key's bytes are word-aligned, else byte by byte up to the end.
const RANDOM_SOURCE: &str = r#"
K_INLINE uint32_t k_rotl(uint32_t x, int r) { return (x << r) | (x >> (32 - r)); }
K_INLINE void k_threefry(uint32_t k0, uint32_t k1, uint32_t c0, uint32_t c1, uint32_t *y0, uint32_t *y1) {
    const uint32_t ks[3] = {k0, k1, k0 ^ k1 ^ 0x1BD11BDAu};
    const int rot[2][4] = {{13, 15, 26, 6}, {17, 29, 16, 24}};
    uint32_t x0 = c0 + ks[0], x1 = c1 + ks[1];
    #pragma unroll
    for (int round = 0; round < 5; ++round) {
        #pragma unroll
        for (int r = 0; r < 4; ++r) {
            x0 += x1;
            x1 = k_rotl(x1, rot[round % 2][r]) ^ x0;
        }
        x0 += ks[(round + 1) % 3];
        x1 += ks[(round + 2) % 3] + (uint32_t)(round + 1);
    }
    *y0 = x0;
    *y1 = x1;
}
K_INLINE void k_put(uint8_t *base, int64_t chunk, int64_t word, uint32_t v) {
    const int64_t start = word * 4;
    if ((chunk & 3) == 0) {
        *(uint32_t *)(base + start) = v;
        return;
    }
    for (int b = 0; b < 4 && start + b < chunk; ++b) base[start + b] = (uint8_t)(v >> (8 * b));
}
extern "C" __global__ void kiln_random_bits(const int64_t keys, const int64_t chunk,
                                          const uint32_t *__restrict__ key, uint8_t *__restrict__ out) {
    const int64_t words = (chunk + 3) / 4, half = words / 2, odd = words % 2;
    const int64_t second = half + odd, per_key = half + odd, n = keys * per_key;
    for (int64_t t = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; t < n;
         t += (int64_t)gridDim.x * blockDim.x) {
        const int64_t k = t / per_key, i = t - k * per_key;
        uint8_t *base = out + k * chunk;
        uint32_t a, b;
        if (i < half) {
            k_threefry(key[2 * k], key[2 * k + 1], (uint32_t)i, (uint32_t)(i + second), &a, &b);
            k_put(base, chunk, i, a);
            k_put(base, chunk, i + second, b);
        } else {
            k_threefry(key[2 * k], key[2 * k + 1], (uint32_t)half, 0u, &a, &b);
            k_put(base, chunk, half, a);
        }
    }
}
"#;

static RANDOM: KernelCache<()> = KernelCache::new();

pub(crate) fn random_bits(
    key: &ArrayData,
    per_key: &[usize],
    width: u8,
    shape: &[usize],
    dtype: DType,
) -> Result<ArrayData> {
    let op = "random_bits";
    let Some(chunk) = size_of(per_key).checked_mul(width as usize) else {
        bail!(Runtime, op, "Output is too large.");
    };
    let keys = key.layout.size() / 2;
    let Some(nbytes) = chunk.checked_mul(keys) else {
        bail!(Runtime, op, "Output is too large.");
    };
    let mut out = empty(&[nbytes], DType::U8)?;
    out.layout = Layout::contiguous(shape);
    out.dtype = dtype;
    if nbytes == 0 {
        return Ok(out);
    }
    let key = contiguous(key)?;
    let f = RANDOM.get(&(), "kiln_random_bits", || {
        format!("{}{RANDOM_SOURCE}", kiln_codegen::cuda::preamble())
    })?;
    let pairs = (chunk.div_ceil(4)).div_ceil(2) as u64 * keys as u64;
    let mut args = Args::new();
    args.i64(keys as i64)
        .i64(chunk as i64)
        .ptr(device_ptr(&key.buffer, key.layout.offset as isize, 4))
        .ptr(device_ptr(&out.buffer, 0, 1));
    launch(op, f, blocks_for(pairs, BLOCK as u64), BLOCK, 0, &mut args)?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arange_sources() {
        let f = arange_source(DType::BF16);
        assert!(f.contains("const double s, const double d"));
        assert!(f.contains("out[i] = k_f64_to_bf16(v);"));
        let i = arange_source(DType::I8);
        assert!(i.contains("typedef int8_t S;"));
        assert!(i.contains("(uint64_t)s + (uint64_t)i * (uint64_t)d"));
    }

    #[test]
    fn random_source_matches_the_host_generator_constants() {
        assert!(RANDOM_SOURCE.contains("0x1BD11BDAu"));
        assert!(RANDOM_SOURCE.contains("{13, 15, 26, 6}, {17, 29, 16, 24}"));
    }
}
