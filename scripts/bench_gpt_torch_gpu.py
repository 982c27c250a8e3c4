#!/usr/bin/env python3
# bench_gpt_torch_gpu.py — the PyTorch peer of `fp8lab scripts/bench_train.lua --model gpt` on a GPU: the
# same GPT (learned positions, pre-LN blocks, GELU tanh MLP 4d, tied head, no dropout) trained with AdamW
# under bf16 autocast, in two modes:
#   bf16  every Linear in bf16 (cuBLAS), attention through F.scaled_dot_product_attention (flash)
#   fp8   the blocks' Linears as FP8 GEMMs through torch._scaled_mm with dynamic per-tensor scales
#         (torchao's "tensorwise" recipe: x, W in E4M3, output gradients in E5M2, fast accumulation for
#         the forward GEMM only), everything else as in bf16
#   MODE-compile (bf16-compile, fp8-compile) the same model through torch.compile (default mode); the
#         warm-up steps take the compilation, so give it WARMUP >= 2
# Usage: bench_gpt_torch_gpu.py bf16|fp8[-compile] LAYERS D_MODEL HEADS SEQ BATCH VOCAB STEPS WARMUP PEAK_TFLOPS
# Prints one line in bench_train.lua's form. Needs a CUDA GPU; fp8 needs PyTorch >= 2.1 and sm_89+.
import sys, time

if len(sys.argv) != 11:
    sys.exit("usage: bench_gpt_torch_gpu.py bf16|fp8[-compile] LAYERS D_MODEL HEADS SEQ BATCH VOCAB STEPS WARMUP "
             "PEAK_TFLOPS (got %d arguments)" % (len(sys.argv) - 1))
mode, _, how = sys.argv[1].partition("-")
if mode not in ("bf16", "fp8") or how not in ("", "compile"):
    sys.exit("bench_gpt_torch_gpu.py: mode %r: expected bf16, fp8, bf16-compile or fp8-compile" % sys.argv[1])
L, d, H, T, B, V, steps, warmup = (int(a) for a in sys.argv[2:10])
peak = float(sys.argv[10])

import torch
import torch.nn as nn
import torch.nn.functional as F
if not torch.cuda.is_available():
    print("no GPU"); sys.exit(0)
if mode == "fp8" and not (hasattr(torch, "_scaled_mm") and hasattr(torch, "float8_e4m3fn")):
    print("fp8: this PyTorch (%s) has no torch._scaled_mm / float8 dtypes" % torch.__version__); sys.exit(0)
dev = "cuda"
torch.manual_seed(0)
E4M3, E5M2 = (torch.float8_e4m3fn, torch.float8_e5m2) if mode == "fp8" else (None, None)

def to_fp8(t, dtype):
    """Dynamic per-tensor scaling: scale = fmt_max / amax (amax floored at 1e-12), saturating cast."""
    fmax = torch.finfo(dtype).max
    amax = t.detach().abs().max().float().clamp(min=1e-12)
    scale = fmax / amax
    q = (t.float() * scale).clamp(-fmax, fmax).to(dtype)
    return q, scale.reciprocal()

def scaled_mm(a, b, sa, sb, fast):
    """a [M, K] row-major, b [K, N] column-major (the transpose of a contiguous [N, K]); bf16 out."""
    r = torch._scaled_mm(a, b, scale_a=sa, scale_b=sb, out_dtype=torch.bfloat16, use_fast_accum=fast)
    return r[0] if isinstance(r, tuple) else r

class FP8Matmul(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, w):
        x2 = x.reshape(-1, x.shape[-1])
        xq, sx = to_fp8(x2, E4M3)
        wq, sw = to_fp8(w, E4M3)
        y = scaled_mm(xq, wq.t(), sx, sw, True)
        ctx.save_for_backward(xq, wq, sx, sw)
        ctx.xshape = x.shape
        return y.reshape(*x.shape[:-1], w.shape[0])

    @staticmethod
    def backward(ctx, g):
        xq, wq, sx, sw = ctx.saved_tensors
        g2 = g.reshape(-1, g.shape[-1])
        gq, sg = to_fp8(g2, E5M2)
        dx = scaled_mm(gq, wq.t().contiguous().t(), sg, sw, False)                 # dY·W
        dw = scaled_mm(gq.t().contiguous(), xq.t().contiguous().t(), sg, sx, False)  # dYᵀ·X
        return dx.reshape(ctx.xshape), dw.float()

class Linear(nn.Linear):
    def forward(self, x):
        if mode != "fp8":
            return super().forward(x)
        y = FP8Matmul.apply(x, self.weight)
        return y + self.bias.to(y.dtype) if self.bias is not None else y

class Block(nn.Module):
    def __init__(s):
        super().__init__()
        s.ln1, s.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        s.qkv, s.proj = Linear(d, 3 * d), Linear(d, d)
        s.fc, s.out = Linear(d, 4 * d), Linear(4 * d, d)
    def forward(s, x):
        Bx, Tx, C = x.shape
        q, k, v = s.qkv(s.ln1(x)).split(C, dim=2)
        q, k, v = [t.view(Bx, Tx, H, C // H).transpose(1, 2) for t in (q, k, v)]
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + s.proj(a.transpose(1, 2).reshape(Bx, Tx, C))
        return x + s.out(F.gelu(s.fc(s.ln2(x)), approximate="tanh"))

class GPT(nn.Module):
    def __init__(s):
        super().__init__()
        s.wte, s.wpe = nn.Embedding(V, d), nn.Embedding(T, d)
        s.blocks = nn.Sequential(*[Block() for _ in range(L)])
        s.ln_f = nn.LayerNorm(d)
    def forward(s, idx):
        x = s.wte(idx) + s.wpe(torch.arange(idx.shape[1], device=idx.device))
        return F.linear(s.ln_f(s.blocks(x)), s.wte.weight)

model = GPT().to(dev)
opt = torch.optim.AdamW(model.parameters(), lr=3e-4, fused=True)
fwd = torch.compile(model) if how else model
ids = torch.randint(0, V, (B, T + 1), device=dev)
x, y = ids[:, :T], ids[:, 1:]
def step():
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = F.cross_entropy(fwd(x).float().view(B * T, V), y.reshape(B * T))
    opt.zero_grad(set_to_none=True); loss.backward(); opt.step()
for _ in range(warmup): step()
torch.cuda.synchronize()
torch.cuda.reset_peak_memory_stats()
t0 = time.perf_counter()
for _ in range(steps): step()
torch.cuda.synchronize()
ms = (time.perf_counter() - t0) / steps * 1000
params = sum(p.numel() for p in model.parameters()) - T * d
tokens = B * T
flops = tokens * (6 * params + 12 * L * d * T)
print("model=gpt mode=%s ms_per_step=%.2f steps=%d params=%d tokens_per_s=%.0f tflops=%.1f mfu=%.1f%% gpu_peak_gib=%.2f torch=%s"
      % (sys.argv[1], ms, steps, params, tokens / (ms / 1000), flops / (ms / 1000) / 1e12,
         100 * flops / (ms / 1000) / (peak * 1e12), torch.cuda.max_memory_allocated() / 2 ** 30, torch.__version__))
