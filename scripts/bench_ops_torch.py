#!/usr/bin/env python3
"""bench_ops_torch.py [rounds [group]] — scripts/bench_ops.lua's cases in PyTorch 2.x: forward under no_grad and
forward + backward, the fastest of `rounds` calls (default 4) in ms, wall clock; groups resample, embedding_bag,
transformer (fp8lab's bf16 autocast against the layer in bf16), transpose (the copy alone), all.
    /opt/torch2/bin/python3 scripts/bench_ops_torch.py 4 resample     (torch's threads: OMP_NUM_THREADS, as fp8lab's)"""
import os, sys, time

USAGE = ("usage: bench_ops_torch.py [ROUNDS [GROUP]]   (ROUNDS: an integer >= 1, default 4; GROUP: resample, "
         "embedding_bag, transformer, transpose or all, default all)")
args = sys.argv[1:]
if len(args) > 2 or (args and not (args[0].isdigit() and int(args[0]) >= 1)):
    sys.exit("bench_ops_torch.py: ROUNDS must be an integer >= 1 (and two arguments at most), got %r\n%s"
             % (args, USAGE))
rounds = int(args[0]) if args else 4
group = args[1] if len(args) > 1 else "all"
if group not in ("resample", "embedding_bag", "transformer", "transpose", "all"):
    sys.exit("bench_ops_torch.py: GROUP must be resample, embedding_bag, transformer, transpose or all, got %r\n%s"
             % (group, USAGE))

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

def report(name, fwd, both):
    print("%-38s forward %8.2f ms  forward + backward %8.2f ms" % (name, fwd, both))

if group in ("all", "resample"):
    x4, x5 = torch.randn(16, 64, 32, 32), torch.randn(2, 16, 16, 32, 32)
    for mode, x in [("bilinear", x4), ("bicubic", x4), ("trilinear", x5)]:
        kw = dict(scale_factor=2, mode=mode, align_corners=False)
        xg = x.clone().requires_grad_()
        with torch.no_grad():
            fwd = best(lambda: F.interpolate(x, **kw))
        report("%s %s" % (mode, list(x.shape)), fwd, best(lambda: F.interpolate(xg, **kw).sum().backward()))
if group in ("all", "embedding_bag"):
    ids = torch.randint(0, 100000, (4096, 32))
    psw = torch.rand(4096, 32)
    for mode, p in [("sum", None), ("max", None), ("sum", psw)]:
        m = torch.nn.EmbeddingBag(100000, 64, mode=mode)
        with torch.no_grad():
            fwd = best(lambda: m(ids, per_sample_weights=p))
        report("EmbeddingBag %s%s" % (mode, " per_sample_weights" if p is not None else ""), fwd,
               best(lambda: m(ids, per_sample_weights=p).sum().backward()))
if group in ("all", "transformer"):
    layer = torch.nn.TransformerEncoderLayer(256, 8, batch_first=True, dropout=0.0)
    x = torch.randn(16, 128, 256)
    for name, dt in [("fp32", torch.float32), ("bf16", torch.bfloat16)]:
        layer, xd = layer.to(dt), x.to(dt)
        layer.eval()
        with torch.no_grad():
            fwd = best(lambda: layer(xd))
        layer.train()
        def both():
            layer(xd).float().sum().backward()
            layer.zero_grad()
        report("TransformerEncoderLayer %s" % name, fwd, best(both))
if group in ("all", "transpose"):
    cases = [("t() fp32", torch.randn(1024, 256)), ("t() fp32", torch.randn(4096, 4096)),
             ("t() bf16", torch.randn(4096, 1024).bfloat16()), ("permute NCHW->NHWC fp32", torch.randn(32, 64, 32, 32))]
    for name, x in cases:
        v = x.t() if x.dim() == 2 else x.permute(0, 2, 3, 1)
        print("%-38s copy %8.3f ms" % ("%s %s" % (name, list(x.shape)), best(lambda: v.contiguous())))
