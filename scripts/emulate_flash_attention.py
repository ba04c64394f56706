"""A line-by-line numpy emulation of kiln-cuda's flash attention kernel
(crates/kiln-cuda/src/fast/attention.rs, `FLASH_BODY`): its tile layouts (XOR swizzle for head
dims 64 and 128, padded rows otherwise), the ldmatrix lane addresses, the mma.sync m16n8k16
fragment layouts as the PTX ISA defines them, the pipelined tile loads, masks and the online
softmax, checked against a plain numpy attention. It verifies the kernel's index arithmetic
without a GPU (slow: small shapes only). Keep it in step with the kernel.

    python3 scripts/emulate_flash_attention.py
"""
import numpy as np

BM = BN = 64
WARPS = 4
LOWEST = np.float32(-3.40282347e38)
LOG2E = np.float32(1.4426950408889634)


def sw(r, c, D):
    if D in (64, 128):
        return r * D + (((c >> 3) ^ (r & 7)) << 3) + (c & 7)
    return r * (D + 8) + c


def ldm4(tile, addrs, trans=False):
    """addrs[lane] -> regs[lane][m] = (lo, hi)"""
    regs = [[None] * 4 for _ in range(32)]
    for l in range(32):
        for m in range(4):
            if not trans:
                a = addrs[8 * m + l // 4]
                regs[l][m] = (tile[a + 2 * (l % 4)], tile[a + 2 * (l % 4) + 1])
            else:
                a0 = addrs[8 * m + 2 * (l % 4)]
                a1 = addrs[8 * m + 2 * (l % 4) + 1]
                regs[l][m] = (tile[a0 + l // 4], tile[a1 + l // 4])
    return regs


def mma(c, a, b0, b1):
    """c[lane] (4 floats), a[lane] (4 pairs), b0/b1[lane] pairs: PTX m16n8k16 layouts."""
    A = np.zeros((16, 16)); B = np.zeros((16, 8)); C = np.zeros((16, 8))
    for l in range(32):
        g, t = l >> 2, l & 3
        for i in range(8):
            row = g + 8 * ((i >> 1) & 1)
            col = 2 * t + (i & 1) + 8 * (i >= 4)
            A[row, col] = a[l][i // 2][i & 1]
        for i in range(4):
            k = 2 * t + (i & 1) + 8 * (i >= 2)
            B[k, g] = (b0 if i < 2 else b1)[l][i & 1]
        for i in range(4):
            C[g + 8 * (i >= 2), 2 * t + (i & 1)] = c[l][i]
    C = C + A @ B
    for l in range(32):
        g, t = l >> 2, l & 3
        for i in range(4):
            c[l][i] = C[g + 8 * (i >= 2), 2 * t + (i & 1)]


def max_nan(a, v):
    return v if (v > a or v != v) else a


def flash(q, k, v, scale, mask_mode, mask, D, lse=None):
    """q (B,Hq,Lq,D) etc. float64 arrays (already rounded values); `lse` (B,Hq,Lq), when
    given, receives the row logsumexp as the kernel's LSE variant writes it."""
    B, Hq, lq, _ = q.shape
    Hk, lk = k.shape[1], k.shape[2]
    group = Hq // Hk
    q_blocks = -(-lq // BM)
    out = np.zeros((B, Hq, lq, D))
    for bid in range(B * Hq * q_blocks):
        qb = q_blocks - 1 - bid % q_blocks
        bh = bid // q_blocks; h = bh % Hq; b = bh // Hq
        kvh_h = h // group
        i0 = qb * BM
        shift = lk - lq
        key_end = lk
        if mask_mode == 1 and i0 + shift >= 0:
            key_end = min(lk, min(lq, i0 + BM) - 1 + shift + 1)
        n_blocks = -(-key_end // BN)

        def load_tile(src, r0, rows):
            tile = np.full(BM * (D + 8), np.nan)
            for e in range(BM * (D // 8)):
                r = e // (D // 8); c = (e % (D // 8)) * 8
                valid = r0 + r < rows
                base = sw(r, c, D)
                for x in range(8):
                    tile[base + x] = src[r0 + r, c + x] if valid else 0.0
            return tile

        sq = load_tile(q[b, h], i0, lq)
        sk = load_tile(k[b, kvh_h], 0, lk) if n_blocks > 0 else None
        for warp in range(WARPS):
            qf = []
            for kc in range(D // 16):
                addrs = [sw(warp * 16 + (l & 15), kc * 16 + (l >> 4) * 8, D) for l in range(32)]
                qf.append(ldm4(sq, addrs))
            o = [[[0.0] * 4 for _ in range(D // 8)] for _ in range(32)]
            m = [[-np.inf, -np.inf] for _ in range(32)]
            L = [[0.0, 0.0] for _ in range(32)]
            sl = np.float32(scale) * LOG2E
            skw = sk
            for nb in range(n_blocks):
                j0 = nb * BN
                if nb > 0:
                    skw = load_tile(k[b, kvh_h], j0, lk)
                sv = load_tile(v[b, kvh_h], j0, lk)
                s = [[[0.0] * 4 for _ in range(BN // 8)] for _ in range(32)]
                for kc in range(D // 16):
                    for np_ in range(BN // 16):
                        addrs = [sw(np_ * 16 + ((l >> 4) << 3) + (l & 7), kc * 16 + ((l >> 3) & 1) * 8, D) for l in range(32)]
                        kf = ldm4(skw, addrs)
                        for (nt, r0, r1) in ((2 * np_, 0, 1), (2 * np_ + 1, 2, 3)):
                            c = [s[l][nt] for l in range(32)]
                            mma(c, [qf[kc][l] for l in range(32)], [kf[l][r0] for l in range(32)], [kf[l][r1] for l in range(32)])
                for l in range(32):
                    g, tq = l >> 2, l & 3
                    row0 = i0 + warp * 16 + g
                    for n in range(BN // 8):
                        for e in range(4):
                            i = row0 + (e >> 1) * 8
                            j = j0 + n * 8 + tq * 2 + (e & 1)
                            x = s[l][n][e] * sl
                            if mask_mode == 1 and j > i + shift:
                                x = LOWEST
                            if mask_mode == 2 and i < lq and j < lk:
                                x = x + mask[b, h, i, j] * LOG2E
                            if mask_mode == 3 and i < lq and j < lk and not mask[b, h, i, j]:
                                x = LOWEST
                            s[l][n][e] = x if j < lk else -np.inf
                for rh in range(2):
                    mx = [m[l][rh] for l in range(32)]
                    for l in range(32):
                        for n in range(BN // 8):
                            mx[l] = max_nan(max_nan(mx[l], s[l][n][2 * rh]), s[l][n][2 * rh + 1])
                    for o_ in (1, 2):
                        mx = [max_nan(mx[l], mx[l ^ o_]) for l in range(32)]
                    for l in range(32):
                        corr = 1.0 if mx[l] == m[l][rh] else np.exp2(m[l][rh] - mx[l])
                        base = 0.0 if mx[l] == -np.inf else mx[l]
                        sm = 0.0
                        for n in range(BN // 8):
                            for e in (2 * rh, 2 * rh + 1):
                                s[l][n][e] = np.exp2(s[l][n][e] - base)
                                sm += s[l][n][e]
                        L[l][rh] = L[l][rh] * corr + sm
                        m[l][rh] = mx[l]
                        for n in range(D // 8):
                            o[l][n][2 * rh] *= corr
                            o[l][n][2 * rh + 1] *= corr
                pf = [[((s[l][2 * c][0], s[l][2 * c][1]), (s[l][2 * c][2], s[l][2 * c][3]),
                        (s[l][2 * c + 1][0], s[l][2 * c + 1][1]), (s[l][2 * c + 1][2], s[l][2 * c + 1][3]))
                       for c in range(BN // 16)] for l in range(32)]
                for c in range(BN // 16):
                    for dp in range(D // 16):
                        addrs = [sw(c * 16 + ((l >> 3) & 1) * 8 + (l & 7), dp * 16 + (l >> 4) * 8, D) for l in range(32)]
                        vf = ldm4(sv, addrs, trans=True)
                        for (nt, r0, r1) in ((2 * dp, 0, 1), (2 * dp + 1, 2, 3)):
                            cc = [o[l][nt] for l in range(32)]
                            mma(cc, [pf[l][c] for l in range(32)], [vf[l][r0] for l in range(32)], [vf[l][r1] for l in range(32)])
            for rh in range(2):
                Ls = [L[l][rh] for l in range(32)]
                for o_ in (1, 2):
                    Ls = [Ls[l] + Ls[l ^ o_] for l in range(32)]
                for l in range(32):
                    g, tq = l >> 2, l & 3
                    i = i0 + warp * 16 + g + rh * 8
                    if i >= lq:
                        continue
                    if lse is not None and tq == 0:
                        lv = -np.inf if lk == 0 else (m[l][rh] + np.log2(Ls[l])) * np.log(2.0)
                        if mask_mode == 1 and lk > 0 and i + shift < 0:
                            lv = np.log(lk)
                        lse[b, h, i] = lv
                    inv = 0.0 if lk == 0 else 1.0 / Ls[l]
                    for n in range(D // 8):
                        out[b, h, i, n * 8 + 2 * tq] = o[l][n][2 * rh] * inv
                        out[b, h, i, n * 8 + 2 * tq + 1] = o[l][n][2 * rh + 1] * inv
    return out


def np_sdpa(q, k, v, scale, mode, mask):
    g = q.shape[1] // k.shape[1]
    k, v = np.repeat(k, g, axis=1), np.repeat(v, g, axis=1)
    s = scale * q @ np.swapaxes(k, -1, -2)
    lq, lk = q.shape[2], k.shape[2]
    if mode == 1:
        vis = np.arange(lk)[None, :] <= np.arange(lq)[:, None] + (lk - lq)
        s = np.where(vis, s, LOWEST)
    elif mode == 2:
        s = s + mask
    elif mode == 3:
        s = np.where(mask, s, LOWEST)
    s = s - s.max(-1, keepdims=True)
    p = np.exp(s)
    return (p / p.sum(-1, keepdims=True)) @ v


def main():
    rng = np.random.default_rng(0)
    for (B, Hq, Hk, lq, lk, D) in [(1, 2, 1, 70, 100, 64), (1, 1, 1, 130, 40, 64), (1, 1, 1, 20, 65, 128),
                                    (1, 2, 1, 70, 100, 80), (1, 1, 1, 30, 40, 16), (1, 2, 2, 20, 65, 32)]:
        q, k, v = (rng.standard_normal(s) for s in ((B, Hq, lq, D), (B, Hk, lk, D), (B, Hk, lk, D)))
        for mode in range(4):
            mask = None
            if mode == 2:
                mask = rng.standard_normal((B, Hq, lq, lk))
            if mode == 3:
                mask = rng.random((B, Hq, lq, lk)) < 0.6
                mask[:, :, :3] = False
            got = flash(q, k, v, 0.125, mode, mask, D)
            want = np_sdpa(q, k, v, 0.125, mode, mask)
            err = np.abs(got - want).max()
            print((B, Hq, Hk, lq, lk, D), "mask", mode, "max err", err)
            assert err < 1e-6, err
    print("ok")


if __name__ == "__main__":
    main()
