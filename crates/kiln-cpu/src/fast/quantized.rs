//! `x @ dequantize(w).T` for MLX's affine quantization, reading the packed weights once:
//! for each output feature, each group of its packed integers is unpacked and dequantized
//! (`scale * q + bias`) into a small buffer and dotted with the matching slice of every row
//! of x. No dense copy of the weights is made, so a decode
//! step (a few rows of x) moves `bits / 32` of the bytes a dense float32 product would.
//! Output features are split over threads.

use super::{dense_as, elements};
use crate::walk::PARALLEL_ELEMENTS;
use kiln_base::{ArrayData, DType, Layout, Result, HOST};
use rayon::prelude::*;

/// The largest group size MLX's affine mode has.
const MAX_GROUP: usize = 128;

/// Output features per task: enough packed bytes to pay for a task.
const FEATURES_PER_TASK: usize = 16;

pub(crate) fn quantized_matmul(
    inputs: &[ArrayData],
    group_size: usize,
    bits: u32,
    shape: &[usize],
) -> Result<ArrayData> {
    let [x, w, scales, biases] = [0, 1, 2, 3].map(|i| dense_as(&inputs[i], inputs[i].dtype));
    let (x, w) = (dense_as(&x?, DType::F32)?, w?);
    let (scales, biases) = (dense_as(&scales?, DType::F32)?, dense_as(&biases?, DType::F32)?);
    let k = *x.layout.shape.last().expect("checked: x has an axis");
    let n = w.layout.shape[0];
    let packed = Packed {
        words: elements::<u32>(&w),
        scales: elements::<f32>(&scales),
        biases: elements::<f32>(&biases),
        n,
        k,
        group_size,
        bits,
    };
    let rows = shape.iter().product::<usize>() / n.max(1);
    let mut out = vec![0f32; rows * n];
    product(elements::<f32>(&x), rows, &packed, &mut out);
    let buffer = HOST.from_slice(&out)?;
    Ok(ArrayData { buffer, layout: Layout::contiguous(shape), dtype: DType::F32 })
}

/// One packed matrix of `n` features by `k` inputs with its per-group parameters (row-major,
/// MLX's affine layout).
pub(super) struct Packed<'a> {
    pub words: &'a [u32],
    pub scales: &'a [f32],
    pub biases: &'a [f32],
    pub n: usize,
    pub k: usize,
    pub group_size: usize,
    pub bits: u32,
}

/// `xs @ dequantize(p).T` for `rows` rows of `p.k` inputs, into row-major `out` (rows x n).
pub(super) fn product(xs: &[f32], rows: usize, p: &Packed, out: &mut [f32]) {
    let (k, n, group_size) = (p.k, p.n, p.group_size);
    // Computed feature-major (each task owns whole features `first..`, vectorised for this
    // CPU), then stored row-major.
    let task = |first: usize, chunk: &mut [f32]| {
        crate::simd::run(
            #[inline(always)]
            || {
                let mut unpacked = [0f32; MAX_GROUP];
                for (i, column) in chunk.chunks_mut(rows.max(1)).enumerate() {
                    if kiln_base::interrupt::requested() {
                        return; // eval discards the output
                    }
                    for_each_group(p, first + i, &mut unpacked, |g, q| {
                        for (r, acc) in column.iter_mut().enumerate() {
                            *acc += dot(&xs[r * k + g * group_size..][..group_size], q);
                        }
                    });
                }
            },
        )
    };
    let mut by_feature = vec![0f32; rows * n];
    if rows * n * k < 2 * PARALLEL_ELEMENTS {
        task(0, &mut by_feature);
    } else {
        by_feature
            .par_chunks_mut(rows.max(1) * FEATURES_PER_TASK)
            .enumerate()
            .for_each(|(t, chunk)| task(t * FEATURES_PER_TASK, chunk));
    }
    for f in 0..n {
        for r in 0..rows {
            out[r * n + f] = by_feature[f * rows + r];
        }
    }
}

/// Feature `f` of `p`, one group at a time: `each(g, weights)` gets group `g`'s weights
/// (`scale * q + bias`: the weights themselves, not `scale * (x . q) + bias * sum(x)`, so an
/// inf in x meets each weight as the definition has it).
#[inline(always)]
fn for_each_group(
    p: &Packed,
    f: usize,
    unpacked: &mut [f32; MAX_GROUP],
    mut each: impl FnMut(usize, &[f32]),
) {
    let groups = p.k / p.group_size;
    let words_per_row = p.k * p.bits as usize / 32;
    let words = &p.words[f * words_per_row..(f + 1) * words_per_row];
    let q = &mut unpacked[..p.group_size];
    let params = p.scales[f * groups..].iter().zip(&p.biases[f * groups..]).take(groups);
    for (g, (&scale, &bias)) in params.enumerate() {
        unpack(words, g * p.group_size, p.bits, q);
        for v in q.iter_mut() {
            *v = scale * *v + bias;
        }
        each(g, q);
    }
}

/// The dense `(n, k)` weights of `p`, row-major (a many-row product multiplies these).
pub(super) fn dequantize(p: &Packed, out: &mut [f32]) {
    crate::simd::run(
        #[inline(always)]
        || {
            let mut unpacked = [0f32; MAX_GROUP];
            for (f, row) in out.chunks_exact_mut(p.k).enumerate().take(p.n) {
                for_each_group(p, f, &mut unpacked, |g, q| {
                    row[g * p.group_size..][..p.group_size].copy_from_slice(q);
                });
            }
        },
    )
}

/// Integers `start .. start + out.len()` of a row's little-endian bit stream of `bits`-bit
/// values, as floats (`start` and the length are multiples of 32).
#[inline(always)]
fn unpack(words: &[u32], start: usize, bits: u32, out: &mut [f32]) {
    match bits {
        1 => whole_words::<32>(words, start, 1, out),
        2 => whole_words::<16>(words, start, 2, out),
        4 => whole_words::<8>(words, start, 4, out),
        8 => whole_words::<4>(words, start, 8, out),
        _ => straddling(words, start, bits, out),
    }
}

/// Widths that divide 32: each word holds `PER` whole values (a fixed-size inner loop of
/// shifts the compiler turns into vector shifts).
#[inline(always)]
fn whole_words<const PER: usize>(words: &[u32], start: usize, bits: u32, out: &mut [f32]) {
    let mask = (1u32 << bits) - 1;
    for (chunk, &word) in out.chunks_exact_mut(PER).zip(&words[start / PER..]) {
        for (j, o) in chunk.iter_mut().enumerate() {
            *o = ((word >> (j as u32 * bits)) & mask) as i32 as f32;
        }
    }
}

/// 3, 5, 6 and 7 bits: values may straddle two words.
#[inline(always)]
fn straddling(words: &[u32], start: usize, bits: u32, out: &mut [f32]) {
    let mask = (1u64 << bits) - 1;
    for (i, o) in out.iter_mut().enumerate() {
        let bit = (start + i) * bits as usize;
        let (word, shift) = (bit / 32, bit % 32);
        let lo = words[word] as u64;
        let hi = words.get(word + 1).copied().unwrap_or(0) as u64;
        *o = (((hi << 32 | lo) >> shift) & mask) as u32 as i32 as f32;
    }
}

/// `a . b` with eight partial sums, so the loop vectorises.
#[inline(always)]
fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0f32; 8];
    let (ca, cb) = (a.chunks_exact(8), b.chunks_exact(8));
    let tail: f32 = ca.remainder().iter().zip(cb.remainder()).map(|(x, y)| x * y).sum();
    for (x, y) in ca.zip(cb) {
        for l in 0..8 {
            acc[l] += x[l] * y[l];
        }
    }
    acc.iter().sum::<f32>() + tail
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unpacks_every_width() {
        for bits in 1..=8u32 {
            let values: Vec<u64> = (0..64u64).map(|i| (i * 7 + 3) % (1 << bits)).collect();
            let mut words = vec![0u32; 64 * bits as usize / 32 + 1];
            for (i, v) in values.iter().enumerate() {
                let bit = i * bits as usize;
                let both = (v << (bit % 32)) as u128;
                words[bit / 32] |= both as u32;
                if bit % 32 + bits as usize > 32 {
                    words[bit / 32 + 1] |= (both >> 32) as u32;
                }
            }
            for start in [0, 32] {
                let mut out = [0f32; 32];
                unpack(&words, start, bits, &mut out);
                let want: Vec<f32> = values[start..start + 32].iter().map(|&v| v as f32).collect();
                assert_eq!(out.to_vec(), want, "bits {bits} start {start}");
            }
        }
    }
}
