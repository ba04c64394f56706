//! A device's memory as the core and the Python module see it: allocation, the counters
//! behind `get_active_memory`/`get_peak_memory`, and the cache and its limits.

use crate::buffer::MemoryCounters;
use crate::{Buffer, Result};

pub trait DeviceMemory: Sync {
    /// `nbytes` of this device's memory (contents unspecified until written).
    fn alloc(&'static self, nbytes: usize) -> Result<Buffer>;

    fn counters(&self) -> &MemoryCounters;

    /// Bytes kept in the cache: freed by arrays, not yet returned to the system.
    fn cache_memory(&self) -> usize;

    /// Returns the cached memory to the system.
    fn clear_cache(&self);

    /// Sets the cache limit in bytes (0 disables the cache); returns the previous one.
    fn set_cache_limit(&self, limit: usize) -> usize;

    /// Sets the memory limit (past it allocation first returns cached memory); returns the
    /// previous one.
    fn set_memory_limit(&self, limit: usize) -> usize;
}
