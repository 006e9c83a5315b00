"""Environment variables set for a block's length only."""
from __future__ import annotations

import contextlib
import os


@contextlib.contextmanager
def scoped(values: dict):
    """``os.environ`` updated with ``values`` inside the block, each variable restored
    (or removed, if it was not set) after it, exceptions included."""
    saved = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield saved
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
