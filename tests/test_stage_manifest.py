"""A staged piece's manifest is a typed record (issue 24): what the stage writes reads back equal, the JSON is the
one earlier releases wrote (pieces staged before an upgrade still drain), and a damaged or foreign manifest is a
ValueError naming the field, never a KeyError inside a drain or a restart. Pure: no MPI, no files."""

import json

import numpy as np
import pytest

from ckptio.model.declared import declaration
from ckptio.model.stage_manifest import StagedBlock, StageManifest


def _manifest(**over) -> StageManifest:
    dens = StagedBlock.declared(declaration("dens", np.zeros((2, 3)), (2, 0), (4, 3), 0),
                                {"dims": ["x", "y"], "attrs": {"units": "g/cm^3"}}, (2, 3))
    parts = StagedBlock.declared(declaration("parts", np.zeros((5, 2), np.int32), None, None, 0), {}, (5, 2))
    fields = dict(final="/pfs/run/chk_0001.ckpt", token="00000000000000000001-deadbeef", host="nid001",
                  backend="hdf5", attrs={"time": 1.5}, series={"series_id": "s", "run_id": "r", "seq": 1},
                  redundancy="xor", rank=1, nprocs=4,
                  blocks=(dens.stored(0, 48, "0123456789abcdef"), parts.stored(48, 40, "fedcba9876543210")))
    fields.update(over)
    return StageManifest(**fields)


def test_a_manifest_reads_back_equal_through_its_json_text():
    m = _manifest()
    again = StageManifest.from_json(json.loads(json.dumps(m.to_json())))
    assert again == m
    assert again.blocks[0].offset == (2, 0) and again.blocks[0].global_shape == (4, 3)
    assert again.blocks[1].offset is None and again.blocks[1].array_shape == (5, 2)
    assert again.data_bytes == 88
    assert again.blocks[0].described == {"dims": ["x", "y"], "attrs": {"units": "g/cm^3"}}


def test_the_json_keeps_the_layout_of_the_untyped_manifests_of_earlier_releases():
    text = _manifest(redundancy=None).to_json()
    assert "redundancy" not in text  # a plain staged checkpoint's manifest never had the key
    assert text["format"] == "ckptio-stage" and text["version"] == 1
    array, segment = text["blocks"]
    assert array == {"name": "dens", "dtype": "<f8", "kind": "array", "global_shape": [4, 3], "offset": [2, 0],
                     "shape": [2, 3], "dims": ["x", "y"], "attrs": {"units": "g/cm^3"},
                     "checksum": "0123456789abcdef", "array_shape": [2, 3], "data_offset": 0, "nbytes": 48}
    assert segment["length"] == 5 and segment["trailing"] == [2] and "offset" not in segment


def test_a_manifest_written_before_the_drain_recorded_backend_and_series_still_reads():
    old = _manifest().to_json()
    for key in ("backend", "series", "attrs", "host", "redundancy"):
        old.pop(key)
    m = StageManifest.from_json(old)
    assert (m.backend, m.series, dict(m.attrs), m.host, m.redundancy) == ("mpiio", None, {}, "", None)


@pytest.mark.parametrize(("change", "says"), [
    (lambda j: j.update(format="something-else"), "not a ckptio stage manifest"),
    (lambda j: j.update(version=2), "version 2"),
    (lambda j: j.pop("final"), "final is NoneType"),
    (lambda j: j.update(rank=4), "rank 4 of 4"),
    (lambda j: j.update(nprocs=-1), "nprocs is -1"),
    (lambda j: j.update(blocks={}), "blocks is not a list"),
    (lambda j: j["blocks"][0].pop("dtype"), "block of 'dens': dtype is NoneType"),
    (lambda j: j["blocks"][0].update(dtype="not-a-dtype"), "not a numpy dtype"),
    (lambda j: j["blocks"][0].update(kind="chunk"), "kind 'chunk'"),
    (lambda j: j["blocks"][0].update(nbytes=47), "47 bytes for a <f8 block of shape [2, 3]"),
    (lambda j: j["blocks"][0].update(checksum="xyz"), "not 16 hex digits"),
    (lambda j: j["blocks"][0].update(offset=[2]), "differ in length"),
    (lambda j: j["blocks"][0].update(array_shape=[2, "3"]), "not a list of integers"),
    (lambda j: j["blocks"][1].update(array_shape=[]), "a segment block needs at least one axis"),
    (lambda j: j["blocks"][0].update(dims="xy"), "not a list of names"),
    (lambda j: j["blocks"][0].update(data_offset=True), "data_offset is True"),
])
def test_a_damaged_manifest_is_a_value_error_naming_the_field(change, says):
    text = _manifest().to_json()
    change(text)
    with pytest.raises(ValueError) as err:
        StageManifest.from_json(text)
    assert says in str(err.value)
