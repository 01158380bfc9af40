"""Hint policy: the FLASH stripe rule, user and environment overrides (no MPI)."""

import pytest

from ckptio.coord.hints import ROMIO_DEFAULTS, aggregator_override, parse_hint_string, resolve_hints
from ckptio.errors import DeclarationError


@pytest.mark.parametrize("nprocs, factor", [(1, 1), (4, 4), (80, 80), (7620, 80)])
def test_striping_factor_is_min_nprocs_80(nprocs, factor):
    h = resolve_hints(nprocs, environ={})
    assert h["striping_factor"] == str(factor)
    assert h["cb_nodes"] == str(factor)
    assert h["striping_unit"] == str(1 << 20)
    assert h["romio_cb_write"] == h["romio_cb_read"] == "enable"


def test_precedence_defaults_then_user_then_environment():
    h = resolve_hints(100, {"striping_unit": 4 << 20, "cb_buffer_size": 1 << 20},
                      environ={"CKPTIO_HINTS": "striping_unit=2097152; striping_factor=16"})
    assert h["striping_unit"] == "2097152"
    assert h["cb_buffer_size"] == str(1 << 20)
    assert h["striping_factor"] == "16"
    assert h["cb_nodes"] == "16"  # follows the striping factor unless set explicitly


def test_parse_errors_are_clear():
    assert parse_hint_string("a=1;\n b = 2 ;#c=3") == {"a": "1", "b": "2"}
    with pytest.raises(DeclarationError, match="key=value"):
        parse_hint_string("novalue")
    with pytest.raises(DeclarationError, match="positive integer"):
        resolve_hints(4, {"striping_factor": "many"}, environ={})


def test_aggregator_override_sources():
    assert aggregator_override(None, environ={}) is None
    assert aggregator_override(None, environ={"CKPTIO_AGGREGATORS": "3"}) == 3
    assert aggregator_override(None, environ={"CKPTIO_HINTS": "cb_nodes=5"}) == 5
    assert aggregator_override({"cb_nodes": 2}, environ={}) == 2


def test_romio_gets_one_aggregator_per_node_unless_overridden():
    """cb_config_list="*:1" where ROMIO is the MPI-IO layer (MPICH family, Open MPI with romio321), not for OMPIO;
    the user and the environment still win."""
    assert ROMIO_DEFAULTS == {"cb_config_list": "*:1"}
    assert resolve_hints(8, environ={}, romio=True)["cb_config_list"] == "*:1"
    assert "cb_config_list" not in resolve_hints(8, environ={}, romio=False)
    assert resolve_hints(8, {"cb_config_list": "*:2"}, environ={}, romio=True)["cb_config_list"] == "*:2"
    assert resolve_hints(8, environ={"CKPTIO_HINTS": "cb_config_list=node1:1"}, romio=True)["cb_config_list"] == \
        "node1:1"


@pytest.mark.parametrize("key,value,expected", [("nc_in_place_swap", "Disable", "disable"),
                                                ("romio_cb_write", " ENABLE ", "enable"),
                                                ("romio_ds_read", "automatic", "automatic"),
                                                ("romio_no_indep_rw", "True", "true")])
def test_switch_hints_are_taken_in_the_libraries_spelling(key, value, expected):
    """ROMIO reads its switches in lower case only (a capitalised value was ignored); PnetCDF in any case."""
    assert resolve_hints(4, {key: value}, environ={})[key] == expected


@pytest.mark.parametrize("key,value", [("nc_in_place_swap", "false"), ("nc_in_place_swap", "0"),
                                       ("romio_cb_write", "yes"), ("romio_no_indep_rw", "1")])
def test_switch_hints_with_a_value_the_library_would_ignore_are_refused(key, value):
    """PnetCDF took nc_in_place_swap="false" as "auto" (and swapped the caller's arrays in place); ROMIO ignores
    a romio_cb_write it does not know: the user's intent would be lost without a word."""
    with pytest.raises(DeclarationError, match=f"hint {key}={value!r}: expected one of"):
        resolve_hints(4, {key: value}, environ={})
    with pytest.raises(DeclarationError, match="expected one of"):
        resolve_hints(4, None, environ={"CKPTIO_HINTS": f"{key}={value}"})
