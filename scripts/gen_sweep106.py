#!/usr/bin/env python3
"""gen_sweep106.py — the values tests/spec/sweep106_spec.lua checks against PyTorch 2.15's ReduceLROnPlateau:
the lr after each step(metric) for metric sequences with NaN and infinities, in each mode and threshold_mode, and
the lrs of a scheduler resumed from a state_dict taken after a metric of -inf (mode "min") or +inf (mode "max").
Run: /opt/torch2/bin/python scripts/gen_sweep106.py   (prints Lua literals, pasted into the spec)."""
import math
import torch

METRICS = [5.0, float("nan"), 4.0, float("inf"), 3.0, -float("inf"), 2.0, float("nan"), 1.0, 0.5, 0.25, 9.0]


def lua(v):
    if isinstance(v, float) and math.isnan(v):
        return "0/0"
    if v == float("inf"):
        return "math.huge"
    if v == -float("inf"):
        return "-math.huge"
    return repr(float(v))


def sched(mode, tmode, **kw):
    p = torch.nn.Parameter(torch.zeros(1))
    opt = torch.optim.SGD([p], lr=1.0)
    return opt, torch.optim.lr_scheduler.ReduceLROnPlateau(opt, mode=mode, threshold_mode=tmode, **kw)


def main():
    print("-- torch " + torch.__version__)
    print("local METRICS = {" + ", ".join(lua(m) for m in METRICS) + "}")
    print("local TORCH_LRS = {")
    for mode in ("min", "max"):
        for tmode in ("rel", "abs"):
            opt, s = sched(mode, tmode, patience=1, cooldown=1, factor=0.5, threshold=0.1)
            lrs = []
            for m in METRICS:
                s.step(m)
                lrs.append(opt.param_groups[0]["lr"])
            print("  %s_%s = {%s}," % (mode, tmode, ", ".join(lua(v) for v in lrs)))
    print("}")
    # resumed after the other infinity: the state_dict carries best = -inf (min) / +inf (max)
    print("local TORCH_RESUMED = {")
    for mode, m in (("min", -float("inf")), ("max", float("inf"))):
        opt, s = sched(mode, "rel", patience=1, factor=0.5)
        s.step(1.0)
        s.step(m)
        sd = s.state_dict()
        opt2, s2 = sched(mode, "rel", patience=1, factor=0.5)
        s2.load_state_dict(sd)
        lrs = []
        for x in (1.0, 2.0, 3.0, 4.0):
            s2.step(x)
            lrs.append(opt2.param_groups[0]["lr"])
        print("  %s = {best = %s, lrs = {%s}}," % (mode, lua(sd["best"]), ", ".join(lua(v) for v in lrs)))
    print("}")


if __name__ == "__main__":
    main()
