"""Errors of the SSH and Slurm library. `is_transient` tells a caller whether retrying later
can help (network, timeouts, daemons down) or not (refused host key, refused command)."""


class BridgeError(Exception):
    is_transient = False


class HostKeyMismatch(BridgeError):
    """The server's host key is not the pinned one: the connection is refused, never trusted."""

    def __init__(self, host: str, port: int, offered_fingerprint: str, offered_type: str) -> None:
        self.host = host
        self.port = port
        self.offered_fingerprint = offered_fingerprint
        self.offered_type = offered_type
        super().__init__(
            f"{host}:{port} offered a {offered_type} host key with fingerprint "
            f"{offered_fingerprint}, which is not the pinned key"
        )


class InvalidKey(BridgeError):
    """A private key or host key line that cannot be read."""


class ClusterUnreachable(BridgeError):
    """The SSH connection could not be opened or was lost."""

    is_transient = True


class AuthenticationRefused(BridgeError):
    """The server refused the service user's key."""


class RemoteCommandTimeout(BridgeError):
    is_transient = True

    def __init__(self, command: str, timeout: float) -> None:
        self.command = command
        self.timeout = timeout
        super().__init__(f"remote command did not finish within {timeout:g} s: {command}")


class RemoteCommandFailed(BridgeError):
    """A remote command exited non-zero. Its output is kept for the reason, never parsed."""

    def __init__(self, command: str, exit_status: int, stdout: str, stderr: str) -> None:
        self.command = command
        self.exit_status = exit_status
        self.stdout = stdout
        self.stderr = stderr
        reason = (stderr or stdout).strip().splitlines()
        super().__init__(
            f"remote command exited {exit_status}: {reason[-1] if reason else '(no output)'}"
        )


class UnexpectedOutput(BridgeError):
    """A command succeeded but printed something its parser does not understand."""


class SchedulerUnavailable(RemoteCommandFailed):
    """A Slurm command failed because slurmctld or slurmdbd did not answer (down, restarting,
    overloaded): a later try may pass, unlike a command Slurm refused."""

    is_transient = True


class SubmissionUnclear(BridgeError):
    """A batch of submissions ended without a readable answer for every spec (the remote
    command failed or printed something unexpected): any of them may have been submitted, so
    the caller looks the names up before it submits them again."""

    is_transient = True


class TenantUnavailable(BridgeError):
    """The service user could not act as a tenant: sudo refused (no rule, a password asked)
    or the SFTP server program did not start as the tenant. The cluster's setup is at fault,
    not the network: retrying does not help until the owner fixes it."""


class JobFileUnsafe(BridgeError):
    """A file in a job's folder that the platform does not open: a symbolic link (to the file or
    to a folder on its way), a FIFO, a device or a file with other hard links, which the job
    put there (`hpc.job_folder`). Final: the job's owner sees why."""


class ReservationRefused(BridgeError):
    """The scheduler would not hold a reserved block: its cores are already reserved or busy
    for the window, or the platform's user may not make reservations (no operator rights).
    Permanent for that block: the sale is refused, or the auction skips the bid."""
