"""ckptio.settings: the collective CKPTIO_* settings are compared between ranks by value, not by spelling (found
by an outside trial: CKPTIO_WRITE_BUFFER_BYTES=64MiB on one rank and 67108864 on another failed the checkpoint as
"differs between ranks", while CKPTIO_WRITE_IO=POSIX on every rank was accepted). Local, no MPI."""

from __future__ import annotations

import pytest

from ckptio import DeclarationError, settings


def test_one_value_spelt_two_ways_is_the_same_setting():
    a = settings.collective_snapshot({"CKPTIO_WRITE_BUFFER_BYTES": "64MiB", "CKPTIO_WRITE_IO": "POSIX"})
    b = settings.collective_snapshot({"CKPTIO_WRITE_BUFFER_BYTES": "67108864", "CKPTIO_WRITE_IO": " posix"})
    settings.check_same([a, b], "test")  # no error


def test_unset_and_the_default_text_are_the_same_setting():
    default = settings.TABLE["CKPTIO_WRITE_IO"].default
    settings.check_same([settings.collective_snapshot({}),
                         settings.collective_snapshot({"CKPTIO_WRITE_IO": default.upper()})], "test")


def test_different_values_still_fail_naming_the_variable_and_the_rank():
    same = settings.collective_snapshot({"CKPTIO_WRITE_IO": "posix"})
    other = settings.collective_snapshot({"CKPTIO_WRITE_IO": "mpiio"})
    with pytest.raises(DeclarationError, match=r"CKPTIO_WRITE_IO differs between ranks \(rank 0: \"posix\", "
                                               r"rank 2: \"mpiio\""):
        settings.check_same([same, same, other], "test")
    unset, set_ = settings.collective_snapshot({}), settings.collective_snapshot({"CKPTIO_WRITE_AGGREGATORS": "2"})
    with pytest.raises(DeclarationError, match=r"CKPTIO_WRITE_AGGREGATORS differs between ranks \(rank 0: null, "
                                               r"rank 1: 2; null: not set\)"):
        settings.check_same([unset, set_], "test")


def test_a_bad_value_is_named_with_its_variable():
    with pytest.raises(DeclarationError, match="CKPTIO_WRITE_IO='bogus'"):
        settings.collective_snapshot({"CKPTIO_WRITE_IO": "bogus"})
