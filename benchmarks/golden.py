"""Golden runs: the same commands on two commits give the same records and summaries (same machine, same threads).

    python benchmarks/golden.py 84a2bec            # that commit against the working tree
    python benchmarks/golden.py 84a2bec --no-demo  # the SmolLM2 run only (about a minute each)

Each side runs `memrisk run` on a SmolLM2 config with every method (windows of Python's own
LICENSE text, and a control), and `memrisk demo`, from its own source tree; then every record
column and every JSON and YAML file of the folders are compared exactly. Keys named with --ignore
are left out of that comparison; by default those that commits after 84a2bec add: `signatures`
(summary.json), `mc` (config.yaml: the Monte Carlo section, unused by these runs), the datasets'
`duplicates` and `near_duplicates` and the model's `shares` (config.yaml; one pool, as before, unless set). The records' wall-time columns (`seconds.*`) are
measurements and are always left out. Prints one line per file and exits 1 on any difference.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import yaml

REPO = Path(__file__).resolve().parents[1]
CONFIG = """\
model: {name: smollm2, batch_size: 4, threads: 2}
datasets:
  - {name: licence, path: target.jsonl, id_field: id, limit: 3}
  - {name: control, role: control, documents: ["The lighthouse keeper counted seventeen gulls on the eastern rail before the fog rolled in from the cold grey water, and then he lost count and went down to boil the kettle for the evening tea while the lamp turned slowly above."]}
windows: {prefix_length: 16, suffix_length: 12, stride: 40}
policies: [{top_k: 40}, {temperature: 1.0}]
methods: [probabilistic, greedy, cbs, prior_aware]
cbs: {beam_width: 3, epsilon: 5, text_metrics: true}
prior_aware: {prefixes_per_trial: 8, trials: 2}
shard_size: 4
"""
FILES = ("summary.json", "windows.json", "prior_aware.json", "config.yaml")


def write_inputs(folder: Path) -> Path:
    """The SmolLM2 config and its data: the long paragraphs of Python's LICENSE text."""
    licence = Path(sysconfig.get_paths()["stdlib"]) / "LICENSE.txt"
    paragraphs = [p for p in licence.read_text(encoding="utf-8").split("\n\n") if len(p) > 400][:6]
    (folder / "target.jsonl").write_text("".join(json.dumps({"id": f"lic{i}", "text": p}) + "\n" for i, p in enumerate(paragraphs)))
    (folder / "golden.yaml").write_text(CONFIG)
    return folder / "golden.yaml"


def run(source: Path, args: list[str], cwd: Path) -> None:
    """`memrisk ARGS` with the package imported from `source` (a commit's src/ folder)."""
    env = os.environ | {"PYTHONPATH": str(source)}
    command = [sys.executable, "-c", "import sys; from memrisk.cli import main; sys.exit(main())", *args]
    done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(f"memrisk {' '.join(args)} failed (source {source}):\n{done.stderr[-3000:]}")


def records(folder: Path) -> list[dict[str, Any]]:
    """Every record of a run folder, sorted by example id, without the wall-time columns (measurements)."""
    manifest = json.loads((folder / "manifest.json").read_text())
    rows = [{k: v for k, v in row.items() if not k.startswith("seconds.")}
            for shard in manifest["shards"] for row in pq.read_table(folder / "records" / shard).to_pylist()]
    return sorted(rows, key=lambda row: row["example_id"])


def without(data: Any, ignore: set[str]) -> Any:
    """`data` with the ignored keys removed at every depth."""
    if isinstance(data, dict):
        return {k: without(v, ignore) for k, v in data.items() if k not in ignore}
    if isinstance(data, list):
        return [without(v, ignore) for v in data]
    return data


def differences(a: Any, b: Any, path: str = "") -> list[str]:
    """Dotted paths where two JSON values differ."""
    if isinstance(a, dict) and isinstance(b, dict):
        return [d for key in dict.fromkeys([*a, *b]) for d in differences(a.get(key), b.get(key), f"{path}.{key}")]
    return [] if a == b else [f"{path or '.'}: {str(a)[:60]} | {str(b)[:60]}"]


def compare(name: str, a: Path, b: Path, ignore: set[str]) -> bool:
    """Print one line per file compared; True when everything is equal."""
    equal = records(a) == records(b)
    print(f"{name} records: {len(records(a))} vs {len(records(b))}, {'identical' if equal else 'DIFFERENT'}")
    for file in FILES:
        if not (a / file).exists() and not (b / file).exists():
            continue
        read = json.loads if file.endswith(".json") else yaml.safe_load
        found = differences(without(read((a / file).read_text()), ignore), without(read((b / file).read_text()), ignore))
        print(f"{name} {file}: {'identical' if not found else 'DIFFERENT'}")
        for line in found[:20]:
            print(f"    {line}")
        equal = equal and not found
    return equal


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("base", help="the commit to compare the working tree with")
    parser.add_argument("--no-demo", action="store_true", help="compare the SmolLM2 run only")
    parser.add_argument("--ignore", nargs="*", default=["signatures", "mc", "duplicates", "near_duplicates", "shares"], help="JSON keys left out of the comparison")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        subprocess.run(["git", "worktree", "add", "-q", "--detach", str(work / "base"), args.base], cwd=REPO, check=True)
        try:
            config = write_inputs(work)
            sides = {"base": work / "base" / "src", "head": REPO / "src"}
            equal = True
            for side, source in sides.items():
                run(source, ["run", str(config), "--out", str(work / f"{side}-smollm2")], work)
            equal &= compare("smollm2", work / "base-smollm2", work / "head-smollm2", set(args.ignore))
            if not args.no_demo:
                for side, source in sides.items():
                    run(source, ["demo", "--out", str(work / f"{side}-demo")], work)
                equal &= compare("demo", work / "base-demo", work / "head-demo", set(args.ignore))
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(work / "base")], cwd=REPO, check=True)
    return 0 if equal else 1


if __name__ == "__main__":
    sys.exit(main())
