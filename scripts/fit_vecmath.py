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
