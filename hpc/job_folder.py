"""Opening the files of a job's folder without following links: the one way the platform reads
and writes there, on every backend.

A job writes what it likes in its folder: a symbolic link named `stdout.txt`, a FIFO, a folder
that becomes a link between the listing of its results and their fetch. Whatever opens a file
there on the platform's behalf (the local backend's supervisor, the output tail, the result
collection; on Slurm the reader below, run as the tenant) goes through this module, which keeps
three rules:

- Only the base (the local cluster's root, a tenant's home: the platform's or the owner's, not
  the job's) is opened by its path. Every part below it is opened from its parent's descriptor
  (`openat`) with `O_NOFOLLOW`, folders with `O_DIRECTORY` too: a link anywhere under the base
  is refused (`ELOOP`/`ENOTDIR`), never followed, whenever it appeared.
- A file is read only when the descriptor opened is a regular file with no other hard link
  (`fstat` on the descriptor, not a `stat` of the path before it: nothing can be swapped in
  between). A FIFO is opened with `O_NONBLOCK`, so that opening it does not wait for a writer,
  and refused. A file with another hard link may be a file from elsewhere.
- A file is written only as a new file: whatever the name held (a link, a FIFO, a hard link to
  another file) is removed, and the file made with `O_CREAT | O_EXCL | O_NOFOLLOW`, so that no
  write lands anywhere but in a new file in the folder.

Relative paths are any path inside the folder (`out/%j.log` once expanded): `.` and empty parts
are dropped, `..` and absolute paths refused.

This file is also the reader the Slurm backend runs on the login node as the tenant (`python3
-I -S`, its source sent on stdin with the request, `remote_command`): SFTP's version 3 has no
open that does not follow links, and the tenant's own process is the only one that may read the
tenant's files. So it needs nothing but Python 3.8's standard library, and imports nothing of
the platform's."""

from __future__ import annotations

import contextlib
import errno
import fnmatch
import os
import stat
import sys

# The reader's answers, read by `hpc.backends.slurm`.
EXIT_REFUSED = 65
# `read`: each file's frames are a 4-byte big-endian length and that many bytes; length 0 ends.
FRAME_HEADER_BYTES = 4
_CHUNK = 1024 * 1024

_FOLDER_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
_WRITE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_NOCTTY | os.O_CLOEXEC
_APPEND_FLAGS = (
    os.O_WRONLY | os.O_APPEND | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
)
# Tries of a write whose name something re-created between the removal and the creation.
_WRITE_TRIES = 3


class JobFileRefused(OSError):
    """A path in a job's folder the platform does not open: a symbolic link on the way, not a
    regular file (a FIFO, a device, a folder), a file with other hard links, or a path that
    would leave the folder. The message says which, for the job's owner."""


def path_parts(relative: str) -> list[str]:
    """The parts of a path inside a job's folder; `.` and empty parts dropped. Raises
    `JobFileRefused` for an absolute path, `..` or nothing at all."""
    parts = [part for part in relative.split("/") if part not in ("", ".")]
    if relative.startswith("/") or ".." in parts or not parts or "\0" in relative:
        raise JobFileRefused(errno.EINVAL, "not a path inside the job's folder", relative)
    return parts


def _refusal(error: OSError, name: str, what: str) -> OSError:
    if error.errno in (errno.ELOOP, errno.ENOTDIR, errno.EMLINK):
        return JobFileRefused(
            error.errno, f"a symbolic link ({what}): links are not followed", name
        )
    return error


def _enter(parent: int, part: str, *, create: bool) -> int:
    """The folder `part` of the folder `parent`, opened without following a link (made, mode
    0700, when `create` and missing). Closes `parent`."""
    try:
        try:
            return os.open(part, _FOLDER_FLAGS, dir_fd=parent)
        except FileNotFoundError:
            if not create:
                raise
        with contextlib.suppress(FileExistsError):
            os.mkdir(part, 0o700, dir_fd=parent)
        return os.open(part, _FOLDER_FLAGS, dir_fd=parent)
    except OSError as error:
        raise _refusal(error, part, "a folder on the way") from None
    finally:
        os.close(parent)


def open_folder(base: str | os.PathLike[str], relative: str = "", *, create: bool = False) -> int:
    """A descriptor of the folder `relative` under `base`: `base` is opened by its path (it is
    the platform's or the owner's), every part below it without following a link. `create`
    makes the missing folders (mode 0700). The caller closes it."""
    descriptor = os.open(base, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    for part in path_parts(relative) if relative else []:
        descriptor = _enter(descriptor, part, create=create)
    return descriptor


def _parent_of(folder: int, parts: list[str], *, create: bool) -> int:
    descriptor = os.dup(folder)
    for part in parts[:-1]:
        descriptor = _enter(descriptor, part, create=create)
    return descriptor


def _regular_only(descriptor: int, name: str) -> os.stat_result:
    """The descriptor's status when it is a regular file with no other hard link; otherwise
    closes it and raises `JobFileRefused`."""
    status = os.fstat(descriptor)
    problem = None
    if not stat.S_ISREG(status.st_mode):
        problem = "not a regular file (a FIFO, a device or a folder)"
    elif status.st_nlink != 1:
        problem = "a file with other hard links: it may be a file from outside the job's folder"
    if problem is not None:
        os.close(descriptor)
        raise JobFileRefused(errno.EPERM, problem, name)
    return status


def open_for_reading(folder: int, relative: str) -> tuple[int, os.stat_result]:
    """A descriptor of the regular file `relative` in the folder `folder` (a descriptor from
    `open_folder`), opened without following a link, and its status. Raises `JobFileRefused`,
    or `FileNotFoundError` when it is not there."""
    parts = path_parts(relative)
    parent = _parent_of(folder, parts, create=False)
    try:
        descriptor = os.open(parts[-1], _READ_FLAGS, dir_fd=parent)
    except OSError as error:
        raise _refusal(error, relative, "the file or a folder on its way") from None
    finally:
        os.close(parent)
    status = _regular_only(descriptor, relative)
    # Regular files never block; the flag only kept a FIFO's open from waiting.
    os.set_blocking(descriptor, True)
    return descriptor, status


def open_for_writing(
    folder: int, relative: str, *, mode: int = 0o600, create_folders: bool = False
) -> int:
    """A new, empty file `relative` in the folder `folder`, open for writing: whatever the name
    held is removed first (a link or a hard link is removed, never written through), folders on
    the way are never followed (made, mode 0700, with `create_folders`). Raises
    `JobFileRefused` when the name is a folder, or keeps being re-created by someone else."""
    parts = path_parts(relative)
    parent = _parent_of(folder, parts, create=create_folders)
    try:
        for _ in range(_WRITE_TRIES):
            try:
                os.unlink(parts[-1], dir_fd=parent)
            except FileNotFoundError:
                pass
            except (IsADirectoryError, PermissionError) as error:
                raise JobFileRefused(error.errno, "a folder holds the name", relative) from None
            try:
                return os.open(parts[-1], _WRITE_FLAGS, mode, dir_fd=parent)
            except FileExistsError:
                continue  # made again between the removal and the creation: remove it again
        raise JobFileRefused(errno.EEXIST, "the name keeps being re-created", relative)
    finally:
        os.close(parent)


def open_for_appending(folder: int, relative: str) -> int:
    """The file `relative` in the folder `folder`, open for appending (sbatch's
    `--open-mode=append`): the regular file with no other hard link that is there, opened
    without following a link, else a new one (`open_for_writing`). Raises `JobFileRefused`
    for anything else under the name."""
    parts = path_parts(relative)
    parent = _parent_of(folder, parts, create=False)
    try:
        try:
            descriptor = os.open(parts[-1], _APPEND_FLAGS, dir_fd=parent)
        except FileNotFoundError:
            descriptor = None
        except OSError as error:
            raise _refusal(error, relative, "the file or a folder on its way") from None
    finally:
        os.close(parent)
    if descriptor is None:
        return open_for_writing(folder, relative)
    _regular_only(descriptor, relative)
    os.set_blocking(descriptor, True)
    return descriptor


def newest_match(folder: int, relative: str) -> str:
    """`relative` itself, or, when its file name holds `*` (a part of a name not known, such as
    the node Slurm ran a job on), the newest regular file of its folder whose name matches it.
    Raises `FileNotFoundError` when none does."""
    parts = path_parts(relative)
    if "*" not in parts[-1]:
        return relative
    parent = _parent_of(folder, parts, create=False)
    try:
        with os.scandir(parent) as entries:
            found = [
                (entry.stat(follow_symlinks=False).st_mtime, entry.name)
                for entry in entries
                if entry.is_file(follow_symlinks=False)
                and fnmatch.fnmatchcase(entry.name, parts[-1])
            ]
    finally:
        os.close(parent)
    if not found:
        raise FileNotFoundError(errno.ENOENT, "no file of that name", relative)
    return "/".join([*parts[:-1], max(found)[1]])


def refusal_reason(error: OSError) -> str:
    """Why a file of a job's folder was not read, for its owner."""
    if isinstance(error, FileNotFoundError):
        return "it is no longer in the job's folder"
    if isinstance(error, JobFileRefused):
        return str(error.strerror)
    return f"it could not be read: {error.strerror or error}"


def read_tail(base: str | os.PathLike[str], directory: str, relative: str, size: int) -> bytes:
    """The last `size` bytes of the file `relative` of the job folder `directory` under `base`
    (the newest match of a name with `*`: `newest_match`); b"" when the folder or the file is
    not there. Raises `JobFileRefused`."""
    try:
        folder = open_folder(base, directory)
    except FileNotFoundError:
        return b""
    try:
        descriptor, status = open_for_reading(folder, newest_match(folder, relative))
    except FileNotFoundError:
        return b""
    finally:
        os.close(folder)
    try:
        size = max(0, min(size, status.st_size))
        os.lseek(descriptor, status.st_size - size, os.SEEK_SET)
        chunks = []
        while size > 0:
            chunk = os.read(descriptor, min(size, _CHUNK))
            if not chunk:
                break
            chunks.append(chunk)
            size -= len(chunk)
        return b"".join(chunks)
    finally:
        os.close(descriptor)


def list_files(
    folder: int, *, max_files: int, max_depth: int
) -> tuple[list[tuple[str, int, float]], list[tuple[str, str]]]:
    """Every regular file in the folder and its subfolders, each `(path, size, mtime)` sorted by
    path, at most `max_files` of them and `max_depth` folders deep; and what is there but will
    not be read, each `(path, reason)`: links, FIFOs and devices, files with other hard links.
    Names are as `os.fsdecode` gives them (bytes that are not UTF-8 as surrogates). Subfolders
    are entered from their parent's descriptor, without following a link."""
    files: list[tuple[str, int, float]] = []
    skipped: list[tuple[str, str]] = []
    pending: list[tuple[str, int]] = [("", os.dup(folder))]
    try:
        while pending and len(files) < max_files:
            prefix, descriptor = pending.pop()
            try:
                with os.scandir(descriptor) as entries:
                    found = sorted((e.name, e.stat(follow_symlinks=False)) for e in entries)
                for name, status in found:
                    path = prefix + name
                    if stat.S_ISDIR(status.st_mode):
                        if path.count("/") < max_depth:
                            try:
                                child = _enter(os.dup(descriptor), name, create=False)
                            except (JobFileRefused, FileNotFoundError):
                                skipped.append((path, "a folder that changed while it was read"))
                            else:
                                pending.append((path + "/", child))
                    elif stat.S_ISLNK(status.st_mode):
                        skipped.append((path, "a symbolic link: links are not followed"))
                    elif not stat.S_ISREG(status.st_mode):
                        skipped.append((path, "not a regular file (a FIFO, a socket or a device)"))
                    elif status.st_nlink != 1:
                        skipped.append((path, "a file with other hard links"))
                    else:
                        files.append((path, status.st_size, status.st_mtime))
            finally:
                os.close(descriptor)
    finally:
        for _, descriptor in pending:
            os.close(descriptor)
    files.sort()
    return files[:max_files], sorted(skipped)


# --- The reader run on a login node as the tenant ---------------------------------------------
#
# `python3 -I -S -c BOOTSTRAP LENGTH HOME DIRECTORY COMMAND [ARGUMENTS]`: the bootstrap reads
# LENGTH bytes of stdin (this file's source) and runs them; the rest of stdin is the request.
# Names travel as hex of their bytes, in both directions, so that any name survives.

BOOTSTRAP = (
    "import sys;n=int(sys.argv[1]);"
    "exec(compile(sys.stdin.buffer.read(n),'computeshare-job-folder','exec'),"
    "{'__name__':'__main__'})"
)


def _hex(name: str) -> str:
    return os.fsencode(name).hex()


def _unhex(text: str) -> str:
    return os.fsdecode(bytes.fromhex(text))


def _serve_list(folder: int, arguments: list[str], out: object) -> None:
    files, skipped = list_files(folder, max_files=int(arguments[0]), max_depth=int(arguments[1]))
    lines = [f"F {_hex(name)} {size} {mtime!r}\n" for name, size, mtime in files]
    lines += [f"S {_hex(name)} {reason.encode().hex()}\n" for name, reason in skipped]
    out.write("".join(lines).encode())  # type: ignore[attr-defined]


def _serve_read(folder: int, names: list[str], out: object) -> None:
    write = out.write  # type: ignore[attr-defined]
    for name in names:
        try:
            descriptor, _ = open_for_reading(folder, name)
        except OSError as error:
            write(
                b"-%s %s\n" % (_hex(name).encode(), refusal_reason(error).encode().hex().encode())
            )
            continue
        write(f"+{_hex(name)}\n".encode())
        try:
            while True:
                chunk = os.read(descriptor, _CHUNK)
                write(len(chunk).to_bytes(FRAME_HEADER_BYTES, "big") + chunk)
                if not chunk:
                    break
        finally:
            os.close(descriptor)


def main(argv: list[str]) -> int:
    """The reader: `list MAX_FILES MAX_DEPTH`, `tail NAME BYTES` or `read` (hex names on
    stdin, one a line), in the job folder DIRECTORY of HOME."""
    home, directory, command, arguments = argv[0], argv[1], argv[2], argv[3:]
    out = sys.stdout.buffer
    try:
        if command == "tail":
            out.write(read_tail(home, directory, _unhex(arguments[0]), int(arguments[1])))
            return 0
        try:
            folder = open_folder(home, directory)
        except FileNotFoundError:
            return 0  # no folder (yet): nothing listed, every name missing
        try:
            if command == "list":
                _serve_list(folder, arguments, out)
            else:
                names = [_unhex(line) for line in sys.stdin.buffer.read().decode().split()]
                _serve_read(folder, names, out)
        finally:
            os.close(folder)
    except JobFileRefused as error:
        sys.stderr.write(f"refused: {error.filename}: {error.strerror}\n")
        return EXIT_REFUSED
    out.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[2:]))
