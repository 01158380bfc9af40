"""Issue 29's goals, as ratios from this one run: each goal, the measured ratio, pass or miss, and where a goal is
missed, the phase that limits it when ckptio's own statistics give it (Writer.stats / Reader.stats seconds).

Every ratio is of mean times over the rounds (an erratic slow round counts, as in IOR's ``Mean(s)``), written
as "x the reference" (> 1: ckptio faster), or for sizes that differ (IOR's pattern rounds the data down to what
every rank count splits evenly) of bandwidths at the mean time. The storage reference is IOR's MPIIO
independent run when IOR was given, else the built-in MPI-IO reference of the same pattern (benchmarks/ior.py).
"""

from __future__ import annotations

from typing import Any

REF_KEYS = ("ior-independent", "mpiio-ref-independent")
PEER_KEYS = ("h5py", "pnetcdf", "numpy", "adios2", "flash-io")


def _row(goal: str, case: str, ratio: float | None, threshold: float, detail: str = "", limit: str = "",
         le: bool = False) -> dict[str, Any]:
    met = None if ratio is None else (ratio <= threshold if le else ratio >= threshold)
    return {"goal": goal, "case": case, "measured": ratio, "threshold": f"{'<=' if le else '>='} {threshold:.3g}",
            "met": met, "detail": detail, "limit": "" if met is not False else limit}


def _bw(entry: dict[str, Any] | None, what: str) -> float | None:
    if not entry or entry.get("status") != "ok":
        return None
    return (entry.get(f"{what}_time") or {}).get("gib_s_at_mean")


def _mean_s(entry: dict[str, Any] | None, what: str) -> float | None:
    if not entry or entry.get("status") != "ok":
        return None
    return (entry.get(f"{what}_time") or {}).get("mean_s")


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a and b else None


def write_limit(entry: dict[str, Any]) -> str:
    """The largest write phase of a ckptio case (Writer.stats seconds, max over ranks, mean over rounds)."""
    phases = dict(entry.get("write_phases_mean") or {})
    if not phases:
        return ""
    if "declare" in phases and "prepare" in phases:  # declare includes prepare (benchmarks/report.py)
        phases["declare"] = max(0.0, phases["declare"] - phases["prepare"])
    total = phases.pop("total", None)
    own = {k: v for k, v in phases.items() if not k.startswith("cpu")}
    if not own:
        return ""
    top = max(own, key=own.get)
    shown = ", ".join(f"{k} {v:.2f}" for k, v in sorted(own.items(), key=lambda kv: -kv[1]))
    return f"phase {top} ({shown} s" + (f" of {total:.2f} s in close()" if total else "") + ")"


def read_limit(phases: dict[str, float] | None) -> str:
    """The largest restart phase (Reader.stats: io, verify, exchange, plan; wall and CPU seconds, max over ranks,
    mean over rounds)."""
    if not phases:
        return ""
    wall = {k: phases[k] for k in ("plan", "io", "verify", "exchange") if k in phases}
    if not wall:
        return ""
    top = max(wall, key=wall.get)
    cpu = ", ".join(f"{k[4:]} {phases[k]:.2f}" for k in ("cpu_plan", "cpu_io", "cpu_verify", "cpu_exchange")
                    if k in phases)
    return (f"phase {top} ({', '.join(f'{k} {v:.2f}' for k, v in wall.items())} s wall; CPU {cpu} s; "
            f"data {phases.get('data', 0.0):.2f} s)")


def _write_goals(rows: list, where: str, cases: dict[str, dict[str, Any]]) -> None:
    native = cases.get("ckptio-mpiio")
    ref_key = next((k for k in REF_KEYS if cases.get(k, {}).get("status") == "ok"), None)
    mine = _bw(native, "write")
    limit = write_limit(native or {})
    if ref_key:
        ref = _bw(cases[ref_key], "write")
        rows.append(_row("native write >= 0.9x IOR MPI-IO independent", where, _ratio(mine, ref), 0.9,
                         f"{mine or 0:.3f} vs {ref or 0:.3f} GiB/s ({cases[ref_key]['label']})", limit))
    peers = {k: _bw(cases.get(k), "write") for k in PEER_KEYS}
    peers = {k: v for k, v in peers.items() if v}
    if mine and peers:
        best = max(peers, key=peers.get)
        rows.append(_row("native write >= every peer", where, mine / peers[best], 1.0,
                         f"best peer {cases[best]['label']} {peers[best]:.3f} GiB/s", limit))
    for backend, direct in (("hdf5", "h5py"), ("pnetcdf", "pnetcdf")):
        mine_t, direct_t = _mean_s(cases.get(f"ckptio-{backend}"), "write"), _mean_s(cases.get(direct), "write")
        if mine_t and direct_t:
            rows.append(_row(f"ckptio {backend} write no slower than direct {direct}", where, direct_t / mine_t, 1.0,
                             f"mean {mine_t:.2f} s vs {direct_t:.2f} s", write_limit(cases[f"ckptio-{backend}"])))


def goals(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """Every goal row this run's document can give (sections that did not run give none)."""
    rows: list[dict[str, Any]] = []
    cfg = doc.get("config", {})
    for n, section in (doc.get("flash") or {}).get("by_ranks", {}).items():
        _write_goals(rows, f"FLASH-IO shape, {n} ranks ({section['total_bytes'] / 2**20:.0f} MiB)", section["cases"])
    for n, section in (doc.get("writes") or {}).items():
        _write_goals(rows, f"{section['total_bytes'] / 2**30:.2f} GiB, {n} ranks", section["cases"])
    bw = doc.get("bandwidth") or {}
    if bw:
        where = f"{cfg.get('total_bytes', 0) / 2**30:.2f} GiB, {cfg.get('nprocs')} ranks"
        _write_goals(rows, where, bw)
        for backend, direct in (("hdf5", "h5py"), ("pnetcdf", "pnetcdf")):
            for what in ("read_cold", "read_hot"):
                mine_t, direct_t = _mean_s(bw.get(f"ckptio-{backend}"), what), _mean_s(bw.get(direct), what)
                if mine_t and direct_t:
                    phases = bw[f"ckptio-{backend}"].get("read_phases_mean" if what == "read_cold"
                                                         else "read_hot_phases_mean")
                    rows.append(_row(f"ckptio {backend} restart no slower than direct {direct} ({what[5:]})",
                                     f"{where} -> {cfg.get('readers')}", direct_t / mine_t, 1.0,
                                     f"mean {mine_t:.2f} s vs {direct_t:.2f} s", read_limit(phases)))
    _restart_goals(rows, doc)
    _verify_goals(rows, doc.get("verify") or {})
    _metadata_goals(rows, doc.get("small_variables") or {})
    return rows


def _restart_goals(rows: list, doc: dict[str, Any]) -> None:
    nprocs = doc.get("config", {}).get("nprocs")
    for r, readers in (doc.get("restart") or {}).get("readers", {}).items():
        alloc, out, h5, ref = (readers.get(k) for k in ("ckptio-alloc", "ckptio-out", "h5py", "reference"))
        for temp in ("cold", "hot"):
            what, where = f"read_{temp}", f"restart {nprocs} -> {r}, {temp}"
            limit = read_limit((alloc or {}).get(f"{temp}_phases_mean"))
            a_t = _mean_s(alloc, what)
            o_t, h_t = _mean_s(out, what), _mean_s(h5, what)
            if a_t and o_t:
                rows.append(_row("allocating restart >= 0.9x the out= restart", where, o_t / a_t, 0.9,
                                 f"mean {a_t:.2f} s vs {o_t:.2f} s", limit))
            if a_t and h_t:
                rows.append(_row("allocating restart >= h5py's allocating collective read", where, h_t / a_t, 1.0,
                                 f"mean {a_t:.2f} s vs {h_t:.2f} s", limit))
            a_cv = ((alloc or {}).get(f"{what}_time") or {}).get("cv")
            r_cv = ((ref or {}).get(f"{what}_time") or {}).get("cv")
            rounds = ((alloc or {}).get(f"{what}_time") or {}).get("n", 0)
            if a_t and r_cv is not None and a_cv is not None and (ref or {}).get("status") == "ok":
                name = "allocating restart's spread no wider than the raw read's (CV of the time)"
                if rounds < 2:
                    rows.append({"goal": name, "case": where, "measured": None, "threshold": "<= raw's", "met": None,
                                 "detail": "one round: no spread (--repeats >= 2)", "limit": ""})
                else:
                    rows.append(_row(name, where, a_cv, r_cv, f"CV {a_cv:.3f} vs {r_cv:.3f} ({ref['label']})",
                                     limit, le=True))
            if temp == "cold":
                ref_bw = _bw(ref, what)
                for key, name in (("ckptio-alloc", "allocating"), ("ckptio-out", "into out=")):
                    mine = _bw(readers.get(key), what)
                    if mine and ref_bw:
                        rows.append(_row(f"cold restart ({name}) >= 0.9x IOR independent read of the same bytes",
                                         where, mine / ref_bw, 0.9, f"{mine:.3f} vs {ref_bw:.3f} GiB/s "
                                         f"({ref['label']})",
                                         read_limit((readers.get(key) or {}).get("cold_phases_mean"))))


def _verify_goals(rows: list, v: dict[str, Any]) -> None:
    if v.get("status") != "ok":
        return
    seq, ver = (v.get("sequential_read_time") or {}).get("mean_s"), (v.get("inspect_verify_time") or {}).get("mean_s")
    where = f"{v['file_bytes'] / 2**30:.2f} GiB, cold"
    if seq and ver:
        rows.append(_row("inspect --verify >= 0.9x a cold sequential read in one process", where, seq / ver, 0.9,
                         f"mean {ver:.2f} s vs {seq:.2f} s"))
    par = v.get("parallel", {})
    if par.get("status") == "ok" and par.get("time"):
        times = {int(n): t["mean_s"] for n, t in par["time"].items()}
        most = max(times)
        if most > 1:
            rows.append(_row("verify faster with more ranks under mpirun", f"{where}, 1 -> {most} ranks",
                             times[1] / times[most], 1.0, f"mean {times[1]:.2f} s on 1, {times[most]:.2f} s on {most}"))
    else:
        rows.append({"goal": "verify faster with more ranks under mpirun", "case": where, "measured": None,
                     "threshold": "> 1", "met": None, "detail": par.get("reason", "not measured"), "limit": ""})


def _metadata_goals(rows: list, sv: dict[str, Any]) -> None:
    libs = sv.get("libraries", {})

    def mean_us(label: str, what: str) -> float | None:
        lib = libs.get(label) or {}
        values = lib.get(f"{what}_us_per_var") or []
        return sum(values) / len(values) if lib.get("status") == "ok" and values else None

    where = f"{sv.get('nvars', '?')} x {sv.get('bytes_per_var', '?')} B"
    for what in ("write", "read"):
        us = mean_us("ckptio mpiio", what)
        if us is not None:
            rows.append(_row(f"metadata per variable, mpiio {what} (us)", where, us, 50.0, f"{us:.1f} us/variable",
                             le=True))
        mine, direct = mean_us("ckptio hdf5", what), mean_us("h5py", what)
        if mine and direct:
            rows.append(_row(f"metadata per variable, hdf5 {what} vs direct h5py (x time)", where, mine / direct, 2.0,
                             f"{mine:.1f} vs {direct:.1f} us/variable", le=True))


def markdown(rows: list[dict[str, Any]], reference: str) -> list[str]:
    """The goal table."""
    lines = ["## Issue 29 goals (this run)", "", f"Storage reference: {reference}. Ratios of mean times over the "
             "rounds (> 1: ckptio faster), of bandwidths at the mean time where the sizes differ; 'limit' names the "
             "largest phase of ckptio's own statistics (max over ranks, mean over rounds) where a goal is missed.",
             "", "| goal | case | measured | goal | met | detail | limit |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        met = {True: "pass", False: "**miss**", None: "n/a"}[r["met"]]
        value = "n/a" if r["measured"] is None else f"{r['measured']:.3f}"
        lines.append(f"| {r['goal']} | {r['case']} | {value} | {r['threshold']} | {met} | {r['detail']} | "
                     f"{r['limit']} |")
    return [*lines, ""]


def console(rows: list[dict[str, Any]]) -> str:
    """The goal table as plain text for the end of the run."""
    out = ["issue 29 goals (ratio of mean times; > 1 = ckptio faster):"]
    for r in rows:
        met = {True: "pass", False: "MISS", None: "n/a "}[r["met"]]
        value = "  n/a" if r["measured"] is None else f"{r['measured']:6.3f}"
        out.append(f"  {met} {value} ({r['threshold']})  {r['goal']} [{r['case']}]" +
                   (f"  -- {r['limit']}" if r["limit"] else ""))
    return "\n".join(out)
