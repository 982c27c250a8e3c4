#!/usr/bin/env python3
"""gen_gaps15b.py — the values tests/spec/gaps15b_spec.lua checks against PyTorch 2.15 (CPU): F.normalize with
p < 1 (0.5, 0.3, 0, -0.5, -1, -inf), x^0.5 and x^-0.5 at ±0 and ±inf (torch's sqrt and rsqrt), and dist with p < 1
where the distance is NaN or inf. Values and gradients, printed as Lua literals (pasted into the spec).
Run: /opt/torch2/bin/python scripts/gen_gaps15b.py"""
import math
import torch

from lua_literal import lua   # scripts/lua_literal.py

F = torch.nn.functional


# F.normalize along dim=1 (fp8lab's dim 2): a row with a zero, a zero row, a NaN row, a row without zeros and a
# row with a tie for the smallest |x|; the gradient of Σ y·w
X = [[3.0, 0.0, -4.0], [0.0, 0.0, 0.0], [1e-3, 2.0, float("nan")], [0.5, -2.0, 1.0], [2.0, -2.0, 3.0]]
W = [[1.0, 2.0, 3.0], [4.0, 5.0, 6.0], [7.0, 8.0, 9.0], [-1.0, 0.5, 2.0], [1.0, -3.0, 0.25]]
for p in [0.5, 0.3, 0.0, -0.5, -1.0, -math.inf]:
    x = torch.tensor(X, requires_grad=True)
    y = F.normalize(x, p=p, dim=1)
    (y * torch.tensor(W)).sum().backward()
    print("normalize p=%s" % lua(p))
    print("  y =", lua(y.tolist()))
    print("  g =", lua(x.grad.tolist()))

# x^0.5, x^-0.5: torch 2.15 takes sqrt and rsqrt for a scalar 0.5 / -0.5 (fp32 and bf16 on the CPU, every dtype on
# CUDA; the CPU's fp16 kernel alone takes std::pow); the gradient s·x^(s-1) with x^(s-1) the same shortcuts
P = [-0.0, -math.inf, 0.0, math.inf, 4.0, -4.0, 2.25]
for dt in [torch.float32, torch.bfloat16]:
    for s in [0.5, -0.5]:
        x = torch.tensor(P, dtype=dt, requires_grad=True)
        y = x.pow(s)
        y.backward(torch.ones_like(y))
        print("pow %s %s" % (dt, s))
        print("  y =", lua(y.float().tolist()))
        print("  g =", lua(x.grad.float().tolist()))

# dist with p < 1 of a difference holding 0 and NaN (or inf): torch's norm backward, 0·g·‖d‖^(1-p) at the zero,
# NaN (inf: g·inf); cdist's backward keeps 0 at a zero difference (torch's _cdist_backward)
for p in [0.5, 0.3]:
    for bad in [float("nan"), float("inf")]:
        a = torch.tensor([1.0, 2.0, bad, 0.5], requires_grad=True)
        b = torch.tensor([1.0, 1.0, 1.0, 0.0])
        d = torch.dist(a, b, p)
        d.backward()
        print("dist p=%s bad=%s" % (p, lua(bad)), lua(d.item()), lua(a.grad.tolist()))
        a = torch.tensor([[1.0, 2.0, bad, 0.5]], requires_grad=True)
        d = torch.cdist(a, b[None], p)
        d.sum().backward()
        print("cdist p=%s bad=%s" % (p, lua(bad)), lua(d.item()), lua(a.grad.tolist()))
