#!/usr/bin/env python3
"""gen_normclip.py — the values tests/spec/normclip_spec.lua checks (stop 100: clip_grad_norm_ and get_total_norm on
the core's rescue, and a fractional p's gradient near FLT_MAX). torch 2.15's get_total_norm / clip_grad_norm_ (CPU,
foreach left at its default) on lists of fp32 and bf16 gradients whose Σ|g|^p over- or underflows; where torch's own
total over- or underflows (torch's fp32 norm of [1e20, ...] at p = 2 is inf, of [1e-25, ...] 0, and it then zeroes or
keeps the gradients) the reference is the float64 total rounded to the total's dtype, and the clipped gradients are
torch's own arithmetic (max_norm / (total + 1e-6), clamped to 1, times g) with that total. Printed as Lua literals
(scripts/lua_literal.py), pasted into the spec.
Run: /opt/torch2/bin/python scripts/gen_normclip.py"""
import math
import torch

from lua_literal import lua   # scripts/lua_literal.py

print("-- torch", torch.__version__)
f64 = torch.float64

CASES = [
    ("big", [[1e20, -2e20, 3e20], [1.0, 2.0]]),       # Σg² and Σ|g|³ overflow fp32
    ("small", [[1e-25, 2e-25], [-3e-25]]),            # Σg² and Σ|g|³ underflow fp32
    ("mixed", [[1e20], [1e-25, 1.0]]),
    ("plain", [[0.5, -1.5, 2.0], [3.0, 0.0, -4.0]]),
    ("huge", [[3e38, 3e38], [1.0]]),                  # a true total past FLT_MAX: inf
]
PS = [1.0, 2.0, math.inf, 3.0, 0.5]


def f64_total(lists, p):
    """the p-norm of every element of every list, in float64, scaled by the largest |g| (no over- or underflow)"""
    flat = [abs(v) for l in lists for v in l]
    m = max(flat)
    if p == math.inf or m == 0:
        return m
    return m * sum((v / m) ** p for v in flat) ** (1 / p)


def ok(t, ref):
    if math.isnan(ref):
        return math.isnan(t)
    if math.isinf(ref) or ref == 0:
        return t == ref
    return abs(t - ref) <= 1e-6 * abs(ref)


for dt, dname in [(torch.float32, "fp32"), (torch.bfloat16, "bf16")]:
    print("-- %s" % dname)
    for name, lists in CASES:
        for p in PS:
            gs = [torch.tensor(l, dtype=torch.float32).to(dt) for l in lists]
            tt = torch.nn.utils.get_total_norm(gs, p)
            ref = torch.tensor(f64_total([g.to(f64).tolist() for g in gs], p), dtype=f64).float().to(dt)
            use = tt if ok(float(tt), float(ref)) else ref
            # torch's clip arithmetic with that total: clip_grads_with_norm_
            ps = [torch.zeros_like(g, requires_grad=True) for g in gs]
            for q, g in zip(ps, gs):
                q.grad = g.clone()
            torch.nn.utils.clip_grads_with_norm_(ps, 1.0, use)
            print("  { \"%s\", \"%s\", %s, total = %s, torch = %s, grads = %s }," % (
                name, dname, lua(p), lua(float(use)), lua(float(tt)), lua([q.grad.float() for q in ps])))

# the non-finite ones: total, the clipped gradients (max_norm 1), and whether error_if_nonfinite raises
print("-- nonfinite")
for name, lists in [("inf", [[1.0, math.inf], [2.0]]), ("nan", [[1.0, math.nan], [2.0]])]:
    for p in PS:
        gs = [torch.tensor(l) for l in lists]
        ps = [torch.zeros_like(g, requires_grad=True) for g in gs]
        for q, g in zip(ps, gs):
            q.grad = g.clone()
        t = torch.nn.utils.clip_grad_norm_(ps, 1.0, p)
        try:
            torch.nn.utils.get_total_norm(gs, p, error_if_nonfinite=True)
            raised = False
        except RuntimeError:
            raised = True
        print("  { \"%s\", %s, total = %s, grads = %s, raises = %s }," % (
            name, lua(p), lua(float(t)), lua([q.grad for q in ps]), "true" if raised else "false"))

# a bf16 and an fp32 gradient together: the bf16 one's norm rounded to bf16, then promoted (torch's stack)
print("-- mixed dtypes: get_total_norm([bf16 [1, 2, 1e20], fp32 [3, 1e-25]], p)")
# (where torch's bf16 Σx² overflows: each norm in float64 rounded to its dtype, their norm in float64 to fp32)
for p in PS:
    gs = [torch.tensor([1.0, 2.0, 1e20]).bfloat16(), torch.tensor([3.0, 1e-25])]
    t = torch.nn.utils.get_total_norm(gs, p)
    norms = [float(torch.tensor(f64_total([g.to(f64).tolist()], p), dtype=f64).to(g.dtype)) for g in gs]
    ref = float(torch.tensor(f64_total([norms], p), dtype=f64).float())
    print("  [%s] = %s,   -- torch's %s" % (lua(p), lua(float(t) if ok(float(t), ref) else ref), lua(float(t))))

# x.norm(p)'s gradient for fractional p near FLT_MAX (float64's, rounded to fp32) and torch's fp32 one
print("-- fractional p near FLT_MAX: x, p, float64's gradient, torch's")
FRAC = [
    ([1.0691e38, 2.8343e38, 1.8652e-38], 0.5),   # the true norm past FLT_MAX (inf), the gradients finite
    ([3e38, 1e-38], 0.5),                         # the norm finite, its third... second gradient near FLT_MAX
    ([2e38, 1e-30, 3e-36], 0.25),
    ([3e38, 2.5e-37], 0.75),
]
for xs, p in FRAC:
    x = torch.tensor(xs).to(f64).requires_grad_(True)
    x.norm(p).backward()
    x32 = torch.tensor(xs).requires_grad_(True)
    x32.norm(p).backward()
    print("  { x = %s, p = %s, g = %s, torch = %s }," % (lua(torch.tensor(xs).tolist()), lua(p), lua(x.grad.float()),
                                                        lua(x32.grad)))
