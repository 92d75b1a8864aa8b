"""Jobs' files in platform storage, and the rules of their names.

A job's input file is named by its path in the job's folder on the cluster: relative,
`/`-separated, a few folders deep, each part plain ([A-Za-z0-9._-]+, not `.` or `..`), and
never one of the platform's own files there (the script, the environment files, stdout and
stderr). Names are checked as they arrive, never cleaned up: a name that breaks a rule is
refused (400 `input_file_name_invalid`), so that what the job finds is what was sent.

Storage is a local folder (JOB_FILES_ROOT): inputs wait there until staged on the cluster, then
go; results are fetched there once the job has ended, until the retention period passes."""

from __future__ import annotations

import gzip
import os
import re
import tarfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.core.exceptions import TooManyFilesSent
from django.core.files.storage import FileSystemStorage
from django.core.files.uploadedfile import UploadedFile
from django.core.files.uploadhandler import FileUploadHandler
from django.http import FileResponse, StreamingHttpResponse
from django.http.multipartparser import MultiPartParser as DjangoMultiPartParser
from django.http.multipartparser import MultiPartParserError
from rest_framework.exceptions import ParseError
from rest_framework.parsers import DataAndFiles, MultiPartParser

from hpc.slurm.jobs import ENVIRONMENT_FILE, EXPORT_FILE, SCRIPT_FILE
from scheduler_bridge import errors

# The form field of POST /jobs/ whose parts are the job's input files.
INPUT_FIELD = "input_files"
_PART = re.compile(r"[A-Za-z0-9._-]+")
# The platform's own files in a job's folder: an input cannot take their place.
_PLATFORM_NAMES = frozenset({SCRIPT_FILE, ENVIRONMENT_FILE, EXPORT_FILE})
_OUTPUT_NAME = re.compile(r"(stdout|stderr)(-[0-9]+)?\.txt")
# What of a job's folder is the platform's, not the job's result.
RESULT_EXCLUDED = _PLATFORM_NAMES
MAX_NAME_LENGTH = 1000
# A file or folder name's length in bytes on Linux file systems (the parts are ASCII).
MAX_PART_LENGTH = 255


def job_files_storage() -> FileSystemStorage:
    """The storage of jobs' files (JOB_FILES_ROOT), readable by the platform's user only."""
    return FileSystemStorage(
        location=settings.JOB_FILES_ROOT,
        file_permissions_mode=0o600,
        directory_permissions_mode=0o700,
    )


def input_name_problem(name: str) -> str | None:
    """Why `name` cannot be an input file's path in a job's folder, or None."""
    depth = settings.JOB_INPUT_PATH_DEPTH
    if not name or len(name) > MAX_NAME_LENGTH:
        return f"A name has 1 to {MAX_NAME_LENGTH} characters."
    if name.startswith("/"):
        return "A name is a path relative to the job's folder: it cannot start with `/`."
    parts = name.split("/")
    if any(part in ("", ".", "..") for part in parts):
        return "A name cannot hold `.`, `..` or empty parts: no path may leave the job's folder."
    if not all(_PART.fullmatch(part) for part in parts):
        return "Each part of a name is made of letters, digits, `.`, `_` and `-` only."
    if len(parts) > depth:
        return f"A name is at most {depth} levels deep."
    if any(len(part) > MAX_PART_LENGTH for part in parts):
        return (
            f"Each part of a name has at most {MAX_PART_LENGTH} characters (a file system's limit)."
        )
    if len(parts) == 1 and (name in _PLATFORM_NAMES or _OUTPUT_NAME.fullmatch(name)):
        return f"`{name}` is one of the platform's own files in the job's folder."
    return None


@dataclass(frozen=True)
class InputUpload:
    """One uploaded input file: its path in the job's folder and the upload (in memory when
    small, in a temporary file otherwise: never read whole into memory)."""

    name: str
    upload: UploadedFile[Any]

    @property
    def size(self) -> int:
        return int(self.upload.size or 0)


def input_uploads_check(uploads: list[InputUpload]) -> None:
    """Refuses a set of input files that breaks a rule, before anything is written: a bad or
    repeated name (400 `input_file_name_invalid`), too many files (400
    `too_many_input_files`), a file or the whole over its limit (413
    `input_files_too_large`)."""
    limit = settings.JOB_INPUT_FILES_MAX
    if len(uploads) > limit:
        raise errors.TooManyInputFiles(extra={"limit": limit})
    seen: set[str] = set()
    folders: set[str] = set()
    for upload in uploads:
        problem = input_name_problem(upload.name)
        if problem is None and upload.name in seen:
            problem = "Two files have this name."
        if problem is None:
            parents = upload.name.split("/")[:-1]
            prefixes = {"/".join(parents[: i + 1]) for i in range(len(parents))}
            if upload.name in folders or prefixes & seen:
                problem = "A name cannot be both a file and a folder."
            folders |= prefixes
        if problem is not None:
            raise errors.InputFileNameInvalid(problem, extra={"name": upload.name})
        seen.add(upload.name)
    per_file = settings.JOB_INPUT_FILE_MAX_BYTES
    for upload in uploads:
        if upload.size > per_file:
            raise errors.InputFilesTooLarge(
                f"`{upload.name}` is larger than {per_file} bytes.",
                extra={"limit_bytes": per_file, "name": upload.name},
            )
    total = settings.JOB_INPUT_TOTAL_MAX_BYTES
    if sum(upload.size for upload in uploads) > total:
        raise errors.InputFilesTooLarge(
            f"The input files are larger than {total} bytes together.",
            extra={"limit_bytes": total},
        )


class _LimitsHandler(FileUploadHandler):
    """First of the upload handlers: counts what each file and the whole upload bring and,
    past a limit, keeps the rest from the handlers that store it (the body is still read, so
    that the client gets the 413 rather than a reset connection). The parser then refuses."""

    def __init__(self, request: Any = None) -> None:
        super().__init__(request)
        self.total = 0
        self.file_size = 0
        self.over: tuple[str, int] | None = None  # (file name, limit) of the first excess
        self.file_name = ""

    def new_file(self, *args: Any, **kwargs: Any) -> None:
        super().new_file(*args, **kwargs)
        self.file_size = 0

    def receive_data_chunk(self, raw_data: bytes, start: int) -> bytes | None:
        self.file_size += len(raw_data)
        self.total += len(raw_data)
        if self.over is None:
            if self.file_size > settings.JOB_INPUT_FILE_MAX_BYTES:
                self.over = (self.file_name or "", settings.JOB_INPUT_FILE_MAX_BYTES)
            elif self.total > settings.JOB_INPUT_TOTAL_MAX_BYTES:
                self.over = ("", settings.JOB_INPUT_TOTAL_MAX_BYTES)
        return None if self.over is not None else raw_data

    def file_complete(self, file_size: int) -> None:
        return None


class _NameKeepingParser(DjangoMultiPartParser):
    """Django's multipart parser, except that a file part's name is kept as sent: Django cuts
    it to its last path part and drops `.` and `..`, which would turn `data/a.txt` into
    `a.txt` and `../a.txt` into an accepted `a.txt`. Each file gets a placeholder name; the
    names as sent are in `sent_names`, in the same order."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.sent_names: list[str] = []

    def sanitize_file_name(self, file_name: str) -> str:
        self.sent_names.append(file_name)
        return f"upload-{len(self.sent_names) - 1}"


_PLACEHOLDER = re.compile(r"upload-([0-9]+)")
_UPLOAD_CHUNK = 1024 * 1024


class JobMultiPartParser(MultiPartParser):
    """The multipart parser of POST /jobs/ (and its quote): file parts keep the names they
    were sent with (as `sent_name`), and the input limits are enforced while the body is read,
    so that nothing past a limit is stored even in a temporary file."""

    def parse(
        self, stream: Any, media_type: str | None = None, parser_context: Any = None
    ) -> DataAndFiles[Any, Any]:
        parser_context = parser_context or {}
        request = parser_context["request"]
        meta = request.META.copy()
        meta["CONTENT_TYPE"] = media_type
        limits = _LimitsHandler(request)
        handlers = [limits, *request.upload_handlers]
        for handler in handlers:
            # Django's parser reads the body in the smallest chunk its handlers take (64 KiB
            # by default); in 1 MiB chunks its Python loop costs a sixteenth as much.
            handler.chunk_size = _UPLOAD_CHUNK
        try:
            parser = _NameKeepingParser(
                meta, stream, handlers, parser_context.get("encoding", settings.DEFAULT_CHARSET)
            )
            data, files = parser.parse()
        except TooManyFilesSent as error:
            raise errors.TooManyInputFiles(extra={"limit": settings.JOB_INPUT_FILES_MAX}) from error
        except MultiPartParserError as error:
            raise ParseError(f"Multipart form parse error - {error}") from error
        for upload in _all_files(files.lists()):
            match = _PLACEHOLDER.fullmatch(upload.name or "")
            upload.sent_name = parser.sent_names[int(match.group(1))] if match else upload.name
        if limits.over is not None:
            name, limit = limits.over
            sent = parser.sent_names[int(m.group(1))] if (m := _PLACEHOLDER.fullmatch(name)) else ""
            extra: dict[str, Any] = {"limit_bytes": limit}
            if sent:
                extra["name"] = sent
            raise errors.InputFilesTooLarge(
                f"`{sent}` is larger than {limit} bytes."
                if sent
                else f"The input files are larger than {limit} bytes together.",
                extra=extra,
            )
        return DataAndFiles(data, files)


def _all_files(lists: Iterable[tuple[str, list[Any]]]) -> list[Any]:
    return [upload for _, uploads in lists for upload in uploads]


def input_uploads_of(files: Any) -> list[InputUpload]:
    """The input files of a parsed request, named as they were sent."""
    return [
        InputUpload(name=getattr(upload, "sent_name", upload.name or ""), upload=upload)
        for upload in files.getlist(INPUT_FIELD)
    ]


def stored_name(job_uuid: Any, kind: str, name: str) -> str:
    """Where a job's file is kept in storage: by job, kind, then its own (checked) path."""
    return f"{kind}s/{job_uuid}/{name}"


class _Sink:
    """Where the archive's compressed bytes land between two chunks sent to the client."""

    def __init__(self) -> None:
        self.parts: list[bytes] = []

    def write(self, data: bytes) -> int:
        self.parts.append(bytes(data))
        return len(data)

    def flush(self) -> None:
        return None

    def take(self) -> bytes:
        data = b"".join(self.parts)
        self.parts.clear()
        return data


_ARCHIVE_CHUNK = 1024 * 1024
_BLOCK = 512


def tar_gz_stream(storage: FileSystemStorage, rows: Iterable[Any]) -> Iterator[bytes]:
    """The files of `rows` (each with `name`, `stored`, `modified_at`) as one tar.gz, yielded
    as it is built: a file's header, then its content a chunk at a time, then its padding, so
    that neither a file nor the archive is ever whole in memory (tarfile's `addfile` copies a
    whole file in one call, which a generator could not interrupt to send what it has)."""
    sink = _Sink()
    # Level 1: most of the ratio on text, several times the speed of the default on what does
    # not compress (results are often compressed already), on a CPU the platform shares.
    archive = gzip.GzipFile(fileobj=sink, mode="wb", compresslevel=1, mtime=0)
    for row in rows:
        with storage.open(row.stored, "rb") as source:
            size = os.fstat(source.fileno()).st_size
            info = tarfile.TarInfo(name=row.name)
            info.size = size
            info.mode = 0o644
            info.mtime = int(row.modified_at.timestamp()) if row.modified_at else 0
            archive.write(info.tobuf(format=tarfile.PAX_FORMAT))
            remaining = size
            while remaining > 0:
                chunk = source.read(min(_ARCHIVE_CHUNK, remaining))
                if not chunk:  # shorter than it was a moment ago: pad, the header holds
                    chunk = b"\0" * remaining
                archive.write(chunk)
                remaining -= len(chunk)
                yield sink.take()
            archive.write(b"\0" * (-size % _BLOCK))
        if sink.parts:
            yield sink.take()
    # The end of a tar archive: two empty blocks.
    archive.write(b"\0" * (2 * _BLOCK))
    archive.close()
    yield sink.take()


def result_file_response(row: Any) -> FileResponse:
    """One result file (a `JobFile`) streamed as an attachment under its own base name: the
    page's download and the API's are this one answer."""
    return FileResponse(
        job_files_storage().open(row.stored, "rb"),
        as_attachment=True,
        filename=row.name.rsplit("/", 1)[-1],
        content_type="application/octet-stream",
    )


def results_archive_response(job_uuid: Any, rows: Iterable[Any]) -> StreamingHttpResponse:
    """A job's result files (`JobFile`s) as one tar.gz, streamed while it is built (no
    Content-Length): the page's "download all" and the API's archive are this one answer."""
    response = StreamingHttpResponse(
        tar_gz_stream(job_files_storage(), rows), content_type="application/gzip"
    )
    response["Content-Disposition"] = f'attachment; filename="job-{job_uuid}-results.tar.gz"'
    return response
