"""Speculative-decoding acceptance of greedy drafts against the target's greedy choices.

Evaluation on stored sequences: at drafter position ``p`` (which has seen the token ``x[p+1]``)
draft step ``i`` proposes the token at ``p+1+i``; the target's greedy choice for it given that all
earlier drafts were accepted is ``argmax`` of the target distribution at ``p+i`` *on the accepted
path*. The stored sequence (sampled at temperature > 0) gives that distribution exactly when it
followed the greedy path, i.e. when ``x[p+1+j]`` equals the greedy token at ``p+j`` for every
``j < i``; then the greedy token is ``topk_ids[p+i, 0]``. Draft steps whose greedy token is not
derivable are left out of that step's rate (no target re-run needed).
"""

from __future__ import annotations

import torch


def greedy_chain(input_ids: torch.Tensor, greedy_ids: torch.Tensor, starts: torch.Tensor,
                 k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Target greedy tokens for draft steps 1..k from each start, and whether each is derivable.

    ``input_ids`` [T] the stored sequence, ``greedy_ids`` [T] the target's argmax at every position
    (``topk_ids[:, 0]``). Returns ``greedy`` [N, k] (-1 where unknown) and ``derivable`` [N, k] bool.
    """
    t = len(input_ids)
    greedy = torch.full((len(starts), k), -1, dtype=torch.long)
    derivable = torch.zeros((len(starts), k), dtype=torch.bool)
    for row, p in enumerate(starts.tolist()):
        for i in range(1, k + 1):
            if p + i >= t:
                break
            greedy[row, i - 1] = int(greedy_ids[p + i])
            derivable[row, i - 1] = True
            if p + i + 1 >= t or int(input_ids[p + i + 1]) != int(greedy_ids[p + i]):
                break
    return greedy, derivable


def acceptance_counts(drafts: torch.Tensor, greedy: torch.Tensor,
                      derivable: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per draft step: how many drafts were evaluated (all earlier steps accepted, greedy token
    derivable) and how many of those were accepted. Inputs are [N, k]; outputs [k] each."""
    match = (drafts == greedy) & derivable
    reached = torch.ones(drafts.shape[0], dtype=torch.bool)
    evaluated, accepted = [], []
    for i in range(drafts.shape[1]):
        live = reached & derivable[:, i]
        evaluated.append(int(live.sum()))
        accepted.append(int((live & match[:, i]).sum()))
        reached = reached & match[:, i]
    return torch.tensor(evaluated), torch.tensor(accepted)


def acceptance_rates(evaluated: torch.Tensor, accepted: torch.Tensor) -> list[float | None]:
    """Conditional acceptance rate of each draft step (None where nothing was evaluated)."""
    return [None if e == 0 else float(a) / float(e) for e, a in zip(evaluated.tolist(), accepted.tolist())]


def acceptance_length(rates: list[float | None]) -> float:
    """Simulated mean accepted length per verify step: tau = 1 + sum_k prod_{i<=k} acc_i
    (an unevaluated step counts as 0, ending the chain)."""
    tau, prod = 1.0, 1.0
    for rate in rates:
        prod *= rate or 0.0
        tau += prod
    return tau
