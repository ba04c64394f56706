//! Calls the core groups for one launch (kiln-core's horizontal.rs): a decode step's
//! few-row products of one x (q, k, v; gate, up), its RoPE of q and of k, and its two
//! KV-cache writes. Each kernel
//! family takes a group through its own `*_together` entry; a group whose layouts one launch
//! cannot take is declined before anything runs, and its members run one by one.
//! `KILN_HORIZONTAL=0` (read once) turns grouping off.

use kiln_base::{
    ArrayData, BinaryOp, Chained, DType, FastOp, Layout, Primitive, Result, Shape, Together,
};

fn on() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var("KILN_HORIZONTAL").as_deref() != Ok("0"))
}

/// Dense products (`x @ W.T` of a bf16 model) join groups unless `KILN_GROUP_DENSE=0`
/// (read once, for A/B runs): on an H100 (session 29) grouping them took llama 1B bf16's
/// step from 387 to 417 tok/s and 8B bf16's from 135 to 142.
fn dense_groups() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var("KILN_GROUP_DENSE").as_deref() != Ok("0"))
}

/// How calls of `prim` may be grouped here (`Backend::runs_together`).
pub(crate) fn runs_together(prim: &Primitive) -> Option<Together> {
    if !on() {
        return None;
    }
    match prim {
        Primitive::Matmul if dense_groups() => Some(Together::SharedInput),
        Primitive::Fast(FastOp::QuantizedMatmul { .. }) => Some(Together::SharedInput),
        Primitive::Fast(FastOp::Rope { .. }) | Primitive::SliceUpdate { .. } => {
            Some(Together::Independent)
        }
        _ => None,
    }
}

/// Calls of `prim` grouped as `runs_together` says, in one launch: `None` where their
/// layouts do not all fit (nothing has run then).
pub(crate) fn eval_together(
    prim: &Primitive,
    inputs: &[Vec<ArrayData>],
    donated: &[Vec<bool>],
    outputs: &[&(Shape, DType)],
) -> Result<Option<Vec<ArrayData>>> {
    let x = &inputs[0][0];
    if outputs.iter().any(|o| o.1 != x.dtype) {
        return Ok(None);
    }
    for data in inputs.iter().flatten() {
        crate::alloc::check_on_gpu(prim.name(), &data.buffer)?;
    }
    let arity = |n: usize| inputs.iter().all(|c| c.len() == n);
    match prim {
        Primitive::Matmul if arity(2) => {
            let products: Vec<_> =
                inputs.iter().zip(outputs).map(|(c, o)| (&c[1], o.0.as_slice())).collect();
            crate::gemv::dense_transposed_together(x, &products)
        }
        Primitive::Fast(FastOp::QuantizedMatmul { group_size, bits }) if arity(4) => {
            let products: Vec<_> = inputs
                .iter()
                .zip(outputs)
                .map(|(c, o)| crate::gemv::Quantized {
                    w: &c[1],
                    scales: &c[2],
                    biases: &c[3],
                    shape: &o.0,
                })
                .collect();
            if products.iter().any(|q| q.w.layout.ndim() != 2) {
                return Ok(None);
            }
            crate::gemv::quantized_together(x, &products, *group_size, *bits)
        }
        Primitive::Fast(FastOp::Rope { dims, traditional, base, scale, freqs, inverse })
            if arity(2 + *freqs as usize) =>
        {
            // With frequencies (llama 3's scaled RoPE), one array for every call: the
            // launch takes one pointer.
            let freqs = freqs.then(|| &inputs[0][2]);
            let same = |c: &Vec<ArrayData>| {
                freqs.is_none_or(|f| {
                    let g = &c[2];
                    g.buffer.as_ptr() == f.buffer.as_ptr()
                        && g.layout == f.layout
                        && g.dtype == f.dtype
                })
            };
            if !inputs.iter().all(same) {
                return Ok(None);
            }
            let p = crate::fast::rope::Params {
                dims: *dims,
                traditional: *traditional,
                base: base.as_f64(),
                scale: scale.as_f64(),
                inverse: *inverse,
            };
            let calls: Vec<_> =
                inputs.iter().zip(outputs).map(|(c, o)| (&c[0], &c[1], o.0.as_slice())).collect();
            crate::fast::rope::rope_together(&calls, freqs, &p)
        }
        Primitive::SliceUpdate { start, step, len } if arity(2) && inputs.len() == 2 => {
            // Two KV-cache writes, each into its donated cache (a copy of the whole cache
            // otherwise: those run on their own).
            let mut pairs = Vec::with_capacity(2);
            for ((call, own), out) in inputs.iter().zip(donated).zip(outputs) {
                let (base, update) = (&call[0], &call[1]);
                let whole = Layout::contiguous(&out.0);
                if !own[0] || base.layout != whole || update.dtype != base.dtype {
                    return Ok(None);
                }
                let target = ArrayData {
                    buffer: base.buffer.clone(),
                    layout: whole.slice(start, step, len),
                    dtype: base.dtype,
                };
                pairs.push((update, target));
            }
            let ran =
                crate::copy::copy_two_into([(pairs[0].0, &pairs[0].1), (pairs[1].0, &pairs[1].1)])?;
            Ok(ran.then(|| inputs.iter().map(|c| c[0].clone()).collect()))
        }
        _ => Ok(None),
    }
}

/// Whether `consumer` takes its producer into its kernel here (`Backend::chains_into`).
pub(crate) fn chains_into(consumer: &Primitive) -> bool {
    on() && matches!(consumer, Primitive::Fast(FastOp::RmsNorm { .. } | FastOp::LayerNorm { .. }))
}

/// `Backend::runs_chained`: an add into a norm.
pub(crate) fn runs_chained(producer: &Primitive, consumer: &Primitive) -> bool {
    chains_into(consumer) && matches!(producer, Primitive::Binary(BinaryOp::Add))
}

/// An add (inputs of its output's shape and dtype, no broadcast) and the norm of its sum,
/// one launch: `(sum, norm)`, or `None` where they do not fit.
pub(crate) fn eval_chained(chain: &Chained) -> Result<Option<(ArrayData, ArrayData)>> {
    let Chained { producer, p_inputs, p_out, consumer, c_rest, c_out } = *chain;
    let (Primitive::Binary(BinaryOp::Add), [a, b]) = (producer, p_inputs) else {
        return Ok(None);
    };
    let dtype = p_out.1;
    let fits = matches!(dtype, DType::F32 | DType::F16 | DType::BF16)
        && c_out == p_out
        && [a, b].iter().all(|x| x.dtype == dtype && x.layout.shape == p_out.0)
        && c_rest.iter().all(|x| x.dtype == dtype);
    if !fits {
        return Ok(None);
    }
    for data in p_inputs.iter().chain(c_rest) {
        crate::alloc::check_on_gpu(consumer.name(), &data.buffer)?;
    }
    use crate::fast::norm::{norm_of_sum, Kind};
    let shape = &p_out.0;
    let made = match consumer {
        Primitive::Fast(FastOp::RmsNorm { eps, weight }) if c_rest.len() == *weight as usize => {
            let w = weight.then(|| &c_rest[0]);
            norm_of_sum(Kind::Rms, (a, b), w, None, eps.as_f64(), shape)?
        }
        Primitive::Fast(FastOp::LayerNorm { eps, weight, bias })
            if c_rest.len() == *weight as usize + *bias as usize =>
        {
            let w = weight.then(|| &c_rest[0]);
            let bias = bias.then(|| &c_rest[*weight as usize]);
            norm_of_sum(Kind::Layer, (a, b), w, bias, eps.as_f64(), shape)?
        }
        _ => return Ok(None),
    };
    Ok(Some(made))
}
