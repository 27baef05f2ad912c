"""A compiled loop that decodes a batch of Avro payloads of one writer schema, column at a time.

The schema is a flat program (``export.avro_program`` builds it): one row per instruction of
``PROGRAM_WIDTH`` integers (opcode, column, operands), records flattened into the sequence of
their fields, an array's or map's item between ``OP_LIST`` and ``OP_LIST_END``, the value of a
union with null after its ``OP_UNION``. ``decode_rows`` runs the program over every payload in
two passes: the first checks each payload and counts each column's slots and bytes (at most
what the payload's bytes hold), the second, into buffers the caller sized from those counts,
writes the Arrow buffers of each column (a validity byte per slot, fixed-width values, int32
offsets, variable-length bytes) for the payloads that passed. No Python object is made per value.

Every read is checked against the end of its payload: a payload that is cut short, holds a
length or block count larger than the bytes left or negative, an out-of-range enum index,
union branch, int, date, time, timestamp or decimal, invalid UTF-8, or leaves bytes unread,
stops with an error code (``ERROR_REASONS``), the byte it was met at and a value; nothing is
allocated from a length read. A map holding a key twice is ``DUPLICATE_MAP_KEY``: not an error
(fastavro keeps the last), for the caller to decode another way. The interpreter
(``decode_rows``) is one function, far longer than the project's others: its opcodes share the
position, stack and counters, and a call per payload or opcode would count references to every
array it is passed, which costs more than the decode.

Compiled as ``kafka.arrow.kernels`` compiles (``cache=True``): once per installation, then
loaded from the cache.
"""

from __future__ import annotations

import numpy as np

from tiering_core.kafka.arrow.kernels import VARINT_PAST_END, VARINT_TOO_LONG, compiled, is_utf8, zigzag_varint

#: One instruction: opcode, column, then four operands.
PROGRAM_WIDTH = 6
OP_RECORD = 0  # a record's validity slot (column); its fields follow
OP_UNION = 1  # a = the null branch (-1: none), b = the pc after the value, c = the value's branch
OP_LIST = 2  # an array or map: a = the pc after its OP_LIST_END, b = 1 for a map
OP_LIST_END = 3  # a = the pc of its OP_LIST
OP_VARINT = 4  # int/long/date/time/timestamp: a..b the range, c a multiplier, d the width (4 or 8)
OP_COPY = 5  # float, double, fixed: a = the bytes copied
OP_VAR = 6  # string or bytes: a = 1 checks UTF-8, b = 1 for a map's key
OP_BOOL = 7
OP_ENUM = 8  # a = the number of symbols; the column holds the index (int32)
OP_DECIMAL = 9  # a = the precision, b = the fixed size (-1: bytes); the column holds 16 bytes

OK = 0
PAST_END = VARINT_PAST_END
TOO_LONG = VARINT_TOO_LONG
LENGTH_PAST_END = 3
NEGATIVE_LENGTH = 4
OUT_OF_RANGE = 5
UNION_BRANCH = 6
ENUM_INDEX = 7
BLOCK_COUNT = 8
BLOCK_SIZE = 9
NOT_UTF8 = 10
BYTES_LEFT = 11
DECIMAL_TOO_WIDE = 12
DUPLICATE_MAP_KEY = 13

#: Why a payload did not decode; ``{value}`` is the value the error names.
ERROR_REASONS = {
    PAST_END: "the value runs past the end of the payload",
    TOO_LONG: "a varint is longer than 10 bytes",
    LENGTH_PAST_END: "a length of {value} runs past the end of the payload",
    NEGATIVE_LENGTH: "a negative length {value}",
    OUT_OF_RANGE: "the value {value} is out of its type's range",
    UNION_BRANCH: "union branch {value} is not one of the union's",
    ENUM_INDEX: "enum index {value} is not one of the enum's symbols",
    BLOCK_COUNT: "a block count of {value} is more than the bytes left",
    BLOCK_SIZE: "a block size of {value} is negative or more than the bytes left",
    NOT_UTF8: "a string is not valid UTF-8",
    BYTES_LEFT: "{value} byte(s) left after the value",
    DECIMAL_TOO_WIDE: "a decimal of {value} byte(s) has more digits than its precision",
}

_U8 = np.uint64(8)
_U1 = np.uint64(1)
_U0 = np.uint64(0)
_BYTE = np.uint64(0xFF)
_POW10 = [10**p for p in range(39)]
#: 10**p as (high, low) unsigned 64-bit halves, p = 0..38: a decimal's bound.
POW10_HIGH = np.array([p >> 64 for p in _POW10], np.uint64)
POW10_LOW = np.array([p & 0xFFFFFFFFFFFFFFFF for p in _POW10], np.uint64)


@compiled
def _utf8(buf: np.ndarray, lo: int, hi: int) -> bool:
    """``kernels.is_utf8``, kept out of line: a string with a byte past ASCII is the rare path."""
    return is_utf8(buf, lo, hi)


@compiled
def _same_keys(buf: np.ndarray, pos: np.ndarray, size: np.ndarray, lo: int, hi: int) -> bool:
    """Whether two of the keys ``buf[pos[k]:pos[k] + size[k]]``, ``lo <= k < hi``, are equal:
    pairwise for a few, else by sorting their hashes (time bounded by the keys' bytes)."""
    n = hi - lo
    hashes = np.empty(n, np.uint64)
    for k in range(n):
        h = np.uint64(14695981039346656037)
        for j in range(pos[lo + k], pos[lo + k] + size[lo + k]):
            h = (h ^ np.uint64(buf[j])) * np.uint64(1099511628211)
        hashes[k] = h ^ np.uint64(size[lo + k])
    order = np.argsort(hashes)
    for k in range(1, n):
        a, b = lo + order[k - 1], lo + order[k]
        if hashes[order[k - 1]] == hashes[order[k]] and size[a] == size[b]:
            same = True
            for j in range(size[a]):
                if buf[pos[a] + j] != buf[pos[b] + j]:
                    same = False
                    break
            if same:
                return True
    return False


@compiled
def _decimal(buf: np.ndarray, lo: int, n: int, precision: int, out: np.ndarray, at: int, fill: bool) -> bool:
    """The big-endian two's-complement ``buf[lo:lo + n]`` as a little-endian 128-bit integer at
    ``out[at]`` (``fill``); False when it has more digits than ``precision``."""
    if n == 0:
        negative = False
    else:
        negative = buf[lo] >= 0x80
    pad = 0xFF if negative else 0
    for k in range(lo, lo + n - 16):
        if buf[k] != pad:
            return False
    if n > 16 and (buf[lo + n - 16] >= 0x80) != negative:
        return False
    low = np.uint64(0xFFFFFFFFFFFFFFFF) if negative else _U0
    high = low
    for k in range(max(lo, lo + n - 16), lo + n):
        place = lo + n - 1 - k  # the byte's place from the least significant, 0..15
        byte = np.uint64(buf[k])
        if place < 8:
            s = np.uint64(8 * place)
            low = (low & ~(_BYTE << s)) | (byte << s)
        else:
            s = np.uint64(8 * (place - 8))
            high = (high & ~(_BYTE << s)) | (byte << s)
    mag_low, mag_high = low, high
    if negative:
        mag_low = ~low + _U1
        mag_high = ~high + (_U1 if mag_low == _U0 else _U0)
    bound_high, bound_low = POW10_HIGH[precision], POW10_LOW[precision]
    if mag_high > bound_high or (mag_high == bound_high and mag_low >= bound_low):
        return False
    if fill:
        for k in range(8):
            out[at + k] = np.uint8((low >> (_U8 * np.uint64(k))) & _BYTE)
            out[at + 8 + k] = np.uint8((high >> (_U8 * np.uint64(k))) & _BYTE)
    return True


@compiled
def _null_fill(prog: np.ndarray, lo: int, hi: int, fill: bool, slots: np.ndarray, items: np.ndarray,
               dlen: np.ndarray, offsets: np.ndarray, obase: np.ndarray) -> None:  # fmt: skip
    """A null slot in each column of the instructions ``lo..hi`` (an array's or map's items
    skipped: a null list has none). Buffers start zeroed: a null's validity and value are zeros."""
    p = lo
    while p < hi:
        op, col = prog[p, 0], prog[p, 1]
        if op == OP_UNION or op == OP_LIST_END:
            p += 1
            continue
        if fill and obase[col] >= 0:
            offsets[obase[col] + slots[col] + 1] = items[col] if op == OP_LIST else dlen[col]
        slots[col] += 1
        p = prog[p, 2] if op == OP_LIST else p + 1


@compiled
def decode_rows(prog: np.ndarray, buf: np.ndarray, starts: np.ndarray, ends: np.ndarray, fill: bool,
                status: np.ndarray, where: np.ndarray, value: np.ndarray, slots: np.ndarray,
                items: np.ndarray, dlen: np.ndarray, valid: np.ndarray, vbase: np.ndarray,
                fixed: np.ndarray, fbase: np.ndarray, width: np.ndarray, offsets: np.ndarray,
                obase: np.ndarray, data: np.ndarray, dbase: np.ndarray) -> None:  # fmt: skip
    """The payloads ``buf[starts[r]:ends[r]]`` through the program. ``fill`` False: each one's
    ``status`` (``where`` it stopped, relative to its start, and ``value``), and at most the
    slots, list items and bytes each column needs (a payload that fails may have counted some);
    ``fill`` True: the buffers written for the rows whose status is ``OK`` (the counters start
    from zero)."""
    longest = 0
    for r in range(starts.size):
        longest = max(longest, ends[r] - starts[r])
    stack = np.zeros((prog.shape[0] + 1, 3), np.int64)
    kpos = np.zeros(longest + 1, np.int64)
    ksize = np.zeros(longest + 1, np.int64)
    for r in range(starts.size):
        if fill and status[r] != OK:
            continue
        pos, end = starts[r], ends[r]
        code, val = OK, 0
        pc, sp, keys = 0, 0, 0
        while pc < prog.shape[0]:
            op, col = prog[pc, 0], prog[pc, 1]
            if op == OP_UNION:
                branch, at = zigzag_varint(buf, pos, end)
                if at < 0:
                    code, val = -at, 0
                    break
                pos = at
                if branch == prog[pc, 4]:
                    pc += 1
                elif branch == prog[pc, 2]:
                    _null_fill(prog, pc + 1, prog[pc, 3], fill, slots, items, dlen, offsets, obase)
                    pc = prog[pc, 3]
                else:
                    code, val = UNION_BRANCH, branch
                    break
                continue
            if op == OP_LIST or op == OP_LIST_END:
                list_pc = pc if op == OP_LIST else prog[pc, 2]
                if op == OP_LIST_END:
                    stack[sp - 1, 1] -= 1
                    if stack[sp - 1, 1] > 0:
                        pc = list_pc + 1
                        continue
                count, at = zigzag_varint(buf, pos, end)  # the next block's count
                if at < 0:
                    code = -at
                    break
                if count < 0:  # its byte size follows
                    count = -count
                    size, at2 = zigzag_varint(buf, at, end)
                    if at2 < 0:
                        code = -at2
                        break
                    if size < 0 or size > end - at2:
                        code, val = BLOCK_SIZE, size
                        break
                    at = at2
                if count < 0 or count > end - at:
                    code, val = BLOCK_COUNT, count
                    break
                pos = at
                col = prog[list_pc, 1]
                if count > 0:
                    if op == OP_LIST:
                        stack[sp, 0], stack[sp, 2] = pc, keys
                        sp += 1
                    stack[sp - 1, 1] = count
                    items[col] += count
                    pc = list_pc + 1
                    continue
                if op == OP_LIST_END:
                    sp -= 1
                    if prog[list_pc, 3] == 1 and not fill and keys - stack[sp, 2] > 1:
                        if _same_keys(buf, kpos, ksize, stack[sp, 2], keys):
                            code = DUPLICATE_MAP_KEY
                            break
                    keys = stack[sp, 2]
                if fill:
                    valid[vbase[col] + slots[col]] = 1
                    offsets[obase[col] + slots[col] + 1] = items[col]
                slots[col] += 1
                pc = prog[list_pc, 2]
                continue
            slot = slots[col]
            if op == OP_VARINT:
                number, at = zigzag_varint(buf, pos, end)
                if at < 0:
                    code, val = -at, 0
                    break
                if number < prog[pc, 2] or number > prog[pc, 3]:
                    code, val = OUT_OF_RANGE, number
                    break
                pos = at
                if fill:
                    start, number = fbase[col] + slot * width[col], number * prog[pc, 4]
                    for k in range(prog[pc, 5]):
                        fixed[start + k] = (number >> (8 * k)) & 0xFF
            elif op == OP_VAR:
                size, at = zigzag_varint(buf, pos, end)
                if at < 0:
                    code, val = -at, 0
                    break
                if size < 0:
                    code, val = NEGATIVE_LENGTH, size
                    break
                if size > end - at:
                    code, val = LENGTH_PAST_END, size
                    break
                pos = at
                ascii = True
                if prog[pc, 2] == 1 and not fill:  # checked once: the second pass reads what passed
                    for k in range(pos, pos + size):
                        if buf[k] >= 0x80:
                            ascii = False
                            break
                if not ascii and not _utf8(buf, pos, pos + size):
                    code, val = NOT_UTF8, 0
                    break
                if prog[pc, 3] == 1 and not fill:
                    kpos[keys], ksize[keys] = pos, size
                    keys += 1
                if fill:
                    start = dbase[col] + dlen[col]
                    for k in range(size):
                        data[start + k] = buf[pos + k]
                    offsets[obase[col] + slot + 1] = dlen[col] + size
                dlen[col] += size
                pos += size
            elif op == OP_COPY:
                size = prog[pc, 2]
                if size > end - pos:
                    code, val = PAST_END, 0
                    break
                if fill:
                    start = fbase[col] + slot * width[col]
                    for k in range(size):
                        fixed[start + k] = buf[pos + k]
                pos += size
            elif op == OP_BOOL:
                if pos >= end:
                    code, val = PAST_END, 0
                    break
                if fill:
                    fixed[fbase[col] + slot] = 1 if buf[pos] != 0 else 0
                pos += 1
            elif op == OP_ENUM:
                index, at = zigzag_varint(buf, pos, end)
                if at < 0:
                    code, val = -at, 0
                    break
                if index < 0 or index >= prog[pc, 2]:
                    code, val = ENUM_INDEX, index
                    break
                pos = at
                if fill:
                    for k in range(4):
                        fixed[fbase[col] + slot * 4 + k] = (index >> (8 * k)) & 0xFF
            elif op == OP_DECIMAL:
                size = prog[pc, 3]
                if size < 0:
                    size, at = zigzag_varint(buf, pos, end)
                    if at < 0:
                        code, val = -at, 0
                        break
                    if size < 0:
                        code, val = NEGATIVE_LENGTH, size
                        break
                    if size > end - at:
                        code, val = LENGTH_PAST_END, size
                        break
                    pos = at
                elif size > end - pos:
                    code, val = PAST_END, 0
                    break
                if not _decimal(buf, pos, size, prog[pc, 2], fixed, fbase[col] + slot * 16, fill):
                    code, val = DECIMAL_TOO_WIDE, size
                    break
                pos += size
            if fill:
                valid[vbase[col] + slot] = 1
            slots[col] = slot + 1
            pc += 1

        if code == OK and pos != end:
            code, val = BYTES_LEFT, end - pos
        if not fill:
            status[r], where[r], value[r] = code, pos - starts[r], val
