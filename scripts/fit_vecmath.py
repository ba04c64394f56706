"""Fits the rational coefficients of crates/kiln-codegen/src/math.rs, kiln's shared float32
math (tanh and erf; the other polynomials are Taylor series): reweighted least squares on
Chebyshev nodes in float64 (close to minimax in relative error), printed as float32 values,
highest degree first (Horner order). Deterministic; numpy only.

    python3 scripts/fit_vecmath.py
"""

import math

import numpy as np


def show(name, coef, err):
    print(f"// {name}: max fit error {err:.3g}")
    print("[" + ", ".join(repr(float(np.float32(c))) for c in coef[::-1]) + "]")


def fit_rational(f, hi, pdeg, qdeg, n=6000, iters=60):
    """P(t) / Q(t) ~ f(t) on [0, hi] in relative error, P(0) = Q(0) = 1 (f(0) = 1): Lawson's
    reweighted linear least squares (close to minimax). Q is rounded to float32 first and P
    refitted to the rounded Q. Returns (P, Q, max relative error), low degree first."""
    k = np.arange(n)
    t = hi / 2 * (1 - np.cos(np.pi * k / (n - 1)))
    s = t / hi  # fitted in s = t / hi: powers of t up to 81^4 would be ill-conditioned
    y = np.array([f(v) for v in t])

    def solve(cols, rhs, denom):
        """Lawson iterations on |cols sol - rhs| / (y denom(sol)); denom None: Q of sol."""
        w, d = np.ones(n), np.ones(n) if denom is None else denom
        for _ in range(iters):
            sc = np.sqrt(w) / (y * d)
            sol = np.linalg.lstsq(cols * sc[:, None], rhs * sc, rcond=None)[0]
            if denom is None:  # Loeb: the next pass divides by this pass's Q
                d = 1 + powers(qdeg) @ sol[pdeg:]
            err = np.abs(cols @ sol - rhs) / (y * d)
            w = w * err / np.sum(w * err)
        return sol, err.max()

    powers = lambda deg: np.stack([s**j for j in range(1, deg + 1)], 1)
    # P - f Q = f - 1 is linear in the free coefficients.
    sol, _ = solve(np.concatenate([powers(pdeg), -y[:, None] * powers(qdeg)], 1), y - 1, None)
    q = np.concatenate([[1.0], sol[pdeg:]]) / hi ** np.arange(qdeg + 1)
    q = q.astype(np.float32).astype(np.float64)
    qv = np.polynomial.polynomial.polyval(t, q)
    sol, err = solve(powers(pdeg), y * qv - 1, qv)
    p = np.concatenate([[1.0], sol]) / hi ** np.arange(pdeg + 1)
    return p, q, err


# TANH_P / TANH_Q: tanh(x) = x P(x^2) / Q(x^2) for |x| <= 9, in t = x^2 on [0, 81].
p, q, err = fit_rational(lambda t: 1.0 if t == 0 else math.tanh(math.sqrt(t)) / math.sqrt(t),
                         81.0, 4, 4)
show("TANH_P", p, err)
show("TANH_Q", q, err)


def fit_rational_cheb(f, hi, pdeg, qdeg, n=4000, iters=60):
    """P(t) / Q(t) ~ f(t) on [0, hi] in relative error, Q(0) = 1: Sanathanan-Koerner
    iterations (each pass divides by the last pass's Q) with Lawson's weights, in a Chebyshev
    basis (well conditioned where the power basis of `fit_rational` is not). Q is rounded to
    float32 and P refitted to the rounded Q. Returns (P, Q, max relative error), low first."""
    k = np.arange(n)
    t = hi / 2 * (1 - np.cos(np.pi * k / (n - 1)))
    y = np.array([f(v) for v in t])
    basis = np.polynomial.chebyshev.chebvander(2 * t / hi - 1, max(pdeg, qdeg))
    bp, bq = basis[:, : pdeg + 1], basis[:, : qdeg + 1]
    d, w, best = np.ones(n), np.ones(n) / n, None
    for _ in range(iters):
        # P - y Q = 0 with Q's constant Chebyshev coefficient 1, scaled by 1 / (y Q_last).
        cols = np.concatenate([bp, -y[:, None] * bq[:, 1:]], 1)
        sc = np.sqrt(w) / (y * d)
        sol = np.linalg.lstsq(cols * sc[:, None], y * sc, rcond=None)[0]
        a, b = sol[: pdeg + 1], np.concatenate([[1.0], sol[pdeg + 1:]])
        d = bq @ b
        err = np.abs(bp @ a / d - y) / y
        if np.all(d > 0) and (best is None or err.max() < best[1]):
            best = (b, err.max())
        w = w * err / np.sum(w * err)

    def in_t(c):  # Chebyshev coefficients in z = 2 t / hi - 1 to powers of t
        z = np.polynomial.Polynomial([-1.0, 2.0 / hi])
        power = np.polynomial.Chebyshev(c).convert(kind=np.polynomial.Polynomial).coef
        return sum((cj * z**j for j, cj in enumerate(power)), np.polynomial.Polynomial(0)).coef

    q = in_t(best[0])
    q = (q / q[0]).astype(np.float32).astype(np.float64)
    qv = np.polynomial.polynomial.polyval(t, q)
    powers = np.stack([(t / hi) ** j for j in range(pdeg + 1)], 1)
    w = np.ones(n) / n
    for _ in range(iters):
        sc = np.sqrt(w) / (y * qv)
        a = np.linalg.lstsq(powers * sc[:, None], y * qv * sc, rcond=None)[0]
        err = np.abs(powers @ a / qv - y) / y
        w = w * err / np.sum(w * err)
    return a / hi ** np.arange(pdeg + 1), q, err.max()


# ERF_P / ERF_Q: erf(x) = x P(x^2) / Q(x^2) for |x| <= 3.925 (ERF_CLAMP), in t = x^2.
p, q, err = fit_rational_cheb(lambda t: 2 / math.sqrt(math.pi) if t == 0
                              else math.erf(math.sqrt(t)) / math.sqrt(t), 3.925**2, 5, 6)
show("ERF_P", p, err)
show("ERF_Q", q, err)
