//! Rotary positional encoding over the last axis of `(B, ..., T, D)`, as kiln-cpu's kernel:
//! the angle of pair `i` at position `offset[b] + t` is `(offset + t) * scale * inv_freq[i]`
//! with the inverse frequency `1 / freqs[i]` or `base^(-i / (dims / 2))`, all in float64,
//! its cosine and sine rounded to float32 (the sine negated for `inverse`); the rotation
//! itself is float32. A block takes one position of a few heads: its pairs' angles are
//! computed once into shared memory while each thread's load is in flight, then each
//! thread rotates one pair of one head (or copies one feature past `dims`). A decode step
//! (one position) so spreads over several blocks and waits on one load a thread; the
//! earlier form (a thread a pair walking every head, four at a time) waited on 8 loads in
//! turn for 32 heads: 28 us a call for llama 8B's q on an H100 (ncu), 10 for its k.

use super::{dense, header, ptr};
use crate::copy::empty;
use crate::launch::{launch, Args};
use crate::nvrtc::{check_grid, Function, KernelCache};
use kiln_base::{bail, ArrayData, DType, Result};
use std::fmt::Write;

const SYMBOL: &str = "kiln_rope";
/// Threads a block (`NT` in the kernel).
const THREADS: u32 = 128;

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
#define NT 128
#define CH 256 /* work items of a head whose angles a block holds at once */
#if TRADITIONAL
#define I0(j) (2 * (j))
#define I1(j) (2 * (j) + 1)
#else
#define I0(j) (j)
#define I1(j) ((j) + half)
#endif

/* A block takes position (b, t) of `hpb` heads from h0: work item j < half of a head
   rotates pair j, one past it copies feature half + j (past dims). The pairs' angles are
   computed once a block into shared memory (in chunks of CH items) while the threads'
   first loads are in flight; then each thread rotates items tid, tid + NT, ... */
extern "C" __global__ void __launch_bounds__(NT) kiln_rope(const int64_t batch,
        const int64_t t_len, const int64_t d, const int64_t half, const int64_t per_set,
        const int64_t chunks, const int64_t hpb, const KRopeSets sets,
        const float *__restrict__ freqs, const double base_ln, const double scale,
        const double sign) {
    __shared__ float s_c[CH], s_s[CH];
    const int64_t set = blockIdx.x / per_set, block = blockIdx.x % per_set;
    const int64_t heads = K_PICK(heads), n_off = K_PICK(n_off);
    const S *__restrict__ x = (const S *)K_PICK(x);
    const OFF *__restrict__ offs = (const OFF *)K_PICK(offs);
    S *__restrict__ y = (S *)K_PICK(y);
    const int64_t bt = block / chunks, h0 = (block % chunks) * hpb;
    if (h0 >= heads) return; /* (a call with fewer heads than the launch's most) */
    const int64_t t = bt % t_len, b = bt / t_len;
    const int64_t nh = min(hpb, heads - h0), work = d - half;
    const double pos = ((double)offs[n_off == 1 ? 0 : b] + (double)t) * scale;
    for (int64_t j0 = 0; j0 < work; j0 += CH) {
        const int64_t jn = min((int64_t)CH, work - j0), items = nh * jn;
        int64_t e = threadIdx.x, at = 0, jj = 0;
        int j = 0;
        float a0 = 0.0f, a1 = 0.0f;
        S cv = 0;
        auto fetch = [&]() {
            if (e >= items) return;
            j = (int)(e % jn);
            jj = j0 + j;
            at = ((b * heads + h0 + e / jn) * t_len + t) * d;
            if (jj < half) { a0 = k_load(x[at + I0(jj)]); a1 = k_load(x[at + I1(jj)]); }
            else cv = x[at + half + jj];
        };
        fetch();
        for (int i = threadIdx.x; i < jn; i += NT) {
            const int64_t p = j0 + i;
            if (p < half) {
#if FREQS
                const double inv = 1.0 / (double)freqs[p];
#else
                const double inv = exp(-(double)p * base_ln / (double)half);
#endif
                double sd, cd;
                sincos(pos * inv, &sd, &cd);
                s_c[i] = (float)cd;
                s_s[i] = (float)(sign * sd);
            }
        }
        __syncthreads();
        while (e < items) {
            if (jj < half) {
                const float c = s_c[j], s = s_s[j];
                y[at + I0(jj)] = k_store(a0 * c - a1 * s);
                y[at + I1(jj)] = k_store(a0 * s + a1 * c);
            } else {
                y[at + half + jj] = cv;
            }
            e += NT;
            fetch();
        }
        __syncthreads(); /* (the angles are read before the next chunk's overwrite them) */
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
/// positions and features; heads may differ: q and k) in one launch, all with the same
/// `freqs` or none, or `None` where they differ otherwise.
pub(crate) fn rope_together(
    calls: &[(&ArrayData, &ArrayData, &[usize])],
    freqs: Option<&ArrayData>,
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
        check_operands(off, freqs)?;
    }
    run(calls, freqs, p).map(Some)
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
    let work = d - half;
    // Heads a block: about one work item a thread, so a decode step's few positions still
    // spread over several blocks and each thread waits on one load.
    let most_heads = fields[..calls.len()].iter().copied().max().unwrap_or(1).max(1) as usize;
    let hpb = (THREADS as usize / work.max(1)).clamp(1, most_heads);
    let chunks = most_heads.div_ceil(hpb);
    let per_set = (batch * t_len) as u64 * chunks as u64;
    let mut args = Args::new();
    args.i64(batch as i64).i64(t_len as i64).i64(d as i64).i64(half as i64);
    args.i64(per_set as i64).i64(chunks as i64).i64(hpb as i64);
    args.i64_struct(&fields).ptr(freqs.as_ref().map_or(0, ptr));
    let sign: f64 = if p.inverse { -1.0 } else { 1.0 };
    args.i64(p.base.ln().to_bits() as i64).i64(p.scale.to_bits() as i64).i64(sign.to_bits() as i64);
    let blocks = check_grid(SYMBOL, per_set * calls.len() as u64)?;
    launch(SYMBOL, kernel(&key)?, blocks, THREADS, 0, &mut args)?;
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
