#!/usr/bin/env python3
"""gen_audit10a.py — prints the PyTorch 2.15 values tests/spec/audit10a_spec.lua holds as literals (training loops
stepped against torch's; docs/robustness.md, stop 94), and writes tests/data/audit10a_loops_torch.lua: a small MLP
(Linear(4, 3), tanh, Linear(3, 2), weights and data from sines and cosines, MSE loss) trained 12 steps by each
optimizer configuration of LOOPS, with two parameter groups, and some of: a bias without a gradient at steps 3 and 4,
the optimizer rebuilt from its state_dict after step 5, the second group added at step 2, zero_grad(False); each
step's loss and the parameters after the last step. Run from the repository root with a PyTorch 2.x:
    /opt/torch2/bin/python scripts/gen_audit10a.py"""
import math
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
    # a group of lr 0.2 added before the fourth step (added_at: another) to an SGD(lr=0.1) stepped by a chainable
    # schedule (or a SequentialLR running one then): torch scales its lr by the later steps' factors alone; the lrs of both groups
    # after each of nine steps
    from torch.optim import lr_scheduler as S
    mks = [("step", lambda o: S.StepLR(o, 2, 0.5)), ("exp", lambda o: S.ExponentialLR(o, 0.9)),
           ("multistep", lambda o: S.MultiStepLR(o, [3, 6], 0.5)), ("linear", lambda o: S.LinearLR(o, 0.2, 1.0, 6)),
           ("poly", lambda o: S.PolynomialLR(o, 8, 1.0)), ("const", lambda o: S.ConstantLR(o, 0.5, 5)),
           ("chain", lambda o: S.ChainedScheduler([S.ConstantLR(o, 0.5, 4), S.ExponentialLR(o, 0.9),
                                                   S.StepLR(o, 3, 0.5)])),
           ("seq", lambda o: S.SequentialLR(o, [S.LinearLR(o, 0.5, 1.0, 3), S.ExponentialLR(o, 0.9)], milestones=[3])),
           ("seq_cos_step", lambda o: S.SequentialLR(o, [S.CosineAnnealingLR(o, 3), S.StepLR(o, 2, 0.5)],
                                                     milestones=[3]))]
    added_at = {"seq": 5, "seq_cos_step": 5}   # within the second schedule (torch's fail on one added before)
    for name, mk in mks:
        a, b = torch.nn.Parameter(torch.zeros(1)), torch.nn.Parameter(torch.zeros(1))
        o = torch.optim.SGD([a], lr=0.1)
        s = mk(o)
        rows = []
        for t in range(9):
            if t == added_at.get(name, 3):
                o.add_param_group({"params": [b], "lr": 0.2})
            o.step()
            s.step()
            rows.append([g["lr"] for g in o.param_groups])
        print("chainable_added_group", name, "=", rows)


# name, optimizer, its options, group 1's, group 2's, events (tests/spec/audit10a_spec.lua runs the same)
LOOPS = [
    ("sgd_mom", "SGD", {"lr": 0.1, "momentum": 0.9, "dampening": 0.1, "weight_decay": 0.01}, {},
     {"lr": 0.05, "weight_decay": 0.0}, ["nograd", "reload"]),
    ("sgd_nest", "SGD", {"lr": 0.1, "momentum": 0.9, "nesterov": True, "weight_decay": 0.02}, {}, {"lr": 0.03},
     ["addgroup", "reload"]),
    ("sgd_max", "SGD", {"lr": 0.05, "momentum": 0.5, "maximize": True}, {}, {}, ["zero_false"]),
    ("adam", "Adam", {"lr": 0.01}, {"weight_decay": 0.1}, {"lr": 0.02, "amsgrad": True}, ["nograd", "reload"]),
    ("adam_dec", "Adam", {"lr": 0.01, "decoupled_weight_decay": True, "weight_decay": 0.1, "betas": [0.8, 0.9]}, {},
     {"maximize": True}, ["addgroup"]),
    ("adamw_ams", "AdamW", {"lr": 0.01, "amsgrad": True, "weight_decay": 0.05}, {"maximize": True}, {"eps": 1e-3},
     ["reload", "addgroup"]),
    ("rms_cm", "RMSprop", {"lr": 0.01, "centered": True, "momentum": 0.8, "weight_decay": 0.01}, {},
     {"centered": False}, ["reload", "addgroup"]),
    ("adagrad", "Adagrad", {"lr": 0.1, "lr_decay": 0.05, "initial_accumulator_value": 0.1}, {},
     {"lr": 0.05, "weight_decay": 0.1}, ["nograd", "reload"]),
    ("adadelta", "Adadelta", {"lr": 1.0, "maximize": True}, {}, {"rho": 0.8, "weight_decay": 0.1},
     ["nograd", "reload"]),
    ("adamax", "Adamax", {"lr": 0.01}, {"weight_decay": 0.1}, {"lr": 0.02, "betas": [0.5, 0.9]}, ["nograd", "reload"]),
    ("nadam", "NAdam", {"lr": 0.01, "momentum_decay": 0.01}, {"weight_decay": 0.1},
     {"decoupled_weight_decay": True, "weight_decay": 0.2}, ["nograd", "reload"]),
    ("radam", "RAdam", {"lr": 0.01, "maximize": True}, {"weight_decay": 0.1},
     {"decoupled_weight_decay": True, "weight_decay": 0.2}, ["addgroup", "reload"]),
]
STEPS = 12


def init(t, seed):
    with torch.no_grad():
        t.copy_(torch.tensor([0.5 * math.sin(seed + 1.3 * k) for k in range(t.numel())],
                             dtype=torch.float64).float().view_as(t))


def data(step, n=6):
    x = [[math.cos(0.7 * (i + step * n) + 0.3 * j) for j in range(4)] for i in range(n)]
    y = [[math.sin(0.5 * (i + step * n) - 0.2 * j) for j in range(2)] for i in range(n)]
    return torch.tensor(x, dtype=torch.float64).float(), torch.tensor(y, dtype=torch.float64).float()


def loops():
    l1, l2 = torch.nn.Linear(4, 3), torch.nn.Linear(3, 2)
    out = ["-- generated by scripts/gen_audit10a.py with PyTorch %s; do not edit" % torch.__version__.split("+")[0],
           "return {"]
    for name, cls, d, g1, g2, ev in LOOPS:
        init(l1.weight, 1), init(l1.bias, 2), init(l2.weight, 3), init(l2.bias, 4)
        params = [l1.weight, l1.bias, l2.weight, l2.bias]
        for p in params:
            p.grad = None

        def make(add):
            groups = [dict(params=params[:2], **g1)] + ([] if add else [dict(params=params[2:], **g2)])
            kw = {k: tuple(v) if isinstance(v, list) else v for k, v in d.items()}
            for g in groups:
                if "betas" in g:
                    g["betas"] = tuple(g["betas"])
            return getattr(torch.optim, cls)(groups, **kw)
        add = "addgroup" in ev
        opt = make(add)
        losses = []
        for s in range(STEPS):
            if add and s == 2:
                g = dict(params=params[2:], **g2)
                if "betas" in g:
                    g["betas"] = tuple(g["betas"])
                opt.add_param_group(g)
            if add and s < 2:
                l2.weight.grad = l2.bias.grad = None
            x, y = data(s)
            loss = torch.nn.functional.mse_loss(l2(torch.tanh(l1(x))), y)
            opt.zero_grad(set_to_none="zero_false" not in ev)
            loss.backward()
            if "nograd" in ev and s in (3, 4):
                l2.bias.grad = None
            opt.step()
            if "reload" in ev and s == 5:
                sd = opt.state_dict()
                opt = make(False)
                opt.load_state_dict(sd)
            losses.append(loss.item())
        final = [v for p in params for v in p.detach().flatten().tolist()]
        out.append("  %s = { loss = { %s }," % (name, ", ".join("%.9g" % v for v in losses)))
        out.append("    params = { %s } }," % ", ".join("%.9g" % v for v in final))
    out.append("}")
    with open("tests/data/audit10a_loops_torch.lua", "w") as f:
        f.write("\n".join(out) + "\n")


def setting_written():
    # torch reads a scheduler's settings at every step: StepLR(opt, 2, 0.5), gamma = 0.1 after one step
    from torch.optim import lr_scheduler as S
    o = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1, momentum=0.9)
    s = S.StepLR(o, 2, 0.5)
    o.step()
    s.step()
    s.gamma = 0.1
    o.step()
    s.step()
    print("setting_written: the lr at step 2 is", o.param_groups[0]["lr"])


plateau_added_group()
setting_written()
chainable_added_group()
loops()
