#!/usr/bin/env python3
"""gen_audit11b.py — prints the PyTorch 2.15 values tests/spec/audit11b_spec.lua holds as literals (stop 95; docs/
robustness.md, "The gaps stop 94 left, and torch's in-place forms (stop 95)"). Run with a PyTorch 2.x:
    /opt/torch2/bin/python scripts/gen_audit11b.py"""
import torch
from torch.optim import lr_scheduler as S


def cyclic_loaded_base_lrs():
    # CyclicLR(base_lr=0.01, max_lr=0.1, step_size_up=4) on SGD, two groups, stepped 3 times; its state_dict with
    # base_lrs written by hand ([0.05, 0.0]) loaded into a new one: torch's get_lr reads base_lrs; the lrs after each
    # of the next 6 steps
    def make():
        o = torch.optim.SGD([{"params": [torch.nn.Parameter(torch.zeros(1))]},
                             {"params": [torch.nn.Parameter(torch.zeros(1))]}], lr=0.1)
        return o, S.CyclicLR(o, base_lr=0.01, max_lr=[0.1, 0.2], step_size_up=4, cycle_momentum=False)
    o, s = make()
    for _ in range(3):
        o.step()
        s.step()
    sd = s.state_dict()
    sd["base_lrs"] = [0.05, 0.0]
    o2, s2 = make()
    s2.load_state_dict(sd)
    rows = []
    for _ in range(6):
        o2.step()
        s2.step()
        rows.append([round(g["lr"], 12) for g in o2.param_groups])
    print("cyclic_loaded =", rows)


def hypot_grads():
    # torch.hypot's value and gradients (x/h, y/h) at subnormal, tiny, huge, zero and infinite operands
    inf, nan = float("inf"), float("nan")
    pairs = [(3e-40, 4e-40), (1e-45, 1e-45), (1e-45, 1e-30), (1e-30, 1e-30), (3.0, 4.0), (0.0, -2.0), (1e38, 1e38),
             (3e38, 1.0), (1e20, 1e-20), (-3e-40, 4e-40), (1e-45, 0.0), (inf, 1.0), (1.0, -inf), (inf, inf), (nan, 1.0),
             (nan, inf), (3e38, 3e38), (0.0, 0.0)]
    a = torch.tensor([p[0] for p in pairs], requires_grad=True)
    b = torch.tensor([p[1] for p in pairs], requires_grad=True)
    h = torch.hypot(a, b)
    h.sum().backward()
    for i, p in enumerate(pairs):
        print("hypot", p, "=", repr(h[i].item()), repr(a.grad[i].item()), repr(b.grad[i].item()))


cyclic_loaded_base_lrs()
hypot_grads()
