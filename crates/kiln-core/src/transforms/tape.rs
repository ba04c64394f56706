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
    /// Every output of the call. Siblings nobody holds any more (`qr(a)[0]` drops R) are
    /// recomputed by recording the primitive again: rules need their values (R for Q's
    /// gradient); nothing runs unless a rule uses them.
    pub(crate) fn outputs_all(&self) -> kiln_base::Result<Vec<Array>> {
        if self.outputs.iter().all(Option::is_some) {
            return Ok(self.outputs.iter().flatten().cloned().collect());
        }
        let again = crate::ops::record_all(self.call.prim.clone(), self.call.inputs.to_vec())?;
        Ok(self.outputs.iter().zip(again).map(|(o, a)| o.clone().unwrap_or(a)).collect())
    }
}

/// The calls between `inputs` (the transform's tracers, treated as leaves) and `outputs`.
pub(crate) struct Tape {
    /// Calls that depend on an input, inputs before users.
    pub(crate) entries: Vec<TapeEntry>,
    /// Keys of the nodes that depend on an input (the inputs included).
    pub(crate) active: FxHashSet<usize>,
}

/// Records the tape of `outputs` over `inputs`. Differentiation (`through_stop: false`)
/// treats a `StopGradient` as a constant and never walks behind it, so nothing behind it
/// (a checkpointed function's forward graph, say) is kept alive by zero cotangents; vmap
/// walks through it (it must batch what lies behind).
pub(crate) fn tape(outputs: &[Array], inputs: &[Array], through_stop: bool) -> Tape {
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
        if !through_stop && call.prim == kiln_base::Primitive::StopGradient {
            active.insert(k, false);
            continue;
        }
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
