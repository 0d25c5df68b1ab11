"""Stand-in CUDA graphs on a GPU whose clock wanders, shared by everything it runs: two graphs timed apart
read it differently, timed interleaved alike. For the head-to-head timing tests, without a GPU."""

from __future__ import annotations

import random


class SharedGpu:
    """A clock the whole group shares: it wanders slowly (a power controller), so two graphs timed apart
    read it differently, timed interleaved alike."""

    def __init__(self, seed: int, wander: float):
        self.rng = random.Random(seed)
        self.level = 1.0
        self.wander = wander

    def tick(self) -> float:
        self.level = min(1.15, max(0.85, self.level + self.rng.gauss(0, self.wander)))
        return self.level


class FakeGraph:
    def __init__(self, gpu: SharedGpu, us: float, order: list, name: str):
        self.gpu, self.us, self.order, self.name, self.calls = gpu, us, order, name, 100

    def replay_us(self) -> float:
        self.order.append(self.name)
        return self.us * self.gpu.tick() * (1 + self.gpu.rng.gauss(0, 0.002))
