"""The benchmark figures read at a glance: labelled axes, a legend for every colour, no legend over the bars,
linear axes where the values differ little, "modelled" on the model's figure, identical curves said to be
identical; and they redraw from the recorded run (benchmarks/figures/recorded_2026-11-23.json) without running
any benchmark. Pure plotting, one process, no MPI."""

from __future__ import annotations

import json

import matplotlib
import numpy as np
import pytest
from matplotlib.figure import Figure
from mpi_helpers import REPO

matplotlib.use("Agg")
RECORDED = REPO / "benchmarks" / "figures" / "recorded_2026-11-23.json"


@pytest.fixture
def figures(monkeypatch) -> dict[str, Figure]:
    """Every figure saved meanwhile, by file name (saved for real too)."""
    seen: dict[str, Figure] = {}
    save = Figure.savefig

    def spy(self, path, *args, **kwargs):
        seen[str(path).rsplit("/", 1)[-1]] = self
        return save(self, path, *args, **kwargs)

    monkeypatch.setattr(Figure, "savefig", spy)
    return seen


def _labelled(fig: Figure) -> None:
    for ax in fig.axes:
        assert ax.get_xlabel() or not ax.get_xticklabels()[0].get_visible(), ax.get_title()
    assert any(ax.get_ylabel() for ax in fig.axes)


def test_the_model_figure_says_modelled_uses_linear_axes_for_small_differences_and_names_identical_lines(
        figures, tmp_path):
    from ckptio.tools.simulate import plot_ost_load

    n = 8
    result = {"scenario": {"ranks": 100, "nbytes": 2**30, "stripe_count": n}, "write": {}, "restart": {}}
    same = np.array([2463, 2464] * (n // 2))
    result["write"] = {"naive": {"requests_per_ost": same, "clients_per_ost": np.full(n, 100)},
                       "ckptio": {"requests_per_ost": same.copy(), "clients_per_ost": np.full(n, 4)}}
    result["restart"] = {"naive": {"requests_per_ost": np.full(n, 6800), "clients_per_ost": np.full(n, 90)},
                         "ckptio": {"requests_per_ost": np.full(n, 2465), "clients_per_ost": np.full(n, 4)}}
    plot_ost_load(result, str(tmp_path / "plan.png"))
    fig = figures["plan.png"]
    assert "MODELLED" in fig._suptitle.get_text() and "not measured" in fig._suptitle.get_text()
    write_requests, restart_requests, write_clients, restart_clients = fig.axes
    assert write_requests.get_yscale() == "linear" and write_requests.get_ylim()[0] == 0  # 2463 vs 2464: flat
    assert [t.get_text() for t in write_requests.get_legend().get_texts()] == ["naive = ckptio (identical)"]
    assert len(write_requests.get_lines()) == 1
    assert restart_requests.get_yscale() == "linear"  # 2.8x apart: still linear
    assert write_clients.get_yscale() == "log" and "log scale" in write_clients.get_ylabel()  # 25x apart
    assert restart_clients.get_yscale() == "log"
    for ax in fig.axes:
        assert ax.get_ylabel().endswith(("per OST", "(log scale)")) and ax.get_legend() is not None
    assert write_clients.get_xlabel() == "OST index"


def test_the_measured_figures_redraw_from_the_recorded_run_with_legends_clear_of_the_bars(figures, tmp_path):
    from benchmarks.report import replot

    written = replot(str(RECORDED), str(tmp_path))
    assert sorted(p.rsplit("/", 1)[-1] for p in written) == ["bandwidth.png", "blocked_time.png"]
    assert all((tmp_path / name).read_bytes()[:4] == b"\x89PNG" for name in ("bandwidth.png", "blocked_time.png"))

    bandwidth = figures["bandwidth.png"]
    _labelled(bandwidth)
    (legend,) = bandwidth.legends  # one figure legend for the colours, below the panels
    texts = [t.get_text() for t in legend.get_texts()]
    assert texts[:3] == ["raw storage (1 process: the disk's speed)", "other libraries, called directly", "ckptio"]
    assert all(ax.get_xscale() == "linear" and ax.get_xlim()[0] == 0 for ax in bandwidth.axes)
    doc = json.loads(RECORDED.read_text())
    bars = [p.get_width() for p in bandwidth.axes[0].patches]
    assert bars == [e["write"]["median"] for e in doc["bandwidth"].values()]  # the recorded medians, in order

    blocked = figures["blocked_time.png"]
    (ax,) = blocked.axes
    assert ax.get_xlabel().startswith("seconds") and ax.get_ylabel() == "case" and "measured" in ax.get_title()
    anchor = ax.get_legend().get_bbox_to_anchor().transformed(ax.transAxes.inverted())
    assert anchor.x0 >= 1.0  # the legend sits right of the axes, never over a bar
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert "whole (not broken down)" in labels and "background" in labels and "other" not in labels
