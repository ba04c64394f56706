//! `x @ dequantize(w).T` for MLX's affine quantization, reading the packed weights once.
//! No dense copy of the weights is made, so a decode step (a few rows of x) moves `bits / 32`
//! of the bytes a dense float32 product would. Output features are split over threads.
//!
//! Groups of whole units (32 values; every MLX group size) take the planar kernel: a unit is
//! `4 * bits` bytes, and unpacking it one shift a plane (over its bytes for widths dividing
//! 8, over its four atoms of 8 values in `bits` bytes for 3, 5, 6 and 7 bits) gives its
//! values plane by plane (every byte's or atom's first value, then every second...). x is
//! permuted once per call into the same order, so the unpacked planes meet x in plain vector
//! loops (integer to float, `scale * q + bias`, multiply-add) with no shuffles. Other groups
//! unpack a group into a buffer, dequantize it and dot it.
//!
//! Either way each weight is `scale * q + bias` as dequantize rounds it, then multiplied with
//! x (not `scale * (x . q) + bias * sum(x)`, so an inf in x meets each weight as the
//! definition has it).

use super::{dense_as, elements};
use crate::simd::pairwise;
use crate::walk::PARALLEL_ELEMENTS;
use half::{bf16, f16};
use kiln_base::{ArrayData, DType, Layout, Result, HOST};
use rayon::prelude::*;

/// The largest group size MLX's affine mode has.
const MAX_GROUP: usize = 128;

/// Output features per task: enough packed bytes to pay for a task.
const FEATURES_PER_TASK: usize = 16;

/// Values per unit of the planar kernel (every group size is a multiple).
pub(super) const UNIT: usize = 32;

/// Rows of x the planar kernel takes per pass over a feature's weights: 4 where the
/// registers hold four rows' accumulators beside a unit's weights (AVX-512's 32 vector
/// registers), else 2 (16 AVX2 registers, or NEON's 32 of a quarter the width). More rows a
/// pass unpack each weight for more rows; the rows' sums are the same either way (one chain
/// per row), so the block size changes no bits.
fn row_block() -> usize {
    if crate::simd::level() == crate::simd::Level::Avx512 {
        4
    } else {
        2
    }
}

pub(crate) fn quantized_matmul(
    inputs: &[ArrayData],
    group_size: usize,
    bits: u32,
    shape: &[usize],
) -> Result<ArrayData> {
    let [x, w, scales, biases] = [0, 1, 2, 3].map(|i| dense_as(&inputs[i], inputs[i].dtype));
    let (x, w) = (dense_as(&x?, DType::F32)?, w?);
    let (scales, biases) = (scales?, biases?);
    let k = *x.layout.shape.last().expect("checked: x has an axis");
    let n = w.layout.shape[0];
    let packed = Packed {
        words: elements::<u32>(&w),
        scales: Params::of(&scales)?,
        biases: Params::of(&biases)?,
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

/// Scales or biases as stored (read one per group, so half floats are widened as they are
/// used rather than copied whole each call).
#[derive(Clone, Copy)]
pub(super) enum Params<'a> {
    F32(&'a [f32]),
    Bf16(&'a [bf16]),
    F16(&'a [f16]),
}

impl<'a> Params<'a> {
    /// The elements of row-major `p` (float32 or a half float, as the op promoted them).
    fn of(p: &'a ArrayData) -> Result<Self> {
        Ok(match p.dtype {
            DType::F32 => Params::F32(elements(p)),
            DType::BF16 => Params::Bf16(elements(p)),
            DType::F16 => Params::F16(elements(p)),
            other => kiln_base::bail!(
                Runtime,
                "quantized_matmul",
                "Scales and biases of dtype {other} reached the CPU kernel."
            ),
        })
    }

    /// Elements `start..start + out.len()` as float32.
    #[inline(always)]
    fn widen(&self, start: usize, out: &mut [f32]) {
        let end = start + out.len();
        match self {
            Params::F32(p) => out.copy_from_slice(&p[start..end]),
            Params::Bf16(p) => {
                out.iter_mut().zip(&p[start..end]).for_each(|(o, v)| *o = v.to_f32())
            }
            Params::F16(p) => out.iter_mut().zip(&p[start..end]).for_each(|(o, v)| *o = v.to_f32()),
        }
    }

    #[inline(always)]
    fn at(&self, i: usize) -> f32 {
        match self {
            Params::F32(p) => p[i],
            Params::Bf16(p) => p[i].to_f32(),
            Params::F16(p) => p[i].to_f32(),
        }
    }
}

/// One packed matrix of `n` features by `k` inputs with its per-group parameters (row-major,
/// MLX's affine layout).
pub(super) struct Packed<'a> {
    pub words: &'a [u32],
    pub scales: Params<'a>,
    pub biases: Params<'a>,
    pub n: usize,
    pub k: usize,
    pub group_size: usize,
    pub bits: u32,
}

/// Rows up to which a product dots the packed rows directly; more are bound by the
/// arithmetic, and multiply dequantized panels of the weights densely (`dense_product`).
pub(super) const PACKED_ROWS: usize = 16;

/// float32 weights a panel of `dense_product` holds at most (4 MB): x is read once a panel.
const PANEL_VALUES: usize = 1 << 20;
/// Fewest features a panel of `dense_product` takes.
const PANEL_FEATURES: usize = 128;

/// `xs @ dequantize(p).T` for `rows` rows of `p.k` inputs, into row-major `out` (rows x n).
pub(super) fn product(xs: &[f32], rows: usize, p: &Packed, out: &mut [f32]) {
    if rows > PACKED_ROWS {
        return dense_product(xs, rows, p, out);
    }
    #[cfg(target_arch = "x86_64")]
    let table = super::quantized_avx512::available();
    #[cfg(not(target_arch = "x86_64"))]
    let table = false;
    product_with(xs, rows, p, out, table)
}

/// `product`, with 4-bit units looked up by table (AVX-512 only) or not.
fn product_with(xs: &[f32], rows: usize, p: &Packed, out: &mut [f32], table: bool) {
    let (k, n, group_size) = (p.k, p.n, p.group_size);
    let groups = k / group_size.max(1);
    let planar = group_size.is_multiple_of(UNIT) && (group_size / UNIT).is_power_of_two();
    // x in the planes' order for the planar kernel.
    let xp = if planar { permute(xs, rows, k, values_a_step(p.bits)) } else { Vec::new() };
    // Computed feature-major (each task owns whole features `first..`, vectorised for this
    // CPU), then stored row-major.
    let task = |first: usize, chunk: &mut [f32]| {
        crate::simd::run(
            #[inline(always)]
            || {
                let mut unpacked = [0f32; MAX_GROUP];
                // The feature's scales, then its biases, as float32 (planar kernel).
                let mut params = vec![0f32; if planar { 2 * groups } else { 0 }];
                for (i, column) in chunk.chunks_mut(rows.max(1)).enumerate() {
                    if kiln_base::interrupt::requested() {
                        return; // eval discards the output
                    }
                    let f = first + i;
                    if planar {
                        let (scales, biases) = params.split_at_mut(groups);
                        p.scales.widen(f * groups, scales);
                        p.biases.widen(f * groups, biases);
                        planar_feature(p, f, (&xp, table), scales, biases, column);
                        continue;
                    }
                    for_each_group(p, f, &mut unpacked, |g, q| {
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

/// Values one unpacking step yields: a byte's (widths dividing 8) or an atom's (8 values in
/// `bits` bytes, the other widths).
fn values_a_step(bits: u32) -> usize {
    if 8 % bits == 0 {
        8 / bits as usize
    } else {
        8
    }
}

/// `rows` rows of `k` values with each unit's values reordered plane by plane: unit value
/// `per * b + j` (value `j` of step `b`, a byte or an atom) moves to `j * (UNIT / per) + b`.
fn permute(xs: &[f32], rows: usize, k: usize, per: usize) -> Vec<f32> {
    let mut xp = vec![0f32; rows * k];
    let bytes = UNIT / per;
    for (dst, src) in xp.chunks_exact_mut(UNIT).zip(xs[..rows * k].chunks_exact(UNIT)) {
        for (b, values) in src.chunks_exact(per).enumerate() {
            for (j, &v) in values.iter().enumerate() {
                dst[j * bytes + b] = v;
            }
        }
    }
    xp
}

/// Feature `f`'s products with every row of x (permuted), into `column` (one per row): the
/// rows a block at a time, each block one pass over the feature's bytes.
#[inline(always)]
fn planar_feature(
    p: &Packed,
    f: usize,
    (xp, table): (&[f32], bool),
    scales: &[f32],
    biases: &[f32],
    column: &mut [f32],
) {
    let row_bytes = p.k * p.bits as usize / 8;
    let words = &p.words[f * row_bytes / 4..][..row_bytes / 4];
    let bytes: &[u8] = bytemuck::cast_slice(words);
    let block = row_block();
    let mut r0 = 0;
    while r0 < column.len() {
        let x = &xp[r0 * p.k..];
        let out = &mut column[r0..];
        let params = (scales, biases);
        let rows = match out.len() {
            n if n >= 4 && block >= 4 => 4,
            n if n >= 2 => 2,
            _ => 1,
        };
        let shape = (p.k, p.group_size, table);
        macro_rules! rows {
            ($bits:literal) => {
                match rows {
                    4 => planar_rows::<$bits, 4>(shape, params, bytes, x, out),
                    2 => planar_rows::<$bits, 2>(shape, params, bytes, x, out),
                    _ => planar_rows::<$bits, 1>(shape, params, bytes, x, out),
                }
            };
        }
        match p.bits {
            1 => rows!(1),
            2 => rows!(2),
            3 => rows!(3),
            4 => rows!(4),
            5 => rows!(5),
            6 => rows!(6),
            7 => rows!(7),
            _ => rows!(8),
        }
        r0 += rows;
    }
}

/// One unit's weights (`4 * BITS` bytes), plane by plane, as dequantize rounds them: one
/// shift a plane over the bytes (widths dividing 8) or over the unit's four atoms of 8 values
/// in `BITS` bytes each (the others).
#[inline(always)]
fn unit_weights<const BITS: usize>(bytes: &[u8], scale: f32, bias: f32) -> [f32; UNIT] {
    let mut w = [0f32; UNIT];
    if 8 % BITS == 0 {
        let (per, mask) = (8 / BITS, ((1u32 << BITS) - 1) as u8);
        let per_plane = UNIT / per;
        for j in 0..per {
            for (o, &b) in w[j * per_plane..][..per_plane].iter_mut().zip(&bytes[..per_plane]) {
                *o = scale * ((b >> (BITS * j)) & mask) as f32 + bias;
            }
        }
    } else {
        let mask = (1u64 << BITS) - 1;
        let atoms: [u64; 4] = std::array::from_fn(|a| {
            let mut b = [0u8; 8];
            b[..BITS].copy_from_slice(&bytes[a * BITS..][..BITS]);
            u64::from_le_bytes(b)
        });
        for j in 0..8 {
            for (o, atom) in w[j * 4..][..4].iter_mut().zip(atoms) {
                *o = scale * ((atom >> (BITS * j)) & mask) as u32 as f32 + bias;
            }
        }
    }
    w
}

/// `acc[r] += w * x[r]` lane by lane over a unit, for `R` rows `k` apart from `at`.
#[inline(always)]
fn unit_accumulate<const R: usize>(
    w: &[f32; UNIT],
    x: &[f32],
    k: usize,
    at: usize,
    acc: &mut [[f32; UNIT]; R],
) {
    for (r, a) in acc.iter_mut().enumerate() {
        let xr = &x[r * k + at..][..UNIT];
        for l in 0..UNIT {
            a[l] = w[l].mul_add(xr[l], a[l]);
        }
    }
}

/// `R` rows (at most the rows left) of a feature through the planar kernel, each row's
/// lanes summed at the end in a fixed order. One row takes the units two at a time into two
/// accumulators (independent multiply-add chains); more rows are chains enough.
#[inline(always)]
fn planar_rows<const BITS: usize, const R: usize>(
    (k, group_size, table): (usize, usize, bool),
    (scales, biases): (&[f32], &[f32]),
    bytes: &[u8],
    x: &[f32],
    out: &mut [f32],
) {
    #[cfg(target_arch = "x86_64")]
    if BITS == 4 && table {
        let mut lanes = [[0f32; UNIT]; R];
        let (shape, params) = ((k, group_size), (scales, biases));
        // SAFETY: `table` is set only where `quantized_avx512::available` found AVX-512.
        unsafe { super::quantized_avx512::rows::<R>(shape, params, bytes, x, &mut lanes) };
        for (o, l) in out.iter_mut().zip(&lanes) {
            *o = pairwise(l);
        }
        return;
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = table;
    // Units a group: a power of two (checked), so a unit's group is a shift away.
    let shift = (group_size / UNIT).trailing_zeros();
    let units = k / UNIT;
    // A function (always inlined, as everything under `simd::run` must be to compile at its
    // level) rather than a closure, which may not be.
    #[inline(always)]
    fn weights<const BITS: usize>(
        u: usize,
        shift: u32,
        bytes: &[u8],
        (scales, biases): (&[f32], &[f32]),
    ) -> [f32; UNIT] {
        let (g, unit_bytes) = (u >> shift, UNIT * BITS / 8);
        unit_weights::<BITS>(&bytes[u * unit_bytes..][..unit_bytes], scales[g], biases[g])
    }
    let params = (scales, biases);
    let mut acc = [[0f32; UNIT]; R];
    let mut u = 0;
    if R == 1 {
        let mut other = [[0f32; UNIT]; 1];
        while u + 1 < units {
            unit_accumulate::<R>(
                &weights::<BITS>(u, shift, bytes, params),
                x,
                k,
                u * UNIT,
                &mut acc,
            );
            unit_accumulate::<1>(
                &weights::<BITS>(u + 1, shift, bytes, params),
                x,
                k,
                (u + 1) * UNIT,
                &mut other,
            );
            u += 2;
        }
        for (a, o) in acc[0].iter_mut().zip(&other[0]) {
            *a += o;
        }
    }
    while u < units {
        unit_accumulate::<R>(&weights::<BITS>(u, shift, bytes, params), x, k, u * UNIT, &mut acc);
        u += 1;
    }
    for (o, lanes) in out.iter_mut().zip(&acc) {
        *o = pairwise(lanes);
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
    for g in 0..groups {
        let (scale, bias) = (p.scales.at(f * groups + g), p.biases.at(f * groups + g));
        unpack(words, g * p.group_size, p.bits, q);
        for v in q.iter_mut() {
            *v = scale * *v + bias;
        }
        each(g, q);
    }
}

/// The dense `(n, k)` weights of `p`, row-major (a many-row product multiplies these).
pub(super) fn dequantize(p: &Packed, out: &mut [f32]) {
    dequantize_features(p, 0, out)
}

/// The dense weights of features `first..` (as many as `out` has rows of `p.k`).
fn dequantize_features(p: &Packed, first: usize, out: &mut [f32]) {
    crate::simd::run(
        #[inline(always)]
        || {
            let mut unpacked = [0f32; MAX_GROUP];
            for (f, row) in out.chunks_exact_mut(p.k.max(1)).enumerate().take(p.n - first) {
                for_each_group(p, first + f, &mut unpacked, |g, q| {
                    row[g * p.group_size..][..p.group_size].copy_from_slice(q);
                });
            }
        },
    )
}

/// `product` for many rows: panels of features dequantized to float32 (the weights the
/// packed kernel uses) and multiplied by faer, a panel a task. The dense weights never exist
/// whole, and no elementwise pass runs over them (the composition `dequantize` then `matmul`
/// made four, 54 ms for an 8192 x 2048 matrix where the product of 64 rows takes 17).
fn dense_product(xs: &[f32], rows: usize, p: &Packed, out: &mut [f32]) {
    use crate::matmul::Gemm;
    use faer::{MatMut, MatRef, Par};
    let (n, k) = (p.n, p.k);
    if n == 0 {
        return;
    }
    let panel = (PANEL_VALUES / k.max(1)).max(PANEL_FEATURES).min(n);
    let x = MatRef::from_row_major_slice(&xs[..rows * k], rows, k);
    let panels: Vec<Vec<f32>> = (0..n.div_ceil(panel))
        .into_par_iter()
        .map(|b| {
            let (first, features) = (b * panel, panel.min(n - b * panel));
            let mut res = vec![0f32; rows * features];
            if kiln_base::interrupt::requested() {
                return res; // eval discards the output
            }
            let mut dense = vec![0f32; features * k];
            dequantize_features(p, first, &mut dense);
            let w = MatRef::from_row_major_slice(&dense, features, k).transpose();
            let dst = MatMut::from_row_major_slice_mut(&mut res, rows, features);
            f32::gemm(dst, x, w, Par::Seq);
            res
        })
        .collect();
    for (b, res) in panels.iter().enumerate() {
        let first = b * panel;
        let features = panel.min(n - first);
        for (r, row) in res.chunks_exact(features).enumerate() {
            out[r * n + first..r * n + first + features].copy_from_slice(row);
        }
    }
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

    /// Random packed weights of `n` features by `k` (every bit pattern), bf16 parameters.
    fn packed_case(
        n: usize,
        k: usize,
        group: usize,
        bits: u32,
    ) -> (Vec<u32>, Vec<bf16>, Vec<bf16>) {
        let mut state = 0x9E37_79B9u32;
        let mut next = || {
            state ^= state << 13;
            state ^= state >> 17;
            state ^= state << 5;
            state
        };
        let words = (0..n * k * bits as usize / 32).map(|_| next()).collect();
        let mut param = |lo: f32| {
            (0..n * k / group)
                .map(|_| bf16::from_f32(lo + (next() % 1000) as f32 * 1e-4))
                .collect::<Vec<_>>()
        };
        let scales = param(0.005);
        (words, scales, param(-0.05))
    }

    /// The weights of `packed_case` as the kernels take them.
    fn bf16_packed<'a>(
        (words, scales, biases): (&'a [u32], &'a [bf16], &'a [bf16]),
        n: usize,
        k: usize,
        group_size: usize,
        bits: u32,
    ) -> Packed<'a> {
        let (scales, biases) = (Params::Bf16(scales), Params::Bf16(biases));
        Packed { words, scales, biases, n, k, group_size, bits }
    }

    #[test]
    fn planar_kernel_matches_the_definition() {
        // Odd unit counts (k = 96, 160), every row-block remainder, each width the planar
        // kernel takes, and infs and NaNs in x at positions of every plane.
        for bits in 1..=8u32 {
            for (k, group) in [(96, 32), (160, 32), (256, 64), (384, 128)] {
                for rows in 1..=5 {
                    let n = 7;
                    let (words, scales, biases) = packed_case(n, k, group, bits);
                    let p = bf16_packed((&words, &scales, &biases), n, k, group, bits);
                    let mut xs: Vec<f32> =
                        (0..rows * k).map(|i| ((i * 37 % 101) as f32 - 50.0) * 0.01).collect();
                    if rows > 2 {
                        xs[k + 1] = f32::INFINITY;
                        xs[2 * k + 6] = f32::NAN;
                    }
                    let mut out = vec![0f32; rows * n];
                    product(&xs, rows, &p, &mut out);
                    let mut dense = vec![0f32; n * k];
                    dequantize(&p, &mut dense);
                    for r in 0..rows {
                        for f in 0..n {
                            let want: f64 = (0..k)
                                .map(|i| xs[r * k + i] as f64 * dense[f * k + i] as f64)
                                .sum();
                            let got = out[r * n + f] as f64;
                            let case = format!("bits {bits} k {k} rows {rows} at ({r}, {f})");
                            if want.is_nan() {
                                assert!(got.is_nan(), "{case}: {got} for NaN");
                            } else if want.is_infinite() {
                                assert_eq!(got, want, "{case}");
                            } else {
                                assert!(
                                    (got - want).abs() <= 1e-4 * (1.0 + want.abs()),
                                    "{case}: {got} vs {want}"
                                );
                            }
                        }
                    }
                }
            }
        }
    }

    /// Many rows take dequantized panels through faer: the packed kernel's weights, so the
    /// same products within float32 summation error, across panel boundaries (300 features
    /// of k 4096 are two panels), with an inf and a NaN in x.
    #[test]
    fn dense_panels_match_the_packed_kernel() {
        let (n, k, group, bits, rows) = (300, 4096, 64, 4, PACKED_ROWS + 4);
        assert!(PANEL_VALUES / k < n, "the case spans panels");
        let (words, scales, biases) = packed_case(n, k, group, bits);
        let p = bf16_packed((&words, &scales, &biases), n, k, group, bits);
        let mut xs: Vec<f32> =
            (0..rows * k).map(|i| ((i * 29 % 83) as f32 - 41.0) * 0.02).collect();
        xs[3 * k + 5] = f32::INFINITY;
        xs[7 * k + 9] = f32::NAN;
        let mut dense = vec![0f32; rows * n];
        product(&xs, rows, &p, &mut dense);
        let mut packed = vec![0f32; rows * n];
        for (x, out) in xs.chunks(4 * k).zip(packed.chunks_mut(4 * n)) {
            product(x, x.len() / k, &p, out);
        }
        for (i, (&d, &q)) in dense.iter().zip(&packed).enumerate() {
            let at = format!("({}, {})", i / n, i % n);
            if q.is_nan() || q.is_infinite() {
                assert_eq!(d.to_bits() & 0x7fc0_0000, q.to_bits() & 0x7fc0_0000, "{at}: {d} {q}");
            } else {
                assert!((d - q).abs() <= 1e-4 * (1.0 + q.abs()), "{at}: {d} against {q}");
            }
        }
    }

    /// A row's bits do not depend on how many rows share its pass (4 or 2 a pass), with the
    /// table kernel (where this CPU has it) and without.
    #[test]
    fn row_blocks_give_the_same_bits() {
        let (n, k, group) = (7, 256, 64);
        for bits in [2, 3, 4, 8] {
            let (words, scales, biases) = packed_case(n, k, group, bits);
            let p = bf16_packed((&words, &scales, &biases), n, k, group, bits);
            let xs: Vec<f32> = (0..4 * k).map(|i| ((i * 31 % 89) as f32 - 44.0) * 0.021).collect();
            #[cfg(target_arch = "x86_64")]
            let has_table = bits == 4 && crate::fast::quantized_avx512::available();
            #[cfg(not(target_arch = "x86_64"))]
            let has_table = false;
            for table in [false, true] {
                let table = table && has_table;
                let mut four = vec![0f32; 4 * n];
                product_with(&xs, 4, &p, &mut four, table);
                let mut pairs = vec![0f32; 4 * n];
                for half in 0..2 {
                    let x = &xs[half * 2 * k..][..2 * k];
                    product_with(x, 2, &p, &mut pairs[half * 2 * n..][..2 * n], table);
                }
                let as_bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                assert_eq!(as_bits(&four), as_bits(&pairs), "bits {bits} table {table}");
            }
        }
    }

    #[cfg(target_arch = "x86_64")]
    #[test]
    fn table_kernel_gives_the_portable_bits() {
        if !crate::fast::quantized_avx512::available() {
            return; // no AVX-512 on this CPU: the table kernel never runs
        }
        for (k, group) in [(96, 32), (160, 32), (256, 64), (384, 128)] {
            for rows in 1..=5 {
                let n = 5;
                let (words, scales, biases) = packed_case(n, k, group, 4);
                let p = bf16_packed((&words, &scales, &biases), n, k, group, 4);
                let mut xs: Vec<f32> =
                    (0..rows * k).map(|i| ((i * 53 % 97) as f32 - 48.0) * 0.013).collect();
                xs[k / 2] = f32::INFINITY;
                let (mut a, mut b) = (vec![0f32; rows * n], vec![0f32; rows * n]);
                product_with(&xs, rows, &p, &mut a, true);
                product_with(&xs, rows, &p, &mut b, false);
                let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                assert_eq!(bits(&a), bits(&b), "k {k} rows {rows}");
            }
        }
    }
}
