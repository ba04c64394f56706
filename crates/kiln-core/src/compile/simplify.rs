//! Graph simplification, each pass one linear walk with hash maps:
//! - no-ops (`identity`, `stop_gradient`, `copy`) forward their input;
//! - equal scalar constants (0-d, same dtype and bits) merge into one;
//! - common subexpressions merge: same primitive with the same parameters (so `log` and
//!   `log2`, or `equal` with and without `equal_nan`, stay apart) on the same inputs
//!   (collectives excepted: each is an exchange the other processes make too);
//! - dead nodes (no path to an output) go;
//! - a matrix product read only transposed is computed transposed, `(A @ B)^T = B^T @ A^T`
//!   (transposed operands cost a product nothing), so its result is row-major: a Linear
//!   layer's weight gradient is `transpose(x^T @ g)`, which the optimizer and
//!   `average_gradients`' flattening would otherwise read, or copy, across strides;
//! - (`fold_counts`, for graphs replayed at their traced shapes) element counts become
//!   constants.

use super::captured::{Graph, Node, Value};
use crate::array::Array;
use kiln_base::{DType, Primitive, Scalar};
use rustc_hash::FxHashMap;

pub fn simplify(graph: &Graph) -> Graph {
    let merged = remove_dead(&merge(graph));
    transpose_products(&merged)
}

/// Whether `perm` swaps the last two axes and keeps the others.
fn swaps_last_two(perm: &[usize]) -> bool {
    let n = perm.len();
    n >= 2
        && perm[n - 2] == n - 1
        && perm[n - 1] == n - 2
        && perm[..n - 2].iter().enumerate().all(|(i, &p)| p == i)
}

/// `transpose(matmul(A, B))`, where the product has no other reader, becomes
/// `matmul(transpose(B), transpose(A))` (see the module's comment).
fn transpose_products(graph: &Graph) -> Graph {
    let mut readers = vec![0usize; graph.nodes.len()];
    for v in graph.nodes.iter().flat_map(|n| n.inputs.iter()).chain(graph.outputs.iter()) {
        if let Value::Node(n, _) = v {
            readers[*n] += 1;
        }
    }
    // Transpose node -> the product it reads, for each rewrite.
    let mut rewrites: FxHashMap<usize, usize> = FxHashMap::default();
    for (i, node) in graph.nodes.iter().enumerate() {
        let (Primitive::Transpose { perm }, [Value::Node(m, 0)]) = (&node.prim, &node.inputs[..])
        else {
            continue;
        };
        let product = &graph.nodes[*m];
        let matrices = product.inputs.iter().all(|v| graph.meta(*v).0.len() >= 2);
        if matches!(product.prim, Primitive::Matmul)
            && readers[*m] == 1
            && product.stream == node.stream
            && matrices
            && swaps_last_two(perm)
        {
            rewrites.insert(i, *m);
        }
    }
    if rewrites.is_empty() {
        return graph.clone();
    }
    let products: rustc_hash::FxHashSet<usize> = rewrites.values().copied().collect();
    let mut out = Graph {
        inputs: graph.inputs.clone(),
        consts: graph.consts.clone(),
        nodes: Vec::new(),
        outputs: Vec::new(),
    };
    let mut node_map: Vec<Vec<Value>> = Vec::with_capacity(graph.nodes.len());
    let map = |v: Value, node_map: &Vec<Vec<Value>>| match v {
        Value::Node(n, k) => node_map[n][k],
        other => other,
    };
    for (i, node) in graph.nodes.iter().enumerate() {
        if products.contains(&i) {
            node_map.push(Vec::new()); // read only by its transpose, rewritten below
            continue;
        }
        let Some(&m) = rewrites.get(&i) else {
            let inputs = node.inputs.iter().map(|&v| map(v, &node_map)).collect();
            out.nodes.push(Node { inputs, ..node.clone() });
            let n = out.nodes.len() - 1;
            node_map.push((0..node.outputs.len()).map(|k| Value::Node(n, k)).collect());
            continue;
        };
        let swapped = |v: Value, out: &mut Graph| {
            let (shape, dtype) = graph.meta(v);
            let mut t_shape = kiln_base::Shape::from(shape);
            let r = t_shape.len();
            t_shape.swap(r - 2, r - 1);
            let perm = (0..r - 2).chain([r - 1, r - 2]).collect();
            out.nodes.push(Node {
                prim: Primitive::Transpose { perm },
                inputs: vec![map(v, &node_map)],
                outputs: vec![(t_shape, dtype)],
                stream: node.stream,
            });
            Value::Node(out.nodes.len() - 1, 0)
        };
        let [a, b] = [graph.nodes[m].inputs[0], graph.nodes[m].inputs[1]];
        let bt = swapped(b, &mut out);
        let at = swapped(a, &mut out);
        out.nodes.push(Node {
            prim: Primitive::Matmul,
            inputs: vec![bt, at],
            outputs: node.outputs.clone(),
            stream: node.stream,
        });
        node_map.push(vec![Value::Node(out.nodes.len() - 1, 0)]);
    }
    out.outputs = graph.outputs.iter().map(|&v| map(v, &node_map)).collect();
    out
}

/// Replaces each `NumberOfElements` node by the constant its traced input shape gives, so
/// the count fuses as a literal (the node stays only in shapeless graphs, whose shapes
/// change at replay). The node itself becomes dead.
pub fn fold_counts(graph: &Graph) -> Graph {
    let mut out = graph.clone();
    let mut folded: FxHashMap<usize, usize> = FxHashMap::default();
    for (i, node) in graph.nodes.iter().enumerate() {
        if let Primitive::NumberOfElements { axes, inverted, dtype } = &node.prim {
            let shape = graph.meta(node.inputs[0]).0;
            let n: f64 = axes.iter().map(|&a| shape[a] as f64).product();
            let value = Scalar::Float(if *inverted { 1.0 / n } else { n });
            if let Ok(c) = crate::ops::scalar(value, *dtype) {
                out.consts.push(c);
                folded.insert(i, out.consts.len() - 1);
            }
        }
    }
    if folded.is_empty() {
        return out;
    }
    let map = |v: &mut Value| {
        if let Value::Node(n, 0) = *v {
            if let Some(&c) = folded.get(&n) {
                *v = Value::Const(c);
            }
        }
    };
    out.nodes.iter_mut().flat_map(|n| n.inputs.iter_mut()).for_each(map);
    out.outputs.iter_mut().for_each(map);
    remove_dead(&out)
}

/// The bits of a 0-d evaluated constant (its identity for merging).
fn scalar_bits(a: &Array) -> Option<(DType, Vec<u8>)> {
    if a.ndim() != 0 || !a.is_evaluated() {
        return None;
    }
    a.to_bytes().ok().map(|b| (a.dtype(), b))
}

/// No-op forwarding, scalar merging and CSE in one forward walk.
fn merge(graph: &Graph) -> Graph {
    let mut out = Graph {
        inputs: graph.inputs.clone(),
        consts: Vec::new(),
        nodes: Vec::new(),
        outputs: Vec::new(),
    };
    // Old constant -> new constant, merging equal scalars and repeated arrays.
    let mut scalars: FxHashMap<(DType, Vec<u8>), usize> = FxHashMap::default();
    let mut by_node: FxHashMap<usize, usize> = FxHashMap::default();
    let mut const_map = Vec::with_capacity(graph.consts.len());
    for c in &graph.consts {
        let id = std::sync::Arc::as_ptr(&c.0) as usize;
        let existing = match scalar_bits(c) {
            Some(key) => scalars.get(&key).copied().or_else(|| {
                scalars.insert(key, out.consts.len());
                None
            }),
            None => by_node.get(&id).copied(),
        };
        let index = existing.unwrap_or_else(|| {
            out.consts.push(c.clone());
            out.consts.len() - 1
        });
        by_node.insert(id, index);
        const_map.push(index);
    }
    // Old node -> new value of each of its outputs.
    let mut node_map: Vec<Vec<Value>> = Vec::with_capacity(graph.nodes.len());
    let mut seen: FxHashMap<(Primitive, Vec<Value>), usize> = FxHashMap::default();
    let map = |v: Value, node_map: &Vec<Vec<Value>>| match v {
        Value::Input(i) => Value::Input(i),
        Value::Const(i) => Value::Const(const_map[i]),
        Value::Node(n, k) => node_map[n][k],
    };
    for node in &graph.nodes {
        let inputs: Vec<Value> = node.inputs.iter().map(|&v| map(v, &node_map)).collect();
        if is_noop(&node.prim)
            && inputs.len() == 1
            && graph.meta(node.inputs[0]).0 == node.outputs[0].0.as_slice()
        {
            node_map.push(vec![inputs[0]]);
            continue;
        }
        let key = (node.prim.clone(), inputs.clone());
        // Each collective is its own exchange with the other processes: never merged.
        let exchange = matches!(node.prim, Primitive::Collective(_));
        if let Some(&n) = seen.get(&key).filter(|_| !exchange) {
            if out.nodes[n].stream == node.stream {
                node_map.push((0..node.outputs.len()).map(|k| Value::Node(n, k)).collect());
                continue;
            }
        }
        out.nodes.push(Node { inputs, ..node.clone() });
        let n = out.nodes.len() - 1;
        seen.insert(key, n);
        node_map.push((0..node.outputs.len()).map(|k| Value::Node(n, k)).collect());
    }
    out.outputs = graph.outputs.iter().map(|&v| map(v, &node_map)).collect();
    out
}

fn is_noop(prim: &Primitive) -> bool {
    matches!(prim, Primitive::Identity | Primitive::StopGradient | Primitive::Copy)
}

/// Keeps the nodes and constants an output reaches, renumbered in order.
pub(crate) fn remove_dead(graph: &Graph) -> Graph {
    let mut live = vec![false; graph.nodes.len()];
    let mut live_consts = vec![false; graph.consts.len()];
    let mark = |v: &Value, live: &mut Vec<bool>, live_consts: &mut Vec<bool>| match *v {
        Value::Node(n, _) => live[n] = true,
        Value::Const(c) => live_consts[c] = true,
        Value::Input(_) => {}
    };
    for v in &graph.outputs {
        mark(v, &mut live, &mut live_consts);
    }
    // Users come after their inputs: one backward sweep finds everything reachable.
    for n in (0..graph.nodes.len()).rev() {
        if live[n] {
            for v in &graph.nodes[n].inputs {
                mark(v, &mut live, &mut live_consts);
            }
        }
    }
    let mut node_index = vec![usize::MAX; graph.nodes.len()];
    let mut const_index = vec![usize::MAX; graph.consts.len()];
    let mut out = Graph {
        inputs: graph.inputs.clone(),
        consts: Vec::new(),
        nodes: Vec::new(),
        outputs: Vec::new(),
    };
    for (c, array) in graph.consts.iter().enumerate() {
        if live_consts[c] {
            const_index[c] = out.consts.len();
            out.consts.push(array.clone());
        }
    }
    let map = |v: Value, node_index: &Vec<usize>| match v {
        Value::Input(i) => Value::Input(i),
        Value::Const(c) => Value::Const(const_index[c]),
        Value::Node(n, k) => Value::Node(node_index[n], k),
    };
    for (n, node) in graph.nodes.iter().enumerate() {
        if live[n] {
            let inputs = node.inputs.iter().map(|&v| map(v, &node_index)).collect();
            node_index[n] = out.nodes.len();
            out.nodes.push(Node { inputs, ..node.clone() });
        }
    }
    out.outputs = graph.outputs.iter().map(|&v| map(v, &node_index)).collect();
    out
}
