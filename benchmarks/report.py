"""Turn the measurements into the results document: ratios, overhead, targets, Markdown tables and plots."""

from __future__ import annotations

import json
import os
from typing import Any

RAW = "raw"
NATIVE = "ckptio-mpiio"
NATIVE_OUT = "ckptio-mpiio-out"  # the same restart into arrays the readers already have (read_many(out=))
NATIVE_OUT_ALIGNED = "ckptio-mpiio-out-aligned"  # ... page-aligned ones (ckptio.empty)


def _med(entry: dict[str, Any] | None, what: str) -> float | None:
    if not entry or entry.get("status") != "ok" or what not in entry:
        return None
    return entry[what]["median"]


def add_ratios(bw: dict[str, dict[str, Any]]) -> None:
    """``ratio_to_raw`` of every measured case: its median bandwidth over raw's, per operation."""
    raw = bw.get(RAW)
    for entry in bw.values():
        if entry.get("status") != "ok":
            continue
        entry["ratio_to_raw"] = {}
        for what in ("write", "read_cold", "read_hot"):
            mine, base = _med(entry, what), _med(raw, what)
            entry["ratio_to_raw"][what] = mine / base if mine and base else None


def overhead(bw: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """ckptio's hdf5/pnetcdf backends versus the direct library calls on the same data: time ratios (>1 = slower)."""
    out: dict[str, Any] = {"method": "median time of ckptio backend / median time of the direct calls, same data, "
                                     "same run (write includes commit/fsync; read is the 4->3 restart)"}
    for backend, peer in (("hdf5", "h5py"), ("pnetcdf", "pnetcdf")):
        mine, direct = bw.get(f"ckptio-{backend}"), bw.get(peer)
        if not mine or not direct or mine.get("status") != "ok" or direct.get("status") != "ok":
            out[backend] = {"status": "skipped", "reason": "backend or direct library not measured"}
            continue
        row: dict[str, Any] = {"status": "ok", "direct": direct["label"]}
        for what in ("write", "read_cold", "read_hot"):
            row[f"{what}_time_ratio"] = direct[what]["median"] / mine[what]["median"]
        row["write_phases_median"] = mine.get("write_phases_median", {})
        out[backend] = row
    return out


def _target(name: str, measured: float | None, goal: str, met: bool | None, detail: str = "") -> dict[str, Any]:
    return {"target": name, "goal": goal, "measured": measured, "met": met, "detail": detail}


def _phase_detail(phases: dict[str, float]) -> str:
    """A restart's phases for the targets table: wall seconds, CPU seconds (``cpu_*``: thread CPU time of the
    reading thread's io/verify and the calling thread's exchange; ``cpu_data``/``cpu_plan``: the process's,
    helper thread included; less sensitive to other load than wall time) and the overlap figure."""
    if not phases:
        return ""
    wall = ", ".join(f"{k} {v:.2f} s" for k, v in phases.items() if not k.startswith("cpu"))
    cpu = ", ".join(f"{k[4:]} {v:.2f} s" for k, v in phases.items() if k.startswith("cpu"))
    detail = f"ckptio read phases, median of max over ranks: {wall}" + (f"; CPU: {cpu}" if cpu else "")
    if phases.get("exchange"):
        detail += (f"; overlap {phases.get('hidden', 0.0) / phases['exchange']:.0%} of the exchange hidden behind "
                   "reading (hidden = io + verify + exchange - data, per rank)")
    return detail


def targets(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """The issue's targets against this run's figures (shown, not asserted)."""
    bw, out = doc["bandwidth"], []
    native = bw.get(NATIVE, {})
    r = (native.get("ratio_to_raw") or {}).get("write")
    out.append(_target("native MPI-IO write vs raw write", r, ">= 0.9 x raw", None if r is None else r >= 0.9))
    peers = {k: _med(e, "write") for k, e in bw.items() if e.get("group") == "peer" and _med(e, "write")}
    mine = _med(native, "write")
    if mine and peers:
        best = max(peers, key=peers.get)
        out.append(_target("native MPI-IO write vs every peer", mine / peers[best], ">= 1.0 x best peer",
                           mine >= peers[best], f"best peer: {best} {peers[best]:.3f} GiB/s"))
    where = f"({doc['config']['nprocs']} -> {doc['config']['readers']} ranks)"
    for key, how in ((NATIVE, ""), (NATIVE_OUT, ", into out= arrays"),
                     (NATIVE_OUT_ALIGNED, ", into page-aligned out= arrays")):
        entry = bw.get(key, {})
        for what, goal in (("read_cold", 0.8), ("read_hot", 0.5)):
            r = (entry.get("ratio_to_raw") or {}).get(what)
            if r is None and key != NATIVE:
                continue
            out.append(_target(f"restart read {where}{how} vs raw aligned read ({what[5:]})", r, f">= {goal} x raw",
                               None if r is None else r >= goal,
                               _phase_detail(entry.get("read_phases_median" if what == "read_cold"
                                                       else "read_hot_phases_median") or {})))
    for backend, row in doc["overhead"].items():
        if not isinstance(row, dict) or row.get("status") != "ok":
            continue
        for what in ("write", "read_cold"):
            ratio = row[f"{what}_time_ratio"]
            out.append(_target(f"ckptio {backend} {what.replace('_', ' ')} time vs direct {row['direct']}", ratio,
                               "<= 1.10 x direct", ratio <= 1.10))
    for label, lib in doc.get("small_variables", {}).get("libraries", {}).items():
        if label.startswith("ckptio") and lib.get("status") == "ok":
            for what in ("write", "read"):
                us = lib[what]["median"]
                out.append(_target(f"{label} metadata per variable ({what})", us, "<= 50 us/variable", us <= 50))
    for regime, row in doc.get("compression", {}).get("regimes", {}).items():
        faster = row["measured_speedup"] > 1.0
        out.append(_target(f"compression break-even rule predicts the {regime} outcome", row["measured_speedup"],
                           "rule's pays/does-not-pay = measured faster/slower", row["pays_by_rule"] == faster,
                           f"r = {row['ratio']:.2f}, break-even r* = {_fmt(row['breakeven_ratio'], '.2f')}; "
                           f"measured {row['compressed_gib_s']:.3f} vs {row['uncompressed_gib_s']:.3f} GiB/s "
                           "uncompressed (measured = compressed/uncompressed write speed)"))
    ck = doc.get("checksum", {})
    wsec = native.get("write_seconds")
    if ck and wsec:
        from statistics import median

        frac = ck["seconds_all_ranks"]["median"] / median(wsec)
        ck["fraction_of_native_write"] = frac
        out.append(_target("checksum (xxh3) time vs native write time", frac, "< 0.05", frac < 0.05))
    return out


# --------------------------------------------------------------------------------------------- markdown
def _fmt(x: float | None, spec: str = ".3f") -> str:
    return "n/a" if x is None else format(x, spec)


def _bw_cell(entry: dict[str, Any], what: str) -> str:
    s = entry.get(what)
    if not s:
        return "n/a"
    ratio = (entry.get("ratio_to_raw") or {}).get(what)
    return f"{s['median']:.3f} [{s['min']:.3f}-{s['max']:.3f}] ({_fmt(ratio, '.2f')}x)"


def bandwidth_table(bw: dict[str, dict[str, Any]]) -> list[str]:
    lines = ["| case | write GiB/s median [min-max] (x raw) | restart read, cold | restart read, hot | notes |",
             "|---|---|---|---|---|"]
    for entry in bw.values():
        if entry["status"] != "ok":
            lines.append(f"| {entry['label']} | {entry['status']} | | | {entry.get('reason', '')} |")
            continue
        note = ""
        if entry.get("compression") and entry.get("compression_ratio"):
            note = f"stored {entry['stored_bytes'] / 2**20:.0f} MiB, ratio {entry['compression_ratio']:.2f}"
        if entry.get("mode", "sync") != "sync" and entry.get("blocked_seconds"):
            from statistics import median

            note = (f"close() blocked {median(entry['blocked_seconds']):.2f} s of "
                    f"{median(entry['write_seconds']):.2f} s until committed")
        lines.append(f"| {entry['label']} | {_bw_cell(entry, 'write')} | {_bw_cell(entry, 'read_cold')} | "
                     f"{_bw_cell(entry, 'read_hot')} | {note} |")
    return lines


def blocked_seconds(entry: dict[str, Any]) -> list[float]:
    """Seconds the application is blocked per checkpoint: close() for async/staged, the whole write otherwise."""
    if entry.get("mode", "sync") != "sync" and entry.get("blocked_seconds"):
        return entry["blocked_seconds"]
    return entry["write_seconds"]


def blocked_table(bw: dict[str, dict[str, Any]]) -> list[str]:
    """The time the simulation is blocked by one checkpoint, per ckptio case and mode."""
    lines = ["## Time blocked per checkpoint, by mode", "",
             "| case | mode | blocked s median [min-max] | until committed s median | blocked / sync mpiio |",
             "|---|---|---|---|---|"]
    base = bw.get(NATIVE, {})
    base_med = summary_of(blocked_seconds(base))["median"] if base.get("status") == "ok" else None
    for entry in bw.values():
        if entry.get("group") != "ckptio" or entry["status"] != "ok":
            continue
        b = summary_of(blocked_seconds(entry))
        total = summary_of(entry["write_seconds"])["median"]
        rel = b["median"] / base_med if base_med else None
        lines.append(f"| {entry['label']} | {entry.get('mode', 'sync')} | {b['median']:.2f} [{b['min']:.2f}-"
                     f"{b['max']:.2f}] | {total:.2f} | {_fmt(rel, '.2f')} |")
    lines += ["", "sync: the whole collective write incl. commit and fsync; async: create + write + close() until "
                  "close() returns (blocks copied to the staging buffers); staged: close() writes the checkpoint "
                  "to the fast tier, the drain to the target runs in the background. 'Until committed' adds "
                  "wait() (the benchmark waits at once; a simulation would compute meanwhile).", ""]
    return lines


def summary_of(values: list[float]) -> dict[str, float]:
    from statistics import median

    return {"median": median(values), "min": min(values), "max": max(values)}


def _compression_md(c: dict[str, Any]) -> list[str]:
    if not c:
        return []
    tp = c["throughput"]
    lines = ["## Compression break-even", "",
             f"{tp['codec']} on this data: ratio r = {tp['ratio']:.2f}; compression "
             f"{tp['compress_aggregate_gib_s']:.3f} GiB/s aggregate over {c['ranks']} ranks on {c['cores']} cores "
             f"(B_c; {_fmt(tp['compress_single_process_gib_s'], '.3f')} GiB/s one process alone = B_zstd), "
             f"decompression {tp['decompress_aggregate_gib_s']:.3f} GiB/s aggregate. Rule: {c['rule']}.", "",
             "| regime | B_fs (uncompressed write) GiB/s | per-rank share GiB/s | break-even r* | rule says "
             "| predicted speed-up | measured: compressed GiB/s (speed-up) |", "|---|---|---|---|---|---|---|"]
    for name, row in c.get("regimes", {}).items():
        lines.append(f"| {name} | {row['b_fs_gib_s']:.3f} | {row['per_rank_share_gib_s']:.3f} | "
                     f"{_fmt(row['breakeven_ratio'], '.2f') if row['breakeven_ratio'] else 'never (B_fs >= B_c)'} | "
                     f"{'compress' if row['pays_by_rule'] else 'leave off'} | {row['predicted_speedup']:.2f}x | "
                     f"{row['compressed_gib_s']:.3f} ({row['measured_speedup']:.2f}x) |")
    lines += ["", "disk: the bandwidth table's ckptio mpiio rows; tmpfs: the same two writes into /dev/shm "
                  "(write only), the high per-rank-bandwidth regime.", ""]
    return lines


def _load(avg: Any) -> str:
    return "/".join(f"{x:.2f}" for x in avg) if avg else "?"


def markdown(doc: dict[str, Any]) -> str:
    """The whole results document as Markdown."""
    c, env = doc["config"], doc["environment"]
    lines = [f"# ckptio benchmark results ({doc['started']})", "",
             f"{c['nprocs']} writer ranks, restart on {c['readers']} ranks (shifted decomposition); "
             f"{c['total_bytes'] / 2**30:.2f} GiB ({c['nblocks']} blocks of 16^3 float64 x {c['nvars']} variables); "
             f"{c['repeats']} repeat(s); scratch {c['outdir']} ({c.get('outdir_fs', '?')}); fast tier "
             f"{c.get('fast_dir', '?')} ({c.get('fast_dir_fs', '?')}).", "",
             f"Machine: {env.get('cpu', '?')}, {env['machine']}, {env.get('kernel', '?')}; {env['mpi']}; "
             f"HDF5 {env.get('libraries', {}).get('hdf5', '?')}, PnetCDF {env.get('libraries', {}).get('pnetcdf', '?')}"
             f", netCDF-C {env.get('libraries', {}).get('netcdf-c', '?')}; load average (1/5/15 min) at start "
             f"{_load(env.get('loadavg_start'))}, at end {_load(env.get('loadavg_end'))} (finished "
             f"{env.get('finished', '?')}).", "",
             f"Page cache: {doc['page_cache']['method']} Max resident fraction before a cold read: "
             f"{_fmt(doc['page_cache']['max_resident_before_cold_read'], '.4f')}.", "",
             "## Bandwidth", ""]
    lines += bandwidth_table(doc["bandwidth"])
    lines += ["", f"Async mode: {doc['modes']['async']}; staged mode (stage_dir): {doc['modes']['staged']}.", ""]
    lines += blocked_table(doc["bandwidth"])
    lines += _compression_md(doc.get("compression", {}))
    lines += ["## Targets", "", "| target | goal | measured | met | detail |", "|---|---|---|---|---|"]
    for t in doc["targets"]:
        met = {True: "yes", False: "**no**", None: "n/a"}[t["met"]]
        lines.append(f"| {t['target']} | {t['goal']} | {_fmt(t['measured'])} | {met} | {t['detail']} |")
    lines += _writes_md("The same write on fewer ranks", "", doc.get("writes") or {})
    lines += _flash_md(doc.get("flash") or {})
    lines += _restart_md(doc.get("restart") or {}, c["nprocs"])
    lines += _verify_md(doc.get("verify") or {})
    if doc.get("goals") is not None:
        from .goals import markdown as goals_markdown

        lines += ["", *goals_markdown(doc["goals"], c.get("reference", "?"))]
    lines += _small_vars_md(doc.get("small_variables", {}))
    lines += _overhead_md(doc["overhead"], doc["bandwidth"])
    ck = doc.get("checksum", {})
    if ck:
        lines += ["", "## Checksum cost", "",
                  f"{ck['algorithm']} over all {ck['bytes_total'] / 2**30:.2f} GiB, every rank its own data at once: "
                  f"{ck['seconds_all_ranks']['median']:.3f} s ({ck['aggregate_gib_s']:.2f} GiB/s aggregate, "
                  f"{_fmt(ck['single_process_gib_s'], '.2f')} GiB/s one process alone) = "
                  f"{_fmt(ck.get('fraction_of_native_write'), '.1%')} of the native write time."]
    plan = doc.get("plan")
    if plan:
        lines += ["", "## ckptio plan (per-OST load model)", "", "```", plan["text"], "```"]
    return "\n".join(lines) + "\n"


def _time_cell(t: dict[str, Any] | None) -> str:
    """Mean-time statistics: GiB/s at the mean time, mean s [min-max], coefficient of variation."""
    if not t:
        return "n/a"
    return (f"{t['gib_s_at_mean']:.3f} GiB/s; {t['mean_s']:.2f} s [{t['min_s']:.2f}-{t['max_s']:.2f}], "
            f"CV {t['cv']:.2f}")


def _flash_md(f: dict[str, Any]) -> list[str]:
    if not f:
        return []
    return _writes_md("FLASH-IO's checkpoint shape, written by every library",
                      f"PnetCDF's FLASH-IO benchmark: {f.get('flash_io')}.", f.get("by_ranks", {}))


def _writes_md(title: str, intro: str, by_ranks: dict[str, Any]) -> list[str]:
    if not by_ranks:
        return []
    lines = ["", f"## {title}", "", f"{intro} Mean over the rounds (bandwidth at the mean time, the mean time "
             "[min-max], coefficient of variation); reads only in the first round (verified)."]
    from .goals import REF_KEYS

    for n, section in by_ranks.items():
        cases = section["cases"]
        ref = next((cases[k] for k in REF_KEYS if cases.get(k, {}).get("status") == "ok"), None)
        ref_bw = (ref or {}).get("write_time", {}).get("gib_s_at_mean")
        lines += ["", f"### {n} ranks: {section['shape']}, {section['total_bytes'] / 2**20:.1f} MiB", "",
                  f"| case | write (mean) | x {ref['label'] if ref else 'reference'} | notes |", "|---|---|---|---|"]
        for entry in cases.values():
            if entry["status"] != "ok":
                lines.append(f"| {entry['label']} | {entry['status']} | | {entry.get('reason', '')} |")
                continue
            mine = entry.get("write_time", {}).get("gib_s_at_mean")
            ratio = _fmt(mine / ref_bw if mine and ref_bw else None, ".2f")
            lines.append(f"| {entry['label']} | {_time_cell(entry.get('write_time'))} | {ratio} | {entry['note']} |")
    return lines


def _restart_md(r: dict[str, Any], nprocs: int) -> list[str]:
    if not r:
        return []
    lines = ["", "## Restart on several reader counts (cold and hot)", "",
             "| restart | reader | cold (mean) | hot (mean) | ckptio phases, cold (mean s, max over ranks) |",
             "|---|---|---|---|---|"]
    for count, readers in r.get("readers", {}).items():
        for entry in readers.values():
            if entry.get("status") != "ok":
                lines.append(f"| {nprocs} -> {count} | {entry['label']} | {entry.get('status')} | | "
                             f"{entry.get('reason', '')} |")
                continue
            phases = ", ".join(f"{k} {v:.2f}" for k, v in (entry.get("cold_phases_mean") or {}).items()
                               if not k.startswith("cpu"))
            lines.append(f"| {nprocs} -> {count} | {entry['label']} | {_time_cell(entry.get('read_cold_time'))} | "
                         f"{_time_cell(entry.get('read_hot_time'))} | {phases} |")
    return lines


def _verify_md(v: dict[str, Any]) -> list[str]:
    if not v:
        return []
    lines = ["", "## Verification (`ckptio inspect --verify`) against a cold sequential read", ""]
    if v.get("status") != "ok":
        return [*lines, f"{v.get('status')}: {v.get('reason', '')}"]
    lines += ["| what | mean |", "|---|---|",
              f"| cold sequential read, one process | {_time_cell(v.get('sequential_read_time'))} |",
              f"| `ckptio inspect --verify`, one process | {_time_cell(v.get('inspect_verify_time'))} |"]
    par = v.get("parallel", {})
    if par.get("status") == "ok":
        for n, t in par.get("time", {}).items():
            lines.append(f"| {par['function']} on {n} ranks | {_time_cell(t)} |")
    else:
        lines.append(f"| parallel verification | skipped: {par.get('reason', '')} |")
    return lines


def _small_vars_md(sv: dict[str, Any]) -> list[str]:
    if not sv:
        return []
    lines = ["", f"## Small variables ({sv['nvars']} x {sv['bytes_per_var']} B)", "",
             "| library | write us/variable median [min-max] | read us/variable | notes |", "|---|---|---|---|"]
    for label, lib in sv["libraries"].items():
        if lib.get("status") != "ok":
            lines.append(f"| {label} | {lib.get('status')} | | {lib.get('reason', '')} |")
            continue
        w, r = lib["write"], lib["read"]
        lines.append(f"| {label} | {w['median']:.1f} [{w['min']:.1f}-{w['max']:.1f}] | "
                     f"{r['median']:.1f} [{r['min']:.1f}-{r['max']:.1f}] | {lib['note']} |")
    lines += ["", sv["method"] + "."]
    return lines


def _overhead_md(ov: dict[str, Any], bw: dict[str, dict[str, Any]]) -> list[str]:
    lines = ["", "## Overhead versus direct library calls (time ratio, >1 = ckptio slower)", "",
             "| backend | direct | write | cold read | hot read | ckptio write phases (median s) |",
             "|---|---|---|---|---|---|"]
    for backend, row in ov.items():
        if not isinstance(row, dict):
            continue
        if row.get("status") != "ok":
            lines.append(f"| {backend} | {row.get('reason', '')} | | | | |")
            continue
        phases = ", ".join(f"{k} {v:.2f}" for k, v in row["write_phases_median"].items())
        lines.append(f"| {backend} | {row['direct']} | {row['write_time_ratio']:.2f} | "
                     f"{row['read_cold_time_ratio']:.2f} | {row['read_hot_time_ratio']:.2f} | {phases} |")
    return lines


# ------------------------------------------------------------------------------------------------ plots
def plots(doc: dict[str, Any], directory: str, plan_result: dict[str, Any] | None = None) -> list[str]:
    """PNG files: bandwidth by case, blocked time by mode (ckptio phases), the plan's per-OST load (from
    ``plan_result``, else the doc's plan result when it has one)."""
    import matplotlib

    matplotlib.use("Agg")
    written = [_plot_bandwidth(doc, os.path.join(directory, "bandwidth.png")),
               _plot_blocked(doc, os.path.join(directory, "blocked_time.png"))]
    plan_result = plan_result or doc.get("plan", {}).get("result")
    if plan_result:
        from ckptio.tools.simulate import plot_ost_load

        path = os.path.join(directory, "plan_ost_load.png")
        plot_ost_load(plan_result, path)
        written.append(path)
    return written


GROUP_COLOURS = {"raw": ("tab:gray", "raw storage (1 process: the disk's speed)"),
                 "reference": ("tab:green", "storage reference (IOR, or MPI-IO of IOR's pattern)"),
                 "peer": ("tab:orange", "other libraries, called directly"),
                 "ckptio": ("tab:blue", "ckptio")}


def _plot_bandwidth(doc: dict[str, Any], path: str) -> str:
    import matplotlib.pyplot as plt
    import numpy as np
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    rows = [e for e in doc["bandwidth"].values() if e["status"] == "ok"]
    labels = [key for key, e in doc["bandwidth"].items() if e["status"] == "ok"]
    fig, axes = plt.subplots(1, 3, figsize=(16, 6.2), sharey=True)
    for ax, what, title in zip(axes, ("write", "read_cold", "read_hot"),
                               ("checkpoint write (incl. fsync)", "restart read, cold page cache",
                                "restart read, hot page cache"), strict=True):
        med = np.array([e[what]["median"] for e in rows])
        err = np.array([[e[what]["median"] - e[what]["min"] for e in rows],
                        [e[what]["max"] - e[what]["median"] for e in rows]])
        y = np.arange(len(rows))
        ax.barh(y, med, xerr=err, color=[GROUP_COLOURS[e["group"]][0] for e in rows], capsize=3)
        ax.set_title(title)
        ax.set_xlabel("bandwidth, GiB/s (bar: median; whisker: min-max)")
        ax.set_yticks(y, labels, fontsize=8)
        ax.set_xlim(0, max(float((med + err[1]).max()), 1e-9) * 1.08)  # linear from 0: bars compare by length
        if rows and rows[0]["group"] == "raw":
            ax.axvline(med[0], color="tab:gray", linestyle="--", linewidth=1)
        ax.invert_yaxis()
    axes[0].set_ylabel("case")
    groups = [g for g in GROUP_COLOURS if any(e["group"] == g for e in rows)]
    handles = [Patch(color=GROUP_COLOURS[g][0], label=GROUP_COLOURS[g][1]) for g in groups]
    if rows and rows[0]["group"] == "raw":
        handles.append(Line2D([], [], color="tab:gray", linestyle="--", linewidth=1, label="raw storage's median"))
    fig.legend(handles=handles, loc="lower center", ncol=len(handles), fontsize=9, frameon=False)
    c = doc["config"]
    fig.suptitle(f"ckptio benchmarks (measured): {c['nprocs']} writer ranks, restart on {c['readers']}, "
                 f"{c['total_bytes'] / 2**30:.2f} GiB, {doc['environment']['machine']}")
    fig.tight_layout(rect=(0, 0.06, 1, 1))
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


PHASES = ("prepare", "declare", "open", "write", "commit", "other", "whole (not broken down)", "blocked (close)",
          "background")
PHASE_STYLE = {"prepare": {"color": "tab:blue"}, "declare": {"color": "tab:orange"}, "open": {"color": "tab:green"},
               "write": {"color": "tab:red"}, "commit": {"color": "tab:purple"}, "other": {"color": "tab:brown"},
               "whole (not broken down)": {"color": "tab:olive"}, "blocked (close)": {"color": "tab:pink"},
               "background": {"color": "white", "edgecolor": "tab:gray", "hatch": "//"}}


def _phases(entry: dict[str, Any]) -> dict[str, float]:
    """Median seconds per write phase, disjoint: 'declare' excludes 'prepare', 'other' is the rest of the total.

    Sync ckptio: its phases (Writer.stats); peers (and any case without recorded phases): the whole time, not
    broken down; async/staged: the time close() blocked, then the rest until committed as 'background' (the
    application computes meanwhile)."""
    from statistics import median

    out = dict.fromkeys(PHASES, 0.0)
    total = median(entry["write_seconds"])
    if entry.get("mode", "sync") != "sync":
        out["blocked (close)"] = median(entry.get("blocked_seconds") or [total])
        out["background"] = max(0.0, total - out["blocked (close)"])
        return out
    p = dict(entry.get("write_phases_median", {}))
    if not p:
        out["whole (not broken down)"] = total
        return out
    out.update(prepare=p.get("prepare", 0.0), declare=max(0.0, p.get("declare", 0.0) - p.get("prepare", 0.0)),
               open=p.get("open", 0.0), write=p.get("write", 0.0), commit=p.get("commit", 0.0))
    out["other"] = max(0.0, total - sum(out.values()))
    return out


def _plot_blocked(doc: dict[str, Any], path: str) -> str:
    import matplotlib.pyplot as plt

    rows = [e for e in doc["bandwidth"].values() if e["status"] == "ok" and e["group"] != "raw"]
    names = [key for key, e in doc["bandwidth"].items() if e["status"] == "ok" and e["group"] != "raw"]
    fig, ax = plt.subplots(figsize=(12, 5.2))
    left = [0.0] * len(rows)
    phases = [_phases(e) for e in rows]
    for phase in PHASES:
        widths = [p[phase] for p in phases]
        if not any(widths):
            continue  # a phase no case has: no empty legend entry
        ax.barh(names, widths, left=left, label=phase, **PHASE_STYLE.get(phase, {}))
        left = [a + b for a, b in zip(left, widths, strict=True)]
    ax.invert_yaxis()
    ax.set_xlim(0, max(left, default=1.0) * 1.05)
    ax.set_xlabel("seconds per checkpoint (median over the rounds)")
    ax.set_ylabel("case")
    ax.set_title("measured: time the application is blocked per checkpoint, by case and mode\n"
                 "(sync: the whole write, in ckptio's phases; async/staged: close(), then the background part "
                 "until committed, hatched)", fontsize=10)
    ax.legend(fontsize=8, title="phase", title_fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


def write_results(doc: dict[str, Any], directory: str, plot: bool) -> dict[str, str]:
    """Write results.json and results.md (and PNGs with ``plot``) into ``directory``; returns the paths."""
    os.makedirs(directory, exist_ok=True)
    paths = {"json": os.path.join(directory, "results.json"), "markdown": os.path.join(directory, "results.md")}
    if plot:
        doc["plots"] = plots(doc, directory)
    plan = doc.get("plan", {})
    stored = {**doc, "plan": {k: v for k, v in plan.items() if k != "result"} | (
        {"summary": _plan_summary(plan["result"])} if plan.get("result") else {})}
    with open(paths["json"], "w") as f:
        json.dump(stored, f, indent=1, sort_keys=False, default=str)
    with open(paths["markdown"], "w") as f:
        f.write(markdown(doc))
    return paths


def _plan_summary(result: dict[str, Any]) -> dict[str, Any]:
    """The plan result without the per-OST arrays (those are in the plot)."""
    out: dict[str, Any] = {"scenario": result["scenario"]}
    for phase in ("write", "restart"):
        out[phase] = {p: {k: v for k, v in r.items() if not k.endswith("_per_ost")} for p, r in result[phase].items()}
    return out


def replot(results_json: str, directory: str, plan: bool = False) -> list[str]:
    """Redraw the figures of a recorded run from its ``results.json`` (no benchmark is run). ``results.json``
    keeps only a summary of the plan model; with ``plan`` the model is recomputed for the run's FLASH case (a
    deterministic model, seconds; not a measurement), else plan_ost_load.png is not drawn."""
    with open(results_json) as f:
        doc = json.load(f)
    plan_result = None
    if plan:
        from ckptio.tools.simulate import PlanScenario, parse_size, simulate

        ranks, nbytes = int(doc["plan"]["ranks"]), doc["plan"]["bytes"]
        plan_result = simulate(PlanScenario(ranks=ranks, nbytes=parse_size(nbytes), stripe_count=min(ranks, 80),
                                            stripe_size=1 << 20))
    os.makedirs(directory, exist_ok=True)
    return plots(doc, directory, plan_result)


def main(argv: list[str] | None = None) -> int:
    """``python -m benchmarks.report RESULTS_JSON OUTDIR [--plan]``: the figures of a recorded run."""
    import argparse

    p = argparse.ArgumentParser(prog="python -m benchmarks.report", description=replot.__doc__)
    p.add_argument("results_json")
    p.add_argument("outdir")
    p.add_argument("--plan", action="store_true", help="recompute the plan model and draw plan_ost_load.png")
    args = p.parse_args(argv)
    for path in replot(args.results_json, args.outdir, args.plan):
        print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
