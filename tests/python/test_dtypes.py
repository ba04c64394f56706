"""Dtype objects, categories, issubdtype, finfo and iinfo as in mlx.core."""

import numpy as np
import pytest

import kiln.core as mx

FLOATS = [mx.float16, mx.bfloat16, mx.float32, mx.float64]
SIGNED = [mx.int8, mx.int16, mx.int32, mx.int64]
UNSIGNED = [mx.uint8, mx.uint16, mx.uint32, mx.uint64]


def test_dtype_objects():
    assert mx.float32.size == 4 and mx.bool_.size == 1 and mx.bfloat16.size == 2
    assert repr(mx.float32) == "kiln.core.float32"
    assert mx.float32 == mx.float32 and mx.float32 != mx.float16
    assert len({mx.float32, mx.float32, mx.int8}) == 2


@pytest.mark.parametrize(
    "dtypes,category",
    [(FLOATS, mx.floating), (FLOATS, mx.inexact), (SIGNED, mx.signedinteger),
     (UNSIGNED, mx.unsignedinteger), (SIGNED + UNSIGNED, mx.integer),
     (FLOATS + SIGNED + UNSIGNED, mx.number), (FLOATS + SIGNED + [mx.bool_], mx.generic)],
)
def test_issubdtype_members(dtypes, category):
    for d in dtypes:
        assert mx.issubdtype(d, category)


def test_issubdtype_non_members_and_categories():
    assert not mx.issubdtype(mx.bool_, mx.integer)
    assert not mx.issubdtype(mx.bool_, mx.number)
    assert not mx.issubdtype(mx.int8, mx.floating)
    assert not mx.issubdtype(mx.float32, mx.complexfloating)
    assert mx.issubdtype(mx.floating, mx.number) and mx.issubdtype(mx.integer, mx.generic)
    assert not mx.issubdtype(mx.number, mx.floating)
    assert mx.issubdtype(mx.int8, mx.int8) and not mx.issubdtype(mx.int8, mx.int16)
    assert not mx.issubdtype(mx.floating, mx.float32)
    assert repr(mx.floating) == "DtypeCategory.floating"


@pytest.mark.parametrize("dtype,np_dtype", [(mx.float16, np.float16), (mx.float32, np.float32),
                                            (mx.float64, np.float64)])
def test_finfo_matches_numpy(dtype, np_dtype):
    f, ref = mx.finfo(dtype), np.finfo(np_dtype)
    assert (f.min, f.max, f.eps) == (ref.min, ref.max, ref.eps)
    assert f.smallest_normal == ref.smallest_normal and f.bits == ref.bits
    assert f.dtype == dtype


def test_finfo_bfloat16_and_errors():
    f = mx.finfo(mx.bfloat16)
    assert f.eps == 0.0078125 and f.max == 3.3895313892515355e38 and f.bits == 16
    assert repr(mx.finfo(mx.float16)) == "finfo(min=-65504, max=65504, dtype=float16)"
    with pytest.raises(ValueError, match=r"\[finfo\]"):
        mx.finfo(mx.int32)
    with pytest.raises(ValueError, match=r"\[iinfo\]"):
        mx.iinfo(mx.float32)


@pytest.mark.parametrize("dtype", SIGNED + UNSIGNED)
def test_iinfo_matches_numpy(dtype):
    i = mx.iinfo(dtype)
    ref = np.iinfo(getattr(np, repr(dtype).split(".")[-1]))
    assert (i.min, i.max) == (ref.min, ref.max)
    assert repr(mx.iinfo(mx.int8)) == "iinfo(min=-128, max=127, dtype=int8)"
