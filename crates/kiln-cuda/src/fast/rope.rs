//! Rotary positional encoding over the last axis of `(B, ..., T, D)`, as kiln-cpu's kernel:
//! the angle of pair `i` at position `offset[b] + t` is `(offset + t) * scale * inv_freq[i]`
//! with the inverse frequency `1 / freqs[i]` or `base^(-i / (dims / 2))`, all in float64,
//! its cosine and sine rounded to float32 (the sine negated for `inverse`); the rotation
//! itself is float32. One thread per (batch element, position, pair) rotates that pair in
//! every head (the float64 angle is computed once, not once per head), and one per copied
//! feature past `dims`.

use super::{dense, header, ptr};
use crate::copy::empty;
use crate::launch::{blocks_for, launch, Args, BLOCK};
use crate::nvrtc::{check_grid, Function, KernelCache};
use kiln_base::{bail, ArrayData, DType, Result};
use std::fmt::Write;

const SYMBOL: &str = "kiln_rope";

pub(crate) struct Params {
    pub dims: usize,
    pub traditional: bool,
    pub base: f64,
    pub scale: f64,
    pub inverse: bool,
}

#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub(crate) struct Key {
    pub dtype: DType,
    /// The offsets' dtype (int32 from the front end; int64 accepted too).
    pub offset: DType,
    pub traditional: bool,
    pub freqs: bool,
}

const BODY: &str = r#"
/* Up to 4 calls of one launch (a layer's q and k), `per_set` blocks each: the heads,
   offsets (n_off of them), input and output of call `set`. Picked by constant indices (a
   dynamic one would copy the parameter struct to local memory). */
struct KRopeSets { int64_t heads[4], n_off[4], x[4], offs[4], y[4]; };
#define K_PICK(f) (set == 0 ? sets.f[0] : set == 1 ? sets.f[1] : set == 2 ? sets.f[2] : sets.f[3])

/* Work item (b, t, j): pair j < half of position t (its angle computed once), or feature
   half + j past dims (copied), for every head of batch element b. */
extern "C" __global__ void kiln_rope(const int64_t batch, const int64_t t_len, const int64_t d,
                                     const int64_t half, const int64_t per_set,
                                     const KRopeSets sets, const float *__restrict__ freqs,
                                     const double base_ln, const double scale,
                                     const double sign) {
    const int64_t set = blockIdx.x / per_set, block = blockIdx.x % per_set;
    const int64_t heads = K_PICK(heads), n_off = K_PICK(n_off);
    const S *__restrict__ x = (const S *)K_PICK(x);
    const OFF *__restrict__ offs = (const OFF *)K_PICK(offs);
    S *__restrict__ y = (S *)K_PICK(y);
    const int64_t work = d - half; /* half pairs, then d - 2 half copied features */
    const int64_t n = batch * t_len * work;
    for (int64_t e = block * (int64_t)blockDim.x + threadIdx.x; e < n;
         e += per_set * blockDim.x) {
        const int64_t j = e % work, bt = e / work, t = bt % t_len, b = bt / t_len;
        const int64_t first = b * heads * t_len + t; /* row of head 0; heads are t_len rows apart */
        if (j < half) {
            const double off = (double)offs[n_off == 1 ? 0 : b];
#if FREQS
            const double inv = 1.0 / (double)freqs[j];
#else
            const double inv = exp(-(double)j * base_ln / (double)half);
#endif
            const double pos = (off + (double)t) * scale;
            double sd, cd;
            sincos(pos * inv, &sd, &cd);
            const float c = (float)cd, s = (float)(sign * sd);
#if TRADITIONAL
            const int64_t i0 = 2 * j, i1 = 2 * j + 1;
#else
            const int64_t i0 = j, i1 = j + half;
#endif
            /* Heads in groups of 4, loads first: 8 loads in flight per thread. */
            for (int64_t h0 = 0; h0 < heads; h0 += 4) {
                float x0[4], x1[4];
                #pragma unroll
                for (int u = 0; u < 4; ++u) {
                    const int64_t at = (first + (h0 + u) * t_len) * d;
                    if (h0 + u < heads) { x0[u] = k_load(x[at + i0]); x1[u] = k_load(x[at + i1]); }
                }
                #pragma unroll
                for (int u = 0; u < 4; ++u) {
                    const int64_t at = (first + (h0 + u) * t_len) * d;
                    if (h0 + u < heads) {
                        y[at + i0] = k_store(x0[u] * c - x1[u] * s);
                        y[at + i1] = k_store(x0[u] * s + x1[u] * c);
                    }
                }
            }
        } else {
            const int64_t k = half + j; /* 2 half + (j - half) */
            for (int64_t h0 = 0; h0 < heads; h0 += 4) {
                S v[4];
                #pragma unroll
                for (int u = 0; u < 4; ++u)
                    if (h0 + u < heads) v[u] = x[(first + (h0 + u) * t_len) * d + k];
                #pragma unroll
                for (int u = 0; u < 4; ++u)
                    if (h0 + u < heads) y[(first + (h0 + u) * t_len) * d + k] = v[u];
            }
        }
    }
}
"#;

pub(crate) fn source(key: &Key) -> String {
    let mut s = header(key.dtype);
    let off = if key.offset == DType::I64 { "int64_t" } else { "int32_t" };
    let _ = writeln!(
        s,
        "typedef {off} OFF;\n#define TRADITIONAL {}\n#define FREQS {}",
        key.traditional as u8, key.freqs as u8
    );
    s.push_str(BODY);
    s
}

static KERNELS: KernelCache<Key> = KernelCache::new();

fn kernel(key: &Key) -> Result<Function> {
    KERNELS.get(key, SYMBOL, || source(key))
}

pub(crate) fn rope(
    x: &ArrayData,
    offset: &ArrayData,
    freqs: Option<&ArrayData>,
    p: &Params,
    shape: &[usize],
) -> Result<ArrayData> {
    check_operands(offset, freqs)?;
    let out = run(&[(x, offset, shape)], freqs, p)?;
    Ok(out.into_iter().next().expect("one call"))
}

/// Calls of one launch at most (`KRopeSets`).
const MAX_SETS: usize = 4;

/// RoPE of each `(x, offset, shape)` of `calls` (up to `MAX_SETS`, with the same batch,
/// positions and features; heads may differ: q and k) in one launch, without `freqs`, or
/// `None` where they differ otherwise.
pub(crate) fn rope_together(
    calls: &[(&ArrayData, &ArrayData, &[usize])],
    p: &Params,
) -> Result<Option<Vec<ArrayData>>> {
    let (x0, off0, shape0) = calls[0];
    let nd = shape0.len();
    let alike = |&(x, off, shape): &(&ArrayData, &ArrayData, &[usize])| {
        x.dtype == x0.dtype
            && off.dtype == off0.dtype
            && shape.len() == nd
            && shape[0] == shape0[0]
            && shape[nd - 2..] == shape0[nd - 2..]
    };
    if calls.len() > MAX_SETS || nd < 2 || !calls.iter().all(alike) {
        return Ok(None);
    }
    for &(_, off, _) in calls {
        check_operands(off, None)?;
    }
    run(calls, None, p).map(Some)
}

fn check_operands(offset: &ArrayData, freqs: Option<&ArrayData>) -> Result<()> {
    if !matches!(offset.dtype, DType::I32 | DType::I64) {
        bail!(Type, "rope", "offset must be int32 or int64 on the GPU, got {}.", offset.dtype);
    }
    if freqs.is_some_and(|f| f.dtype != DType::F32) {
        bail!(Type, "rope", "freqs must be float32.");
    }
    Ok(())
}

/// One launch for `calls` (their batch, positions and features alike; checked operands).
fn run(
    calls: &[(&ArrayData, &ArrayData, &[usize])],
    freqs: Option<&ArrayData>,
    p: &Params,
) -> Result<Vec<ArrayData>> {
    let (x0, off0, shape) = calls[0];
    let outs = calls.iter().map(|&(x, _, s)| empty(s, x.dtype)).collect::<Result<Vec<_>>>()?;
    let nd = shape.len();
    let (t_len, d) = (shape[nd - 2], shape[nd - 1]);
    let batch = shape[0];
    let rows = |x: &ArrayData| x.layout.size().checked_div(d).unwrap_or(0);
    if calls.iter().all(|(x, _, _)| rows(x) == 0) || d == 0 || t_len == 0 {
        return Ok(outs);
    }
    let freqs = freqs.map(dense).transpose()?;
    let key = Key {
        dtype: x0.dtype,
        offset: off0.dtype,
        traditional: p.traditional,
        freqs: freqs.is_some(),
    };
    let mut fields = vec![0i64; 5 * MAX_SETS];
    let mut keep = Vec::with_capacity(calls.len());
    for (i, (&(x, off, _), out)) in calls.iter().zip(&outs).enumerate() {
        let (x, offs) = (dense(x)?, dense(off)?);
        // The axes between the batch and T: "heads", each a block of T rows.
        fields[i] = (rows(&x) / (batch * t_len)) as i64;
        fields[MAX_SETS + i] = offs.layout.size() as i64;
        fields[2 * MAX_SETS + i] = ptr(&x) as i64;
        fields[3 * MAX_SETS + i] = ptr(&offs) as i64;
        fields[4 * MAX_SETS + i] = out.buffer.as_ptr() as i64;
        keep.push((x, offs)); // (dense copies live until the launch is issued)
    }
    let half = p.dims / 2;
    let work = (d - half) as u64;
    let mut args = Args::new();
    let per_set = blocks_for((batch * t_len) as u64 * work, BLOCK as u64);
    args.i64(batch as i64).i64(t_len as i64).i64(d as i64).i64(half as i64);
    args.i64(per_set as i64).i64_struct(&fields).ptr(freqs.as_ref().map_or(0, ptr));
    let sign: f64 = if p.inverse { -1.0 } else { 1.0 };
    args.i64(p.base.ln().to_bits() as i64).i64(p.scale.to_bits() as i64).i64(sign.to_bits() as i64);
    let blocks = check_grid(SYMBOL, per_set as u64 * calls.len() as u64)?;
    launch(SYMBOL, kernel(&key)?, blocks, BLOCK, 0, &mut args)?;
    drop(keep);
    Ok(outs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn source_picks_the_variant() {
        let key = Key { dtype: DType::F16, offset: DType::I32, traditional: true, freqs: false };
        let s = source(&key);
        assert!(s.contains("typedef int32_t OFF;\n#define TRADITIONAL 1\n#define FREQS 0"));
        assert!(s.contains("k_f16_to_f32(x)"));
    }
}
