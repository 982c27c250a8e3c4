#!/usr/bin/env python3
"""gen_review15.py — the values tests/spec/review15_spec.lua checks against PyTorch 2.15: p-norms whose rescued
sum of powers is still out of range (fp16 rows of 70,000 ones, whose Σ|x|^p passes 65504 even after the rescue's
division by a power of two near the largest |x|, which is 1; a p of 200 in fp32 and 20 in fp16 of [1.9, 1.9]).
Run: /opt/torch2/bin/python scripts/gen_review15.py   (prints the values, pasted into the spec as literals)."""
import torch

F = torch.nn.functional
h = torch.ones(2, 70000, dtype=torch.float16)
z = torch.zeros(2, 70000, dtype=torch.float16)
print("normalize p=2", repr(F.normalize(h, dim=1)[0, 0].item()))
print("normalize p=3", repr(F.normalize(h, p=3, dim=1)[0, 0].item()))
print("dist p=3", repr(h[0].dist(z[0], 3).item()))
print("pairwise_distance p=3", repr(F.pairwise_distance(h, z, p=3)[0].item()))
print("renorm(3, 0, 1) sum", repr(h.renorm(3, 0, 1).float().sum().item()))
print("renorm(3, 0, 1) [0][0]", repr(h.renorm(3, 0, 1)[0, 0].item()))
print("get_total_norm p=3", repr(torch.nn.utils.get_total_norm([h], 3).item()))
x = torch.tensor([1.9, 1.9])
print("fp32 [1.9, 1.9] dist p=200", repr(x.dist(torch.zeros(2), 200).item()),
      "normalize p=200", F.normalize(x[None], p=200, dim=1)[0].tolist())
x = x.half()
print("fp16 [1.9, 1.9] dist p=20", repr(x.dist(torch.zeros(2, dtype=torch.float16), 20).item()),
      "normalize p=20", F.normalize(x[None], p=20, dim=1)[0].tolist())
