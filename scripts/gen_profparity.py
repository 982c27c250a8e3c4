#!/usr/bin/env python3
"""gen_profparity.py — writes tests/data/profparity_torch.lua: what torch.profiler (PyTorch 2.x, on the CPU) does
that tests/spec/profparity_spec.lua holds fp8.profiler to. For each schedule (torch.profiler.schedule's wait, warmup,
active, repeat, skip_first, skip_first_wait; none at all) and runs of n steps (start(), a loop of n steps, each
step's work inside record_function("work<i>") then prof.step(), stop(); a second run starts the same profiler
again): every on_trace_ready call, in order, as {prof.step_num then, the "ProfilerStep#N" numbers of its Chrome
trace, the i of its "work<i>" ranges}. And with_flops' count for F.conv2d (aten::conv2d's flops) over geometries (stride, padding, dilation,
groups, a bias, a 1×1 kernel). Run from the repository root with a PyTorch 2.x:
    /opt/torch2/bin/python3 scripts/gen_profparity.py"""

import json
import os
import tempfile
import warnings

import torch
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, profile, record_function, schedule

from torch_fixture import write

warnings.filterwarnings("ignore")   # "Profiler won't be using warmup" for warmup=0

SCHEDULES = [  # (schedule, the steps of each run: start(), n steps, stop())
    (dict(wait=1, warmup=1, active=2, repeat=1), [6]),
    (dict(wait=1, warmup=1, active=2), [9]),
    (dict(wait=0, warmup=0, active=1), [3]),
    (dict(wait=0, warmup=1, active=1, repeat=2), [7]),
    (dict(wait=1, warmup=1, active=2, skip_first=2), [10]),
    (dict(wait=2, warmup=1, active=1, skip_first=1, skip_first_wait=1), [9]),
    (dict(wait=0, warmup=1, active=3), [2]),
    (dict(wait=3, warmup=1, active=1, repeat=1), [3]),
    (dict(wait=0, warmup=0, active=3, repeat=1), [0]),
    (None, [3]),
    # started again after stop(): torch's step_num and schedule go on
    (dict(wait=1, warmup=1, active=2, skip_first=1), [4, 4]),
    (dict(wait=0, warmup=1, active=2, repeat=1), [2, 3]),
    (dict(wait=1, warmup=0, active=1), [3, 2, 3]),
    (None, [2, 2]),
]

CONVS = [  # (input shape, weight shape, bias, stride, padding, dilation, groups)
    ((2, 3, 8, 8), (4, 3, 3, 3), False, 1, 0, 1, 1),
    ((2, 4, 8, 8), (6, 2, 3, 3), True, 2, 1, 1, 2),
    ((2, 4, 9, 7), (6, 4, 3, 2), False, (2, 1), (1, 0), (2, 1), 1),
    ((3, 5, 6, 6), (7, 5, 1, 1), True, 1, 0, 1, 1),
    ((1, 6, 10, 10), (6, 1, 3, 3), False, 1, 1, 1, 6),
]


def lua(v):
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, (tuple, list)):
        return "{" + ", ".join(lua(x) for x in v) + "}"
    if isinstance(v, dict):
        return "{" + ", ".join('["%s"] = %s' % (k, lua(v[k])) for k in sorted(v)) + "}"
    raise TypeError(v)


def calls_of(sched, runs):
    calls = []
    tmp = tempfile.mkdtemp()

    def ready(p):
        path = os.path.join(tmp, "t%d.json" % len(calls))
        p.export_chrome_trace(path)
        names = [e["name"] for e in json.load(open(path))["traceEvents"] if e.get("ph") == "X"]
        calls.append({"at": p.step_num,
                      "steps": sorted(int(x[13:]) for x in names if x.startswith("ProfilerStep#")),
                      "work": sorted(int(x[4:]) for x in names if x.startswith("work"))})

    kw = {} if sched is None else {"schedule": schedule(**sched)}
    p = profile(activities=[ProfilerActivity.CPU], on_trace_ready=ready, **kw)
    i = 0
    for n in runs:
        p.start()
        for _ in range(n):
            with record_function("work%d" % i):
                torch.ones(2) + 1
            p.step()
            i += 1
        p.stop()
    return calls


def conv_flops(xs, ws, bias, stride, padding, dilation, groups):
    x, w = torch.randn(*xs), torch.randn(*ws)
    b = torch.randn(ws[0]) if bias else None
    with profile(activities=[ProfilerActivity.CPU], with_flops=True) as p:
        F.conv2d(x, w, b, stride=stride, padding=padding, dilation=dilation, groups=groups)
    return int(sum(e.flops for e in p.key_averages() if e.key == "aten::conv2d"))


def main():
    torch.manual_seed(0)
    sched_rows = []
    for s, runs in SCHEDULES:
        sched_rows.append("{schedule = %s, runs = %s, calls = %s}" % ("nil" if s is None else lua(s), lua(runs),
                                                                       lua([[c["at"], c["steps"], c["work"]]
                                                                            for c in calls_of(s, runs)])))
    conv_rows = []
    for xs, ws, bias, st, pd, dl, g in CONVS:
        t = lambda v: v if isinstance(v, tuple) else (v, v)
        conv_rows.append("{x = %s, w = %s, bias = %s, stride = %s, padding = %s, dilation = %s, groups = %d, flops = %d}"
                         % (lua(xs), lua(ws), lua(bias), lua(t(st)), lua(t(pd)), lua(t(dl)), g,
                            conv_flops(xs, ws, bias, st, pd, dl, g)))
    write("tests/data/profparity_torch.lua", "scripts/gen_profparity.py", torch.__version__, {
        # each: the schedule_option, the steps of each run, on_trace_ready's calls as {step_num, steps, work}
        "schedules": "{\n    " + ",\n    ".join(sched_rows) + "}",
        "conv2d_flops": "{\n    " + ",\n    ".join(conv_rows) + "}",
    })


if __name__ == "__main__":
    main()
