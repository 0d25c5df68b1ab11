"""The SSH transport: one fabric Connection per host, reused for every step (connect once, SFTP once).

fabric builds the connection (ssh_config, ProxyJump); commands run on a paramiko channel with one
select loop. Host keys are verified through .hostkeys.
"""

from __future__ import annotations

import errno
import os
import shlex
import socket
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

from worker.contract.protocol import LineDecoder

from ..config.inventory import Host
from .base import CommandResult, LineSink, StallLimit, TransportError, login_relative, shell_command, stall_limit
from .hostkeys import AcceptNewPolicy, host_key_name, load_known_hosts

KEEPALIVE_S = 15


class FabricTransport:
    """SSH through one fabric Connection per host, reused for every step (connect once, SFTP once).

    Host keys are verified against known_hosts: unknown keys are refused unless `accept_new`, which
    records them (OpenSSH's accept-new); a changed key is always refused.
    """

    def __init__(self, host: Host, *, accept_new: bool = False):
        self.host = host
        self.accept_new = accept_new
        self._conn = None
        self._chain: list = []  # the jump hosts' connections, first one first, then the host's
        self._sftp = None

    # -- connection -------------------------------------------------------------------------------
    def connect(self) -> None:
        import paramiko
        from fabric import Connection

        h = self.host
        known_hosts = h.known_hosts or os.path.expanduser("~/.ssh/known_hosts")
        ct = h.connect_timeout
        connect_kwargs = dict(
            timeout=ct,
            banner_timeout=ct,
            auth_timeout=ct,
            channel_timeout=ct,
            allow_agent=True,
            look_for_keys=h.identity_file is None,
        )
        if h.identity_file:
            connect_kwargs["key_filename"] = h.identity_file
        config = _fabric_config(h.ssh_config)  # an explicit file, else ~/.ssh/config as usual
        gateway = None
        if h.proxy_jump:
            gateway = Connection(h.proxy_jump, connect_kwargs=dict(connect_kwargs), config=config)
        kwargs = dict(connect_kwargs=connect_kwargs, user=h.user, port=h.port, gateway=gateway)
        conn = Connection(h.hostname, config=config, **{k: v for k, v in kwargs.items() if v is not None})
        self._chain = chain = _connection_chain(conn)
        for hop in chain:
            if hop is not conn:
                # A jump host from ssh_config gets only what ssh_config says: add the timeouts (and the
                # inventory's key where ssh_config names none), else a jump host that stops answering
                # holds the run for paramiko's defaults (an hour, to open the channel to the host).
                hop.connect_kwargs = {**connect_kwargs, **hop.connect_kwargs}
            # fabric installs a policy that accepts any unknown key; replace it before anything connects.
            hop.client.set_missing_host_key_policy(
                AcceptNewPolicy(known_hosts) if self.accept_new else paramiko.RejectPolicy()
            )
            load_known_hosts(hop.client, known_hosts, host_key_name(f"{hop.host}:{hop.port}"))
        first = chain[0]
        try:
            if not first.gateway:  # connected to from here (not through a ProxyCommand)
                where = _endpoint(first, is_jump=first is not conn).label()
                first.connect_kwargs["sock"] = _nodelay_socket(first.host, first.port, ct, where)
            conn.open()
        except TransportError:
            self.close()
            raise
        except Exception as exc:
            # The first machine on the way that did not let us in is the one that failed.
            failed = next((hop for hop in chain if not _logged_in(hop)), conn)
            # paramiko's reader thread keeps the root cause (e.g. no banner) and the caller sees a
            # generic "No existing session": classify the cause.
            cause = getattr(failed.client.get_transport(), "saved_exception", None) or exc
            self.close()
            raise classify_connect_error(cause, h, _endpoint(failed, is_jump=failed is not conn), known_hosts) from None
        # Keepalives make a dead peer (host down, network cut) an error on the connection instead of a
        # silent one; a frozen peer is caught by the stall timeout of the command that waits on it.
        conn.client.get_transport().set_keepalive(KEEPALIVE_S)
        self._conn = conn

    def _sftp_client(self):
        if self._sftp is None:
            import paramiko

            try:
                self._sftp = self._conn.sftp()
            except paramiko.SSHException as exc:  # the server closed the channel: no sftp subsystem
                raise TransportError(
                    "failed",
                    f"{self.host.address}: the SSH server refused an SFTP session ({exc}): "
                    "fleetbench uploads its files over SFTP; enable it in sshd_config "
                    "(Subsystem sftp internal-sftp)",
                ) from None
            # Without a timeout an SFTP request to a frozen host waits forever.
            self._sftp.get_channel().settimeout(max(30.0, 3 * self.host.connect_timeout))
        return self._sftp

    def path(self, p: str) -> str:
        return login_relative(p)

    # -- files ------------------------------------------------------------------------------------
    def exists(self, path: str) -> bool:
        return _unless_missing(lambda: self._sftp_client().stat(self.path(path)) is not None, False)

    def makedirs(self, path: str) -> None:
        """mkdir -p over SFTP, from the deepest existing ancestor: one round trip when the parent exists."""
        sftp = self._sftp_client()
        target = self.path(path).rstrip("/") or "/"
        missing = []
        current = target
        while current not in ("", ".", "/"):
            try:
                sftp.mkdir(current)
                break
            except IOError:
                if self._is_dir(current):
                    break
                missing.append(current)  # its parent is missing (or it is not creatable): go up
                current = current.rsplit("/", 1)[0] if "/" in current else ""
        for folder in reversed(missing):
            try:
                sftp.mkdir(folder)
            except IOError as exc:
                if not self._is_dir(folder):
                    raise TransportError("failed", f"cannot create remote folder {folder}: {exc}") from None

    def _is_dir(self, path: str) -> bool:
        import stat

        try:
            return stat.S_ISDIR(self._sftp_client().stat(path).st_mode)
        except IOError:
            return False

    def put(self, local: Path, remote: str, *, atomic: bool = False) -> int:
        """Upload; returns the bytes sent. The size check after writing (paramiko's confirm) is what
        catches a full remote disk: pipelined SFTP writes can fail without an error. `atomic` writes
        a temporary name and renames it: content-addressed files (worker, script) are trusted by
        their name alone later, so a cut-off upload must never appear under it."""
        target = self.path(remote)
        sftp = self._sftp_client()
        tmp = f"{target}.part-{os.getpid()}-{threading.get_ident()}" if atomic else target
        try:
            sftp.put(str(local), tmp, confirm=True)
            if atomic:
                sftp.posix_rename(tmp, target)
        except OSError as exc:
            if atomic:
                _unless_missing(lambda: sftp.remove(tmp), None)
            raise TransportError(
                "failed",
                f"upload of {local.name} to {target} failed: {exc or type(exc).__name__}"
                " (remote disk full or not writable?)",
            ) from None
        return local.stat().st_size

    def get(self, remote: str, local: Path) -> bool:
        return _unless_missing(lambda: self._sftp_client().get(self.path(remote), str(local)) or True, False)

    def read_text(self, remote: str) -> Optional[str]:
        def read() -> str:
            with self._sftp_client().open(self.path(remote), "r") as f:
                return f.read().decode("utf-8", errors="replace")

        return _unless_missing(read, None)

    # -- commands ---------------------------------------------------------------------------------
    def run(self, argv, *, env, timeout, on_line, stdin=None, stall_timeout=None) -> CommandResult:
        """Exec on a channel of the open connection, streaming lines as they come. One thread and a
        select() per command (fabric's runner adds three threads and a polling loop per command,
        which a fan-out pays once per host). The exit code is -1 when the connection died first."""
        import paramiko

        command = shell_command([self.path(a) if a.startswith("~") else a for a in argv], env)
        deadline = None if timeout is None else time.monotonic() + timeout
        try:
            chan = self._conn.client.get_transport().open_session(timeout=self.host.connect_timeout)
            chan.exec_command(command)
        except (paramiko.SSHException, OSError, EOFError, AttributeError):
            return CommandResult(exit_code=-1)  # no transport (AttributeError: it was closed) or it died
        try:
            if stdin:
                chan.settimeout(timeout)
                try:
                    chan.sendall(stdin)
                except (OSError, EOFError, paramiko.SSHException):
                    pass  # the command ended without reading it (e.g. it asks for a worker upload first)
            chan.shutdown_write()
            return _pump_channel(chan, deadline, on_line, stall_timeout)
        finally:
            chan.close()

    def describe(self, argv, env) -> str:
        return f"ssh {self.host.address}: " + shell_command(
            [self.path(a) if a.startswith("~") else a for a in argv], env
        )

    def close(self) -> None:
        # fabric closes a connection without its gateway: close the jump hosts' connections too.
        for conn in reversed(self._chain):
            try:
                conn.close()
            except Exception:
                pass


def _pump_channel(chan, deadline: Optional[float], on_line: LineSink, stall_timeout: StallLimit) -> CommandResult:
    """Read stdout and stderr until EOF (or the deadline, or `stall_timeout` seconds without a byte),
    then the exit status."""
    import select

    out, err = LineDecoder("stdout", on_line), LineDecoder("stderr", on_line)
    timed_out = stalled = False
    last_heard = time.monotonic()
    try:
        while True:
            while chan.recv_ready():
                out.feed(chan.recv(65536))
                last_heard = time.monotonic()
            while chan.recv_stderr_ready():
                err.feed(chan.recv_stderr(65536))
                last_heard = time.monotonic()
            if chan.eof_received or chan.closed:
                if not chan.recv_ready() and not chan.recv_stderr_ready():
                    break
                continue
            now = time.monotonic()
            limit = stall_limit(stall_timeout)
            if limit is not None and now - last_heard > limit:
                stalled = True
                break
            wait = 1.0 if deadline is None else deadline - now
            if wait <= 0:
                timed_out = True
                break
            # The channel's fileno is a pipe set while either buffer holds data or the channel ended.
            select.select([chan], [], [], min(wait, 1.0))
    finally:
        out.close()
        err.close()
    if timed_out or stalled:
        return CommandResult(exit_code=-1, timed_out=timed_out, stalled=stalled)
    # OpenSSH may send the exit status just after EOF; a closed channel sets the event without one.
    chan.status_event.wait(10)
    return CommandResult(exit_code=chan.exit_status if chan.status_event.is_set() else -1)


def _unless_missing(fn: Callable, default):
    """fn(), or `default` when the remote file does not exist (SFTP reports ENOENT as an IOError)."""
    try:
        return fn()
    except IOError as exc:
        if getattr(exc, "errno", None) == errno.ENOENT:
            return default
        raise


class _QuickAckSocket(socket.socket):
    """A socket that acknowledges every read at once (Linux TCP_QUICKACK, which the kernel clears
    again, hence after each recv). sshd leaves Nagle on for sessions without a terminal: when it
    writes two small packets in a row (channel confirmation, exit status + EOF + close) the second
    one waits for our ACK, and a delayed ACK holds it for the kernel's delayed-ACK timeout."""

    def recv(self, bufsize: int, flags: int = 0) -> bytes:
        data = super().recv(bufsize, flags)
        try:
            self.setsockopt(socket.IPPROTO_TCP, socket.TCP_QUICKACK, 1)
        except OSError:
            pass
        return data


def _nodelay_socket(host: str, port: int, timeout: float, where: str) -> socket.socket:
    # paramiko leaves Nagle on; with it each small SSH packet waits for an ACK.
    # An ASCII name goes in as bytes: a str is IDNA-encoded, and that codec is slow to import.
    sock = socket.create_connection((host.encode("ascii") if host.isascii() else host, port), timeout=timeout)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    if hasattr(socket, "TCP_QUICKACK"):  # Linux only; elsewhere the plain socket is kept
        sock = _QuickAckSocket(sock.family, sock.type, sock.proto, fileno=sock.detach())
        sock.settimeout(timeout)
    # A wedged or frozen sshd accepts TCP and then says nothing; paramiko reports that as an opaque
    # "No existing session". Peek (without consuming) for the banner to say what happened.
    try:
        if not sock.recv(4, socket.MSG_PEEK):
            sock.close()
            raise ConnectionRefusedError("closed before the SSH banner")
    except socket.timeout:
        sock.close()
        raise TransportError(
            "timeout",
            f"{where} accepted the connection but sent no SSH banner within {timeout:g} s (host frozen or overloaded?)",
        ) from None
    return sock


_FABRIC_CONFIGS: dict = {}
_FABRIC_CONFIGS_LOCK = threading.Lock()


def _fabric_config(ssh_config: Optional[str]):
    """One fabric Config per ssh_config file and process, shared by its Connections (which only read
    it, given connect_kwargs of their own): building one reads the ssh_config files and fabric's own
    config files again, per host."""
    from fabric import Config

    with _FABRIC_CONFIGS_LOCK:
        config = _FABRIC_CONFIGS.get(ssh_config)
        if config is None:
            config = _FABRIC_CONFIGS[ssh_config] = Config(runtime_ssh_path=ssh_config) if ssh_config else Config()
        return config


def _connection_chain(conn) -> list:
    """The connections on the way to `conn` (its jump hosts, first one first), then `conn` itself. A
    ProxyCommand gateway is a command, not a connection: nothing of it to check."""
    from fabric import Connection

    chain = [conn]
    while isinstance(chain[0].gateway, Connection):
        chain.insert(0, chain[0].gateway)
    return chain


def _logged_in(conn) -> bool:
    transport = conn.client.get_transport()
    return transport is not None and transport.is_authenticated()


@dataclass(frozen=True)
class Endpoint:
    """A machine SSH talks to on the way to a host: the host itself, or a jump host in front of it."""

    address: str  # host:port, as connected to
    user: Optional[str]
    spec: str  # as ssh_config or the inventory names it ([user@]host[:port] or an alias)
    is_jump: bool
    via: Optional["Endpoint"] = None  # the jump host it is reached through

    @property
    def key_name(self) -> str:
        return host_key_name(self.address)

    def label(self, *, key: bool = False) -> str:
        """Its address (or with `key`, its known_hosts name), saying what it is: a jump host, behind one."""
        name = self.key_name if key else self.address
        text = f"jump host {name}" if self.is_jump else name
        return text + (f" (behind {self.via.label(key=key)})" if self.via else "")


def _endpoint(conn, *, is_jump: bool) -> Endpoint:
    from fabric import Connection

    via = _endpoint(conn.gateway, is_jump=True) if isinstance(conn.gateway, Connection) else None
    return Endpoint(
        address=f"{conn.host}:{conn.port}", user=conn.user, spec=conn.original_host, is_jump=is_jump, via=via
    )


def keyscan_command(endpoint: Endpoint, host: Host, known_hosts: str) -> Optional[str]:
    """A command that appends `endpoint`'s host keys to known_hosts, run where its address means that
    machine: here, or on the jump host in front of it (over ssh). None beyond one jump host: ssh passes
    neither the key nor the known_hosts file on to the jump hosts it goes through."""
    hostname, port = endpoint.address.rsplit(":", 1)
    scan = ["ssh-keyscan", "-p", port, hostname]
    if endpoint.via is not None:
        if endpoint.via.via is not None:
            return None
        ssh = ["ssh", "-o", f"UserKnownHostsFile={known_hosts}"]
        ssh += ["-F", host.ssh_config] if host.ssh_config else []
        ssh += ["-i", host.identity_file] if host.identity_file else []
        scan = ssh + [f"ssh://{endpoint.via.spec}", *scan]
    return f"{shlex.join(scan)} >> {shlex.quote(known_hosts)}"


def classify_connect_error(exc: BaseException, host: Host, endpoint: Endpoint, known_hosts: str) -> TransportError:
    """Map socket / paramiko exceptions to an outcome and a sentence that says what to do. Each names the
    machine it is about: the host, or the jump host on the way to it."""
    import paramiko

    where = endpoint.label()
    if isinstance(exc, socket.gaierror):
        hostname = endpoint.address.rsplit(":", 1)[0]
        return TransportError(
            "unreachable",
            f"cannot resolve host name {hostname!r}" + (f" of jump host {endpoint.spec}" if endpoint.is_jump else ""),
        )
    # paramiko wraps a refused connection (to a jump host) in one error per address tried.
    causes = exc.errors.values() if isinstance(exc, paramiko.ssh_exception.NoValidConnectionsError) else [exc]
    if all(isinstance(cause, ConnectionRefusedError) for cause in causes):
        return TransportError("unreachable", f"connection refused by {where} (is sshd running?)")
    if isinstance(exc, paramiko.ssh_exception.NoValidConnectionsError):
        return TransportError("unreachable", f"cannot connect to {where}: {exc}")
    if isinstance(exc, paramiko.ChannelException) and endpoint.via is not None:
        return TransportError(
            "unreachable", f"jump host {endpoint.via.address} could not connect to {endpoint.address}: {exc.text}"
        )
    if isinstance(exc, (socket.timeout, TimeoutError)):
        return TransportError("unreachable", f"no answer from {where} within {host.connect_timeout:g} s")
    if isinstance(exc, OSError) and not isinstance(exc, paramiko.SSHException):
        return TransportError("unreachable", f"cannot connect to {where}: {getattr(exc, 'strerror', None) or exc}")
    whose_key = endpoint.label(key=True)
    if isinstance(exc, paramiko.BadHostKeyException):
        remove = shlex.join(["ssh-keygen", "-f", known_hosts, "-R", endpoint.key_name])
        return TransportError(
            "auth-failed",
            f"host key for {whose_key} CHANGED (possible man-in-the-middle); if the host was reinstalled: {remove}",
        )
    if isinstance(exc, paramiko.AuthenticationException):
        who = f"{endpoint.user or os.environ.get('USER', '?')}@{endpoint.address}"
        if endpoint.is_jump:
            return TransportError("auth-failed", f"authentication failed for jump host {who}")
        key = f" with key {host.identity_file}" if host.identity_file else ""
        return TransportError("auth-failed", f"authentication failed for {who}{key}")
    text = str(exc)
    if "No authentication methods available" in text:
        return TransportError(
            "auth-failed",
            f"no key to offer to {where}: set identity_file, or load a key into ssh-agent (SSH_AUTH_SOCK)",
        )
    if "not found in known_hosts" in text:
        scan = keyscan_command(endpoint, host, known_hosts)
        return TransportError(
            "auth-failed",
            f"unknown host key for {whose_key}: verify it, then run with "
            "--accept-new" + (f" or add it: {scan}" if scan else ""),
        )
    if "No existing session" in text:  # paramiko's handshake ran out of time before the reader thread did
        return TransportError(
            "timeout",
            f"{where} did not complete the SSH handshake within "
            f"{host.connect_timeout:g} s (host frozen or overloaded?)",
        )
    if "banner" in text.lower():
        return TransportError(
            "timeout",
            f"{where} accepted the connection but sent no SSH banner within "
            f"{host.connect_timeout:g} s (host frozen or overloaded?)",
        )
    return TransportError("unreachable", f"SSH to {where} failed: {type(exc).__name__}: {text}")
