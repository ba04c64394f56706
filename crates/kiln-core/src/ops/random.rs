//! Counter-based random numbers (threefry2x32, as JAX and MLX, so the same key gives the
//! same numbers as MLX and on every backend). Keys are `(2,)` uint32 arrays. Without an
//! explicit key, ops draw from this thread's key sequence, seeded by [`seed`].

use super::{add, astype, divide, erfinv, minimum, multiply, record, scalar};
use crate::array::Array;
use kiln_base::shape::fmt_shape;
use kiln_base::{bail, ensure, DType, Primitive, Result, Scalar};
use std::cell::RefCell;
use std::sync::atomic::{AtomicU64, Ordering};

/// Bumped by `seed`, so every thread restarts its sequence from the new seed.
static SEED: AtomicU64 = AtomicU64::new(u64::MAX);
static SEED_EPOCH: AtomicU64 = AtomicU64::new(0);

thread_local! {
    /// (epoch the key was seeded in, current key)
    static STATE: RefCell<Option<(u64, Array)>> = const { RefCell::new(None) };
}

/// A PRNG key from a seed: `[seed >> 32, seed & 0xffffffff]`.
pub fn key(seed: u64) -> Result<Array> {
    Array::from_slice(&[(seed >> 32) as u32, seed as u32], &[2])
}

/// Seeds the random state of every thread.
pub fn seed(value: u64) {
    SEED.store(value, Ordering::Relaxed);
    SEED_EPOCH.fetch_add(1, Ordering::Relaxed);
}

/// This thread's current state key: the key random ops without an explicit key split next
/// (seeded from `seed`, or the clock, on first use after each `seed`). It may be a tracer
/// when a transform set it with [`set_current_key`].
pub fn current_key() -> Result<Array> {
    let epoch = SEED_EPOCH.load(Ordering::Relaxed);
    let current =
        STATE.with(|s| s.borrow().as_ref().filter(|(e, _)| *e == epoch).map(|(_, k)| k.clone()));
    match current {
        Some(k) => Ok(k),
        None => {
            let seed = match SEED.load(Ordering::Relaxed) {
                u64::MAX => std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map(|d| d.as_nanos() as u64)
                    .unwrap_or(0),
                s => s,
            };
            let k = key(seed)?;
            STATE.with(|s| *s.borrow_mut() = Some((epoch, k.clone())));
            Ok(k)
        }
    }
}

/// Replaces this thread's state key (any `(2,)` uint32 array, a tracer included); the
/// next random op without a key splits it. A later `seed` resets it.
pub fn set_current_key(k: &Array) -> Result<()> {
    check_key(k)?;
    let epoch = SEED_EPOCH.load(Ordering::Relaxed);
    STATE.with(|s| *s.borrow_mut() = Some((epoch, k.clone())));
    Ok(())
}

/// The next key of this thread's sequence (splits the state key in two, keeps one half).
pub fn next_key() -> Result<Array> {
    let current = current_key()?;
    let pair = split(&current, 2)?;
    let keep = super::index(&pair, &[super::IndexItem::Int(0)])?;
    let out = super::index(&pair, &[super::IndexItem::Int(1)])?;
    set_current_key(&keep)?;
    Ok(out)
}

fn check_key(k: &Array) -> Result<()> {
    ensure!(
        k.dtype() == DType::U32 && k.shape() == [2],
        Value,
        "random",
        "Expected a key of shape (2,) and dtype uint32, got {} {}.",
        fmt_shape(k.shape()),
        k.dtype()
    );
    Ok(())
}

fn key_or_next(key: Option<&Array>) -> Result<Array> {
    match key {
        Some(k) => {
            check_key(k)?;
            Ok(k.clone())
        }
        None => next_key(),
    }
}

/// Raw random bits: `shape` elements of `width` bytes (1, 2, 4 or 8).
pub fn bits(shape: &[usize], width: u8, key: Option<&Array>) -> Result<Array> {
    let key = key_or_next(key)?;
    record(Primitive::RandomBits { shape: shape.into(), width }, vec![key])
}

/// `num` new keys from one, shape `(num, 2)`.
pub fn split(key: &Array, num: usize) -> Result<Array> {
    let key = key_or_next(Some(key))?;
    record(Primitive::RandomBits { shape: [num, 2].as_slice().into(), width: 4 }, vec![key])
}

/// Uniform samples in `[low, high)`.
pub fn uniform(
    low: f64,
    high: f64,
    shape: &[usize],
    dtype: DType,
    key: Option<&Array>,
) -> Result<Array> {
    let op = "uniform";
    if !dtype.is_float() {
        bail!(Value, op, "Can only generate uniform numbers with real floating point type.");
    }
    // 32 random bits scaled into [0, 1), clamped below 1 in the target precision.
    let upper = match dtype {
        DType::F16 => half::f16::from_bits(0x3bff).to_f64(),
        DType::BF16 => half::bf16::from_bits(0x3f7f).to_f64(),
        _ => f64::from(f32::from_bits(0x3f7f_ffff)),
    };
    let raw = bits(shape, 4, key)?;
    let unit = divide(&raw, &scalar(Scalar::Float(4294967295.0), DType::F32)?)?;
    let unit = astype(&minimum(&unit, &scalar(Scalar::Float(upper), DType::F32)?)?, dtype)?;
    let lo = scalar(Scalar::Float(low), dtype)?;
    let range = super::subtract(&scalar(Scalar::Float(high), dtype)?, &lo)?;
    add(&multiply(&range, &unit)?, &lo)
}

/// Uniforms in `(-1, 1)` for the inverse-CDF samplers, as MLX draws them: in float32 (in
/// float64 for float64 results, widened from float32 draws). Half types take the float32
/// values: drawn in half precision, the bound nextafter(-1, 0) rounds to -1 and the
/// transform gives infinities.
fn open_unit_interval(shape: &[usize], dtype: DType, key: Option<&Array>) -> Result<Array> {
    let low = f64::from(f32::from_bits(0xbf7f_ffff)); // nextafter(-1, 0)
    let u = uniform(low, 1.0, shape, DType::F32, key)?;
    if dtype == DType::F64 {
        return astype(&u, DType::F64);
    }
    Ok(u)
}

/// Normal samples with mean `loc` and standard deviation `scale` (inverse-CDF of uniforms).
pub fn normal(
    shape: &[usize],
    dtype: DType,
    loc: f64,
    scale: f64,
    key: Option<&Array>,
) -> Result<Array> {
    let loc = if loc != 0.0 { Some(scalar(Scalar::Float(loc), dtype)?) } else { None };
    let scale = if scale != 1.0 { Some(scalar(Scalar::Float(scale), dtype)?) } else { None };
    normal_with(shape, dtype, loc.as_ref(), scale.as_ref(), key)
}

/// [`normal`] with array `loc` and `scale` (broadcast against `shape`).
pub fn normal_with(
    shape: &[usize],
    dtype: DType,
    loc: Option<&Array>,
    scale: Option<&Array>,
    key: Option<&Array>,
) -> Result<Array> {
    if dtype == DType::C64 {
        return complex_normal(shape, loc, scale, key);
    }
    let u = open_unit_interval(shape, dtype, key)?;
    // MLX's order, (sqrt(2) * scale) * erfinv(u) + loc, so samples match it bit for bit.
    let mut factor = scalar(Scalar::Float(std::f64::consts::SQRT_2), dtype)?;
    if let Some(scale) = scale {
        factor = multiply(&factor, &astype(scale, dtype)?)?;
    }
    let mut out = multiply(&factor, &astype(&erfinv(&u)?, dtype)?)?;
    if let Some(loc) = loc {
        out = add(&astype(loc, dtype)?, &out)?;
    }
    Ok(out)
}

/// Complex normal samples as MLX draws them: the two parts of each are `erfinv` of two
/// consecutive float32 uniforms (variance 1/2 each, so 1 in all), then `scale * z + loc`.
fn complex_normal(
    shape: &[usize],
    loc: Option<&Array>,
    scale: Option<&Array>,
    key: Option<&Array>,
) -> Result<Array> {
    let pairs: Vec<usize> = shape.iter().copied().chain([2]).collect();
    let parts = erfinv(&open_unit_interval(&pairs, DType::F32, key)?)?;
    let dims: Vec<i64> = shape.iter().map(|&d| d as i64).collect();
    let mut out = super::reshape(&super::view(&parts, DType::C64)?, &dims)?;
    if let Some(scale) = scale {
        out = multiply(&astype(scale, DType::C64)?, &out)?;
    }
    if let Some(loc) = loc {
        out = add(&astype(loc, DType::C64)?, &out)?;
    }
    Ok(out)
}

/// Uniform samples as [`uniform`], with array bounds broadcast against `shape`.
fn uniform_between(
    low: &Array,
    high: &Array,
    shape: &[usize],
    dtype: DType,
    key: Option<&Array>,
) -> Result<Array> {
    let unit = uniform(0.0, 1.0, shape, dtype, key)?;
    let (low, high) = (astype(low, dtype)?, astype(high, dtype)?);
    add(&multiply(&super::subtract(&high, &low)?, &unit)?, &low)
}

/// Integers drawn uniformly from `[low, high)`: a float32 uniform floored and clamped, as
/// MLX does (so not every integer of a huge range is reachable).
pub fn randint(
    low: &Array,
    high: &Array,
    shape: &[usize],
    dtype: DType,
    key: Option<&Array>,
) -> Result<Array> {
    let op = "randint";
    ensure!(dtype.is_integer(), Value, op, "randint only supports integer dtypes, got {dtype}.");
    // As MLX, the bounds are first values of `dtype` (-5 as uint8 is 251).
    let (low, high) = (&astype(low, dtype)?, &astype(high, dtype)?);
    let u = uniform_between(low, high, shape, DType::F32, key)?;
    let top =
        super::subtract(&astype(high, DType::F32)?, &scalar(Scalar::Float(1.0), DType::F32)?)?;
    let clamped = super::maximum(&minimum(&super::floor(&u)?, &top)?, &astype(low, DType::F32)?)?;
    astype(&clamped, dtype)
}

/// True with probability `p` (broadcast against `shape`).
pub fn bernoulli(p: &Array, shape: &[usize], key: Option<&Array>) -> Result<Array> {
    let dtype = p.dtype().to_float();
    super::less(&uniform(0.0, 1.0, shape, dtype, key)?, &astype(p, dtype)?)
}

/// Normal samples restricted to `(lower, upper)`: inverse-CDF of a uniform between the
/// bounds' CDF values.
pub fn truncated_normal(
    lower: &Array,
    upper: &Array,
    shape: &[usize],
    dtype: DType,
    key: Option<&Array>,
) -> Result<Array> {
    let sqrt2 = scalar(Scalar::Float(std::f64::consts::SQRT_2), dtype)?;
    let cdf = |b: &Array| super::erf(&divide(&astype(b, dtype)?, &sqrt2)?);
    let u = uniform_between(&cdf(lower)?, &cdf(upper)?, shape, dtype, key)?;
    let out = multiply(&sqrt2, &erfinv(&u)?)?;
    // Upper bound first, then lower (MLX's order: lower > upper gives lower).
    let out = minimum(&out, &astype(upper, dtype)?)?;
    super::maximum(&out, &astype(lower, dtype)?)
}

/// Standard Gumbel samples: `-log(-log(u))`.
pub fn gumbel(shape: &[usize], dtype: DType, key: Option<&Array>) -> Result<Array> {
    let u = uniform(0.0, 1.0, shape, dtype, key)?;
    super::negative(&super::log(&super::negative(&super::log(&u)?)?)?)
}

/// Laplace samples with mean `loc` and scale `scale`.
pub fn laplace(
    shape: &[usize],
    dtype: DType,
    loc: f64,
    scale: f64,
    key: Option<&Array>,
) -> Result<Array> {
    let u = open_unit_interval(shape, dtype, key)?;
    let mag = super::log1p(&super::negative(&super::abs(&u)?)?)?;
    let out = astype(&multiply(&super::sign(&u)?, &mag)?, dtype)?;
    let out = multiply(&out, &scalar(Scalar::Float(scale), dtype)?)?;
    add(&out, &scalar(Scalar::Float(loc), dtype)?)
}

/// How many categorical samples to draw, and in what shape.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Draws {
    /// One per distribution (the logits' shape without `axis`).
    One,
    /// `n` per distribution, appended as the last axis.
    Samples(usize),
    /// The given shape, broadcast against the logits' shape without `axis`.
    Shape(Vec<usize>),
}

/// Samples from the categorical distributions with unnormalised log-probabilities `logits`
/// along `axis` (uint32 indices), drawing MLX's numbers for the same key:
/// - a single distribution (every other axis of size 1) sampled into a non-empty shape
///   takes one uniform per sample and inverts the distribution's CDF (MLX's single-row
///   path, the usual decode step of a language model);
/// - otherwise the Gumbel-max trick, with MLX's noise layout: for `num_samples` the noise is
///   `(..logits, n)` and the argmax runs over `axis`; for a shape the logits' axis is
///   inserted into it.
pub fn categorical(logits: &Array, axis: i64, draws: Draws, key: Option<&Array>) -> Result<Array> {
    let op = "categorical";
    let axis = kiln_base::shape::normalize_axis(op, axis, logits.ndim())?;
    let logits = astype(logits, logits.dtype().to_float())?;
    let categories = logits.shape()[axis];
    let mut batch = logits.shape().to_vec();
    batch.remove(axis);
    let out_shape = match &draws {
        Draws::One => batch.clone(),
        Draws::Samples(n) => [batch.as_slice(), &[*n]].concat(),
        Draws::Shape(shape) => {
            let b = kiln_base::shape::broadcast_shapes(op, shape, &batch)?;
            ensure!(
                b.as_slice() == shape.as_slice(),
                Value,
                op,
                "Requested shape {} is not broadcast compatible with the logits' shape {} \
                 without the sampled axis.",
                fmt_shape(shape),
                fmt_shape(&batch)
            );
            shape.clone()
        }
    };
    if batch.iter().all(|&d| d == 1) && !out_shape.is_empty() && categories > 0 {
        return inverse_cdf(&logits, axis, categories, &out_shape, key);
    }
    match draws {
        Draws::One => {
            let g = gumbel(logits.shape(), DType::F32, key)?;
            super::argmax(&add(&g, &logits)?, Some(axis as i64), false)
        }
        Draws::Samples(n) => {
            let mut noise = logits.shape().to_vec();
            noise.push(n);
            let g = gumbel(&noise, DType::F32, key)?;
            let expanded = super::expand_dims(&logits, &[-1])?;
            super::argmax(&add(&g, &expanded)?, Some(axis as i64), false)
        }
        Draws::Shape(shape) => {
            // The logits' axis goes where it falls once the logits broadcast to `shape`.
            let at = axis + shape.len() + 1 - logits.ndim();
            let mut noise = shape.clone();
            noise.insert(at, categories);
            let g = gumbel(&noise, DType::F32, key)?;
            super::argmax(&add(&g, &logits)?, Some(at as i64), false)
        }
    }
}

/// One uniform per sample, placed on the distribution's CDF: the index is the number of
/// cumulative probabilities below it (the last index where rounding leaves the total under
/// the draw).
fn inverse_cdf(
    logits: &Array,
    axis: usize,
    categories: usize,
    out_shape: &[usize],
    key: Option<&Array>,
) -> Result<Array> {
    let probs = super::softmax(&astype(logits, DType::F32)?, Some(&[axis as i64]), true)?;
    let cdf = super::cumsum(&probs, Some(axis as i64), false, true)?;
    let cdf = super::reshape(&cdf, &[categories as i64])?;
    let u = uniform(0.0, 1.0, out_shape, DType::F32, key)?;
    let below = super::less(&cdf, &super::expand_dims(&u, &[-1])?)?;
    let count = super::sum(&astype(&below, DType::U32)?, Some(&[-1]), false)?;
    minimum(&count, &scalar(Scalar::UInt(categories as u64 - 1), DType::U32)?)
}

/// A random permutation of `x` along `axis` (sorting random bits).
pub fn permutation(x: &Array, axis: i64, key: Option<&Array>) -> Result<Array> {
    let op = "permutation";
    ensure!(x.ndim() > 0, Value, op, "Cannot permute a 0-d array.");
    let axis_n = kiln_base::shape::normalize_axis(op, axis, x.ndim())?;
    let order = super::argsort(&bits(&[x.shape()[axis_n]], 4, key)?, Some(0))?;
    super::take(x, &order, Some(axis))
}

/// A random permutation of `0..n` (uint32, as MLX: the order that sorts random bits).
pub fn permutation_of(n: usize, key: Option<&Array>) -> Result<Array> {
    super::argsort(&bits(&[n], 4, key)?, Some(0))
}
