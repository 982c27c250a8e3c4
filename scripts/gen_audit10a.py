#!/usr/bin/env python3
"""gen_audit10a.py — prints the PyTorch 2.15 values tests/spec/audit10a_spec.lua holds as literals (training loops
stepped against torch's; docs/robustness.md, stop 94). Run from the repository root with a PyTorch 2.x:
    /opt/torch2/bin/python scripts/gen_audit10a.py"""
import torch
from torch.optim.lr_scheduler import ReduceLROnPlateau


def plateau_added_group():
    # ReduceLROnPlateau(min_lr=0.02, patience=1, factor=0.5) on SGD groups of lr 0.1 and 0.3; a third group of lr 0.2
    # added before the sixth step; the metrics below; each step's lrs
    ms = [1.0, 0.9, 0.95, 0.91, 0.92, 0.93, 0.5, 0.6, 0.6, 0.6, 0.6, 0.6, 0.6, 0.6]
    a, b, c = [torch.nn.Parameter(torch.zeros(1)) for _ in range(3)]
    o = torch.optim.SGD([{"params": [a]}, {"params": [b], "lr": 0.3}], lr=0.1)
    s = ReduceLROnPlateau(o, patience=1, factor=0.5, min_lr=0.02)
    rows = []
    for i, m in enumerate(ms):
        if i == 5:
            o.add_param_group({"params": [c], "lr": 0.2})
        s.step(m)
        rows.append([g["lr"] for g in o.param_groups])
    print("plateau_added_group =", rows)
    # min_lr as a list: torch's step that reduces raises once a group was added
    o = torch.optim.SGD([{"params": [a]}], lr=0.1)
    s = ReduceLROnPlateau(o, patience=0, min_lr=[0.01])
    s.step(1.0)
    o.add_param_group({"params": [b], "lr": 0.2})
    try:
        s.step(2.0)
        print("plateau_list: no error")
    except RuntimeError as e:
        print("plateau_list:", e)


def chainable_added_group():
    # a group of lr 0.2 added before the fourth step to an SGD(lr=0.1) stepped by a chainable schedule: torch scales
    # its lr by the later steps' factors alone; the lrs of both groups after each of nine steps
    from torch.optim import lr_scheduler as S
    mks = [("step", lambda o: S.StepLR(o, 2, 0.5)), ("exp", lambda o: S.ExponentialLR(o, 0.9)),
           ("multistep", lambda o: S.MultiStepLR(o, [3, 6], 0.5)), ("linear", lambda o: S.LinearLR(o, 0.2, 1.0, 6)),
           ("poly", lambda o: S.PolynomialLR(o, 8, 1.0)), ("const", lambda o: S.ConstantLR(o, 0.5, 5)),
           ("chain", lambda o: S.ChainedScheduler([S.ConstantLR(o, 0.5, 4), S.ExponentialLR(o, 0.9),
                                                   S.StepLR(o, 3, 0.5)]))]
    for name, mk in mks:
        a, b = torch.nn.Parameter(torch.zeros(1)), torch.nn.Parameter(torch.zeros(1))
        o = torch.optim.SGD([a], lr=0.1)
        s = mk(o)
        rows = []
        for t in range(9):
            if t == 3:
                o.add_param_group({"params": [b], "lr": 0.2})
            o.step()
            s.step()
            rows.append([g["lr"] for g in o.param_groups])
        print("chainable_added_group", name, "=", rows)


plateau_added_group()
chainable_added_group()
