"""Pure hyperslab math and declaration validation (no MPI)."""

import numpy as np
import pytest

from ckptio.errors import DeclarationError, ReadRequestError
from ckptio.layout import (
    Box,
    check_name,
    exclusive_prefix_sum,
    find_overlap,
    normalize_request,
    split_leading_axis,
    validate_variable,
)
from ckptio.plan import declaration, plan_write


def test_box_intersection_and_relative_slices():
    a, b = Box((0, 0), (4, 4)), Box((2, 3), (4, 4))
    c = a.intersect(b)
    assert c == Box((2, 3), (2, 1))
    assert a.intersect(Box((4, 0), (1, 1))) is None
    assert c.relative_to(b) == (slice(0, 2), slice(0, 1))


def test_validate_accepts_exact_tiling():
    blocks = [(0, Box((0, 0), (2, 4))), (1, Box((2, 0), (2, 2))), (2, Box((2, 2), (2, 2)))]
    validate_variable("t", (4, 4), blocks)


@pytest.mark.parametrize(
    "blocks, words",
    [
        ([(0, Box((0,), (3,))), (1, Box((2,), (2,)))], ["overlaps", "rank 0", "rank 1"]),
        ([(0, Box((0,), (2,))), (3, Box((3,), (1,)))], ["element [2]", "no rank"]),
        ([(0, Box((0,), (4,))), (2, Box((4,), (1,)))], ["outside", "rank 2"]),
    ],
)
def test_validate_names_variable_ranks_and_cause(blocks, words):
    with pytest.raises(DeclarationError) as err:
        validate_variable("dens", (4,), blocks)
    assert "'dens'" in str(err.value)
    for w in words:
        assert w in str(err.value)


def test_overlap_sweep_finds_pairs_among_many():
    boxes = [(r, Box((r * 10, 0), (10, 5))) for r in range(1000)]
    assert find_overlap(boxes) is None
    boxes.append((1000, Box((505, 2), (1, 1))))
    pair = find_overlap(boxes)
    assert pair is not None and 1000 in pair and 50 in pair


@pytest.mark.parametrize("name", ["", "a/b", "x" * 200, "has space", "ckptio_meta", "1abc", None])
def test_bad_names_rejected(name):
    with pytest.raises(DeclarationError):
        check_name(name)


def test_segments_offsets_are_an_exclusive_scan():
    assert exclusive_prefix_sum([3, 0, 2, 5]) == [0, 3, 3, 5]
    decls = [[declaration("p", np.zeros(n), None, None, r)] for r, n in enumerate([3, 0, 2])]
    plan = plan_write(decls)
    assert plan["p"].shape == (5,)
    assert [b.box.offset[0] for b in plan["p"].blocks] == [0, 3, 3]


def test_plan_write_detects_dtype_and_shape_mismatch_with_ranks():
    d0 = declaration("v", np.zeros((2, 2)), (0, 0), (4, 2), 0)
    d1 = declaration("v", np.zeros((2, 2), np.float32), (2, 0), (4, 2), 1)
    with pytest.raises(DeclarationError, match=r"rank 0 declared dtype '<f8' but rank 1 declared '<f4'"):
        plan_write([[d0], [d1]])
    d1 = declaration("v", np.zeros((2, 2)), (2, 0), (4, 3), 1)
    with pytest.raises(DeclarationError, match="global shape"):
        plan_write([[d0], [d1]])


def test_declaration_takes_views_rejects_object_and_bad_rank():
    # a strided view is declared as it is (memory selections, ckptio.memsel): its shape, no copy
    assert declaration("v", np.zeros((4, 4))[:, ::2], (0, 0), (4, 2), 0)["shape"] == [4, 2]
    with pytest.raises(DeclarationError, match="not supported"):
        declaration("v", np.array([object()]), None, None, 0)
    with pytest.raises(DeclarationError, match="must be 1-D"):
        declaration("v", np.zeros((2, 2)), None, None, 0)
    with pytest.raises(DeclarationError, match="dimensions"):
        declaration("v", np.zeros((2, 2)), (0,), (2, 2), 0)


def test_requests_outside_shape_are_refused():
    assert normalize_request("v", (4, 4), None, None) == Box((0, 0), (4, 4))
    with pytest.raises(ReadRequestError, match="outside"):
        normalize_request("v", (4, 4), (2, 0), (3, 4))


def test_split_leading_axis_is_contiguous_and_complete():
    pieces = split_leading_axis(Box((3, 0), (10, 7)), 21)
    assert [p.shape[0] for p in pieces] == [3, 3, 3, 1]
    assert sum(p.size for p in pieces) == 70
    assert all(p.offset[0] == 3 + 3 * i for i, p in enumerate(pieces))
