"""The checks a generations file passes before any of its runs is stored: the header's model and every record.

A record (see ``data/generations/README.md``) is refused, naming the file, its number (records count from 1 after
the header) and the field, when a field is missing or of another type, a token id is not one of the model's
(a non-negative integer below its vocabulary size; not a bool, not a string), prompt and answer together exceed
the model's context or the answer its ``max_new_tokens``, the settings are not :class:`GenerationSettings`
(a temperature of ``"hot"``, a top-p of 2), ``finished`` disagrees with the answer's last token (a finished answer
ends with one of the model's end-of-turn/stop ids, an unfinished one does not), the prompt is not valid text or
its tokens are not the model's. :func:`check_generations` checks every record and raises one line: the first
failure and how many other records fail; :func:`check_records` does the same for the checks that need no model
(``export-runs --generations``, which reads a file without loading its model).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields

from lenscope.analysis.data.scenarios import SCENARIOS
from lenscope.models.engine import GenerationSettings
from lenscope.models.target import TargetModel, lone_surrogate

# The fields of a record and the JSON type each holds.
RECORD_FIELDS = {"prompt": str, "source": str, "ref": str, "scenario": str, "settings": dict, "prompt_ids": list,
                 "output_ids": list, "finished": bool}
TYPE_NAMES = {str: "a text", dict: "a JSON object", list: "a list of token ids", bool: "true or false"}
SETTINGS = tuple(f.name for f in fields(GenerationSettings))  # besides them, settings hold the sampler's version
SHOWN_CHARS = 40  # a value quoted in a message is cut to this many characters


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= SHOWN_CHARS else text[:SHOWN_CHARS - 3] + "..."


def _kind(value: object) -> str:
    return "null" if value is None else {bool: "a bool", int: "an integer", float: "a number", str: "a text",
                                         list: "a list", dict: "a JSON object"}.get(type(value), type(value).__name__)


def generated_by(header: dict, target: TargetModel) -> bool:
    """Whether a generations file's answers are ``target``'s own: its header names the model that sampled them
    (files written before that was recorded are taken on trust; their prompt tokens are still checked)."""
    return header.get("model", target.source.spec) == target.source.spec


@dataclass(frozen=True)
class RecordLimits:
    """What a record's token ids are checked against: the model's name, vocabulary size, context and end ids."""

    model: str
    vocab_size: int
    context_length: int
    stop_ids: frozenset[int]

    @classmethod
    def of(cls, target: TargetModel) -> RecordLimits:
        return cls(target.source.spec, int(target.vocab_size), int(target.context_length),
                   frozenset(int(i) for i in target.stop_ids))


def _bad_id(ids: list, field: str, limits: RecordLimits) -> str | None:
    """The first entry of ``ids`` that is not a token id of the model, said, or None."""
    vocab = limits.vocab_size
    if all(type(i) is int for i in ids) and (not ids or (min(ids) >= 0 and max(ids) < vocab)):
        return None
    k, value = next((k, i) for k, i in enumerate(ids) if type(i) is not int or not 0 <= i < vocab)
    return f"{field}[{k}] = {_shown(value)} is not a token id of {limits.model} (vocabulary {vocab})"


def _settings_problem(settings: dict) -> str | None:
    unknown = [key for key in settings if key not in SETTINGS and key != "sampler"]
    if unknown:
        return f"settings hold {_shown(unknown[0])}, not a sampling setting ({', '.join(SETTINGS)} or sampler)"
    unset = [key for key, value in settings.items() if value is None]
    if unset:
        return f"settings.{unset[0]} is null"
    if "sampler" in settings and not isinstance(settings["sampler"], str):
        return f"settings.sampler must be a text (the sampler's version), not {_shown(settings['sampler'])}"
    for key in ("system_prompt", "sampler"):
        invalid = isinstance(settings.get(key), str) and lone_surrogate(settings[key], f"settings.{key}")
        if invalid:
            return invalid
    try:
        GenerationSettings(**{key: settings[key] for key in SETTINGS if key in settings})
    except ValueError as exc:  # out of range, not a number: the settings' own words, e.g. temperature must be ...
        return f"settings.{exc}"
    return None


def record_problem(record: object, limits: RecordLimits | None = None) -> str | None:
    """Why ``record`` cannot be stored as a run of the model of ``limits`` (its first failing field), or None; without
    ``limits``, only what needs no model (fields and their types, texts, scenario, settings, non-empty token lists
    within the settings' cap). The prompt's tokens are checked by :func:`check_generations` (they need the model's
    tokenizer)."""
    if not isinstance(record, dict):
        return f"is {_kind(record)}, not a JSON object"
    missing = [name for name in RECORD_FIELDS if name not in record]
    if missing:
        return f"no {missing[0]} (a record holds {', '.join(RECORD_FIELDS)})"
    for name, kind in RECORD_FIELDS.items():
        value = record[name]
        if not isinstance(value, kind):
            return f"{name} must be {TYPE_NAMES[kind]}, not {_kind(value)} ({_shown(value)})"
    for name in ("prompt", "source", "ref"):  # texts a database, a hash or a tokenizer cannot take
        invalid = lone_surrogate(record[name], "the prompt" if name == "prompt" else name)
        if invalid:
            return invalid
    if record["scenario"] not in SCENARIOS:
        return f"scenario {_shown(record['scenario'])} is not one of {', '.join(SCENARIOS)}"
    settings, prompt_ids, output_ids = record["settings"], record["prompt_ids"], record["output_ids"]
    problem = _settings_problem(settings)
    if problem:
        return problem
    if not prompt_ids:
        return "prompt_ids is empty"
    if not output_ids:
        return "output_ids is empty (a run holds at least one answer token)"
    cap = settings.get("max_new_tokens")
    if cap is not None and len(output_ids) > cap:
        return f"output_ids holds {len(output_ids):,} tokens, more than settings.max_new_tokens = {cap:,}"
    if limits is None:
        return None
    total = len(prompt_ids) + len(output_ids)
    if total > limits.context_length:
        return (f"prompt_ids + output_ids = {len(prompt_ids):,} + {len(output_ids):,} = {total:,} tokens, past the "
                f"context of {limits.model} ({limits.context_length:,} tokens)")
    problem = _bad_id(prompt_ids, "prompt_ids", limits) or _bad_id(output_ids, "output_ids", limits)
    if problem:
        return problem
    ends = output_ids[-1] in limits.stop_ids
    if record["finished"] and not ends:
        return (f"finished is true, but the answer does not end with an end token of {limits.model} "
                f"(output_ids[-1] = {output_ids[-1]}; end tokens: {', '.join(map(str, sorted(limits.stop_ids)))})")
    if not record["finished"] and ends:
        return (f"finished is false, but the answer ends with an end token of {limits.model} "
                f"(output_ids[-1] = {output_ids[-1]})")
    return None


def _prompt_problem(record: dict, target: TargetModel) -> str | None:
    """Why the record's prompt is not text the model takes, or its ``prompt_ids`` not the model's tokens of it."""
    try:
        ids = target.chat_ids(record["prompt"], record["settings"].get("system_prompt", "default"))
    except ValueError as exc:  # the prompt is empty, binary, too long; a system prompt without a chat template
        return str(exc)
    if ids != record["prompt_ids"]:
        return (f"prompt_ids differ from {target.source.spec}'s tokens of the prompt; import it with the model that "
                "generated it")
    return None


def check_generations(target: TargetModel, source: str, header: dict, records: Sequence[object]) -> None:
    """Raise ValueError (one line) unless file ``source`` holds answers of ``target`` (its header) and every record
    is a run ``target`` can store (:func:`record_problem`, then the prompt's tokens): the first failing record, by
    its number, and how many others fail. Nothing is stored before this passes."""
    if not generated_by(header, target):
        raise ValueError(f"{source} holds answers of {header['model']}, not of {target.source.spec}; import it "
                         "with the model that generated it")
    layers = header.get("layers")
    if layers is not None and (not isinstance(layers, list)
                               or not all(type(layer) is int for layer in layers)):
        raise ValueError(f"{source}: the header's layers must be a list of layer numbers, not {_shown(layers)}")
    limits = RecordLimits.of(target)
    check_records(source, records, lambda record: record_problem(record, limits) or _prompt_problem(record, target))


def check_records(source: str, records: Sequence[object],
                  problem: Callable[[object], str | None] = record_problem) -> None:
    """Raise ValueError (one line) when a record of file ``source`` has a ``problem`` (by default what
    :func:`record_problem` checks without a model): the first, by its number, and how many others fail."""
    failures = []
    for number, record in enumerate(records, start=1):
        found = problem(record)
        if found:
            failures.append(f"{source} record {number:,}: {found}")
    if failures:
        more = len(failures) - 1
        others = f"{more:,} more records fail" if more > 1 else "1 more record fails"
        raise ValueError(failures[0] + (f" ({others} these checks)" if more else ""))
