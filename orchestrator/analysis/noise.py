"""When a measurement is noisy, and how its noise is written: shared by the analyses that name it
(diff) and the views that show it."""

from __future__ import annotations

# A row is noisy when its median's CI half-width (rel_ci) is beyond this: `show` notes it, `diff` names it.
NOISY_REL_CI = 0.05


def plus_minus(rel: float, decimals: int = 0) -> str:
    """A CI half-width relative to its median, `±12%`; beyond ±100% the exact width says nothing more
    (the rounds disagree wildly; JSON keeps the number)."""
    return f"±{rel:.{decimals}%}" if rel <= 1 else "wider than ±100%"
