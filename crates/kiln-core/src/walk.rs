//! Iterative graph walks (graphs may be a million nodes deep; recursion would overflow).

use crate::array::{Array, OpCall};
use rustc_hash::FxHashSet;
use std::sync::Arc;

/// An unevaluated node and the call computing it (`None`: a placeholder).
pub(crate) type Step = (Array, Option<Arc<OpCall>>);

/// The unevaluated nodes `outputs` depend on, inputs before users, each primitive call
/// once (one representative output per call), with their calls.
pub(crate) fn pending_in_order(outputs: &[Array]) -> Vec<Step> {
    let mut order = Vec::new();
    let mut seen: FxHashSet<usize> = FxHashSet::default();
    // (array, its call once its inputs were pushed)
    let mut stack: Vec<(Array, Option<Arc<OpCall>>)> =
        outputs.iter().rev().map(|a| (a.clone(), None)).collect();
    while let Some((array, expanded)) = stack.pop() {
        if let Some(call) = expanded {
            // Its inputs are in the order already (an array finished meanwhile by another
            // thread is skipped by eval).
            order.push((array, Some(call)));
            continue;
        }
        if array.is_evaluated() {
            continue;
        }
        let Some(call) = array.call() else {
            // Placeholders are reported by eval.
            if seen.insert(Arc::as_ptr(&array.0) as usize) {
                order.push((array, None));
            }
            continue;
        };
        let key = Arc::as_ptr(&call) as usize;
        if !seen.insert(key) {
            continue;
        }
        let inputs = call.clone();
        stack.push((array, Some(call)));
        for input in inputs.inputs.iter().rev() {
            if !input.is_evaluated() {
                stack.push((input.clone(), None));
            }
        }
    }
    order
}
