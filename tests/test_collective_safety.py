"""Collective safety of the API edges (issue 11, items 14, 16-20), under mpirun with a time limit.

* 16: different ``backend=``, ``mode=``, path, ``stage_dir=``, ``compression=`` or ``hints=`` on one rank: every rank
  raises a DeclarationError naming the ranks, nothing is written (a backend or mode difference used to hang; a hints
  difference was written with rank 0's, recorded as such); a hint value the library would ignore, too.
* 17: ``write``/``set_attr`` after ``close()``, ``read``/``read_many``/``attrs`` after ``Reader.close()``:
  ClosedCheckpointError (a CheckpointError), not silence or AttributeError.
* 18: read offsets/shapes of the wrong length, float, bool, negative, a string, a scalar (on one rank):
  ReadRequestError on every rank naming the variable and the problem; the reader still reads afterwards.
* 19: one size parser (``64M``, ``1MiB``, ``2G``; ``-1``, ``0``, garbage refused naming the variable) for
  ``CKPTIO_BUFFER_BYTES``, ``buffer_bytes=``, ``CKPTIO_AGGREGATORS``, ``aggregators=`` and ``ckptio plan
  --buffer``; a buffer size differing between ranks is refused (the read plan is computed on every rank).
* 20: NaN attributes are equal to themselves; ``1`` and ``1.0`` differ; what a backend cannot store (HDF5: NUL
  characters, numeric lists over 64 KiB, lone surrogates; PnetCDF: lone surrogates) is refused by close()'s
  declare phase on every rank, naming the attribute, before any file is created.
* 14: a read whose exchange would move ``MAX_MESSAGE_BYTES`` or more to one rank in one round (lowered inside
  the MPI program from 2 GiB) is split into several Alltoallv calls, decided alike on every rank: correct data,
  no rank raising alone (which hung the others).
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent / "faults"))

from leave_outcomes import LeaveRun, run_leave_job

from ckptio.errors import CheckpointError, DeclarationError
from ckptio.model import meta, units
from ckptio.tools import cli

ARGS_RUNS = [pytest.param(("mpiio", 4), id="mpiio-4"), pytest.param(("hdf5", 2), id="hdf5-2"),
             pytest.param(("pnetcdf", 2), id="pnetcdf-2")]


@pytest.fixture(scope="module", params=ARGS_RUNS)
def args_run(request, tmp_path_factory) -> tuple[str, LeaveRun]:
    from ckptio.backends import available_backends

    backend, nprocs = request.param
    if backend not in available_backends():
        pytest.fail(f"backend {backend} is not available")
    work = tmp_path_factory.mktemp(f"args_{backend}_{nprocs}")
    return backend, run_leave_job("args", work, backend, nprocs)


def _all_failed(run: LeaveRun, case: str, base: str, *tokens: str) -> None:
    per_rank = run.outcomes.get(case, {})
    assert sorted(per_rank) == list(range(run.nprocs)), f"{case}: outcomes from {sorted(per_rank)}\n{run.log}"
    for r, o in per_rank.items():
        assert not o["ok"], f"{case}: rank {r} did not fail: {o}"
        assert base in o["bases"] and "CheckpointError" in o["bases"], f"{case}: rank {r}: {o}"
        for token in tokens:
            assert token in o["msg"], f"{case}: rank {r}: {token!r} not in {o['msg']!r}"
    assert not run.new_files(case), f"{case}: files appeared: {run.new_files(case)}"


def _all_ok(run: LeaveRun, case: str) -> list:
    per_rank = run.outcomes.get(case, {})
    assert sorted(per_rank) == list(range(run.nprocs)), f"{case}: outcomes from {sorted(per_rank)}\n{run.log}"
    bad = {r: o for r, o in per_rank.items() if not o["ok"]}
    assert not bad, f"{case}: {bad}"
    return [per_rank[r]["value"] for r in range(run.nprocs)]


# ------------------------------------------------------------------------------------ 16: arguments
@pytest.mark.mpi
@pytest.mark.parametrize("case,token", [("backend_differs", "backend="), ("mode_differs", "mode="),
                                        ("path_differs", "path"), ("stage_dir_differs", "stage_dir="),
                                        ("compression_differs", "compression="),
                                        ("hints_differ",
                                         "different hints= on different ranks: nc_in_place_swap='disable' against")])
def test_create_arguments_that_differ_between_ranks_fail_everywhere(args_run, case: str, token: str) -> None:
    backend, run = args_run
    if case == "compression_differs" and backend != "mpiio":
        pytest.skip("only the native backend compresses")
    last = run.nprocs - 1
    _all_failed(run, case, "DeclarationError", token, f"rank {last}", "declare (arguments)")


@pytest.mark.mpi
def test_a_hint_value_the_library_would_ignore_fails_everywhere(args_run) -> None:
    """``nc_in_place_swap="false"`` on one rank (PnetCDF took it as "auto" and swapped the arrays in place)."""
    _backend, run = args_run
    _all_failed(run, "hint_value_bad_one_rank", "DeclarationError", "nc_in_place_swap='false'",
                "expected one of enable, disable, auto")


@pytest.mark.mpi
def test_a_declaration_that_differs_on_one_rank_names_every_value_and_the_short_block(args_run) -> None:
    """Outside trial, 2026-12-06: a shape mismatch named two ranks, a hole no rank; now every rank's message names
    each declared shape with its ranks (with more than two ranks) and the block that ends where the hole starts."""
    _backend, run = args_run
    n, last = run.nprocs, run.nprocs - 1
    shapes = f"[{8 * n}, 4] on {'rank 0' if last == 1 else f'ranks 0-{last - 1}' if last > 2 else 'ranks 0, 1'}"
    _all_failed(run, "shape_differs_last_rank", "DeclarationError", f"rank {last} declared [{8 * n + 1}, 4]",
                *([f"(every declaration: {shapes}; [{8 * n + 1}, 4] on rank {last})"] if n > 2 else []))
    _all_failed(run, "short_block_one_rank", "DeclarationError", "element [7, 0] is written by no rank; it lies "
                "right past the block of rank 0 (offset [0, 0], shape [7, 4]) along axis 0")


# -------------------------------------------------------------------------------- 17: after close
@pytest.mark.mpi
@pytest.mark.parametrize("case", ["write_after_close", "set_attr_after_close", "read_after_close",
                                  "read_many_after_close", "attrs_after_close"])
def test_use_after_close_is_a_clear_error(args_run, case: str) -> None:
    _backend, run = args_run
    per_rank = run.outcomes[case]
    for r, o in per_rank.items():
        assert not o["ok"] and "ClosedCheckpointError" in o["bases"], f"{case}: rank {r}: {o}"
        assert "after" in o["msg"] and "close()" in o["msg"], o["msg"]


# -------------------------------------------------------------------------------- 18: read arguments
@pytest.mark.mpi
@pytest.mark.parametrize("case,token", [
    ("offset_shape_lengths_differ", "1 value(s), but the variable has 2"), ("float_offset", "0.9 (float)"),
    ("bool_offset", "True (bool)"), ("negative_offset", "negative"), ("float_shape", "2.0 (float)"),
    ("string_shape", "sequence of 2 integers"), ("offset_not_sequence", "sequence of 2 integers")])
def test_bad_read_arguments_on_one_rank_fail_on_every_rank(args_run, case: str, token: str) -> None:
    _backend, run = args_run
    # the job also checks that the same reader reads correctly afterwards (in a finally block on every rank)
    _all_failed(run, f"read_{case}", "ReadRequestError", "'dens'", token, f"rank {run.nprocs - 1}")


# ------------------------------------------------------------------------------------ 19: sizes
@pytest.mark.mpi
def test_buffer_sizes_with_units_are_accepted(args_run) -> None:
    _backend, run = args_run
    assert set(_all_ok(run, "env_buffer_64M")) == {64 << 20}
    assert set(_all_ok(run, "env_buffer_1MiB")) == {1 << 20}
    assert set(_all_ok(run, "arg_buffer_2G")) == {2 << 30}


@pytest.mark.mpi
@pytest.mark.parametrize("case,tokens", [
    ("env_buffer_negative_one_rank", ("CKPTIO_BUFFER_BYTES='-1'", "positive")),
    ("env_buffer_garbage", ("CKPTIO_BUFFER_BYTES='lots'", "not a size")),
    ("arg_buffer_zero_one_rank", ("buffer_bytes=0", "positive")),
    ("arg_buffer_differs", ("buffer_bytes differs between ranks",)),
    ("arg_verify_differs", ("verify differs between ranks", "verify=")),
    ("arg_verify_string_one_rank", ("verify='no'", "give True or False")),
    ("open_path_differs", ("the path differs between ranks", "every rank must open the same checkpoint")),
    ("open_hints_differ", ("hints differ between ranks", "cb_buffer_size='1048576' against '16777216'")),
    ("env_aggregators_garbage_one_rank", ("CKPTIO_AGGREGATORS='two'",)),
    ("arg_aggregators_zero", ("aggregators=0",))])
def test_bad_or_differing_sizes_fail_on_every_rank(args_run, case: str, tokens: tuple[str, ...]) -> None:
    _backend, run = args_run
    _all_failed(run, case, "DeclarationError", *tokens)


@pytest.mark.parametrize("text,expected", [("64M", 64 << 20), ("64MiB", 64 << 20), ("64mb", 64 << 20),
                                           ("1G", 1 << 30), ("1.5G", 3 << 29), ("1048576", 1 << 20),
                                           (4096, 4096), (" 8 K ", 8192)])
def test_size_parser_accepts(text, expected: int) -> None:
    assert units.parse_size(text, "buffer_bytes") == expected


@pytest.mark.parametrize("text", ["-1", -1, "0", 0, "", "lots", "64X", "1.5", 1.5, True, None, "1e6", "0.1K"])
def test_size_parser_refuses_naming_the_argument(text) -> None:
    with pytest.raises(DeclarationError, match="CKPTIO_BUFFER_BYTES="):
        units.parse_size(text, "CKPTIO_BUFFER_BYTES")
    assert issubclass(DeclarationError, CheckpointError)


def test_size_parser_zero_only_where_allowed() -> None:
    assert units.parse_size("0", "x", allow_zero=True) == 0


def test_cli_plan_buffer_uses_the_same_parser(capsys) -> None:
    args = cli.build_parser().parse_args(["plan", "--ranks", "4", "--bytes", "1G", "--buffer", "64MiB"])
    assert args.buffer == 64 << 20
    assert cli.main(["plan", "--ranks", "4", "--bytes", "1G", "--buffer", "-1"]) == cli.EXIT_USAGE
    assert "--buffer='-1' must be a positive size" in capsys.readouterr().err


# -------------------------------------------------------------------------------- 20: attributes
@pytest.mark.mpi
def test_nan_attributes_are_equal_and_read_back(args_run) -> None:
    _backend, run = args_run
    for text in _all_ok(run, "attr_nan"):
        back = json.loads(text)
        assert math.isnan(back["dt"]) and back["v"][0] == 1.0 and math.isnan(back["v"][1])
        assert math.isnan(back["nested"][0][0]) and back["nested"][1] == "x"


@pytest.mark.mpi
@pytest.mark.parametrize("case,key", [("attr_int_vs_float_differ", "'step'"), ("attr_nan_vs_number_differ", "'dt'")])
def test_attributes_that_differ_by_value_fail(args_run, case: str, key: str) -> None:
    _backend, run = args_run
    _all_failed(run, case, "DeclarationError", key, "differs between rank 0")


REFUSED = {"hdf5": {"attr_nul_string": "'label'", "set_attr_nul_string": "'label'", "attr_long_int_list": "'ids'",
                    "attr_surrogate": "'name'"},
           "pnetcdf": {"attr_surrogate": "'name'"}, "mpiio": {}}


@pytest.mark.mpi
@pytest.mark.parametrize("case", ["attr_nul_string", "set_attr_nul_string", "attr_long_int_list", "attr_surrogate"])
def test_attributes_a_backend_cannot_store_fail_at_declaration(args_run, case: str) -> None:
    backend, run = args_run
    key = REFUSED[backend].get(case)
    if key is None:
        assert _all_ok(run, case)  # this backend stores it
        return
    if case.startswith("set_attr"):  # set_attr refuses it at once on every rank (each rank's own error)
        _all_failed(run, case, "CapabilityError", key, backend)
    else:  # raised by close()'s declare phase, before any file (not even a temporary one) exists
        _all_failed(run, case, "CapabilityError", key, backend, ": declare failed")


def test_attrs_identical_treats_nan_as_equal_and_types_as_distinct() -> None:
    nan = float("nan")
    assert meta.attrs_identical({"a": nan, "b": [1, [nan, "x"]]}, {"a": nan, "b": [1, [nan, "x"]]})
    assert not meta.attrs_identical(1, 1.0) and not meta.attrs_identical(True, 1)
    assert not meta.attrs_identical([1, 2], [1, 2, 3]) and not meta.attrs_identical(nan, 0.5)
    assert not meta.attrs_identical(0.0, -0.0)


# ------------------------------------------------------------------------------ 14: split exchange
@pytest.mark.mpi
def test_exchange_larger_than_the_message_limit_is_split_on_every_rank(tmp_path) -> None:
    run = run_leave_job("exchange", tmp_path, "mpiio", 3)
    _all_ok(run, "setup")
    stats = _all_ok(run, "split_exchange")
    for s in stats:
        # one round (aggregators=1, a 1 GiB buffer), cut into several Alltoallv calls of < 4096 bytes per rank
        assert s["rounds"] == 1 and s["messages"] > 20, s
