//! The one error type of kiln. Every message starts with the op's name in brackets, as MLX's do:
//! `[reshape] Cannot reshape array of size 6 into shape (4, 2).` The Python layer maps each
//! variant to an exception class in one place (`kiln-python/src/error.rs`).

use thiserror::Error;

/// What went wrong, by category; the category decides the Python exception class.
#[derive(Debug, Clone, Error, PartialEq, Eq)]
pub enum Error {
    /// Bad shapes, axes, or argument values (Python `ValueError`).
    #[error("[{op}] {msg}")]
    Value { op: &'static str, msg: String },
    /// An index out of range (Python `IndexError`).
    #[error("[{op}] {msg}")]
    Index { op: &'static str, msg: String },
    /// An unsupported dtype or argument type (Python `TypeError`).
    #[error("[{op}] {msg}")]
    Type { op: &'static str, msg: String },
    /// Device, backend, memory or compiler failures (Python `RuntimeError`).
    #[error("[{op}] {msg}")]
    Runtime { op: &'static str, msg: String },
    /// A transform rule kiln does not have yet (Python `NotImplementedError`).
    #[error("[{op}] {msg}")]
    Unsupported { op: &'static str, msg: String },
    /// The evaluation was stopped by a Ctrl-C (Python `KeyboardInterrupt`); see `interrupt`.
    #[error("[{op}] Evaluation interrupted.")]
    Interrupted { op: &'static str },
}

impl Error {
    /// The op that raised the error.
    pub fn op(&self) -> &'static str {
        match self {
            Error::Value { op, .. }
            | Error::Index { op, .. }
            | Error::Type { op, .. }
            | Error::Runtime { op, .. }
            | Error::Unsupported { op, .. }
            | Error::Interrupted { op } => op,
        }
    }
}

/// kiln's result alias.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Returns early with an error: `bail!(Value, "reshape", "bad shape {:?}", s)`.
#[macro_export]
macro_rules! bail {
    ($kind:ident, $op:expr, $($fmt:tt)+) => {
        return Err($crate::Error::$kind { op: $op, msg: format!($($fmt)+) })
    };
}

/// Returns early with an error unless the condition holds.
#[macro_export]
macro_rules! ensure {
    ($cond:expr, $kind:ident, $op:expr, $($fmt:tt)+) => {
        if !$cond {
            $crate::bail!($kind, $op, $($fmt)+);
        }
    };
}
