//! The NCCL backend: one process per GPU, collectives on device memory issued on kiln's
//! stream (`DeviceCollectives`, called by kiln-cuda's `collective.rs`), host arrays staged
//! through the device.
//!
//! The world comes from the launcher (`kiln.launch --backend nccl`): `KILN_RANK`,
//! `KILN_WORLD_SIZE` and `KILN_NCCL_DIR`, where rank 0 leaves the NCCL unique id for the
//! others; without them `init("nccl")` makes a world of this process alone.
//!
//! As with MPI, every operation first checks that all processes called the same op, dtype
//! and shape: a tiny all-reduce of a digest, read back and polled against
//! `KILN_DISTRIBUTED_TIMEOUT`, so a mismatch is an error on every process and a process that
//! never joins is an error, not a hang. That read waits for the stream, so it is skipped while
//! the stream is captured into a CUDA graph (a replay repeats work that was checked when it
//! ran uncaptured) and can be switched off with `KILN_DISTRIBUTED_CHECK=0`.

use crate::nccl_lib::{Comm, DataType, Nccl, RedOp, Stream, UniqueId, IN_PROGRESS, SUCCESS};
use cudarc::driver::{result, sys};
use kiln_base::distributed::{fingerprint, Communicator, DeviceCollectives, Reduction};
use kiln_base::{bail, ensure, DType, Result};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

static NCCL: OnceLock<std::result::Result<Nccl, String>> = OnceLock::new();

fn nccl() -> Result<&'static Nccl> {
    match NCCL.get_or_init(|| Nccl::load().map_err(|e| e.to_string())) {
        Ok(n) => Ok(n),
        Err(e) => bail!(Runtime, "distributed", "{e}"),
    }
}

/// Whether NCCL can be loaded and a GPU is there to run it on.
pub fn is_available() -> bool {
    kiln_cuda::is_available() && nccl().is_ok()
}

use crate::timeout;

fn check_enabled() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| std::env::var("KILN_DISTRIBUTED_CHECK").map_or(true, |v| v != "0"))
}

fn env_usize(name: &str, default: usize) -> Result<usize> {
    match std::env::var(name) {
        Err(_) => Ok(default),
        Ok(v) => match v.parse() {
            Ok(n) => Ok(n),
            Err(_) => bail!(Runtime, "distributed", "[nccl] {name}={v:?} is not a number."),
        },
    }
}

/// The unique id of a world: made by rank 0 and left in `dir` (written whole, then renamed,
/// so no reader sees half of it), read there by the others.
fn unique_id(n: &Nccl, rank: usize, dir: Option<&str>) -> Result<UniqueId> {
    let mut id = UniqueId { internal: [0; 128] };
    if rank == 0 {
        // SAFETY: an out pointer to a local id.
        let status = unsafe { (n.get_unique_id)(&mut id) };
        ensure!(
            status == SUCCESS,
            Runtime,
            "distributed",
            "[nccl] {}",
            n.describe(status, std::ptr::null_mut())
        );
        if let Some(dir) = dir {
            let (tmp, path) = (format!("{dir}/nccl_id.tmp"), format!("{dir}/nccl_id"));
            std::fs::write(&tmp, id.internal).and_then(|_| std::fs::rename(&tmp, &path)).map_err(
                |e| kiln_base::Error::Runtime {
                    op: "distributed",
                    msg: format!("[nccl] Cannot write the NCCL id to {path}: {e}"),
                },
            )?;
        }
        return Ok(id);
    }
    let Some(dir) = dir else {
        bail!(
            Runtime,
            "distributed",
            "[nccl] Rank {rank} needs KILN_NCCL_DIR (set by kiln.launch)."
        )
    };
    let (path, start) = (format!("{dir}/nccl_id"), Instant::now());
    loop {
        if let Ok(bytes) = std::fs::read(&path) {
            if bytes.len() == 128 {
                id.internal.copy_from_slice(&bytes);
                return Ok(id);
            }
        }
        ensure!(
            start.elapsed() < timeout(),
            Runtime,
            "distributed",
            "[nccl] Rank 0 left no NCCL id in {dir} within {:.0} s (KILN_DISTRIBUTED_TIMEOUT).",
            timeout().as_secs_f64()
        );
        kiln_base::interrupt::check("distributed")?;
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Runs `f` (which blocks until every process joins) on its own thread, so that a process
/// that never joins is an error after the timeout instead of a hang.
fn joined<T: Send + 'static>(
    what: &str,
    f: impl FnOnce() -> Result<T> + Send + 'static,
) -> Result<T> {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(kiln_cuda::runtime::gpu().and_then(|_| f()));
    });
    match rx.recv_timeout(timeout()) {
        Ok(r) => r,
        Err(_) => bail!(
            Runtime,
            "distributed",
            "[nccl] {what}: the other processes did not join within {:.0} s \
             (KILN_DISTRIBUTED_TIMEOUT).",
            timeout().as_secs_f64()
        ),
    }
}

/// The world of the processes the launcher started (or of this one alone).
pub fn world() -> Result<Arc<dyn Communicator>> {
    let n = nccl()?;
    kiln_cuda::runtime::gpu()?;
    let size = env_usize("KILN_WORLD_SIZE", 1)?.max(1);
    let rank = env_usize("KILN_RANK", 0)?;
    ensure!(
        rank < size,
        Runtime,
        "distributed",
        "[nccl] KILN_RANK={rank} is not below KILN_WORLD_SIZE={size}."
    );
    let dir = std::env::var("KILN_NCCL_DIR").ok();
    let id = unique_id(n, rank, dir.as_deref())?;
    let comm = joined("init", move || {
        let mut comm: Comm = std::ptr::null_mut();
        // SAFETY: an out pointer to a local; the id is the world's, the rank below the size.
        let status = unsafe { (n.comm_init_rank)(&mut comm, size as i32, id, rank as i32) };
        ensure!(
            status == SUCCESS,
            Runtime,
            "distributed",
            "[nccl] init: {}",
            n.describe(status, comm)
        );
        Ok(comm as usize)
    })?;
    Ok(Arc::new(NcclGroup::of(n, comm as Comm)?))
}

/// Pinned host words and device words for the agreement checks, the event they wait on,
/// and a stream for host arrays' staging.
struct Scratch {
    host: *mut u64,
    device: u64,
    event: sys::CUevent,
    stream: Stream,
}

/// One NCCL communicator; calls on it are serialised (NCCL's rule for one communicator).
pub struct NcclGroup {
    n: &'static Nccl,
    comm: Comm,
    rank: usize,
    size: usize,
    broken: AtomicBool,
    scratch: Mutex<Scratch>,
}

// SAFETY: the communicator and the scratch pointers are used only under the scratch mutex
// (every operation takes it first), which is the serialisation NCCL asks for.
unsafe impl Send for NcclGroup {}
// SAFETY: as for Send.
unsafe impl Sync for NcclGroup {}

const WORDS: usize = 8;

impl NcclGroup {
    /// The group of a live communicator.
    fn of(n: &'static Nccl, comm: Comm) -> Result<NcclGroup> {
        let (mut rank, mut size) = (0, 0);
        // SAFETY: a live communicator and out pointers to locals.
        let status = unsafe { (n.comm_user_rank)(comm, &mut rank) };
        ensure!(status == SUCCESS, Runtime, "distributed", "[nccl] {}", n.describe(status, comm));
        // SAFETY: as above.
        let status = unsafe { (n.comm_count)(comm, &mut size) };
        ensure!(status == SUCCESS, Runtime, "distributed", "[nccl] {}", n.describe(status, comm));
        let fail = |e: result::DriverError| kiln_base::Error::Runtime {
            op: "distributed",
            msg: format!("[nccl] Cannot set up the group's scratch memory: {e}"),
        };
        kiln_cuda::runtime::gpu()?;
        // SAFETY: fresh allocations of WORDS u64, owned by the group for the process's life.
        let (host, device) = unsafe {
            let host = result::malloc_host(WORDS * 8, 0).map_err(fail)? as *mut u64;
            (host, result::malloc_sync(WORDS * 8).map_err(fail)?)
        };
        let event =
            result::event::create(sys::CUevent_flags::CU_EVENT_DISABLE_TIMING).map_err(fail)?;
        let stream = result::stream::create(result::stream::StreamKind::NonBlocking)
            .map_err(fail)? as Stream;
        Ok(NcclGroup {
            n,
            comm,
            rank: rank as usize,
            size: size as usize,
            broken: AtomicBool::new(false),
            scratch: Mutex::new(Scratch { host, device, event, stream }),
        })
    }

    fn usable(&self, op: &'static str) -> Result<std::sync::MutexGuard<'_, Scratch>> {
        ensure!(
            !self.broken.load(Ordering::SeqCst),
            Runtime,
            op,
            "[nccl] An earlier collective of this group timed out: its processes are no longer \
             in step."
        );
        kiln_cuda::runtime::gpu()?;
        Ok(self.scratch.lock().unwrap_or_else(|e| e.into_inner()))
    }

    fn status(&self, op: &'static str, status: i32) -> Result<()> {
        if status == SUCCESS || status == IN_PROGRESS {
            return Ok(());
        }
        bail!(Runtime, op, "[nccl] {}", self.n.describe(status, self.comm))
    }

    /// Waits until `stream` has passed everything issued so far, or breaks the group (aborting
    /// the communicator, so its kernels stop) after the timeout.
    fn wait(&self, op: &'static str, s: &Scratch, stream: Stream, what: &str) -> Result<()> {
        let fail =
            |e: result::DriverError| kiln_base::Error::Runtime { op, msg: format!("[nccl] {e}") };
        // SAFETY: the event and stream are live.
        unsafe { result::event::record(s.event, stream as sys::CUstream) }.map_err(fail)?;
        let done = || {
            // SAFETY: a live event.
            match unsafe { result::event::query(s.event) } {
                Ok(()) => return Ok(true),
                Err(e) if e.0 != sys::CUresult::CUDA_ERROR_NOT_READY => return Err(fail(e)),
                Err(_) => {}
            }
            let mut async_status = SUCCESS;
            // SAFETY: a live communicator and an out pointer to a local.
            unsafe { (self.n.comm_get_async_error)(self.comm, &mut async_status) };
            self.status(op, async_status)?;
            Ok(false)
        };
        crate::poll(op, "nccl", what, done, || {
            self.broken.store(true, Ordering::SeqCst);
            // SAFETY: the communicator is not used again (the group is broken).
            unsafe { (self.n.comm_abort)(self.comm) };
        })
    }

    /// One collective on the caller's `stream`: the group's scratch held throughout, `check`
    /// (the agreement, or a send/recv's handshake), then NCCL's `call` and its status.
    fn issue(
        &self,
        op: &'static str,
        stream: usize,
        check: impl FnOnce(&Scratch, Stream) -> Result<()>,
        call: impl FnOnce(Stream) -> i32,
    ) -> Result<()> {
        let s = self.usable(op)?;
        let stream = stream as Stream;
        check(&s, stream)?;
        self.status(op, call(stream))
    }

    fn copy(
        &self,
        op: &'static str,
        r: std::result::Result<(), result::DriverError>,
    ) -> Result<()> {
        r.map_err(|e| kiln_base::Error::Runtime { op, msg: format!("[nccl] {e}") })
    }

    /// Every process of the group checks that all called `op` on the same dtype and shape
    /// (see the module's comment), before any data moves.
    fn agree(
        &self,
        op: &'static str,
        s: &Scratch,
        dtype: DType,
        shape: &[usize],
        extra: u64,
        stream: Stream,
    ) -> Result<()> {
        if !check_enabled() || capturing(stream) {
            return Ok(());
        }
        let h = fingerprint(op, dtype, shape, extra);
        let cu = stream as sys::CUstream;
        // SAFETY: the scratch holds WORDS words on both sides; the stream is waited for below,
        // before the host words are read or written again.
        unsafe {
            *s.host = h;
            *s.host.add(1) = !h;
            self.copy(
                op,
                result::memcpy_htod_async(s.device, std::slice::from_raw_parts(s.host, 2), cu),
            )?;
            let p = s.device as *mut std::ffi::c_void;
            self.status(
                op,
                (self.n.all_reduce)(p, p, 2, DataType::Uint64, RedOp::Max, self.comm, stream),
            )?;
            self.copy(
                op,
                result::memcpy_dtoh_async(
                    std::slice::from_raw_parts_mut(s.host.add(2), 2),
                    s.device,
                    cu,
                ),
            )?;
        }
        self.wait(op, s, stream, "the other processes of the group")?;
        // SAFETY: the stream has passed the copy back.
        let got = unsafe { [*s.host.add(2), *s.host.add(3)] };
        // Max of h and max of !h (= !min of h): equal to ours everywhere iff all agree.
        ensure!(
            got == [h, !h],
            Value,
            op,
            "[nccl] The processes of the group called different operations: this one called \
             {op} on {dtype} of shape {shape:?}, another a different op, dtype or shape."
        );
        Ok(())
    }

    /// A send or receive's handshake: the sender's digest goes to the receiver, which
    /// answers whether it matches its own, so both fail on a mismatch.
    fn handshake(
        &self,
        op: &'static str,
        s: &Scratch,
        (sending, peer): (bool, usize),
        dtype: DType,
        shape: &[usize],
        stream: Stream,
    ) -> Result<()> {
        if !check_enabled() || capturing(stream) {
            return Ok(());
        }
        let h = fingerprint("send/recv", dtype, shape, 0);
        let (cu, peer_i) = (stream as sys::CUstream, peer as i32);
        let dev = s.device as *mut std::ffi::c_void;
        // Device words: [0] the header, [1] the answer. Host words: [4] header, [5] answer.
        let answer_dev = (s.device + 8) as *mut std::ffi::c_void;
        let what = format!("process {peer}");
        // SAFETY: scratch words as above; each host word is read only after `wait`.
        unsafe {
            if sending {
                *s.host.add(4) = h;
                self.copy(
                    op,
                    result::memcpy_htod_async(
                        s.device,
                        std::slice::from_raw_parts(s.host.add(4), 1),
                        cu,
                    ),
                )?;
                self.status(
                    op,
                    (self.n.send)(dev, 1, DataType::Uint64, peer_i, self.comm, stream),
                )?;
                self.status(
                    op,
                    (self.n.recv)(answer_dev, 1, DataType::Uint64, peer_i, self.comm, stream),
                )?;
                self.copy(
                    op,
                    result::memcpy_dtoh_async(
                        std::slice::from_raw_parts_mut(s.host.add(5), 1),
                        s.device + 8,
                        cu,
                    ),
                )?;
                self.wait(op, s, stream, &what)?;
                ensure!(*s.host.add(5) == 1, Value, op, "[nccl] Process {peer} expected another dtype or shape than this send of {dtype} of shape {shape:?}.");
            } else {
                self.status(
                    op,
                    (self.n.recv)(dev, 1, DataType::Uint64, peer_i, self.comm, stream),
                )?;
                self.copy(
                    op,
                    result::memcpy_dtoh_async(
                        std::slice::from_raw_parts_mut(s.host.add(4), 1),
                        s.device,
                        cu,
                    ),
                )?;
                self.wait(op, s, stream, &what)?;
                let matched = *s.host.add(4) == h;
                *s.host.add(5) = matched as u64;
                self.copy(
                    op,
                    result::memcpy_htod_async(
                        s.device + 8,
                        std::slice::from_raw_parts(s.host.add(5), 1),
                        cu,
                    ),
                )?;
                self.status(
                    op,
                    (self.n.send)(answer_dev, 1, DataType::Uint64, peer_i, self.comm, stream),
                )?;
                // The answer's host word must stay put until the copy has read it.
                self.wait(op, s, stream, &what)?;
                ensure!(matched, Value, op, "[nccl] Process {peer} sent another dtype or shape than this recv of {dtype} of shape {shape:?} expects.");
            }
        }
        Ok(())
    }

    /// Host bytes through the device: `input` copied up, `run(input, output)` on device
    /// addresses on a stream of the staging's own, `output` copied back.
    fn staged(
        &self,
        op: &'static str,
        input: &[u8],
        output: &mut [u8],
        run: impl FnOnce(u64, u64, Stream) -> Result<()>,
    ) -> Result<()> {
        kiln_cuda::runtime::gpu()?;
        let stream = self.usable(op)?.stream as sys::CUstream;
        let fail =
            |e: result::DriverError| kiln_base::Error::Runtime { op, msg: format!("[nccl] {e}") };
        // SAFETY: fresh allocations of the bytes copied; freed below after a synchronize.
        let (din, dout) = unsafe {
            (
                result::malloc_sync(input.len().max(1)).map_err(fail)?,
                result::malloc_sync(output.len().max(1)).map_err(fail)?,
            )
        };
        let done = (|| {
            if !input.is_empty() {
                // SAFETY: the device buffers hold the host slices' lengths; synchronized below.
                unsafe { self.copy(op, result::memcpy_htod_async(din, input, stream))? };
            }
            run(din, dout, stream as Stream)?;
            if !output.is_empty() {
                // SAFETY: as above.
                unsafe { self.copy(op, result::memcpy_dtoh_async(output, dout, stream))? };
            }
            // SAFETY: a live stream.
            unsafe { self.copy(op, result::stream::synchronize(stream)) }
        })();
        // SAFETY: the stream has passed every use (or failed before issuing one).
        unsafe {
            let _ = result::stream::synchronize(stream);
            let _ = result::free_sync(din);
            let _ = result::free_sync(dout);
        }
        done
    }
}

/// Whether `stream` is recording a CUDA graph.
fn capturing(stream: Stream) -> bool {
    // SAFETY: one of kiln's live streams.
    let status = unsafe { result::stream::is_capturing(stream as sys::CUstream) };
    !matches!(status, Ok(sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE))
}

/// NCCL's element type and count for `n` elements of `dtype` moved as they are.
fn raw(dtype: DType, n: usize) -> (DataType, usize) {
    (DataType::Uint8, n * dtype.size())
}

/// NCCL's element type, count and reduction for a reduction of `n` elements of `dtype`.
fn reducing(
    op: &'static str,
    dtype: DType,
    n: usize,
    r: Reduction,
) -> Result<(DataType, usize, RedOp)> {
    let red = match r {
        Reduction::Sum => RedOp::Sum,
        Reduction::Max => RedOp::Max,
        Reduction::Min => RedOp::Min,
    };
    Ok(match dtype {
        // Bool: sum and max are "any", min is "all".
        DType::Bool => {
            (DataType::Uint8, n, if r == Reduction::Min { RedOp::Min } else { RedOp::Max })
        }
        DType::I8 => (DataType::Int8, n, red),
        DType::U8 => (DataType::Uint8, n, red),
        DType::I32 => (DataType::Int32, n, red),
        DType::U32 => (DataType::Uint32, n, red),
        DType::I64 => (DataType::Int64, n, red),
        DType::U64 => (DataType::Uint64, n, red),
        DType::F16 => (DataType::Float16, n, red),
        DType::BF16 => (DataType::Bfloat16, n, red),
        DType::F32 => (DataType::Float32, n, red),
        DType::F64 => (DataType::Float64, n, red),
        // A complex sum is the sums of the parts (max and min are refused by the op).
        DType::C64 => (DataType::Float32, 2 * n, red),
        DType::I16 | DType::U16 => bail!(
            Type,
            op,
            "[nccl] NCCL has no 16-bit integer reductions; cast {dtype} to int32 first."
        ),
    })
}

fn reduction_name(r: Reduction) -> &'static str {
    match r {
        Reduction::Sum => "all_sum",
        Reduction::Max => "all_max",
        Reduction::Min => "all_min",
    }
}

fn elements(shape: &[usize]) -> usize {
    shape.iter().product()
}

impl DeviceCollectives for NcclGroup {
    fn all_reduce(
        &self,
        r: Reduction,
        input: u64,
        output: u64,
        dtype: DType,
        shape: &[usize],
        stream: usize,
    ) -> Result<()> {
        let op = reduction_name(r);
        let (dt, count, red) = reducing(op, dtype, elements(shape), r)?;
        let agree = |s: &Scratch, stream| self.agree(op, s, dtype, shape, 0, stream);
        // SAFETY: both addresses hold `count` elements of `dt` (the caller's buffers).
        self.issue(op, stream, agree, |stream| unsafe {
            (self.n.all_reduce)(input as _, output as _, count, dt, red, self.comm, stream)
        })
    }

    fn all_gather(
        &self,
        input: u64,
        output: u64,
        dtype: DType,
        shape: &[usize],
        stream: usize,
    ) -> Result<()> {
        let op = "all_gather";
        let (dt, count) = raw(dtype, elements(shape));
        let agree = |s: &Scratch, stream| self.agree(op, s, dtype, shape, 0, stream);
        // SAFETY: the input holds `count` bytes, the output `size` times that.
        self.issue(op, stream, agree, |stream| unsafe {
            (self.n.all_gather)(input as _, output as _, count, dt, self.comm, stream)
        })
    }

    fn sum_scatter(
        &self,
        input: u64,
        output: u64,
        dtype: DType,
        shape: &[usize],
        stream: usize,
    ) -> Result<()> {
        let op = "sum_scatter";
        let (dt, count, red) = reducing(op, dtype, elements(shape) / self.size, Reduction::Sum)?;
        let agree = |s: &Scratch, stream| self.agree(op, s, dtype, shape, 0, stream);
        // SAFETY: the output holds `count` elements, the input `size` times that.
        self.issue(op, stream, agree, |stream| unsafe {
            (self.n.reduce_scatter)(input as _, output as _, count, dt, red, self.comm, stream)
        })
    }

    fn send(
        &self,
        input: u64,
        dst: usize,
        dtype: DType,
        shape: &[usize],
        stream: usize,
    ) -> Result<()> {
        let op = "send";
        let (dt, count) = raw(dtype, elements(shape));
        let handshake =
            |s: &Scratch, stream| self.handshake(op, s, (true, dst), dtype, shape, stream);
        // SAFETY: the input holds `count` bytes.
        self.issue(op, stream, handshake, |stream| unsafe {
            (self.n.send)(input as _, count, dt, dst as i32, self.comm, stream)
        })
    }

    fn recv(
        &self,
        output: u64,
        src: usize,
        dtype: DType,
        shape: &[usize],
        stream: usize,
    ) -> Result<()> {
        let op = "recv";
        let (dt, count) = raw(dtype, elements(shape));
        let handshake =
            |s: &Scratch, stream| self.handshake(op, s, (false, src), dtype, shape, stream);
        // SAFETY: the output holds `count` bytes.
        self.issue(op, stream, handshake, |stream| unsafe {
            (self.n.recv)(output as _, count, dt, src as i32, self.comm, stream)
        })
    }
}

impl Communicator for NcclGroup {
    fn rank(&self) -> usize {
        self.rank
    }

    fn size(&self) -> usize {
        self.size
    }

    fn backend(&self) -> &'static str {
        "nccl"
    }

    fn device(&self) -> Option<&dyn DeviceCollectives> {
        Some(self)
    }

    fn split(&self, color: i32, key: i32) -> Result<Arc<dyn Communicator>> {
        let op = "split";
        let Some(comm_split) = self.n.comm_split else {
            bail!(
                Runtime,
                op,
                "[nccl] NCCL {} cannot split a group (2.18 or later can).",
                self.n.version()
            );
        };
        let s = self.usable(op)?;
        self.agree(op, &s, DType::I32, &[], 0, s.stream)?;
        let key = if key < 0 { self.rank as i32 } else { key };
        let (comm, n) = (self.comm as usize, self.n);
        let new = joined("split", move || {
            let mut new: Comm = std::ptr::null_mut();
            // SAFETY: a live communicator, every process of which calls split (checked above).
            let status =
                unsafe { comm_split(comm as Comm, color, key, &mut new, std::ptr::null_mut()) };
            ensure!(
                status == SUCCESS,
                Runtime,
                "split",
                "[nccl] split: {}",
                n.describe(status, comm as Comm)
            );
            Ok(new as usize)
        })? as Comm;
        drop(s);
        Ok(Arc::new(NcclGroup::of(n, new)?))
    }

    fn all_reduce(
        &self,
        r: Reduction,
        input: &[u8],
        output: &mut [u8],
        dtype: DType,
        shape: &[usize],
    ) -> Result<()> {
        self.staged(reduction_name(r), input, output, |i, o, s| {
            DeviceCollectives::all_reduce(self, r, i, o, dtype, shape, s as usize)
        })
    }

    fn all_gather(
        &self,
        input: &[u8],
        output: &mut [u8],
        dtype: DType,
        shape: &[usize],
    ) -> Result<()> {
        self.staged("all_gather", input, output, |i, o, s| {
            DeviceCollectives::all_gather(self, i, o, dtype, shape, s as usize)
        })
    }

    fn sum_scatter(
        &self,
        input: &[u8],
        output: &mut [u8],
        dtype: DType,
        shape: &[usize],
    ) -> Result<()> {
        self.staged("sum_scatter", input, output, |i, o, s| {
            DeviceCollectives::sum_scatter(self, i, o, dtype, shape, s as usize)
        })
    }

    fn send(&self, input: &[u8], dst: usize, dtype: DType, shape: &[usize]) -> Result<()> {
        self.staged("send", input, &mut [], |i, _, s| {
            DeviceCollectives::send(self, i, dst, dtype, shape, s as usize)
        })
    }

    fn recv(&self, output: &mut [u8], src: usize, dtype: DType, shape: &[usize]) -> Result<()> {
        self.staged("recv", &[], output, |_, o, s| {
            DeviceCollectives::recv(self, o, src, dtype, shape, s as usize)
        })
    }
}

#[cfg(test)]
mod tests {
    //! A world of this process alone, on the GPU where there is one (skipped elsewhere): each
    //! collective is then its input, so every dtype's path through NCCL, the agreement check,
    //! the host staging and CUDA-graph capture are checked against the input's bytes.
    use super::*;
    use kiln_base::distributed::{register_group, Collective, CollectiveOp};
    use kiln_base::{ArrayData, Backend, Device, Layout, Primitive, HOST};

    fn upload(bytes: &[u8], shape: &[usize], dtype: DType) -> ArrayData {
        let host = ArrayData {
            buffer: HOST.from_slice(bytes).unwrap(),
            layout: Layout::contiguous(shape),
            dtype,
        };
        kiln_cuda::transfer::to_device(&host, Device::GPU).unwrap()
    }

    fn download(x: &ArrayData) -> Vec<u8> {
        let host = kiln_cuda::transfer::to_device(x, Device::CPU).unwrap();
        host.buffer.host_slice::<u8>()[..x.layout.shape.iter().product::<usize>() * x.dtype.size()]
            .to_vec()
    }

    /// Bytes of `n` ordinary values of `dtype` (finite, so a reduction of one copy is exact).
    fn values(dtype: DType, n: usize) -> Vec<u8> {
        let v = (0..n).map(|i| (i as f32 - 3.0) * 0.75);
        match dtype {
            DType::F32 => v.flat_map(f32::to_le_bytes).collect(),
            DType::F64 => v.flat_map(|x| (x as f64).to_le_bytes()).collect(),
            DType::F16 => v.flat_map(|x| half::f16::from_f32(x).to_le_bytes()).collect(),
            DType::BF16 => v.flat_map(|x| half::bf16::from_f32(x).to_le_bytes()).collect(),
            DType::C64 => v.flat_map(|x| [x, -x]).flat_map(f32::to_le_bytes).collect(),
            DType::Bool => (0..n).map(|i| (i % 3 == 0) as u8).collect(),
            d => (0..n * d.size()).map(|i| (i * 37 % 251) as u8).collect(),
        }
    }

    #[test]
    fn one_process_world_on_the_gpu() {
        if std::env::var_os("KILN_WORLD_SIZE").is_some() || !is_available() {
            eprintln!("skipped: no GPU with NCCL here");
            return;
        }
        let world = world().unwrap();
        assert_eq!((world.rank(), world.size(), world.backend()), (0, 1, "nccl"));
        let id = register_group(world.clone());
        let backend = kiln_cuda::CudaBackend;
        let shape = [4usize, 3];
        let dtypes = [
            DType::F32,
            DType::F16,
            DType::BF16,
            DType::I32,
            DType::I64,
            DType::U8,
            DType::Bool,
            DType::C64,
            DType::I16,
        ];
        let ops = [
            CollectiveOp::AllSum,
            CollectiveOp::AllMax,
            CollectiveOp::AllMin,
            CollectiveOp::AllGather,
            CollectiveOp::SumScatter,
        ];
        for dtype in dtypes {
            let bytes = values(dtype, 12);
            let x = upload(&bytes, &shape, dtype);
            for op in ops.iter().cloned() {
                let c = Collective { op: op.clone(), group: id, size: 1, rank: 0 };
                let Ok(out) = c.output_shapes(&[(&shape, dtype)]) else {
                    continue; // complex max/min: refused by the op itself
                };
                let prim = Primitive::Collective(c);
                let refused = dtype == DType::I16 && !matches!(op, CollectiveOp::AllGather);
                match backend.eval(&prim, std::slice::from_ref(&x), &out) {
                    Ok(y) => {
                        assert!(!refused, "{op:?} {dtype}");
                        assert_eq!(y[0].layout.shape.as_slice(), &shape, "{op:?} {dtype}");
                        assert_eq!(download(&y[0]), bytes, "{op:?} {dtype}");
                    }
                    Err(e) => {
                        assert!(refused, "{op:?} {dtype}: {e}");
                        assert!(e.to_string().contains("int32"), "{e}");
                    }
                }
            }
        }

        // Host arrays are staged through the device.
        let bytes = values(DType::F32, 12);
        let mut out = vec![0u8; bytes.len()];
        world.all_reduce(Reduction::Sum, &bytes, &mut out, DType::F32, &shape).unwrap();
        assert_eq!(out, bytes);
        world.all_gather(&bytes, &mut out, DType::F32, &shape).unwrap();
        assert_eq!(out, bytes);

        // Inside a CUDA graph: captured once, replayed on new input values.
        let x = upload(&bytes, &shape, DType::F32);
        let c = Collective { op: CollectiveOp::AllSum, group: id, size: 1, rank: 0 };
        let prim = Primitive::Collective(c);
        let out_shape = [(kiln_base::Shape::from(&shape[..]), DType::F32)];
        let graphs = backend.graph_capture().unwrap();
        let (graph, outputs) = graphs
            .capture(&mut || backend.eval(&prim, std::slice::from_ref(&x), &out_shape))
            .unwrap();
        let fresh = values(DType::F32, 12).iter().map(|b| b ^ 1).collect::<Vec<u8>>();
        let src = upload(&fresh, &shape, DType::F32);
        graphs.copy_all_row_major(&[(&src, &x.buffer)]).unwrap();
        graph.launch().unwrap();
        assert_eq!(download(&outputs[0]), fresh);

        // A split of one process, and its collectives.
        let sub = world.split(0, 0).unwrap();
        assert_eq!((sub.rank(), sub.size()), (0, 1));
        sub.all_reduce(Reduction::Max, &bytes, &mut out, DType::F32, &shape).unwrap();
        assert_eq!(out, bytes);
    }
}
