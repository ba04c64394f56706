//! `einsum`: numpy's Einstein summation (implicit and explicit output, `...`, repeated
//! subscripts, size-1 broadcasting) as a composition of existing ops. Repeated subscripts
//! within an operand take a diagonal (a reshape and a strided slice); subscripts nobody needs
//! later are summed early; operands are then contracted left to right, with `matmul` when
//! subscripts are summed between two operands (so, as in MLX, such contractions need float
//! inputs) and a broadcast multiply otherwise.

use super::{broadcast_to, matmul, multiply, reshape, slice, sum, transpose};
use crate::array::Array;
use kiln_base::shape::fmt_shape;
use kiln_base::{bail, ensure, Result};
use std::collections::BTreeMap;

const OP: &str = "einsum";

/// An axis label: a letter, or the `i`-th axis of the broadcast `...` block (counted from
/// the left of the widest ellipsis).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Label {
    Ellipsis(usize),
    Letter(char),
}

/// One comma-separated term: letters around at most one `...`.
struct Term {
    before: Vec<char>,
    /// Letters after the ellipsis, or `None` when the term has no ellipsis.
    after: Option<Vec<char>>,
}

impl Term {
    fn letters(&self) -> impl Iterator<Item = char> + '_ {
        self.before.iter().chain(self.after.iter().flatten()).copied()
    }

    fn count(&self) -> usize {
        self.before.len() + self.after.as_ref().map_or(0, |a| a.len())
    }
}

fn parse_term(s: &str) -> Result<Term> {
    let (before, after) = match s.split_once("...") {
        Some((b, a)) => (b, Some(a)),
        None => (s, None),
    };
    let letters = |part: &str| -> Result<Vec<char>> {
        part.chars()
            .map(|c| {
                ensure!(
                    c.is_ascii_alphabetic(),
                    Value,
                    OP,
                    "Subscripts must be letters, but got '{c}'."
                );
                Ok(c)
            })
            .collect()
    };
    Ok(Term { before: letters(before)?, after: after.map(letters).transpose()? })
}

/// The labels of a term's axes, given its ellipsis width and the widest one.
fn axis_labels(term: &Term, width: usize, widest: usize) -> Vec<Label> {
    let mut out: Vec<Label> = term.before.iter().map(|&c| Label::Letter(c)).collect();
    if let Some(after) = &term.after {
        out.extend((widest - width..widest).map(Label::Ellipsis));
        out.extend(after.iter().map(|&c| Label::Letter(c)));
    }
    out
}

/// Evaluates the Einstein summation `subscripts` over `operands`.
pub fn einsum(subscripts: &str, operands: &[Array]) -> Result<Array> {
    let spec: String = subscripts.chars().filter(|c| !c.is_whitespace()).collect();
    let (lhs, rhs) = match spec.split_once("->") {
        Some((l, r)) => (l, Some(r)),
        None => (spec.as_str(), None),
    };
    let terms = lhs.split(',').map(parse_term).collect::<Result<Vec<_>>>()?;
    ensure!(
        terms.len() == operands.len(),
        Value,
        OP,
        "Number of operands, {}, does not match number of input subscripts, {}",
        operands.len(),
        terms.len()
    );
    let mut widths = Vec::with_capacity(terms.len());
    for (k, (term, x)) in terms.iter().zip(operands).enumerate() {
        let fits =
            if term.after.is_some() { term.count() <= x.ndim() } else { term.count() == x.ndim() };
        ensure!(
            fits,
            Value,
            OP,
            "Invalid number of subscripts {} for input {k} with {} dimensions.",
            term.count(),
            x.ndim()
        );
        widths.push(x.ndim() - term.count());
    }
    let widest = widths.iter().copied().max().unwrap_or(0);
    let labels: Vec<Vec<Label>> =
        terms.iter().zip(&widths).map(|(t, &w)| axis_labels(t, w, widest)).collect();

    // Each label's size; size-1 axes broadcast.
    let mut sizes: BTreeMap<Label, usize> = BTreeMap::new();
    for (k, (ls, x)) in labels.iter().zip(operands).enumerate() {
        for (i, (&l, &d)) in ls.iter().zip(x.shape()).enumerate() {
            let size = sizes.entry(l).or_insert(d);
            if *size == 1 {
                *size = d;
            } else if d != 1 && d != *size {
                bail!(
                    Value,
                    OP,
                    "Cannot broadcast dimension {i} of input {k} with shape {} to size {size}.",
                    fmt_shape(x.shape())
                );
            }
        }
    }

    let output = output_labels(rhs, &terms, widest)?;
    let mut pending: Vec<(Array, Vec<Label>)> = Vec::with_capacity(operands.len());
    for (x, ls) in operands.iter().zip(labels) {
        pending.push(diagonals(x.clone(), ls)?);
    }
    let mut pending = pending.into_iter();
    let (mut acc, mut acc_labels) = pending.next().expect("at least one operand");
    let rest: Vec<(Array, Vec<Label>)> = pending.collect();
    for (i, (y, y_labels)) in rest.iter().enumerate() {
        let mut needed: Vec<Label> = output.clone();
        needed.extend(rest[i + 1..].iter().flat_map(|(_, l)| l.iter().copied()));
        let keep_x: Vec<Label> = needed.iter().chain(y_labels).copied().collect();
        let keep_y: Vec<Label> = needed.iter().chain(&acc_labels).copied().collect();
        let (x, lx) = sum_unneeded(acc, acc_labels, &keep_x)?;
        let (y, ly) = sum_unneeded(y.clone(), y_labels.clone(), &keep_y)?;
        (acc, acc_labels) = contract(x, lx, y, ly, &needed)?;
    }
    let (acc, acc_labels) = sum_unneeded(acc, acc_labels, &output)?;
    let perm: Vec<i64> = output
        .iter()
        .map(|l| acc_labels.iter().position(|m| m == l).expect("output labels survive") as i64)
        .collect();
    let out = transpose(&acc, Some(&perm))?;
    let shape: Vec<usize> = output.iter().map(|l| sizes[l]).collect();
    broadcast_to(&out, &shape)
}

/// The output's labels: explicit after `->`, else numpy's implicit rule (the ellipsis, then
/// letters used exactly once, in alphabetical order).
fn output_labels(rhs: Option<&str>, terms: &[Term], widest: usize) -> Result<Vec<Label>> {
    let mut counts: BTreeMap<char, usize> = BTreeMap::new();
    for t in terms {
        for c in t.letters() {
            *counts.entry(c).or_default() += 1;
        }
    }
    let Some(rhs) = rhs else {
        let mut out: Vec<Label> = (0..widest).map(Label::Ellipsis).collect();
        out.extend(counts.iter().filter(|&(_, &n)| n == 1).map(|(&c, _)| Label::Letter(c)));
        return Ok(out);
    };
    let term = parse_term(rhs)?;
    let mut seen = Vec::new();
    for c in term.letters() {
        ensure!(!seen.contains(&c), Value, OP, "Repeat indices not allowed in output.");
        ensure!(
            counts.contains_key(&c),
            Value,
            OP,
            "Output subscript '{c}' does not appear in the input subscripts."
        );
        seen.push(c);
    }
    Ok(axis_labels(&term, widest, widest))
}

/// Replaces each repeated label of one operand by the diagonal of its axes.
fn diagonals(mut x: Array, mut labels: Vec<Label>) -> Result<(Array, Vec<Label>)> {
    while let Some((p, q)) = first_repeat(&labels) {
        let n = x.shape()[p];
        ensure!(
            x.shape()[q] == n,
            Value,
            OP,
            "Repeated subscript of an input must have equal dimensions, got {} and {}.",
            n,
            x.shape()[q]
        );
        x = diagonal(&x, p, q)?;
        let label = labels[p];
        labels.remove(q);
        labels.remove(p);
        labels.push(label);
    }
    Ok((x, labels))
}

fn first_repeat(labels: &[Label]) -> Option<(usize, usize)> {
    (0..labels.len())
        .find_map(|p| (p + 1..labels.len()).find(|&q| labels[q] == labels[p]).map(|q| (p, q)))
}

/// The diagonal of equal-sized axes `p` and `q`, as a new last axis: the two axes moved last
/// and merged, then every `(n + 1)`-th element.
fn diagonal(x: &Array, p: usize, q: usize) -> Result<Array> {
    let nd = x.ndim();
    let others: Vec<usize> = (0..nd).filter(|&i| i != p && i != q).collect();
    let perm: Vec<i64> = others.iter().chain(&[p, q]).map(|&i| i as i64).collect();
    let n = x.shape()[p];
    let mut shape: Vec<i64> = others.iter().map(|&i| x.shape()[i] as i64).collect();
    shape.push((n * n) as i64);
    let merged = reshape(&transpose(x, Some(&perm))?, &shape)?;
    let k = merged.ndim();
    let mut steps = vec![1; k];
    steps[k - 1] = n as i64 + 1;
    slice(&merged, &vec![None; k], &vec![None; k], &steps)
}

/// Sums the axes whose labels are not in `keep`.
fn sum_unneeded(x: Array, labels: Vec<Label>, keep: &[Label]) -> Result<(Array, Vec<Label>)> {
    let axes: Vec<i64> =
        (0..labels.len()).filter(|&i| !keep.contains(&labels[i])).map(|i| i as i64).collect();
    if axes.is_empty() {
        return Ok((x, labels));
    }
    let kept = labels.into_iter().filter(|l| keep.contains(l)).collect();
    Ok((sum(&x, Some(&axes), false)?, kept))
}

/// Product of two operands, summing the labels they share that are not `needed`.
fn contract(
    x: Array,
    lx: Vec<Label>,
    y: Array,
    ly: Vec<Label>,
    needed: &[Label],
) -> Result<(Array, Vec<Label>)> {
    let shared: Vec<Label> = lx.iter().filter(|l| ly.contains(l)).copied().collect();
    let batch: Vec<Label> = shared.iter().filter(|l| needed.contains(l)).copied().collect();
    let summed: Vec<Label> = shared.iter().filter(|l| !needed.contains(l)).copied().collect();
    let free_x: Vec<Label> = lx.iter().filter(|l| !ly.contains(l)).copied().collect();
    let free_y: Vec<Label> = ly.iter().filter(|l| !lx.contains(l)).copied().collect();
    let pos = |ls: &[Label], l: &Label| ls.iter().position(|m| m == l).expect("label present");
    let dims = |a: &Array, ls: &[Label], of: &[Label]| -> Vec<i64> {
        of.iter().map(|l| a.shape()[pos(ls, l)] as i64).collect()
    };
    let order = |ls: &[Label], parts: &[&[Label]]| -> Vec<i64> {
        parts.iter().flat_map(|p| p.iter()).map(|l| pos(ls, l) as i64).collect()
    };
    // A summed label of size 1 on one side broadcasts: sum the other side's axis first.
    let (mut x, mut y) = (x, y);
    for l in &summed {
        let (i, j) = (pos(&lx, l), pos(&ly, l));
        if x.shape()[i] != y.shape()[j] {
            if x.shape()[i] == 1 {
                y = sum(&y, Some(&[j as i64]), true)?;
            } else {
                x = sum(&x, Some(&[i as i64]), true)?;
            }
        }
    }
    let mut labels = batch.clone();
    labels.extend(&free_x);
    labels.extend(&free_y);
    let nb = batch.len();
    if summed.is_empty() {
        let xt = transpose(&x, Some(&order(&lx, &[&batch, &free_x])))?;
        let yt = transpose(&y, Some(&order(&ly, &[&batch, &free_y])))?;
        let mut xs = dims(&x, &lx, &batch);
        xs.extend(dims(&x, &lx, &free_x));
        xs.extend(std::iter::repeat_n(1, free_y.len()));
        let mut ys = dims(&y, &ly, &batch);
        ys.extend(std::iter::repeat_n(1, free_x.len()));
        ys.extend(dims(&y, &ly, &free_y));
        let out = multiply(&reshape(&xt, &xs)?, &reshape(&yt, &ys)?)?;
        return Ok((out, labels));
    }
    let prod = |v: Vec<i64>| v.iter().product::<i64>();
    let xt = transpose(&x, Some(&order(&lx, &[&batch, &free_x, &summed])))?;
    let yt = transpose(&y, Some(&order(&ly, &[&batch, &summed, &free_y])))?;
    let mut xs = dims(&x, &lx, &batch);
    xs.extend([prod(dims(&x, &lx, &free_x)), prod(dims(&x, &lx, &summed))]);
    let mut ys = dims(&y, &ly, &batch);
    ys.extend([prod(dims(&y, &ly, &summed)), prod(dims(&y, &ly, &free_y))]);
    let out = matmul(&reshape(&xt, &xs)?, &reshape(&yt, &ys)?)?;
    let mut shape: Vec<i64> = out.shape()[..nb].iter().map(|&d| d as i64).collect();
    shape.extend(dims(&x, &lx, &free_x));
    shape.extend(dims(&y, &ly, &free_y));
    Ok((reshape(&out, &shape)?, labels))
}
