//! Function transforms. Tracing transforms (compile, vmap) run the user's function on
//! placeholder arrays; this thread-local stack says which are active, so ops and eval can
//! tell a traced call from an eager one.

mod custom_function;
mod jvp;
pub(crate) mod rules;
mod tape;
mod vjp;
mod vmap;

pub use custom_function::{checkpoint, custom_call, CustomRules, Fun, JvpFun, VjpFun, VmapFun};
pub use jvp::jvp;
pub use rules::Rules;
use std::cell::RefCell;
pub use vjp::{grad, value_and_grad, vjp};
pub use vmap::{place_batch, vmap, vmap_outputs};

/// A transform that may be tracing on this thread.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transform {
    Compile,
    /// Marks a compile trace as shapeless (beside `Compile`): ops must not bake traced
    /// sizes into the graph where a shape-following form exists.
    Shapeless,
    Vmap,
    Grad,
}

/// Whether ops run inside a shapeless compile trace.
pub fn in_shapeless_trace() -> bool {
    ACTIVE.with(|a| a.borrow().contains(&Transform::Shapeless))
}

thread_local! {
    static ACTIVE: RefCell<Vec<Transform>> = const { RefCell::new(Vec::new()) };
}

/// Whether any transform is running on this thread.
pub fn is_active() -> bool {
    ACTIVE.with(|a| !a.borrow().is_empty())
}

/// The transforms active on this thread, innermost last.
pub fn active() -> Vec<Transform> {
    ACTIVE.with(|a| a.borrow().clone())
}

/// Marks `transform` active until the guard drops.
pub struct TransformScope(());

impl TransformScope {
    pub fn enter(transform: Transform) -> TransformScope {
        ACTIVE.with(|a| a.borrow_mut().push(transform));
        TransformScope(())
    }
}

impl Drop for TransformScope {
    fn drop(&mut self) {
        ACTIVE.with(|a| a.borrow_mut().pop());
    }
}
