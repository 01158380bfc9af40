"""The restart's and the declare phase's shortcuts for thousands of small variables (issue 29, item 5), against the
general paths they shortcut (no MPI): the usual read request checked in one step, and the variables' descriptions
agreed without a JSON decode per variable."""

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ckptio.errors import DeclarationError, ReadRequestError
from ckptio.model import requests, varmeta
from ckptio.model.layout import Box
from ckptio.model.plan import Request
from ckptio.model.requests import VariableInfo

_SHAPES = st.lists(st.integers(0, 5), min_size=0, max_size=3).map(tuple)
_COORD = st.one_of(st.integers(-2, 7), st.booleans(), st.integers(2**62, 2**64),
                   st.integers(0, 5).map(np.int64), st.floats(0, 5))
_COORDS = st.one_of(st.none(), st.lists(_COORD, min_size=0, max_size=4).map(tuple),
                    st.lists(st.integers(0, 5), min_size=0, max_size=4))


def _variables(shapes: list[tuple[int, ...]], kinds: list[str]) -> dict[str, VariableInfo]:
    return {f"v{i}": VariableInfo(f"v{i}", shape, np.dtype("<f8"), kind, 1, 8 * int(np.prod(shape)))
            for i, (shape, kind) in enumerate(zip(shapes, kinds, strict=False))}


def _own_segment(name: str) -> Box:
    return Box((0,), (1,))


def _outcome(reqs, variables):
    try:
        found, given_out = requests.checked_requests("ck", reqs, None, variables, _own_segment)
    except ReadRequestError as exc:
        return ("error", str(exc))
    return ("ok", [(r.var, r.box.offset, r.box.shape, [type(v) for v in (*r.box.offset, *r.box.shape)],
                     type(r.box.offset), type(r.box.shape)) for r in found],
            given_out)


@st.composite
def _near(draw, extent: tuple[int, ...]) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """An (offset, shape) pair of plain ints near a request inside ``extent``: mostly inside it, sometimes one
    past its end or negative on one axis, sometimes one axis too many or too few."""
    offset, shape = [], []
    for g in extent:
        o = draw(st.integers(-1, g + 1))
        offset.append(o)
        shape.append(draw(st.integers(-1, g - max(o, 0) + 1)))
    change = draw(st.sampled_from(["none"] * 6 + ["drop", "add", "numpy", "bool"]))
    if change == "drop" and extent:
        offset, shape = offset[:-1], shape[:-1]
    elif change == "add":
        offset, shape = [*offset, 0], [*shape, 1]
    elif change in ("numpy", "bool") and extent:  # one element of either not a plain int (same value)
        values = draw(st.sampled_from([offset, shape]))
        axis = draw(st.integers(0, len(extent) - 1))
        values[axis] = np.int64(values[axis]) if change == "numpy" else values[axis] == 1
    return tuple(offset), tuple(shape)


@settings(max_examples=500, deadline=None)
@given(shapes=st.lists(_SHAPES, min_size=1, max_size=4),
       kinds=st.lists(st.sampled_from(["array", "segment"]), min_size=4, max_size=4), data=st.data())
def test_the_usual_request_checked_in_one_step_decides_as_the_general_check(shapes, kinds, data):
    """The same Requests, or the same error and message, as when every request takes the general check (a
    request given as a list never takes the one-step path): requests near the usual ones (plain ints, about the
    variable's rank, inside or just outside it) and unusual ones (numpy ints, bools, floats, huge values,
    lists, None, unknown names)."""
    variables = _variables(shapes, kinds)
    names = [*variables, "nope", 3]
    reqs = []
    for _ in range(data.draw(st.integers(1, 5))):
        name = data.draw(st.sampled_from(names))
        extent = variables[name].shape if name in variables else (2,)
        if data.draw(st.booleans()):
            reqs.append((name, *data.draw(_near(extent))))
        else:
            reqs.append((name, data.draw(_COORDS), data.draw(_COORDS)))
    for r in reqs:  # each alone (in a list, the first bad request decides), then all together
        assert _outcome([r], variables) == _outcome([list(r)], variables), r
    assert _outcome(reqs, variables) == _outcome([list(r) for r in reqs], variables)


def test_the_one_step_path_takes_the_usual_request_and_only_that():
    variables = _variables([(4, 3)], ["array"])
    plain = requests._plain_request(("v0", (1, 0), (3, 3)), variables)
    assert plain == Request("v0", Box((1, 0), (3, 3))) and type(plain) is Request
    assert plain.box.end == (4, 3) and plain.box.size == 9
    for unusual in [("v0", (1, 0), (4, 3)), ("v0", (-1, 0), (1, 1)), ("v0", (True, 0), (1, 1)),
                    ("v0", (np.int64(1), 0), (1, 1)), ("v0", [1, 0], (1, 1)), ("v0", (0,), (1,)),
                    ("v0", None, None), ("nope", (0, 0), (1, 1)), (b"v0", (0, 0), (1, 1))]:
        assert requests._plain_request(unusual, variables) is None, unusual
    with pytest.raises(ReadRequestError, match="outside the global shape"):
        requests.checked_requests("ck", [("v0", (1, 0), (4, 3))], None, variables, _own_segment)


def test_request_made_is_the_constructors_request():
    box = Box((2,), (3,))
    made = Request.made("x", box)
    assert made == Request("x", box) and hash(made) == hash(Request("x", box))
    with pytest.raises(AttributeError):
        made.var = "y"


@settings(max_examples=200, deadline=None)
@given(st.lists(st.dictionaries(st.sampled_from(["a", "b", "c"]), st.sampled_from([
    {}, {"dims": ["x"]}, {"attrs": {"units": "K"}}, {"attrs": {"n": 1}}, {"attrs": {"n": 1.0}}]), max_size=3),
    min_size=1, max_size=3))
def test_descriptions_agree_as_decoded_one_by_one(by_rank):
    """:func:`varmeta.agree` gives what decoding every variable's text gives (or the same error), each variable
    its own dict (a caller changing one changes no other)."""
    packed = [varmeta.pack(d) for d in by_rank]
    first: dict[str, str] = {}
    expected_error = None
    for p in packed:
        for text, names in p.items():
            for name in names:
                if first.setdefault(name, text) != text and expected_error is None:
                    expected_error = name
    if expected_error is not None:
        with pytest.raises(DeclarationError, match=f"variable '{expected_error}'"):
            varmeta.agree(packed)
        return
    agreed = varmeta.agree(packed)
    assert agreed == {name: json.loads(text) for name, text in first.items()}
    assert len({id(d) for d in agreed.values()}) == len(agreed)
