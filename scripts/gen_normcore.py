#!/usr/bin/env python3
"""gen_normcore.py — the values tests/spec/normcore_spec.lua checks (stop 99: the norms' rescue in the core for every p
and bf16/fp16). Where torch 2.15 under- or overflows (a sum of |x|^p out of the dtype's range: torch's norm is inf or
0 there) the reference is the correctly rounded value, computed here in float64 from the same inputs and rounded to
fp32 (and then to the dtype, as fp8lab's core rounds); where torch gets the value right (an fp16 slice whose fp16 sum
overflows but whose fp32 accumulation does not) torch's own. The inf norm's gradient in a slice holding a NaN is
torch's. Printed as Lua literals (scripts/lua_literal.py), pasted into the spec.
Run: /opt/torch2/bin/python scripts/gen_normcore.py"""
import math
import torch

from lua_literal import lua   # scripts/lua_literal.py

print("-- torch", torch.__version__)
f64 = torch.float64

# x.norm(p, dim=1) (fp8lab's dim 2) of fp32 rows whose Σ|x|^p over- and underflows, and two in range; the gradient of
# Σ r·w. float64 (torch's fp32 gives inf and 0 for the first two rows, its gradients NaN and 0).
X = [[1e20, -2e20, 3e20], [1e-30, 2e-30, -1e-30], [0.5, -1.5, 2.0], [3.0, 0.0, -4.0]]
W = [1.0, -2.0, 3.0, 0.5]
for p in [3.0, 4.5, 10.0]:
    x = torch.tensor(X).to(f64).requires_grad_(True)
    r = x.norm(p, 1)
    (r * torch.tensor(W, dtype=f64)).sum().backward()
    x32 = torch.tensor(X).requires_grad_(True)
    r32 = x32.norm(p, 1)
    print("norm p=%s dim=2 (float64; torch's fp32 %s)" % (lua(p), lua(r32.tolist())))
    print("  r =", lua(r.float().tolist()))
    print("  g =", lua(x.grad.float()))

# F.normalize(x, p, dim=1) of bf16 and fp16 rows (two rescued, one in range): the norm in float64, rounded to fp32 and
# the dtype (as torch's half norms round their fp32 accumulation once), then x / max(n, eps) in torch's arithmetic of
# the dtype; the gradient of Σ y·w in float64 (checked within the dtype's precision). torch's own bf16 result is 0
# for the 1e20 row (its fp32 Σx² overflows) and right for the others (the 1e-30 row's norm is below eps)
XB = [[1e20, -2e20, 3e20], [1e-30, 2e-30, -1e-30], [0.5, -1.5, 2.0]]
WB = [[1.0, -2.0, 0.5], [3.0, 1.0, -1.0], [2.0, 0.25, -0.5]]
for dt, name in [(torch.bfloat16, "bf16"), (torch.float16, "fp16")]:
    rows = XB if dt == torch.bfloat16 else [[300.0, -200.0, 250.0], [1e-4, -2e-4, 3e-4], [0.5, -1.5, 2.0]]
    for p in [2.0, 3.0]:
        xd = torch.tensor(rows).to(dt)
        n = xd.to(f64).norm(p, 1, True).float().to(dt)
        y = xd / n.clamp_min(1e-12)   # (normalize's eps: the bf16 1e-30 row's norm is below it, torch's x / eps)
        x = xd.to(f64).requires_grad_(True)
        yy = torch.nn.functional.normalize(x, p=p, dim=1)
        (yy * torch.tensor(WB, dtype=f64)).sum().backward()
        xt = xd.clone().requires_grad_(True)
        yt = torch.nn.functional.normalize(xt, p=p, dim=1)
        print("%s normalize p=%s dim=2 (torch's own %s)" % (name, lua(p), lua(yt.float().tolist())))
        print("  x =", lua(xd.float().tolist()))
        print("  y =", lua(y.float().tolist()))
        print("  g =", lua(x.grad.float()))

# fp16 norm p=3 over a row whose fp16 Σ|x|^3 overflows (torch accumulates in fp32: right)
xh = torch.tensor([300.0, -200.0, 250.0], dtype=torch.float16, requires_grad=True)
r = xh.norm(3.0)
r.backward()
print("fp16 norm p=3 all: r = %s g = %s" % (lua(r.float().item()), lua(xh.grad.float())))

# a large p: torch's fp32 Σ|x|^200 overflows (inf); float64's
x = torch.tensor([1.9, 1.9]).to(f64)
print("p=200 [1.9, 1.9]: norm = %s (torch fp32 %s), normalize = %s" % (
    lua(x.norm(200.0).float().item()), lua(torch.tensor([1.9, 1.9]).norm(200.0).item()),
    lua((torch.tensor([1.9, 1.9]) / x.norm(200.0).float()).tolist())))

# the inf norm's gradient in a slice holding a NaN: torch's 0
nan = float("nan")
for vals in [[1.0, nan, 3.0], [nan, nan], [1.0, 2.0, -2.0]]:
    x = torch.tensor(vals, requires_grad=True)
    r = x.norm(math.inf)
    r.backward()
    print("norm inf %s: r = %s g = %s" % (lua(vals), lua(r.item()), lua(x.grad)))
x = torch.tensor([[1.0, nan], [2.0, -3.0]], requires_grad=True)
r = x.norm(math.inf, 1)
(r * torch.tensor([1.0, 2.0])).sum().backward()
print("norm inf dim=2: r = %s g = %s" % (lua(r), lua(x.grad)))
