"""A fused MoE block against the composition it replaces, never against one GEMM.

A fused backend (kernel "fused", e.g. FlashInfer's cutlass_fused_moe) times a whole block: its case has
n = 3 * I and k = H (backends/moe_fp4.py). What it replaces is two projections of the same layer, with
the same routing: w13 (n = 2I, k = H) then w2 (n = H, k = I). Where a set of rows (one run or several)
holds a fused block and both projections timed by another backend of the same operand format on the
same host slot, the composition's time is their sum; the SwiGLU and the requantization between them
are not in it (no backend times them alone), so a fused block at 1.0x is already ahead by that much.
Rows pair by host slot, tokens and the routing as rows describe it (experts, top-k, routing, active
experts, the largest expert's M): the same sweep seed draws the same counts.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from .merge import Row


@dataclass(frozen=True)
class BlockComparison:
    """A fused block and the two projections it replaces (views/tables.py words it)."""

    slot: str
    label: str  # the fused row's label
    m: int  # the layer's tokens
    intermediate: int  # I
    hidden: int  # H
    fused_backend: str
    fused_us: float
    composed_backend: str
    w13_us: float  # n = 2I, k = H
    w2_us: float  # n = H, k = I

    @property
    def composed_us(self) -> float:
        return self.w13_us + self.w2_us

    @property
    def speedup(self) -> float:
        """composition / fused (> 1: the fused block is faster than its two projections alone)."""
        return self.composed_us / self.fused_us

    def as_dict(self) -> dict:
        return dict(asdict(self), composed_us=self.composed_us, speedup=self.speedup)


def _routing(r: Row) -> tuple:
    # A fleet row's slot counts its hosts with a result, which differs by backend: its host is "fleet".
    where = r.host if r.host == "fleet" else r.slot
    return (where, r.m, r.experts, r.top_k, r.routing, r.active_experts, r.max_expert_m)


def block_comparisons(rows: list[Row]) -> list[BlockComparison]:
    """Each ok fused block beside every backend of its operand format (loop or grouped) whose two
    projections of the same layer are ok on the same slot, in the rows' order."""
    from worker.contract.catalog import CATALOG

    def family(r: Row):
        spec = CATALOG.get(r.backend)
        return spec.family if spec is not None else None

    ok = [r for r in rows if r.status == "ok" and r.median_us and r.workload == "moe"]
    projections = {(_routing(r), r.n, r.k, r.backend): r for r in ok if r.kernel in ("loop", "grouped")}
    out = []
    for block in (r for r in ok if r.kernel == "fused" and r.n % 3 == 0):
        inter, hidden = block.n // 3, block.k
        for backend in dict.fromkeys(r.backend for r in ok if r.kernel in ("loop", "grouped")):
            w13 = projections.get((_routing(block), 2 * inter, hidden, backend))
            w2 = projections.get((_routing(block), hidden, inter, backend))
            if w13 is None or w2 is None or family(w13) != family(block):
                continue
            out.append(
                BlockComparison(
                    slot=block.slot,
                    label=block.label,
                    m=block.m,
                    intermediate=inter,
                    hidden=hidden,
                    fused_backend=block.backend,
                    fused_us=block.median_us,
                    composed_backend=backend,
                    w13_us=w13.median_us,
                    w2_us=w2.median_us,
                )
            )
    return out
