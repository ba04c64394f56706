//! Collectives between processes: the parameters of `Primitive::Collective`, the
//! `Communicator` a backend (MPI, NCCL) implements (with `DeviceCollectives` where it moves
//! GPU memory itself), and the process-wide table of groups that
//! primitives name by number (a primitive must stay hashable and comparable).

use crate::{bail, ensure, DType, Result, Shape};
use std::sync::{Arc, RwLock};

/// What a `Primitive::Collective` computes over the processes of its group.
#[derive(Debug, Clone, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum CollectiveOp {
    /// Elementwise sum of every process's input.
    AllSum,
    /// Elementwise maximum.
    AllMax,
    /// Elementwise minimum.
    AllMin,
    /// Every process's input concatenated along axis 0 (a 0-d input counts as shape (1,)).
    AllGather,
    /// The sum, of which each process keeps its block of axis 0.
    SumScatter,
    /// Sends the input to process `dst`; the output is the input (a view).
    Send { dst: usize },
    /// Receives `shape` and `dtype` from process `src`. No inputs; `nonce` keeps two
    /// receives apart (each is its own message), so compile never merges them.
    Recv { src: usize, shape: Shape, dtype: DType, nonce: u64 },
}

/// The reductions of [`CollectiveOp::AllSum`] and its kin.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Reduction {
    Sum,
    Max,
    Min,
}

/// One collective of a group: the op, the group's number in the table, and its size and this
/// process's rank (kept here so shape rules need no table lookup).
#[derive(Debug, Clone, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct Collective {
    pub op: CollectiveOp,
    pub group: usize,
    pub size: usize,
    pub rank: usize,
}

impl Collective {
    pub fn name(&self) -> &'static str {
        match self.op {
            CollectiveOp::AllSum => "all_sum",
            CollectiveOp::AllMax => "all_max",
            CollectiveOp::AllMin => "all_min",
            CollectiveOp::AllGather => "all_gather",
            CollectiveOp::SumScatter => "sum_scatter",
            CollectiveOp::Send { .. } => "send",
            CollectiveOp::Recv { .. } => "recv",
        }
    }

    pub fn num_inputs(&self) -> usize {
        match self.op {
            CollectiveOp::Recv { .. } => 0,
            _ => 1,
        }
    }

    pub fn output_shapes(&self, inputs: &[(&[usize], DType)]) -> Result<Vec<(Shape, DType)>> {
        let op = self.name();
        let peer = |p: usize| {
            ensure!(
                p < self.size && p != self.rank,
                Value,
                op,
                "Invalid peer {p} for a group of {} processes in which this one is {}.",
                self.size,
                self.rank
            );
            Ok(())
        };
        if let CollectiveOp::Recv { src, shape, dtype, .. } = &self.op {
            peer(*src)?;
            return Ok(vec![(shape.clone(), *dtype)]);
        }
        let (shape, dtype) = inputs[0];
        if dtype == DType::C64 && matches!(self.op, CollectiveOp::AllMax | CollectiveOp::AllMin) {
            bail!(Type, op, "complex64 has no order to take a maximum or minimum in.");
        }
        let mut out = Shape::from(shape);
        match &self.op {
            CollectiveOp::AllGather => {
                if out.is_empty() {
                    out.push(1);
                }
                out[0] *= self.size;
            }
            CollectiveOp::SumScatter => {
                ensure!(
                    !out.is_empty() && out[0] % self.size == 0,
                    Value,
                    op,
                    "Invalid input shape {shape:?}: the first axis must divide among the {} \
                     processes of the group.",
                    self.size
                );
                out[0] /= self.size;
            }
            CollectiveOp::Send { dst } => peer(*dst)?,
            _ => {}
        }
        Ok(vec![(out, dtype)])
    }

    /// The reduction of an all-reduce (`None` for the others).
    pub fn reduction(&self) -> Option<Reduction> {
        match self.op {
            CollectiveOp::AllSum | CollectiveOp::SumScatter => Some(Reduction::Sum),
            CollectiveOp::AllMax => Some(Reduction::Max),
            CollectiveOp::AllMin => Some(Reduction::Min),
            _ => None,
        }
    }
}

/// A group of processes and the operations between them, on row-major host bytes. Every
/// process of the group calls the same operations in the same order; an implementation
/// checks that they agree (op, dtype and shape) before moving data, so a mismatch is an
/// error on every process rather than garbage or a hang.
pub trait Communicator: Send + Sync {
    fn rank(&self) -> usize;
    fn size(&self) -> usize;
    /// The backend's name ("mpi", "nccl").
    fn backend(&self) -> &'static str;
    /// A new group of the processes that pass the same `color`, ranked by `key` (then by
    /// rank); every process of this group must call it.
    fn split(&self, color: i32, key: i32) -> Result<Arc<dyn Communicator>>;
    /// `output = reduce(input of every process)`, elementwise, `shape` of `dtype`.
    fn all_reduce(
        &self,
        r: Reduction,
        input: &[u8],
        output: &mut [u8],
        dtype: DType,
        shape: &[usize],
    ) -> Result<()>;
    /// `all_reduce` with `data` as both input and output (a donated buffer: no copy, no
    /// fresh allocation).
    fn all_reduce_in_place(
        &self,
        r: Reduction,
        data: &mut [u8],
        dtype: DType,
        shape: &[usize],
    ) -> Result<()> {
        let input = data.to_vec();
        self.all_reduce(r, &input, data, dtype, shape)
    }
    /// Every process's `input` (`shape`) concatenated in rank order into `output`.
    fn all_gather(
        &self,
        input: &[u8],
        output: &mut [u8],
        dtype: DType,
        shape: &[usize],
    ) -> Result<()>;
    /// The sum of every process's `input` (`shape`), of which `output` gets this process's
    /// equal block of the first axis.
    fn sum_scatter(
        &self,
        input: &[u8],
        output: &mut [u8],
        dtype: DType,
        shape: &[usize],
    ) -> Result<()>;
    fn send(&self, input: &[u8], dst: usize, dtype: DType, shape: &[usize]) -> Result<()>;
    fn recv(&self, output: &mut [u8], src: usize, dtype: DType, shape: &[usize]) -> Result<()>;
    /// The same operations on device memory, where the backend moves it itself (NCCL);
    /// `None` sends device arrays through the host.
    fn device(&self) -> Option<&dyn DeviceCollectives> {
        None
    }
}

/// A `Communicator`'s operations on GPU memory: raw device addresses of row-major buffers,
/// issued on the CUDA stream `stream` (a `CUstream` as an address), so that they queue
/// behind the kernels that made their inputs and can be captured into a CUDA graph. The
/// caller keeps the buffers alive until the stream has passed the work.
pub trait DeviceCollectives: Send + Sync {
    fn all_reduce(
        &self,
        r: Reduction,
        input: u64,
        output: u64,
        dtype: DType,
        shape: &[usize],
        stream: usize,
    ) -> Result<()>;
    fn all_gather(
        &self,
        input: u64,
        output: u64,
        dtype: DType,
        shape: &[usize],
        stream: usize,
    ) -> Result<()>;
    fn sum_scatter(
        &self,
        input: u64,
        output: u64,
        dtype: DType,
        shape: &[usize],
        stream: usize,
    ) -> Result<()>;
    fn send(
        &self,
        input: u64,
        dst: usize,
        dtype: DType,
        shape: &[usize],
        stream: usize,
    ) -> Result<()>;
    fn recv(
        &self,
        output: u64,
        src: usize,
        dtype: DType,
        shape: &[usize],
        stream: usize,
    ) -> Result<()>;
}

static GROUPS: RwLock<Vec<Arc<dyn Communicator>>> = RwLock::new(Vec::new());

/// Adds a group to the table; its number is what `Collective::group` holds.
pub fn register_group(group: Arc<dyn Communicator>) -> usize {
    let mut groups = GROUPS.write().unwrap_or_else(|e| e.into_inner());
    groups.push(group);
    groups.len() - 1
}

/// The group numbered `id`.
pub fn group(id: usize) -> Result<Arc<dyn Communicator>> {
    let groups = GROUPS.read().unwrap_or_else(|e| e.into_inner());
    match groups.get(id) {
        Some(g) => Ok(g.clone()),
        None => bail!(Value, "distributed", "No process group numbered {id}."),
    }
}

/// A 64-bit digest of one operation's description, equal on every process that calls the
/// same operation (FNV-1a: stable across processes and builds, unlike `DefaultHasher`).
pub fn fingerprint(op: &str, dtype: DType, shape: &[usize], extra: u64) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let mut eat = |bytes: &[u8]| {
        for &b in bytes {
            h ^= b as u64;
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
    };
    eat(op.as_bytes());
    eat(dtype.name().as_bytes());
    eat(&(shape.len() as u64).to_le_bytes());
    for &d in shape {
        eat(&(d as u64).to_le_bytes());
    }
    eat(&extra.to_le_bytes());
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    fn coll(op: CollectiveOp) -> Collective {
        Collective { op, group: 0, size: 4, rank: 1 }
    }

    #[test]
    fn shapes() {
        let f = DType::F32;
        let gather = coll(CollectiveOp::AllGather).output_shapes(&[(&[2, 3], f)]).unwrap();
        assert_eq!(gather[0].0.as_slice(), &[8, 3]);
        let scalar = coll(CollectiveOp::AllGather).output_shapes(&[(&[], f)]).unwrap();
        assert_eq!(scalar[0].0.as_slice(), &[4]);
        let scatter = coll(CollectiveOp::SumScatter).output_shapes(&[(&[8, 3], f)]).unwrap();
        assert_eq!(scatter[0].0.as_slice(), &[2, 3]);
        assert!(coll(CollectiveOp::SumScatter).output_shapes(&[(&[6], f)]).is_err());
        assert!(coll(CollectiveOp::Send { dst: 1 }).output_shapes(&[(&[2], f)]).is_err());
        assert!(coll(CollectiveOp::Send { dst: 4 }).output_shapes(&[(&[2], f)]).is_err());
        assert!(coll(CollectiveOp::AllMax).output_shapes(&[(&[2], DType::C64)]).is_err());
    }

    #[test]
    fn fingerprints_tell_descriptions_apart() {
        let a = fingerprint("all_sum", DType::F32, &[2, 3], 0);
        assert_eq!(a, fingerprint("all_sum", DType::F32, &[2, 3], 0));
        assert_ne!(a, fingerprint("all_sum", DType::F32, &[3, 2], 0));
        assert_ne!(a, fingerprint("all_sum", DType::F16, &[2, 3], 0));
        assert_ne!(a, fingerprint("all_max", DType::F32, &[2, 3], 0));
    }
}
