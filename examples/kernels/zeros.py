"""A wrong kernel, on purpose: it returns zeros (the FlashInfer "returns zeros" calling mistake in
miniature). Its cases end `failed` with the error figures, and it is never timed."""

import torch

FAMILY = "bf16"


def prepare(a, b, out_dtype):
    out = torch.zeros((a.shape[0], b.shape[0]), dtype=out_dtype, device=a.device)
    return lambda: out
