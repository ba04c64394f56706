//! Function transforms. Tracing transforms (compile, vmap) run the user's function on
//! placeholder arrays; this thread-local stack says which are active, so ops and eval can
//! tell a traced call from an eager one.

mod rules;

pub use rules::Rules;
use std::cell::RefCell;

/// A transform that may be tracing on this thread.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transform {
    Compile,
    Vmap,
    Grad,
}

thread_local! {
    static ACTIVE: RefCell<Vec<Transform>> = const { RefCell::new(Vec::new()) };
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
