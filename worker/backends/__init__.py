"""Backends: one module per library (`torch_gemm`, `reference`, `flashinfer_gemm`, `sgl_gemm`, `moe`,
`moe_fp4`), each imported only when a case of its backend runs. What each backend needs is declared in
worker/contract/catalog.py; whether its library imports here is asked here.
"""

from __future__ import annotations

import importlib
import importlib.util
from typing import Optional

from ..contract.catalog import BackendSpec


def availability_problem(spec: BackendSpec) -> Optional[str]:
    """Import error text when the backend's library cannot be imported here, or None."""
    if importlib.util.find_spec(spec.import_name) is None:
        return f"{spec.import_name} is not installed"
    try:
        importlib.import_module(spec.import_name)
    except Exception as exc:  # a broken install (ABI mismatch, missing CUDA lib) is "unavailable"
        return f"import {spec.import_name} failed: {type(exc).__name__}: {exc}".strip()[:500]
    return None


def flashinfer_mm_fp4_backends() -> Optional[list[str]]:
    """The `backend` values the installed FlashInfer's mm_fp4 declares (its Literal annotation), or None
    when FlashInfer cannot be imported or does not say."""
    try:
        import inspect
        import typing

        import flashinfer

        annotation = inspect.signature(flashinfer.mm_fp4).parameters["backend"].annotation
    except Exception:
        return None
    if typing.get_origin(annotation) is typing.Literal:
        return [str(v) for v in typing.get_args(annotation)]
    return None
