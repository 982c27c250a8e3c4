# bench_clkeep_torch.py REPS DTYPE LAYOUT: torch 2.x for scripts/bench_clkeep.lua's rows (one thread, process CPU time, fastest of REPS)
import sys, time, torch
import torch.nn.functional as F
torch.set_num_threads(1)
if len(sys.argv) != 4 or not sys.argv[1].isdigit() or int(sys.argv[1]) < 1 or sys.argv[2] not in ("fp32", "bf16") \
        or sys.argv[3] not in ("cl", "nchw"):
    sys.exit("usage: bench_clkeep_torch.py REPS(>= 1) fp32|bf16 cl|nchw")
reps, dts, lay = int(sys.argv[1]), sys.argv[2], sys.argv[3]
dt = {"fp32": torch.float32, "bf16": torch.bfloat16}[dts]
mf = torch.channels_last if lay == "cl" else torch.contiguous_format
torch.manual_seed(1)
def mk(*s): return torch.randn(*s).to(dt).contiguous(memory_format=mf)
x, y = mk(32, 128, 32, 32), mk(32, 128, 32, 32)
def best(f):
    f()
    b = 1e9
    for _ in range(reps):
        t0 = time.process_time(); f(); b = min(b, time.process_time() - t0)
    return b * 1000
other = torch.bfloat16 if dt == torch.float32 else torch.float32
oname = "bf16" if dt == torch.float32 else "fp32"
rows = [("relu", lambda: x.relu()), ("add", lambda: x + y), ("mul", lambda: x * y), ("gelu", lambda: F.gelu(x)),
        ("silu", lambda: F.silu(x)), ("to_" + oname, lambda: x.to(other)), ("sum", lambda: x.sum()),
        ("amax", lambda: x.amax())]
for n, f in rows: print("%s %.3f" % (n, best(f)))
w = [(mk(32, 3, 3, 3) * 0.2), (mk(64, 32, 3, 3) * 0.05), (mk(64, 64, 3, 3) * 0.04)]
w = [t.detach().float().requires_grad_() for t in w]
opt = torch.optim.SGD(w, lr=1e-3)
xi = mk(16, 3, 32, 32)
def step():
    h = xi
    for i in range(3): h = F.conv2d(h, w[i].to(dt), None, padding=1).relu()
    h.float().mean().backward()
    opt.step(); opt.zero_grad()
print("cnn_step %.3f" % best(step))
