//! Fusion: regions of elementwise nodes become one `Fused` node each.
//!
//! Regions grow from a root (visited outputs-first) towards the inputs through fusable
//! nodes (unary, binary, `where`, `astype`: all of one shape). A node joins when each user
//! of it is in the region or comes after the root in topological order: such a user cannot
//! lead back into the region (every member precedes the root), so no cycle forms and the
//! fused node, emitted at the root's place, precedes it. A member used outside the region
//! (a forward value the backward reads again) or returned by the graph becomes an extra
//! kernel output. Broadcasts
//! stay outside as views (free; the kernel reads them with zero strides), and a broadcast
//! 0-d constant becomes a literal in the source. A region of one op is left alone (the
//! eager kernel is as good).

use super::captured::{Graph, Node, Value};
use kiln_base::{DType, FusedOp, FusedProgram, FusedStep, Primitive, Scalar};
use rustc_hash::FxHashMap;
use std::sync::Arc;

/// Why a region stopped growing at a border (explain).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Region {
    /// The fused node's name (`Compiled_...`).
    pub name: String,
    /// Ops inside.
    pub size: usize,
    /// Each border input and the reason fusion stopped there.
    pub borders: Vec<String>,
    /// The member nodes (indices into the graph fuse ran on: the simplified one) and each
    /// border as (outside node, member it feeds, reason): the report draws them.
    pub members: Vec<usize>,
    pub border_edges: Vec<(usize, usize, &'static str)>,
}

/// The most inputs one fused kernel takes: past it a region stops growing (the border says
/// so). Keeps the kernel's argument list, register pressure and the strided variant's
/// per-input offsets bounded.
pub const MAX_KERNEL_INPUTS: usize = 24;

/// Whether `v` enters a region's kernel as an input (not a literal, not computed inside).
fn is_kernel_input(graph: &Graph, v: Value, region_of: &[usize], id: usize) -> bool {
    match v {
        Value::Node(p, _) if region_of[p] == id => false,
        _ => literal(graph, v).is_none(),
    }
}

fn fusable(graph: &Graph, node: &Node) -> bool {
    // Generated CUDA C has complex64 (`kc64` in its preamble), generated C does not: on the
    // CPU complex values stay with the eager kernels; on the GPU a complex node fuses when
    // the GPU backend computes it (its `supports`).
    let dtypes =
        || node.outputs.iter().map(|o| o.1).chain(node.inputs.iter().map(|v| graph.meta(*v).1));
    if dtypes().any(|d| d == DType::C64) {
        let on_gpu = node.stream.device.kind == kiln_base::DeviceKind::Gpu;
        if !on_gpu || !crate::eval::gpu_runs(&node.prim, dtypes()) {
            return false;
        }
    }
    match &node.prim {
        Primitive::Unary(op) => kiln_codegen::c::supports_unary(*op, node.outputs[0].1),
        Primitive::Binary(_) | Primitive::Where | Primitive::AsType(_) => true,
        _ => false,
    }
}

/// A literal for a value that is one scalar constant (maybe broadcast).
fn literal(graph: &Graph, v: Value) -> Option<Scalar> {
    let c = match v {
        Value::Const(c) => c,
        Value::Node(n, 0) => match (&graph.nodes[n].prim, graph.nodes[n].inputs.as_slice()) {
            (Primitive::BroadcastTo { .. }, [Value::Const(c)]) => *c,
            _ => return None,
        },
        _ => return None,
    };
    let a = &graph.consts[c];
    if a.size() != 1 || a.is_placeholder() {
        return None;
    }
    // Constants do not depend on the inputs: evaluating one now is what replay would do.
    crate::ops::scalar_value(a).ok()
}

/// A region's program, its input values, and the member each kernel output is.
type Built = (FusedProgram, Vec<Value>, Vec<usize>);

/// Fuses `graph`; returns the new graph and what each region is.
pub fn fuse(graph: &Graph) -> (Graph, Vec<Region>) {
    let n = graph.nodes.len();
    // Users of each node (by node index), and whether a node output is a graph output.
    let mut users: Vec<Vec<usize>> = vec![Vec::new(); n];
    for (i, node) in graph.nodes.iter().enumerate() {
        for v in &node.inputs {
            if let Value::Node(p, _) = v {
                if !users[*p].contains(&i) {
                    users[*p].push(i);
                }
            }
        }
    }
    let mut is_output = vec![false; n];
    for v in &graph.outputs {
        if let Value::Node(p, _) = v {
            is_output[*p] = true;
        }
    }
    let mut region_of = vec![usize::MAX; n];
    let mut regions: Vec<Vec<usize>> = Vec::new();
    let mut reports = Vec::new();
    for root in (0..n).rev() {
        if region_of[root] != usize::MAX || !fusable(graph, &graph.nodes[root]) {
            continue;
        }
        let id = regions.len();
        let shape = &graph.nodes[root].outputs[0].0;
        let mut members = vec![root];
        region_of[root] = id;
        let mut borders = Vec::new();
        let mut edges = Vec::new();
        // The region's kernel inputs so far (bounded by MAX_KERNEL_INPUTS).
        let mut ins: rustc_hash::FxHashSet<Value> = graph.nodes[root]
            .inputs
            .iter()
            .copied()
            .filter(|&v| is_kernel_input(graph, v, &region_of, id))
            .collect();
        let mut frontier = vec![root];
        while let Some(m) = frontier.pop() {
            for v in &graph.nodes[m].inputs {
                let Value::Node(p, _) = *v else { continue };
                if region_of[p] == id {
                    continue;
                }
                let node = &graph.nodes[p];
                let name = node.prim.name();
                let reason = if region_of[p] != usize::MAX {
                    Some("in another region")
                } else if !fusable(graph, node) {
                    Some("not fusable")
                } else if node.outputs[0].0 != *shape {
                    Some("another shape")
                } else if node.stream != graph.nodes[root].stream {
                    Some("another stream")
                } else if !users[p].iter().all(|&u| region_of[u] == id || u > root) {
                    Some("used outside the region")
                } else {
                    let added = node
                        .inputs
                        .iter()
                        .filter(|&&w| {
                            !ins.contains(&w) && is_kernel_input(graph, w, &region_of, id)
                        })
                        .count();
                    // p's own value stops being an input once it is computed inside.
                    if ins.len() - usize::from(ins.contains(v)) + added > MAX_KERNEL_INPUTS {
                        Some("kernel input limit (MAX_KERNEL_INPUTS)")
                    } else {
                        None
                    }
                };
                match reason {
                    Some(r) => {
                        if !matches!(node.prim, Primitive::BroadcastTo { .. }) {
                            borders.push(format!("{name}: {r}"));
                            edges.push((p, m, r));
                        }
                    }
                    None => {
                        region_of[p] = id;
                        members.push(p);
                        frontier.push(p);
                        ins.remove(v);
                        for &w in &node.inputs {
                            if is_kernel_input(graph, w, &region_of, id) {
                                ins.insert(w);
                            }
                        }
                    }
                }
            }
        }
        // A kernel of literals alone would have no input to take its shape from (a lazy
        // constant captured by the trace, such as a layer's initial weights): left eager.
        if members.len() < 2 || ins.is_empty() {
            for &m in &members {
                region_of[m] = usize::MAX;
            }
            continue;
        }
        members.sort_unstable();
        regions.push(members);
        reports.push((borders, edges));
    }

    // Rebuild: regions become one node at their root's position.
    let mut out = Graph {
        inputs: graph.inputs.clone(),
        consts: graph.consts.clone(),
        nodes: Vec::new(),
        outputs: Vec::new(),
    };
    let mut node_map: Vec<Vec<Value>> = vec![Vec::new(); n];
    let mut programs: Vec<Option<Built>> = Vec::new();
    for members in &regions {
        programs.push(Some(build_program(graph, members, &users, &is_output, &region_of)));
    }
    let mut region_reports = Vec::new();
    for i in 0..n {
        let map = |v: Value, node_map: &Vec<Vec<Value>>| match v {
            Value::Node(p, k) => node_map[p][k],
            other => other,
        };
        let r = region_of[i];
        if r == usize::MAX {
            let inputs = graph.nodes[i].inputs.iter().map(|&v| map(v, &node_map)).collect();
            out.nodes.push(Node { inputs, ..graph.nodes[i].clone() });
            let idx = out.nodes.len() - 1;
            node_map[i] = (0..graph.nodes[i].outputs.len()).map(|k| Value::Node(idx, k)).collect();
            continue;
        }
        let members = &regions[r];
        if members.last() != Some(&i) {
            continue; // emitted with the root (the region's last node in order)
        }
        let Some((program, inputs, produced)) = programs[r].take() else { continue };
        let inputs: Vec<Value> = inputs.into_iter().map(|v| map(v, &node_map)).collect();
        let shape = graph.nodes[i].outputs[0].0.clone();
        let outputs = program.output_dtypes().into_iter().map(|d| (shape.clone(), d)).collect();
        let (borders, border_edges) = std::mem::take(&mut reports[r]);
        let report = Region {
            name: program.name(),
            size: members.len(),
            borders,
            members: members.clone(),
            border_edges,
        };
        out.nodes.push(Node {
            prim: Primitive::Fused(Arc::new(program)),
            inputs,
            outputs,
            stream: graph.nodes[i].stream,
        });
        let idx = out.nodes.len() - 1;
        for (k, &m) in produced.iter().enumerate() {
            node_map[m] = vec![Value::Node(idx, k)];
        }
        region_reports.push(report);
    }
    out.outputs = graph
        .outputs
        .iter()
        .map(|&v| match v {
            Value::Node(p, k) => node_map[p][k],
            other => other,
        })
        .collect();
    (out, region_reports)
}

/// The program of one region (members in topological order, the root last), its input
/// values, and which member each kernel output is.
fn build_program(
    graph: &Graph,
    members: &[usize],
    users: &[Vec<usize>],
    is_output: &[bool],
    region_of: &[usize],
) -> Built {
    let root = *members.last().expect("regions are not empty");
    let id = region_of[root];
    let mut steps: Vec<FusedStep> = Vec::new();
    let mut input_dtypes = Vec::new();
    let mut inputs: Vec<Value> = Vec::new();
    let mut step_of: FxHashMap<Value, usize> = FxHashMap::default();
    let operand = |v: Value,
                   steps: &mut Vec<FusedStep>,
                   step_of: &mut FxHashMap<Value, usize>,
                   inputs: &mut Vec<Value>,
                   input_dtypes: &mut Vec<kiln_base::DType>|
     -> usize {
        if let Some(&s) = step_of.get(&v) {
            return s;
        }
        let dtype = graph.meta(v).1;
        let op = match literal(graph, v) {
            Some(value) => FusedOp::Literal(value),
            None => {
                inputs.push(v);
                input_dtypes.push(dtype);
                FusedOp::Input(inputs.len() - 1)
            }
        };
        steps.push(FusedStep { op, dtype });
        step_of.insert(v, steps.len() - 1);
        steps.len() - 1
    };
    let mut outputs = Vec::new();
    let mut produced = Vec::new();
    for &m in members {
        let node = &graph.nodes[m];
        let ops: Vec<usize> = node
            .inputs
            .iter()
            .map(|&v| operand(v, &mut steps, &mut step_of, &mut inputs, &mut input_dtypes))
            .collect();
        let op = match &node.prim {
            Primitive::Unary(u) => FusedOp::Unary(*u, ops[0]),
            Primitive::Binary(b) => FusedOp::Binary(*b, ops[0], ops[1]),
            Primitive::Where => FusedOp::Where(ops[0], ops[1], ops[2]),
            Primitive::AsType(_) => FusedOp::AsType(ops[0]),
            _ => unreachable!("regions hold fusable nodes only"),
        };
        steps.push(FusedStep { op, dtype: node.outputs[0].1 });
        let s = steps.len() - 1;
        step_of.insert(Value::Node(m, 0), s);
        let needed_outside = users[m].iter().any(|u| region_of[*u] != id);
        if m == root || is_output[m] || needed_outside {
            outputs.push(s);
            produced.push(m);
        }
    }
    (FusedProgram { inputs: input_dtypes, steps, outputs }, inputs, produced)
}
