//! Handles on asynchronous device work that a backend hands the core: an event at the end
//! of an evaluation, a profiler span, a captured graph. Each is opaque to the core, which
//! only waits on, reads or relaunches it.

use super::ArrayData;
use crate::{Buffer, Result};

/// Held while a thread issues device work (see `Backend::issuing`); dropping it ends that.
pub type IssueGuard = Box<dyn std::any::Any>;

/// The point in the device's queue where one evaluation's work ends.
pub trait CompletionEvent: Send + Sync {
    /// Waits until the work before the event has finished (kernel faults surface here).
    fn wait(&self) -> Result<()>;

    /// A host copy of `data`, made as soon as the work before the event is done, without
    /// waiting for work issued after it.
    fn download(&self, data: &ArrayData) -> Result<ArrayData>;
}

/// The device time of the work issued between its start and `end`.
pub trait DeviceSpan: Send {
    /// Marks the end (after the timed call's work was issued).
    fn end(&mut self);

    /// Waits for the end and returns the device time between the two, in milliseconds.
    fn elapsed_ms(self: Box<Self>) -> Option<f64>;
}

/// Recording a sequence of device work once and relaunching it as one unit.
pub trait GraphCapture: Sync {
    /// Records the work `work` issues into a graph instead of running it; returns the graph
    /// and what `work` returned (buffers the graph writes at every launch). On failure
    /// nothing stays reserved.
    fn capture(
        &self,
        work: &mut dyn FnMut() -> Result<Vec<ArrayData>>,
    ) -> Result<(Box<dyn DeviceGraph>, Vec<ArrayData>)>;

    /// Copies each source into its destination buffer in row-major order (staging copies
    /// in front of a launch, results out after it), all issued before returning.
    fn copy_all_row_major(&self, copies: &[(&ArrayData, &Buffer)]) -> Result<()>;
}

/// A captured graph, ready to launch.
pub trait DeviceGraph: Send + Sync {
    /// Issues the whole graph once.
    fn launch(&self) -> Result<()>;

    /// The operations it holds (kernels and copies).
    fn nodes(&self) -> usize;
}
