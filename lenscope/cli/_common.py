"""Arguments and helpers shared by several CLI commands."""

from __future__ import annotations

import argparse
from pathlib import Path

from tqdm import tqdm

from lenscope.analysis.core.metrics import ci_text
from lenscope.analysis.core.progress import label_phase
from lenscope.models.numbers import NON_NEGATIVE_INT, POSITIVE, POSITIVE_INT, SEED, Range


def metrics_line(m: dict) -> str:
    """Static (and dynamic) MAE with 95% CIs and the paired difference to the constant reference, on the
    evaluation split: the CLI's summary of :func:`lenscope.analysis.core.metrics.prediction_metrics`."""
    parts = []
    for key in ("static", "dynamic"):
        if f"{key}_mae" not in m:
            continue
        text = f"{key} MAE {ci_text(m[f'{key}_mae'], m[f'{key}_mae_lo'], m[f'{key}_mae_hi'])}"
        if f"{key}_vs_constant" in m:
            diff = [m[f"{key}_vs_constant{end}"] for end in ("", "_lo", "_hi")]
            text += f" vs constant {m[f'constant_{key}_mae']:.1f}: {ci_text(*diff, signed=True)}"
        parts.append(text)
    return "; ".join(parts) + f" on {m['eval_split']} ({m['n_runs']} runs)"


class Number:
    """argparse type of a number flag: the number in ``valid`` the text spells, else one line naming the flag and
    the range (``argument --temperature: expected a finite number in [0, 10], not 'nan'``), exit 2, before any work.
    With ``many``: comma-separated numbers, each in the range, as a list (an empty text gives an empty list).

    Every numeric flag uses it (a test walks the parser), with the range of the concept it sets."""

    def __init__(self, valid: Range, many: bool = False) -> None:
        self.valid, self.many = valid, many
        self.__name__ = f"number list ({valid.describe()})" if many else valid.describe()

    def __call__(self, text: str):
        try:
            return self.valid.parse_list(text) if self.many else self.valid.parse(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    def __repr__(self) -> str:
        return f"Number({self.valid!r}, many={self.many})"


def number(valid: Range) -> Number:
    """argparse type: one number in ``valid``."""
    return Number(valid)


def numbers(valid: Range) -> Number:
    """argparse type: comma-separated numbers, each in ``valid`` (a list)."""
    return Number(valid, many=True)


positive_int = number(POSITIVE_INT)
non_negative_int = number(NON_NEGATIVE_INT)
positive = number(POSITIVE)  # learning rates, temperatures of pooling, ...
seed = number(SEED)


def output_file(text: str) -> Path:
    """argparse type: a file to write whose folder exists (checked before the work, not after it)."""
    path = Path(text)
    if not path.parent.is_dir():
        raise argparse.ArgumentTypeError(f"folder {str(path.parent)!r} does not exist")
    if path.is_dir():
        raise argparse.ArgumentTypeError(f"{text!r} is a folder; give a file name")
    return path


def add_dataset_arg(parser: argparse.ArgumentParser, help: str = "dataset name") -> None:
    """``--dataset``, by default the one every page opens on (the full study, else the starter study)."""
    parser.add_argument("--dataset", default=None, help=f"{help} (default: study, else starter)")
    parser.set_defaults(resolve_dataset=True)


def resolve_dataset(args: argparse.Namespace) -> None:
    """Fill in ``args.dataset`` for commands registered with :func:`add_dataset_arg` (a clear error when the
    store holds no dataset)."""
    if getattr(args, "resolve_dataset", False) and args.dataset is None:
        from lenscope.jobs.runs.datasets import preferred_dataset
        from lenscope.store.store import Store

        args.dataset = preferred_dataset(Store().datasets_frame()["name"].tolist())
        if args.dataset is None:
            raise ValueError("the store has no dataset yet; run `python -m lenscope study` (or `collect`) first")


def add_censoring_arg(parser: argparse.ArgumentParser) -> None:
    """``--include-censored``: also train and score on runs cut at the token cap (left out by default)."""
    parser.add_argument("--include-censored", action="store_true",
                        help="also use runs that hit the token cap (their true length is unknown: left out by "
                             "default)")


def add_model_args(parser: argparse.ArgumentParser) -> None:
    """``--model``, ``--device`` and ``--dtype`` for commands that load a target model."""
    parser.add_argument("--model", default="", help="local checkpoint dir, .gguf file or hub id "
                        "(default: embedded SmolLM2-135M-Instruct)")
    parser.add_argument("--device", default="auto", help="auto, cpu, cuda, cuda:1, ...")
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])


def add_ray_args(parser: argparse.ArgumentParser, what: str) -> None:
    """``--ray [ADDRESS]`` and ``--ray-workers N``: run ``what`` on a Ray cluster (a local one without ADDRESS)."""
    parser.add_argument("--ray", nargs="?", const="local", default=None, metavar="ADDRESS",
                        help=f"{what} on a Ray cluster: ray://HOST:10001 or auto to join one, no address to start a "
                             "local cluster (needs: pip install -r requirements-ray.txt)")
    parser.add_argument("--ray-workers", type=positive_int, default=None,
                        help="Ray workers (default: one per GPU of the cluster, else one per CPU slot)")


def ray_options(args: argparse.Namespace):
    """The :class:`~lenscope.jobs.runs.ray_cluster.RayOptions` the Ray arguments ask for (None without ``--ray``)."""
    if args.ray is None:
        return None
    from lenscope.jobs.runs.ray_cluster import RayOptions

    return RayOptions(address=None if args.ray == "local" else args.ray, workers=args.ray_workers)


def load_target(args: argparse.Namespace):
    """Load the target model named by the common model arguments."""
    from lenscope.models.target import TargetModel

    return TargetModel.load(args.model, device=args.device, dtype=args.dtype)


def progress_bar(total: int, desc: str, initial: int = 0) -> tqdm:
    """A tqdm bar with lenscope's look; ``initial`` items done before it started do not count in its rate."""
    return tqdm(total=total, desc=desc, initial=initial, unit="it", dynamic_ncols=True)


class PhaseBars:
    """``on_progress(done, total, label)`` for lenscope jobs: one tqdm bar per phase, its description the
    latest label (live details such as tokens/s change it without restarting the bar's rate and ETA)."""

    def __init__(self) -> None:
        self.phase, self.bar = None, None

    def __call__(self, done: int, total: int, label: str) -> None:
        phase = label_phase(label)
        if phase != self.phase:
            self.close()
            self.phase, self.bar = phase, progress_bar(total, label, initial=done)
        self.bar.set_description(label, refresh=False)
        self.bar.total = total
        self.bar.n = done
        self.bar.refresh()

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.phase, self.bar = None, None
