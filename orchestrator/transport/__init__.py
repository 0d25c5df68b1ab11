"""How the controller reaches a host: the seam (.base) and one module per connector (.local, .ssh),
with host-key handling beside the SSH connector (.hostkeys). Only .ssh imports paramiko and fabric."""
from __future__ import annotations

from ..inventory import Host
from .base import CommandResult, LineSink, Transport, TransportError, login_relative, shell_command

__all__ = ["CommandResult", "LineSink", "Transport", "TransportError", "login_relative", "make_transport",
           "shell_command"]


def make_transport(host: Host, *, accept_new: bool = False) -> Transport:
    """The connector for `host` (for a Slurm host: to its login node); nothing connects until .connect()."""
    if host.connector == "local":
        from .local import LocalTransport

        return LocalTransport(host)
    from .ssh import FabricTransport

    return FabricTransport(host, accept_new=accept_new)
