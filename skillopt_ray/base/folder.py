"""Work in another folder for a block: the CLI's Hydra job and the kept cluster's served commands read paths as the
caller wrote them."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator


@contextlib.contextmanager
def in_folder(path: str) -> Iterator[None]:
    """Work in `path` for the block (Python 3.10 has no contextlib.chdir)."""
    old = os.getcwd()
    os.chdir(path)
    try:
        yield
    finally:
        os.chdir(old)
