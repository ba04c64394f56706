//! Device-tagged memory, reference-counted apart from arrays: views, numpy exports and the
//! graph all hold `Buffer` handles, and the memory returns to its allocator when the last
//! handle drops.

use crate::{bail, Device, Result};
use std::alloc::Layout as AllocLayout;
use std::collections::BTreeMap;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

/// Hands out and takes back memory of one device.
pub trait Allocator: Send + Sync {
    fn device(&self) -> Device;
    /// Returns memory from an earlier allocation of `nbytes`.
    ///
    /// # Safety
    /// `ptr` must come from this allocator with the same `nbytes`, and must not be used after.
    unsafe fn free(&self, ptr: NonNull<u8>, nbytes: usize);
}

struct BufferInner {
    ptr: NonNull<u8>,
    nbytes: usize,
    allocator: &'static dyn Allocator,
}

// SAFETY: the buffer is plain memory owned by this handle; the pointer is only dereferenced
// through the typed accessors below, which hand out shared slices, or a mutable slice only
// while this is the sole handle (`Arc::get_mut`).
unsafe impl Send for BufferInner {}
// SAFETY: see `Send`; shared access is read-only.
unsafe impl Sync for BufferInner {}

impl Drop for BufferInner {
    fn drop(&mut self) {
        // SAFETY: ptr and nbytes came from this allocator, and this is the last handle.
        unsafe { self.allocator.free(self.ptr, self.nbytes) }
    }
}

/// A shared handle to one allocation.
#[derive(Clone)]
pub struct Buffer(Arc<BufferInner>);

impl std::fmt::Debug for Buffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Buffer({} bytes on {})", self.0.nbytes, self.device())
    }
}

impl Buffer {
    /// Wraps an allocation made by `allocator`; the buffer frees it on drop.
    ///
    /// # Safety
    /// `ptr` must be a live allocation of `nbytes` from `allocator`, owned by nobody else.
    pub unsafe fn from_raw(
        ptr: NonNull<u8>,
        nbytes: usize,
        allocator: &'static dyn Allocator,
    ) -> Self {
        Buffer(Arc::new(BufferInner { ptr, nbytes, allocator }))
    }

    pub fn nbytes(&self) -> usize {
        self.0.nbytes
    }

    pub fn device(&self) -> Device {
        self.0.allocator.device()
    }

    /// Raw address (host or device pointer).
    pub fn as_ptr(&self) -> *const u8 {
        self.0.ptr.as_ptr()
    }

    /// Whether two handles share one allocation.
    pub fn same(&self, other: &Buffer) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }

    /// Number of handles to this allocation (views, arrays and exports).
    pub fn handle_count(&self) -> usize {
        Arc::strong_count(&self.0)
    }

    fn check_host<T>(&self) {
        debug_assert_eq!(self.device().kind, crate::DeviceKind::Cpu);
        debug_assert_eq!(self.0.ptr.as_ptr() as usize % std::mem::align_of::<T>(), 0);
    }

    /// The whole buffer as host elements of type `T`.
    pub fn host_slice<T: bytemuck::Pod>(&self) -> &[T] {
        self.check_host::<T>();
        let len = self.0.nbytes / std::mem::size_of::<T>().max(1);
        // SAFETY: host memory of nbytes, aligned to HOST_ALIGN (>= align_of::<T>()), every
        // bit pattern is a valid Pod value, and no mutable slice exists while `self` is shared.
        unsafe { std::slice::from_raw_parts(self.0.ptr.as_ptr() as *const T, len) }
    }

    /// The whole buffer, mutable, when this is the only handle (fresh outputs).
    pub fn host_slice_mut<T: bytemuck::Pod>(&mut self) -> Option<&mut [T]> {
        self.check_host::<T>();
        let len = self.0.nbytes / std::mem::size_of::<T>().max(1);
        let inner = Arc::get_mut(&mut self.0)?;
        // SAFETY: as in `host_slice`, and `get_mut` proves no other handle can read it.
        Some(unsafe { std::slice::from_raw_parts_mut(inner.ptr.as_ptr() as *mut T, len) })
    }
}

/// Host allocations are aligned for 512-bit vector loads.
pub const HOST_ALIGN: usize = 64;

/// Live and peak byte counts of one allocator.
#[derive(Default)]
pub struct MemoryCounters {
    active: AtomicUsize,
    peak: AtomicUsize,
}

impl MemoryCounters {
    pub const fn new() -> Self {
        MemoryCounters { active: AtomicUsize::new(0), peak: AtomicUsize::new(0) }
    }

    pub fn add(&self, n: usize) {
        let now = self.active.fetch_add(n, Ordering::Relaxed) + n;
        self.peak.fetch_max(now, Ordering::Relaxed);
    }
    pub fn sub(&self, n: usize) {
        self.active.fetch_sub(n, Ordering::Relaxed);
    }
    pub fn active(&self) -> usize {
        self.active.load(Ordering::Relaxed)
    }
    pub fn peak(&self) -> usize {
        self.peak.load(Ordering::Relaxed)
    }
    /// Restarts peak tracking from zero (MLX's `reset_peak_memory`).
    pub fn reset_peak(&self) {
        self.peak.store(0, Ordering::Relaxed);
    }
}

/// Freed host blocks kept for reuse, by size class, so a steady loop allocates nothing from
/// the system and takes no page faults.
struct Cache {
    /// size class -> addresses of free blocks of that size.
    free: BTreeMap<usize, Vec<usize>>,
    bytes: usize,
    /// Keep at most this many bytes (0 disables the cache).
    limit: usize,
    /// Past this many live + cached bytes, allocation empties the cache first.
    memory_limit: usize,
}

/// The CPU's allocator: aligned heap memory with a size-class cache and exact counters.
pub struct HostAllocator {
    pub counters: MemoryCounters,
    cache: Mutex<Cache>,
}

/// The process-wide host allocator.
pub static HOST: HostAllocator = HostAllocator {
    counters: MemoryCounters { active: AtomicUsize::new(0), peak: AtomicUsize::new(0) },
    cache: Mutex::new(Cache { free: BTreeMap::new(), bytes: 0, limit: UNSET, memory_limit: UNSET }),
};

/// Blocks taken from the system allocator (not from the cache) since the process started.
static FRESH_BLOCKS: AtomicUsize = AtomicUsize::new(0);

/// Limits not yet read from the machine.
const UNSET: usize = usize::MAX;

/// The block size an allocation of `n` bytes gets: classes 1/8 of a power of two apart
/// (at most 12.5% slack), so freed blocks fit later requests of similar size.
pub fn size_class(n: usize) -> usize {
    let floor_pow2 = 1usize << (usize::BITS - 1 - n.leading_zeros());
    let step = (floor_pow2 / 8).max(HOST_ALIGN);
    n.div_ceil(step).saturating_mul(step)
}

/// Physical memory of this machine (the default memory limit, as MLX's CPU default).
fn physical_memory() -> usize {
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    let kib = meminfo
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<usize>().ok());
    kib.map_or(16 << 30, |k| k.saturating_mul(1024))
}

impl Cache {
    fn resolve_limits(&mut self) {
        if self.memory_limit == UNSET {
            self.memory_limit = physical_memory();
        }
        if self.limit == UNSET {
            self.limit = self.memory_limit;
        }
    }

    /// Returns every cached block to the system.
    fn release_all(&mut self) {
        for (class, blocks) in std::mem::take(&mut self.free) {
            for addr in blocks {
                // SAFETY: cached blocks were allocated by `HostAllocator::alloc` with this
                // class size and alignment, and nothing references them while cached.
                unsafe { std::alloc::dealloc(addr as *mut u8, block_layout(class)) }
            }
        }
        self.bytes = 0;
    }
}

fn block_layout(class: usize) -> AllocLayout {
    AllocLayout::from_size_align(class, HOST_ALIGN).expect("classes are valid layouts")
}

impl HostAllocator {
    fn cache(&self) -> std::sync::MutexGuard<'_, Cache> {
        let mut cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
        cache.resolve_limits();
        cache
    }

    /// Zero-filled host memory of `nbytes` (a cached block when one fits).
    pub fn alloc(&'static self, nbytes: usize) -> Result<Buffer> {
        self.alloc_inner(nbytes, true)
    }

    /// Host memory of `nbytes` for a kernel that overwrites all of it: a cached block keeps
    /// its old bytes (no zeroing pass, which costs as much as the kernel's own write), a
    /// fresh one reads as zeros. The caller must write every byte before anyone reads them.
    pub fn alloc_for_overwrite(&'static self, nbytes: usize) -> Result<Buffer> {
        self.alloc_inner(nbytes, false)
    }

    fn alloc_inner(&'static self, nbytes: usize, zeroed: bool) -> Result<Buffer> {
        if nbytes == 0 {
            // A dangling, aligned pointer: never dereferenced for a zero-length slice.
            let ptr = NonNull::new(HOST_ALIGN as *mut u8).expect("nonzero");
            // SAFETY: `free` ignores zero-sized buffers.
            return Ok(unsafe { Buffer::from_raw(ptr, 0, self) });
        }
        let class = size_class(nbytes);
        if class > isize::MAX as usize - HOST_ALIGN {
            bail!(Runtime, "malloc", "Cannot allocate {nbytes} bytes.");
        }
        let reused = {
            let mut cache = self.cache();
            let reused = cache.free.get_mut(&class).and_then(Vec::pop);
            if reused.is_some() {
                cache.bytes -= class;
            } else if self.counters.active() + cache.bytes + class > cache.memory_limit {
                cache.release_all(); // over the guideline: give cached memory back first
            }
            reused
        };
        let ptr = match reused {
            Some(addr) => {
                // Unzeroed blocks still hold initialised bytes (every block starts zeroed).
                if zeroed {
                    // SAFETY: a cached block of `class` bytes owned by the allocator; zeroing
                    // keeps the promise that new buffers read as zeros.
                    unsafe { std::ptr::write_bytes(addr as *mut u8, 0, class) };
                }
                addr as *mut u8
            }
            None => {
                FRESH_BLOCKS.fetch_add(1, Ordering::Relaxed);
                // SAFETY: the layout has nonzero size.
                unsafe { std::alloc::alloc_zeroed(block_layout(class)) }
            }
        };
        let Some(ptr) = NonNull::new(ptr) else {
            bail!(Runtime, "malloc", "Out of memory allocating {nbytes} bytes.");
        };
        self.counters.add(nbytes);
        // SAFETY: a live block of at least nbytes from this allocator, owned by nobody else.
        Ok(unsafe { Buffer::from_raw(ptr, nbytes, self) })
    }

    /// A host buffer holding a copy of `data`.
    pub fn from_slice<T: bytemuck::Pod>(&'static self, data: &[T]) -> Result<Buffer> {
        let bytes: &[u8] = bytemuck::cast_slice(data);
        let mut buf = self.alloc(bytes.len())?;
        buf.host_slice_mut::<u8>().expect("fresh buffer").copy_from_slice(bytes);
        Ok(buf)
    }

    /// How many allocations so far needed a new block from the system (the rest reused a
    /// cached one): flat across iterations of a steady loop.
    pub fn fresh_blocks(&self) -> usize {
        FRESH_BLOCKS.load(Ordering::Relaxed)
    }

    /// Bytes held in the cache (freed by arrays, not yet returned to the system).
    pub fn cache_memory(&self) -> usize {
        self.cache().bytes
    }

    /// Returns all cached memory to the system.
    pub fn clear_cache(&self) {
        self.cache().release_all();
    }

    /// Sets the cache limit (0 disables caching); returns the previous one.
    pub fn set_cache_limit(&self, limit: usize) -> usize {
        let mut cache = self.cache();
        let previous = std::mem::replace(&mut cache.limit, limit);
        if cache.bytes > limit {
            cache.release_all();
        }
        previous
    }

    /// Sets the memory limit guideline; returns the previous one.
    pub fn set_memory_limit(&self, limit: usize) -> usize {
        std::mem::replace(&mut self.cache().memory_limit, limit)
    }
}

impl crate::backend::DeviceMemory for HostAllocator {
    fn alloc(&'static self, nbytes: usize) -> Result<Buffer> {
        HostAllocator::alloc(self, nbytes)
    }
    fn counters(&self) -> &MemoryCounters {
        &self.counters
    }
    fn cache_memory(&self) -> usize {
        HostAllocator::cache_memory(self)
    }
    fn clear_cache(&self) {
        HostAllocator::clear_cache(self)
    }
    fn set_cache_limit(&self, limit: usize) -> usize {
        HostAllocator::set_cache_limit(self, limit)
    }
    fn set_memory_limit(&self, limit: usize) -> usize {
        HostAllocator::set_memory_limit(self, limit)
    }
}

impl Allocator for HostAllocator {
    fn device(&self) -> Device {
        Device::CPU
    }

    unsafe fn free(&self, ptr: NonNull<u8>, nbytes: usize) {
        if nbytes == 0 {
            return;
        }
        self.counters.sub(nbytes);
        let class = size_class(nbytes);
        let mut cache = self.cache();
        if cache.bytes + class <= cache.limit {
            cache.bytes += class;
            cache.free.entry(class).or_default().push(ptr.as_ptr() as usize);
            return;
        }
        drop(cache);
        // SAFETY: allocated by `alloc` with this class layout (caller's contract).
        unsafe { std::alloc::dealloc(ptr.as_ptr(), block_layout(class)) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn alloc_counts_and_frees() {
        let before = HOST.counters.active();
        let b = HOST.from_slice(&[1.0f32, 2.0, 3.0]).unwrap();
        assert_eq!(b.host_slice::<f32>(), &[1.0, 2.0, 3.0]);
        assert!(HOST.counters.active() >= before + 12);
        let c = b.clone();
        assert_eq!(c.handle_count(), 2);
        drop(b);
        drop(c);
        let empty = HOST.alloc(0).unwrap();
        assert_eq!(empty.host_slice::<f32>().len(), 0);
    }

    #[test]
    fn size_classes_bound_the_slack() {
        for n in [1, 63, 64, 65, 1000, 4096, 4097, 1 << 20, (1 << 20) + 1, 12345678] {
            let c = size_class(n);
            assert!(c >= n && c.is_multiple_of(HOST_ALIGN), "{n} -> {c}");
            assert!(c <= n + n / 8 + HOST_ALIGN, "{n} -> {c}");
        }
    }

    #[test]
    fn freed_blocks_are_reused_zeroed() {
        let mut a = HOST.alloc(1 << 16).unwrap();
        a.host_slice_mut::<u8>().unwrap().fill(7);
        let addr = a.as_ptr();
        drop(a);
        let b = HOST.alloc((1 << 16) - 100).unwrap(); // same class
        assert_eq!(b.as_ptr(), addr);
        assert!(b.host_slice::<u8>().iter().all(|&v| v == 0));
    }
}
