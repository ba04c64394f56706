"""Linear algebra, following ``mlx.core.linalg``: norms, factorisations and solvers over the
last two axes (leading axes are a batch), in float32 and float64."""

from kiln._core import linalg as _linalg

# Every function of the extension's `linalg` module, including ones added there later; the
# names below restate them for readers and type checkers.
globals().update({n: getattr(_linalg, n) for n in dir(_linalg) if not n.startswith("_")})

norm = _linalg.norm
inv = _linalg.inv
tri_inv = _linalg.tri_inv
pinv = _linalg.pinv
cholesky = _linalg.cholesky
cholesky_inv = _linalg.cholesky_inv
qr = _linalg.qr
svd = _linalg.svd
eig = _linalg.eig
eigvals = _linalg.eigvals
eigh = _linalg.eigh
eigvalsh = _linalg.eigvalsh
solve = _linalg.solve
solve_triangular = _linalg.solve_triangular
det = _linalg.det
slogdet = _linalg.slogdet
cross = _linalg.cross
lu = _linalg.lu
lu_factor = _linalg.lu_factor

__all__ = [
    "cholesky",
    "cholesky_inv",
    "cross",
    "det",
    "eig",
    "eigh",
    "eigvals",
    "eigvalsh",
    "inv",
    "lu",
    "lu_factor",
    "norm",
    "pinv",
    "qr",
    "slogdet",
    "solve",
    "solve_triangular",
    "svd",
    "tri_inv",
]
