#!/usr/bin/env python3
"""Record the signatures of library functions the worker calls, read from a wheel's Python sources.

    python tests/contracts/record_signatures.py WHEEL MODULE_FILE:FUNCTION [...] > tests/contracts/NAME-VERSION.json

e.g. for sgl-kernel, whose wheel (~0.5 GB, CUDA-only) cannot be installed where the tests run:
    pip download --no-deps sgl-kernel==0.3.21 -d /tmp/w
    python tests/contracts/record_signatures.py /tmp/w/sgl_kernel-0.3.21-*.whl \\
        sgl_kernel/gemm.py:scaled_fp4_quant sgl_kernel/gemm.py:cutlass_scaled_fp4_mm \\
        sgl_kernel/gemm.py:fp8_scaled_mm sgl_kernel/gemm.py:scaled_fp4_experts_quant \\
        sgl_kernel/moe.py:cutlass_fp4_group_mm > tests/contracts/sgl_kernel-0.3.21.json

and for FlashInfer (pip download --no-deps flashinfer-python==0.7.2.post1 -d /tmp/w):
    python tests/contracts/record_signatures.py /tmp/w/flashinfer_python-0.7.2.post1-*.whl \\
        flashinfer/gemm/gemm_base.py:mm_fp4 flashinfer/gemm/gemm_base.py:bmm_fp8 \\
        flashinfer/quantization/fp4_quantization.py:nvfp4_quantize \\
        flashinfer/quantization/fp4_quantization.py:fp4_quantize \\
        flashinfer/gemm/gemm_base.py:group_gemm_nvfp4_nt_groupwise flashinfer/fused_moe/core.py:cutlass_fused_moe \\
        flashinfer/autotuner/autotuner.py:autotune > tests/contracts/flashinfer_python-0.7.2.post1.json

The record holds, per function, its parameters in order (name, kind, whether it has a default, the
default's source text) and whether a package's __init__ exports the name (`exported_from`: the outermost
one on the module's path that does, e.g. flashinfer.gemm for group_gemm_nvfp4_nt_groupwise); tests/test_fp4_contracts.py
binds the worker's calls against it. Nothing in the wheel is imported or run: its files are parsed.
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import json
import sys
import zipfile
from email.parser import Parser
from pathlib import Path


def _parameters(fn: ast.FunctionDef) -> list[dict]:
    a = fn.args

    def entry(arg: ast.arg, kind: str, default) -> dict:
        return {
            "name": arg.arg,
            "kind": kind,
            "default": None if default is None else ast.unparse(default),
            "annotation": None if arg.annotation is None else ast.unparse(arg.annotation),
        }

    positional = [*a.posonlyargs, *a.args]
    defaults = [None] * (len(positional) - len(a.defaults)) + list(a.defaults)
    params = [
        entry(arg, "POSITIONAL_ONLY" if i < len(a.posonlyargs) else "POSITIONAL_OR_KEYWORD", defaults[i])
        for i, arg in enumerate(positional)
    ]
    if a.vararg:
        params.append(entry(a.vararg, "VAR_POSITIONAL", None))
    params += [entry(arg, "KEYWORD_ONLY", default) for arg, default in zip(a.kwonlyargs, a.kw_defaults)]
    if a.kwarg:
        params.append(entry(a.kwarg, "VAR_KEYWORD", None))
    return params


def _defines(wheel: zipfile.ZipFile, init: str, name: str) -> bool:
    try:
        tree = ast.parse(wheel.read(init))
    except KeyError:
        return False
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and any((al.asname or al.name) == name for al in node.names):
            return True
        if isinstance(node, ast.FunctionDef) and node.name == name:
            return True
    return False


def _exported_from(wheel: zipfile.ZipFile, path: str, name: str) -> str | None:
    """The outermost package on the module's path whose __init__ exports `name` (flashinfer, else
    flashinfer.gemm for flashinfer/gemm/gemm_base.py), or None."""
    parts = path.split("/")[:-1]
    for depth in range(1, len(parts) + 1):
        if _defines(wheel, "/".join(parts[:depth] + ["__init__.py"]), name):
            return ".".join(parts[:depth])
    return None


def record(wheel_path: Path, targets: list[str]) -> dict:
    with zipfile.ZipFile(wheel_path) as wheel:
        meta_name = next(n for n in wheel.namelist() if n.endswith(".dist-info/METADATA"))
        meta = Parser().parsestr(wheel.read(meta_name).decode("utf-8", errors="replace"))
        functions = {}
        for target in targets:
            path, name = target.split(":")
            tree = ast.parse(wheel.read(path))
            found = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == name]
            if not found:
                raise SystemExit(f"{wheel_path.name}: no top-level function {name} in {path}")
            exported_from = _exported_from(wheel, path, name)
            functions[name] = {
                "module": path[:-3].replace("/", "."),
                "exported": exported_from is not None,
                "exported_from": exported_from,
                "parameters": _parameters(found[-1]),
            }
    return {
        "package": meta["Name"],
        "version": meta["Version"],
        "wheel": wheel_path.name,
        "wheel_sha256": hashlib.sha256(wheel_path.read_bytes()).hexdigest(),
        "functions": functions,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("wheel", type=Path)
    ap.add_argument("targets", nargs="+", help="MODULE_FILE:FUNCTION, e.g. sgl_kernel/gemm.py:fp8_scaled_mm")
    args = ap.parse_args()
    json.dump(record(args.wheel, args.targets), sys.stdout, indent=1)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
