#!/usr/bin/python3
# bench_train_torch.py — the PyTorch peer of scripts/bench_train.lua: the same MLP (784-512-256-10,
# batch 256) and small GPT (4 layers, d=256, 4 heads, T=128, batch 16, vocab 96, pre-LN, GELU tanh,
# tied head) trained with AdamW on the CPU, in fp32 or under bf16 autocast (torch.autocast('cpu')).
# Usage: bench_train_torch.py THREADS [STEPS [fp32|bf16 [mlp|gpt|all [eager|compile]]]].
# Prints lines in the same form as bench_train.lua. Runs under any PyTorch: Debian's python3-torch 1.13
# (/usr/bin/python3; attention written out) or a 2.x from PyPI in a virtual environment (attention through
# F.scaled_dot_product_attention; `compile` wraps both models in torch.compile).
import resource, sys, time
import torch
import torch.nn as nn
import torch.nn.functional as F

threads = int(sys.argv[1]) if len(sys.argv) > 1 else 1
steps = int(sys.argv[2]) if len(sys.argv) > 2 else 20
precision = sys.argv[3] if len(sys.argv) > 3 else 'fp32'
which = sys.argv[4] if len(sys.argv) > 4 else 'all'
mode = sys.argv[5] if len(sys.argv) > 5 else 'eager'
assert precision in ('fp32', 'bf16') and which in ('mlp', 'gpt', 'all') and mode in ('eager', 'compile')
SDPA = hasattr(F, 'scaled_dot_product_attention')
import contextlib
def ac():
    return torch.autocast('cpu', dtype=torch.bfloat16) if precision == 'bf16' else contextlib.nullcontext()
torch.set_num_threads(threads)
torch.manual_seed(0)

def timed(step, warmup=3):
    for _ in range(warmup): step()
    t0 = time.perf_counter()
    for _ in range(steps): step()
    return (time.perf_counter() - t0) / steps * 1000

def rss_mib():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024

mlp = nn.Sequential(nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 256), nn.ReLU(), nn.Linear(256, 10))
opt = torch.optim.AdamW(mlp.parameters(), lr=1e-3)
def maybe_compile(m): return torch.compile(m) if mode == 'compile' else m
mlp_fwd = maybe_compile(mlp)
x = torch.randn(256, 784); y = torch.tensor([(j * 7) % 10 for j in range(1, 257)])
def mlp_step():
    with ac(): loss = F.cross_entropy(mlp_fwd(x), y)
    opt.zero_grad(); loss.backward(); opt.step()
if which in ("mlp", "all"):
    print("model=mlp threads=%d ms_per_step=%.2f steps=%d peak_rss_mib=%.0f" % (threads, timed(mlp_step), steps, rss_mib()))

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
        if SDPA:
            a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:   # torch 1.13 has no SDPA
            att = (q @ k.transpose(-2, -1)) * (1.0 / (C // s.h) ** 0.5)
            att = att.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf")).softmax(-1)
            a = att @ v
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
gpt = GPT(); gopt = torch.optim.AdamW(gpt.parameters(), lr=3e-4)
gpt_fwd = maybe_compile(gpt)
ids = torch.tensor([[(b * 31 + t * 17) % V for t in range(1, T + 2)] for b in range(1, B + 1)])
gx, gy = ids[:, :T], ids[:, 1:]
def gpt_step():
    with ac(): loss = F.cross_entropy(gpt_fwd(gx).view(B * T, V).float(), gy.reshape(B * T))
    gopt.zero_grad(); loss.backward(); gopt.step()
if which in ("gpt", "all"):
    print("model=gpt threads=%d ms_per_step=%.2f steps=%d peak_rss_mib=%.0f" % (threads, timed(gpt_step), steps, rss_mib()))
