#!/usr/bin/env python3
"""gen_sweep108.py — the values tests/spec/sweep108_spec.lua checks against PyTorch 2.15: renorm of bf16 and fp16
tensors (torch takes the norms in fp32, its accumulate type, and rounds the factor to the tensor's dtype), each value
exact as a double; and CosineAnnealingWarmRestarts with a T_mult whose cycle length passes 2^63 (the lrs, T_i and
T_cur of its first steps).
Run: /opt/torch2/bin/python scripts/gen_sweep108.py   (prints Lua literals, pasted into the spec)."""
import warnings
import torch

warnings.filterwarnings("ignore")


def values(t):   # a bf16/fp16 tensor's values, each exact as a double (repr gives it back)
    return "{" + ", ".join(repr(v) for v in t.float().reshape(-1).tolist()) + "}"


def main():
    print("-- torch " + torch.__version__)
    cases = [
        ("fp16 [60000, 60000] / [1, 1], p = 3, maxnorm 1", torch.float16, [[60000.0, 60000.0], [1.0, 1.0]], 3, 1.0),
        ("fp16 [40000, 40000] / [1, 1], p = 2, maxnorm 1", torch.float16, [[40000.0, 40000.0], [1.0, 1.0]], 2, 1.0),
        ("bf16 [1, 1] / [2, 2], p = 3, maxnorm 1", torch.bfloat16, [[1.0, 1.0], [2.0, 2.0]], 3, 1.0),
        ("bf16 [1, 3] / [0.5, 0.25], p = 2, maxnorm 2", torch.bfloat16, [[1.0, 3.0], [0.5, 0.25]], 2, 2.0),
    ]
    for name, dt, rows, p, maxnorm in cases:
        r = torch.tensor(rows).to(dt).renorm(p, 0, maxnorm)
        print("-- " + name)
        print(values(r))
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=0.1)
    s = torch.optim.lr_scheduler.CosineAnnealingWarmRestarts(opt, T_0=2, T_mult=2 ** 62)
    out = []
    for _ in range(3):
        opt.step()
        s.step()
        out.append((s.get_last_lr()[0], s.T_i, s.T_cur))
    print("-- CosineAnnealingWarmRestarts(T_0=2, T_mult=2^62): lr, T_i, T_cur after steps 1-3")
    print(out)


if __name__ == "__main__":
    main()
