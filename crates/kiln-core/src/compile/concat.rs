//! Sums of zero-padded slices become one concatenate.
//!
//! The gradient of splitting an array into pieces along an axis (`q, k, v = qkv`, `split`)
//! pads each piece's cotangent back to full size with a `slice_update` into zeros and adds
//! the results: k full-size copies and k - 1 full-size adds. When the pieces tile the axis
//! exactly, the sum is their concatenation: one pass writing the result once.

use super::captured::{Graph, Value};
use kiln_base::{BinaryOp, Primitive};

/// Rewrites every qualifying sum in place (the slice_updates it no longer reads are left
/// for dead-code removal).
pub fn sums_of_padded_slices(graph: &mut Graph) -> usize {
    let mut users = vec![0usize; graph.nodes.len()];
    for node in &graph.nodes {
        for v in &node.inputs {
            if let Value::Node(n, _) = v {
                users[*n] += 1;
            }
        }
    }
    for v in &graph.outputs {
        if let Value::Node(n, _) = v {
            users[*n] += 1;
        }
    }
    let mut rewritten = 0;
    // Roots are visited after the adds below them, so a root's operands are still adds.
    for root in (0..graph.nodes.len()).rev() {
        if !is_add(graph, root) {
            continue;
        }
        let mut terms = Vec::new();
        if !collect_terms(graph, &users, Value::Node(root, 0), true, &mut terms) {
            continue;
        }
        if let Some((axis, pieces)) = tiling(graph, &terms) {
            let node = &mut graph.nodes[root];
            node.prim = Primitive::Concatenate { axis };
            node.inputs = pieces;
            rewritten += 1;
        }
    }
    rewritten
}

fn is_add(graph: &Graph, n: usize) -> bool {
    matches!(graph.nodes[n].prim, Primitive::Binary(BinaryOp::Add))
}

/// The leaves of an add tree whose inner adds have no other user; false when a leaf is
/// anything but a node.
fn collect_terms(
    graph: &Graph,
    users: &[usize],
    v: Value,
    root: bool,
    terms: &mut Vec<usize>,
) -> bool {
    let Value::Node(n, 0) = v else { return false };
    if is_add(graph, n) && (root || users[n] == 1) {
        let inputs = graph.nodes[n].inputs.clone();
        return inputs.iter().all(|&i| collect_terms(graph, users, i, false, terms));
    }
    terms.push(n);
    true
}

/// When every term is `slice_update(zeros, piece)` over the same shape and dtype, the
/// slices step 1 and span everything but one axis, and together they tile that axis: the
/// axis and the pieces in order along it.
fn tiling(graph: &Graph, terms: &[usize]) -> Option<(usize, Vec<Value>)> {
    if terms.len() < 2 {
        return None;
    }
    let out = &graph.nodes[terms[0]].outputs[0];
    let mut axis = None;
    let mut spans = Vec::with_capacity(terms.len());
    for &t in terms {
        let node = &graph.nodes[t];
        let Primitive::SliceUpdate { start, step, len } = &node.prim else { return None };
        if &node.outputs[0] != out || !is_zeros(graph, node.inputs[0]) {
            return None;
        }
        if step.iter().any(|&s| s != 1) {
            return None;
        }
        // The axis this slice cuts: the one dim not taken whole.
        let cut: Vec<usize> = (0..len.len()).filter(|&d| len[d] != out.0[d]).collect();
        let a = match (cut.as_slice(), axis) {
            ([d], None) => *d,
            ([d], Some(a)) if *d == a => a,
            ([], Some(a)) => a,
            _ => return None,
        };
        axis = Some(a);
        spans.push((start[a], len[a], node.inputs[1]));
    }
    let axis = axis?;
    spans.sort_by_key(|s| s.0);
    let mut at = 0;
    for &(start, len, _) in &spans {
        if start != at {
            return None;
        }
        at += len;
    }
    (at == out.0[axis]).then(|| (axis, spans.into_iter().map(|s| s.2).collect()))
}

/// A broadcast of a constant zero (as the gradient's padding is).
fn is_zeros(graph: &Graph, v: Value) -> bool {
    let Value::Node(n, 0) = v else { return false };
    let node = &graph.nodes[n];
    let (Primitive::BroadcastTo { .. }, [Value::Const(c)]) = (&node.prim, node.inputs.as_slice())
    else {
        return false;
    };
    let c = &graph.consts[*c];
    c.size() == 1 && c.is_evaluated() && c.to_bytes().is_ok_and(|b| b.iter().all(|&x| x == 0))
}

#[cfg(test)]
mod tests {
    use crate::array::Array;
    use crate::compile::trace;
    use crate::ops;

    #[test]
    fn split_gradient_becomes_a_concatenate() {
        let x =
            Array::from_slice(&(0..24).map(|v| v as f32).collect::<Vec<_>>(), &[2, 12]).unwrap();
        let f = |xs: &[Array]| -> kiln_base::Result<Vec<Array>> {
            let g = crate::transforms::grad(
                |a: &[Array]| {
                    let parts = ops::split(&a[0], &ops::SplitSpec::Sections(3), 1)?;
                    let p = ops::multiply(&ops::multiply(&parts[0], &parts[1])?, &parts[2])?;
                    ops::sum(&p, None, false)
                },
                &xs[..1],
                &[0],
            )?;
            Ok(g)
        };
        let compiled = trace(f, std::slice::from_ref(&x), false).unwrap();
        let names: Vec<String> =
            compiled.graph().nodes.iter().map(|n| n.prim.name().into()).collect();
        assert!(names.iter().any(|n| n == "concatenate"), "{names:?}");
        assert!(!names.iter().any(|n| n == "slice_update"), "{names:?}");
        let got = compiled.replay(std::slice::from_ref(&x)).unwrap()[0].to_vec::<f32>().unwrap();
        let want = f(std::slice::from_ref(&x)).unwrap()[0].to_vec::<f32>().unwrap();
        assert_eq!(got, want);
    }
}
