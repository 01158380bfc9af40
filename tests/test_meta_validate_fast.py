"""The vectorized block checks of ``ckptio.model.meta.validate`` decide exactly as the block-by-block checks they
skip: on valid and on damaged documents, the same verdict and the same message."""

import copy
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ckptio.model import meta, schema_checks
from ckptio.model.block_table import BlockTable

ODD_VALUES = st.one_of(st.booleans(), st.floats(allow_nan=True), st.text(max_size=3), st.none(),
                       st.integers(-2**70, 2**70), st.lists(st.integers(-3, 3), max_size=3), st.just({}))


def _document(seed: int, segments: bool, ndim: int, nprocs: int) -> dict:
    rng = np.random.default_rng(seed)
    blocks = []
    if segments:  # rows of shape trailing (N-d segments when ndim > 1)
        pos, trailing = 0, [3, 2][:ndim - 1]
        row = 8 * math.prod(trailing)
        for r in range(nprocs):
            n = int(rng.integers(0, 4))
            blocks.append({"rank": r, "offset": [pos] + [0] * len(trailing), "shape": [n, *trailing],
                           "checksum": f"{r:016x}", "stored_nbytes": n * row, "file_offset": 4096 + pos * row})
            pos += n
        shape = [pos, *trailing]
    else:
        shape = [int(rng.integers(1, 6)) for _ in range(ndim)]
        cuts = [sorted({0, *rng.integers(0, n, size=2).tolist(), n}) for n in shape]
        boxes = [([], [])]
        for c in cuts:
            boxes = [([*o, c[i]], [*s, c[i + 1] - c[i]]) for o, s in boxes for i in range(len(c) - 1)]
        for i, (o, s) in enumerate(boxes):
            blocks.append({"rank": i % nprocs, "offset": o, "shape": s, "checksum": f"{i:016x}",
                           "codec": "zstd:3" if i % 3 == 1 else None, "file_offset": None if i % 2 else 64 * i,
                           "stored_nbytes": 8})
    return {"schema": 1, "backend": "mpiio", "nprocs": nprocs, "attrs": {}, "checksum": meta.CHECKSUM_ALGORITHM,
            "variables": {"v": {"dtype": "<f8", "shape": shape, "kind": "segment" if segments else "array",
                                "blocks": blocks}}}


def _verdict(doc: dict) -> str:
    try:
        meta.validate(doc)
        return "valid"
    except ValueError as exc:
        return str(exc)


@st.composite
def damaged(draw, values=ODD_VALUES, actions=("set", "delete", "duplicate", "element", "swap"),
            keys=("rank", "offset", "shape", "checksum", "codec", "file_offset", "stored_nbytes"), settable=None):
    """A valid document with up to two random edits of its blocks (``values`` for what an edit writes; ``set``
    writes only keys in ``settable``, default all)."""
    segments = draw(st.booleans())
    ndim = draw(st.integers(1, 3)) if segments else draw(st.integers(0, 3))
    doc = _document(draw(st.integers(0, 2**16)), segments, ndim, draw(st.integers(1, 5)))
    blocks = doc["variables"]["v"]["blocks"]
    for _ in range(draw(st.integers(0, 2))):
        if not blocks:
            break
        i = draw(st.integers(0, len(blocks) - 1))
        action = draw(st.sampled_from(actions))
        key = draw(st.sampled_from(keys))
        if action == "set" and (settable is None or key in settable):
            blocks[i][key] = draw(values)
        elif action == "delete":
            blocks[i].pop(key, None)
        elif action == "duplicate":
            blocks.append(copy.deepcopy(blocks[i]))
        elif action == "swap" and len(blocks) > 1:
            blocks[0], blocks[-1] = blocks[-1], blocks[0]
        elif action == "element" and isinstance(blocks[i].get(key), list) and blocks[i][key]:
            blocks[i][key][draw(st.integers(0, len(blocks[i][key]) - 1))] = draw(values)
    return doc


@settings(max_examples=400, deadline=None)
@given(doc=damaged())
def test_fast_checks_agree_with_the_block_by_block_checks(doc):
    fast = _verdict(copy.deepcopy(doc))
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(schema_checks, "_blocks_valid_fast", lambda *a: False)
        slow = _verdict(copy.deepcopy(doc))
    assert fast == slow


@pytest.mark.parametrize("segments,ndim", [(True, 1), (True, 2), (True, 3), (False, 0), (False, 1), (False, 3)])
def test_valid_documents_take_the_fast_path(segments, ndim):
    for seed in range(20):
        doc = _document(seed, segments, ndim, 4)
        var = doc["variables"]["v"]
        assert schema_checks._blocks_valid_fast(var["blocks"], tuple(var["shape"]), 4, segments), doc


def damaged_integers():
    """Documents damaged only in ways integer columns can hold (schema 2 has no wrong types to find): integers
    written into rank and stored size, or into an element of offset and shape."""
    return damaged(values=st.integers(-3, 9), actions=("set", "duplicate", "element", "swap"),
                   keys=("rank", "offset", "shape", "stored_nbytes"), settable=("rank", "stored_nbytes"))


def _as_table(doc: dict) -> dict:
    doc = copy.deepcopy(doc)
    var = doc["variables"]["v"]
    var["blocks"] = BlockTable.from_dicts(var["blocks"], len(var["shape"]))
    return doc


@settings(max_examples=300, deadline=None)
@given(doc=damaged_integers())
def test_table_checks_agree_with_the_list_checks(doc):
    """Schema 2's columns get the same verdict and message as schema 1's lists, through the fast table checks
    and through the block loop."""
    listed = _verdict(copy.deepcopy(doc))
    assert _verdict(_as_table(doc)) == listed
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(schema_checks, "_table_valid_fast", lambda *a: False)
        assert _verdict(_as_table(doc)) == listed


@pytest.mark.parametrize("segments,ndim", [(True, 1), (True, 2), (True, 3), (False, 0), (False, 1), (False, 3)])
def test_valid_tables_take_the_fast_path(segments, ndim):
    for seed in range(20):
        doc = _as_table(_document(seed, segments, ndim, 4))
        var = doc["variables"]["v"]
        assert schema_checks._table_valid_fast(var["blocks"], tuple(var["shape"]), 4, segments), doc
