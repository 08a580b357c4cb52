"""``lenscope export-runs``: a dataset's runs (texts, lengths, finished, split) as Parquet, CSV or JSON lines."""

from __future__ import annotations

import argparse
from pathlib import Path

from lenscope.cli._common import NOTHING_WRITTEN, dataset_arg, output_file


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "export-runs", help="write a dataset's runs (prompt and answer text, token lengths, finished, scenario, "
        "group, fold, train/val/test split) to a .parquet, .csv or .jsonl file; with no such dataset in the store, "
        "study is read from the shipped generations file")
    p.add_argument("--dataset", type=dataset_arg, default=None,
                   help="store dataset (default: study, else starter, else the store's first; study falls back to the "
                        "shipped generations file when the store has no runs in it)")
    p.add_argument("--generations", type=Path, default=None, metavar="FILE",
                   help="read this generations file (.jsonl.gz, from export-generations) instead of the store")
    p.add_argument("--decode-answers", action="store_true",
                   help="runs read from a generations file (--generations, or the shipped study) hold answer "
                        "token ids: decode them with the tokenizer of the model the file names (loads that "
                        "model, which also checks every record as import-generations does; without it the answer "
                        "column is empty and the records get the checks that need no model). Stored runs always "
                        "have their answer text")
    p.add_argument("--out", type=output_file, required=True, help="file to write: .parquet, .csv or .jsonl")
    p.set_defaults(func=export_runs_command, interrupt_note=NOTHING_WRITTEN)


def export_runs_command(args: argparse.Namespace) -> int:
    from lenscope.jobs.runs.datasets import preferred_dataset
    from lenscope.jobs.runs.table import export_format, export_runs, generations_table, load_runs
    from lenscope.store.store import Store

    export_format(args.out)  # a bad suffix fails before anything is read
    if args.generations is not None:
        if args.dataset is not None:
            raise ValueError("--dataset and --generations are exclusive: give one")
        if not args.generations.is_file():
            raise FileNotFoundError(f"no generations file at {args.generations}")
        frame = generations_table(args.generations, args.decode_answers)
        origin = f"generations file {args.generations}"
    else:
        store = Store()
        dataset = args.dataset or preferred_dataset(store.datasets_frame().query("runs > 0")["name"].tolist())
        frame = load_runs(dataset or "study", store, args.decode_answers)
        origin = frame.attrs["origin"]
        if not origin.startswith("store"):
            print(f"the store has no runs in dataset 'study': reading the {origin} instead (`python -m lenscope "
                  "study` imports it)" + ("" if args.decode_answers else "; answer texts need --decode-answers"))
    export_runs(frame, args.out)
    counts = frame["split"].value_counts()
    splits = ", ".join(f"{s} {int(counts.get(s, 0))}" for s in ("train", "val", "test"))
    print(f"wrote {len(frame)} runs of the {origin} to {args.out} ({int(frame['censored'].sum())} censored at the "
          f"token cap; {splits})")
    return 0
