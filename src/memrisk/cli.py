"""The `memrisk` command line: demo, run and report."""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from memrisk.errors import MemriskError


def _demo(args: argparse.Namespace) -> None:
    from memrisk.demo.run import run_demo

    run_demo(Path(args.out), model=args.model, gguf_file=args.gguf_file, seed=args.seed, force=args.force)


def _run(args: argparse.Namespace) -> None:
    from memrisk.config import load_config
    from memrisk.report.html import write_report
    from memrisk.report.text import summary_table
    from memrisk.runner import run_experiment

    config = load_config(args.config)
    out = Path(args.out) if args.out else Path("runs") / Path(args.config).stem
    summary = run_experiment(config, out, force=args.force)
    report = write_report([out])
    print(summary_table(summary))
    print(f"\nrecords, summary.json and config in {out}/; report: {report}")


def _report(args: argparse.Namespace) -> None:
    from memrisk.report.html import write_report
    from memrisk.report.text import summary_table
    from memrisk.runner import rebuild_summary

    folders = [Path(folder) for folder in args.dirs]
    for folder in folders:
        print(summary_table(rebuild_summary(folder)))
    path = write_report(folders, Path(args.out) if args.out else None)
    print(f"\nreport written to {path} (figures in {path.parent / 'figures'}/)")


def build_parser() -> argparse.ArgumentParser:
    """Argument parser of the `memrisk` command."""
    parser = argparse.ArgumentParser(prog="memrisk", description="Measure training-data extraction risk of language models.")
    parser.add_argument("-v", "--verbose", action="store_true", help="log more detail")
    sub = parser.add_subparsers(dest="command", required=True)

    demo = sub.add_parser("demo", help="train a small model on a corpus with planted duplicates and measure extraction")
    demo.add_argument("--out", default="memrisk-demo", help="output folder (default: ./memrisk-demo)")
    demo.add_argument("--model", help="evaluate this model instead of the trained demo model (hub id, folder or 'smollm2')")
    demo.add_argument("--gguf-file", help="GGUF weights file inside --model's folder")
    demo.add_argument("--seed", type=int, default=0, help="corpus and training seed (default 0)")
    demo.add_argument("--force", action="store_true", help="discard records of an earlier, different demo run in --out")
    demo.set_defaults(handler=_demo)

    run = sub.add_parser("run", help="run an experiment from a YAML config (re-run to resume)")
    run.add_argument("config", help="experiment YAML file")
    run.add_argument("--out", help="output folder (default: runs/<config name>)")
    run.add_argument("--force", action="store_true", help="discard records made under a different config and start again")
    run.set_defaults(handler=_run)

    report = sub.add_parser(
        "report", help="rebuild summary.json of stored runs and write report.html (a comparison when several)"
    )
    report.add_argument("dirs", nargs="+", help="run folders; the report goes into the first one")
    report.add_argument("--out", help="write report.html and figures/ into this folder instead")
    report.set_defaults(handler=_report)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point; bad input prints one error line and exits with status 2."""
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    try:
        args.handler(args)
    except MemriskError as exc:
        print(f"memrisk: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("memrisk: interrupted; re-run the same command to resume", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
