#!/usr/bin/env python3
"""bench_ln_residual_torch.py — PyTorch 2.15's time for scripts/bench_ln_residual.lua's case (h = x·1, out =
layer_norm(h) + h·1, out.backward(G); x [2048, 256]; one thread, process CPU time, ms an iteration, the best of
ROUNDS rounds of 20), for docs/performance.md's "The te step outside its GEMMs (stop 101)".
Run: OMP_NUM_THREADS=1 /opt/torch2/bin/python scripts/bench_ln_residual_torch.py [rounds=7]"""
import sys

USAGE = "usage: bench_ln_residual_torch.py [ROUNDS]   (ROUNDS: an integer >= 1, default 7)"
args = sys.argv[1:]
if len(args) > 1 or (args and not (args[0].isdigit() and int(args[0]) >= 1)):
    sys.exit("bench_ln_residual_torch.py: ROUNDS must be an integer >= 1 (and one argument at most), got %r\n%s"
             % (" ".join(args), USAGE))
rounds = int(args[0]) if args else 7

import time  # noqa: E402 (after the arguments: a refusal needs no torch)
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

torch.set_num_threads(1)
torch.manual_seed(1)
R, C = 2048, 256
x0 = torch.randn(R, C, requires_grad=True)
w, b = torch.randn(C, requires_grad=True), torch.randn(C, requires_grad=True)
G = torch.randn(R, C)
out = []
for first in (True, False):
    best = float("inf")
    for _ in range(rounds):
        t0 = time.process_time()
        for _ in range(20):
            h = x0 * 1
            y = F.layer_norm(h, (C,), w, b, 1e-5) + h * 1 if first else h * 1 + F.layer_norm(h, (C,), w, b, 1e-5)
            y.backward(G)
        best = min(best, (time.process_time() - t0) / 20 * 1000)
    out.append("%s %.3f ms" % ("ln_first" if first else "ln_last", best))
print("  ".join(out))
