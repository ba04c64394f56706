//! The MPI backend: a `Communicator` over an MPI communicator, for host arrays.
//!
//! Before it moves any data, every operation checks that the processes agree on it (a
//! digest of op, dtype and shape, reduced as a maximum and a minimum without blocking, under
//! a timeout): a process that calls another collective, another shape, or none at all gives
//! every process an error naming the op instead of garbage or a hang. The data then moves
//! with the blocking calls, which OpenMPI tunes best.

use crate::half_ops::{self, HalfOps};
use crate::mpi_lib::{Handle, Mpi, Status, SUCCESS, THREAD_SERIALIZED};
use kiln_base::distributed::{fingerprint, Communicator, Reduction};
use kiln_base::{bail, ensure, DType, Error, Result};
use std::ffi::{c_int, c_void};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

/// The loaded library and whether kiln initialised MPI (then kiln finalises it).
struct Runtime {
    mpi: Mpi,
    halves: HalfOps,
    owns_init: bool,
    finalized: AtomicBool,
    /// Serialises every MPI call (MPI_THREAD_SERIALIZED).
    lock: Mutex<()>,
}

static RUNTIME: OnceLock<std::result::Result<Runtime, Error>> = OnceLock::new();

fn runtime() -> Result<&'static Runtime> {
    let r = RUNTIME.get_or_init(|| {
        let mpi = Mpi::load()?;
        let mut flag: c_int = 0;
        // SAFETY: MPI_Initialized may be called at any time, before MPI_Init too.
        unsafe { (mpi.initialized)(&mut flag) };
        let owns_init = flag == 0;
        if owns_init {
            let mut provided: c_int = 0;
            // SAFETY: null argc/argv are allowed by MPI-2 and later.
            let code = unsafe {
                (mpi.init_thread)(
                    std::ptr::null_mut(),
                    std::ptr::null_mut(),
                    THREAD_SERIALIZED,
                    &mut provided,
                )
            };
            ensure!(
                code == SUCCESS,
                Runtime,
                "distributed",
                "[mpi] MPI_Init_thread failed: {}",
                mpi.describe(code)
            );
        }
        // SAFETY: the world communicator exists once MPI is initialised; errors then return
        // codes (turned into Python exceptions) instead of aborting every process.
        unsafe { (mpi.comm_set_errhandler)(mpi.comm_world, mpi.errors_return) };
        let halves = half_ops::create(&mpi)?;
        Ok(Runtime {
            mpi,
            halves,
            owns_init,
            finalized: AtomicBool::new(false),
            lock: Mutex::new(()),
        })
    });
    r.as_ref().map_err(|e| e.clone())
}

/// Whether OpenMPI's library loads here (MPI is not initialised by asking).
pub fn is_available() -> bool {
    RUNTIME.get().map(|r| r.is_ok()).unwrap_or_else(|| Mpi::load().is_ok())
}

/// Finalises MPI if kiln initialised it (at interpreter exit: OpenMPI reports a process
/// that exits without it as failed). Every group is unusable afterwards.
pub fn finalize() {
    if let Some(Ok(rt)) = RUNTIME.get() {
        let _guard = rt.lock.lock().unwrap_or_else(|e| e.into_inner());
        if rt.owns_init && !rt.finalized.swap(true, Ordering::SeqCst) {
            let mut done: c_int = 0;
            // SAFETY: MPI was initialised by kiln and is finalised once (unless the program
            // did it itself, through mpi4py for one).
            unsafe {
                (rt.mpi.finalized)(&mut done);
                if done == 0 {
                    (rt.mpi.finalize)();
                }
            }
        }
    }
}

/// The world group.
pub fn world() -> Result<Arc<dyn Communicator>> {
    let rt = runtime()?;
    Ok(Arc::new(MpiGroup::new(rt, rt.mpi.comm_world)?))
}

/// How long a process waits for the others to reach the same operation.
struct MpiGroup {
    rt: &'static Runtime,
    comm: Handle,
    rank: usize,
    size: usize,
    /// Set when an agreement timed out: its request may still complete into leaked buffers,
    /// and the processes are no longer in step.
    broken: AtomicBool,
}

// SAFETY: the communicator handle is only used under the runtime's lock.
unsafe impl Send for MpiGroup {}
// SAFETY: as for Send.
unsafe impl Sync for MpiGroup {}

/// Message tags of send/recv: a header (the digest), the answer, then the data.
/// OpenMPI's `MPI_IN_PLACE` (mpi.h defines it as the address 1).
const IN_PLACE: *const c_void = std::ptr::without_provenance(1);
const TAG_HEADER: c_int = 7001;
const TAG_ANSWER: c_int = 7002;
const TAG_DATA: c_int = 7003;

impl MpiGroup {
    fn new(rt: &'static Runtime, comm: Handle) -> Result<MpiGroup> {
        let (mut rank, mut size) = (0, 0);
        // SAFETY: a valid communicator and out pointers to locals.
        unsafe {
            (rt.mpi.comm_rank)(comm, &mut rank);
            (rt.mpi.comm_size)(comm, &mut size);
        }
        Ok(MpiGroup {
            rt,
            comm,
            rank: rank as usize,
            size: size as usize,
            broken: AtomicBool::new(false),
        })
    }

    fn check(&self, op: &'static str, code: c_int) -> Result<()> {
        if code != SUCCESS {
            bail!(Runtime, op, "[mpi] {}", self.rt.mpi.describe(code));
        }
        Ok(())
    }

    fn usable(&self, op: &'static str) -> Result<std::sync::MutexGuard<'static, ()>> {
        ensure!(
            !self.rt.finalized.load(Ordering::SeqCst),
            Runtime,
            op,
            "[mpi] MPI has been finalised (the interpreter is exiting)."
        );
        ensure!(
            !self.broken.load(Ordering::SeqCst),
            Runtime,
            op,
            "[mpi] An earlier collective of this group timed out: its processes are no longer \
             in step."
        );
        Ok(self.rt.lock.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// Polls a request until it completes, or fails after the timeout (its buffers are then
    /// leaked: MPI may still write them).
    fn wait(&self, op: &'static str, request: &mut Handle, what: &str) -> Result<()> {
        let done = || {
            let (mut done, mut status) = (0, Status::default());
            // SAFETY: `request` came from a nonblocking call whose buffers outlive it.
            self.check(op, unsafe { (self.rt.mpi.test)(request, &mut done, &mut status) })?;
            Ok(done != 0)
        };
        crate::poll(op, "mpi", what, done, || self.broken.store(true, Ordering::SeqCst))
    }

    /// Every process of the group checks that all called `op` on the same dtype and shape.
    fn agree(&self, op: &'static str, dtype: DType, shape: &[usize], extra: u64) -> Result<()> {
        let h = fingerprint(op, dtype, shape, extra);
        // Boxed and leaked on a timeout: MPI may write the result later.
        let mut bufs = Box::new(([h, !h], [0u64; 2]));
        let mut request: Handle = std::ptr::null_mut();
        let m = &self.rt.mpi;
        // SAFETY: two uint64 in each buffer; the request is waited for below.
        let code = unsafe {
            (m.iallreduce)(
                bufs.0.as_ptr() as *const c_void,
                bufs.1.as_mut_ptr() as *mut c_void,
                2,
                m.uint64,
                m.op_max,
                self.comm,
                &mut request,
            )
        };
        self.check(op, code)?;
        if let Err(e) = self.wait(op, &mut request, "the other processes of the group") {
            Box::leak(bufs);
            return Err(e);
        }
        // Max of h and max of !h (= !min of h): equal to ours everywhere iff all agree.
        ensure!(
            bufs.1 == [h, !h],
            Value,
            op,
            "[mpi] The processes of the group called different operations: this one called \
             {op} on {dtype} of shape {shape:?}, another a different op, dtype or shape."
        );
        Ok(())
    }

    /// MPI_Allreduce of `input` (or of `output` itself: MPI_IN_PLACE) into `output`, in
    /// chunks (MPI counts are 32-bit).
    fn reduce_chunks(
        &self,
        r: Reduction,
        input: Option<&[u8]>,
        output: &mut [u8],
        dtype: DType,
        shape: &[usize],
    ) -> Result<()> {
        let op = match r {
            Reduction::Sum => "all_sum",
            Reduction::Max => "all_max",
            Reduction::Min => "all_min",
        };
        let _guard = self.usable(op)?;
        self.agree(op, dtype, shape, 0)?;
        let (dt, mop) = self.datatype(op, dtype, Some(r))?;
        let width = dtype.size();
        let chunk = (1usize << 30) / width * width;
        for (k, o) in output.chunks_mut(chunk).enumerate() {
            let n = count(op, o.len() / width)?;
            let send = match input {
                Some(i) => i[k * chunk..k * chunk + o.len()].as_ptr() as *const c_void,
                None => IN_PLACE,
            };
            // SAFETY: both buffers hold n elements of dt (or the output alone, in place).
            let code = unsafe {
                (self.rt.mpi.allreduce)(send, o.as_mut_ptr() as _, n, dt, mop, self.comm)
            };
            self.check(op, code)?;
        }
        Ok(())
    }

    fn datatype(
        &self,
        op: &'static str,
        dtype: DType,
        r: Option<Reduction>,
    ) -> Result<(Handle, Handle)> {
        let m = &self.rt.mpi;
        let reduce = match r {
            Some(Reduction::Sum) => m.op_sum,
            Some(Reduction::Max) => m.op_max,
            Some(Reduction::Min) => m.op_min,
            None => std::ptr::null_mut(),
        };
        Ok(match dtype {
            // Bool: sum and max are "any", min is "all".
            DType::Bool => (m.bool_, if r == Some(Reduction::Min) { m.op_land } else { m.op_lor }),
            DType::I8 => (m.int8, reduce),
            DType::U8 => (m.uint8, reduce),
            DType::I16 => (m.int16, reduce),
            DType::U16 => (m.uint16, reduce),
            DType::I32 => (m.int32, reduce),
            DType::U32 => (m.uint32, reduce),
            DType::I64 => (m.int64, reduce),
            DType::U64 => (m.uint64, reduce),
            DType::F32 => (m.float, reduce),
            DType::F64 => (m.double, reduce),
            // MPI has no half floats: 16-bit words with kiln's own reductions.
            DType::F16 | DType::BF16 => {
                (m.uint16, r.map_or(reduce, |r| self.rt.halves.op(dtype, r)))
            }
            DType::C64 => {
                ensure!(
                    matches!(r, None | Some(Reduction::Sum)),
                    Type,
                    op,
                    "complex64 has no order to take a maximum or minimum in."
                );
                (m.complex64, reduce)
            }
        })
    }
}

fn count(op: &'static str, n: usize) -> Result<c_int> {
    c_int::try_from(n).map_err(|_| Error::Value {
        op,
        msg: format!("[mpi] {n} elements are more than one MPI message holds (2^31 - 1)."),
    })
}

impl Communicator for MpiGroup {
    fn rank(&self) -> usize {
        self.rank
    }

    fn size(&self) -> usize {
        self.size
    }

    fn backend(&self) -> &'static str {
        "mpi"
    }

    fn split(&self, color: i32, key: i32) -> Result<Arc<dyn Communicator>> {
        let op = "split";
        let _guard = self.usable(op)?;
        self.agree(op, DType::I32, &[], 0)?;
        let mut comm: Handle = std::ptr::null_mut();
        let key = if key < 0 { self.rank as c_int } else { key };
        // SAFETY: a valid communicator; every process of it calls split (checked above).
        self.check(op, unsafe { (self.rt.mpi.comm_split)(self.comm, color, key, &mut comm) })?;
        // SAFETY: the new communicator returns errors as codes too.
        unsafe { (self.rt.mpi.comm_set_errhandler)(comm, self.rt.mpi.errors_return) };
        Ok(Arc::new(MpiGroup::new(self.rt, comm)?))
    }

    fn all_reduce(
        &self,
        r: Reduction,
        input: &[u8],
        output: &mut [u8],
        dtype: DType,
        shape: &[usize],
    ) -> Result<()> {
        self.reduce_chunks(r, Some(input), output, dtype, shape)
    }

    fn all_reduce_in_place(
        &self,
        r: Reduction,
        data: &mut [u8],
        dtype: DType,
        shape: &[usize],
    ) -> Result<()> {
        self.reduce_chunks(r, None, data, dtype, shape)
    }

    fn all_gather(
        &self,
        input: &[u8],
        output: &mut [u8],
        dtype: DType,
        shape: &[usize],
    ) -> Result<()> {
        let op = "all_gather";
        let _guard = self.usable(op)?;
        self.agree(op, dtype, shape, 0)?;
        let n = count(op, input.len())?;
        let m = &self.rt.mpi;
        // SAFETY: output holds size * n bytes (the primitive's shape rule).
        let code = unsafe {
            (m.allgather)(
                input.as_ptr() as _,
                n,
                m.byte,
                output.as_mut_ptr() as _,
                n,
                m.byte,
                self.comm,
            )
        };
        self.check(op, code)
    }

    fn sum_scatter(
        &self,
        input: &[u8],
        output: &mut [u8],
        dtype: DType,
        shape: &[usize],
    ) -> Result<()> {
        let op = "sum_scatter";
        let _guard = self.usable(op)?;
        self.agree(op, dtype, shape, 0)?;
        let (dt, mop) = self.datatype(op, dtype, Some(Reduction::Sum))?;
        let n = count(op, output.len() / dtype.size())?;
        // SAFETY: input holds size * n elements, output n.
        let code = unsafe {
            (self.rt.mpi.reduce_scatter_block)(
                input.as_ptr() as _,
                output.as_mut_ptr() as _,
                n,
                dt,
                mop,
                self.comm,
            )
        };
        self.check(op, code)
    }

    fn send(&self, input: &[u8], dst: usize, dtype: DType, shape: &[usize]) -> Result<()> {
        let op = "send";
        let _guard = self.usable(op)?;
        let m = &self.rt.mpi;
        // Header out, the receiver's verdict back, then the data.
        let header = Box::new(fingerprint("send", dtype, shape, 0));
        let mut answer = Box::new(0u64);
        let mut request: Handle = std::ptr::null_mut();
        let peer = dst as c_int;
        // SAFETY: one uint64 each way; requests are waited for.
        unsafe {
            self.check(
                op,
                (m.isend)(
                    &*header as *const u64 as _,
                    1,
                    m.uint64,
                    peer,
                    TAG_HEADER,
                    self.comm,
                    &mut request,
                ),
            )?;
        }
        let waited = self.wait(op, &mut request, "the receiving process").and_then(|_| {
            // SAFETY: as above.
            self.check(op, unsafe {
                (m.irecv)(
                    &mut *answer as *mut u64 as _,
                    1,
                    m.uint64,
                    peer,
                    TAG_ANSWER,
                    self.comm,
                    &mut request,
                )
            })?;
            self.wait(op, &mut request, "the receiving process")
        });
        if let Err(e) = waited {
            Box::leak(header);
            Box::leak(answer);
            return Err(e);
        }
        ensure!(
            *answer == *header,
            Value,
            op,
            "[mpi] Process {dst} expected another shape or dtype than this send's {dtype} of \
             shape {shape:?}."
        );
        let n = count(op, input.len())?;
        // SAFETY: n bytes from input.
        self.check(op, unsafe {
            (m.send)(input.as_ptr() as _, n, m.byte, peer, TAG_DATA, self.comm)
        })
    }

    fn recv(&self, output: &mut [u8], src: usize, dtype: DType, shape: &[usize]) -> Result<()> {
        let op = "recv";
        let _guard = self.usable(op)?;
        let m = &self.rt.mpi;
        let mine = fingerprint("send", dtype, shape, 0);
        let mut header = Box::new(0u64);
        let mut request: Handle = std::ptr::null_mut();
        let peer = src as c_int;
        // SAFETY: one uint64; waited for below.
        self.check(op, unsafe {
            (m.irecv)(
                &mut *header as *mut u64 as _,
                1,
                m.uint64,
                peer,
                TAG_HEADER,
                self.comm,
                &mut request,
            )
        })?;
        if let Err(e) = self.wait(op, &mut request, "the sending process") {
            Box::leak(header);
            return Err(e);
        }
        // Tell the sender whether the data will be taken (ours on a match, else 0).
        let answer = if *header == mine { mine } else { 0 };
        // SAFETY: one uint64 from a local.
        self.check(op, unsafe {
            (m.send)(&answer as *const u64 as _, 1, m.uint64, peer, TAG_ANSWER, self.comm)
        })?;
        ensure!(
            *header == mine,
            Value,
            op,
            "[mpi] Process {src} sent another shape or dtype than this recv's {dtype} of shape \
             {shape:?}."
        );
        let n = count(op, output.len())?;
        let mut status = Status::default();
        // SAFETY: n bytes into output.
        self.check(op, unsafe {
            (m.recv)(output.as_mut_ptr() as _, n, m.byte, peer, TAG_DATA, self.comm, &mut status)
        })
    }
}
