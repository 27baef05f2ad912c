"""Compiled loops over a batch group's decompressed records: the varint framing of record v2;
and over a chunk's batch headers, read in one pass.

The record layout (docs/kafka-rules.md section 1, "Record batch v2") is parsed by
numba-compiled functions over a numpy ``uint8`` view, filling one slot per record in arrays the caller allocated (sizes
come from the batch headers, checked against the bytes first). Nothing here builds a Python
object per record. Every read is checked against the end of its record and of its batch: a
damaged or hostile batch stops the loop with an error code (``ERROR_REASONS``) and the batch
and record it was met in, and never reads outside the buffer. Header arrays grow by doubling,
so they are bounded by the bytes too (a header takes at least two bytes). Batch headers are
read only as far as whole v2 batches go (``batch_headers``): the caller names what stopped it.

numba compiles these functions on the first decode in a process: about 4-5 s of CPU on one core
for the set (measured on a 2-core server). ``cache=True`` keeps the machine code in
``__pycache__`` beside this file or, on a read-only install, in numba's per-user cache
directory (``NUMBA_CACHE_DIR``, else under ``~/.cache``), so later processes load it in about
0.1 s; where no cache location is writable the decoder still works, compiling in every process.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar, cast

import numpy as np
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic

from tiering_core.kafka.batch import BATCH_HEADER, HEADER_SIZE, LOG_OVERHEAD, MAGIC_OFFSET, MAGIC_V2

F = TypeVar("F", bound=Callable[..., Any])


def compiled(fn: F) -> F:
    """``fn`` compiled in nopython mode, its machine code cached on disk where a cache is writable."""
    try:
        return cast(F, njit(cache=True, nogil=True)(fn))
    except RuntimeError:  # numba found no writable cache location: compile in each process instead
        return cast(F, njit(nogil=True)(fn))


def _inlined(fn: F) -> F:
    """``fn`` inlined into its callers as numba IR: no call, and no reference counting of the
    arrays it is passed (an atomic increment and decrement per call otherwise, which would
    cost more than parsing a varint)."""
    return cast(F, njit(inline="always")(fn))


OK = 0
VARINT_PAST_END = 1
VARINT_TOO_LONG = 2
RECORD_LENGTH = 3
KEY_PAST_RECORD = 5
VALUE_PAST_RECORD = 6
NEGATIVE_HEADER_COUNT = 7
NULL_HEADER_KEY = 8
HEADER_KEY_PAST_RECORD = 9
HEADER_KEY_NOT_UTF8 = 10
HEADER_VALUE_PAST_RECORD = 11
RECORD_LENGTH_MISMATCH = 12
BYTES_LEFT_OVER = 13
HEADER_COUNT_PAST_RECORD = 14

#: Why a parse stopped; ``{value}`` is the error's value slot (a length, a count, a byte count).
ERROR_REASONS = {
    VARINT_PAST_END: "a varint runs past the end of its record",
    VARINT_TOO_LONG: "varint is longer than 10 bytes",
    RECORD_LENGTH: "record length {value} runs past the end of the records",
    KEY_PAST_RECORD: "key length {value} runs past the end of its record",
    VALUE_PAST_RECORD: "value length {value} runs past the end of its record",
    NEGATIVE_HEADER_COUNT: "negative header count {value}",
    NULL_HEADER_KEY: "header key length {value} (header keys cannot be null)",
    HEADER_KEY_PAST_RECORD: "header key length {value} runs past the end of its record",
    HEADER_KEY_NOT_UTF8: "a header key is not valid UTF-8",
    HEADER_VALUE_PAST_RECORD: "header value length {value} runs past the end of its record",
    RECORD_LENGTH_MISMATCH: "record length {value} does not match its fields",
    BYTES_LEFT_OVER: "{value} byte(s) left after the batch's records",
    HEADER_COUNT_PAST_RECORD: "header count {value} is more than the bytes left in its record",
}

#: The smallest record: length, attributes, timestamp delta, offset delta, key length, value
#: length and header count, one byte each. A record count above bytes / this is damage.
MIN_RECORD_BYTES = 7
_MASK63 = 0x7FFFFFFFFFFFFFFF


@_inlined
def zigzag_varint(buf: np.ndarray, pos: int, end: int) -> tuple[int, int]:
    """The zigzag varint at ``buf[pos]`` ending before ``end``, and the position after it; the
    position is -VARINT_PAST_END or -VARINT_TOO_LONG when the varint is malformed."""
    result = 0
    shift = 0
    while True:
        if pos >= end:
            return 0, -VARINT_PAST_END
        byte = int(buf[pos])
        pos += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            break
        shift += 7
        if shift > 63:
            return 0, -VARINT_TOO_LONG
    return ((result >> 1) & _MASK63) ^ -(result & 1), pos


#: ``BATCH_HEADER``'s fields: (offset in the header, bytes, signed), in its order.
_HEADER_FIELDS = ((0, 8, True), (8, 4, True), (12, 4, True), (16, 1, True), (17, 4, False), (21, 2, True),
                  (23, 4, True), (27, 8, True), (35, 8, True), (43, 8, True), (51, 2, True), (53, 4, True),
                  (57, 4, True))  # fmt: skip
_FIELD_AT = np.array([f[0] for f in _HEADER_FIELDS], np.int64)
_FIELD_SIZE = np.array([f[1] for f in _HEADER_FIELDS], np.int64)
_FIELD_SIGNED = np.array([f[2] for f in _HEADER_FIELDS], np.bool_)
assert BATCH_HEADER.size == HEADER_SIZE == int(_FIELD_AT[-1] + _FIELD_SIZE[-1])
_BATCH_LENGTH_AT = 8
_MIN_BATCH_LENGTH = HEADER_SIZE - LOG_OVERHEAD


@_inlined
def _big_endian(buf: np.ndarray, at: int, size: int, signed: bool) -> int:
    """The ``size``-byte big-endian integer at ``buf[at]`` (two's complement when ``signed``)."""
    value = 0
    for k in range(size):
        value = (value << 8) | int(buf[at + k])
    if signed and size < 8 and value >= 1 << (8 * size - 1):
        value -= 1 << (8 * size)
    return value


@compiled
def batch_headers(buf: np.ndarray) -> np.ndarray:
    """The header fields (``BATCH_HEADER``'s, in its order, one row per batch) of the whole v2
    batches back to back from the start of ``buf``, up to the first that is not one: a header
    cut short, another magic, a length below a v2 header's or running past the end of ``buf``."""
    count = 0
    at = 0
    while at + HEADER_SIZE <= buf.size:
        length = _big_endian(buf, at + _BATCH_LENGTH_AT, 4, True)
        if buf[at + MAGIC_OFFSET] != MAGIC_V2 or length < _MIN_BATCH_LENGTH or at + LOG_OVERHEAD + length > buf.size:
            break
        count += 1
        at += LOG_OVERHEAD + length
    fields = np.empty((count, _FIELD_AT.size), np.int64)
    at = 0
    for i in range(count):
        for f in range(_FIELD_AT.size):
            fields[i, f] = _big_endian(buf, at + _FIELD_AT[f], _FIELD_SIZE[f], _FIELD_SIGNED[f])
        at += LOG_OVERHEAD + fields[i, 1]
    return fields


@_inlined
def is_utf8(buf: np.ndarray, start: int, end: int) -> bool:
    """Whether ``buf[start:end]`` is UTF-8 as Python's strict decoder reads it (no overlong forms,
    no surrogates, nothing above U+10FFFF)."""
    i = start
    while i < end:
        c = buf[i]
        if c < 0x80:
            i += 1
            continue
        if 0xC2 <= c <= 0xDF:
            need, low, high = 1, 0x80, 0xBF
        elif c == 0xE0:
            need, low, high = 2, 0xA0, 0xBF
        elif 0xE1 <= c <= 0xEC or c == 0xEE or c == 0xEF:
            need, low, high = 2, 0x80, 0xBF
        elif c == 0xED:
            need, low, high = 2, 0x80, 0x9F
        elif c == 0xF0:
            need, low, high = 3, 0x90, 0xBF
        elif 0xF1 <= c <= 0xF3:
            need, low, high = 3, 0x80, 0xBF
        elif c == 0xF4:
            need, low, high = 3, 0x80, 0x8F
        else:
            return False
        if i + need >= end:
            return False
        second = buf[i + 1]
        if second < low or second > high:
            return False
        for k in range(2, need + 1):
            if buf[i + k] < 0x80 or buf[i + k] > 0xBF:
                return False
        i += need + 1
    return True


# Where ``_parse_span`` stands: the batch, the record within it, the position of that record, the
# record's number across the batches and the header slots used.
_BATCH, _RECORD, _POSITION, _RECORD_NUMBER, _HEADERS = range(5)
_STATE_SIZE = 5


@compiled
def parse_records(
    buf: np.ndarray,
    starts: np.ndarray,
    ends: np.ndarray,
    counts: np.ndarray,
    timestamp_delta: np.ndarray,
    offset_delta: np.ndarray,
    key_start: np.ndarray,
    key_length: np.ndarray,
    value_start: np.ndarray,
    value_length: np.ndarray,
    header_count: np.ndarray,
    error: np.ndarray,
) -> tuple[int, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Parse the records of each batch ``b`` in ``buf[starts[b]:ends[b]]`` (``counts[b]`` of them).

    Record ``r`` (numbered across the batches) gets its deltas, key and value start and length
    (length -1: null) and header count; headers go, in record order, into the returned arrays
    (key start, key length, value start, value length), of which the first ``n`` are used:
    ``(n, header_key_start, header_key_length, header_value_start, header_value_length)``. On
    damage ``error`` holds ``(code, batch, record within the batch, value)`` and the rest is
    partial.

    The records are parsed by ``_parse_span``, which returns when the header arrays are full;
    they grow here and it resumes. Arrays reassigned inside the per-record loop would cost
    reference counting on every record (measured: a third of the parse).
    """
    total = 0
    for b in range(starts.size):  # the caller's layout, checked once: every read below stays in it
        if starts[b] < 0 or starts[b] > ends[b] or ends[b] > buf.size or counts[b] < 0:
            raise IndexError("a records section lies outside the buffer")
        total += counts[b]
    slots = min(timestamp_delta.size, offset_delta.size, key_start.size, key_length.size)
    if total > min(slots, value_start.size, value_length.size, header_count.size):
        raise IndexError("the per-record arrays are smaller than the record counts")
    capacity = 16
    hk_start = np.empty(capacity, np.int64)
    hk_length = np.empty(capacity, np.int32)
    hv_start = np.empty(capacity, np.int64)
    hv_length = np.empty(capacity, np.int32)
    state = np.zeros(_STATE_SIZE, np.int64)
    if starts.size:
        state[_POSITION] = starts[0]
    while True:
        needed = _parse_span(
            buf,
            starts,
            ends,
            counts,
            timestamp_delta,
            offset_delta,
            key_start,
            key_length,
            value_start,
            value_length,
            header_count,
            hk_start,
            hk_length,
            hv_start,
            hv_length,
            state,
            error,
        )
        if needed <= capacity:  # done, or stopped by damage
            return state[_HEADERS], hk_start, hk_length, hv_start, hv_length
        while needed > capacity:
            capacity *= 2
        used = state[_HEADERS]
        hk_start = _grow64(hk_start, capacity, used)
        hk_length = _grow32(hk_length, capacity, used)
        hv_start = _grow64(hv_start, capacity, used)
        hv_length = _grow32(hv_length, capacity, used)


@compiled
def _parse_span(
    buf: np.ndarray,
    starts: np.ndarray,
    ends: np.ndarray,
    counts: np.ndarray,
    timestamp_delta: np.ndarray,
    offset_delta: np.ndarray,
    key_start: np.ndarray,
    key_length: np.ndarray,
    value_start: np.ndarray,
    value_length: np.ndarray,
    header_count: np.ndarray,
    hk_start: np.ndarray,
    hk_length: np.ndarray,
    hv_start: np.ndarray,
    hv_length: np.ndarray,
    state: np.ndarray,
    error: np.ndarray,
) -> int:
    """``parse_records``' loop from where ``state`` stands (its layout checked by the caller):
    0 once every record is parsed or damage stopped it (``error``), else the header slots the
    next record needs beyond the header arrays, ``state`` then standing at that record."""
    capacity = min(hk_start.size, hk_length.size, hv_start.size, hv_length.size)
    b = state[_BATCH]
    first = state[_RECORD]
    pos = state[_POSITION]
    r = state[_RECORD_NUMBER]
    n = state[_HEADERS]
    while b < starts.size:
        batch_end = ends[b]
        for i in range(first, counts[b]):
            error[1] = b
            error[2] = i
            record_start = pos
            length, pos = zigzag_varint(buf, pos, batch_end)
            if pos < 0:
                error[0] = -pos
                state[_HEADERS] = n
                return 0
            end = pos + length
            if length <= 0 or end > batch_end:
                error[0] = RECORD_LENGTH
                error[3] = length
                state[_HEADERS] = n
                return 0
            pos += 1  # attributes: unused in v2
            value, pos = zigzag_varint(buf, pos, end)
            if pos < 0:
                error[0] = -pos
                state[_HEADERS] = n
                return 0
            timestamp_delta[r] = value
            value, pos = zigzag_varint(buf, pos, end)
            if pos < 0:
                error[0] = -pos
                state[_HEADERS] = n
                return 0
            offset_delta[r] = value
            size, pos = zigzag_varint(buf, pos, end)
            if pos < 0:
                error[0] = -pos
                state[_HEADERS] = n
                return 0
            if size < 0:
                key_length[r] = -1
                key_start[r] = pos
            elif size > end - pos:
                error[0] = KEY_PAST_RECORD
                error[3] = size
                state[_HEADERS] = n
                return 0
            else:
                key_start[r] = pos
                key_length[r] = size
                pos += size
            size, pos = zigzag_varint(buf, pos, end)
            if pos < 0:
                error[0] = -pos
                state[_HEADERS] = n
                return 0
            if size < 0:
                value_length[r] = -1
                value_start[r] = pos
            elif size > end - pos:
                error[0] = VALUE_PAST_RECORD
                error[3] = size
                state[_HEADERS] = n
                return 0
            else:
                value_start[r] = pos
                value_length[r] = size
                pos += size
            headers, pos = zigzag_varint(buf, pos, end)
            if pos < 0:
                error[0] = -pos
                state[_HEADERS] = n
                return 0
            if headers < 0 or headers > end - pos:  # more headers than bytes left cannot be
                error[0] = NEGATIVE_HEADER_COUNT if headers < 0 else HEADER_COUNT_PAST_RECORD
                error[3] = headers
                state[_HEADERS] = n
                return 0
            if n + headers > capacity:  # parsed again, from its start, once the arrays have grown
                state[_BATCH] = b
                state[_RECORD] = i
                state[_POSITION] = record_start
                state[_RECORD_NUMBER] = r
                state[_HEADERS] = n
                return n + headers
            header_count[r] = headers
            for _h in range(headers):
                size, pos = zigzag_varint(buf, pos, end)
                if pos < 0:
                    error[0] = -pos
                    state[_HEADERS] = n
                    return 0
                if size < 0:
                    error[0] = NULL_HEADER_KEY
                    error[3] = size
                    state[_HEADERS] = n
                    return 0
                if size > end - pos:
                    error[0] = HEADER_KEY_PAST_RECORD
                    error[3] = size
                    state[_HEADERS] = n
                    return 0
                if not is_utf8(buf, pos, pos + size):
                    error[0] = HEADER_KEY_NOT_UTF8
                    state[_HEADERS] = n
                    return 0
                hk_start[n] = pos
                hk_length[n] = size
                pos += size
                size, pos = zigzag_varint(buf, pos, end)
                if pos < 0:
                    error[0] = -pos
                    state[_HEADERS] = n
                    return 0
                if size < 0:
                    hv_start[n] = pos
                    hv_length[n] = -1
                elif size > end - pos:
                    error[0] = HEADER_VALUE_PAST_RECORD
                    error[3] = size
                    state[_HEADERS] = n
                    return 0
                else:
                    hv_start[n] = pos
                    hv_length[n] = size
                    pos += size
                n += 1
            if pos != end:
                error[0] = RECORD_LENGTH_MISMATCH
                error[3] = length
                state[_HEADERS] = n
                return 0
            r += 1
        if pos != batch_end:
            error[0] = BYTES_LEFT_OVER
            error[1] = b
            error[2] = counts[b]
            error[3] = batch_end - pos
            state[_HEADERS] = n
            return 0
        b += 1
        first = 0
        if b < starts.size:
            pos = starts[b]
    state[_HEADERS] = n
    return 0


@compiled
def _grow64(a: np.ndarray, capacity: int, used: int) -> np.ndarray:
    out = np.empty(capacity, np.int64)
    out[:used] = a[:used]
    return out


@compiled
def _grow32(a: np.ndarray, capacity: int, used: int) -> np.ndarray:
    out = np.empty(capacity, np.int32)
    out[:used] = a[:used]
    return out


@intrinsic
def _copy(typingctx: Any, dst: Any, dst_at: Any, src: Any, src_at: Any, count: Any) -> Any:
    """``dst[dst_at:dst_at + count] = src[src_at:src_at + count]`` as one ``memcpy`` (numba's slice
    assignment copies byte by byte, several times slower); the caller has checked the bounds."""
    signature = types.void(dst, types.intp, src, types.intp, types.intp)

    def codegen(context: Any, builder: Any, sig: Any, args: Any) -> Any:
        d, d_at, s, s_at, n = args
        d_data = context.make_array(sig.args[0])(context, builder, d).data
        s_data = context.make_array(sig.args[2])(context, builder, s).data
        cgutils.raw_memcpy(builder, builder.gep(d_data, [d_at]), builder.gep(s_data, [s_at]), n, 1)
        return context.get_dummy_value()

    return signature, codegen


@compiled
def gather(buf: np.ndarray, start: np.ndarray, length: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Arrow's binary layout of the slices ``buf[start[i]:start[i] + length[i]]`` (length -1, a
    null, takes no bytes): int32 offsets (n + 1) and the bytes back to back."""
    count = start.size
    offsets = np.empty(count + 1, np.int32)
    total = 0
    offsets[0] = 0
    for i in range(count):
        if length[i] > 0:
            total += length[i]
        offsets[i + 1] = total
    data = np.empty(total, np.uint8)
    at = 0
    for i in range(count):
        size = length[i]
        if size > 0:
            if start[i] < 0 or start[i] + size > buf.size:
                raise IndexError("a slice to gather lies outside the buffer")
            _copy(data, at, buf, start[i], size)  # type: ignore[call-arg]  # typingctx is numba's
            at += size
    return offsets, data
