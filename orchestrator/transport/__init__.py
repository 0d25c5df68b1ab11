"""How the controller reaches a host: the seam (.base) and one module per transport (.local, .ssh),
with host-key handling beside the SSH transport (.hostkeys). Only .ssh imports paramiko and fabric."""

from __future__ import annotations

from ..config.inventory import Host
from .base import (
    CLEANUP_LIMIT_S,
    CommandResult,
    LineSink,
    Transport,
    TransportError,
    bounded,
    login_relative,
    shell_command,
)

__all__ = [
    "CLEANUP_LIMIT_S",
    "CommandResult",
    "LineSink",
    "Transport",
    "TransportError",
    "bounded",
    "login_relative",
    "make_transport",
    "shell_command",
]


def make_transport(host: Host, *, accept_new: bool = False) -> Transport:
    """The transport for `host`: where its commands run (for a host whose jobs a scheduler starts, its
    login node); nothing connects until .connect()."""
    if host.transport == "local":
        from .local import LocalTransport

        return LocalTransport(host)
    from .ssh import FabricTransport

    return FabricTransport(host, accept_new=accept_new)
