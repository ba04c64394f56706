//! Device-tagged memory, reference-counted apart from arrays: views, numpy exports and the
//! graph all hold `Buffer` handles, and the memory returns to its allocator when the last
//! handle drops.

use crate::{bail, Device, Result};
use std::alloc::Layout as AllocLayout;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

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
    pub fn reset_peak(&self) {
        self.peak.store(self.active(), Ordering::Relaxed);
    }
}

/// The CPU's allocator: aligned heap memory with exact active/peak counters.
pub struct HostAllocator {
    pub counters: MemoryCounters,
}

/// The process-wide host allocator.
pub static HOST: HostAllocator = HostAllocator {
    counters: MemoryCounters { active: AtomicUsize::new(0), peak: AtomicUsize::new(0) },
};

impl HostAllocator {
    /// Uninitialised-free host memory: new buffers are zeroed, so reading an output a kernel
    /// did not fully write can never expose stale data.
    pub fn alloc(&'static self, nbytes: usize) -> Result<Buffer> {
        if nbytes == 0 {
            // A dangling, aligned pointer: never dereferenced for a zero-length slice.
            let ptr = NonNull::new(HOST_ALIGN as *mut u8).expect("nonzero");
            // SAFETY: `free` ignores zero-sized buffers.
            return Ok(unsafe { Buffer::from_raw(ptr, 0, self) });
        }
        let Ok(layout) = AllocLayout::from_size_align(nbytes, HOST_ALIGN) else {
            bail!(Runtime, "malloc", "Cannot allocate {nbytes} bytes.");
        };
        // SAFETY: layout has nonzero size.
        let ptr = unsafe { std::alloc::alloc_zeroed(layout) };
        let Some(ptr) = NonNull::new(ptr) else {
            bail!(Runtime, "malloc", "Out of memory allocating {nbytes} bytes.");
        };
        self.counters.add(nbytes);
        // SAFETY: freshly allocated from this allocator with nbytes.
        Ok(unsafe { Buffer::from_raw(ptr, nbytes, self) })
    }

    /// A host buffer holding a copy of `data`.
    pub fn from_slice<T: bytemuck::Pod>(&'static self, data: &[T]) -> Result<Buffer> {
        let bytes: &[u8] = bytemuck::cast_slice(data);
        let mut buf = self.alloc(bytes.len())?;
        buf.host_slice_mut::<u8>().expect("fresh buffer").copy_from_slice(bytes);
        Ok(buf)
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
        let layout = AllocLayout::from_size_align(nbytes, HOST_ALIGN).expect("checked at alloc");
        // SAFETY: allocated by `alloc` with this layout (caller's contract).
        unsafe { std::alloc::dealloc(ptr.as_ptr(), layout) }
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
}
