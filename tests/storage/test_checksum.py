"""CRC-32C in the manifest's form, and combined over adjacent byte ranges as multipart uploads do
(``tiering_core/storage/checksum.py``)."""

from __future__ import annotations

import itertools
import os

import pytest

from tiering_core.storage.checksum import crc32c, crc32c_combine, crc_hex


@pytest.mark.parametrize("sizes", [(0, 0), (0, 7), (7, 0), (1, 1), (1000, 12345), (5 << 20, 3)])
def test_crc_combine_equals_crc_of_concatenation(sizes: tuple[int, int]) -> None:
    a, b = os.urandom(sizes[0]), os.urandom(sizes[1])
    assert crc32c_combine(crc32c(a), crc32c(b), len(b)) == crc32c(a + b)
    assert crc_hex(crc32c(b"123456789")) == "e3069283"  # the CRC-32C check value


def test_the_manifest_form_is_eight_lower_case_hex_digits() -> None:
    assert [crc_hex(v) for v in (0, 0xABC, 0xFFFFFFFF, -1, 1 << 32)] == [
        "00000000",
        "00000abc",
        "ffffffff",
        "ffffffff",  # only the low 32 bits are a CRC
        "00000000",
    ]


def test_combining_part_crcs_gives_the_object_s_crc_in_any_number_of_parts() -> None:
    """What a multipart upload does: fold each part's CRC into the running one, left to right."""
    data = os.urandom(10_000)
    for cuts in ([0, 10_000], [0, 1, 2, 10_000], [0, 4096, 8192, 10_000], [0, 9_999, 10_000]):
        combined = 0
        for start, end in itertools.pairwise(cuts):
            combined = crc32c_combine(combined, crc32c(data[start:end]), end - start)
        assert combined == crc32c(data)
