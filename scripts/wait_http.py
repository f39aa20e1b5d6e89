#!/usr/bin/env python3
"""Wait until URL answers 200, at most SECONDS; exit 0 when it does, 1 when it never did.

usage: python3 scripts/wait_http.py URL SECONDS
"""

from __future__ import annotations

import sys
import time
import urllib.error
import urllib.request


def main() -> int:
    if len(sys.argv) != 3:
        sys.stderr.write(__doc__ or "")
        return 2
    url, limit = sys.argv[1], float(sys.argv[2])
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=2.0) as r:  # noqa: S310 - a loopback URL we were given
                if r.status == 200:
                    return 0
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.5)
    sys.stderr.write(f"{url}: no answer within {limit:.0f} s\n")
    return 1


if __name__ == "__main__":
    sys.exit(main())
