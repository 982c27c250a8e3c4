#!/usr/bin/env python3
"""gen_gaps16.py — the values tests/spec/gaps16_spec.lua checks against PyTorch 2.15 (CPU): x.norm(p, dim, keepdim)
and torch.dist for the p fp8lab refused until stop 98 (0, fractional, > 2, negative, -inf), with zeros, NaNs,
infinities and ties; bf16/fp16 inputs (accumulated in fp32). Values and gradients, printed as Lua literals (pasted
into the spec). torch leaves p = 0's gradient undefined (.grad None: printed nil), fp8lab gives zeros.
Run: /opt/torch2/bin/python scripts/gen_gaps16.py"""
import math
import torch

from lua_literal import lua   # scripts/lua_literal.py


print("-- torch", torch.__version__)
# x.norm(p, dim=1) (fp8lab's dim 2) of rows with a zero, a tie for the smallest and largest |x|, a NaN, an inf, and
# only infinities; the gradient of Σ r·w
X = [[3.0, 0.0, -4.0], [2.0, -2.0, 3.0], [1e-3, 2.0, float("nan")], [float("inf"), 1.0, -2.0],
     [float("inf"), -float("inf"), float("inf")], [0.5, -0.25, 1.5]]
W = [1.0, -2.0, 3.0, 0.5, 4.0, -1.5]
for p in [0.0, 0.5, 3.0, 4.5, -1.0, -0.5, -math.inf]:
    x = torch.tensor(X, requires_grad=True)
    r = x.norm(p, 1)
    (r * torch.tensor(W)).sum().backward()
    print("norm p=%s dim=2" % lua(p))
    print("  r =", lua(r.tolist()))
    print("  g =", lua(x.grad))

# over everything, over a list of dims with keepdim, and dim=0 (fp8lab's 1), of a finite 2x3
Y = [[0.5, -0.25, 1.5], [2.0, -2.0, 3.0]]
for p in [0.0, 0.5, 3.0, -1.0, -math.inf]:
    y = torch.tensor(Y, requires_grad=True)
    r = y.norm(p)
    r.backward()
    print("norm p=%s all: r = %s g = %s" % (lua(p), lua(r.item()), lua(y.grad)))
    y.grad = None
    r = y.norm(p, (0, 1), True)
    print("norm p=%s dims {1,2} keepdim: shape %s r = %s" % (lua(p), list(r.shape), lua(r.tolist())))
    r = y.norm(p, 0, True)
    (r * torch.tensor([[1.0, -1.0, 2.0]])).sum().backward()
    print("norm p=%s dim=1 keepdim: r = %s g = %s" % (lua(p), lua(r.tolist()), lua(y.grad)))

# bf16 and fp16, accumulated in fp32 and rounded once: 300 ones (a bf16 sum stops at 256), fp16 [40000, 40000]
# (40000^3 is past fp16's 65504), fp16 p=0.5 of 1000 ones (the root of 1000^2 = 1e6)
for dt in [torch.bfloat16, torch.float16]:
    for p in [3.0, 0.5, -1.0, 0.0]:
        print("%s ones(300) p=%s: %s" % (dt, lua(p), lua(torch.ones(300, dtype=dt).norm(p).item())))
print("fp16 [40000, 40000] p=3:", lua(torch.tensor([40000.0, 40000.0], dtype=torch.float16).norm(3).item()))
print("fp16 [40000, 40000] p=-inf:", lua(torch.tensor([40000.0, 30000.0], dtype=torch.float16).norm(-math.inf).item()))

# dist: every p, the gradient of both operands
A = [1.5, -2.0, 3.0, 0.5]
B = [1.0, 1.0, -1.0, 2.0]
for p in [-1.0, -2.5, -math.inf, 0.0, 0.5, 3.0]:
    a = torch.tensor(A, requires_grad=True)
    b = torch.tensor(B, requires_grad=True)
    r = torch.dist(a, b, p)
    if p != 0:   # (p = 0's backward of the distance alone is torch's RuntimeError: its gradient is undefined)
        r.backward()
    print("dist p=%s: r = %s ga = %s gb = %s" % (lua(p), lua(r.item()), lua(a.grad), lua(b.grad)))
a = torch.ones(300, dtype=torch.bfloat16)
print("dist bf16 ones(300) p=3:", lua(torch.dist(a, torch.zeros(300, dtype=torch.bfloat16), 3).item()))

# empty tensors
for p in [0.0, 0.5, 3.0, -1.0, -math.inf]:
    for shape, dim in [((0,), None), ((0, 3), 1), ((2, 0), 1)]:
        try:
            print("empty %s p=%s dim=%s: %s" % (shape, lua(p), dim, lua(torch.zeros(shape).norm(p, dim))))
        except RuntimeError as e:
            print("empty %s p=%s dim=%s:" % (shape, lua(p), dim), str(e).splitlines()[0])
# over- and underflow: torch keeps them
print("[1e20, 1e20] p=3:", lua(torch.tensor([1e20, 1e20]).norm(3).item()))
print("[1e-30, 1e-30] p=3:", lua(torch.tensor([1e-30, 1e-30]).norm(3).item()))
print("[1e-30, 1e-30] p=-1:", lua(torch.tensor([1e-30, 1e-30]).norm(-1).item()))
print("[1e-30, 1e-30] p=0.5:", lua(torch.tensor([1e-30, 1e-30]).norm(0.5).item()))
print("exact [1e20, 1e20] p=3 (fp64):", lua(torch.tensor([1e20, 1e20], dtype=torch.float64).norm(3).float().item()))
tiny = torch.tensor([1e-30, 1e-30], dtype=torch.float32).double()
print("exact [1e-30, 1e-30] p=3 (fp64):", lua(tiny.norm(3).float().item()))
print("exact [1e-30, 1e-30] p=0.5 (fp64):", lua(tiny.norm(0.5).float().item()))
# F.normalize with p < 0 of a row of infinities: the norm inf (a zero sum's root), x / inf NaN; the gradient of Σ y·w
for p in [-1.0, -0.5]:
    x = torch.tensor([[float("inf"), -float("inf")], [1.0, -2.0]], requires_grad=True)
    y = torch.nn.functional.normalize(x, p=p, dim=1)
    (y * torch.tensor([[1.0, 2.0], [3.0, -1.0]])).sum().backward()
    print("normalize p=%s: y = %s g = %s" % (lua(p), lua(y), lua(x.grad)))
# dist of bf16/fp16 operands: the difference in their dtype, its norm summed in fp32 and rounded once
for dt in [torch.bfloat16, torch.float16]:
    for p in [0.5, 3.0]:
        a = torch.tensor([1.5, -2.0, 3.0, 0.5, 0.1, 2.7]).to(dt)
        b = torch.tensor([1.0, 1.0, -1.0, 2.0, 0.3, -0.6]).to(dt)
        print("dist %s p=%s: %s" % (dt, lua(p), lua(torch.dist(a, b, p).float().item())))
