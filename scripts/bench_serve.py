#!/usr/bin/env python3
"""`tritonforge serve` against the pool driven directly, on the same candidates.

Two figures (issue: the evaluation server):

* overhead: evaluations sent one at a time through the server on loopback; per evaluation,
  the client's latency (submit, then long-poll until done) minus the job's time inside the
  evaluator (`finished_ms - started_ms`). Also the latency of a repeat (a cache hit).
* throughput: the suite's level-1 problems with their solutions, evaluated (a) by
  `tritonforge eval --problems DIR --candidates DIR` and (b) submitted as one batch to a
  fresh `tritonforge serve` and streamed back; each with a fresh state directory (no cache).

usage: python3 scripts/bench_serve.py --binary target/release/tritonforge [--python PY]
       [--limit N] [--overhead N] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

REPO = Path(__file__).resolve().parent.parent


def http(method: str, url: str, body: Optional[Any] = None, timeout: float = 900.0) -> Any:
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method,
                                 headers={"content-type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return json.loads(r.read())


def base_cmd(binary: str, python: Optional[str], state: Path) -> List[str]:
    cmd = [binary, "--state-dir", str(state)]
    if python:
        cmd += ["--python", python]
    return cmd


def start_server(binary: str, python: Optional[str], state: Path, jobs: Optional[int],
                 flags: Tuple[str, ...] = ()) -> Tuple[subprocess.Popen, str]:
    cmd = base_cmd(binary, python, state) + ["serve", "--bind", "127.0.0.1:0", "--no-suite", *flags]
    if jobs:
        cmd += ["--jobs", str(jobs)]
    p = subprocess.Popen(cmd, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
    assert p.stderr is not None
    for line in p.stderr:
        if line.startswith("serving on "):
            return p, line.split()[2]
    raise SystemExit(f"the server did not start (exit {p.wait()})")


def pairs(limit: int) -> List[Tuple[str, str, str]]:
    """(name, problem source, solution source) of the suite's level-1 problems."""
    out = []
    for sol in sorted((REPO / "bench/solutions/level1").glob("*.py"))[:limit]:
        prob = REPO / "bench/level1" / sol.name
        if prob.is_file():
            out.append((sol.stem, prob.read_text(), sol.read_text()))
    return out


def overhead(binary: str, python: Optional[str], n: int) -> Dict[str, Any]:
    state = Path(tempfile.mkdtemp(prefix="tf-serve-oh-"))
    p, url = start_server(binary, python, state, None)
    try:
        prob = (REPO / "crates/cli/tests/fixtures/problems/relu_small.py").read_text()
        cand = (REPO / "crates/cli/tests/fixtures/candidates/relu_ok.py").read_text()
        extra, hits = [], []
        for i in range(n):
            body = {"problem": {"name": "relu_small", "source": prob},
                    "candidate": {"name": f"relu_{i}", "source": f"{cand}\n# {i}\n"},
                    "options": {"trials": 2}}
            t0 = time.perf_counter()
            sub = http("POST", f"{url}/v1/evaluations", body)
            job = http("GET", f"{url}/v1/evaluations/{sub['id']}?wait=600")
            latency = (time.perf_counter() - t0) * 1000
            inside = job["finished_ms"] - job["started_ms"]
            extra.append(latency - inside)
            t0 = time.perf_counter()
            again = http("POST", f"{url}/v1/evaluations", body)
            http("GET", f"{url}/v1/evaluations/{again['id']}?wait=600")
            hits.append((time.perf_counter() - t0) * 1000)
        return {"n": n, "overhead_ms_median": statistics.median(extra),
                "overhead_ms_p90": sorted(extra)[int(0.9 * (n - 1))],
                "repeat_latency_ms_median": statistics.median(hits)}
    finally:
        p.terminate()
        p.wait()
        shutil.rmtree(state, ignore_errors=True)


def throughput(binary: str, python: Optional[str], limit: int, jobs: Optional[int]) -> Dict[str, Any]:
    ps = pairs(limit)
    root = Path(tempfile.mkdtemp(prefix="tf-serve-tp-"))
    (root / "p").mkdir()
    (root / "c").mkdir()
    for name, prob, sol in ps:
        (root / "p" / f"{name}.py").write_text(prob)
        (root / "c" / f"{name}.py").write_text(sol)
    # (a) the pool, driven directly.
    cmd = base_cmd(binary, python, root / "state-pool") + ["eval", "--json", "--problems", str(root / "p"),
                                                          "--candidates", str(root / "c")]
    if jobs:
        cmd += ["--jobs", str(jobs)]
    t0 = time.perf_counter()
    out = subprocess.run(cmd, capture_output=True, text=True)
    pool_s = time.perf_counter() - t0
    pool_status = [json.loads(line).get("status") for line in out.stdout.splitlines() if line.startswith("{")]
    # (b) the same pairs through a fresh server: one batch, streamed back.
    p, url = start_server(binary, python, root / "state-serve", jobs)
    try:
        body = {"evaluations": [{"problem": {"name": n, "source": pr}, "candidate": {"name": n, "source": so}}
                                for n, pr, so in ps]}
        t0 = time.perf_counter()
        sub = http("POST", f"{url}/v1/evaluations/batch", body)
        ids = [j["id"] for j in sub["jobs"]]
        serve_status = []
        for i in ids:
            job = http("GET", f"{url}/v1/evaluations/{i}?wait=600")
            serve_status.append((job.get("record") or {}).get("status", job["state"]))
        serve_s = time.perf_counter() - t0
    finally:
        p.terminate()
        p.wait()
    shutil.rmtree(root, ignore_errors=True)
    n = len(ps)
    return {"candidates": n, "pool_s": pool_s, "serve_s": serve_s,
            "pool_per_min": 60 * n / pool_s, "serve_per_min": 60 * n / serve_s,
            "serve_vs_pool": (60 * n / serve_s) / (60 * n / pool_s),
            "pool_correct": pool_status.count("correct"), "serve_correct": serve_status.count("correct")}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--binary", default=str(REPO / "target/release/tritonforge"))
    ap.add_argument("--python")
    ap.add_argument("--limit", type=int, default=1000, help="level-1 problems to use [all]")
    ap.add_argument("--overhead", type=int, default=20, help="sequential evaluations for the overhead figure")
    ap.add_argument("--jobs", type=int)
    ap.add_argument("--skip-throughput", action="store_true")
    ap.add_argument("--out", type=Path)
    a = ap.parse_args()
    result: Dict[str, Any] = {"overhead": overhead(a.binary, a.python, a.overhead)}
    print(json.dumps(result), flush=True)
    if not a.skip_throughput:
        result["throughput"] = throughput(a.binary, a.python, a.limit, a.jobs)
    text = json.dumps(result, indent=2)
    print(text)
    if a.out:
        a.out.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
