"""fleetbench worker: runs GEMM cases on a host and writes one JSON record per case."""

__version__ = "0.2.0"
