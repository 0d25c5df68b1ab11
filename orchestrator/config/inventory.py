"""hosts.yaml -> Inventory: strict pydantic models; errors name the file, the host and the field.

    defaults: {user: bench, python: ~/venv/bin/python, workdir: ~/.fleetbench}
    hosts:
      - {name: gpu1, hostname: 10.0.0.11, labels: [rtx6000], gpus: [0]}
      - {name: local, transport: local}
      - name: gpu2                      # two library environments on one GPU: hosts gpu2@fi072, gpu2@fi074
        hostname: 10.0.0.12
        environments:
          fi072: {python: ~/venv-fi072/bin/python, pins: [flashinfer-python==0.7.2.post1]}
          fi074: {python: ~/venv-fi074/bin/python, pins: [flashinfer-python==0.7.4]}

A host with `environments` becomes one host per environment, named `<host>@<environment>`: the same
machine, another interpreter (venv), its own pins over requirements/host-constraints.txt (what
`provision` installs there) and its own `env` additions. Selecting the host's name selects all of them.
"""

from __future__ import annotations

import fnmatch
import os
import re
import sys
from pathlib import Path
from typing import Annotated, Literal, Optional

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError, field_validator

from ..errors import InputError
from .yamlfile import PrintableText, describe_validation, read_yaml_mapping, refuse_non_finite

NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")


class SlurmSettings(BaseModel):
    """How a `launcher: slurm` host's jobs ask Slurm for a node (orchestrator/launchers/slurm.py)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    partition: Optional[PrintableText] = None  # None: the cluster's default partition
    gpus: int = Field(default=0, ge=0)  # GPUs per job (srun --gpus)
    account: Optional[PrintableText] = None
    time: Optional[PrintableText] = None  # srun --time, e.g. "00:30:00"
    # More srun/sbatch options, as an argv list, e.g. ["--qos=bench"] (YAML's list made the tuple a
    # frozen model keeps, also under strict validation).
    options: Annotated[
        tuple[PrintableText, ...], BeforeValidator(lambda v: tuple(v) if isinstance(v, list) else v)
    ] = ()

    @field_validator("options")
    @classmethod
    def _options(cls, options: tuple[str, ...]) -> tuple[str, ...]:
        for opt in options:
            if not opt.startswith("-") or opt == "--":
                raise ValueError(f"option {opt!r}: each item is one option, e.g. '--qos=bench'")
        return options


class HostFields(BaseModel):
    """Fields a host may set and `defaults` may give for all."""

    model_config = ConfigDict(extra="forbid")

    port: Optional[int] = Field(default=None, ge=1, le=65535)
    user: Optional[PrintableText] = None
    identity_file: Optional[PrintableText] = None
    python: Optional[PrintableText] = None
    workdir: Optional[PrintableText] = None
    env: Optional[dict[str, str]] = None  # values are never shown (they may be secrets)
    gpus: Optional[list[int]] = None
    labels: Optional[list[PrintableText]] = None
    # Where commands run (ssh | local) and how a job starts there (direct | slurm): two axes. `transport:
    # slurm` (fleetbench 0.2) still reads, as launcher slurm from a login node over SSH (or this machine).
    transport: Optional[Literal["ssh", "local", "slurm"]] = None
    launcher: Optional[Literal["direct", "slurm"]] = None
    slurm: Optional[SlurmSettings] = None  # with launcher slurm: partition, gpus per job, account, time, options
    # lock: hold the SM clock at the GPU's default applications clock for each sweep, reset after
    # (needs root on the host; worker/host/clocks.py). leave (default): the GPU manages its clock.
    clocks: Optional[Literal["leave", "lock"]] = None
    connect_timeout: Optional[float] = Field(default=None, gt=0)
    timeout: Optional[float] = Field(default=None, gt=0)  # per-host wall-clock limit, s (default: from the sweep)
    stall_timeout: Optional[float] = Field(default=None, ge=15)  # silent this long (s): stalled (default: the sweep's)
    known_hosts: Optional[PrintableText] = None
    proxy_jump: Optional[PrintableText] = None  # [user@]host[:port] of a jump host (like ssh -J)
    ssh_config: Optional[PrintableText] = None  # an OpenSSH client config file (default: ~/.ssh/config)

    @field_validator("env")
    @classmethod
    def _env_names(cls, env: Optional[dict[str, str]]) -> Optional[dict[str, str]]:
        for key in env or {}:
            if not re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", key):
                raise ValueError(f"invalid environment variable name {key!r}")
        return env


class EnvironmentEntry(BaseModel):
    """One library environment of a host: its interpreter, its pins, its extra environment variables."""

    model_config = ConfigDict(extra="forbid")

    python: PrintableText
    pins: list[PrintableText] = Field(
        default_factory=list
    )  # requirement pins "name==version" over the host constraints
    env: Optional[dict[str, str]] = None

    _env_names = field_validator("env")(HostFields._env_names.__func__)

    @field_validator("pins")
    @classmethod
    def _pins(cls, pins: list[str]) -> list[str]:
        for pin in pins:
            name, sep, version = pin.partition("==")
            if not sep or not re.match(r"^[A-Za-z0-9][A-Za-z0-9._-]*$", name.strip()) or not version.strip():
                raise ValueError(f"pin {pin!r}: expected name==version")
        return pins


class HostEntry(HostFields):
    name: str
    hostname: Optional[PrintableText] = None
    environments: Optional[dict[str, EnvironmentEntry]] = None

    @field_validator("environments")
    @classmethod
    def _environment_names(cls, envs):
        for name in envs or {}:
            if not NAME_RE.match(name):
                raise ValueError(f"environment name {name!r}: letters, digits, '.', '_' and '-'")
        if envs is not None and not envs:
            raise ValueError("give at least one environment, or leave 'environments' out")
        return envs

    @field_validator("name")
    @classmethod
    def _name(cls, name: str) -> str:
        if not NAME_RE.match(name):
            raise ValueError("host names use letters, digits, '.', '_' and '-' (it names folders)")
        return name


class Host(BaseModel):
    """A host with every default applied: what the rest of the controller works with."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    transport: Literal["ssh", "local"]  # where its commands run: this machine, or over SSH (a Slurm login node)
    launcher: Literal["direct", "slurm"] = "direct"  # how a job starts there (orchestrator/launchers)
    hostname: str
    port: Optional[int]  # None: whatever ssh_config says, else 22
    user: Optional[str]
    identity_file: Optional[str]
    python: str
    workdir: str
    env: dict[str, str]
    gpus: Optional[tuple[int, ...]]
    labels: tuple[str, ...]
    connect_timeout: float
    timeout: Optional[float]  # None: derived from the sweep's size (plan.wall_clock_limit)
    stall_timeout: Optional[float]  # None: the sweep's
    known_hosts: Optional[str]
    proxy_jump: Optional[str]
    ssh_config: Optional[str]
    environment: Optional[str] = None  # of a host with `environments`: this one's name (the host is name@environment)
    pins: tuple[str, ...] = ()  # this environment's pins over the host constraints
    slurm: Optional[SlurmSettings] = None  # launcher slurm: how its jobs ask for a node
    clocks: Literal["leave", "lock"] = "leave"  # lock: its SM clock held still for each sweep

    @property
    def machine(self) -> str:
        """The inventory entry this host comes from (its name without @environment)."""
        return self.name.split("@", 1)[0]

    def public_view(self) -> dict:
        """What a run manifest may store: environment values may be secrets, so only names are kept."""
        data = self.model_dump(mode="json")
        data["env"] = sorted(self.env)
        return data

    def differs_from(self, stored: dict) -> Optional[str]:
        """How this host is another machine than `stored` (a public_view kept with a run), or None."""
        current = self.public_view()
        stored = _two_axes(stored)
        for field in ("transport", "launcher", "hostname", "port", "user"):
            if field in stored and stored[field] != current.get(field):
                return f"{field} {current.get(field)!r}, the run's {stored[field]!r}"
        return None

    @property
    def address(self) -> str:
        if self.transport == "local":
            return "local" if self.launcher == "direct" else "local login"
        return f"{self.user + '@' if self.user else ''}{self.hostname}" + (f":{self.port}" if self.port else "")


class Inventory(BaseModel):
    model_config = ConfigDict(frozen=True)

    path: str
    hosts: tuple[Host, ...]

    def names(self) -> list[str]:
        return [h.name for h in self.hosts]


def load_inventory(path: Path) -> Inventory:
    """Read and validate hosts.yaml. Raises InputError naming file, host and field."""
    path = Path(path)
    raw = read_yaml_mapping(path, "inventory")
    # Validate hosts one by one so an error can name the host, not a list index.
    hosts_raw = raw.get("hosts")
    if not isinstance(hosts_raw, list) or not hosts_raw:
        raise InputError(f"{path}: field 'hosts': a non-empty list of hosts is required")
    problems = []
    try:
        refuse_non_finite(raw.get("defaults"), path, prefix="defaults: ")
    except InputError as exc:
        problems.append(str(exc))
    for i, item in enumerate(hosts_raw):
        label = item.get("name") if isinstance(item, dict) and isinstance(item.get("name"), str) else f"#{i + 1}"
        try:
            refuse_non_finite(item, path, prefix=f"host '{label}': ")
        except InputError as exc:
            problems.append(str(exc))
    if problems:
        raise InputError("\n".join(problems))
    # Strict: a value is taken as written, never converted (true is not port 1, "0" is not GPU 0).
    try:
        defaults = HostFields.model_validate(raw.get("defaults") or {}, strict=True)
    except ValidationError as exc:
        problems.append(describe_validation(path, exc, prefix="defaults: "))
        defaults = HostFields()
    unknown_top = set(raw) - {"defaults", "hosts"}
    for key in sorted(unknown_top):
        problems.append(f"{path}: field '{key}': unknown field (expected 'defaults' and 'hosts')")
    entries: list[HostEntry] = []
    for i, item in enumerate(hosts_raw):
        label = item.get("name") if isinstance(item, dict) and isinstance(item.get("name"), str) else f"#{i + 1}"
        try:
            entries.append(HostEntry.model_validate(item, strict=True))
        except ValidationError as exc:
            problems.append(describe_validation(path, exc, prefix=f"host '{label}': "))
    if problems:
        raise InputError("\n".join(problems))
    seen: set[str] = set()
    hosts = []
    for entry in entries:
        if entry.name in seen:
            raise InputError(f"{path}: host '{entry.name}': duplicate host name")
        seen.add(entry.name)
        host = _resolve(path, entry, defaults)
        if entry.environments is None:
            hosts.append(host)
            continue
        for env_name, env in entry.environments.items():
            hosts.append(
                host.model_copy(
                    update={
                        "name": f"{entry.name}@{env_name}",
                        "environment": env_name,
                        "pins": tuple(env.pins),
                        "python": env.python,
                        "env": {**host.env, **(env.env or {})},
                    }
                )
            )
    return Inventory(path=str(path), hosts=tuple(hosts))


def _pick(entry: HostEntry, defaults: HostFields, field: str):
    value = getattr(entry, field)
    return value if value is not None else getattr(defaults, field)


def _resolve(path: Path, entry: HostEntry, defaults: HostFields) -> Host:
    where = f"{path}: host '{entry.name}'"
    transport = _pick(entry, defaults, "transport")
    launcher = _pick(entry, defaults, "launcher") or "direct"
    if transport == "slurm":  # fleetbench 0.2: the Slurm launcher, from a login node over SSH or this machine
        if entry.launcher not in (None, "slurm"):
            raise InputError(f"{where}: field 'transport': 'slurm' is a launcher (launcher: slurm), not a transport")
        transport, launcher = ("ssh" if entry.hostname else "local"), "slurm"
    transport = transport or (
        "local" if entry.hostname is None and (entry.name == "local" or launcher == "slurm") else "ssh"
    )
    if transport == "ssh" and not entry.hostname:
        raise InputError(f"{where}: field 'hostname': required for transport ssh")
    slurm = _pick(entry, defaults, "slurm")
    if launcher == "slurm":
        slurm = slurm or SlurmSettings()
        if _pick(entry, defaults, "gpus") is not None:
            raise InputError(
                f"{where}: field 'gpus': a Slurm host's jobs get their GPUs from Slurm "
                "(slurm: {gpus: N}); one job per host entry"
            )
    elif entry.slurm is not None:
        raise InputError(f"{where}: field 'slurm': only for launcher slurm")
    else:
        slurm = None
    identity = _pick(entry, defaults, "identity_file")
    if identity is not None:
        identity = _relative_to(path, os.path.expanduser(identity))
        if transport == "ssh" and not os.path.isfile(identity):
            raise InputError(f"{where}: field 'identity_file': key file not found: {identity}")
    known_hosts = _pick(entry, defaults, "known_hosts")
    if known_hosts is not None:
        known_hosts = _relative_to(path, os.path.expanduser(known_hosts))
    ssh_config = _pick(entry, defaults, "ssh_config")
    if ssh_config is not None:
        ssh_config = _relative_to(path, os.path.expanduser(ssh_config))
        if not os.path.isfile(ssh_config):
            raise InputError(f"{where}: field 'ssh_config': file not found: {ssh_config}")
    python = _pick(entry, defaults, "python")
    if python is None:
        # The local host runs the controller's own interpreter unless told otherwise.
        python = sys.executable if transport == "local" else "python3"
    workdir = _pick(entry, defaults, "workdir") or "~/.fleetbench"
    env = dict(defaults.env or {})
    env.update(entry.env or {})
    gpus = _pick(entry, defaults, "gpus")
    if gpus is not None and len(set(gpus)) != len(gpus):
        raise InputError(f"{where}: field 'gpus': duplicate GPU index")
    return Host(
        name=entry.name,
        transport=transport,
        launcher=launcher,
        hostname=entry.hostname or "localhost",
        port=_pick(entry, defaults, "port"),
        user=_pick(entry, defaults, "user"),
        identity_file=identity,
        python=python,
        workdir=workdir,
        env=env,
        gpus=tuple(gpus) if gpus is not None else None,
        labels=tuple(sorted(set(defaults.labels or []) | set(entry.labels or []))),
        connect_timeout=_pick(entry, defaults, "connect_timeout") or 10.0,
        timeout=_pick(entry, defaults, "timeout"),
        stall_timeout=_pick(entry, defaults, "stall_timeout"),
        known_hosts=known_hosts,
        proxy_jump=_pick(entry, defaults, "proxy_jump"),
        ssh_config=ssh_config,
        slurm=slurm,
        clocks=_pick(entry, defaults, "clocks") or "leave",
    )


def _two_axes(stored: dict) -> dict:
    """A host as stored by a run of fleetbench 0.2 (`transport: slurm`, `login`) in today's two axes."""
    if stored.get("transport") != "slurm":
        return stored
    return {**stored, "transport": stored.get("login", "local"), "launcher": "slurm"}


def _relative_to(inventory_path: Path, value: str) -> str:
    """Relative paths in hosts.yaml are relative to the file, not to wherever the CLI was started."""
    p = Path(value)
    return str(p if p.is_absolute() else (inventory_path.parent / p))


def select_hosts(inventory: Inventory, selector: Optional[str]) -> list[Host]:
    """Hosts matching a comma-separated selector of names, globs or `label:NAME` (all when None), less
    those of `!TERM` terms (as Ansible's --limit: `rtx*,!rtx03` is every rtx host but rtx03; a selector
    of exclusions alone starts from every host).

    Raises InputError when a term matches nothing, so a typo never silently runs on zero hosts.
    """
    if not selector:
        return list(inventory.hosts)
    terms = [t.strip() for t in selector.split(",") if t.strip()]
    included = [t for t in terms if not t.startswith("!")]
    chosen = {h.name for h in inventory.hosts} if not included else set()
    for term in included:
        chosen |= {h.name for h in _matching(inventory, term)}
    for term in (t[1:] for t in terms if t.startswith("!")):
        chosen -= {h.name for h in _matching(inventory, term)}
    if not chosen:
        raise InputError(f"--hosts {selector!r} leaves no host (hosts: {', '.join(inventory.names())})")
    return [h for h in inventory.hosts if h.name in chosen]


def _matching(inventory: Inventory, term: str) -> list[Host]:
    if term.startswith("label:"):
        label = term[len("label:") :]
        matches = [h for h in inventory.hosts if label in h.labels]
    else:
        matches = [
            h
            for h in inventory.hosts
            if fnmatch.fnmatchcase(h.name, term) or fnmatch.fnmatchcase(h.machine, term) or term in h.labels
        ]
    if not matches:
        raise InputError(
            f"--hosts: '{term}' matches no host in {inventory.path} (hosts: {', '.join(inventory.names())})"
        )
    return matches
