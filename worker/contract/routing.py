"""MoE routing: how many tokens reach each expert, from a routing model and a seed.

Pure Python (the controller expands sweeps with it; the counts are stored in each case, so a record
says exactly which per-expert M it ran, whatever a later version's sampler would draw):
- uniform: every token picks top_k distinct experts, each equally likely;
- zipf: expert popularity falls as 1 / rank**skew (skew 0 is uniform; ~1 is a strongly skewed
  router), every token picks top_k distinct experts by that popularity;
- file: recorded per-expert token counts (e.g. from a serving trace), one integer per expert.
Per-expert M therefore follows the routing's draw, not an average of tokens * top_k / experts.
"""

from __future__ import annotations

import heapq
import math
import random
from pathlib import Path

ROUTINGS = ("uniform", "zipf", "file")


def draw_counts(experts: int, top_k: int, tokens: int, routing: str, skew: float = 1.0, seed: int = 0) -> list[int]:
    """Tokens per expert when `tokens` tokens each pick `top_k` distinct experts."""
    if not 0 < top_k <= experts:
        raise ValueError(f"top_k must be in 1..experts ({experts}), got {top_k}")
    if tokens <= 0:
        raise ValueError(f"tokens must be positive, got {tokens}")
    if routing == "uniform":
        weights = [1.0] * experts
    elif routing == "zipf":
        if skew < 0:
            raise ValueError(f"zipf skew must be >= 0, got {skew}")
        weights = [1.0 / (rank + 1) ** skew for rank in range(experts)]
    else:
        raise ValueError(f"routing {routing!r} draws nothing (known: uniform, zipf; file gives counts)")
    rng = random.Random(f"moe-routing:{experts}:{top_k}:{tokens}:{routing}:{skew}:{seed}")
    # Which expert is popular is itself random (a router has no reason to favour expert 0).
    order = list(range(experts))
    rng.shuffle(order)
    log_w = [math.log(weights[rank]) for rank in range(experts)]
    counts = [0] * experts
    for _ in range(tokens):
        # Gumbel top-k: k distinct experts drawn without replacement in proportion to their weights.
        keys = [log_w[r] - math.log(-math.log(rng.random() or 1e-300)) for r in range(experts)]
        for rank in heapq.nlargest(top_k, range(experts), key=keys.__getitem__):
            counts[order[rank]] += 1
    return counts


def read_counts_file(path: Path, experts: int) -> list[int]:
    """Per-expert token counts from a file: a JSON / YAML list or whitespace- or comma-separated
    integers, one per expert. Raises ValueError saying what is wrong."""
    text = Path(path).read_text()
    try:
        values = [int(v) for v in text.replace("[", " ").replace("]", " ").replace(",", " ").split()]
    except ValueError:
        raise ValueError(f"{path}: expected integers (tokens per expert), one per expert") from None
    if len(values) != experts:
        raise ValueError(f"{path}: {len(values)} counts for {experts} experts")
    if any(v < 0 for v in values) or not any(values):
        raise ValueError(f"{path}: counts must be >= 0 and not all zero")
    return values


def describe(routing: str, skew: float | None, source: str = "") -> str:
    if routing == "zipf":
        return f"zipf {skew:g}"
    if routing == "file":
        return f"counts {Path(source).name}" if source else "recorded counts"
    return routing
