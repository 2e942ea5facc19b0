"""Ludus's one cache directory: ``$LUDUS_CACHE``, default ``~/.cache/ludus``.

What lives there is made from a recipe and named by the recipe's hash, so it is made once and
shared by every run and process: base models (``base/``), generated databases (``sql/``).
Deleting the folder is always safe; its contents are made again on demand.
"""

from __future__ import annotations

import os
from pathlib import Path


def cache_dir(*parts: str) -> Path:
    """The cache folder, or the subfolder ``parts`` of it (not created here)."""
    return Path(os.environ.get("LUDUS_CACHE") or Path.home() / ".cache" / "ludus", *parts)
