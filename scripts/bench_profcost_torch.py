#!/usr/bin/env python3
"""bench_profcost_torch.py — the PyTorch peer of scripts/bench_profcost.lua: torch.profiler's cost on the same
training steps (the MLP 784-512-256-10, batch 256; the GPT of scripts/bench_train_torch.py: 4 layers, d=256, 4 heads,
T=128, batch 16, vocab 96), fp32, AdamW, eager, one thread; process CPU time per step, the configurations alternating
within each round, the fastest step of all rounds; "stop" is the fastest window exit (torch's event processing) per
recorded step; and the tiny ops' cost per call. Usage:
    /opt/torch2/bin/python3 scripts/bench_profcost_torch.py [mlp|gpt|tiny] [ROUNDS] [STEPS]"""
import sys, time, warnings
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, profile

warnings.filterwarnings("ignore")
which = sys.argv[1] if len(sys.argv) > 1 else "mlp"
rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 5
steps = int(sys.argv[3]) if len(sys.argv) > 3 else 4
torch.set_num_threads(1)
torch.manual_seed(0)

if which == "mlp":
    model = nn.Sequential(nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 256), nn.ReLU(), nn.Linear(256, 10))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x = torch.randn(256, 784)
    y = torch.tensor([(j * 7) % 10 for j in range(1, 257)])

    def step():
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad(); loss.backward(); opt.step()
elif which == "gpt":
    class Block(nn.Module):
        def __init__(s, d, h):
            super().__init__(); s.h = h
            s.ln1, s.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
            s.qkv, s.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
            s.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(approximate="tanh"), nn.Linear(4 * d, d))

        def forward(s, x):
            B, T, C = x.shape
            q, k, v = s.qkv(s.ln1(x)).split(C, dim=2)
            q, k, v = [t.view(B, T, s.h, C // s.h).transpose(1, 2) for t in (q, k, v)]
            a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + s.proj(a.transpose(1, 2).reshape(B, T, C))
            return x + s.mlp(s.ln2(x))

    class GPT(nn.Module):
        def __init__(s, V=96, T=128, L=4, H=4, d=256):
            super().__init__()
            s.wte, s.wpe = nn.Embedding(V, d), nn.Embedding(T, d)
            s.blocks = nn.Sequential(*[Block(d, H) for _ in range(L)]); s.ln_f = nn.LayerNorm(d)

        def forward(s, idx):
            T = idx.shape[1]
            x = s.wte(idx) + s.wpe(torch.arange(T))
            return F.linear(s.ln_f(s.blocks(x)), s.wte.weight)

    B, T, V = 16, 128, 96
    model = GPT(); opt = torch.optim.AdamW(model.parameters(), lr=3e-4)
    ids = torch.tensor([[(b * 31 + t * 17) % V for t in range(1, T + 2)] for b in range(1, B + 1)])
    gx, gy = ids[:, :T], ids[:, 1:]

    def step():
        loss = F.cross_entropy(model(gx).view(B * T, V), gy.reshape(B * T))
        opt.zero_grad(); loss.backward(); opt.step()
elif which == "tiny":
    # per call: 1000 calls of each tiny op on [4, 4] tensors (under no_grad, as an optimizer writes)
    a, b, c = torch.randn(4, 4), torch.randn(4, 4), torch.randn(4, 4)
    N = 1000

    def step():
        with torch.no_grad():
            for _ in range(N):
                a + b
            for _ in range(N):
                c.add_(b)
            for _ in range(N):
                c.mul_(0.5)
            for _ in range(N):
                torch.addmm(c, a, b)
else:
    sys.exit("usage: bench_profcost_torch.py [mlp|gpt|tiny] [ROUNDS] [STEPS]")

CONFIGS = [("off", None), ("times only", {}), ("record_shapes", {"record_shapes": True}),
           ("with_flops", {"with_flops": True}), ("profile_memory", {"profile_memory": True}),
           ("with_stack", {"with_stack": True}),
           ("all four", {"record_shapes": True, "with_flops": True, "profile_memory": True, "with_stack": True})]
for _ in range(2):
    step()
best, stop_best, events = {}, {}, {}
for r in range(rounds):
    for i in range(len(CONFIGS)):
        name, o = CONFIGS[(i + r) % len(CONFIGS)]
        if o is None:
            for _ in range(steps):
                t0 = time.process_time(); step(); dt = time.process_time() - t0
                best[name] = min(best.get(name, 1e9), dt)
            continue
        p = profile(activities=[ProfilerActivity.CPU], **o)
        p.__enter__()
        for _ in range(steps):
            t0 = time.process_time(); step(); dt = time.process_time() - t0
            best[name] = min(best.get(name, 1e9), dt)
        t0 = time.process_time()
        p.__exit__(None, None, None)
        n = len(p.events())   # (torch builds its event list lazily: counted here, the exit's time without it)
        stop_best[name] = min(stop_best.get(name, 1e9), (time.process_time() - t0) / steps)
        events[name] = n // steps
print("model=%s torch=%s rounds=%d steps=%d load=%s" % (which, torch.__version__, rounds, steps,
                                                       open("/proc/loadavg").read().strip()))
for name, _ in CONFIGS:
    print("%-16s step_ms=%8.3f overhead=%+6.1f%% stop_ms_per_step=%7.3f events_per_step=%d" % (
        name, best[name] * 1e3, (best[name] / best["off"] - 1) * 100, stop_best.get(name, 0) * 1e3,
        events.get(name, 0)))
