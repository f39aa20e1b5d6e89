"""Where a level-4 evaluation's time goes on a GPU, outside the evaluator: import, build of
Model and ModelNew on the device (as the executor does), one forward of each.
usage: python3 scripts/diag_level4_build.py NAME [NAME ...]   (bench/level4/NAME.py)"""
import importlib.util
import sys
import time

import torch


def load(path: str, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def timed(label: str, fn):
    torch.cuda.synchronize()
    t = time.perf_counter()
    out = fn()
    torch.cuda.synchronize()
    print(f"  {label}: {time.perf_counter() - t:.2f} s", flush=True)
    return out


for name in sys.argv[1:]:
    print(name, flush=True)
    prob = timed("import problem", lambda: load(f"bench/level4/{name}.py", f"p_{name}"))
    cand = timed("import solution", lambda: load(f"bench/solutions/level4/{name}.py", f"s_{name}"))
    init = prob.get_init_inputs()
    torch.manual_seed(0)
    with torch.device("cuda"):
        ref = timed("build Model on cuda", lambda: prob.Model(*init))
    torch.manual_seed(0)
    with torch.device("cuda"):
        new = timed("build ModelNew on cuda", lambda: cand.ModelNew(*init))
    xs = [x.cuda() if isinstance(x, torch.Tensor) else x for x in prob.get_inputs()]
    with torch.no_grad():
        a = timed("reference forward (first)", lambda: ref(*xs))
        timed("reference forward (second)", lambda: ref(*xs))
        b = timed("candidate forward (first: compiles)", lambda: new(*xs))
        timed("candidate forward (second)", lambda: new(*xs))
    print(f"  max abs diff {(a.float() - b.float()).abs().max().item():.3e}", flush=True)
    del ref, new
    torch.cuda.empty_cache()
