#!/usr/bin/env python3
"""bench_ops_torch.py [rounds [group]] — scripts/bench_ops.lua's cases in PyTorch 2.x: forward under no_grad and
forward + backward, the fastest of `rounds` calls (default 4) in ms, wall clock; groups resample, embedding_bag,
transformer (fp8lab's bf16 autocast against the layer in bf16), transpose (the copy alone), sweep (the same rows, named
the same, a third argument a filter on their names), all.
    /opt/torch2/bin/python3 scripts/bench_ops_torch.py 4 resample     (torch's threads: OMP_NUM_THREADS, as fp8lab's)
BENCH_CLOCK=cpu times by process CPU time (time.process_time), as bench_ops.lua's."""
import os, sys, time

USAGE = ("usage: bench_ops_torch.py [ROUNDS [GROUP [FILTER]]]   (ROUNDS: an integer >= 1, default 4; GROUP: "
         "resample, embedding_bag, transformer, transpose, sweep or all, default all; FILTER: the sweep's rows whose name "
         "holds it)")
args = sys.argv[1:]
if len(args) > 3 or (args and not (args[0].isdigit() and int(args[0]) >= 1)):
    sys.exit("bench_ops_torch.py: ROUNDS must be an integer >= 1 (and three arguments at most), got %r\n%s"
             % (args, USAGE))
rounds = int(args[0]) if args else 4
group = args[1] if len(args) > 1 else "all"
if group not in ("resample", "embedding_bag", "transformer", "transpose", "sweep", "all"):
    sys.exit("bench_ops_torch.py: GROUP must be resample, embedding_bag, transformer, transpose, sweep or all, got %r\n%s"
             % (group, USAGE))
filt = args[2] if len(args) > 2 else None
clock = os.environ.get("BENCH_CLOCK", "wall")
if clock not in ("wall", "cpu"):
    sys.exit("bench_ops_torch.py: BENCH_CLOCK must be wall or cpu, got %r" % clock)
now = time.process_time if clock == "cpu" else time.perf_counter
if filt is not None and group != "sweep":   # (the other groups have no rows to pick)
    sys.exit("bench_ops_torch.py: FILTER picks rows of the sweep group only, got GROUP %r\n%s" % (group, USAGE))

import torch   # (after the arguments: a refusal needs no torch)
import torch.nn.functional as F

torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
torch.manual_seed(1)

def best(f):
    b = float("inf")
    for _ in range(rounds):
        t = now()
        f()
        b = min(b, now() - t)
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
if group in ("all", "sweep"):
    # scripts/bench_ops.lua's sweep, row for row. fp8lab's amax is max |x| (x.abs().amax(dim) here); its dims count
    # from 1 (dim1 is torch's dim 0); fp8lab's conv2d row has no bias, as here.
    x, y = torch.randn(4096, 1024), torch.randn(4096, 1024)
    xg = x.clone().requires_grad_()
    xb, yb = x.bfloat16(), y.bfloat16()
    xbg = xb.clone().requires_grad_()
    col, row = torch.randn(4096, 1), torch.randn(1024)
    pos = x.abs() + 0.5
    mask = torch.randn(4096, 1024) > 0
    w, b = torch.randn(1024), torch.randn(1024)
    idx64 = torch.randint(0, 1024, (4096, 64))
    ids, ids512 = torch.randint(0, 4096, (2048,)), torch.randint(0, 1024, (512,))
    tgt = torch.randint(0, 1024, (4096,))
    a1, b1 = torch.randn(1000, 999), torch.randn(999, 1001)
    a2, b2 = torch.randn(4097, 65), torch.randn(65, 257)
    img, ker = torch.randn(16, 32, 32, 32), torch.randn(32, 32, 3, 3)
    imgg = img.clone().requires_grad_()
    G = lambda f: (lambda: f(xg).sum().backward())
    rows = [
        ("softmax dim2", lambda: F.softmax(x, 1), G(lambda t: F.softmax(t, 1))),
        ("softmax dim1", lambda: F.softmax(x, 0), G(lambda t: F.softmax(t, 0))),
        ("log_softmax dim2", lambda: F.log_softmax(x, 1), G(lambda t: F.log_softmax(t, 1))),
        ("log_softmax dim1", lambda: F.log_softmax(x, 0), G(lambda t: F.log_softmax(t, 0))),
        ("layer_norm 1024", lambda: F.layer_norm(x, (1024,), w, b), None),
        ("rms_norm 1024", lambda: F.rms_norm(x, (1024,), w), None),
        ("gelu none", lambda: F.gelu(x), G(lambda t: F.gelu(t))),
        ("gelu tanh", lambda: F.gelu(x, approximate="tanh"), G(lambda t: F.gelu(t, approximate="tanh"))),
        ("silu", lambda: F.silu(x), G(lambda t: F.silu(t))),
        ("sigmoid", lambda: x.sigmoid(), None),
        ("tanh", lambda: x.tanh(), None),
        ("relu", lambda: F.relu(x), None),
        ("sum dim1", lambda: x.sum(0), None),
        ("sum dim2", lambda: x.sum(1), None),
        ("mean dim1", lambda: x.mean(0), None),
        ("mean dim2", lambda: x.mean(1), None),
        ("var dim1", lambda: x.var(0), None),
        ("var dim2", lambda: x.var(1), None),
        ("std dim1", lambda: x.std(0), None),
        ("std dim2", lambda: x.std(1), None),
        ("sum all", lambda: x.sum(), None),
        ("amax |x| dim2", lambda: x.abs().amax(1), None),
        ("max dim1", lambda: x.max(0), None),
        ("min dim2", lambda: x.min(1), None),
        ("where", lambda: torch.where(mask, x, y), None),
        ("masked_fill", lambda: x.masked_fill(mask, 0), None),
        ("abs", lambda: x.abs(), None),
        ("neg", lambda: x.neg(), None),
        ("sqrt", lambda: pos.sqrt(), None),
        ("rsqrt", lambda: pos.rsqrt(), None),
        ("div", lambda: x / pos, None),
        ("div scalar", lambda: x / 3, None),
        ("mul", lambda: x * y, None),
        ("sub", lambda: x - y, None),
        ("lt", lambda: x < y, None),
        ("eq scalar", lambda: x == 0, None),
        ("cross_entropy", lambda: F.cross_entropy(x, tgt), G(lambda t: F.cross_entropy(t, tgt))),
        ("mse_loss", lambda: F.mse_loss(x, y), G(lambda t: F.mse_loss(t, y))),
        ("dropout 0.1", lambda: F.dropout(x, 0.1, True), None),
        ("index_select dim1", lambda: x.index_select(0, ids), None),
        ("index_select dim2", lambda: x.index_select(1, ids512), None),
        ("cat dim1", lambda: torch.cat([x, y], 0), None),
        ("cat dim2", lambda: torch.cat([x, y], 1), None),
        ("stack", lambda: torch.stack([x, y], 0), None),
        ("transpose contiguous", lambda: x.transpose(0, 1).contiguous(), None),
        ("bf16 add", lambda: xb + yb, None),
        ("bf16 mul", lambda: xb * yb, None),
        ("bf16 gelu", lambda: F.gelu(xb), lambda: F.gelu(xbg).sum().backward()),
        ("to bf16", lambda: x.bfloat16(), None),
        ("bf16 to fp32", lambda: xb.float(), None),
        ("bf16 softmax dim2", lambda: F.softmax(xb, 1), None),
        ("bf16 log_softmax dim2", lambda: F.log_softmax(xb, 1), None),
        ("bf16 sum all", lambda: xb.sum(), None),
        ("matmul [1000,999]x[999,1001]", lambda: a1 @ b1, None),
        ("matmul [4097,65]x[65,257]", lambda: a2 @ b2, None),
        ("conv2d 16x32x32x32 k3", lambda: F.conv2d(img, ker, None, padding=1),
         lambda: F.conv2d(imgg, ker, None, padding=1).sum().backward()),
        ("pow 3.5", lambda: pos.pow(3.5), None),
        ("pow 2.7 of x", lambda: x.pow(2.7), None),
        ("norm 2 dim2", lambda: x.norm(2, 1), None),
        ("norm 2 dim1", lambda: x.norm(2, 0), None),
        ("add column [4096,1]", lambda: x + col, None),
        ("mul column [4096,1]", lambda: x * col, None),
        ("add row [1024]", lambda: x + row, None),
        ("clamp -1 1", lambda: x.clamp(-1, 1), None),
        ("gather dim2 [4096,64]", lambda: x.gather(1, idx64), None),
    ]
    for name, fwd, both in rows:
        if filt is None or filt in name:
            with torch.no_grad():
                f = best(fwd)
            if both is not None:
                report(name, f, best(both))
            else:
                print("%-38s forward %8.2f ms" % (name, f))
