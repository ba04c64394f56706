//! The part of a traced graph a transform differentiates: the primitive calls that depend on
//! the transform's inputs, in topological order. Walked iteratively (graphs may be deep).

use crate::array::{Array, OpCall};
use rustc_hash::{FxHashMap, FxHashSet};
use std::sync::Arc;

/// A node's identity while the graph is alive.
pub(crate) fn key(a: &Array) -> usize {
    Arc::as_ptr(&a.0) as usize
}

/// One call on the tape, with its outputs (dropped siblings are `None`).
pub(crate) struct TapeEntry {
    pub(crate) call: Arc<OpCall>,
    pub(crate) outputs: Vec<Option<Array>>,
}

impl TapeEntry {
    /// Output `i`, or zeros of its shape when nothing holds it any more.
    pub(crate) fn output(&self, i: usize) -> kiln_base::Result<Array> {
        match &self.outputs[i] {
            Some(a) => Ok(a.clone()),
            None => {
                let (shape, dtype) = &self.call.output_meta[i];
                crate::ops::zeros(shape, *dtype)
            }
        }
    }
}

/// The calls between `inputs` (the transform's tracers, treated as leaves) and `outputs`.
pub(crate) struct Tape {
    /// Calls that depend on an input, inputs before users.
    pub(crate) entries: Vec<TapeEntry>,
    /// Keys of the nodes that depend on an input (the inputs included).
    pub(crate) active: FxHashSet<usize>,
}

/// Records the tape of `outputs` over `inputs`.
pub(crate) fn tape(outputs: &[Array], inputs: &[Array]) -> Tape {
    let leaves: FxHashSet<usize> = inputs.iter().map(key).collect();
    // Per node: whether it depends on an input (known once its inputs are done).
    let mut active: FxHashMap<usize, bool> = FxHashMap::default();
    let mut seen_calls: FxHashSet<usize> = FxHashSet::default();
    let mut order = Vec::new();
    let mut stack: Vec<(Array, bool)> = outputs.iter().map(|a| (a.clone(), false)).collect();
    while let Some((array, expanded)) = stack.pop() {
        let k = key(&array);
        if active.contains_key(&k) && !expanded {
            continue;
        }
        if leaves.contains(&k) {
            active.insert(k, true);
            continue;
        }
        let Some(call) = array.call() else {
            active.insert(k, false); // evaluated data or a placeholder: a constant here
            continue;
        };
        if !expanded {
            active.insert(k, false); // provisional; decided after the inputs
            stack.push((array, true));
            for input in call.inputs.iter().rev() {
                if !active.contains_key(&key(input)) {
                    stack.push((input.clone(), false));
                }
            }
            continue;
        }
        let depends = call.inputs.iter().any(|i| active.get(&key(i)).copied().unwrap_or(false));
        let outs: Vec<Option<Array>> = call
            .outputs
            .get()
            .map(|v| v.iter().map(|w| w.upgrade().map(Array)).collect())
            .unwrap_or_default();
        for o in outs.iter().flatten() {
            active.insert(key(o), depends);
        }
        active.insert(k, depends);
        if depends && seen_calls.insert(Arc::as_ptr(&call) as usize) {
            order.push(TapeEntry { call, outputs: outs });
        }
    }
    let active = active.into_iter().filter(|&(_, on)| on).map(|(k, _)| k).collect();
    Tape { entries: order, active }
}
