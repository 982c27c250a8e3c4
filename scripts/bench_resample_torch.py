#!/usr/bin/env python3
"""bench_resample_torch.py [rounds] — scripts/bench_resample.lua's cases in PyTorch 2.x (F.interpolate, scale 2,
fp32): forward under no_grad and forward + backward, the fastest of `rounds` calls (default 4) in ms, wall clock.
    /opt/torch2/bin/python3 scripts/bench_resample_torch.py 4     (torch's threads: OMP_NUM_THREADS, as fp8lab's)"""
import os, sys, time

USAGE = "usage: bench_resample_torch.py [ROUNDS]   (ROUNDS: an integer >= 1, default 4)"
if len(sys.argv) > 2 or (len(sys.argv) == 2 and not (sys.argv[1].isdigit() and int(sys.argv[1]) >= 1)):
    sys.exit("bench_resample_torch.py: ROUNDS must be an integer >= 1, got %r\n%s" % (sys.argv[1:], USAGE))
rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 4

import torch   # (after the arguments: a refusal needs no torch)
import torch.nn.functional as F

torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
torch.manual_seed(1)

def best(f):
    b = float("inf")
    for _ in range(rounds):
        t = time.perf_counter()
        f()
        b = min(b, time.perf_counter() - t)
    return b * 1e3

x4, x5 = torch.randn(16, 64, 32, 32), torch.randn(2, 16, 16, 32, 32)
for mode, x in [("bilinear", x4), ("bicubic", x4), ("trilinear", x5)]:
    kw = dict(scale_factor=2, mode=mode, align_corners=False)
    with torch.no_grad():
        fwd = best(lambda: F.interpolate(x, **kw))
    xg = x.clone().requires_grad_()
    both = best(lambda: F.interpolate(xg, **kw).sum().backward())
    print("%-10s %s  forward %8.2f ms  forward + backward %8.2f ms" % (mode, list(x.shape), fwd, both))
