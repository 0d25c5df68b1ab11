"""When a measurement is noisy: shared by the analyses that name it (diff) and the views that show it
(views/tables.py writes its width)."""

from __future__ import annotations

# A row is noisy when its median's CI half-width (rel_ci) is beyond this: `show` notes it, `diff` names it.
NOISY_REL_CI = 0.05
