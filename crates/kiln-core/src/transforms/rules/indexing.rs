//! Gradients of gathers, scatters and slice updates. Index inputs carry no gradient; the
//! data paths are linear: a gather's cotangent scatters back (adding duplicates), a
//! scatter's splits into the kept part of the input and the gathered part of the updates.

use super::{missing, zeros_like};
use crate::array::Array;
use crate::ops::{self, record};
use kiln_base::{DType, Primitive, Result, ScatterReduce, Shape};

/// The mask of a masked scatter (`x.shape[..k]`) broadcast over `x`.
pub(super) fn mask_like(mask: &Array, x: &Array) -> Result<Array> {
    let mut s: Vec<i64> = mask.shape().iter().map(|&d| d as i64).collect();
    s.extend(std::iter::repeat_n(1, x.ndim() - mask.ndim()));
    ops::broadcast_to(&ops::reshape(mask, &s)?, x.shape())
}

/// For each mask position, the row of the values it takes (its rank among the true
/// positions, row-major), as int32 of the mask's shape.
pub(super) fn mask_rows(mask: &Array) -> Result<Array> {
    let flat = ops::astype(&ops::reshape(mask, &[-1])?, DType::I32)?;
    let rank = ops::cumsum(&flat, Some(0), false, false)?;
    let shape: Vec<i64> = mask.shape().iter().map(|&d| d as i64).collect();
    ops::reshape(&rank, &shape)
}

/// The cotangent of a masked scatter's values: row `r` gets the cotangent of the position
/// filled from it; rows past the true positions get zeros.
fn masked_rows_back(mask: &Array, values: &Array, g: &Array) -> Result<Array> {
    let rows = values.shape()[0];
    // Unmasked positions point past the last row: a scatter drops what does not fit.
    let past = ops::full(&[], kiln_base::Scalar::Int(rows as i64), DType::I32)?;
    let idx = ops::where_(mask, &mask_rows(mask)?, &past)?;
    let mut upd: Vec<i64> = g.shape().iter().map(|&d| d as i64).collect();
    upd.insert(mask.ndim(), 1);
    let scatter = Primitive::Scatter { axes: vec![0], reduce: ScatterReduce::Add };
    record(scatter, vec![zeros_like(values)?, idx, ops::reshape(g, &upd)?])
}

/// The flat (row-major) input position each element of a strided view reads, int64.
pub(super) fn flat_positions(shape: &[usize], strides: &[isize], offset: usize) -> Result<Array> {
    let n = shape.len();
    let mut acc = ops::full(&[], kiln_base::Scalar::Int(offset as i64), DType::I64)?;
    for (d, (&len, &st)) in shape.iter().zip(strides).enumerate() {
        let iota = ops::arange(0.0, len as f64, 1.0, DType::I64)?;
        let step = ops::full(&[], kiln_base::Scalar::Int(st as i64), DType::I64)?;
        let mut s = vec![1i64; n];
        s[d] = len as i64;
        acc = ops::add(&acc, &ops::reshape(&ops::multiply(&iota, &step)?, &s)?)?;
    }
    ops::broadcast_to(&acc, shape)
}

/// The cotangent or tangent of each argnum, given one per input (`None`: zeros).
fn pick(argnums: &[usize], primals: &[Array], per_input: Vec<Option<Array>>) -> Result<Vec<Array>> {
    argnums
        .iter()
        .map(|&i| per_input[i].clone().map_or_else(|| zeros_like(&primals[i]), Ok))
        .collect()
}

/// For a scatter max/min with result `out`: where the input kept its value, where each
/// update won, and the gather that reads the updates' positions.
fn extremum_masks(
    axes: &[usize],
    primals: &[Array],
    out: &Array,
) -> Result<(Array, Array, Primitive)> {
    let n = primals.len();
    let upd = &primals[n - 1];
    let k = primals.get(1).filter(|_| n > 2).map_or(0, |i| i.ndim());
    let gather = Primitive::Gather { axes: axes.to_vec(), slice_sizes: upd.shape()[k..].into() };
    let mut ins = vec![out.clone()];
    ins.extend(primals[1..n - 1].iter().cloned());
    let out_at = record(gather.clone(), ins)?;
    Ok((ops::equal(&primals[0], out)?, ops::equal(upd, &out_at)?, gather))
}

pub(super) fn vjp(
    prim: &Primitive,
    primals: &[Array],
    g: &Array,
    argnums: &[usize],
    out: &Array,
) -> Result<Vec<Array>> {
    let n = primals.len();
    let mut per_input: Vec<Option<Array>> = vec![None; n];
    match prim {
        Primitive::Slice { start, step, len } => {
            let update = Primitive::SliceUpdate {
                start: start.clone(),
                step: step.clone(),
                len: len.clone(),
            };
            per_input[0] = Some(record(update, vec![zeros_like(&primals[0])?, g.clone()])?);
        }
        Primitive::SliceUpdate { start, step, len } => {
            let (s, st, l) = (start.clone(), step.clone(), len.clone());
            let hole =
                Primitive::SliceUpdate { start: s.clone(), step: st.clone(), len: l.clone() };
            per_input[0] = Some(record(hole, vec![g.clone(), zeros_like(&primals[1])?])?);
            per_input[1] =
                Some(record(Primitive::Slice { start: s, step: st, len: l }, vec![g.clone()])?);
        }
        Primitive::Gather { axes, .. } => {
            let scatter = Primitive::Scatter { axes: axes.clone(), reduce: ScatterReduce::Add };
            let mut inputs = vec![zeros_like(&primals[0])?];
            inputs.extend(primals[1..].iter().cloned());
            inputs.push(g.clone());
            per_input[0] = Some(record(scatter, inputs)?);
        }
        Primitive::Scatter {
            axes,
            reduce: reduce @ (ScatterReduce::None | ScatterReduce::Add),
        } => {
            let updates = &primals[n - 1];
            let indices = &primals[1..n - 1];
            let k = indices.first().map_or(0, |i| i.ndim());
            let slice_sizes: Shape = updates.shape()[k..].into();
            let gather = Primitive::Gather { axes: axes.clone(), slice_sizes };
            let mut inputs = vec![g.clone()];
            inputs.extend(indices.iter().cloned());
            per_input[n - 1] = Some(record(gather, inputs)?);
            per_input[0] = Some(match reduce {
                ScatterReduce::Add => g.clone(),
                _ => {
                    // Overwritten positions take no gradient from the input.
                    let mut inputs = vec![g.clone()];
                    inputs.extend(indices.iter().cloned());
                    inputs.push(zeros_like(updates)?);
                    record(
                        Primitive::Scatter { axes: axes.clone(), reduce: ScatterReduce::None },
                        inputs,
                    )?
                }
            });
        }
        Primitive::Scatter { axes, reduce: ScatterReduce::Max | ScatterReduce::Min } => {
            // As MLX: the input and each update get the cotangent where they equal the
            // result (ties all receive it).
            let (x_mask, upd_mask, gather) = extremum_masks(axes, primals, out)?;
            per_input[0] = Some(ops::where_(&x_mask, g, &zeros_like(g)?)?);
            let upd = &primals[n - 1];
            let mut ins = vec![g.clone()];
            ins.extend(primals[1..n - 1].iter().cloned());
            let g_at = record(gather, ins)?;
            per_input[n - 1] = Some(ops::where_(&upd_mask, &g_at, &zeros_like(upd)?)?);
        }
        Primitive::MaskedScatter => {
            let (x, mask, values) = (&primals[0], &primals[1], &primals[2]);
            let m = mask_like(mask, x)?;
            per_input[0] = Some(ops::where_(&m, &zeros_like(g)?, g)?);
            per_input[2] = Some(masked_rows_back(mask, values, g)?);
        }
        Primitive::AsStrided { shape, strides, offset } => {
            // Every view element adds its cotangent to the flat input element it reads.
            let x = &primals[0];
            let flat = flat_positions(shape, strides, *offset)?;
            let mut upd: Vec<i64> = flat.shape().iter().map(|&d| d as i64).collect();
            upd.push(1);
            let scatter = Primitive::Scatter { axes: vec![0], reduce: ScatterReduce::Add };
            let zeros = ops::zeros(&[x.size()], g.dtype())?;
            let summed = record(scatter, vec![zeros, flat, ops::reshape(g, &upd)?])?;
            let back: Vec<i64> = x.shape().iter().map(|&d| d as i64).collect();
            per_input[0] = Some(ops::reshape(&summed, &back)?);
        }
        Primitive::Scatter { reduce: ScatterReduce::Prod, .. } => {
            // MLX has no rule either and raises a RuntimeError.
            return Err(kiln_base::Error::Runtime {
                op: "scatter",
                msg: "VJP not implemented for scatter_prod.".into(),
            });
        }
        _ => return Err(missing("vjp", prim)),
    }
    pick(argnums, primals, per_input)
}

/// These ops are linear in their data inputs: the same primitive on the tangents, with the
/// index inputs as they are.
pub(super) fn jvp(
    prim: &Primitive,
    primals: &[Array],
    tangents: &[Array],
    argnums: &[usize],
    out: &Array,
) -> Result<Vec<Array>> {
    let n = primals.len();
    if let Primitive::Scatter { axes, reduce: ScatterReduce::Max | ScatterReduce::Min } = prim {
        // The transpose of the vjp: masked tangents of the input plus the winning updates'.
        let (x_mask, upd_mask, _) = extremum_masks(axes, primals, out)?;
        let t = |i: usize| match argnums.iter().position(|&a| a == i) {
            Some(k) => Ok(tangents[k].clone()),
            None => zeros_like(&primals[i]),
        };
        let tx = ops::where_(&x_mask, &t(0)?, &zeros_like(out)?)?;
        let tu = ops::where_(&upd_mask, &t(n - 1)?, &zeros_like(&primals[n - 1])?)?;
        let mut ins = vec![tx];
        ins.extend(primals[1..n - 1].iter().cloned());
        ins.push(tu);
        return Ok(vec![record(
            Primitive::Scatter { axes: axes.clone(), reduce: ScatterReduce::Add },
            ins,
        )?]);
    }
    let data: Vec<usize> = match prim {
        Primitive::Slice { .. } | Primitive::Gather { .. } => vec![0],
        Primitive::SliceUpdate { .. } => vec![0, 1],
        Primitive::Scatter { reduce: ScatterReduce::None | ScatterReduce::Add, .. } => {
            vec![0, n - 1]
        }
        Primitive::MaskedScatter => vec![0, 2],
        Primitive::AsStrided { .. } => vec![0],
        Primitive::Scatter { reduce: ScatterReduce::Prod, .. } => {
            return Err(kiln_base::Error::Runtime {
                op: "scatter",
                msg: "JVP not implemented for scatter_prod.".into(),
            });
        }
        _ => return Err(missing("jvp", prim)),
    };
    let inputs = (0..n)
        .map(|i| match (data.contains(&i), argnums.iter().position(|&a| a == i)) {
            (true, Some(k)) => Ok(tangents[k].clone()),
            (true, None) => zeros_like(&primals[i]),
            (false, _) => Ok(primals[i].clone()),
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(vec![record(prim.clone(), inputs)?])
}
