//! Kernel prebuild: the nodes of a compiled call a backend may build kernels for ahead of
//! the first run, and the report of one parallel batch (explain shows it).

use crate::{DType, Layout, Primitive, Shape};

/// One node a compiled call will run: its primitive, the layouts and dtypes its inputs will
/// have at the first call, and its outputs.
#[derive(Debug, Clone)]
pub struct KernelNode {
    pub prim: Primitive,
    pub inputs: Vec<(Layout, DType)>,
    pub outputs: Vec<(Shape, DType)>,
}

/// How one kernel of a batch was obtained.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BuildOutcome {
    /// Loaded in this process before the batch (nothing done).
    Memory,
    /// Loaded from the disk cache.
    Disk,
    /// Built by the backend's compiler.
    Built,
    /// The build or load failed (the kernel's launch will raise the error).
    Failed,
}

impl BuildOutcome {
    pub fn name(self) -> &'static str {
        match self {
            BuildOutcome::Memory => "memory",
            BuildOutcome::Disk => "disk",
            BuildOutcome::Built => "built",
            BuildOutcome::Failed => "failed",
        }
    }
}

/// One kernel of a batch.
#[derive(Debug, Clone)]
pub struct BuildKernel {
    pub symbol: String,
    pub outcome: BuildOutcome,
    /// Compiler time on its thread (zero unless built).
    pub build_ms: f64,
}

/// What a batch did: its kernels, threads and wall time.
#[derive(Debug, Clone, Default)]
pub struct BuildReport {
    /// The batch's number in this process.
    pub id: u64,
    /// Distinct kernels asked for, in first-seen order.
    pub kernels: Vec<BuildKernel>,
    /// Threads that worked on the batch (0 when everything was in memory).
    pub threads: usize,
    /// Wall time of the whole batch, from the first build to the last load.
    pub wall_ms: f64,
}

impl BuildReport {
    pub fn count(&self, outcome: BuildOutcome) -> usize {
        self.kernels.iter().filter(|k| k.outcome == outcome).count()
    }

    /// Compiler time summed over the batch's threads (more than `wall_ms` when they overlap).
    pub fn build_ms(&self) -> f64 {
        self.kernels.iter().map(|k| k.build_ms).sum()
    }
}
