#!/usr/bin/env python3
"""gen_norm_edges.py — torch 2.15's values for the norms and distances at edge orders and inputs (stop 101), which
tests/data/norm_edges_torch.lua holds and tests/spec/msgs18_spec.lua checks: norm over everything and along a dim
(torch.linalg.vector_norm's), dist, cdist, pairwise_distance, F.normalize, renorm and clip_grad_norm_, for p in
{-inf, -2, -1, -0.5, 0, 0.5, 1, 2, 3, inf, nan}, over inputs of zeros, NaN, inf, one element, empty rows and plain
numbers, in fp32, bf16 and fp16: each result (its shape and values) and the gradient of its sum with respect to the
input, or torch's refusal ("error"). The zeros keep their sign.
The spec's records only (p = ±inf and p < 0 of the norms and distances, cdist's edges; since stop 102 p = 1 at a
NaN and normalize's and renorm's ±inf at an inf; since stop 103 the ±inf norm along a dim at an inf or NaN upstream
gradient, with torch's max(dim) of |x| beside it); with --all every record
(1,848), which the stop-101 comparison read (docs/robustness.md).
Run: /opt/torch2/bin/python scripts/gen_norm_edges.py > tests/data/norm_edges_torch.lua"""
import math
import sys
import torch
import torch.nn.functional as F

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from lua_literal import lua   # scripts/lua_literal.py

NAN, INF = float("nan"), float("inf")
PS = [-INF, -2.0, -1.0, -0.5, 0.0, 0.5, 1.0, 2.0, 3.0, INF, NAN]
# [2, 3] rows unless said: the second operand of dist, cdist and pairwise_distance is fixed (Y below)
INPUTS = {
    "plain": [[1.5, -2.0, 0.5], [3.0, 0.25, -4.0]],
    "zeros": [[0.0, 0.0, 0.0], [0.0, 0.0, 0.0]],
    "somezero": [[0.0, 2.0, -1.0], [1.0, -1.0, 0.0]],
    "nan": [[1.0, NAN, -2.0], [0.5, 3.0, 4.0]],
    "inf": [[1.0, INF, -2.0], [-INF, 3.0, 4.0]],
    "one": [[-3.0]],
    "empty": None,   # [2, 0]
}
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


def make(name, dt):
    v = INPUTS[name]
    t = torch.zeros(2, 0) if v is None else torch.tensor(v)
    return t.to(dt).requires_grad_(True)


def other(x):   # the fixed second operand, x's shape: 0.5, 1, -1, ... (no zeros, no ties with the inputs)
    n = x.numel()
    vals = [0.5, 1.0, -1.0, 2.0, -0.75, 0.125][:n]
    return torch.tensor(vals).reshape(x.shape).to(x.dtype)


OPS = {
    "norm": lambda x, p: torch.linalg.vector_norm(x, p),
    "norm_dim": lambda x, p: torch.linalg.vector_norm(x, p, dim=1),
    "dist": lambda x, p: torch.dist(x, other(x), p),
    "cdist": lambda x, p: torch.cdist(x, other(x), p),
    "pairwise_distance": lambda x, p: F.pairwise_distance(x, other(x), p),
    "normalize": lambda x, p: F.normalize(x, p, dim=1),
    "renorm": lambda x, p: torch.renorm(x, p, 0, 1.0),
}


def run(op, name, dt, p):
    x = make(name, DTYPES[dt])
    try:
        y = OPS[op](x, p)
    except RuntimeError as e:
        return {"error": str(e).split("\n")[0][:100]}
    r = {"shape": list(y.shape), "y": y.detach().double().flatten().tolist()}
    try:
        y.sum().backward()
        r["g"] = x.grad.double().flatten().tolist() if x.grad is not None else None
    except RuntimeError as e:
        r["gerror"] = str(e).split("\n")[0]
    return r


def clip(name, dt, p):
    """clip_grad_norm_ of one parameter whose gradient is the input (max_norm 1): the total and the clipped gradient"""
    x = make(name, DTYPES[dt])
    w = torch.nn.Parameter(torch.zeros(x.shape, dtype=x.dtype))
    w.grad = x.detach().clone()
    try:
        tot = torch.nn.utils.clip_grad_norm_([w], 1.0, norm_type=p)
    except RuntimeError as e:
        return {"error": str(e).split("\n")[0][:100]}
    return {"shape": list(tot.shape), "y": [float(tot)], "g": w.grad.double().flatten().tolist()}


def out(v):
    if isinstance(v, float) and math.isfinite(v) and v != 0:
        return "%.9g" % v   # (every value is an fp32, bf16 or fp16 one: 9 digits give its bits back)
    if isinstance(v, list):
        return "{ " + ", ".join(out(e) for e in v) + " }"
    if isinstance(v, dict):
        return "{ " + ", ".join("%s = %s" % (k, out(x)) for k, x in v.items()) + " }"
    if isinstance(v, str):
        return '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return lua(v)


ALL = "--all" in sys.argv[1:]


def wanted(op, name, p):   # the records tests/spec/msgs18_spec.lua and loose102_spec.lua read
    if op in ("norm", "norm_dim", "dist", "pairwise_distance") and abs(p) == INF:
        return True
    if op in ("norm", "norm_dim", "dist", "pairwise_distance", "cdist") and name == "nan" and p == 1:
        return True   # (stop 102: the 1-norm's gradient at a NaN)
    if op in ("normalize", "renorm") and name == "inf" and abs(p) == INF:
        return True   # (stop 102: torch's NaN gradient, fp8lab's derivative)
    if op == "pairwise_distance" and p < 0:
        return True
    return op == "cdist" and ((name == "empty" and p == INF) or (name == "nan" and p == 0))


print("-- torch %s: made by /opt/torch2/bin/python scripts/gen_norm_edges.py > tests/data/norm_edges_torch.lua"
      % torch.__version__)
print("-- one record a line: op, input, dtype, p (NaN as the string \"nan\"), then torch's result or its refusal")
print("local NAN, INF = 0 / 0, math.huge")
print("return {")
for op in list(OPS) + ["clip_grad_norm_"]:
    for name in INPUTS:
        for dt in DTYPES:
            for p in PS:
                r = clip(name, dt, p) if op == "clip_grad_norm_" else run(op, name, dt, p)
                if not ALL and not wanted(op, name, p):
                    continue
                r = {"op": op, "input": name, "dtype": dt, "p": "nan" if math.isnan(p) else p, **r}
                print("  " + out(r) + ",")
# stop 103: the ±inf norm's own backward at an inf or NaN upstream gradient, beside torch's max(dim) of |x| (the same
# function): vector_norm's backward multiplies the gradient by a 0/1 mask (inf·0 = NaN off the element that sets the
# norm), max's selects (0 there); the root of normalize's and renorm's NaN slices above (docs/robustness.md, "The
# profiler's FLOPs and the norms' edges, the rest (stop 103)")
for dt in DTYPES:
    for p in (INF, -INF):
        for go in (INF, NAN, 2.0):
            x = torch.tensor([[1.0, 5.0, -2.0], [-3.0, INF, 0.5]]).to(DTYPES[dt]).requires_grad_(True)
            n = torch.linalg.vector_norm(x, p, dim=1)
            g = torch.autograd.grad(n, x, torch.full_like(n, go))[0]
            a = x.abs()
            m = a.max(dim=1).values if p > 0 else a.min(dim=1).values
            gm = torch.autograd.grad(m, x, torch.full_like(m, go))[0]
            r = {"op": "norm_dim_upstream", "input": "[[1, 5, -2], [-3, inf, 0.5]]", "dtype": dt, "p": p,
                 "go": go, "y": n.detach().double().flatten().tolist(), "g": g.double().flatten().tolist(),
                 "g_max": gm.double().flatten().tolist()}
            print("  " + out(r) + ",")
print("}")
