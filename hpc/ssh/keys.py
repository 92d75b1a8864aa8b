"""The keys of a connection: the login node's host key, pinned (a known_hosts or ssh-keyscan
line), and the service user's private key."""

from __future__ import annotations

import base64
import binascii
import io

import paramiko

from hpc.errors import HostKeyMismatch, InvalidKey
from hpc.ssh.settings import SSHSettings


def host_key_from_line(line: str) -> paramiko.PKey:
    """Reads a public key line `type base64 [comment]` (as in known_hosts or ssh-keyscan)."""
    parts = line.strip().split()
    if len(parts) >= 3 and not parts[0].startswith(("ssh-", "ecdsa-", "sk-")):
        parts = parts[1:]  # a known_hosts line starts with the host name
    if len(parts) < 2:
        raise InvalidKey("a host key line is `type base64`, for example `ssh-ed25519 AAAA...`")
    key_type, blob = parts[0], parts[1]
    try:
        return paramiko.PKey.from_type_string(key_type, base64.b64decode(blob, validate=True))
    except (binascii.Error, ValueError, paramiko.SSHException) as error:
        raise InvalidKey(f"cannot read the {key_type} host key: {error}") from error


def private_key_from_text(text: str) -> paramiko.PKey:
    """Reads an unencrypted private key (Ed25519, ECDSA or RSA) in OpenSSH or PEM format."""
    for key_class in (paramiko.Ed25519Key, paramiko.ECDSAKey, paramiko.RSAKey):
        try:
            return key_class.from_private_key(io.StringIO(text))
        except (paramiko.SSHException, ValueError, IndexError):
            continue
    raise InvalidKey("the private key is not an unencrypted Ed25519, ECDSA or RSA key")


def fingerprint(key: paramiko.PKey) -> str:
    return key.fingerprint  # "SHA256:..." as OpenSSH shows it


def known_hosts_name(host: str, port: int) -> str:
    return host if port == 22 else f"[{host}]:{port}"


class RefuseUnknownHostKey(paramiko.MissingHostKeyPolicy):
    """paramiko's policy for a host key other than the pinned one: refused, with its fingerprint."""

    def __init__(self, settings: SSHSettings) -> None:
        self.settings = settings

    def missing_host_key(
        self, client: paramiko.SSHClient, hostname: str, key: paramiko.PKey
    ) -> None:
        raise HostKeyMismatch(
            self.settings.host, self.settings.port, fingerprint(key), key.get_name()
        )
