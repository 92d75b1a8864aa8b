"""The sandbox of the `local` backend's jobs: bubblewrap (Debian's `bubblewrap`, the program
`bwrap`), the unprivileged sandbox Flatpak is built on.

Every task of the local backend runs as the platform's own Unix user: without a sandbox, a demo
job of one team reads the other team's job folders and output, the scheduler's records (every
job's environment in them) and the platform's SQLite database. Inside the sandbox a task sees
only:

- its own job directory, read-write, at the same path as outside (the paths the platform writes
  into the script's environment still hold);
- the system, read-only: `/usr` and the `/bin`, `/sbin` and `/lib*` beside it, and of `/etc`
  only what programs read to run (`ETC_ENTRIES`: users and groups, the dynamic linker's cache,
  Debian's alternatives, time zones, certificates, ...), never the rest (`/etc/shadow`, the
  SSH host keys, the services' configuration);
- a `/tmp`, `/proc` and `/dev` of its own.

Nothing else exists inside: not the repository, not `var/` (the SQLite database, the broker's
files, every other job's folder, the scheduler's state under `.local-scheduler`), not /root or
/home.

Namespaces: its own PID namespace (it sees and signals only its own processes, and nothing of it
escapes a kill by leaving its session), its own IPC and UTS namespaces, and its own network
namespace, which holds a loopback interface and nothing else. A demo job has no business on the
network, least of all on this machine's loopback, where the platform's own services listen
(PostgreSQL, Redis, the local Stripe server, the web server itself): with the network shared, a
job could talk to the database directly. Every capability is dropped (`--cap-drop ALL`: a
platform running as root would otherwise hand them all to the job). No `--unshare-user`: bwrap
creates a user namespace by itself when it runs unprivileged, which is the only case that needs
one.

`--new-session` starts the script in a session of its own, so that it cannot push characters
into a terminal of the platform (TIOCSTI). `--die-with-parent` is not used, on purpose. The
parent it means is the outer bwrap, which exits as soon as the script has; with the option, the
sandbox's init (bwrap, pid 1 inside) is killed then, and the kernel ends its namespace: what the
script left behind is killed and reaped with SIGCHLD ignored, so its CPU time is lost (measured:
a background process's seconds vanished, and a job killed at its time limit lost a quarter of
its time). Without it, the supervisor kills those processes itself and the init reaps them and
hands their time on (`local_runner` explains the accounting). The option would not tie the
sandbox to the supervisor either; what does is what ties an unsandboxed task to it: the backend
kills the tasks of a supervisor that died, the sandbox's init with them.

Whether bwrap works is decided once per process, by a trial run (`sandbox_check`): bwrap may be
missing, or unprivileged user namespaces may be disabled on the machine.
"""

from __future__ import annotations

import functools
import glob
import json
import os
import select
import shutil
import subprocess
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from hpc.backends.local_state import SCRIPT_PATH, ProcessIdentity

# What `LOCAL_BACKEND_SANDBOX` may say: use bwrap when it works and run unsandboxed otherwise;
# refuse to run a job without it; never use it.
AUTO, REQUIRED, OFF = "auto", "required", "off"
SANDBOX_MODES = (AUTO, REQUIRED, OFF)

# What of /etc a job may read: what programs need to start and run (the dynamic linker, user
# and group names, Debian's alternatives, time zones, certificates, Python's and Perl's own
# configuration), each only where it exists. Nothing that holds a secret: a platform run as
# root runs its jobs as uid 0 too (without capabilities), the owner of every root-only file
# that is visible.
ETC_ENTRIES = (
    "alternatives",
    "ca-certificates",
    "ca-certificates.conf",
    "crypto-policies",
    "debian_version",
    "fonts",
    "gai.conf",
    "group",
    "host.conf",
    "hostname",
    "hosts",
    "ld.so.cache",
    "ld.so.conf",
    "ld.so.conf.d",
    "locale.alias",
    "localtime",
    "lsb-release",
    "magic",
    "magic.mime",
    "mime.types",
    "nsswitch.conf",
    "os-release",
    "passwd",
    "perl",
    "pki/ca-trust",
    "pki/tls/certs",
    "pki/tls/openssl.cnf",
    "protocols",
    "R",
    "services",
    # Not all of ssl/ (nor of pki/): ssl/private holds the machine's TLS keys.
    "ssl/certs",
    "ssl/openssl.cnf",
    "terminfo",
    "timezone",
)
# `/usr` is bound whole; these beside it are symbolic links into it on a merged /usr (Debian 12)
# and directories of their own elsewhere.
_SYSTEM_DIRECTORIES = ("bin", "sbin", "lib", "lib32", "lib64", "libx32")
TRIAL_TIMEOUT_SECONDS = 10.0
# How long the supervisor waits for bwrap to say which process is the sandbox's init.
INFO_TIMEOUT_SECONDS = 10.0


@dataclass(frozen=True)
class SandboxCheck:
    """The answer of `sandbox_check`: the bwrap to run jobs under, or why there is none."""

    program: str | None  # absolute path of a bwrap that passed its trial run
    problem: str = ""  # why there is none, for the logs, the pages and a refused job's reason

    @property
    def is_available(self) -> bool:
        return self.program is not None


def _system_arguments() -> list[str]:
    arguments = ["--ro-bind", "/usr", "/usr"]
    for name in _SYSTEM_DIRECTORIES:
        path = Path("/") / name
        if path.is_symlink():
            arguments += ["--symlink", os.readlink(path), str(path)]
        elif path.is_dir():
            arguments += ["--ro-bind", str(path), str(path)]
    for name in ETC_ENTRIES:
        arguments += ["--ro-bind-try", f"/etc/{name}", f"/etc/{name}"]
    # Debian's Python reads its sitecustomize from here (a link from /usr/lib/python3.X).
    for python_directory in sorted(glob.glob("/etc/python3*")):
        arguments += ["--ro-bind", python_directory, python_directory]
    return arguments


def sandbox_command(
    program: str, directory: Path, command: Sequence[str], *, info_descriptor: int | None = None
) -> list[str]:
    """The command that runs `command` in `directory` inside the sandbox (see the module's
    docstring for what it sees). `info_descriptor`: a descriptor bwrap writes its JSON about
    the sandbox to (`child-pid`: the sandbox's init), then closes."""
    return [
        program,
        *_system_arguments(),
        *("--proc", "/proc", "--dev", "/dev"),
        *("--tmpfs", "/tmp"),  # noqa: S108 - the sandbox's own, empty /tmp
        # After /tmp: a job directory below /tmp (the tests') is bound into the private one.
        *("--bind", str(directory), str(directory), "--chdir", str(directory)),
        *("--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts"),
        *("--unshare-cgroup-try", "--new-session", "--cap-drop", "ALL"),
        *(() if info_descriptor is None else ("--info-fd", str(info_descriptor))),
        "--",
        *command,
    ]


def _find_program(program: str) -> str | None:
    if "/" in program:
        path = Path(program)
        return str(path.resolve()) if path.is_file() and os.access(path, os.X_OK) else None
    found = shutil.which(program)
    return None if found is None else str(Path(found).resolve())


@functools.cache
def sandbox_check(program: str) -> SandboxCheck:
    """Whether `program` (a path, or a name looked up on PATH) sandboxes a job on this
    machine: it exists and a trial run of `true`, with every option a job gets, succeeds.
    Asked once per process and program; the answer is kept."""
    path = _find_program(program)
    if path is None:
        where = "" if "/" in program else " on PATH"
        return SandboxCheck(None, f"bubblewrap is not installed: `{program}` was not found{where}")
    true = shutil.which("true", path=SCRIPT_PATH) or "/bin/true"
    with tempfile.TemporaryDirectory(prefix="computeshare-sandbox-trial-") as directory:
        try:
            trial = subprocess.run(
                sandbox_command(path, Path(directory), [true]),
                stdin=subprocess.DEVNULL,
                capture_output=True,
                timeout=TRIAL_TIMEOUT_SECONDS,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired) as error:
            return SandboxCheck(None, f"{path} does not run: {error}")
    if trial.returncode != 0:
        lines = trial.stderr.decode("utf-8", "replace").strip().splitlines()
        reason = lines[-1] if lines else f"exit status {trial.returncode}"
        return SandboxCheck(
            None,
            f"{path} cannot create a sandbox here ({reason}); "
            "unprivileged user namespaces may be disabled",
        )
    return SandboxCheck(path)


def read_sandbox_init(descriptor: int, timeout: float = INFO_TIMEOUT_SECONDS) -> int | None:
    """Reads what bwrap wrote to its `--info-fd` until it closed it, and returns the pid of
    the sandbox's init (`child-pid`); None when bwrap failed before it said. Closes
    `descriptor`."""
    data = b""
    deadline = time.monotonic() + timeout
    try:
        while (left := deadline - time.monotonic()) > 0:
            readable, _, _ = select.select([descriptor], [], [], left)
            if not readable:
                break
            chunk = os.read(descriptor, 4096)
            if not chunk:
                break
            data += chunk
    finally:
        os.close(descriptor)
    try:
        pid = json.loads(data)["child-pid"]
    except (ValueError, KeyError, TypeError):
        return None
    return pid if isinstance(pid, int) else None


def sandbox_init_identity(descriptor: int) -> ProcessIdentity | None:
    """The sandbox's init as a process identity (see `read_sandbox_init`)."""
    pid = read_sandbox_init(descriptor)
    return None if pid is None else ProcessIdentity.of(pid)
