"""Fits the erf coefficients of crates/kiln-cpu/src/vecmath.rs (the other polynomials are
Taylor series): least squares on Chebyshev nodes in float64 (close to minimax), printed as
float32 values, highest degree first (Horner order). Deterministic; numpy only.

    python3 scripts/fit_vecmath.py
"""

import math

import numpy as np


def fit(f, lo, hi, deg, center=0.0, n=4000):
    """Coefficients (low degree first) of a degree-`deg` fit of f in u = x - center."""
    k = np.arange(n)
    x = (lo + hi) / 2 + (hi - lo) / 2 * np.cos(np.pi * (k + 0.5) / n)
    y = np.array([f(v) for v in x])
    dom = [lo - center, hi - center]
    cheb = np.polynomial.chebyshev.Chebyshev.fit(x - center, y, deg, domain=dom)
    coef = cheb.convert(kind=np.polynomial.Polynomial, domain=dom, window=dom).coef
    err = np.max(np.abs(np.polynomial.polynomial.polyval(x - center, coef) - y))
    return coef, err


def show(name, coef, err):
    print(f"// {name}: max fit error {err:.3g}")
    print("[" + ", ".join(repr(float(np.float32(c))) for c in coef[::-1]) + "]")


# ERF_SMALL: erf(x) = x * P(x^2) for |x| < 1, P(t) = erf(sqrt(t)) / sqrt(t) on [0, 1].
show("ERF_SMALL", *fit(lambda t: 2 / math.sqrt(math.pi) if t == 0
                       else math.erf(math.sqrt(t)) / math.sqrt(t), 0.0, 1.0, 6))
# ERF_TAIL: erf(x) = 1 - exp(-x^2) R(x) for 1 <= |x| <= 4, R(x) = erfc(x) exp(x^2) in u = x - 2.
show("ERF_TAIL", *fit(lambda x: math.erfc(x) * math.exp(x * x), 1.0, 4.0, 10, center=2.0))


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
