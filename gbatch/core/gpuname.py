"""A GPU type's spelling (`a100`, `rtx4090`, `1g.10gb`), gbatch/core/gputypes.py's.

Here alone so that a submit reads `--gpus a100:1` without that module's dataclasses.

Pure, a leaf but for re.
"""

from __future__ import annotations

import re

# A type as jobs and rules spell it, lowercase: `a100`, `rtx4090`, `1g.10gb` (Slurm's MIG
# profiles start with a digit). Never all digits: `gpu:2` is a count.
TYPE_RE = re.compile(r"[a-z0-9][a-z0-9_.-]{0,31}", re.ASCII)
MAX_TYPE_CHARS = 32


def is_type_name(text: str) -> bool:
    """Whether `text` (already lowercased) is a GPU type's spelling."""
    return bool(TYPE_RE.fullmatch(text)) and not text.isdigit()
