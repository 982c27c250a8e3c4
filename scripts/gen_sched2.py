#!/usr/bin/env python3
"""gen_sched2.py — the values tests/spec/sched2_spec.lua checks fp8.optim.lr_scheduler against PyTorch 2.15 (CPU):
for each scheduler, the keys its state_dict() saves, its lrs over 6 steps, its state_dict after them (as a plain
table of its values: a Counter as a map of counts, None as nil), and the lrs of a fresh scheduler of the same
settings that loads that state, on an optimizer whose lr is the saved one (as optimizer.load_state_dict puts it
back), over 4 more steps (ReduceLROnPlateau: on the metrics METRICS). Also a MultiplicativeLR loaded at last_epoch
2^40 + 1 (torch steps on from the group's lr, calling the lambda once a step).
Run: /opt/torch2/bin/python scripts/gen_sched2.py > tests/spec/helpers/sched2_torch.lua"""
import collections
import math
import warnings

import torch
from torch.optim import SGD, lr_scheduler as L

warnings.filterwarnings("ignore")


def lua(v):
    if v is None:
        return "nil"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return '"' + v + '"'
    if isinstance(v, (list, tuple)):
        return "{ " + ", ".join(lua(e) for e in v) + " }"
    if isinstance(v, dict):   # (a Counter too: {[milestone] = count})
        items = sorted(v.items(), key=lambda kv: str(kv[0]))
        return "{ " + ", ".join(("%s = %s" if isinstance(k, str) else "[%s] = %s") % (k if isinstance(k, str)
                                 else lua(k), lua(x)) for k, x in items) + " }"
    if isinstance(v, int):
        return str(v)
    if math.isinf(v):
        return "INF" if v > 0 else "-INF"
    return repr(float(v))


def opt(lr=1.0):
    return SGD([torch.nn.Parameter(torch.zeros(1))], lr=lr, momentum=0.9)


MULT = lambda t: 0.5 + (t % 3) * 0.25   # noqa: E731 (the spec's function: 0.5, 0.75, 1.0, ...)
LAMB = lambda t: 1.0 / (t + 1)          # noqa: E731
CASES = [
    ("StepLR", lambda o: L.StepLR(o, 2, 0.5)),
    ("MultiStepLR", lambda o: L.MultiStepLR(o, [2, 4, 4], 0.5)),
    ("ConstantLR", lambda o: L.ConstantLR(o, 0.5, 3)),
    ("LinearLR", lambda o: L.LinearLR(o, 0.25, 1.0, 4)),
    ("ExponentialLR", lambda o: L.ExponentialLR(o, 0.9)),
    ("PolynomialLR", lambda o: L.PolynomialLR(o, 6, 2.0)),
    ("CosineAnnealingLR", lambda o: L.CosineAnnealingLR(o, 6, 0.1)),
    ("CosineAnnealingWarmRestarts", lambda o: L.CosineAnnealingWarmRestarts(o, 3, 2, 0.05)),
    ("OneCycleLR", lambda o: L.OneCycleLR(o, 1.0, total_steps=12)),
    ("CyclicLR", lambda o: L.CyclicLR(o, 0.1, 1.0, step_size_up=3)),
    ("LambdaLR", lambda o: L.LambdaLR(o, LAMB)),
    ("MultiplicativeLR", lambda o: L.MultiplicativeLR(o, MULT)),
    ("ChainedScheduler", lambda o: L.ChainedScheduler([L.StepLR(o, 2, 0.5), L.MultiplicativeLR(o, MULT)])),
    ("SequentialLR", lambda o: L.SequentialLR(o, [L.LinearLR(o, 0.5, 1.0, 2), L.MultiplicativeLR(o, MULT)], [3])),
    ("ReduceLROnPlateau", lambda o: L.ReduceLROnPlateau(o, factor=0.5, patience=1, cooldown=1)),
]
METRICS = [1.0, 0.9, 0.95, 0.95, 0.97, 0.8, 0.85, 0.9, 0.9, 0.9]   # (ReduceLROnPlateau's steps)
N, M = 6, 4


def state(s):
    sd = s.state_dict()
    out = {}
    for k, v in sd.items():
        if isinstance(v, collections.Counter):
            v = dict(v)
        out[k] = v
    return out


print("-- torch %s: /opt/torch2/bin/python scripts/gen_sched2.py > tests/spec/helpers/sched2_torch.lua" %
      torch.__version__)
print("local INF = math.huge")
print("return {")
for name, make in CASES:
    o = opt()
    s = make(o)
    lrs = [s.get_last_lr()[0]]
    plateau = name == "ReduceLROnPlateau"
    for t in range(N):
        o.step()
        s.step(METRICS[t]) if plateau else s.step()
        lrs.append(s.get_last_lr()[0])
    sd = state(s)
    keys = sorted(sd.keys())
    o2 = opt()
    s2 = make(o2)
    o2.param_groups[0]["lr"] = s.get_last_lr()[0]   # (optimizer.load_state_dict's)
    s2.load_state_dict(s.state_dict())
    after = [s2.get_last_lr()[0]]
    for t in range(M):
        o2.step()
        s2.step(METRICS[N + t]) if plateau else s2.step()
        after.append(s2.get_last_lr()[0])
    print("  %s = { keys = %s,\n    lrs = %s,\n    sd = %s,\n    resumed = %s }," % (name, lua(keys), lua(lrs),
                                                                                  lua(sd), lua(after)))
# MultiplicativeLR loaded at last_epoch 2^40 + 1 on a group of lr 0.4: no replay, the next step is 0.4 · MULT(2^40 + 2)
o = opt()
s = L.MultiplicativeLR(o, MULT)
o.param_groups[0]["lr"] = 0.4
sd = s.state_dict()
sd["last_epoch"] = 2 ** 40 + 1
s.load_state_dict(sd)
lrs = []
for _ in range(3):
    o.step()
    s.step()
    lrs.append(s.get_last_lr()[0])
print("  far = { last_epoch = %d, lrs = %s }," % (2 ** 40 + 1, lua(lrs)))
print("}")
