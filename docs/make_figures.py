"""Regenerate the pictures and tables of docs/figures.md: run each catalogued study with `memrisk study`
(into studies-out/, resumable) and copy each entry's figures/SLUG.png (or .csv, for a table) into docs/figures/.

Run:  python docs/make_figures.py
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

DOCS = Path(__file__).resolve().parent
REPO = DOCS.parent
ENTRY = re.compile(r"`memrisk study (?P<study>studies/[^`]+\.yaml)` \| !?\[[^\]]*\]\(figures/(?P<slug>[A-Za-z0-9.-]+)\.(?P<kind>png|csv)\)")


def main() -> None:
    found = [m.groupdict() for m in ENTRY.finditer((DOCS / "figures.md").read_text(encoding="utf-8"))]
    (DOCS / "figures").mkdir(exist_ok=True)
    for study in sorted({entry["study"] for entry in found}):
        print(f"memrisk study {study}", flush=True)
        subprocess.run([sys.executable, "-m", "memrisk.cli", "study", study], cwd=REPO, check=True)
    for entry in found:
        source = REPO / "studies-out" / Path(entry["study"]).stem / "figures" / f"{entry['slug']}.{entry['kind']}"
        shutil.copyfile(source, DOCS / "figures" / source.name)
        print(f"docs/figures/{source.name}")


if __name__ == "__main__":
    main()
