"""Errors of the front door: bad input is one line and exit code 2."""

from __future__ import annotations


class UsageError(Exception):
    """Bad input: printed as one line, exit code 2."""


def one_line(exc: BaseException) -> str:
    msg = str(exc).strip().splitlines()
    return msg[0] if msg else type(exc).__name__
