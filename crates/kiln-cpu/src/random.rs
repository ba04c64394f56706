//! RandomBits: for each key (row-major over the key array's leading dims), threefry bytes
//! from `kiln_base::random::fill_bits`, written consecutively. fill_bits writes words
//! little-endian, which is the host's order on every platform kiln targets.

use kiln_base::random::fill_bits;
use kiln_base::shape::size_of;
use kiln_base::{bail, ArrayData, DType, Layout, Result, HOST};

pub(crate) fn random_bits(
    key: &ArrayData,
    per_key: &[usize],
    width: u8,
    shape: &[usize],
    dtype: DType,
) -> Result<ArrayData> {
    let op = "random_bits";
    let Some(chunk) = size_of(per_key).checked_mul(width as usize) else {
        bail!(Runtime, op, "Output is too large.");
    };
    let src = key.buffer.host_slice::<u32>();
    let words: Vec<u32> = key.layout.indices().map(|i| src[i]).collect();
    let Some(nbytes) = chunk.checked_mul(words.len() / 2) else {
        bail!(Runtime, op, "Output is too large.");
    };
    let mut buffer = HOST.alloc(nbytes)?;
    let Some(out) = buffer.host_slice_mut::<u8>() else {
        bail!(Runtime, op, "Fresh output buffer is shared.");
    };
    if chunk > 0 {
        for (bytes, k) in out.chunks_mut(chunk).zip(words.chunks_exact(2)) {
            fill_bits((k[0], k[1]), bytes);
        }
    }
    Ok(ArrayData { buffer, layout: Layout::contiguous(shape), dtype })
}
