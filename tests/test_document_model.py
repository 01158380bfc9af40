"""The typed metadata document (``ckptio.model.document``, issue 24 item 1), without MPI:

* ``from_json``/``to_json`` are the JSON boundary: plain JSON types out, the same stored bytes as the write side's
  dict form for the same content, keys of a newer minor version kept;
* a document also reads as the dict ``meta.loads`` returned before (``doc[key]``), read-only;
* light copies (no block tables) are typed too, refuse to be stored, and travel by pickle between ranks like the
  dict did;
* damage in the typed records is a ValueError naming the field, a newer schema a FormatVersionError.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import pickle
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import pytest

from ckptio.errors import FormatVersionError
from ckptio.model import meta as metamod
from ckptio.model.block_table import BlockTable
from ckptio.model.document import CheckpointDocument, VariableRecord, as_document

FIXTURES = Path(__file__).resolve().parent / "data" / "format1"


def _table(rows: list[tuple[int, list[int], list[int]]], sums: list[int], codec: list[int],
           codecs: list[str]) -> BlockTable:
    n = len(rows)
    return BlockTable(np.array([r for r, _, _ in rows], np.int64), np.array([o for _, o, _ in rows], np.int64),
                      np.array([s for _, _, s in rows], np.int64), np.array(sums, np.uint64),
                      np.arange(n, dtype=np.int64) * 4096 + 4096, np.full(n, 48, np.int64), np.array(codec, np.int64),
                      codecs)


def _written() -> dict:
    """A document in the write side's dict form, with every part a writer records and a few keys this ckptio does
    not know (a newer minor version's)."""
    fs = {"type": "cephfs", "mode": "set", "method": "ceph.file.layout xattr",
          "asked": {"stripe_count": 2, "stripe_unit": 65536, "object_size": 4194304},
          "got": {"stripe_count": 2, "stripe_unit": 65536, "object_size": 4194304, "pool": "data"}, "reason": None,
          "newer_fs": 1}
    return {
        "schema": 2, "ckptio_version": "0.1.0", "backend": "hdf5", "backend_format_version": 2,
        "created": "2026-11-27T10:00:00.123456Z", "nprocs": 2, "byteorder": "little",
        "checksum": metamod.CHECKSUM_ALGORITHM, "attrs": {"step": 7, "time": 1.25, "tags": ["a", "b"], "nan": None},
        "layout": {"stripe_count": 2, "stripe_unit": 65536, "fs": fs, "newer_layout": [1]},
        "hints": {"requested": {"striping_factor": "2"}, "effective": {"cb_nodes": "1"},
                  "io_component": "Open MPI io=default (ompio)", "newer_hints": True},
        "stats": {"write": {"seconds": {"write": 0.5}, "bytes": {"total": 96, "min": 48, "max": 48},
                            "placement": {"measured": False, "nodes": []}, "newer_stat": 3}, "read": {}},
        "series": {"id": "a" * 32, "run": "b" * 32, "seq": 3, "parent": "chk_000010",
                   "abandons": [{"name": "chk_000020", "created": "2026-11-26T10:00:00Z"}]},
        "newer_top": {"x": 1},
        "variables": {
            "dens": {"dtype": "<f8", "shape": [4, 3], "kind": "array", "dims": ["y", "x"], "attrs": {"units": "K"},
                     "storage": {"format": "hdf5", "dataset": "/dens", "file_offset": None, "file_dtype": "<f8"},
                     "newer_var": "v", "blocks": _table([(0, [0, 0], [2, 3]), (1, [2, 0], [2, 3])], [1, 2**64 - 1],
                                                          [-1, 0], ["zstd:3"])},
            "tracers": {"dtype": "<i4", "shape": [5], "kind": "segment",
                        "blocks": _table([(0, [0], [2]), (1, [2], [3])], [3, 4], [-1, -1], [])},
            "energy": {"dtype": "<f8", "shape": [], "kind": "array", "blocks": _table([(0, [], [])], [5], [-1], [])},
        },
    }


def _plain(value):
    """A document (or any of its parts) as plain dicts and lists, block tables as lists of block dicts."""
    if isinstance(value, BlockTable):
        return ["table", *value.to_dicts()]
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


def _json_types_only(value) -> bool:
    if isinstance(value, dict):
        return all(isinstance(k, str) and _json_types_only(v) for k, v in value.items())
    if isinstance(value, list):
        return all(_json_types_only(v) for v in value)
    return value is None or type(value) in (bool, int, float, str)


def test_the_typed_document_stores_the_same_bytes_as_the_dict_form():
    written = _written()
    text = metamod.dumps(written)  # the write side's path today
    doc = CheckpointDocument.of(written)
    assert metamod.dumps(doc) == text
    loaded = metamod.loads(text)
    assert loaded == doc and metamod.dumps(loaded) == text
    stored = doc.to_json()
    assert _json_types_only(stored) and json.loads(text) == stored
    assert metamod.dumps(dict(loaded)) == text  # the JSON-form view stores the same bytes too
    old = metamod.dumps({**loaded, "schema": 1})  # a schema-1 document: one object per block
    assert json.loads(old)["variables"]["dens"]["blocks"][1]["codec"] == "zstd:3"
    assert metamod.dumps(dataclasses.replace(loaded, schema=1)) == old


def test_attributes_are_typed_and_keys_of_a_newer_version_are_kept():
    doc = metamod.loads(metamod.dumps(_written()))
    dens = doc.variables["dens"]
    assert (dens.shape, dens.dims, dens.kind, dens.nblocks, dens.nbytes) == ((4, 3), ("y", "x"), "array", 2, 96)
    assert dens.storage.file_offset is None and dens.storage.file_dtype == "<f8" and dens.storage.format == "hdf5"
    assert dens.block_table().codec_names() == [None, "zstd:3"] and dens.stored_nbytes == 96
    assert doc.variables["tracers"].is_segment and doc.variables["energy"].dim_names("energy") == ()
    assert doc.variables["tracers"].dim_names("tracers") == ("tracers_d0",)
    assert (doc.layout.stripe_count, doc.layout.fs.got.granule(), doc.layout.fs.got_layout().values["pool"]) == \
        (2, 2 * 4194304, "data")
    assert doc.hints.requested == {"striping_factor": "2"} and doc.hints.io_component.startswith("Open MPI")
    assert doc.stats.write.bytes == {"total": 96, "min": 48, "max": 48} and doc.stats.write.seconds == {"write": 0.5}
    assert doc.series.seq == 3 and doc.series.abandons[0].name == "chk_000020"
    assert doc.extra == {"newer_top": {"x": 1}} and dens.extra == {"newer_var": "v"}
    assert doc.layout.extra == {"newer_layout": [1]} and doc.layout.fs.extra == {"newer_fs": 1}
    assert doc.hints.extra == {"newer_hints": True} and doc.stats.extra == {"read": {}}
    assert doc.stats.write.extra == {"newer_stat": 3}
    assert doc.checksummed and not doc.plain and not doc.is_light


def test_the_mapping_view_is_the_dict_loads_returned_before():
    """Exactly the keys and values of the in-memory dict form: the stored document with each variable's blocks
    as its BlockTable and no variable_blocks entry."""
    written = _written()
    doc = metamod.loads(metamod.dumps(written))
    assert _plain(doc) == _plain(written)
    assert set(doc) == set(written) and len(doc["variables"]["dens"]) == len(written["variables"]["dens"])
    assert doc["variables"]["dens"]["shape"] == [4, 3] and doc["variables"]["dens"]["dims"] == ["y", "x"]
    assert isinstance(doc["variables"]["dens"]["blocks"], BlockTable)
    assert doc.get("variable_blocks") is None and "series" in doc and doc["layout"]["fs"]["got"]["pool"] == "data"
    assert "dims" not in doc["variables"]["tracers"] and doc["variables"]["tracers"].get("attrs", {}) == {}
    with pytest.raises(TypeError):
        doc["schema"] = 3  # type: ignore[index]
    with pytest.raises(dataclasses.FrozenInstanceError):
        doc.schema = 3  # type: ignore[misc]
    view = doc["layout"]
    view["stripe_count"] = 99  # a fresh dict: the document does not change
    assert doc.layout.stripe_count == 2 and doc["layout"]["stripe_count"] == 2


def test_light_copies_are_typed_travel_by_pickle_and_cannot_be_stored():
    doc = metamod.loads(metamod.dumps(_written()))
    light = metamod.without_blocks(doc)
    assert isinstance(light, CheckpointDocument) and light.is_light and light == doc.without_blocks()
    assert light.variables["dens"].blocks is None and light.variables["dens"].nblocks == 2
    assert _plain(light["variables"]["dens"]) == {k: v for k, v in _plain(doc["variables"]["dens"]).items()
                                                  if k != "blocks"} | {"nblocks": 2}
    assert light != doc and pickle.loads(pickle.dumps(light)) == light and copy.deepcopy(doc) == doc
    with pytest.raises(ValueError, match="light copy"):
        light.to_json()
    with pytest.raises(ValueError, match="no block table"):
        light.variables["dens"].block_table()
    as_dict = metamod.without_blocks(_written())  # the write side's light copy stays a dict it adds to
    assert isinstance(as_dict, dict) and as_document(as_dict) == light


def test_joined_blocks_are_made_once_and_left_out_of_a_pickle():
    """The open's format check and its extent table join the same tables: one JoinedBlocks per padding, kept on the
    document; pickling (the light copy every rank receives, a staged close) carries the fields only."""
    doc = metamod.loads(metamod.dumps(_written()))
    j = doc.joined_blocks()
    assert doc.joined_blocks() is j and doc.joined_blocks(3) is not j and doc.joined_blocks(3) is doc.joined_blocks(3)
    assert j.lo.shape == (5, 2) and doc.joined_blocks(3).lo.shape == (5, 3)
    assert j.checksum.tolist() == [1, 2**64 - 1, 5, 3, 4]  # (document order: dens, energy, tracers)
    again = pickle.loads(pickle.dumps(doc))
    assert again == doc and "_joined" not in vars(again) and "_joined" in vars(doc)
    assert len(pickle.dumps(doc)) == len(pickle.dumps(again))


def test_a_parsed_documents_variables_share_their_strings_and_empty_extras():
    """10,000 small variables: one dtype string, one kind string and one empty ``extra`` for all of them, so the
    pickled light copy says each once (what every rank unpickles at open)."""
    entries = {f"v{i}": {"dtype": "<f8", "shape": [2], "kind": "array",
                         "blocks": _table([(0, [0], [2])], [i], [-1], [])} for i in range(50)}
    doc = metamod.loads(metamod.dumps({**_written(), "variables": entries}))
    records = list(doc.without_blocks().variables.values())
    assert len({id(r.dtype) for r in records}) == len({id(r.kind) for r in records}) == 1
    assert len({id(r.extra) for r in records}) == 1 and records[0].extra == {}
    light = pickle.loads(pickle.dumps(doc.without_blocks()))
    assert light == doc.without_blocks() and len({id(r.extra) for r in light.variables.values()}) == 1
    with pytest.raises(TypeError, match="read-only"):  # shared: a caller's change would reach every record
        records[0].extra["note"] = 1
    with pytest.raises(TypeError, match="read-only"):
        records[1].extra.update(note=1)
    assert copy.deepcopy(records[0].extra) is records[0].extra and records[0].extra == {}
    assert metamod.dumps(metamod.loads(metamod.dumps(doc))) == metamod.dumps(doc)
    with pytest.raises(ValueError, match="read-only"):  # the kept joined columns
        doc.joined_blocks().rank[0] = 3


def test_records_built_without_the_constructor_equal_the_constructors():
    """VariableRecord.of and without_blocks set the fields directly (one record per variable of every document):
    the result must be what the dataclass constructor gives, every field, for full and light records."""
    fields = [f.name for f in dataclasses.fields(VariableRecord)]
    for name, entry in _written()["variables"].items():
        made = VariableRecord.of(entry)
        built = VariableRecord(*(getattr(made, f) for f in fields))
        assert made == built and vars(made) == vars(built), name
        light = made.without_blocks()
        assert light == dataclasses.replace(made, blocks=None) and light.blocks is None and made.blocks is not None
        assert vars(light).keys() == vars(built).keys()
        again = VariableRecord.of({**dict(light), "shape": list(light.shape)})  # a light entry: nblocks, no blocks
        assert again == light and vars(again) == vars(light)
        with pytest.raises(dataclasses.FrozenInstanceError):
            made.dtype = "<f4"


def test_documents_compare_by_content_and_are_not_hashable():
    a, b = (metamod.loads(metamod.dumps(_written())) for _ in range(2))
    assert a == b and a.variables["dens"] == b.variables["dens"]
    other = _written()
    other["variables"]["dens"]["blocks"].checksum[0] ^= 1
    assert metamod.loads(metamod.dumps(other)) != a
    with pytest.raises(TypeError):
        hash(a)
    assert isinstance(a.variables["dens"], VariableRecord) and isinstance(a.variables["dens"], Mapping)


@pytest.mark.parametrize("path", sorted(FIXTURES.glob("v1_mpiio*.ckpt")), ids=lambda p: p.name)
def test_schema_1_fixtures_load_and_store_again(path):
    from ckptio.backends import mpiio

    raw = path.read_bytes()
    fields = mpiio._TRAILER.unpack(raw[-mpiio.TRAILER_SIZE:])
    text = raw[fields[3]:fields[3] + fields[4]]
    doc = metamod.loads(text)
    assert doc.schema == 1 and doc.stats.write.extra["bytes_per_rank"]  # format 1's statistics, kept
    again = metamod.loads(metamod.dumps(doc))
    assert again == doc and _plain(again) == _plain(doc)
    assert metamod.dumps(dataclasses.replace(doc, schema=2)) == metamod.dumps({**doc, "schema": 2})


@pytest.mark.parametrize("edit, words", [
    (lambda d: d.update(hints={"requested": 5}), "hints 'requested' is int"),
    (lambda d: d.update(hints={"io_component": 5}), "io_component"),
    (lambda d: d.update(stats={"write": []}), "stats 'write' is list"),
    (lambda d: d["stats"]["write"].update(seconds="slow"), "stats write 'seconds'"),
    (lambda d: d.update(series={"id": "x"}), "series"),
    (lambda d: d["layout"]["fs"].update(got=[1]), "layout fs 'got'"),
    (lambda d: d.update(nprocs=0), "field 'nprocs'"),
])
def test_damaged_records_are_value_errors_naming_the_field(edit, words):
    stored = json.loads(metamod.dumps(_written()))
    edit(stored)
    with pytest.raises(ValueError, match=words):
        CheckpointDocument.from_json(stored)


def test_not_a_document_and_a_newer_schema_are_told_apart():
    with pytest.raises(ValueError, match="not a ckptio document"):
        metamod.loads(b"[1, 2]")
    stored = json.loads(metamod.dumps(_written()))
    stored["schema"] = 3
    with pytest.raises(FormatVersionError, match="schema version 3"):
        CheckpointDocument.from_json(stored)
    assert stored["variable_blocks"]  # from_json never modifies what it is given


def test_a_readers_variables_are_what_the_constructor_gives_and_built_when_looked_up():
    """Reader.variables (engine.restart.VariableInfos) builds each VariableInfo when first looked up, without the
    frozen dataclass's constructor: each equals the constructor's, field by field; the mapping lists every
    variable in the document's order and refuses names the checkpoint does not hold."""
    from ckptio.engine.restart import variable_infos
    from ckptio.model.requests import VariableInfo

    light = metamod.loads(metamod.dumps(_written())).without_blocks()
    infos = variable_infos(light)
    assert list(infos) == list(light.variables) and len(infos) == 3 and "dens" in infos and "nope" not in infos
    assert not infos._made  # nothing built before a look-up
    for name, v in light.variables.items():
        dtype = np.dtype(v.dtype).newbyteorder("=")
        built = VariableInfo(name, v.shape, dtype, v.kind, v.nblocks, v.nbytes, v.dim_names(name), dict(v.attrs or {}))
        assert infos[name] == built and vars(infos[name]) == vars(built) and infos[name] is infos[name]
    assert infos["tracers"].dims == ("tracers_d0",) and infos["dens"].attrs == {"units": "K"}
    with pytest.raises(KeyError):
        infos["nope"]
    assert dict(infos) == {name: infos[name] for name in light.variables}


def test_a_listing_takes_the_variables_as_stored_without_blocks_or_checks():
    """metamod.loads_listing (the HDF5 commit's dataset check, which compares the bytes right after): each variable's
    dtype, shape, kind and storage as stored, no blocks; a text that is not a document of that shape raises."""
    text = metamod.dumps(_written())
    full, listed = metamod.loads(text), metamod.loads_listing(text)
    assert listed.backend == full.backend and list(listed.variables) == list(full.variables)
    for name, v in listed.variables.items():
        w = full.variables[name]
        fields = ("dtype", "shape", "kind", "file_offset", "nbytes")
        assert [getattr(v, f) for f in fields] == [getattr(w, f) for f in fields]
        assert v.blocks is None and v.nblocks == 0
    for bad in (b"[]", b'{"variables": {"x": {"dtype": "<f8"}}}', b"not json"):
        with pytest.raises((KeyError, TypeError, ValueError)):
            metamod.loads_listing(bad)
