//! Device memory: plain `cuMemAlloc` blocks (never managed memory) behind a size-class cache,
//! as the host allocator does. Every GPU kernel runs on the one stream, so a block freed by
//! the host can be handed to the next kernel at once: stream order runs that kernel after
//! every earlier user of the block.
//!
//! While a thread captures a CUDA graph (`cuda_graph.rs`), the blocks it frees are not cached for
//! everyone: the graph will write them again at each launch, so they stay reserved for the
//! graph (and are reused by the capture's own later allocations, in capture order).

use crate::runtime::gpu;
use cudarc::driver::result;
use kiln_base::buffer::{size_class, Allocator, MemoryCounters};
use kiln_base::{bail, Buffer, Device, Result};
use std::cell::RefCell;
use std::collections::BTreeMap;
use std::ptr::NonNull;
use std::sync::atomic::AtomicUsize;
use std::sync::Mutex;

struct Cache {
    free: BTreeMap<usize, Vec<u64>>,
    bytes: usize,
    limit: Option<usize>,
    memory_limit: Option<usize>,
}

pub struct DeviceAllocator {
    pub counters: MemoryCounters,
    cache: Mutex<Cache>,
}

/// The allocator of device 0.
pub static DEVICE: DeviceAllocator = DeviceAllocator {
    counters: MemoryCounters::new(),
    cache: Mutex::new(Cache { free: BTreeMap::new(), bytes: 0, limit: None, memory_limit: None }),
};

/// Blocks are at least this large and this aligned (cuMemAlloc gives 256-byte alignment).
const MIN_BLOCK: usize = 256;

static LIVE_BLOCKS: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    /// The blocks freed during this thread's graph capture, by size class (see the module
    /// doc). `None` when the thread is not capturing.
    static CAPTURED: RefCell<Option<BTreeMap<usize, Vec<u64>>>> = const { RefCell::new(None) };
}

/// Starts reserving the blocks this thread frees for a graph being captured.
pub(crate) fn begin_capture() {
    CAPTURED.with(|c| *c.borrow_mut() = Some(BTreeMap::new()));
}

/// Stops reserving; returns the reserved blocks as (pointer, size class). They still count
/// as active memory until `release` gives them back.
pub(crate) fn end_capture() -> Vec<(u64, usize)> {
    let blocks = CAPTURED.with(|c| c.borrow_mut().take()).unwrap_or_default();
    blocks.into_iter().flat_map(|(class, ptrs)| ptrs.into_iter().map(move |p| (p, class))).collect()
}

/// Gives blocks reserved by a graph back to the cache.
pub(crate) fn release(blocks: Vec<(u64, usize)>) {
    for (ptr, class) in blocks {
        let ptr = NonNull::new(ptr as *mut u8).expect("device blocks are never null");
        // SAFETY: the block came from this allocator and its owner (a graph) is gone.
        unsafe { DEVICE.return_block(ptr, class) };
    }
}

impl Cache {
    fn release_all(&mut self) {
        // Launches held back may still use cached blocks: on the stream first, then waited for.
        let _ = crate::batch::flush();
        for (_, blocks) in std::mem::take(&mut self.free) {
            for ptr in blocks {
                // SAFETY: the block came from cuMemAlloc and nothing holds it (it is cached).
                // cuMemFree waits for work using it, which is what a cache release needs.
                let _ = unsafe { result::free_sync(ptr) };
            }
        }
        self.bytes = 0;
    }
}

impl DeviceAllocator {
    fn cache(&self) -> std::sync::MutexGuard<'_, Cache> {
        self.cache.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// An uninitialised device buffer of `nbytes`.
    pub fn alloc(&'static self, nbytes: usize) -> Result<Buffer> {
        let class = size_class(nbytes.max(MIN_BLOCK));
        let gpu = gpu()?;
        let reserved = CAPTURED
            .try_with(|c| {
                c.borrow_mut().as_mut().and_then(|b| b.get_mut(&class).and_then(Vec::pop))
            })
            .ok()
            .flatten();
        if let Some(ptr) = reserved {
            // Still counted as active: reserved blocks never left the counters.
            let ptr = NonNull::new(ptr as *mut u8).expect("device blocks are never null");
            // SAFETY: a block of `class` bytes from this allocator that nothing else holds.
            return Ok(unsafe { Buffer::from_raw(ptr, class, self) });
        }
        let reused = {
            let mut cache = self.cache();
            let reused = cache.free.get_mut(&class).and_then(Vec::pop);
            if reused.is_some() {
                cache.bytes -= class;
            } else {
                let limit = cache.memory_limit.unwrap_or(gpu.total_memory);
                if self.counters.active() + class > limit && limit > 0 {
                    bail!(
                        Runtime,
                        "malloc",
                        "[gpu] Out of memory: allocating {nbytes} bytes would exceed the memory \
                         limit of {limit} bytes ({} in use).",
                        self.counters.active()
                    );
                }
            }
            reused
        };
        let ptr = match reused {
            Some(ptr) => ptr,
            None => {
                // SAFETY: the context is current (gpu()); a plain device allocation.
                match unsafe { result::malloc_sync(class) } {
                    Ok(ptr) => ptr,
                    Err(_) => {
                        // Give cached blocks back and try once more before failing.
                        self.cache().release_all();
                        // SAFETY: as above.
                        unsafe { result::malloc_sync(class) }.map_err(|e| {
                            kiln_base::Error::Runtime {
                                op: "malloc",
                                msg: format!(
                                    "[gpu] Out of memory allocating {nbytes} bytes on the GPU ({e})."
                                ),
                            }
                        })?
                    }
                }
            }
        };
        LIVE_BLOCKS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.counters.add(class);
        let ptr = NonNull::new(ptr as *mut u8).expect("cuMemAlloc never returns 0");
        // SAFETY: a live block of `class` bytes from this allocator, owned by the new buffer.
        Ok(unsafe { Buffer::from_raw(ptr, class, self) })
    }

    /// Bytes held in the cache for reuse.
    pub fn cache_memory(&self) -> usize {
        self.cache().bytes
    }

    /// Returns cached blocks to the driver.
    pub fn clear_cache(&self) {
        if crate::runtime::is_available() {
            let _ = crate::runtime::synchronize();
            self.cache().release_all();
        }
    }

    /// Sets the cache limit; returns the previous one.
    pub fn set_cache_limit(&self, limit: usize) -> usize {
        let mut cache = self.cache();
        let previous = cache.limit.replace(limit).unwrap_or(usize::MAX);
        if cache.bytes > limit {
            cache.release_all();
        }
        previous
    }

    /// Sets the device memory limit; returns the previous one.
    pub fn set_memory_limit(&self, limit: usize) -> usize {
        self.cache().memory_limit.replace(limit).unwrap_or(usize::MAX)
    }
}

impl kiln_base::backend::DeviceMemory for DeviceAllocator {
    fn alloc(&'static self, nbytes: usize) -> Result<Buffer> {
        DeviceAllocator::alloc(self, nbytes)
    }
    fn counters(&self) -> &MemoryCounters {
        &self.counters
    }
    fn cache_memory(&self) -> usize {
        DeviceAllocator::cache_memory(self)
    }
    fn clear_cache(&self) {
        DeviceAllocator::clear_cache(self)
    }
    fn set_cache_limit(&self, limit: usize) -> usize {
        DeviceAllocator::set_cache_limit(self, limit)
    }
    fn set_memory_limit(&self, limit: usize) -> usize {
        DeviceAllocator::set_memory_limit(self, limit)
    }
}

impl Allocator for DeviceAllocator {
    fn device(&self) -> Device {
        Device::GPU
    }

    unsafe fn free(&self, ptr: NonNull<u8>, nbytes: usize) {
        // `try_with`: buffers may be dropped while the thread's locals are torn down.
        let reserved = CAPTURED
            .try_with(|c| match c.borrow_mut().as_mut() {
                Some(blocks) => {
                    blocks.entry(nbytes).or_default().push(ptr.as_ptr() as u64);
                    true
                }
                None => false,
            })
            .unwrap_or(false);
        if !reserved {
            // SAFETY: forwarded from the caller's contract.
            unsafe { self.return_block(ptr, nbytes) }
        }
    }
}

impl DeviceAllocator {
    /// Returns a block whose last owner is gone to the cache (or the driver, over the limit).
    ///
    /// # Safety
    /// `ptr` is a live block of `nbytes` from this allocator that nothing references.
    unsafe fn return_block(&self, ptr: NonNull<u8>, nbytes: usize) {
        self.counters.sub(nbytes);
        LIVE_BLOCKS.fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
        let mut cache = self.cache();
        let limit = cache.limit.unwrap_or(usize::MAX);
        if cache.bytes + nbytes <= limit {
            cache.free.entry(nbytes).or_default().push(ptr.as_ptr() as u64);
            cache.bytes += nbytes;
        } else {
            // Launches held back may use the block: cuMemFree waits only for issued work.
            let _ = crate::batch::flush();
            // SAFETY: the block came from cuMemAlloc and its last handle is gone.
            let _ = unsafe { result::free_sync(ptr.as_ptr() as u64) };
        }
    }
}

/// A device pointer to element `offset` (in elements of `size` bytes) of `buffer`.
pub fn device_ptr(buffer: &Buffer, offset: isize, size: usize) -> u64 {
    (buffer.as_ptr() as i64 + offset as i64 * size as i64) as u64
}

/// Fails with a clear error when `buffer` is not GPU memory.
pub fn check_on_gpu(op: &'static str, buffer: &Buffer) -> Result<()> {
    if buffer.device() != Device::GPU {
        bail!(Runtime, op, "Expected GPU memory, found {}.", buffer.device());
    }
    Ok(())
}
