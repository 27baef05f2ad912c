"""S3 backend through boto3: streamed multipart uploads, ranged reads, batched deletes.

We retry ourselves (botocore's retries are off) so every call honours one deadline and a
final failure says which bucket, key and operation, after how many attempts. Uploads stream
from the file, memory bounded by the socket buffers whatever the part size (``multipart.py``).
Streaming reads resume where a broken connection left them, pinned to the object's ETag
(``reads.py``).
"""

from __future__ import annotations

import functools
import io
import logging
import threading
from collections.abc import Callable, Iterable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any, BinaryIO, TypeVar

import boto3
from botocore.config import Config
from botocore.exceptions import ClientError

from tiering_core.errors import ConfigError
from tiering_core.storage.checksum import crc32c, crc32c_combine
from tiering_core.storage.errors import InvalidRangeError, RemoteObjectNotFoundError, RemoteStorageError
from tiering_core.storage.objects import MULTIPART_UPLOAD, IncompleteUpload, Progress, RemoteObject
from tiering_core.storage.remote import RemoteStorage
from tiering_core.storage.retry import RetryPolicy, attempt_time_left, call_with_retries, is_retryable
from tiering_core.storage.s3.multipart import Abandoned, Window, b64, locked, multipart_etag, send_parts, window_crc
from tiering_core.storage.s3.reads import READ_BUFFER, ResumableBody, next_part_marker, next_token, next_upload_marker
from tiering_core.storage.s3.session import new_session

__all__ = ["S3RemoteStorage", "is_retryable"]

log = logging.getLogger(__name__)
T = TypeVar("T")
MiB = 1 << 20
MAX_PARTS = 10_000
MIN_PART = 5 * MiB  # S3's limits on every part but the last
MAX_PART = 5 * 1024 * MiB
NOT_FOUND = frozenset({"404", "NoSuchKey", "NotFound"})
NO_SUCH_UPLOAD = frozenset({"404", "NoSuchUpload"})
LIST_PAGE_SIZE = 1000  # S3's maximum keys (or uploads) per listing page
MIN_READ_TIMEOUT = 0.01  # an attempt capped below this is hopeless, but must not mean "no timeout"


def _code(exc: BaseException | None) -> str:
    return str(exc.response.get("Error", {}).get("Code", "")) if isinstance(exc, ClientError) else ""


class S3RemoteStorage(RemoteStorage):
    """Segments in an S3 bucket (or MinIO, moto, ... at ``endpoint_url``).

    Credentials come from ``session``, else the explicit keys, else the standard AWS chain.
    Each call, with its retries, ends within ``deadline_seconds`` (default three socket
    timeouts); cleanup after a failed upload is bounded to one socket timeout.
    """

    def __init__(
        self,
        bucket: str,
        *,
        prefix: str = "",
        endpoint_url: str | None = None,
        region: str | None = None,
        session: boto3.Session | None = None,
        aws_access_key_id: str | None = None,
        aws_secret_access_key: str | None = None,
        aws_session_token: str | None = None,
        multipart_threshold_bytes: int = 64 * MiB,
        multipart_part_size_bytes: int = 64 * MiB,
        max_concurrency: int = 4,
        max_attempts: int = 5,
        timeout_seconds: float = 60.0,
        deadline_seconds: float | None = None,
    ) -> None:
        super().__init__(prefix)
        checks: dict[str, tuple[bool, object]] = {
            "multipart_part_size_bytes": (
                MIN_PART <= multipart_part_size_bytes <= MAX_PART,
                multipart_part_size_bytes,
            ),
            "multipart_threshold_bytes": (multipart_threshold_bytes >= 1, multipart_threshold_bytes),
            "max_concurrency": (max_concurrency >= 1, max_concurrency),
            "max_attempts": (max_attempts >= 1, max_attempts),
            "timeout_seconds": (timeout_seconds > 0, timeout_seconds),
            "deadline_seconds": (deadline_seconds is None or deadline_seconds > 0, deadline_seconds),
        }
        for name, (ok, value) in checks.items():
            if not ok:
                raise ConfigError(f"remote.{name}: {value!r} is out of range")
        if not bucket:
            raise ConfigError("remote.bucket: empty")
        if session is not None and (aws_access_key_id or aws_secret_access_key or aws_session_token):
            raise ConfigError("remote credentials: give a boto3 session or access keys, not both")
        self.bucket = bucket
        self.list_page_size = LIST_PAGE_SIZE
        self.threshold = multipart_threshold_bytes
        self.part_size = multipart_part_size_bytes
        self.concurrency = max_concurrency
        self.timeout_seconds = timeout_seconds
        self.policy = RetryPolicy(
            max_attempts=max_attempts,
            deadline_seconds=deadline_seconds if deadline_seconds is not None else 3 * timeout_seconds,
        )
        #: Cleanup after a failure is best effort (the caller's recovery deletes again): it must
        #: not double the time a dead endpoint costs.
        self.cleanup_policy = RetryPolicy(max_attempts=min(2, max_attempts), deadline_seconds=timeout_seconds)
        if session is None:
            session = new_session(aws_access_key_id, aws_secret_access_key, aws_session_token)
        self.client: Any = session.client(
            "s3",
            region_name=region,
            endpoint_url=endpoint_url,
            config=Config(
                connect_timeout=min(10.0, timeout_seconds),
                read_timeout=timeout_seconds,
                retries={"total_max_attempts": 1, "mode": "standard"},
                max_pool_connections=max(10, max_concurrency * 2),
                # Uploads carry the CRC-32C S3 checks; a SHA-256 of the payload adds a pass, not safety.
                s3={"addressing_style": "path" if endpoint_url else "auto", "payload_signing_enabled": False},
            ),
        )
        self.client.meta.events.register("before-send.s3", self._cap_read_timeout)

    def describe(self, key: str) -> str:
        return f"s3://{self.bucket}/{key}"

    def _cap_read_timeout(self, request: Any, **_: Any) -> None:
        """An attempt waits for an answer no longer than its call has left of the deadline."""
        left = attempt_time_left()
        if left is not None and left < self.timeout_seconds:
            request.context["read_timeout"] = max(left, MIN_READ_TIMEOUT)

    def _call(self, operation: str, key: str, fn: Callable[[], T], policy: RetryPolicy | None = None) -> T:
        def fail(exc: BaseException, attempts: int, elapsed: float) -> BaseException:
            where = f"{self.describe(key)}: {operation}"
            code = _code(exc)
            if code in NOT_FOUND:
                return RemoteObjectNotFoundError(f"{where}: object not found")
            if isinstance(exc, RemoteStorageError | Abandoned):
                return exc
            return RemoteStorageError(
                f"{where} failed after {attempts} attempt(s) in {elapsed:.1f} s: {type(exc).__name__}: {exc}"
            )

        return call_with_retries(
            policy or self.policy, fn, retryable=is_retryable, fail=fail, describe=f"{operation} {self.describe(key)}"
        )

    def close(self) -> None:
        self.client.close()

    # --- uploads -----------------------------------------------------------------------------

    def put_object(self, key: str, source: Path | bytes, progress: Progress | None = None) -> tuple[int, int]:
        if isinstance(source, bytes):
            crc = crc32c(source)

            def put(data: bytes = source) -> Any:
                self.quotas.take_copy(len(data))  # each attempt sends the bytes again
                return self.client.put_object(Bucket=self.bucket, Key=key, Body=data, ChecksumCRC32C=b64(crc))

            self._call("PutObject", key, put)
            if progress:
                progress(len(source))
            return len(source), crc
        path = Path(source)
        try:
            size = path.stat().st_size
        except OSError as exc:
            raise RemoteStorageError(f"{self.describe(key)}: PutObject: cannot read {path}: {exc}") from exc
        report = locked(progress)
        if size < self.threshold:
            return size, self._upload_window(key, path, 0, size, report, None)[0]
        return size, self._multipart(key, path, size, report)

    def _upload_window(
        self,
        key: str,
        path: Path,
        offset: int,
        length: int,
        progress: Progress | None,
        part: tuple[str, int] | None,
        stop: threading.Event | None = None,
    ) -> tuple[int, str]:
        """PutObject (``part`` None) or UploadPart (upload id, part number) of one window of
        the file; returns the window's CRC-32C and the ETag S3 gave it.

        The CRC-32C is taken first (C speed, page cache) and sent as the request's
        ``x-amz-checksum-crc32c``: S3 rejects the bytes unless they match it, so the manifest's
        checksum is the one S3 checked. That header makes botocore's own checksum pass and the
        SHA-256 payload signature (``payload_signing_enabled`` is off) unnecessary, so the
        bytes are sent in one more pass. ``stop`` set ends a send in flight at its next read.
        """
        try:
            f = path.open("rb")
        except OSError as exc:
            raise RemoteStorageError(f"{self.describe(key)}: cannot read {path}: {exc}") from exc
        with f:
            crc = window_crc(f.fileno(), offset, length, path)
            copy_quota = self.quotas.copy
            window = Window(f.fileno(), offset, length, progress, stop, copy_quota.take if copy_quota else None)
            checksum = b64(crc)

            def send() -> Any:
                if stop is not None and stop.is_set():
                    raise Abandoned()
                window.seek(0)
                try:
                    if part is None:
                        return self.client.put_object(
                            Bucket=self.bucket, Key=key, Body=window, ContentLength=length, ChecksumCRC32C=checksum
                        )
                    return self.client.upload_part(
                        Bucket=self.bucket,
                        Key=key,
                        UploadId=part[0],
                        PartNumber=part[1],
                        Body=window,
                        ContentLength=length,
                        ChecksumCRC32C=checksum,
                    )
                except Exception:
                    if stop is not None and stop.is_set():  # botocore wraps our stop as a retryable error
                        raise Abandoned() from None
                    raise

            answer = self._call("PutObject" if part is None else "UploadPart", key, send)
            return crc, str(answer.get("ETag", ""))

    def _multipart(self, key: str, path: Path, size: int, progress: Progress | None) -> int:
        """Parts go up in parallel (``max_concurrency``); a part is retried on its own. Any failure
        stops the upload at once and aborts it (``send_parts``)."""
        part_size = max(self.part_size, -(-size // MAX_PARTS))
        windows = [(n + 1, off, min(part_size, size - off)) for n, off in enumerate(range(0, size, part_size))]
        created = self._call(
            "CreateMultipartUpload",
            key,
            lambda: self.client.create_multipart_upload(Bucket=self.bucket, Key=key, ChecksumAlgorithm="CRC32C"),
        )
        upload_id = str(created["UploadId"])

        def send(number: int, offset: int, length: int, stop: threading.Event) -> tuple[int, str]:
            return self._upload_window(key, path, offset, length, progress, (upload_id, number), stop)

        def complete(results: list[tuple[int, str]]) -> None:
            done = [
                {"PartNumber": number, "ETag": etag, "ChecksumCRC32C": b64(crc)}
                for (number, _, _), (crc, etag) in zip(windows, results, strict=True)
            ]
            self._call("CompleteMultipartUpload", key, self._completer(key, upload_id, done, size))

        results = send_parts(windows, send, complete, lambda: self._abort(key, upload_id), self.concurrency)
        crc = results[0][0]
        for (_, _, length), (part_crc, _) in zip(windows[1:], results[1:], strict=True):
            crc = crc32c_combine(crc, part_crc, length)
        return crc

    def _abort(self, key: str, upload_id: str, *, quiet: bool = True) -> None:
        """AbortMultipartUpload (an upload already gone is fine). After a failed upload it is
        best effort (``quiet``): a failure is logged, and the incomplete upload is left to
        ``remove_incomplete_uploads``."""

        def abort() -> None:
            try:
                self.client.abort_multipart_upload(Bucket=self.bucket, Key=key, UploadId=upload_id)
            except ClientError as exc:
                if _code(exc) not in NO_SUCH_UPLOAD:
                    raise

        if not quiet:
            self._call("AbortMultipartUpload", key, abort)
            return
        try:
            self._call("AbortMultipartUpload", key, abort, self.cleanup_policy)
        except RemoteStorageError as abort_error:
            log.error("%s: abort of multipart upload %s failed: %s", self.describe(key), upload_id, abort_error)

    def _completer(self, key: str, upload_id: str, parts: list[dict[str, Any]], size: int) -> Callable[[], None]:
        """CompleteMultipartUpload, made safe to retry: if an earlier attempt completed the
        upload but its answer was lost, S3 answers NoSuchUpload; the object is then there with
        our size and the ETag S3 derives from our parts' ETags (MD5 of their MD5s, ``-N``),
        and that is success. Anything else stays an error (the caller uploads again)."""
        attempts = [0]
        expected_etag = multipart_etag(parts)

        def complete() -> None:
            attempts[0] += 1
            try:
                self.client.complete_multipart_upload(
                    Bucket=self.bucket, Key=key, UploadId=upload_id, MultipartUpload={"Parts": parts}
                )
            except ClientError as exc:
                if attempts[0] == 1 or _code(exc) != "NoSuchUpload" or expected_etag is None:
                    raise
                try:
                    head = self.client.head_object(Bucket=self.bucket, Key=key)
                except ClientError:
                    raise exc from None
                if int(head["ContentLength"]) != size or head["ETag"] != expected_etag:
                    raise
                log.info("%s: multipart upload %s was completed by an earlier attempt", self.describe(key), upload_id)

        return complete

    # --- reads, deletes, listing -------------------------------------------------------------

    def _get(self, key: str, start: int, end: int | None = None, etag: str | None = None) -> Any:
        """One GetObject from ``start``; a range past the end is InvalidRangeError (not retried),
        except ``start == 0`` on an empty object, which S3 refuses as a range but we read."""
        extra: dict[str, str] = {}
        if start or end is not None:
            extra["Range"] = f"bytes={start}-" + ("" if end is None else str(end))
        if etag is not None:
            extra["IfMatch"] = etag
        try:
            return self.client.get_object(Bucket=self.bucket, Key=key, **extra)
        except ClientError as exc:
            if _code(exc) != "InvalidRange":
                raise
            size = exc.response.get("Error", {}).get("ActualObjectSize")
            if start == 0 and str(size) == "0":
                return self.client.get_object(Bucket=self.bucket, Key=key)
            raise InvalidRangeError(
                f"{self.describe(key)}: range start {start} is beyond the object's {size} bytes"
            ) from exc

    def get_range(self, key: str, start: int, end: int | None) -> bytes:
        def get() -> bytes:
            body = self._get(key, start, end)["Body"]
            try:
                return bytes(body.read())
            finally:
                body.close()

        return self._call("GetObject", key, get)

    def open_object(self, key: str, start: int = 0) -> BinaryIO:
        answer = self._call("GetObject", key, lambda: self._get(key, start))
        etag = answer["ETag"]
        raw = ResumableBody(
            start,
            start + int(answer["ContentLength"]),
            answer["Body"],
            reopen=lambda position: self._get(key, position, etag=etag)["Body"],
            retried=lambda attempt: self._call("GetObject", key, attempt),
        )
        return io.BufferedReader(raw, READ_BUFFER)  # type: ignore[return-value]

    def object_size(self, key: str) -> int | None:
        def head() -> int | None:
            try:
                return int(self.client.head_object(Bucket=self.bucket, Key=key)["ContentLength"])
            except ClientError as exc:
                if _code(exc) in NOT_FOUND:
                    return None
                raise

        return self._call("HeadObject", key, head)

    def delete_keys(self, keys: Iterable[str]) -> None:
        self._delete(keys, self.policy)

    def discard_keys(self, keys: Iterable[str]) -> None:
        self._delete(keys, self.cleanup_policy)

    def _delete(self, keys: Iterable[str], policy: RetryPolicy) -> None:
        """DeleteObjects in batches of 1000; keys S3 reports as failed with a retryable code are
        sent again, alone, on the next attempt."""
        pending = list(dict.fromkeys(keys))
        for i in range(0, len(pending), 1000):
            remaining = pending[i : i + 1000]

            def attempt(batch: list[str] = remaining) -> None:
                answer = self.client.delete_objects(
                    Bucket=self.bucket, Delete={"Objects": [{"Key": k} for k in batch], "Quiet": True}
                )
                errors = [e for e in answer.get("Errors", []) if e.get("Code") not in NOT_FOUND]
                if errors:
                    batch[:] = [str(e.get("Key")) for e in errors]
                    first = errors[0]
                    response: Any = {
                        "Error": {
                            "Code": first.get("Code", ""),
                            "Message": f"{first.get('Message')} ({len(errors)} key(s), first {first.get('Key')})",
                        },
                        "ResponseMetadata": {"HTTPStatusCode": 200},
                    }
                    raise ClientError(response, "DeleteObjects")  # retried if the code is retryable

            self._call("DeleteObjects", remaining[0], attempt, policy)

    def _pages(
        self, operation: str, where: str, request: Callable[..., Any], more: Callable[[Any], dict[str, str] | None]
    ) -> Iterator[Any]:
        """A paginated listing, page by page: each page is one call, retried on its own with
        the marker that asks for it, so a failure late in a long listing repeats one page."""
        marker: dict[str, str] = {}
        while True:
            page = self._call(operation, where, functools.partial(request, **marker))
            yield page
            following = more(page)
            if following is None:
                return
            if following == marker:
                raise RemoteStorageError(f"{self.describe(where)}: {operation} repeated its marker {marker}")
            marker = following

    def list_prefix(self, prefix: str) -> list[RemoteObject]:
        found = []
        for page in self._pages(
            "ListObjectsV2",
            prefix,
            lambda **marker: self.client.list_objects_v2(
                Bucket=self.bucket, Prefix=prefix, MaxKeys=self.list_page_size, **marker
            ),
            next_token,
        ):
            for item in page.get("Contents", []):
                found.append(RemoteObject(item["Key"], int(item["Size"]), item["LastModified"]))
        return found

    def list_child_prefixes(self, prefix: str) -> list[str]:
        """Common prefixes of objects (a delimiter listing), and those of unfinished multipart
        uploads, taken from their keys (not every S3 implementation groups uploads by a
        delimiter, and there are few of them)."""
        found: set[str] = set()
        for page in self._pages(
            "ListObjectsV2",
            prefix,
            lambda **marker: self.client.list_objects_v2(
                Bucket=self.bucket, Prefix=prefix, Delimiter="/", MaxKeys=self.list_page_size, **marker
            ),
            next_token,
        ):
            found.update(str(p["Prefix"]) for p in page.get("CommonPrefixes", []))
        for key, _upload in self._uploads(prefix):
            head, slash, _ = key[len(prefix) :].partition("/")
            if slash:
                found.add(f"{prefix}{head}/")
        return sorted(found)

    def _uploads(self, prefix: str) -> Iterator[tuple[str, Any]]:
        """(key, listing entry) of every multipart upload under ``prefix``."""
        for page in self._pages(
            "ListMultipartUploads",
            prefix,
            lambda **marker: self.client.list_multipart_uploads(
                Bucket=self.bucket, Prefix=prefix, MaxUploads=self.list_page_size, **marker
            ),
            next_upload_marker,
        ):
            for item in page.get("Uploads", []):
                key = str(item["Key"])
                if key.startswith(prefix):  # the filter is the server's; trust, but check
                    yield key, item

    def list_incomplete_uploads(self, prefix: str) -> list[IncompleteUpload]:
        """Multipart uploads never completed nor aborted, with the bytes their parts hold; one
        is as old as its newest part (or its initiation), so an upload still sending parts
        is young however long ago it began. One aborted while listing is left out."""
        found = []
        for key, item in self._uploads(prefix):
            upload_id = str(item["UploadId"])
            parts = self._upload_parts(key, upload_id)
            if parts is None:
                continue
            size, newest = parts
            last_active = max(item["Initiated"], newest) if newest is not None else item["Initiated"]
            found.append(IncompleteUpload(MULTIPART_UPLOAD, key, key, last_active, size, upload_id))
        return sorted(found, key=lambda u: (u.key, u.last_active))

    def _upload_parts(self, key: str, upload_id: str) -> tuple[int, datetime | None] | None:
        """Bytes held by an upload's parts and when the newest was stored; None if it is gone."""
        size, newest = 0, None
        try:
            for page in self._pages(
                "ListParts",
                key,
                lambda **marker: self.client.list_parts(Bucket=self.bucket, Key=key, UploadId=upload_id, **marker),
                next_part_marker,
            ):
                for part in page.get("Parts", []):
                    size += int(part["Size"])
                    newest = part["LastModified"] if newest is None else max(newest, part["LastModified"])
        except RemoteStorageError as exc:
            if _code(exc.__cause__) in NO_SUCH_UPLOAD:
                return None
            raise
        return size, newest

    def remove_incomplete_upload(self, upload: IncompleteUpload) -> None:
        if upload.kind != MULTIPART_UPLOAD or upload.upload_id is None:
            raise RemoteStorageError(f"{self.describe(upload.key)}: not a multipart upload")
        self._abort(upload.key, upload.upload_id, quiet=False)
