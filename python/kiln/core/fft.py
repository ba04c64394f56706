"""Discrete Fourier transforms, following ``mlx.core.fft``: complex (``fft``, ``ifft``, ...)
and real (``rfft``, ``irfft``, ...) transforms over one, two or n axes with numpy's ``norm``
conventions, computed in complex64 on the CPU; frequency grids and shifts."""

from kiln._core import fft as _fft

fft = _fft.fft
ifft = _fft.ifft
rfft = _fft.rfft
irfft = _fft.irfft
fft2 = _fft.fft2
ifft2 = _fft.ifft2
rfft2 = _fft.rfft2
irfft2 = _fft.irfft2
fftn = _fft.fftn
ifftn = _fft.ifftn
rfftn = _fft.rfftn
irfftn = _fft.irfftn
fftfreq = _fft.fftfreq
rfftfreq = _fft.rfftfreq
fftshift = _fft.fftshift
ifftshift = _fft.ifftshift

__all__ = [
    "fft",
    "fft2",
    "fftfreq",
    "fftn",
    "fftshift",
    "ifft",
    "ifft2",
    "ifftn",
    "ifftshift",
    "irfft",
    "irfft2",
    "irfftn",
    "rfft",
    "rfft2",
    "rfftfreq",
    "rfftn",
]
