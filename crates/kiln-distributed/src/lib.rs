//! kiln-distributed: the communication backends behind kiln-base's `Communicator`, and the
//! choice between them. Groups live in kiln-base's table; a primitive names its group by
//! number there, and backends' kernels (kiln-cpu's `collective.rs`) call it.
//!
//! - `mpi.rs`: OpenMPI, loaded at run time (`mpi_lib.rs`), for host arrays; GPU arrays reach
//!   it through the core's CPU fallback. `half_ops.rs`: its float16/bfloat16 reductions.
//! - `nccl.rs`: NVIDIA's NCCL, loaded at run time (`nccl_lib.rs`), one process per GPU: GPU
//!   arrays move on the device (kiln-cuda's `collective.rs` calls its `DeviceCollectives`),
//!   host arrays through it.
//! - `Singleton`: the group of this process alone, when nothing was launched (as MLX).

mod half_ops;
mod mpi;
mod mpi_lib;
mod nccl;
mod nccl_lib;

use kiln_base::distributed::{register_group, Communicator, Reduction};
use kiln_base::{bail, DType, Result};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The backends `init` knows, by MLX's names.
pub const BACKENDS: [&str; 5] = ["any", "mpi", "nccl", "jaccl", "ring"];

/// Whether `backend` can be initialised in this process.
pub fn is_available(backend: &str) -> bool {
    match backend {
        "mpi" => mpi::is_available(),
        "nccl" => nccl::is_available(),
        "any" => mpi::is_available() || nccl::is_available(),
        _ => false,
    }
}

/// The backend a launcher asked for: `KILN_DISTRIBUTED_BACKEND`, or MPI when this process
/// runs under mpirun.
fn launched_backend() -> Option<String> {
    if let Ok(b) = std::env::var("KILN_DISTRIBUTED_BACKEND") {
        return Some(b);
    }
    std::env::var_os("OMPI_COMM_WORLD_SIZE").map(|_| "mpi".to_string())
}

/// How long a collective waits for the other processes (`KILN_DISTRIBUTED_TIMEOUT`, seconds;
/// 300 by default) before it fails instead of hanging.
fn timeout() -> Duration {
    let secs = std::env::var("KILN_DISTRIBUTED_TIMEOUT").ok().and_then(|s| s.parse::<f64>().ok());
    Duration::from_secs_f64(secs.filter(|s| *s > 0.0).unwrap_or(300.0))
}

/// Polls `done` until it reports completion, sleeping a little between polls once it has
/// taken a while (a collective waits for the slowest process); after the timeout it runs
/// `give_up` (which marks the group broken) and fails naming `what` it waited for.
fn poll(
    op: &'static str,
    backend: &str,
    what: &str,
    mut done: impl FnMut() -> Result<bool>,
    give_up: impl FnOnce(),
) -> Result<()> {
    let (start, limit) = (std::time::Instant::now(), timeout());
    let mut spins = 0u32;
    while !done()? {
        if start.elapsed() > limit {
            give_up();
            bail!(
                Runtime,
                op,
                "[{backend}] No answer from {what} within {:.0} s (KILN_DISTRIBUTED_TIMEOUT): a \
                 process stopped, failed, or called another operation.",
                limit.as_secs_f64()
            );
        }
        kiln_base::interrupt::check(op)?;
        // Busy at first (a sleep wakes tens of microseconds late, and every step of a
        // data-parallel loop waits here for the slower process), yielding the core, then
        // sleeping once the wait is long.
        spins += 1;
        if spins > 200_000 {
            std::thread::sleep(Duration::from_millis(1));
        } else if spins > 1000 {
            std::thread::yield_now();
        }
    }
    Ok(())
}

static WORLD: Mutex<Option<(String, usize)>> = Mutex::new(None);

/// The world group's number in kiln-base's table: the backend's world for `backend` (for
/// "any": the one this process was launched with, else this process alone). `strict` turns
/// "nothing to initialise" into an error, as MLX's `init(strict=True)`.
pub fn init(backend: &str, strict: bool) -> Result<usize> {
    let mut world = WORLD.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((b, id)) = world.as_ref() {
        if (backend == "any" && !(strict && b == "singleton")) || b == backend {
            return Ok(*id);
        }
    }
    let chosen = match backend {
        "any" => launched_backend(),
        b => Some(b.to_string()),
    };
    let group: Arc<dyn Communicator> = match chosen.as_deref() {
        Some("mpi") => mpi::world()?,
        Some("nccl") => nccl::world()?,
        // Asked for, or set by a launcher that started several processes: running them as
        // independent singletons would be wrong.
        Some(other) => bail!(
            Runtime,
            "distributed",
            "[distributed] The {other} backend is not available in this build."
        ),
        _ if strict => {
            bail!(Runtime, "distributed", "[distributed] Couldn't initialize any backend")
        }
        _ => Arc::new(Singleton),
    };
    let name = group.backend().to_string();
    let id = register_group(group);
    *world = Some((if backend == "any" { name } else { backend.to_string() }, id));
    Ok(id)
}

/// Ends the backends' sessions (MPI_Finalize when kiln began it); called at exit.
pub fn finalize() {
    mpi::finalize();
}

/// Splits group `id` (every process of it calls this) and returns the new group's number.
pub fn split(id: usize, color: i32, key: i32) -> Result<usize> {
    let g = kiln_base::distributed::group(id)?;
    Ok(register_group(g.split(color, key)?))
}

/// This process alone: collectives over it are their input (the ops never call it), and
/// there is no peer to split off, send to or receive from.
struct Singleton;

impl Singleton {
    fn alone<T>(&self, verb: &'static str) -> Result<T> {
        bail!(Value, verb, "Cannot {verb} a singleton group")
    }
}

impl Communicator for Singleton {
    fn rank(&self) -> usize {
        0
    }
    fn size(&self) -> usize {
        1
    }
    fn backend(&self) -> &'static str {
        "singleton"
    }
    fn split(&self, _color: i32, _key: i32) -> Result<Arc<dyn Communicator>> {
        bail!(Runtime, "split", "Cannot split the distributed group further.")
    }
    fn all_reduce(
        &self,
        _: Reduction,
        input: &[u8],
        output: &mut [u8],
        _: DType,
        _: &[usize],
    ) -> Result<()> {
        output.copy_from_slice(input);
        Ok(())
    }
    fn all_gather(&self, input: &[u8], output: &mut [u8], _: DType, _: &[usize]) -> Result<()> {
        output.copy_from_slice(input);
        Ok(())
    }
    fn sum_scatter(&self, input: &[u8], output: &mut [u8], _: DType, _: &[usize]) -> Result<()> {
        output.copy_from_slice(input);
        Ok(())
    }
    fn send(&self, _: &[u8], _: usize, _: DType, _: &[usize]) -> Result<()> {
        self.alone("send to")
    }
    fn recv(&self, _: &mut [u8], _: usize, _: DType, _: &[usize]) -> Result<()> {
        self.alone("recv from")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nothing_launched_is_the_singleton_group() {
        if launched_backend().is_some() {
            return; // under a launcher: the world is real
        }
        let id = init("any", false).unwrap();
        let g = kiln_base::distributed::group(id).unwrap();
        assert_eq!((g.rank(), g.size(), g.backend()), (0, 1, "singleton"));
        assert_eq!(init("any", false).unwrap(), id);
        assert!(init("any", true).is_err());
        if !nccl::is_available() {
            assert!(init("nccl", false).is_err());
        }
        assert!(split(id, 0, 0).is_err());
        assert!(g.send(&[], 0, DType::F32, &[]).is_err());
    }
}
