#!/usr/bin/env python3
"""Print deb-src entries (deb822 format) mirroring the machine's own ``deb`` entries, for ci/build_pnetcdf.sh.

The source packages must come from where this machine's binary packages come from (a site's internal mirror, a
snapshot, a proxy), never from a hard-coded archive address. Read: ``ETC/sources.list`` and
``ETC/sources.list.d/*.list`` (one-line format: ``deb [options] URI SUITE [COMPONENT...]``) and
``ETC/sources.list.d/*.sources`` (deb822 stanzas: ``Types``, ``URIs``, ``Suites``, ``Components``, options such
as ``Signed-By``; ``Enabled: no`` is skipped). Every enabled ``deb`` entry becomes a ``deb-src`` stanza with the
same URIs, suites, components and options (``signed-by``, ``arch``, ... of the one-line format become their
deb822 fields). Exit 1 with a message when there is no ``deb`` entry at all.

Usage: ``python3 ci/apt_deb_src.py [ETC]`` (ETC defaults to /etc/apt). Standard library only.
"""

from __future__ import annotations

import sys
from pathlib import Path

# one-line options -> deb822 field names (apt's sources.list(5))
OPTION_FIELDS = {"arch": "Architectures", "lang": "Languages", "target": "Targets", "pdiffs": "PDiffs",
                 "by-hash": "By-Hash", "allow-insecure": "Allow-Insecure", "allow-weak": "Allow-Weak",
                 "allow-downgrade-to-insecure": "Allow-Downgrade-To-Insecure", "trusted": "Trusted",
                 "signed-by": "Signed-By", "check-valid-until": "Check-Valid-Until",
                 "valid-until-min": "Valid-Until-Min", "valid-until-max": "Valid-Until-Max",
                 "check-date": "Check-Date", "date-max-future": "Date-Max-Future", "inrelease-path": "InRelease-Path"}

Stanza = dict[str, str]


def parse_one_line(text: str) -> list[Stanza]:
    """The ``deb`` lines of a one-line-format file, as deb822 stanzas."""
    out = []
    for raw in text.splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        kind, _, rest = line.partition(" ")
        if kind != "deb":
            continue
        fields: Stanza = {}
        rest = rest.strip()
        if rest.startswith("["):
            options, _, rest = rest[1:].partition("]")
            for option in options.split():
                key, _, value = option.partition("=")
                name = OPTION_FIELDS.get(key.rstrip("+-").lower())
                if name:
                    fields[name] = value.replace(",", " ")
        words = rest.split()
        if len(words) < 2:
            continue
        out.append({"URIs": words[0], "Suites": words[1], "Components": " ".join(words[2:]), **fields})
    return out


def parse_deb822(text: str) -> list[Stanza]:
    """The enabled stanzas of a deb822 ``.sources`` file whose Types include ``deb``, without their Types."""
    out = []
    for block in text.split("\n\n"):
        stanza: Stanza = {}
        key = None
        for raw in block.splitlines():
            if raw.startswith("#") or not raw.strip():
                continue
            if raw[0] in " \t" and key is not None:  # a continuation line (e.g. an inline Signed-By key)
                stanza[key] += "\n" + raw
                continue
            key, _, value = raw.partition(":")
            key = key.strip()
            stanza[key] = value.strip()
        if "deb" not in stanza.get("Types", "").split() or stanza.get("Enabled", "yes").lower() == "no":
            continue
        stanza.pop("Types")
        stanza.pop("Enabled", None)
        out.append(stanza)
    return out


def deb_entries(etc: Path) -> list[Stanza]:
    entries = []
    main = etc / "sources.list"
    if main.is_file():
        entries += parse_one_line(main.read_text())
    parts = etc / "sources.list.d"
    if parts.is_dir():
        for path in sorted(parts.iterdir()):
            if path.suffix == ".list":
                entries += parse_one_line(path.read_text())
            elif path.suffix == ".sources":
                entries += parse_deb822(path.read_text())
    return entries


def render(entries: list[Stanza]) -> str:
    blocks = []
    for e in entries:
        lines = ["Types: deb-src"] + [f"{k}: {v}" for k, v in e.items() if v != ""]
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks) + "\n"


def main(argv: list[str]) -> int:
    etc = Path(argv[0]) if argv else Path("/etc/apt")
    entries = deb_entries(etc)
    if not entries:
        print(f"apt_deb_src: no enabled 'deb' entry in {etc}/sources.list or {etc}/sources.list.d/: add the "
              "deb-src entry of your mirror by hand", file=sys.stderr)
        return 1
    sys.stdout.write(render(entries))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
