"""The `memrisk` command line: demo, run, study, report and books (run, score)."""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from memrisk.errors import MemriskError


def _demo(args: argparse.Namespace) -> None:
    from memrisk.demo.run import run_demo, run_demo_sizes
    from memrisk.demo.train import DEFAULT_SIZE

    sizes = args.sizes.split(",") if args.sizes else [DEFAULT_SIZE]
    if len(sizes) > 1:
        if args.model or args.gguf_file:
            raise MemriskError("--sizes trains and compares the demo's own models; leave out --model and --gguf-file")
        run_demo_sizes(Path(args.out or "memrisk-demo-sizes"), sizes, seed=args.seed, force=args.force)
        return
    run_demo(Path(args.out or "memrisk-demo"), model=args.model, gguf_file=args.gguf_file, seed=args.seed, size=sizes[0], force=args.force)


def _run(args: argparse.Namespace) -> None:
    from memrisk.config import load_config
    from memrisk.report.html import write_report
    from memrisk.report.text import summary_table
    from memrisk.runner import run_experiment

    from memrisk.lock import locked_folder

    config = load_config(args.config)
    out = Path(args.out) if args.out else Path("runs") / Path(args.config).stem
    if args.ray is None:
        summary = run_experiment(config, out, force=args.force)
    else:
        from memrisk.distributed import run_experiment_on_ray

        summary = run_experiment_on_ray(config, out, address=args.ray or None, force=args.force)
    with locked_folder(out):
        report = write_report([out])
    print(summary_table(summary))
    print(f"\nrecords, summary.json and config in {out}/; report: {report}")


def _setting(text: str) -> tuple[str, Any]:
    """`KEY=VALUE` from the command line: a dotted config key and a YAML value."""
    import yaml

    key, equals, value = text.partition("=")
    if not equals or not key:
        raise argparse.ArgumentTypeError(f"give KEY=VALUE (a dotted config key, e.g. windows.limit=2), got {text!r}")
    return key, yaml.safe_load(value)


def _study(args: argparse.Namespace) -> None:
    from memrisk.layout import STUDY_TABLE
    from memrisk.lock import locked_folder
    from memrisk.report.html import write_report
    from memrisk.demo.study import study_models
    from memrisk.study import cost_estimate_lines, dry_run_lines, load_study, run_study

    out = Path(args.out) if args.out else Path("studies-out") / Path(args.study).stem
    overrides = dict(args.set)
    models = study_models(args.study)
    if args.dry_run:
        _, cells = load_study(args.study, models.prepare, overrides)
        print(f"{len(cells)} cells into {out}/:")
        print("\n".join("  " + line for line in dry_run_lines(cells)))
        print("estimated cost (tokenizers and model configs read, no weights):")
        print("\n".join("  " + line for line in cost_estimate_lines(cells, out, models.skeleton)))
        return
    summaries = run_study(
        args.study, out, force=args.force, load=models.load, prepare=models.prepare, ray=args.ray is not None, ray_address=args.ray or None,
        overrides=overrides,
    )
    with locked_folder(out):
        report = write_report([out])
    print(f"{len(summaries)} cells in {out}/cells/: " + ", ".join(summaries))
    print(f"study table: {out / STUDY_TABLE}; report: {report}")


def _report(args: argparse.Namespace) -> None:
    from contextlib import ExitStack

    from memrisk.layout import is_study
    from memrisk.lock import locked_folder
    from memrisk.report.html import write_report
    from memrisk.report.text import books_text_table, summary_table
    from memrisk.summary import rebuild_summary
    from memrisk.store import RecordStore

    folders = [Path(folder) for folder in args.dirs]
    with ExitStack() as locks:
        for folder in dict.fromkeys(f.resolve() for f in folders):
            RecordStore.existing(folder)
            locks.enter_context(locked_folder(folder))
        for folder in folders:
            if is_study(folder):
                print(f"study {folder}: its cells are reported together")
                continue
            summary = rebuild_summary(folder)
            print(books_text_table(summary) if summary.get("kind") == "books" else summary_table(summary))
        path = write_report(folders, Path(args.out) if args.out else None, [f.strip() for f in args.format.split(",") if f.strip()])
    print(f"\nreport written to {path} (figures in {path.parent / 'figures'}/)")


def _books_run(args: argparse.Namespace) -> None:
    from memrisk.books.config import load_books_config
    from memrisk.books.run import run_books
    from memrisk.report.text import books_text_table

    config = load_books_config(args.config)
    out = Path(args.out) if args.out else Path("runs") / Path(args.config).stem
    summary = run_books(config, out, force=args.force)
    print(books_text_table(summary))
    print(f"\nrequest log, generations, diffs and books_summary.json in {out}/; `memrisk report {out}` for the HTML report")


def _books_score(args: argparse.Namespace) -> None:
    from memrisk.books.diffview import diff_page
    from memrisk.books.nvrecall import nv_recall
    from memrisk.books.run import read_book
    from memrisk.files import atomic_write_text

    book, generated = read_book(args.book), Path(args.generated)
    try:
        generation = generated.read_text(encoding="utf-8")
    except (FileNotFoundError, UnicodeDecodeError) as exc:
        raise MemriskError(f"cannot read generated text {generated}: {exc}") from None
    result = nv_recall(book, generation)
    print(f"nv-recall {result.nv_recall:.4f}  matched {result.matched}  missing {result.missing}  additional {result.additional}  "
          f"max block {result.max_block}  blocks {len(result.blocks)}  |B| {result.book_words}  |G| {result.generated_words}")
    print(result.signature)
    if args.html:
        page = diff_page(book, generation, result, title=f"{Path(args.book).name} vs {generated.name}", context_words=args.context_words)
        atomic_write_text(Path(args.html), page)
        print(f"diff view written to {args.html}")


class _Parser(argparse.ArgumentParser):
    """An argument parser whose help can end with text made only when help is shown (so that
    `memrisk books score` does not import what `memrisk run --help` describes)."""

    def __init__(self, *args: Any, late_epilog: Callable[[], str] | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.late_epilog = late_epilog

    def format_help(self) -> str:
        text = super().format_help()
        return f"{text}\n{self.late_epilog()}\n" if self.late_epilog else text


def _run_defaults() -> str:
    from memrisk.config import defaults_text

    return defaults_text()


def _books_defaults() -> str:
    from memrisk.books.config import defaults_text

    return defaults_text()


def build_parser() -> argparse.ArgumentParser:
    """Argument parser of the `memrisk` command."""
    parser = _Parser(prog="memrisk", description="Measure training-data extraction risk of language models.")
    parser.add_argument("-v", "--verbose", action="store_true", help="log more detail")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    demo = sub.add_parser("demo", help="train a small model on a corpus with planted duplicates and measure extraction")
    demo.add_argument("--out", help="output folder (default: ./memrisk-demo, with several --sizes ./memrisk-demo-sizes)")
    demo.add_argument("--model", help="evaluate this model instead of the trained demo model (hub id, folder or 'smollm2')")
    demo.add_argument("--gguf-file", help="GGUF weights file inside --model's folder")
    demo.add_argument("--seed", type=int, default=0, help="corpus and training seed (default 0)")
    demo.add_argument(
        "--sizes", metavar="SIZE,SIZE", help="demo model sizes, comma-separated (e.g. small,base; default: small); several are "
        "measured as one study with one cell per size and its model-size figures",
    )
    demo.add_argument("--force", action="store_true", help="discard records of an earlier, different demo run in --out")
    demo.set_defaults(handler=_demo)

    run = sub.add_parser("run", help="run an experiment from a YAML config (re-run to resume)", late_epilog=_run_defaults)
    run.add_argument("config", help="experiment YAML file")
    run.add_argument("--out", help="output folder (default: runs/<config name>)")
    run.add_argument("--force", action="store_true", help="discard records made under a different config and start again")
    run.add_argument(
        "--ray", nargs="?", const="", metavar="ADDRESS",
        help="shard the examples over a Ray cluster: ADDRESS (HOST:PORT, ray://HOST:PORT, auto), "
        "else RAY_ADDRESS or this machine's cluster, else a new local one (records equal a local run's)",
    )
    run.set_defaults(handler=_run)

    study = sub.add_parser("study", help="run a grid of experiments or books runs, one run folder per cell (re-run to resume)")
    study.add_argument("study", help="study YAML: base (an experiment or books-run config, or its path), grid and/or cells")
    study.add_argument("--out", help="output folder (default: studies-out/<study name>)")
    study.add_argument("--force", action="store_true", help="discard the cells of a different study and start again")
    study.add_argument(
        "--set", action="append", default=[], type=_setting, metavar="KEY=VALUE",
        help="change the base config of every cell, e.g. --set windows.limit=2 for a quick look (repeatable; VALUE is YAML)",
    )
    study.add_argument("--dry-run", action="store_true", help="list the cells, their cost per window and their estimated token evaluations and wall time (books cells: their most requests); load no weights, send nothing")
    study.add_argument(
        "--ray", nargs="?", const="", metavar="ADDRESS",
        help="run each cell's chunks on a Ray cluster (one pool of workers per model), ADDRESS as for `memrisk run --ray`",
    )
    study.set_defaults(handler=_study)

    report = sub.add_parser(
        "report", help="rebuild summary.json of stored runs (books runs: read books_summary.json) and write report.html (a comparison when several)"
    )
    report.add_argument("dirs", nargs="+", help="run or books-run folders; the report goes into the first one")
    report.add_argument("--out", help="write report.html and figures/ into this folder instead")
    report.add_argument("--format", default="png,svg", help="static figure files for papers: png, svg or png,svg (default)")
    report.set_defaults(handler=_report)

    books = sub.add_parser("books", help="book extraction from chat APIs (two-phase procedure) and nv-recall")
    books_sub = books.add_subparsers(dest="books_command", required=True)
    books_run = books_sub.add_parser(
        "run", help="run Phase 1 and Phase 2 from a YAML config (re-run to resume from the request log)", late_epilog=_books_defaults,
    )
    books_run.add_argument("config", help="books-run YAML file")
    books_run.add_argument("--out", help="output folder (default: runs/<config name>)")
    books_run.add_argument("--force", action="store_true", help="discard the request log of a different config and start again")
    books_run.set_defaults(handler=_books_run)
    score = books_sub.add_parser("score", help="nv-recall of a generated text against the book")
    score.add_argument("book", help="the reference book (UTF-8 text)")
    score.add_argument("generated", help="the generated text (UTF-8 text)")
    score.add_argument("--html", help="also write the matched / missing / additional diff view here")
    score.add_argument("--context-words", type=int, default=50, help="words kept around long unmatched runs in --html (default 50)")
    score.set_defaults(handler=_books_score)
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
