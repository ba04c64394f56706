//! `export_to_dot`: the unevaluated graph behind some arrays in Graphviz's DOT language, as
//! MLX writes it: arrays are ellipses (named ones by their name), primitive calls are
//! rectangles labelled with the primitive's name; a fused kernel is labelled `Compiled_`
//! followed by the names of the primitives it contains.

use crate::array::Array;
use kiln_base::Primitive;
use rustc_hash::{FxHashMap, FxHashSet};
use std::fmt::Write;
use std::sync::Arc;

fn label(prim: &Primitive) -> String {
    match prim {
        Primitive::Fused(program) => program.name(),
        p => p.name().to_string(),
    }
}

/// The DOT text of the graph that computes `outputs` (walked iteratively, each array and
/// call once); `named` gives some arrays names.
pub fn to_dot(outputs: &[Array], named: &[(String, Array)]) -> String {
    let mut names: FxHashMap<u64, String> = FxHashMap::default();
    for (name, a) in named {
        names.insert(a.id(), name.replace('"', "'"));
    }
    let node_name = |a: &Array| match names.get(&a.id()) {
        Some(n) => format!("\"{n}\""),
        None => format!("\"a{}\"", a.id()),
    };
    let mut s = String::from("digraph {\n");
    let mut seen_arrays: FxHashSet<u64> = FxHashSet::default();
    let mut seen_calls: FxHashSet<usize> = FxHashSet::default();
    let sinks: FxHashSet<u64> = outputs.iter().map(Array::id).collect();
    // Post-order: inputs are written before the calls that use them.
    let mut stack: Vec<(Array, bool)> = outputs.iter().rev().map(|a| (a.clone(), false)).collect();
    while let Some((a, expanded)) = stack.pop() {
        if seen_arrays.contains(&a.id()) {
            continue;
        }
        let Some(call) = a.call() else {
            seen_arrays.insert(a.id());
            let _ = writeln!(s, "{{ rank=source; {}; }}", node_name(&a));
            continue;
        };
        if !expanded {
            stack.push((a.clone(), true));
            for input in call.inputs.iter().rev() {
                stack.push((input.clone(), false));
            }
            continue;
        }
        seen_arrays.insert(a.id());
        let call_id = Arc::as_ptr(&call) as usize;
        if seen_calls.insert(call_id) {
            let _ =
                writeln!(s, "{{ {call_id} [label =\"{}\", shape=rectangle]; }}", label(&call.prim));
            for input in &call.inputs {
                let _ = writeln!(s, "{} -> {call_id}", node_name(input));
            }
        }
        let rank = if sinks.contains(&a.id()) { "rank=sink; " } else { "" };
        let _ = writeln!(s, "{{ {rank}{}; }}", node_name(&a));
        let _ = writeln!(s, "{call_id} -> {}", node_name(&a));
    }
    s.push_str("}\n");
    s
}
