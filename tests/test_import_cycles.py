"""ckptio's modules import each other without circles (issue 24), function-level imports counted.

The last circle (the staging tier and the Writer: a staged close drains through a Writer, catalog.latest recovered
stages) is gone: the tiers never import the facades; a facade hands the staging tier the writer it drains with
(ckptio.writer.restaging_writer, passed by ckptio.latest and Series.latest). Any circle fails this test."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "ci"))

import import_graph

KNOWN: list[list[str]] = []


def test_no_import_cycle():
    assert import_graph.cycles(import_graph.graph()) == KNOWN


def test_the_cycle_finder_sees_function_level_imports_and_skips_type_checking_ones():
    edges = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": {"e"}}
    assert import_graph.cycles(edges) == [["a", "b", "c"]]
    graph = import_graph.graph()
    assert "ckptio.tiers.staging" in graph["ckptio.writer"]        # writer imports staging (its staged close)
    assert "ckptio.writer" not in graph["ckptio.tiers.staging"]    # never the other way round
    assert "ckptio.backends" not in graph["ckptio.verify"]    # only under TYPE_CHECKING there
