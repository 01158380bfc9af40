"""The planning rank's paths for thousands of small variables (issue 29, item 5), against the general paths they
shortcut (no MPI): the plan of variables one rank declared once as one whole block, the joined block columns the
placement and the index use, and the dimension check when no variable declares ``dims``."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ckptio.errors import DeclarationError
from ckptio.model import varmeta
from ckptio.model.declared import prepared
from ckptio.model.plan import pack_declarations, plan_packed
from ckptio.model.variable_plan import VariablePlan, joined_columns

_FIELDS = ("rank", "local_index", "offset", "size", "stored_nbytes", "codec", "checksum")


def _array_decl(name: str, shape: tuple[int, ...], offset: tuple[int, ...], size: tuple[int, ...], rank: int,
                local: int, dtype: str = "<f8") -> dict:
    checksum = f"{(rank * 7919 + local * 104729 + 1) % (1 << 64):016x}"
    return prepared({"name": name, "dtype": dtype, "kind": "array", "global_shape": list(shape),
                     "offset": list(offset), "shape": list(size)}, checksum)


def _segment_decl(name: str, rows: int, trailing: tuple[int, ...]) -> dict:
    return prepared({"name": name, "dtype": "<i4", "kind": "segment", "length": rows, "trailing": list(trailing)},
                    "00000000000000ff")


def _as_general(pack: tuple) -> tuple:
    """The same declarations marked as "stored sizes and codecs given" (all raw): ``plan_packed`` then plans
    them on its general path (the per-variable chunks and checks), the reference for its fast path."""
    n = len(pack[0].split("\n")) if pack[0] else 0
    return (*pack[:3], [None] * n, [None] * n)


def _same_plans(fast: dict[str, VariablePlan], general: dict[str, VariablePlan]) -> None:
    assert list(fast) == list(general)
    for name, plan in fast.items():
        ref = general[name]
        assert (plan.name, plan.dtype, plan.shape, plan.kind, plan.codecs, plan.total_blocks) == \
               (ref.name, ref.dtype, ref.shape, ref.kind, ref.codecs, ref.total_blocks), name
        for key in _FIELDS:
            got, want = getattr(plan, key), getattr(ref, key)
            assert got.shape == want.shape and got.dtype == want.dtype and np.array_equal(got, want), (name, key)
        assert np.array_equal(plan.stored_sizes(), ref.stored_sizes())


@st.composite
def _declarations(draw):
    """Up to 5 ranks' declarations: whole-block variables of one rank (the fast path), a variable split over the
    ranks, a per-rank segment, whole blocks of one name on two ranks (an overlap) and scalars."""
    nprocs = draw(st.integers(1, 5))
    decls: list[list[dict]] = [[] for _ in range(nprocs)]
    for i in range(draw(st.integers(0, 30))):
        rank = draw(st.integers(0, nprocs - 1))
        shape = tuple(draw(st.lists(st.integers(0, 4), min_size=0, max_size=3)))
        decls[rank].append(_array_decl(f"w{i}", shape, (0,) * len(shape), shape, rank, len(decls[rank]),
                                       draw(st.sampled_from(["<f8", "<i2", "|u1"]))))
    if draw(st.booleans()):  # one variable, one row block per rank
        for r in range(nprocs):
            decls[r].append(_array_decl("split", (nprocs, 3), (r, 0), (1, 3), r, len(decls[r])))
    if draw(st.booleans()):
        for r in range(nprocs):
            decls[r].append(_segment_decl("seg", r + 1, (2,)))
    if draw(st.booleans()):  # the whole array from two ranks (or twice from one): overlapping blocks
        for r in sorted({0, nprocs - 1}) if nprocs > 1 else [0, 0]:
            decls[r].append(_array_decl("twice", (4,), (0,), (4,), r, len(decls[r])))
    for r in range(nprocs):
        order = draw(st.permutations(range(len(decls[r]))))
        decls[r] = [decls[r][k] for k in order]
    return decls


@settings(max_examples=60, deadline=None)
@given(decls=_declarations())
def test_whole_block_plans_equal_the_general_path(decls):
    packs = [pack_declarations(d) for d in decls]
    try:
        general = plan_packed([_as_general(p) for p in packs])
    except DeclarationError as exc:
        with pytest.raises(DeclarationError) as fast_error:
            plan_packed(packs)
        assert str(fast_error.value) == str(exc)
        return
    _same_plans(plan_packed(packs), general)


def test_whole_block_plans_are_views_of_each_ranks_packed_integers():
    """10,000 one-block variables spread over 4 ranks: every plan is the rank's block, and a variable declared on
    two ranks still fails as overlapping (it is not one rank's whole block)."""
    decls = [[_array_decl(f"v{i:05d}", (128,), (0,), (128,), i % 4, i // 4) for i in range(r, 10_000, 4)]
             for r in range(4)]
    plans = plan_packed([pack_declarations(d) for d in decls])
    assert len(plans) == 10_000
    v = plans["v00007"]
    assert v.rank.tolist() == [3] and v.local_index.tolist() == [1] and v.offset.tolist() == [[0]]
    assert v.size.tolist() == [[128]] and v.stored_sizes().tolist() == [1024]
    decls[1].append(_array_decl("v00000", (128,), (0,), (128,), 1, len(decls[1])))
    with pytest.raises(DeclarationError, match=r"'v00000'.*overlap"):
        plan_packed([pack_declarations(d) for d in decls])


@settings(max_examples=60, deadline=None)
@given(decls=_declarations(), compressed=st.integers(0, 4))
def test_joined_columns_are_each_variables_columns_in_order(decls, compressed):
    for d in decls[compressed % len(decls)] if decls else ():  # one rank's blocks stored compressed
        d.update(stored_nbytes=3, codec="zstd:3")
    try:
        plans = plan_packed([pack_declarations(d) for d in decls])
    except DeclarationError:
        return
    columns = joined_columns(plans)
    assert columns.counts.tolist() == [len(v.rank) for v in plans.values()]
    for (name, v), start, count in zip(plans.items(), columns.starts.tolist(), columns.counts.tolist(), strict=True):
        rows = slice(start, start + count)
        assert columns.rank[rows].tolist() == v.rank.tolist(), name
        assert columns.local_index[rows].tolist() == v.local_index.tolist(), name
        assert columns.stored[rows].tolist() == v.stored_sizes().tolist(), name
    assert len(columns.rank) == sum(len(v.rank) for v in plans.values())


def _dimension_error(shapes: dict, described: dict) -> str | None:
    try:
        varmeta.check_dimensions(shapes, described)
    except DeclarationError as exc:
        return str(exc)
    return None


@pytest.mark.parametrize("shapes, clash", [
    ({"dens": (2, 3, 5), "dens_d1": (2, 4)}, "variable 'dens': default dimension 'dens_d1'"),
    ({"a": (2,), "a_d0": (2,), "b": (3, 3), "b_d1": (1,)}, "variable 'a': default dimension 'a_d0'"),
    ({"a": (2,), "a_d1": (2,), "b_d01": (3,), "b": (3, 3), "c": (), "c_d0": (1,)}, None),  # no such axis
    ({"x_d0": (2,), "x_d0_d0": (2,)}, "variable 'x_d0': default dimension 'x_d0_d0'"),
])
def test_default_dimension_check_without_dims_names_what_the_general_check_names(shapes, clash):
    """With no ``dims`` declared, check_dimensions looks only at names of the form ``<name>_d<axis>``; its verdict
    and message are those of the general check (forced by one unrelated variable that declares dims)."""
    fast = _dimension_error(shapes, {})
    general = _dimension_error({**shapes, "zz": (7,)}, {"zz": {"dims": ["zz_axis"]}})
    assert fast == general
    assert (fast is None) if clash is None else (clash in fast)


def test_of_several_wrong_variables_the_first_name_is_reported():
    """Rank 0 declares "b", rank 1 "a", each missing an element: the error names "a", the first in sorted order
    (as the planner always did), whatever order the ranks' declarations come in."""
    decls = [[_array_decl("b", (5,), (0,), (4,), 0, 0), _array_decl("w", (3,), (0,), (3,), 0, 1)],
             [_array_decl("a", (5,), (0,), (4,), 1, 0)]]
    with pytest.raises(DeclarationError, match="variable 'a'"):
        plan_packed([pack_declarations(d) for d in decls])
