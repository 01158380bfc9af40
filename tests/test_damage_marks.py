"""Marks of damaged checkpoints (ckptio.engine.damage_marks), one process: a mark applies to the very file it was
written for, moves aside with it, goes stale when the file is gone or replaced, and a file that is not one of our
marks is never touched. The MPI behaviour (lookups, retention, a restart job) is in test_retention.py and
test_bindings_parity.py."""

from __future__ import annotations

import json
import os

from ckptio.engine import damage_marks as dm


def _checkpoint(tmp_path, name="chk_000010", data=b"x" * 100):
    path = tmp_path / name
    path.write_bytes(data)
    return str(path)


def test_a_mark_applies_to_its_file_only(tmp_path):
    path = _checkpoint(tmp_path)
    record = dm.mark(path, "checksum mismatch in block 3")
    assert record is not None and record.checkpoint == "chk_000010"
    marker = tmp_path / ".chk_000010.ckptio-damaged"
    raw = json.loads(marker.read_text())
    assert raw["format"] == "ckptio-damage-mark" and raw["version"] == 1 and raw["reason"].startswith("checksum")
    assert dm.find(path, os.stat(path)) == record
    assert dm.find(path, os.stat(path), names={"chk_000010"}) is None        # the listing has no mark: not read
    assert "remove it to have the checkpoint checked again" in record.describe()
    # a new checkpoint renamed onto the name is another file: the mark does not apply to it
    new = _checkpoint(tmp_path, ".tmp", b"y" * 100)
    os.utime(new, ns=(os.stat(path).st_atime_ns, os.stat(path).st_mtime_ns + 1))  # (coarse clocks: one tick)
    os.replace(new, path)
    assert dm.find(path, os.stat(path)) is None
    assert dm.remove_stale(str(tmp_path), os.listdir(tmp_path)) == [str(marker)]
    assert not marker.exists()


def test_move_aside_keeps_every_damaged_file_with_its_mark(tmp_path):
    path = _checkpoint(tmp_path)
    assert dm.move_aside(path) is None                     # not marked: left for the rename to replace
    assert os.path.exists(path)
    dm.mark(path, "lost block")
    assert dm.move_aside(path) == path + ".damaged"
    assert not os.path.exists(path) and not (tmp_path / ".chk_000010.ckptio-damaged").exists()
    moved = dm.find(path + ".damaged", os.stat(path + ".damaged"))   # the mark went with the file
    assert moved is not None and moved.reason == "lost block" and moved.checkpoint == "chk_000010.damaged"
    assert dm.remove_stale(str(tmp_path), os.listdir(tmp_path)) == []
    _checkpoint(tmp_path, data=b"z" * 7)
    dm.mark(path, "lost block again")
    assert dm.move_aside(path) == path + ".damaged.1"      # never over an earlier one
    assert os.path.getsize(path + ".damaged") == 100 and os.path.getsize(path + ".damaged.1") == 7
    assert dm.move_aside(str(tmp_path / "chk_000099")) is None


def test_a_copy_that_keeps_modification_times_keeps_the_marks(tmp_path):
    """cp -a, rsync -a, an archive: other inodes, the same sizes and times (outside trial 15: retention in the
    copy deleted the damaged checkpoint and its mark)."""
    import shutil

    run = tmp_path / "run"
    run.mkdir()
    path = _checkpoint(run)
    dm.mark(path, "checksum mismatch")
    copy = tmp_path / "copy"
    shutil.copytree(run, copy)  # (copy2: contents and times)
    copied = str(copy / "chk_000010")
    assert os.stat(copied).st_ino != os.stat(path).st_ino
    assert dm.find(copied, os.stat(copied)) is not None
    assert dm.remove_stale(str(copy), os.listdir(copy)) == []


def test_files_that_are_not_our_marks_are_never_touched(tmp_path):
    names = {".notes.ckptio-damaged": "my notes", ".chk_000001.ckptio-damaged": json.dumps({"format": "other"}),
             ".chk_000002.ckptio-damaged": json.dumps({"format": "ckptio-damage-mark", "version": 99})}
    for name, text in names.items():
        (tmp_path / name).write_text(text)
    assert dm.remove_stale(str(tmp_path), os.listdir(tmp_path)) == []
    assert sorted(os.listdir(tmp_path)) == sorted(names)
    path = _checkpoint(tmp_path, "chk_000001")
    assert dm.find(path, os.stat(path)) is None            # another format names no damage


def test_a_mark_in_a_read_only_directory_is_best_effort(tmp_path):
    path = _checkpoint(tmp_path)
    os.chmod(tmp_path, 0o555)
    try:
        if os.access(tmp_path, os.W_OK):                   # root ignores the mode: remove the checkpoint instead
            os.chmod(tmp_path, 0o755)
            os.remove(path)
        assert dm.mark(path, "damaged") is None
        assert not [n for n in os.listdir(tmp_path) if "ckptio-damaged" in n]
    finally:
        os.chmod(tmp_path, 0o755)
