//! compile's own graph: a flat, topologically ordered list of primitive calls over numbered
//! inputs and frozen constants, captured once from a trace and replayed per call. Owning
//! the nodes as plain data (not live `Array`s) lets the passes rewrite them freely and keeps
//! traced graphs from pinning memory.

use crate::array::{Array, OpCall};
use kiln_base::shape::fmt_shape;
use kiln_base::{DType, Primitive, Result, Shape, Stream};
use rustc_hash::FxHashMap;
use std::sync::Arc;

/// Where a node reads a value from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Value {
    /// The compiled function's input `i`.
    Input(usize),
    /// Frozen constant `i` (an array the function closed over, or a subgraph that does not
    /// depend on the inputs).
    Const(usize),
    /// Output `k` of node `i`.
    Node(usize, usize),
}

/// One primitive call.
#[derive(Debug, Clone)]
pub struct Node {
    pub prim: Primitive,
    pub inputs: Vec<Value>,
    /// Shape and dtype of each output at trace time.
    pub outputs: Vec<(Shape, DType)>,
    pub stream: Stream,
}

/// A traced function: nodes in topological order (inputs before users).
#[derive(Debug, Clone)]
pub struct Graph {
    pub inputs: Vec<(Shape, DType)>,
    pub consts: Vec<Array>,
    pub nodes: Vec<Node>,
    pub outputs: Vec<Value>,
}

fn node_key(a: &Array) -> usize {
    Arc::as_ptr(&a.0) as usize
}

impl Graph {
    /// Captures the calls between `inputs` (the trace's placeholders) and `outputs`.
    /// Everything that does not depend on an input becomes a constant. Reaching one of
    /// `arguments` (the real arrays the placeholders stand for) means the function read an
    /// argument through a closure: an error, since the graph would freeze that value.
    pub fn capture(inputs: &[Array], outputs: &[Array], arguments: &[Array]) -> Result<Graph> {
        let forbidden: rustc_hash::FxHashSet<usize> = arguments.iter().map(node_key).collect();
        let mut graph = Graph {
            inputs: inputs.iter().map(|a| (Shape::from(a.shape()), a.dtype())).collect(),
            consts: Vec::new(),
            nodes: Vec::new(),
            outputs: Vec::new(),
        };
        // Value of every node seen; calls already emitted (by OpCall address).
        let mut values: FxHashMap<usize, Value> = FxHashMap::default();
        let mut calls: FxHashMap<usize, usize> = FxHashMap::default();
        for (i, a) in inputs.iter().enumerate() {
            values.entry(node_key(a)).or_insert(Value::Input(i));
        }
        let depends = |v: &Value| !matches!(v, Value::Const(_));
        // Iterative post-order: (array, inputs pushed already).
        let mut stack: Vec<(Array, bool)> =
            outputs.iter().rev().map(|a| (a.clone(), false)).collect();
        while let Some((array, expanded)) = stack.pop() {
            let key = node_key(&array);
            if values.contains_key(&key) {
                continue;
            }
            kiln_base::ensure!(
                !forbidden.contains(&key),
                Value,
                "compile",
                "The function uses one of its array arguments through a closure instead of \
                 its parameter; pass it as an argument (or capture it with inputs=)."
            );
            let call = match array.call() {
                Some(c) => c,
                None => {
                    values.insert(key, graph.constant(&array));
                    continue;
                }
            };
            if !expanded {
                stack.push((array, true));
                for input in call.inputs.iter().rev() {
                    if !values.contains_key(&node_key(input)) {
                        stack.push((input.clone(), false));
                    }
                }
                continue;
            }
            let ins: Vec<Value> = call.inputs.iter().map(|i| values[&node_key(i)]).collect();
            // A broadcast of a constant stays a node: it is free (a view), and keeping the
            // 0-d constant underneath lets simplify merge scalars and fuse inline literals.
            let broadcast_of_const = matches!(call.prim, Primitive::BroadcastTo { .. })
                && matches!(ins.as_slice(), [Value::Const(_)]);
            if !ins.iter().any(depends) && !broadcast_of_const {
                values.insert(key, graph.constant(&array));
                continue;
            }
            let index = array.output_index().unwrap_or(0);
            let call_key = Arc::as_ptr(&call) as usize;
            let node = match calls.get(&call_key) {
                Some(&n) => n,
                None => {
                    graph.nodes.push(node_of(&call, ins, array.stream()));
                    calls.insert(call_key, graph.nodes.len() - 1);
                    graph.nodes.len() - 1
                }
            };
            values.insert(key, Value::Node(node, index));
        }
        graph.outputs = outputs.iter().map(|a| values[&node_key(a)]).collect();
        Ok(graph)
    }

    fn constant(&mut self, array: &Array) -> Value {
        self.consts.push(array.clone());
        Value::Const(self.consts.len() - 1)
    }

    /// Shape and dtype of a value.
    pub fn meta(&self, v: Value) -> (&[usize], DType) {
        match v {
            Value::Input(i) => (&self.inputs[i].0, self.inputs[i].1),
            Value::Const(i) => (self.consts[i].shape(), self.consts[i].dtype()),
            Value::Node(n, k) => (&self.nodes[n].outputs[k].0, self.nodes[n].outputs[k].1),
        }
    }

    /// One line per node (explain, tests): `n3 = multiply(in0, c1) : (2, 3) float32`.
    pub fn describe(&self) -> Vec<String> {
        let name = |v: &Value| match v {
            Value::Input(i) => format!("in{i}"),
            Value::Const(i) => format!("c{i}"),
            Value::Node(n, 0) => format!("n{n}"),
            Value::Node(n, k) => format!("n{n}.{k}"),
        };
        let mut lines = Vec::with_capacity(self.nodes.len() + 1);
        for (i, node) in self.nodes.iter().enumerate() {
            let args: Vec<String> = node.inputs.iter().map(name).collect();
            let outs: Vec<String> =
                node.outputs.iter().map(|(s, d)| format!("{} {d}", fmt_shape(s))).collect();
            let prim = match &node.prim {
                Primitive::Fused(p) => p.name(),
                p => p.name().to_string(),
            };
            lines.push(format!("n{i} = {prim}({}) : {}", args.join(", "), outs.join(", ")));
        }
        let outs: Vec<String> = self.outputs.iter().map(name).collect();
        lines.push(format!("return {}", outs.join(", ")));
        lines
    }
}

fn node_of(call: &OpCall, inputs: Vec<Value>, stream: Stream) -> Node {
    Node { prim: call.prim.clone(), inputs, outputs: call.output_meta.clone(), stream }
}
