"""Every variable's blocks are joined once per checkpoint (issue 29, item 5): the write side's index keeps the
columns it built from the plan and the reports, the decoder keeps the columns it decoded, and the encoding of a
document with kept columns is the same entry as the encoding of its tables (no MPI). Each shortcut is checked
against the general path it replaces, on documents with scalars, several numbers of dimensions, segments (a
zero-length one among them) and compressed blocks; and kept columns are used only while the document holds the
tables they were made of."""

import json
import pickle

import numpy as np
import pytest
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
    """Up to 4 ranks' declarations (arrays of 0-3 dimensions, one variable split over the ranks, a segment whose
    first rank's share is empty) and what each rank reports writing (file offsets; some blocks compressed when
    asked)."""
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
    again = pickle.loads(pickle.dumps(typed))
    assert "_joined" not in again.__dict__ and meta.dumps(again) == meta.dumps(typed)


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


# a schema-2 document as ckptio 0c55c8a (before the kept columns) stored it: "a" of two blocks, "b" a scalar
_STORED_BEFORE = (
    b'{"attrs":{},"backend":"mpiio","checksum":"xxh3_64","nprocs":2,"schema":2,"variable_blocks":{"codecs":[],'
    b'"columns":{"checksum":{"compression":"zlib","count":3,"data":"eAFjZIAAJijNDKUBAGgABw==","dtype":"<u8"},'
    b'"codec":{"compression":"zlib","count":3,"data":"eAH7//8/AAX9Av4=","dtype":"|i1"},"file_offset":'
    b'{"compression":"zlib","count":3,"data":"eAFjUHAAAACDAGE=","dtype":"|i1"},"offset":{"compression":"zlib",'
    b'"count":4,"data":"eAFjYGBiAAAACAAD","dtype":"|i1"},"rank":{"compression":"zlib","count":3,"data":'
    b'"eAFjYGQEAAAGAAM=","dtype":"|i1"},"shape":{"compression":"zlib","count":4,"data":"eAFjYmJiAgAAGAAJ",'
    b'"dtype":"|i1"},"stored_nbytes":{"compression":"zlib","count":3,"data":"eAFTUGABAACnAEU=","dtype":"|i1"}},'
    b'"counts":[2,1],"encoding":1,"variables":["a","b"]},"variables":{"a":{"dtype":"<f8","kind":"array",'
    b'"shape":[4,2]},"b":{"dtype":"<i4","kind":"array","shape":[]}}}')


def test_a_stored_document_from_before_reads_the_same():
    """A schema-2 document as ckptio stored it before the kept columns (the text 0c55c8a wrote): parsed, its
    tables and joined columns are the ones the stored entry describes, and re-encoded it is the same text."""
    text = _STORED_BEFORE
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
    if edit == "codec":  # an unknown codec, and the victim's block compressed with it
        for t in tables.values():
            t.codecs = ["lz4:1"]
        table.codec[0] = 0

    def verdict(joined):
        try:
            schema_checks.validate(doc, joined)
            return "valid"
        except (ValueError, TypeError) as exc:
            return f"{type(exc).__name__}: {exc}"

    # the columns as the decoder joins them, of the tables' own dimensions (a shape that is no list is refused by
    # the decoder before any check; validate alone must still decide as the per-variable checks)
    joined = JoinedBlocks.of(list(tables.values()), ndims, max(ndims))
    assert verdict(joined) == verdict(None)
    proven = schema_checks._one_block_tables_valid(doc["variables"], joined, nprocs)
    if edit == "none":  # every table proven at once, none left to the per-variable check
        assert verdict(joined) == "valid" and all(proven)
    elif verdict(None) != "valid":  # the damaged table is never among the proven ones
        assert not proven[victim] or edit in ("float shape", "bool shape", "huge shape", "no shape", "segment")


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


def _three_variables() -> CheckpointDocument:
    """A parsed document of three one-block variables of the same shape (its decoded columns kept)."""
    doc = {"schema": 2, "backend": "mpiio", "nprocs": 1, "checksum": "xxh3_64", "attrs": {},
           "variables": {n: {"dtype": "<f8", "kind": "array", "shape": [4]} for n in "abc"}}
    tables = {n: block_table.BlockTable(np.array([0]), np.zeros((1, 1)), np.array([[4]]), np.array([i + 1], np.uint64),
                                        np.array([32 * i]), np.array([32]), np.array([-1]), [])
              for i, n in enumerate("abc")}
    doc["variable_blocks"] = block_table.encode_tables(tables)
    parsed = meta.loads(json.dumps(doc, sort_keys=True, separators=(",", ":")).encode())
    assert "_joined" in parsed.__dict__
    return parsed


def _rename(d):
    d.variables["z"] = d.variables.pop("a")


def _reorder(d):
    items = list(d.variables.items())
    d.variables.clear()
    d.variables.update(reversed(items))


def _replace(d):
    other = block_table.BlockTable(np.array([0]), np.zeros((1, 1)), np.array([[4]]), np.array([99], np.uint64),
                                   np.array([4096]), np.array([32]), np.array([-1]), [])
    d.variables["b"] = VariableRecord.of({"dtype": "<f8", "kind": "array", "shape": [4], "blocks": other})


def _delete(d):
    del d.variables["c"]


def _add(d):
    d.variables["d"] = d.variables["a"]


def test_a_changed_document_never_uses_the_columns_kept_before():
    """Kept columns are the document's only while it holds the same tables under the same names in the same
    order: after a variable is renamed, reordered, replaced, removed or added, its encoding and its joined
    columns are its tables' (each variable keeps its own blocks), and a decoded table cannot be changed in place."""
    for change in (_rename, _reorder, _replace, _delete, _add):
        doc = _three_variables()
        doc.joined_blocks()
        change(doc)
        tables = {n: v.block_table() for n, v in doc.variables.items()}
        ndims = [len(v.shape) for v in doc.variables.values()]
        assert doc.to_json()["variable_blocks"] == block_table.encode_tables(tables), change.__name__
        _same_joined(doc.joined_blocks(), JoinedBlocks.of(list(tables.values()), ndims, max(ndims)))
        again = meta.loads(meta.dumps(doc))
        for name, var in doc.variables.items():
            assert int(again.variables[name].block_table().checksum[0]) == int(var.block_table().checksum[0])
            assert int(again.variables[name].block_table().file_offset[0]) == int(var.block_table().file_offset[0])
    doc = _three_variables()
    for column in ("rank", "offset", "shape", "checksum", "file_offset", "stored_nbytes", "codec"):
        with pytest.raises(ValueError, match="read-only"):
            getattr(doc.variables["a"].block_table(), column)[0] = 1
    with pytest.raises(ValueError, match="joined blocks of 2 variables"):
        doc.keep_joined_blocks(JoinedBlocks.of([doc.variables[n].block_table() for n in "ab"], [1, 1], 1))


def test_the_columns_are_kept_only_when_the_json_lists_the_variables_as_they_do():
    """A document whose JSON object lists the variables in another order than its block columns: each variable
    is checked against its own blocks (a table joined in the columns' order would pair "b" with "a"'s valid
    block and accept a block written by a rank outside the job)."""
    tables = {"a": block_table.BlockTable(np.array([0]), np.zeros((1, 1)), np.array([[4]]), np.array([1], np.uint64),
                                          np.array([0]), np.array([32]), np.array([-1]), []),
              "b": block_table.BlockTable(np.array([5]), np.zeros((1, 1)), np.array([[4]]), np.array([2], np.uint64),
                                          np.array([32]), np.array([32]), np.array([-1]), [])}
    doc = {"schema": 2, "backend": "mpiio", "nprocs": 1, "checksum": "xxh3_64", "attrs": {},
           "variables": {n: {"dtype": "<f8", "kind": "array", "shape": [4]} for n in "ba"},
           "variable_blocks": block_table.encode_tables(tables)}
    assert block_table.encode_tables(tables)["variables"] == ["a", "b"]
    with pytest.raises(ValueError, match="variable 'b': block 0 was written by rank 5 of a 1-rank job"):
        CheckpointDocument.from_json(doc)
    tables["b"].rank[0] = 0
    doc["variable_blocks"] = block_table.encode_tables(tables)
    parsed = CheckpointDocument.from_json(doc)
    assert list(parsed.variables) == ["b", "a"] and "_joined" not in parsed.__dict__
    assert parsed.joined_blocks().file_offset.tolist() == [32, 0]


def test_a_changed_plan_makes_its_columns_again():
    """The plan's kept columns follow the mapping: a plan replaced, added or removed, by any dict method."""
    decls = [[prepared({"name": f"v{i}", "dtype": "<f8", "kind": "array", "global_shape": [4], "offset": [0],
                        "shape": [4]}, f"{i + 1:016x}") for i in range(3)]]
    for change in (lambda p: p.__setitem__("v1", p["v0"]), lambda p: p.pop("v2"), lambda p: p.__delitem__("v0"),
                   lambda p: p.update(v9=p["v0"]), lambda p: p.setdefault("v8", p["v1"]), lambda p: p.popitem(),
                   lambda p: p.__ior__({"v7": p["v0"]}), lambda p: p.clear()):
        plans = plan_packed([pack_declarations(d) for d in decls])
        joined_columns(plans)
        change(plans)
        fresh = joined_columns(dict(plans))
        for key in ("counts", "rank", "checksum", "offset", "size"):
            assert np.array_equal(getattr(joined_columns(plans), key), getattr(fresh, key)), key


@settings(max_examples=60, deadline=None)
@given(checkpoint=_checkpoints())
def test_a_parsed_documents_tables_are_cut_on_first_use_and_hold_the_written_blocks(checkpoint):
    """The decoder defers each variable's table (a restart plans from the joined columns and never looks at most
    tables): decoding, checking and typing the document cut none of one block (checked for all variables at once;
    a table of several blocks is checked, so cut, on its own), the count needs no cut, the cut table equals the
    written one, and a table pickles as its own columns, never the document's."""
    _plans, built = _built(*checkpoint)
    written = CheckpointDocument.of(built.document)
    parsed = meta.loads(meta.dumps(built.document))
    for name, var in parsed.variables.items():
        table, want = var.blocks, written.variables[name].blocks
        assert var.nblocks == len(table) == len(want)
        if len(want) == 1:
            assert table._deferred is not None
        again = pickle.loads(pickle.dumps(table))
        assert again._deferred is None and again == want
        assert table == want and table._deferred is None
        assert all(not getattr(table, k).flags.writeable for k in block_table.COLUMNS)
        assert list(table) == list(want) and table.codec_names() == want.codec_names()
