"""The exit codes the command and the Spark apps share: each says one thing."""

from __future__ import annotations

import argparse

import pytest

from tiering_core.report.exit_codes import EXIT_FAILURE, EXIT_GAP, EXIT_INTERRUPTED, EXIT_OK, EXIT_USAGE


def test_every_exit_code_is_distinct_and_success_is_zero() -> None:
    codes = [EXIT_OK, EXIT_FAILURE, EXIT_USAGE, EXIT_GAP, EXIT_INTERRUPTED]
    assert len(set(codes)) == len(codes)
    assert EXIT_OK == 0


def test_a_bad_command_line_exits_with_the_code_argparse_uses() -> None:
    parser = argparse.ArgumentParser(prog="tiering")
    parser.add_argument("--config", required=True)
    with pytest.raises(SystemExit) as exited:
        parser.parse_args([])
    assert exited.value.code == EXIT_USAGE
