"""``lenscope predict``: length predictions for new prompts, before the model answers them."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from lenscope.cli._common import PhaseBars, add_model_args, dataset_arg, load_target, output_file

INTERRUPT_NOTE = ("interrupted; no predictions were written (they are written whole at the end): run the same "
                  "command again")


def register(subparsers: argparse._SubParsersAction) -> None:
    from lenscope.jobs.predictors.catalog import CATALOG, catalog_text

    p = subparsers.add_parser(
        "predict", help="predict the answer length of new prompts with a shipped (or stored) predictor",
        description="Predict how many tokens the target model will answer to each prompt, before it answers.\n\n"
                    "Predictors (--predictor), each with its source:\n  " + catalog_text("\n  "))
    p.add_argument("--prompts", required=True, type=Path,
                   help="JSON lines with 'prompt' (and optional 'id'), a CSV with a 'prompt' column, or plain text "
                        "with one prompt a line")
    p.add_argument("--predictor", default="egtp",
                   help=f"one or more of {', '.join(CATALOG)}, comma-separated, or 'all' (default: egtp)")
    p.add_argument("--dataset", type=dataset_arg, default=None,
                   help="use the predictors trained on this store dataset instead of the shipped ones")
    p.add_argument("--out", type=output_file, default=None, help="CSV to write (default: print to the terminal)")
    add_model_args(p)
    p.set_defaults(func=run_predict, interrupt_note=INTERRUPT_NOTE)


def predictor_names(text: str) -> list[str]:
    """The names ``--predictor`` lists (``all``: every catalog name)."""
    from lenscope.jobs.predictors.catalog import CATALOG, predictor_list

    names = list(CATALOG) if text.strip() == "all" else [n.strip() for n in text.split(",") if n.strip()]
    if not names:
        raise ValueError("--predictor names no predictor")
    return predictor_list(names)


def run_predict(args: argparse.Namespace) -> int:
    from lenscope.jobs.predictors.catalog import load_predictor_files
    from lenscope.jobs.predictors.predict import (
        LengthPredictor,
        chat_ids,
        check_model,
        predict_prompts,
        read_prompts,
        write_predictions,
    )
    from lenscope.models.target import PromptTokenizer
    from lenscope.store.store import Store

    names = predictor_names(args.predictor)
    prompts = read_prompts(args.prompts)  # empty, binary, invalid text, repeated ids: refused here
    store = Store() if args.dataset is not None else None
    files = [load_predictor_files(n, store, args.dataset) for n in names]  # hashes checked before the model loads
    tokenizer = PromptTokenizer.of(args.model)  # the tokenizer alone, where it loads without the weights
    if tokenizer is not None:
        chat_ids(tokenizer, prompts)  # a prompt too long for the model's context: refused before the load
        for f in files:
            check_model(f, tokenizer.source.spec)
    target = load_target(args)
    predictors = [LengthPredictor(f, target) for f in files]
    with PhaseBars() as bars:
        frame = predict_prompts(target, prompts, predictors, bars)
    if args.out is None:
        write_predictions(frame, sys.stdout)
    else:
        write_predictions(frame, args.out)
        print(f"{len(frame)} predictions ({len(prompts)} prompts x {len(predictors)} predictors) written to "
              f"{args.out}")
    return 0
