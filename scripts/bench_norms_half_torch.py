#!/usr/bin/env python3
"""bench_norms_half_torch.py — PyTorch 2.15's times for scripts/bench_norms_half.lua's cases (one thread, process CPU
time, the best of ROUNDS rounds), for docs/performance.md's "The norms' rescue for every p and bf16/fp16 (stop 99)"
and "clip_grad_norm_'s cost at p ≠ 2 (stop 101)" (the other orders and torch's foreach=True form).
Run: OMP_NUM_THREADS=1 /opt/torch2/bin/python scripts/bench_norms_half_torch.py [rounds=5 [filter]]"""
import sys
import time
import torch
import torch.nn.functional as F

torch.set_num_threads(1)
rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 5
only = sys.argv[2] if len(sys.argv) > 2 else None
torch.manual_seed(1)
x64, x2d, x32 = torch.randn(64), torch.randn(64, 64), torch.randn(32, 64)
b64, b2d, b32 = x64.bfloat16(), x2d.bfloat16(), x32.bfloat16()
params = [torch.randn(64, 64, requires_grad=True) for _ in range(4)]
for p in params:
    p.grad = torch.randn(64, 64)
bparams = [torch.randn(64, 64, dtype=torch.bfloat16, requires_grad=True) for _ in range(4)]
for p in bparams:
    p.grad = torch.randn(64, 64).bfloat16()
grads, bgrads = [p.grad for p in params], [p.grad for p in bparams]
U = torch.nn.utils
cases = [
    ("[64] x:norm(3)", lambda: x64.norm(3), 20000),
    ("[64, 64] x:norm(3, 2)", lambda: x2d.norm(3, 1), 10000),
    ("[32, 64] F.normalize p=3", lambda: F.normalize(x32, p=3), 10000),
    ("[64] bf16 x:norm()", lambda: b64.norm(), 20000),
    ("[64, 64] bf16 x:norm(2, 2)", lambda: b2d.norm(2, 1), 10000),
    ("[32, 64] bf16 F.normalize", lambda: F.normalize(b32), 10000),
    ("[32, 64] bf16 F.normalize p=3", lambda: F.normalize(b32, p=3), 10000),
    ("get_total_norm p=3 (4x[64,64])", lambda: U.get_total_norm(grads, 3).item(), 5000),
    ("get_total_norm bf16 (4x[64,64])", lambda: U.get_total_norm(bgrads).item(), 5000),
    ("clip_grad_norm_ p=3 (4x[64,64])", lambda: U.clip_grad_norm_(params, 1e9, 3).item(), 5000),
    ("clip_grad_norm_ bf16 (4x[64,64])", lambda: U.clip_grad_norm_(bparams, 1e9).item(), 5000),
    # the other orders (stop 101), and torch's foreach=True form of the p = 3 rows (its _foreach_norm)
    ("get_total_norm p=1 (4x[64,64])", lambda: U.get_total_norm(grads, 1).item(), 5000),
    ("get_total_norm p=inf (4x[64,64])", lambda: U.get_total_norm(grads, float("inf")).item(), 5000),
    ("get_total_norm p=0.5 (4x[64,64])", lambda: U.get_total_norm(grads, 0.5).item(), 5000),
    ("clip_grad_norm_ p=1 (4x[64,64])", lambda: U.clip_grad_norm_(params, 1e9, 1).item(), 5000),
    ("clip_grad_norm_ p=inf (4x[64,64])", lambda: U.clip_grad_norm_(params, 1e9, float("inf")).item(), 5000),
    ("clip_grad_norm_ p=0.5 (4x[64,64])", lambda: U.clip_grad_norm_(params, 1e9, 0.5).item(), 5000),
    ("get_total_norm p=3 foreach (4x[64,64])", lambda: U.get_total_norm(grads, 3, foreach=True).item(), 5000),
    ("clip_grad_norm_ p=3 foreach (4x[64,64])", lambda: U.clip_grad_norm_(params, 1e9, 3, foreach=True).item(), 5000),
]
with torch.no_grad():
    for name, f, n in cases:
        if only and only not in name:
            continue
        best = float("inf")
        for _ in range(rounds):
            t = time.process_time()
            for _ in range(n):
                f()
            best = min(best, (time.process_time() - t) / n * 1e6)
        print("%-34s %10.2f us" % (name, best))
