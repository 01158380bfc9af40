"""Every variable's blocks are joined once per checkpoint (issue 29, item 5): the write side's index keeps the
columns it built from the plan and the reports, the decoder keeps the columns it decoded, and the encoding of a
document with kept columns is the same entry as the encoding of its tables (no MPI). Each shortcut is checked
against the general path it replaces, on documents with scalars, several numbers of dimensions, variables
without blocks, segments and compressed blocks."""

import json

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from ckptio.engine.index import DocumentInputs, RankReport, WrittenColumns, build_index
from ckptio.model import block_table, meta, schema_checks
from ckptio.model.declared import prepared
from ckptio.model.document import CheckpointDocument
from ckptio.model.joined_blocks import JoinedBlocks
from ckptio.model.plan import pack_declarations, plan_packed
from ckptio.model.variable_plan import PlannedVariables, joined_columns
from ckptio.model.variable_record import VariableRecord

_JOINED = ("counts", "starts", "var", "block", "lo", "shape", "rank", "checksum", "file_offset", "stored_nbytes",
           "codec")


def _same_joined(got: JoinedBlocks, want: JoinedBlocks) -> None:
    for key in _JOINED:
        a, b = getattr(got, key), getattr(want, key)
        assert a.shape == b.shape and a.dtype == b.dtype and np.array_equal(a, b), key


@st.composite
def _checkpoints(draw):
    """Up to 4 ranks' declarations (arrays of 0-3 dimensions, one variable split over the ranks, a segment,
    an empty array) and what each rank reports writing (file offsets; some blocks compressed when asked)."""
    nprocs = draw(st.integers(1, 4))
    decls: list[list[dict]] = [[] for _ in range(nprocs)]

    def add(rank: int, decl: dict) -> None:
        checksum = f"{(rank * 7919 + len(decls[rank]) * 104729 + 1) % (1 << 64):016x}"
        decls[rank].append(prepared(decl, checksum))

    for i in range(draw(st.integers(0, 12))):
        shape = draw(st.lists(st.integers(1, 4), min_size=0, max_size=3))
        add(draw(st.integers(0, nprocs - 1)), {"name": draw(st.sampled_from(["v", "a", "z"])) + f"{i:02d}",
                                               "dtype": "<f8", "kind": "array", "global_shape": shape,
                                               "offset": [0] * len(shape), "shape": shape})
    if draw(st.booleans()):
        for r in range(nprocs):
            add(r, {"name": "split", "dtype": "<i4", "kind": "array", "global_shape": [nprocs, 2, 3],
                    "offset": [r, 0, 0], "shape": [1, 2, 3]})
    if draw(st.booleans()):
        for r in range(nprocs):
            add(r, {"name": "seg", "dtype": "<i2", "kind": "segment", "length": r, "trailing": [2]})
    compressed = draw(st.booleans())
    reports = []
    for r in range(nprocs):
        n = len(decls[r])
        reports.append(RankReport(WrittenColumns([4096 * (r * 100 + j) for j in range(n)], [8] * n,
                                                 ["zstd:3" if compressed and j % 2 else None for j in range(n)]),
                                  8 * n, {"declare": 0.1}, {"host": "node0", "file_bytes": None}))
    return decls, reports


def _built(decls, reports):
    plans = plan_packed([pack_declarations(d) for d in decls])
    inputs = DocumentInputs("mpiio", 2, {"striping_factor": "1", "striping_unit": "1048576"}, {"run": 1},
                            io_component="test")
    return plans, build_index(plans, reports, inputs, {}, {})


@settings(max_examples=80, deadline=None)
@given(checkpoint=_checkpoints())
def test_the_index_keeps_the_columns_the_tables_would_join_into(checkpoint):
    _plans, built = _built(*checkpoint)
    typed = built.typed()
    fresh = CheckpointDocument.of(built.document)  # (the same dict typed again: nothing kept)
    assert "_joined" not in fresh.__dict__
    if built.joined is None:  # (compressed blocks: the tables are joined when first asked for)
        assert any(t.codecs for t in (v.blocks for v in typed.variables.values()))
    else:
        _same_joined(typed.joined_blocks(), fresh.joined_blocks())
    # the commit stores the typed document's text: byte for byte what the dict form gives
    assert meta.dumps(typed) == meta.dumps(built.document) == meta.dumps(fresh)


@settings(max_examples=80, deadline=None)
@given(checkpoint=_checkpoints())
def test_a_parsed_document_keeps_the_columns_it_decoded(checkpoint):
    _plans, built = _built(*checkpoint)
    text = meta.dumps(built.document)
    parsed = meta.loads(text)
    tables = [v.block_table() for v in parsed.variables.values()]
    reference = JoinedBlocks.of(tables, [len(v.shape) for v in parsed.variables.values()],
                                max((len(v.shape) for v in parsed.variables.values()), default=0))
    assert "_joined" in parsed.__dict__
    _same_joined(parsed.joined_blocks(), reference)
    assert meta.dumps(parsed) == text  # encoded from the kept columns where nothing is compressed


@settings(max_examples=60, deadline=None)
@given(checkpoint=_checkpoints(), order=st.randoms(use_true_random=False))
def test_the_joined_encoding_is_the_tables_encoding_in_any_variable_order(checkpoint, order):
    _plans, built = _built(*checkpoint)
    doc = CheckpointDocument.of(built.document)
    if any(v.blocks.codecs for v in doc.variables.values()):
        return
    names = list(doc.variables)
    order.shuffle(names)
    tables = {n: doc.variables[n].block_table() for n in names}
    ndims = [len(doc.variables[n].shape) for n in names]
    joined = JoinedBlocks.of(list(tables.values()), ndims, max(ndims, default=0))
    assert block_table.encode_joined(names, joined, ndims) == block_table.encode_tables(tables)


def test_a_kept_column_set_is_read_only_and_not_pickled():
    decls = [[prepared({"name": f"v{i}", "dtype": "<f8", "kind": "array", "global_shape": [4], "offset": [0],
                        "shape": [4]}, "00000000000000aa") for i in range(3)]]
    reports = [RankReport(WrittenColumns([0, 32, 64], [32] * 3, [None] * 3), 96, {},
                          {"host": "n0", "file_bytes": None})]
    _plans, built = _built(decls, reports)
    typed = built.typed()
    assert not typed.joined_blocks().file_offset.flags.writeable
    assert "_joined" not in typed.__getstate__()


def test_the_plan_joins_its_columns_once():
    decls = [[prepared({"name": f"v{i:03d}", "dtype": "<f8", "kind": "array", "global_shape": [2, 3],
                        "offset": [0, 0], "shape": [2, 3]}, "00000000000000aa") for i in range(r, 40, 2)]
             for r in range(2)]
    plans = plan_packed([pack_declarations(d) for d in decls])
    assert isinstance(plans, PlannedVariables)
    first = joined_columns(plans)
    assert joined_columns(plans) is first and not first.rank.flags.writeable
    again = joined_columns(dict(plans))  # (a plain dict: joined anew, the same columns)
    for key in ("counts", "starts", "rank", "local_index", "stored", "ndims", "offset", "size", "checksum"):
        assert np.array_equal(getattr(again, key), getattr(first, key)), key
    assert first.offset.shape == (40, 2) and first.size.tolist() == [[2, 3]] * 40


def test_a_stored_document_from_before_reads_the_same():
    """A schema-2 document as ckptio stored it before the kept columns: parsed, its tables and joined columns
    are the ones the stored entry describes, and re-encoded it is the same text."""
    doc = {"schema": 2, "backend": "mpiio", "nprocs": 2, "checksum": "xxh3_64", "attrs": {},
           "variables": {"a": {"dtype": "<f8", "kind": "array", "shape": [4, 2]},
                         "b": {"dtype": "<i4", "kind": "array", "shape": []}}}
    tables = {"a": block_table.BlockTable(np.array([0, 1]), np.array([[0, 0], [2, 0]]), np.array([[2, 2], [2, 2]]),
                                          np.array([1, 2], np.uint64), np.array([0, 32]), np.array([32, 32]),
                                          np.array([-1, -1]), []),
              "b": block_table.BlockTable(np.array([1]), np.zeros((1, 0)), np.zeros((1, 0)),
                                          np.array([3], np.uint64), np.array([64]), np.array([4]), np.array([-1]),
                                          [])}
    doc["variable_blocks"] = block_table.encode_tables(tables)
    text = json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()
    parsed = meta.loads(text)
    assert meta.dumps(parsed) == text
    joined = parsed.joined_blocks()
    assert joined.lo.tolist() == [[0, 0], [2, 0], [0, 0]] and joined.shape.tolist() == [[2, 2], [2, 2], [1, 1]]
    assert joined.var.tolist() == [0, 0, 1] and joined.file_offset.tolist() == [0, 32, 64]


_ONE_BLOCK_EDITS = st.sampled_from(["none", "rank", "negative rank", "offset", "extent", "file_offset", "stored",
                                    "float shape", "bool shape", "huge shape", "no shape", "codec", "segment"])


@settings(max_examples=150, deadline=None)
@given(ndims=st.lists(st.integers(0, 3), min_size=1, max_size=6), edit=_ONE_BLOCK_EDITS, victim=st.integers(0, 5),
       nprocs=st.integers(1, 3))
def test_one_block_tables_checked_at_once_decide_as_each_variables_check(ndims, edit, victim, nprocs):
    """A document of one-block variables with one edit (the block off the array, a rank outside the job, a
    negative size, a shape that is not integers, ...): validate with the joined columns gives the verdict and
    the message of the per-variable checks."""
    victim %= len(ndims)
    entries, tables = {}, {}
    for i, nd in enumerate(ndims):
        shape = [2 + (i + k) % 3 for k in range(nd)]
        entries[f"v{i}"] = {"dtype": "<f8", "kind": "array", "shape": shape}
        tables[f"v{i}"] = block_table.BlockTable(np.array([i % nprocs]), np.zeros((1, nd)), np.array([shape]),
                                                 np.array([i], np.uint64), np.array([64 * i]), np.array([8]),
                                                 np.array([-1]), [])
    entry, table = entries[f"v{victim}"], tables[f"v{victim}"]
    if edit == "rank":
        table.rank[0] = nprocs
    elif edit == "negative rank":
        table.rank[0] = -1
    elif edit == "offset" and entry["shape"]:
        table.offset[0, -1] = 1
    elif edit == "extent" and entry["shape"]:
        table.shape[0, 0] -= 1
    elif edit == "file_offset":
        table.file_offset[0] = -2
    elif edit == "stored":
        table.stored_nbytes[0] = -1
    elif edit == "float shape" and entry["shape"]:
        entry["shape"][0] = float(entry["shape"][0])
    elif edit == "bool shape" and entry["shape"]:
        entry["shape"] = [True] * len(entry["shape"])
    elif edit == "huge shape" and entry["shape"]:
        entry["shape"][0] = 2**70
    elif edit == "no shape":
        entry["shape"] = "4"
    elif edit == "segment":
        entry["kind"] = "segment"
    doc = {"schema": 2, "backend": "mpiio", "nprocs": nprocs, "checksum": "xxh3_64", "attrs": {},
           "variables": {n: {**e, "blocks": tables[n]} for n, e in entries.items()}}
    if edit == "codec":
        for t in tables.values():
            t.codecs = ["lz4:1"]

    def verdict(joined):
        try:
            schema_checks.validate(doc, joined)
            return "valid"
        except (ValueError, TypeError) as exc:
            return f"{type(exc).__name__}: {exc}"

    ndim = max(ndims)
    shapes_ok = all(type(s) is list for s in (e["shape"] for e in entries.values()))
    if not shapes_ok:  # (the decoder refuses such a document before any check; the checks alone still agree)
        return
    joined = JoinedBlocks.of(list(tables.values()), [len(e["shape"]) for e in entries.values()], ndim)
    assert verdict(joined) == verdict(None)
    if edit == "none":
        assert verdict(joined) == "valid"


class _Entry(dict):
    """A variable entry that is not exactly a dict: VariableRecord.of takes its general path."""


@settings(max_examples=40, deadline=None)
@given(checkpoint=_checkpoints())
def test_a_plain_entry_makes_the_record_the_general_path_makes(checkpoint):
    _plans, built = _built(*checkpoint)
    for name, entry in built.document["variables"].items():
        fast, general = VariableRecord.of(entry), VariableRecord.of(_Entry(entry))
        assert fast.__dict__.keys() == general.__dict__.keys(), name
        for key, value in general.__dict__.items():
            assert fast.__dict__[key] is value or fast.__dict__[key] == value, (name, key)
        assert fast == general and dict(fast) == dict(general), name
