"""Generation with the store as a cache: the same prompt, model and settings never run twice."""

from __future__ import annotations

from collections.abc import Sequence

from lenscope.analysis.core.progress import Progress, no_progress
from lenscope.models.engine import GenerationSettings, generate
from lenscope.models.target import TargetModel, lone_surrogate
from lenscope.store.store import Store, StoredRun

__all__ = ["GenerationSettings", "generate_cached"]  # the settings type is re-exported for the app


# Far beyond any model context here, so a real prompt never meets it; it keeps a pasted book from being tokenized.
MAX_PROMPT_CHARS = 100_000


def generate_cached(
    store: Store,
    target: TargetModel,
    prompt: str,
    settings: GenerationSettings,
    layers: Sequence[int] | None = None,
    on_progress: Progress = no_progress,
    source: str = "user",
    source_ref: str = "",
) -> tuple[StoredRun, bool]:
    """Return the stored run for this request, generating and storing it on a miss.

    The second value is True on a cache hit. A prompt longer than :data:`MAX_PROMPT_CHARS` is refused with its
    length (before tokenizing it), one that is not valid Unicode text before its cache key is hashed.
    """
    invalid = lone_surrogate(prompt)
    if invalid:
        raise ValueError(invalid)
    if len(prompt) > MAX_PROMPT_CHARS:
        raise ValueError(f"the prompt has {len(prompt):,} characters; the limit is {MAX_PROMPT_CHARS:,} (the model "
                         f"reads at most {target.context_length:,} tokens)")
    layers = list(layers) if layers is not None else target.default_layers()
    key = store.run_key(target.key, prompt, settings.as_dict(), layers)
    run_id = store.find_run(key, whole=True)  # a run whose features stop early is generated again, in place
    if run_id is not None:
        return store.load_run(run_id), True
    generation = generate(target, prompt, settings, layers, on_progress=on_progress)
    run_id = store.save_run(target, prompt, generation, source=source, source_ref=source_ref)
    return store.load_run(run_id), False
