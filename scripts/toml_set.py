"""Set keys of a TOML config in place, as `scripts/gpu_rl.sh` overrides a run's settings.

usage: python3 scripts/toml_set.py FILE [SECTION.]KEY=VALUE ...

`optim.lr=3e-4` sets `lr` inside `[optim]` (replaced where it stands, else added under the
header, which is appended when the file has none); a bare `KEY=VALUE` replaces the first
line that sets KEY in any section, else goes under `[schedule]`. VALUE is written as given
(TOML syntax: strings quoted). Only plain `key = value` lines are seen; a key inside an
inline table or array is not.
"""

from __future__ import annotations

import re
import sys
from typing import List, Optional, Tuple


def section_span(lines: List[str], name: str) -> Optional[Tuple[int, int]]:
    """The header's index and the end (exclusive) of `[name]`'s lines, or None."""
    start = next((i for i, line in enumerate(lines) if line.strip() == f"[{name}]"), None)
    if start is None:
        return None
    end = next((i for i in range(start + 1, len(lines)) if lines[i].lstrip().startswith("[")), len(lines))
    return start, end


def set_key(lines: List[str], section: Optional[str], key: str, value: str) -> None:
    pattern = re.compile(rf"^{re.escape(key)}\s*=")
    if section is None:
        hit = next((i for i, line in enumerate(lines) if pattern.match(line)), None)
        if hit is not None:
            lines[hit] = f"{key} = {value}"
            return
        section = "schedule"
    span = section_span(lines, section)
    if span is None:
        lines.extend(["", f"[{section}]", f"{key} = {value}"])
        return
    start, end = span
    hit = next((i for i in range(start + 1, end) if pattern.match(lines[i])), None)
    if hit is not None:
        lines[hit] = f"{key} = {value}"
    else:
        lines.insert(start + 1, f"{key} = {value}")


def main() -> int:
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    path = sys.argv[1]
    with open(path) as f:
        lines = f.read().splitlines()
    for item in sys.argv[2:]:
        name, sep, value = item.partition("=")
        if not sep or not name:
            sys.exit(f"toml_set.py: {item!r} is not KEY=VALUE")
        section, _, key = name.rpartition(".")
        set_key(lines, section or None, key, value)
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
