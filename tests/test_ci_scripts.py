"""ci/apt_deb_src.py (issue 27, item 12): ci/build_pnetcdf.sh takes its deb-src entries from the machine's own apt
sources, in both formats, and never names an archive address itself."""

from __future__ import annotations

import subprocess
import sys

from mpi_helpers import REPO

SCRIPT = REPO / "ci" / "apt_deb_src.py"


def run(etc) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), str(etc)], capture_output=True, text=True, timeout=60)


def test_one_line_and_deb822_sources_become_deb_src_stanzas(tmp_path):
    (tmp_path / "sources.list.d").mkdir()
    (tmp_path / "sources.list").write_text(
        "# the site's mirror\n"
        "deb [arch=amd64 signed-by=/etc/apt/keyrings/site.gpg] http://mirror.example.org/debian bookworm main contrib\n"
        "deb-src http://mirror.example.org/debian bookworm main\n"
        "deb http://mirror.example.org/debian-security bookworm-security main # trailing comment\n")
    (tmp_path / "sources.list.d" / "local.sources").write_text(
        "Types: deb\n# a comment\nURIs: http://proxy.example.org:3142/debian\nSuites: bookworm bookworm-updates\n"
        "Components: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n\n"
        "Types: deb\nURIs: http://off.example.org/debian\nSuites: bookworm\nComponents: main\nEnabled: no\n\n"
        "Types: deb-src\nURIs: http://src-only.example.org/debian\nSuites: bookworm\nComponents: main\n")
    (tmp_path / "sources.list.d" / "other.list").write_text("deb http://other.example.org/x stable main\n")
    (tmp_path / "sources.list.d" / "ignored.list.disabled").write_text("deb http://never.example.org/x stable main\n")
    proc = run(tmp_path)
    assert proc.returncode == 0, proc.stderr
    stanzas = [dict(line.split(": ", 1) for line in block.splitlines()) for block in proc.stdout.strip().split("\n\n")]
    assert [s["URIs"] for s in stanzas] == ["http://mirror.example.org/debian", "http://mirror.example.org/debian-security",
                                            "http://proxy.example.org:3142/debian", "http://other.example.org/x"]
    assert all(s["Types"] == "deb-src" for s in stanzas)
    assert stanzas[0] == {"Types": "deb-src", "URIs": "http://mirror.example.org/debian", "Suites": "bookworm",
                          "Components": "main contrib", "Architectures": "amd64",
                          "Signed-By": "/etc/apt/keyrings/site.gpg"}
    assert stanzas[2]["Suites"] == "bookworm bookworm-updates"
    assert stanzas[2]["Signed-By"] == "/usr/share/keyrings/debian-archive-keyring.gpg"


def test_no_deb_entry_is_an_error_saying_what_to_do(tmp_path):
    (tmp_path / "sources.list").write_text("# nothing\n")
    proc = run(tmp_path)
    assert proc.returncode == 1 and "add the deb-src entry of your mirror by hand" in proc.stderr, proc.stderr


def test_build_pnetcdf_names_no_archive_address():
    text = (REPO / "ci" / "build_pnetcdf.sh").read_text()
    assert "http://" not in text and "https://" not in text
    assert "apt_deb_src.py" in text and "apt-get source --print-uris pnetcdf" in text  # an existing entry is used
