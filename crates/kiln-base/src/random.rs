//! Counter-based random bits: threefry2x32 (20 rounds), the generator of JAX and MLX. Pure
//! integer arithmetic, so every backend produces the same numbers for the same key.

/// Threefry-2x32 of the counter pair `(c0, c1)` under key `(k0, k1)`.
pub fn threefry2x32(key: (u32, u32), count: (u32, u32)) -> (u32, u32) {
    const ROTATIONS: [[u32; 4]; 2] = [[13, 15, 26, 6], [17, 29, 16, 24]];
    let ks = [key.0, key.1, key.0 ^ key.1 ^ 0x1BD1_1BDA];
    let (mut x0, mut x1) = (count.0.wrapping_add(ks[0]), count.1.wrapping_add(ks[1]));
    for round in 0..5 {
        for rot in ROTATIONS[round % 2] {
            x0 = x0.wrapping_add(x1);
            x1 = x1.rotate_left(rot) ^ x0;
        }
        x0 = x0.wrapping_add(ks[(round + 1) % 3]);
        x1 = x1.wrapping_add(ks[(round + 2) % 3]).wrapping_add(round as u32 + 1);
    }
    (x0, x1)
}

/// Fills `out` (the bytes drawn from one key) as MLX lays them out: the output is seen as
/// 32-bit words; word `i` of the first half and word `i + half` of the second half come from
/// one hash of the counter pair `(i, i + half)`, and an odd last word from counter `(half, 0)`.
pub fn fill_bits(key: (u32, u32), out: &mut [u8]) {
    let words = out.len().div_ceil(4);
    let half = words / 2;
    let odd = words % 2 == 1;
    let mut put = |word: usize, value: u32| {
        let bytes = value.to_le_bytes();
        let start = word * 4;
        let end = (start + 4).min(out.len());
        out[start..end].copy_from_slice(&bytes[..end - start]);
    };
    let second = half + odd as usize;
    for i in 0..half {
        let (a, b) = threefry2x32(key, (i as u32, (i + second) as u32));
        put(i, a);
        put(i + second, b);
    }
    if odd {
        put(half, threefry2x32(key, (half as u32, 0)).0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_matches_mlx_and_jax() {
        // mx.random.split(mx.random.key(0)) in MLX 0.32 (and jax.random.split(PRNGKey(0))).
        let mut out = [0u8; 16];
        fill_bits((0, 0), &mut out);
        let words: Vec<u32> =
            out.chunks(4).map(|c| u32::from_le_bytes(c.try_into().unwrap())).collect();
        assert_eq!(words, vec![4146024105, 967050713, 2718843009, 1272950319]);
    }
}
