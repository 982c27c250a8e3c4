#!/usr/bin/env python3
"""gen_review10b.py — prints the PyTorch 2.15 values tests/spec/review10b_spec.lua holds as literals (review 10b of
stop 94's scheduler changes; docs/robustness.md, "Review of stop 94's Lua changes (stop 94)"). Run with a PyTorch 2.x:
    /opt/torch2/bin/python scripts/gen_review10b.py"""
import torch
from torch.optim import lr_scheduler as S


def param():
    return torch.nn.Parameter(torch.zeros(1))


def added_past_end():
    # SGD(lr=0.1) stepped by a PolynomialLR or LinearLR that ends at 0 after 4 steps; a group of lr 0.2 added before
    # the sixth step: torch's forms return a group's lr unchanged past total_iters; the lrs after each of 8 steps
    for name, mk in [("poly", lambda o: S.PolynomialLR(o, 4, 1.0)), ("linear", lambda o: S.LinearLR(o, 1.0, 0.0, 4))]:
        o = torch.optim.SGD([param()], lr=0.1)
        s = mk(o)
        rows = []
        for t in range(8):
            if t == 5:
                o.add_param_group({"params": [param()], "lr": 0.2})
            o.step()
            s.step()
            rows.append([round(g["lr"], 12) for g in o.param_groups])
        print("added_past_end", name, "=", rows)
    # the same in a SequentialLR's second schedule: ExponentialLR(0.9), then PolynomialLR(3) from step 2; the group
    # added before the seventh step
    o = torch.optim.SGD([param()], lr=0.1)
    s = S.SequentialLR(o, [S.ExponentialLR(o, 0.9), S.PolynomialLR(o, 3)], milestones=[2])
    rows = []
    for t in range(10):
        if t == 6:
            o.add_param_group({"params": [param()], "lr": 0.2})
        o.step()
        s.step()
        rows.append([round(g["lr"], 12) for g in o.param_groups])
    print("added_past_end seq =", rows)
    # a ChainedScheduler of PolynomialLR(2) and ExponentialLR(0.5); the group added before the fourth step: the
    # ExponentialLR scales it alone
    o = torch.optim.SGD([param()], lr=0.1)
    s = S.ChainedScheduler([S.PolynomialLR(o, 2), S.ExponentialLR(o, 0.5)])
    rows = []
    for t in range(6):
        if t == 3:
            o.add_param_group({"params": [param()], "lr": 0.2})
        o.step()
        s.step()
        rows.append([round(g["lr"], 12) for g in o.param_groups])
    print("added_past_end chain =", rows)


def lambda_attribute():
    # a LambdaLR whose lambda reads an attribute the user set on the scheduler (LambdaLR has no total_steps)
    o = torch.optim.SGD([param()], lr=1.0)
    box = {}
    s = S.LambdaLR(o, lambda t: 1 - t / box["s"].total_steps if "s" in box else 1.0)
    box["s"] = s
    s.total_steps = 4
    lrs = []
    for _ in range(3):
        o.step()
        s.step()
        lrs.append(o.param_groups[0]["lr"])
    print("lambda_attribute =", lrs)
    # the settings torch's schedulers show
    st = S.StepLR(torch.optim.SGD([param()], lr=1.0), 2, 0.5)
    ca = S.CosineAnnealingLR(torch.optim.SGD([param()], lr=1.0), 10, 0.01)
    li = S.LinearLR(torch.optim.SGD([param()], lr=1.0), 0.25, 1.0, 3)
    po = S.PolynomialLR(torch.optim.SGD([param()], lr=1.0), 6, 2.0)
    print("shown =", [st.step_size, st.gamma, ca.T_max, ca.eta_min, li.start_factor, li.end_factor, li.total_iters,
                      po.total_iters, po.power])
    # CosineAnnealingWarmRestarts(T_0=3, T_mult=2)'s T_cur and T_i after each of 10 steps, then after step(2.5)
    s = S.CosineAnnealingWarmRestarts(torch.optim.SGD([param()], lr=1.0), 3, 2)
    r = [[s.T_cur, s.T_i]]
    for _ in range(10):
        s.optimizer.step()
        s.step()
        r.append([s.T_cur, s.T_i])
    s.step(2.5)
    r.append([s.T_cur, s.T_i])
    print("cycle =", r)


if __name__ == "__main__":
    added_past_end()
    lambda_attribute()
