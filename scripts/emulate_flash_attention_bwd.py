"""A line-by-line numpy emulation of kiln-cuda's fused attention backward
(crates/kiln-cuda/src/fast/attention_bwd.rs: `KV_BODY`, `Q_BODY`, `DELTA_BODY`), with the
forward's logsumexp from emulate_flash_attention.py's `flash` (its LSE variant): tile
layouts, ldmatrix lane addresses (.trans too), mma.sync fragments, the causal tile skips
and rows that see no key, GQA; checked against numpy gradients of a plain attention. It
verifies the kernels' index arithmetic without a GPU (slow: small shapes only). Keep it in
step with the kernels.

    python3 scripts/emulate_flash_attention_bwd.py
"""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
from emulate_flash_attention import LOG2E, flash, ldm4, mma, sw  # noqa: E402

BN = BM = 64
WARPS = 4


def load_rows(src, r0, rows, R, D):
    tile = np.full(R * (D + 8), np.nan)
    for e in range(R * (D // 8)):
        r = e // (D // 8)
        c = (e % (D // 8)) * 8
        valid = r0 + r < rows
        base = sw(r, c, D)
        for x in range(8):
            tile[base + x] = src[r0 + r, c + x] if valid else 0.0
    return tile


def a_frags(tile, warp, D):
    """The warp's 16 rows as A fragments, one per 16 columns (k_ldm4 of the kernels)."""
    return [ldm4(tile, [sw(warp * 16 + (l & 15), kc * 16 + (l >> 4) * 8, D) for l in range(32)])
            for kc in range(D // 16)]


def b_rows(tile, np_, kc, D):
    """B fragments from 16 rows (n) x 16 columns (k): non-transposed ldmatrix."""
    return ldm4(tile, [sw(np_ * 16 + ((l >> 4) << 3) + (l & 7), kc * 16 + ((l >> 3) & 1) * 8, D)
                       for l in range(32)])


def b_trans(tile, c, dp, D):
    """B fragments from 16 rows (k) x 16 columns (n): ldmatrix.trans."""
    return ldm4(tile, [sw(c * 16 + ((l >> 3) & 1) * 8 + (l & 7), dp * 16 + (l >> 4) * 8, D)
                       for l in range(32)], trans=True)


def mma2(acc, a, b, n0):
    """acc tiles n0 and n0 + 1 += a x (the two 8-column halves of b)."""
    for nt, r0, r1 in ((n0, 0, 1), (n0 + 1, 2, 3)):
        c = [acc[l][nt] for l in range(32)]
        mma(c, a, [b[l][r0] for l in range(32)], [b[l][r1] for l in range(32)])


def pack(s, c, l):
    return ((s[l][2 * c][0], s[l][2 * c][1]), (s[l][2 * c][2], s[l][2 * c][3]),
            (s[l][2 * c + 1][0], s[l][2 * c + 1][1]), (s[l][2 * c + 1][2], s[l][2 * c + 1][3]))


def zeros(n):
    return [[[0.0] * 4 for _ in range(n)] for _ in range(32)]


def kv_kernel(q, k, v, do, lse, delta, scale, causal, D):
    B, Hq, lq, _ = q.shape
    Hk, lk = k.shape[1], k.shape[2]
    group = Hq // Hk
    BQ = 64 if D <= 64 else 32
    k_blocks = -(-lk // BN)
    dk = np.full(k.shape, np.nan)
    dv = np.full(v.shape, np.nan)
    sl = scale * LOG2E
    for bid in range(B * Hk * k_blocks):
        kb, bkv = bid % k_blocks, bid // k_blocks
        b, kvh = bkv // Hk, bkv % Hk
        j0 = kb * BN
        sa = load_rows(k[b, kvh], j0, lk, BN, D)
        sv = load_rows(v[b, kvh], j0, lk, BN, D)
        shift = lk - lq
        q_tiles = -(-lq // BQ)
        blind = -shift if causal and shift < 0 else 0
        for warp in range(WARPS):
            kf = a_frags(sa, warp, D)
            va_all = a_frags(sv, warp, D)
            dka, dva = zeros(D // 8), zeros(D // 8)
            for hg in range(group):
                h = kvh * group + hg
                for t in range(q_tiles):
                    i0 = t * BQ
                    if causal and i0 >= blind and min(lq, i0 + BQ) - 1 + shift < j0:
                        continue
                    sq = load_rows(q[b, h], i0, lq, BQ, D)
                    sdo = load_rows(do[b, h], i0, lq, BQ, D)
                    slse = [lse[b, h, i0 + x] * LOG2E if i0 + x < lq else 0.0 for x in range(BQ)]
                    sdel = [delta[b, h, i0 + x] if i0 + x < lq else 0.0 for x in range(BQ)]
                    st, dpt = zeros(BQ // 8), zeros(BQ // 8)
                    for kc in range(D // 16):
                        for np_ in range(BQ // 16):
                            mma2(st, [kf[kc][l] for l in range(32)], b_rows(sq, np_, kc, D), 2 * np_)
                            mma2(dpt, [va_all[kc][l] for l in range(32)], b_rows(sdo, np_, kc, D), 2 * np_)
                    for l in range(32):
                        g, tq = l >> 2, l & 3
                        for n in range(BQ // 8):
                            for e in range(4):
                                il = n * 8 + tq * 2 + (e & 1)
                                i = i0 + il
                                j = j0 + warp * 16 + g + (e >> 1) * 8
                                p = ds = 0.0
                                if i < lq and j < lk:
                                    if causal and i < blind:
                                        p = np.exp2(-slse[il])
                                    elif not causal or j <= i + shift:
                                        p = np.exp2(st[l][n][e] * sl - slse[il])
                                        ds = p * (dpt[l][n][e] - sdel[il])
                                st[l][n][e] = p
                                dpt[l][n][e] = ds
                    for c in range(BQ // 16):
                        pf = [pack(st, c, l) for l in range(32)]
                        sf = [pack(dpt, c, l) for l in range(32)]
                        for dp in range(D // 16):
                            mma2(dva, pf, b_trans(sdo, c, dp, D), 2 * dp)
                            mma2(dka, sf, b_trans(sq, c, dp, D), 2 * dp)
            for l in range(32):
                g, tq = l >> 2, l & 3
                for rh in range(2):
                    j = j0 + warp * 16 + g + rh * 8
                    if j >= lk:
                        continue
                    for n in range(D // 8):
                        for x in range(2):
                            dk[b, kvh, j, n * 8 + 2 * tq + x] = dka[l][n][2 * rh + x] * scale
                            dv[b, kvh, j, n * 8 + 2 * tq + x] = dva[l][n][2 * rh + x]
    return dk, dv


def q_kernel(q, k, v, do, lse, delta, scale, causal, D):
    B, Hq, lq, _ = q.shape
    Hk, lk = k.shape[1], k.shape[2]
    group = Hq // Hk
    q_blocks = -(-lq // BM)
    dq = np.full(q.shape, np.nan)
    sl = scale * LOG2E
    for bid in range(B * Hq * q_blocks):
        qb = q_blocks - 1 - bid % q_blocks
        bh = bid // q_blocks
        h, b = bh % Hq, bh // Hq
        kvh = h // group
        i0 = qb * BM
        shift = lk - lq
        key_end = lk
        if causal:
            key_end = max(0, min(lk, min(lq, i0 + BM) - 1 + shift + 1))
        n_blocks = -(-key_end // BN)
        sq = load_rows(q[b, h], i0, lq, BM, D)
        sdo = load_rows(do[b, h], i0, lq, BM, D)
        for warp in range(WARPS):
            qf = a_frags(sq, warp, D)
            dof = a_frags(sdo, warp, D)
            dqa = zeros(D // 8)
            for nb in range(n_blocks):
                j0 = nb * BN
                sk = load_rows(k[b, kvh], j0, lk, BN, D)
                sv = load_rows(v[b, kvh], j0, lk, BN, D)
                s, dp = zeros(BN // 8), zeros(BN // 8)
                for kc in range(D // 16):
                    for np_ in range(BN // 16):
                        mma2(s, [qf[kc][l] for l in range(32)], b_rows(sk, np_, kc, D), 2 * np_)
                        mma2(dp, [dof[kc][l] for l in range(32)], b_rows(sv, np_, kc, D), 2 * np_)
                for l in range(32):
                    g, tq = l >> 2, l & 3
                    row0 = i0 + warp * 16 + g
                    for n in range(BN // 8):
                        for e in range(4):
                            rh = e >> 1
                            i = row0 + rh * 8
                            j = j0 + n * 8 + tq * 2 + (e & 1)
                            seen = i < lq and j < lk and (not causal or j <= i + shift)
                            l2 = lse[b, h, i] * LOG2E if i < lq else 0.0
                            de = delta[b, h, i] if i < lq else 0.0
                            p = np.exp2(s[l][n][e] * sl - l2) if seen else 0.0
                            s[l][n][e] = p * (dp[l][n][e] - de)
                sf = [[pack(s, c, l) for c in range(BN // 16)] for l in range(32)]
                for c in range(BN // 16):
                    for dpp in range(D // 16):
                        mma2(dqa, [sf[l][c] for l in range(32)], b_trans(sk, c, dpp, D), 2 * dpp)
            for l in range(32):
                g, tq = l >> 2, l & 3
                for rh in range(2):
                    i = i0 + warp * 16 + g + rh * 8
                    if i >= lq:
                        continue
                    for n in range(D // 8):
                        for x in range(2):
                            dq[b, h, i, n * 8 + 2 * tq + x] = dqa[l][n][2 * rh + x] * scale
    return dq


def np_grads(q, k, v, do, scale, causal):
    """Gradients of a plain attention (hidden scores the lowest float, as kiln's)."""
    g = q.shape[1] // k.shape[1]
    kr, vr = np.repeat(k, g, axis=1), np.repeat(v, g, axis=1)
    lq, lk = q.shape[2], k.shape[2]
    s = scale * q @ np.swapaxes(kr, -1, -2)
    vis = np.ones((lq, lk), bool)
    if causal:
        vis = np.arange(lk)[None, :] <= np.arange(lq)[:, None] + (lk - lq)
    s = np.where(vis, s, -3.4e38)
    p = np.exp(s - s.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    dv = np.swapaxes(p, -1, -2) @ do
    dp = do @ np.swapaxes(vr, -1, -2)
    ds = np.where(vis, p * (dp - (dp * p).sum(-1, keepdims=True)), 0.0)
    dq = scale * ds @ kr
    dk = scale * np.swapaxes(ds, -1, -2) @ q
    fold = lambda x: x.reshape(x.shape[0], -1, g, *x.shape[2:]).sum(2)  # noqa: E731
    return dq, fold(dk), fold(dv)


def main():
    rng = np.random.default_rng(1)
    cases = [(1, 2, 1, 20, 70, 16, True), (1, 1, 1, 70, 20, 16, True), (1, 2, 2, 33, 33, 32, False),
             (1, 4, 2, 17, 40, 64, True), (1, 2, 1, 40, 17, 80, True), (1, 1, 1, 9, 9, 128, False),
             (1, 2, 1, 130, 150, 16, True), (1, 1, 1, 150, 70, 96, True), (2, 2, 1, 100, 129, 64, False)]
    for (B, Hq, Hk, lq, lk, D, causal) in cases:
        q, k, v, do = (rng.standard_normal(s) for s in
                       ((B, Hq, lq, D), (B, Hk, lk, D), (B, Hk, lk, D), (B, Hq, lq, D)))
        scale = D ** -0.5
        lse = np.full((B, Hq, lq), np.nan)
        o = flash(q, k, v, scale, 1 if causal else 0, None, D, lse=lse)
        delta = (o * do).sum(-1)  # DELTA_BODY
        dk, dv = kv_kernel(q, k, v, do, lse, delta, scale, causal, D)
        dq = q_kernel(q, k, v, do, lse, delta, scale, causal, D)
        want = np_grads(q, k, v, do, scale, causal)
        for name, got, w in zip(("dq", "dk", "dv"), (dq, dk, dv), want):
            err = np.abs(got - w).max()
            print((B, Hq, Hk, lq, lk, D, causal), name, "max err", err)
            assert err < 1e-6, err  # float32 log2(e) against float64 ln 2
    print("ok")


if __name__ == "__main__":
    main()
