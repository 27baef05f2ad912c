"""Injected S3 faults in front of moto's real HTTP endpoint: retries, then success or one clear
error, within the deadline.

Two ways in: botocore ``before-send`` hooks answer or fail a request before it leaves, and
the loopback proxy in faultproxy.py resets real TCP connections mid-body, answers 503/500,
or holds connections without answering.
"""

from __future__ import annotations

import _thread
import itertools
import os
import signal
import socket
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from botocore.awsrequest import AWSResponse
from botocore.exceptions import ConnectionClosedError, ReadTimeoutError

from tests.engine_support import wait_until
from tests.storage.faultproxy import Fault, FaultProxy, ProxyRequest
from tiering_core.kafka.topic import TopicIdPartition, TopicPartition
from tiering_core.storage.errors import RemoteStorageError
from tiering_core.storage.layout import ObjectKind, RemoteSegmentRef
from tiering_core.storage.retry import RetryPolicy
from tiering_core.storage.s3 import S3RemoteStorage
from tiering_core.storage.s3.multipart import Abandoned, Window

TIP = TopicIdPartition("EEEEEEEEEEEEEEEEEEEEEE", TopicPartition("faults", 0))
MiB = 1 << 20
SLACK = 0.5  # scheduling and connection teardown on a busy test machine
HELD = 60.0  # how long a part held in flight waits for the abort that releases it (only a failure waits it out)


class _Raw:
    def __init__(self, body: bytes) -> None:
        self._body = body

    def stream(self, **_: object) -> Iterator[bytes]:
        yield self._body


def error_response(status: int, code: str) -> AWSResponse:
    body = f"<Error><Code>{code}</Code><Message>injected</Message></Error>".encode()
    return AWSResponse("http://injected", status, {}, _Raw(body))


def make(endpoint_url: str, bucket: str, **kwargs) -> S3RemoteStorage:
    kwargs.setdefault("max_attempts", 5)
    kwargs.setdefault("timeout_seconds", 5.0)
    return S3RemoteStorage(bucket, endpoint_url=endpoint_url, region="us-east-1", **kwargs)


def new_ref() -> RemoteSegmentRef:
    return RemoteSegmentRef(TIP, 0, uuid.uuid4())


class Injector:
    """Fails the first ``count`` requests it sees, then lets them through."""

    def __init__(self, count: int, fault) -> None:
        self.count = count
        self.fault = fault
        self.seen = 0

    def __call__(self, request, **kwargs):
        self.seen += 1
        if self.seen <= self.count:
            return self.fault()
        return None


def raising(exc: Exception):
    def fault():
        raise exc

    return fault


@pytest.fixture()
def proxy(s3_endpoint) -> Iterator[FaultProxy]:
    upstream = urlsplit(s3_endpoint.url)
    with FaultProxy(upstream.hostname or "127.0.0.1", upstream.port or 80) as running:
        yield running


def first(n: int, fault: Fault, predicate):
    """A plan: ``fault`` for the first ``n`` requests matching ``predicate``."""
    hits = [0]

    def plan(request: ProxyRequest) -> Fault | None:
        if predicate(request):
            hits[0] += 1
            if hits[0] <= n:
                return fault
        return None

    return plan


def is_put(request: ProxyRequest) -> bool:
    return request.method == "PUT" and "uploadId" not in request.query


def is_get(request: ProxyRequest) -> bool:
    return request.method == "GET" and "list-type" not in request.query


# --- botocore hooks ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "fault",
    [
        pytest.param(lambda: error_response(503, "SlowDown"), id="503-slowdown"),
        pytest.param(lambda: error_response(500, "InternalError"), id="500"),
        pytest.param(lambda: error_response(400, "RequestLimitExceeded"), id="request-limit"),
        pytest.param(raising(ConnectionClosedError(endpoint_url="x")), id="connection-reset"),
        pytest.param(raising(ReadTimeoutError(endpoint_url="x")), id="read-timeout"),
    ],
)
def test_transient_faults_are_retried_to_success(s3_endpoint, fault) -> None:
    storage = make(s3_endpoint.url, s3_endpoint.new_bucket())
    injector = Injector(2, fault)
    storage.client.meta.events.register("before-send.s3.PutObject", injector)
    ref = new_ref()
    storage.copy_segment(ref, {ObjectKind.LOG: b"payload"})
    assert storage.fetch(ref, ObjectKind.LOG) == b"payload"
    assert injector.seen == 2 + 2  # the log twice failed then went up, then the manifest


def test_persistent_fault_gives_one_clear_error(s3_endpoint) -> None:
    bucket = s3_endpoint.new_bucket()
    storage = make(s3_endpoint.url, bucket, max_attempts=3)
    injector = Injector(10**6, lambda: error_response(503, "SlowDown"))
    storage.client.meta.events.register("before-send.s3.PutObject", injector)
    ref = new_ref()
    with pytest.raises(RemoteStorageError) as err:
        storage.copy_segment(ref, {ObjectKind.LOG: b"payload"})
    message = str(err.value)
    assert f"s3://{bucket}/{ref.key(ObjectKind.LOG)}: PutObject failed after 3 attempt(s)" in message
    assert "SlowDown" in message
    assert injector.seen == 3


def test_non_retryable_error_is_not_retried(s3_endpoint) -> None:
    storage = make(s3_endpoint.url, s3_endpoint.new_bucket())
    injector = Injector(10**6, lambda: error_response(403, "AccessDenied"))
    storage.client.meta.events.register("before-send.s3.PutObject", injector)
    with pytest.raises(RemoteStorageError, match=r"1 attempt.*AccessDenied"):
        storage.copy_segment(new_ref(), {ObjectKind.LOG: b"payload"})
    assert injector.seen == 1


def test_missing_bucket_is_one_clear_error(s3_endpoint) -> None:
    storage = make(s3_endpoint.url, "no-such-bucket-here")
    with pytest.raises(RemoteStorageError, match=r"s3://no-such-bucket-here/.*1 attempt.*NoSuchBucket"):
        storage.copy_segment(new_ref(), {ObjectKind.LOG: b"payload"})


def test_persistent_fault_stops_at_the_deadline(s3_endpoint) -> None:
    storage = make(s3_endpoint.url, s3_endpoint.new_bucket(), max_attempts=10**6, deadline_seconds=1.0)
    injector = Injector(10**6, lambda: error_response(503, "SlowDown"))
    storage.client.meta.events.register("before-send.s3.PutObject", injector)
    t0 = time.monotonic()
    with pytest.raises(RemoteStorageError, match=r"PutObject failed after \d+ attempt") as err:
        storage.copy_segment(new_ref(), {ObjectKind.LOG: b"payload"})
    elapsed = time.monotonic() - t0
    assert elapsed < 1.0 + SLACK, elapsed
    assert injector.seen >= 3 and f"after {injector.seen} attempt" in str(err.value)


def test_a_listing_retries_the_page_that_failed_not_the_whole_listing(s3_endpoint) -> None:
    bucket = s3_endpoint.new_bucket()
    storage = make(s3_endpoint.url, bucket)
    storage.list_page_size = 2
    client = s3_endpoint.client()
    names = [f"k/{i:02d}" for i in range(7)]
    for name in names:
        client.put_object(Bucket=bucket, Key=name, Body=b"x")
    requests: list[str] = []
    fail_once: list[bool] = []

    def third_page_fails_once(request, **_kwargs):
        requests.append(request.url)
        if "continuation-token" in request.url and len(requests) == 3 and not fail_once:
            fail_once.append(True)
            return error_response(503, "SlowDown")
        return None

    storage.client.meta.events.register("before-send.s3.ListObjectsV2", third_page_fails_once)
    assert [o.key for o in storage.list_prefix("k/")] == names
    assert fail_once and len(requests) == 4 + 1  # four pages, one of them asked twice
    assert sum("continuation-token" not in url for url in requests) == 1  # the first page only once


def test_multipart_parts_and_reads_retried_on_their_own(s3_endpoint, tmp_path: Path) -> None:
    bucket = s3_endpoint.new_bucket()
    storage = make(s3_endpoint.url, bucket, multipart_threshold_bytes=5 * MiB, multipart_part_size_bytes=5 * MiB)
    parts = Injector(2, lambda: error_response(503, "SlowDown"))
    reads = Injector(2, raising(ConnectionClosedError(endpoint_url="x")))
    storage.client.meta.events.register("before-send.s3.UploadPart", parts)
    data = os.urandom(11 * MiB)
    (tmp_path / "big.log").write_bytes(data)
    ref = new_ref()
    storage.copy_segment(ref, {ObjectKind.LOG: tmp_path / "big.log"})
    assert parts.seen == 3 + 2  # three parts, two of the attempts failed
    storage.read_manifest(ref)  # once per process: the faults below hit the log's own read
    storage.client.meta.events.register("before-send.s3.GetObject", reads)
    assert storage.fetch(ref, ObjectKind.LOG, 6 * MiB, 6 * MiB + 9) == data[6 * MiB : 6 * MiB + 10]
    assert reads.seen == 3
    assert storage.verify_segment(ref) == []
    head = s3_endpoint.client().head_object(Bucket=bucket, Key=ref.key(ObjectKind.LOG))
    assert head["ETag"].endswith('-3"')  # really a three-part multipart upload


def test_failed_multipart_is_aborted(s3_endpoint, tmp_path: Path) -> None:
    bucket = s3_endpoint.new_bucket()
    storage = make(s3_endpoint.url, bucket, multipart_threshold_bytes=5 * MiB, multipart_part_size_bytes=5 * MiB)
    storage.client.meta.events.register(
        "before-send.s3.UploadPart", Injector(10**6, lambda: error_response(400, "InvalidPart"))
    )
    log = tmp_path / "big.log"
    log.write_bytes(os.urandom(11 * MiB))
    ref = new_ref()
    with pytest.raises(RemoteStorageError, match="UploadPart"):
        storage.copy_segment(ref, {ObjectKind.LOG: log})
    assert s3_endpoint.client().list_multipart_uploads(Bucket=bucket).get("Uploads", []) == []
    assert storage.list_objects(TIP) == []


def test_one_failing_part_stops_the_rest_and_aborts(s3_endpoint, tmp_path: Path) -> None:
    bucket = s3_endpoint.new_bucket()
    storage = make(
        s3_endpoint.url,
        bucket,
        max_attempts=2,
        max_concurrency=1,
        multipart_threshold_bytes=5 * MiB,
        multipart_part_size_bytes=5 * MiB,
    )
    sent: list[str] = []

    def fail_part_two(request, **kwargs):
        sent.append(request.url)
        if "partNumber=2" in request.url:
            return error_response(500, "InternalError")
        return None

    storage.client.meta.events.register("before-send.s3.UploadPart", fail_part_two)
    log = tmp_path / "big.log"
    log.write_bytes(os.urandom(12 * MiB))
    ref = new_ref()
    with pytest.raises(RemoteStorageError, match=r"UploadPart failed after 2 attempt\(s\).*InternalError"):
        storage.copy_segment(ref, {ObjectKind.LOG: log})
    assert not any("partNumber=3" in url for url in sent)  # never started once part 2 failed
    assert s3_endpoint.client().list_multipart_uploads(Bucket=bucket).get("Uploads", []) == []
    assert storage.list_objects(TIP) == [] and storage.read_manifest(ref) is None


def _interrupt_with(kind: str):
    """Deliver an exception to the main thread the way an operator or a supervisor does:
    Ctrl-C (KeyboardInterrupt) or a real SIGTERM whose handler exits."""
    if kind == "keyboard-interrupt":
        return KeyboardInterrupt, _thread.interrupt_main
    return SystemExit, lambda: os.kill(os.getpid(), signal.SIGTERM)


def _part_threads_alive() -> bool:
    return any(t.name.startswith("s3-part") and t.is_alive() for t in threading.enumerate())


@pytest.mark.parametrize("kind", ["keyboard-interrupt", "sigterm"])
def test_an_interrupt_while_parts_go_up_stops_and_aborts_the_upload(
    s3_endpoint, tmp_path: Path, kind: str, ctrl_c: None
) -> None:
    """An exception raised in the thread that waits for the parts (Ctrl-C, a SIGTERM handler)
    stops the upload: it reaches the caller promptly (the abort follows the interrupt at once,
    while the parts in flight are still held), the parts not yet sent never are, and neither a
    multipart upload nor any object (manifest included) stays behind."""
    bucket = s3_endpoint.new_bucket()
    storage = make(
        s3_endpoint.url,
        bucket,
        max_concurrency=2,
        multipart_threshold_bytes=5 * MiB,
        multipart_part_size_bytes=5 * MiB,
    )
    error, interrupt = _interrupt_with(kind)
    sent: list[str] = []
    arrivals = itertools.count()  # one interrupt, however the two part threads interleave
    aborted = threading.Event()
    held_until_aborted: list[bool] = []
    moments: dict[str, float] = {}

    def interrupt_on_first_part(request, **_kwargs):
        sent.append(request.url)
        if next(arrivals) == 0:
            moments["interrupted"] = time.monotonic()
            interrupt()
        held_until_aborted.append(aborted.wait(HELD))  # slow parts: none ends before the abort

    def on_abort(**_kwargs):
        moments.setdefault("aborted", time.monotonic())
        aborted.set()

    storage.client.meta.events.register("before-send.s3.UploadPart", interrupt_on_first_part)
    storage.client.meta.events.register("before-send.s3.AbortMultipartUpload", on_abort)
    log = tmp_path / "big.log"
    log.write_bytes(os.urandom(50 * MiB))  # ten parts
    ref = new_ref()
    previous = signal.signal(signal.SIGTERM, _exit_on_signal)
    try:
        with pytest.raises(error):
            storage.copy_segment(ref, {ObjectKind.LOG: log})
    finally:
        signal.signal(signal.SIGTERM, previous)
    wait_until(lambda: not _part_threads_alive(), what="the parts in flight to end at their next read")
    assert held_until_aborted and all(held_until_aborted), held_until_aborted  # aborted with parts in flight
    assert moments["aborted"] - moments["interrupted"] < 3.0, moments  # no request to S3 in between
    assert 1 <= len(sent) <= 2, sent  # the parts in flight; none started after the interrupt
    assert s3_endpoint.client().list_multipart_uploads(Bucket=bucket).get("Uploads", []) == []
    assert storage.list_objects(TIP) == [] and storage.read_manifest(ref) is None


def _exit_on_signal(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)


def _refuses_to_be_read(body: object) -> bool:
    """A part's request body (a window onto the file) raises once its upload has been stopped."""
    assert isinstance(body, Window)
    try:
        body.read(0)
    except Abandoned:
        return True
    return False


def test_the_last_part_in_flight_aborts_the_upload_once_more(s3_endpoint, tmp_path: Path, ctrl_c: None) -> None:
    """S3 may still accept a part that was in flight when the upload was aborted, so the last
    part in flight to end sends the abort again."""
    bucket = s3_endpoint.new_bucket()
    storage = make(
        s3_endpoint.url, bucket, max_concurrency=2, multipart_threshold_bytes=5 * MiB, multipart_part_size_bytes=5 * MiB
    )
    senders: list[str] = []  # the threads that sent an abort, in the order they first sent it
    answered: list[str] = []  # the threads whose abort was answered, in the order of the answers
    first_abort = threading.Event()

    def on_abort(request, **_kwargs):
        name = threading.current_thread().name
        if name not in senders:  # a 5xx answer (moto under load) is retried: one entry per abort
            senders.append(name)
        first_abort.set()

    def on_abort_answered(http_response, **_kwargs):
        if http_response.status_code < 500:
            answered.append(threading.current_thread().name)

    arrivals = itertools.count()  # one interrupt, however the two part threads interleave
    held_until_aborted: list[bool] = []

    def hold_first_part(request, **_kwargs):
        if next(arrivals) == 0:
            _thread.interrupt_main()
            held_until_aborted.append(first_abort.wait(HELD))  # still in flight when the caller aborts

    storage.client.meta.events.register("before-send.s3.AbortMultipartUpload", on_abort)
    storage.client.meta.events.register("after-call.s3.AbortMultipartUpload", on_abort_answered)
    storage.client.meta.events.register("before-send.s3.UploadPart", hold_first_part)
    log = tmp_path / "big.log"
    log.write_bytes(os.urandom(20 * MiB))
    with pytest.raises(KeyboardInterrupt):
        storage.copy_segment(new_ref(), {ObjectKind.LOG: log})
    wait_until(lambda: not _part_threads_alive(), what="the part in flight to end and abort again")
    assert held_until_aborted == [True]
    # Both aborts may be in flight at once, so S3 may answer them in either order; the caller's
    # goes out first, and the part's only once the part has ended.
    assert len(senders) == 2, senders
    assert senders[0] == threading.main_thread().name and senders[1].startswith("s3-part"), senders
    assert sorted(answered) == sorted(senders), answered
    assert s3_endpoint.client().list_multipart_uploads(Bucket=bucket).get("Uploads", []) == []


def test_a_failed_part_is_the_error_reported_not_the_parts_it_stopped(s3_endpoint, tmp_path: Path) -> None:
    """Part 2 fails for good while part 1 is still being sent: part 1 is stopped mid-send (it
    goes on only once its body refuses to be read, and is never answered), and the error raised
    is part 2's, not part 1's stop."""
    bucket = s3_endpoint.new_bucket()
    storage = make(
        s3_endpoint.url,
        bucket,
        max_attempts=1,
        max_concurrency=2,
        multipart_threshold_bytes=5 * MiB,
        multipart_part_size_bytes=5 * MiB,
    )
    answered: list[str] = []

    def parts(request, **_kwargs):
        if "partNumber=2" in request.url:
            return error_response(400, "InvalidPart")
        if "partNumber=1" in request.url:  # in flight until part 2's failure has stopped the upload
            wait_until(lambda: _refuses_to_be_read(request.body), what="part 2's failure to stop the upload")
        return None

    def on_answer(http_response, **_kwargs):
        if http_response.status_code < 300:
            answered.append(http_response.url)

    storage.client.meta.events.register("before-send.s3.UploadPart", parts)
    storage.client.meta.events.register("after-call.s3.UploadPart", on_answer)
    log = tmp_path / "big.log"
    log.write_bytes(os.urandom(12 * MiB))
    with pytest.raises(RemoteStorageError, match=r"UploadPart failed after 1 attempt\(s\).*InvalidPart"):
        storage.copy_segment(new_ref(), {ObjectKind.LOG: log})
    assert not any("partNumber=1" in url for url in answered), answered  # stopped, never completed
    assert s3_endpoint.client().list_multipart_uploads(Bucket=bucket).get("Uploads", []) == []


# --- the loopback proxy: real sockets ----------------------------------------------------------


@pytest.mark.parametrize("fault", [Fault.SLOW_DOWN, Fault.INTERNAL_ERROR, Fault.RESET_DURING_REQUEST])
def test_proxy_faults_on_put_are_retried_to_success(s3_endpoint, proxy: FaultProxy, fault: Fault) -> None:
    proxy.plan = first(2, fault, is_put)
    storage = make(proxy.url, s3_endpoint.new_bucket())
    ref = new_ref()
    payload = os.urandom(256 * 1024)
    storage.copy_segment(ref, {ObjectKind.LOG: payload})
    assert storage.fetch(ref, ObjectKind.LOG) == payload
    log_puts = proxy.matching(lambda r: is_put(r) and r.target.endswith(".log"))
    assert [r.fault for r in log_puts] == [fault, fault, None]


def test_proxy_persistent_slowdown_is_one_clear_error(s3_endpoint, proxy: FaultProxy) -> None:
    proxy.plan = lambda r: Fault.SLOW_DOWN if is_put(r) else None
    bucket = s3_endpoint.new_bucket()
    storage = make(proxy.url, bucket, max_attempts=4)
    ref = new_ref()
    with pytest.raises(RemoteStorageError) as err:
        storage.copy_segment(ref, {ObjectKind.LOG: b"payload"})
    assert str(err.value).startswith(f"s3://{bucket}/{ref.key(ObjectKind.LOG)}: PutObject failed after 4 attempt(s)")
    assert "SlowDown" in str(err.value)
    assert len(proxy.matching(is_put)) == 4
    assert storage.list_objects(TIP) == []


def test_connection_reset_mid_part_is_retried(s3_endpoint, proxy: FaultProxy, tmp_path: Path) -> None:
    proxy.plan = first(2, Fault.RESET_DURING_REQUEST, lambda r: "partNumber=2" in r.query)
    bucket = s3_endpoint.new_bucket()
    storage = make(proxy.url, bucket, multipart_threshold_bytes=5 * MiB, multipart_part_size_bytes=5 * MiB)
    log = tmp_path / "big.log"
    log.write_bytes(os.urandom(12 * MiB))
    ref = new_ref()
    manifest = storage.copy_segment(ref, {ObjectKind.LOG: log})
    assert len(proxy.matching(lambda r: "partNumber=2" in r.query)) == 3
    assert len(proxy.matching(lambda r: "partNumber=1" in r.query)) == 1
    assert storage.verify_segment(ref) == []  # the resent part's bytes, and the CRC, are right
    assert manifest.objects[ObjectKind.LOG].size == 12 * MiB
    assert s3_endpoint.client().head_object(Bucket=bucket, Key=ref.key(ObjectKind.LOG))["ETag"].endswith('-3"')


def is_complete(request: ProxyRequest) -> bool:
    return request.method == "POST" and "uploadId" in request.query


def complete_plan(first_fault: Fault):
    """The first complete request meets ``first_fault``; the retry is told NoSuchUpload, as S3
    says once a completed upload's id has expired."""
    seen = [0]

    def plan(request: ProxyRequest) -> Fault | None:
        if not is_complete(request):
            return None
        seen[0] += 1
        return first_fault if seen[0] == 1 else Fault.NO_SUCH_UPLOAD

    return plan


def test_lost_answer_to_a_completed_multipart_upload_is_success(s3_endpoint, proxy: FaultProxy, tmp_path: Path) -> None:
    """The complete request reached S3 but its answer was cut off; the retry meets
    NoSuchUpload, and the object S3 holds carries exactly the ETag our parts make."""
    proxy.plan = complete_plan(Fault.RESET_DURING_RESPONSE)
    bucket = s3_endpoint.new_bucket()
    storage = make(proxy.url, bucket, multipart_threshold_bytes=5 * MiB, multipart_part_size_bytes=5 * MiB)
    log = tmp_path / "big.log"
    log.write_bytes(os.urandom(11 * MiB))
    ref = new_ref()
    storage.copy_segment(ref, {ObjectKind.LOG: log})
    assert [r.fault for r in proxy.matching(is_complete)] == [Fault.RESET_DURING_RESPONSE, Fault.NO_SUCH_UPLOAD]
    assert storage.verify_segment(ref) == []
    assert s3_endpoint.client().list_multipart_uploads(Bucket=bucket).get("Uploads", []) == []


def test_no_such_upload_without_our_object_is_an_error(s3_endpoint, proxy: FaultProxy, tmp_path: Path) -> None:
    """The complete request never reached S3: NoSuchUpload on the retry is a real failure."""
    proxy.plan = complete_plan(Fault.RESET_DURING_REQUEST)
    bucket = s3_endpoint.new_bucket()
    storage = make(proxy.url, bucket, multipart_threshold_bytes=5 * MiB, multipart_part_size_bytes=5 * MiB)
    log = tmp_path / "big.log"
    log.write_bytes(os.urandom(11 * MiB))
    ref = new_ref()
    with pytest.raises(RemoteStorageError, match=r"CompleteMultipartUpload failed after 2 attempt.*NoSuchUpload"):
        storage.copy_segment(ref, {ObjectKind.LOG: log})
    assert storage.list_objects(TIP) == []
    assert s3_endpoint.client().list_multipart_uploads(Bucket=bucket).get("Uploads", []) == []


def test_reads_cut_off_mid_body_are_resumed(s3_endpoint, proxy: FaultProxy) -> None:
    bucket = s3_endpoint.new_bucket()
    ref = new_ref()
    data = os.urandom(3 * MiB)
    make(s3_endpoint.url, bucket).copy_segment(ref, {ObjectKind.LOG: data})
    storage = make(proxy.url, bucket)
    storage.read_manifest(ref)  # once per process: the faults below hit the log's own reads
    proxy.requests.clear()
    proxy.plan = first(1, Fault.RESET_DURING_RESPONSE, is_get)
    assert storage.fetch(ref, ObjectKind.LOG, 100, 2 * MiB) == data[100 : 2 * MiB + 1]
    assert [r.fault for r in proxy.matching(is_get)] == [Fault.RESET_DURING_RESPONSE, None]

    proxy.requests.clear()
    proxy.plan = first(2, Fault.RESET_DURING_RESPONSE, is_get)
    with storage.open_object(ref.key(ObjectKind.LOG), 10) as stream:  # the primitive a long read resumes
        assert stream.read() == data[10:]
    gets = proxy.matching(is_get)
    assert [r.fault for r in gets] == [Fault.RESET_DURING_RESPONSE, Fault.RESET_DURING_RESPONSE, None]
    etag = gets[0].headers.get("if-match")
    assert etag is None and all(r.headers.get("if-match") for r in gets[1:])  # resumed on the same version
    assert all(r.headers["range"].startswith("bytes=") for r in gets)


def test_hung_endpoint_fails_within_the_deadline(s3_endpoint, proxy: FaultProxy) -> None:
    bucket = s3_endpoint.new_bucket()
    ref = new_ref()
    make(s3_endpoint.url, bucket).copy_segment(ref, {ObjectKind.LOG: b"stored"})
    timeout, deadline = 0.5, 2.0
    storage = make(proxy.url, bucket, max_attempts=10, timeout_seconds=timeout, deadline_seconds=deadline)
    storage.read_manifest(ref)  # once per process: the endpoint hangs on the log's read
    proxy.requests.clear()
    proxy.plan = lambda _r: Fault.HANG

    t0 = time.monotonic()
    with pytest.raises(RemoteStorageError) as err:
        storage.fetch(ref, ObjectKind.LOG)
    elapsed = time.monotonic() - t0
    attempts = len(proxy.matching(is_get))
    assert elapsed < deadline + SLACK, elapsed
    assert 2 <= attempts <= 4  # each waits one read timeout; none starts that would end past the deadline
    assert f"s3://{bucket}/{ref.key(ObjectKind.LOG)}: GetObject failed after {attempts} attempt(s)" in str(err.value)
    assert "ReadTimeoutError" in str(err.value)

    # an upload: the PUT gives up within the deadline, the cleanup after it within one timeout
    proxy.requests.clear()
    proxy.plan = lambda r: None if r.method == "HEAD" else Fault.HANG
    t0 = time.monotonic()
    with pytest.raises(RemoteStorageError, match=r"PutObject failed after \d attempt\(s\).*ReadTimeoutError"):
        storage.copy_segment(new_ref(), {ObjectKind.LOG: b"x"})
    elapsed = time.monotonic() - t0
    assert elapsed < deadline + timeout + SLACK, elapsed
    assert 2 <= len(proxy.matching(is_put)) <= 4
    assert len(proxy.matching(lambda r: r.method == "POST" and "delete" in r.query)) == 1  # one cleanup attempt


def test_hung_part_upload_is_aborted_within_the_deadline(s3_endpoint, proxy: FaultProxy, tmp_path: Path) -> None:
    proxy.plan = lambda r: Fault.HANG if "partNumber" in r.query else None
    bucket = s3_endpoint.new_bucket()
    timeout, deadline = 0.4, 1.2
    storage = make(
        proxy.url,
        bucket,
        timeout_seconds=timeout,
        deadline_seconds=deadline,
        max_concurrency=2,
        multipart_threshold_bytes=5 * MiB,
        multipart_part_size_bytes=5 * MiB,
    )
    log = tmp_path / "big.log"
    log.write_bytes(os.urandom(11 * MiB))
    t0 = time.monotonic()
    with pytest.raises(RemoteStorageError, match="UploadPart failed after"):
        storage.copy_segment(new_ref(), {ObjectKind.LOG: log})
    elapsed = time.monotonic() - t0
    assert elapsed < deadline + 2 * timeout + SLACK, elapsed  # parts in parallel, then abort and cleanup
    assert not proxy.matching(lambda r: "partNumber=3" in r.query)  # never started after the others failed
    assert len(proxy.matching(lambda r: r.method == "DELETE" and "uploadId" in r.query)) == 1
    assert s3_endpoint.client().list_multipart_uploads(Bucket=bucket).get("Uploads", []) == []


def test_a_retry_that_hangs_after_quick_503s_still_ends_at_the_deadline(s3_endpoint, proxy: FaultProxy) -> None:
    """503s answered at once for most of the deadline, then the endpoint hangs: the attempt
    that meets the hang starts with well under one read timeout left, and must give up when
    the deadline is reached, not a full read timeout later."""
    bucket = s3_endpoint.new_bucket()
    ref = new_ref()
    make(s3_endpoint.url, bucket).copy_segment(ref, {ObjectKind.LOG: b"stored"})
    # Seconds long enough that a 503 answered slowly on a loaded machine still leaves room for
    # the next attempt (a retry starts only if it is expected to end by the deadline).
    timeout, deadline, hang_after = 4.0, 6.0, 4.8
    storage = make(proxy.url, bucket, timeout_seconds=timeout, deadline_seconds=deadline)
    storage.policy = RetryPolicy(max_attempts=10**6, base_delay=0.05, max_delay=0.05, deadline_seconds=deadline)
    first_get: list[float] = []

    def plan(request: ProxyRequest) -> Fault | None:
        if not is_get(request):
            return None
        first_get.append(time.monotonic())
        return Fault.SLOW_DOWN if time.monotonic() - first_get[0] < hang_after else Fault.HANG

    proxy.plan = plan
    t0 = time.monotonic()
    with pytest.raises(RemoteStorageError, match=r"GetObject failed after \d+ attempt\(s\).*ReadTimeoutError"):
        storage.fetch(ref, ObjectKind.LOG)
    elapsed = time.monotonic() - t0
    faults = [r.fault for r in proxy.matching(is_get)]
    assert faults[-1] is Fault.HANG and faults.count(Fault.HANG) == 1 and faults.count(Fault.SLOW_DOWN) > 5
    assert elapsed < deadline + 0.3, elapsed  # without the cap: about hang_after + timeout = 8.8 s


def test_501_not_implemented_is_not_retried(s3_endpoint) -> None:
    storage = make(s3_endpoint.url, s3_endpoint.new_bucket())
    injector = Injector(10**6, lambda: error_response(501, "NotImplemented"))
    storage.client.meta.events.register("before-send.s3.PutObject", injector)
    with pytest.raises(RemoteStorageError, match=r"PutObject failed after 1 attempt\(s\).*NotImplemented"):
        storage.copy_segment(new_ref(), {ObjectKind.LOG: b"payload"})
    assert injector.seen == 1


def test_refused_connections_are_retried_then_one_clear_error() -> None:
    with socket.socket() as placeholder:  # a port nothing listens on
        placeholder.bind(("127.0.0.1", 0))
        port = placeholder.getsockname()[1]
    storage = make(f"http://127.0.0.1:{port}", "refused-bucket", max_attempts=3, deadline_seconds=5.0)
    attempts: list[str] = []
    storage.client.meta.events.register("before-send.s3.GetObject", lambda request, **_: attempts.append(request.url))
    t0 = time.monotonic()
    with pytest.raises(RemoteStorageError, match=r"s3://refused-bucket/.*GetObject failed after 3 attempt"):
        storage.fetch(new_ref(), ObjectKind.LOG)
    assert time.monotonic() - t0 < 5.0
    assert len(attempts) == 3
