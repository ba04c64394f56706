"""Discrete Fourier transforms, following ``mlx.core.fft``: complex (``fft``, ``ifft``, ...)
and real (``rfft``, ``irfft``, ...) transforms over one, two or n axes with numpy's ``norm``
conventions, computed in complex64 on the CPU; frequency grids and shifts; the short-time
transform ``stft`` and its inverse ``istft`` (compositions of framing, windows, the 1-d
transforms and overlap-add, so they differentiate and compile like any op)."""

import contextlib as _contextlib

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

_NORMS = ("backward", "ortho", "forward")


def _check(name: str, n_fft: int, hop_length: int | None, norm: str) -> int:
    """Validates the shared arguments; returns the hop length."""
    if n_fft <= 0:
        raise ValueError(f"[{name}] n_fft must be positive.")
    hop = n_fft // 4 if hop_length is None else hop_length
    if hop <= 0:
        raise ValueError(f"[{name}] hop_length must be positive.")
    if norm not in _NORMS:
        raise ValueError(
            f"[{name}] Invalid norm. Expected one of {{'backward', 'ortho', 'forward'}}."
        )
    return hop


def _window(name: str, window, win_length: int | None, n_fft: int, dtype):
    """The window as ``n_fft`` samples: a rectangle of ``win_length`` by default, centred
    and zero-padded on both sides (the extra zero on the right when odd)."""
    import kiln.core as mx

    if window is None:
        size = n_fft if win_length is None else win_length
        if size < 0:
            raise ValueError(f"[{name}] win_length must be non-negative, got {size}.")
        window = mx.ones((size,), dtype)
    else:
        window = window if isinstance(window, mx.array) else mx.array(window)
        if window.ndim != 1:
            raise ValueError(f"[{name}] window must be a one-dimensional array.")
        window = window.astype(dtype)
    size = window.shape[0]
    if size > n_fft:
        raise ValueError(f"[{name}] window length must not exceed n_fft.")
    if size < n_fft:
        left = (n_fft - size) // 2
        window = mx.pad(window, [(left, n_fft - size - left)])
    return window


def _stream(stream):
    import kiln.core as mx

    return _contextlib.nullcontext() if stream is None else mx.stream(stream)


def stft(
    x,
    n_fft: int = 2048,
    hop_length: int | None = None,
    win_length: int | None = None,
    window=None,
    center: bool = True,
    pad_mode: str = "reflect",
    norm: str = "backward",
    onesided: bool | None = None,
    *,
    stream=None,
):
    """Short-time Fourier transform of the last axis: frames of ``n_fft`` samples every
    ``hop_length`` (default ``n_fft // 4``), times ``window`` (default a rectangle of
    ``win_length``, default ``n_fft``), each transformed; complex64 of shape
    ``(..., n_freq, n_frames)``.

    ``center`` pads ``n_fft // 2`` samples on both sides first (``pad_mode`` as
    ``mx.pad``: ``"reflect"``, ``"constant"``, ``"edge"``...). ``onesided`` (default: real
    input) keeps the ``n_fft // 2 + 1`` non-negative frequencies of the real part.
    """
    import kiln.core as mx

    hop = _check("stft", n_fft, hop_length, norm)
    x = x if isinstance(x, mx.array) else mx.array(x)
    if x.ndim == 0:
        raise ValueError("[stft] Input must have at least one dimension.")
    with _stream(stream):
        is_complex = x.dtype == mx.complex64
        if onesided is None:
            onesided = not is_complex
        if onesided and is_complex:
            # A one-sided spectrum belongs to a real signal: the real part's.
            x = mx.real(x)
        elif not is_complex and x.dtype != mx.float32:
            x = x.astype(mx.float32)
        w = _window("stft", window, win_length, n_fft, mx.float32)
        if center:
            pads = [(0, 0)] * (x.ndim - 1) + [(n_fft // 2, n_fft // 2)]
            x = mx.pad(x, pads, mode=pad_mode)
        length = x.shape[-1]
        if length < n_fft:
            raise ValueError("[stft] Input is too short for the given n_fft.")
        n_frames = 1 + (length - n_fft) // hop
        # Frame f holds samples f * hop ... f * hop + n_fft - 1: one gather.
        idx = mx.arange(n_frames)[:, None] * hop + mx.arange(n_fft)[None, :]
        frames = mx.take(x, idx, axis=-1) * w
        if onesided:
            spectrum = _fft.rfft(frames, axis=-1, norm=norm)
        else:
            spectrum = _fft.fft(frames, axis=-1, norm=norm)
        return mx.swapaxes(spectrum, -1, -2)


def _overlap_add(frames, hop: int):
    """Sums ``(..., F, n)`` frames placed every ``hop`` samples: ``(..., n + hop (F - 1))``.

    Each frame is cut into ``k = ceil(n / hop)`` chunks of ``hop`` samples; chunk ``i`` of
    frame ``f`` lands in output chunk ``f + i``, so the output is the sum of ``k``
    shifted (padded) chunk columns: ``k`` pads and adds instead of a scatter."""
    import kiln.core as mx

    *batch, count, n = frames.shape
    k = -(-n // hop)
    if k * hop > n:
        frames = mx.pad(frames, [(0, 0)] * (len(batch) + 1) + [(0, k * hop - n)])
    chunks = frames.reshape(*batch, count, k, hop)
    lead = [(0, 0)] * len(batch)
    out = None
    for i in range(k):
        part = mx.pad(chunks[..., i, :], lead + [(i, k - 1 - i), (0, 0)])
        out = part if out is None else out + part
    out = out.reshape(*batch, (count + k - 1) * hop)
    return out[..., : n + hop * (count - 1)]


def istft(
    stft_matrix,
    n_fft: int | None = None,
    hop_length: int | None = None,
    win_length: int | None = None,
    window=None,
    center: bool = True,
    norm: str = "backward",
    onesided: bool | None = None,
    length: int | None = None,
    *,
    stream=None,
):
    """Inverse of :func:`stft` for ``(..., n_freq, n_frames)`` spectra: each frame's
    inverse transform, windowed, overlap-added and divided by the overlap-added squared
    window (at least ``1e-8``); float32.

    ``n_fft`` defaults to ``2 (n_freq - 1)`` when ``onesided`` (the default) and to
    ``n_freq`` otherwise; ``center`` drops the ``n_fft // 2`` padded samples at each end;
    ``length`` trims or zero-pads the result to that many samples.
    """
    import kiln.core as mx

    s = stft_matrix if isinstance(stft_matrix, mx.array) else mx.array(stft_matrix)
    if s.ndim < 2:
        raise ValueError("[istft] Input must have at least two dimensions (freq, frames).")
    onesided = True if onesided is None else onesided
    n_freq, n_frames = s.shape[-2:]
    if n_fft is None:
        n_fft = 2 * (n_freq - 1) if onesided else n_freq
    hop = _check("istft", n_fft, hop_length, norm)
    if n_frames == 0:
        raise ValueError("[istft] Input must have at least one frame.")
    with _stream(stream):
        if s.dtype != mx.complex64:
            s = s.astype(mx.complex64)
        w = _window("istft", window, win_length, n_fft, mx.float32)
        spectra = mx.swapaxes(s, -1, -2)
        if onesided:
            frames = _fft.irfft(spectra, n=n_fft, axis=-1, norm=norm)
        else:
            frames = mx.real(_fft.ifft(spectra, n=n_fft, axis=-1, norm=norm))
        y = _overlap_add(frames * w, hop)
        envelope = _overlap_add(mx.broadcast_to(mx.square(w), (n_frames, n_fft)), hop)
        # Samples no window reaches stay (near) zero rather than dividing by zero.
        y = y / mx.maximum(envelope, 1e-8)
        start = n_fft // 2 if center else 0
        if length is None:
            return y[..., start : y.shape[-1] - start]
        length = max(length, 0)
        y = y[..., start : start + length]
        short = length - y.shape[-1]
        if short > 0:
            y = mx.pad(y, [(0, 0)] * (y.ndim - 1) + [(0, short)])
        return y


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
    "istft",
    "rfft",
    "rfft2",
    "rfftfreq",
    "rfftn",
    "stft",
]
