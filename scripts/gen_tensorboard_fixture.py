#!/usr/bin/env python3
"""gen_tensorboard_fixture.py — writes tests/data/tensorboard/: event files that PyTorch 2.x's
torch.utils.tensorboard.SummaryWriter writes for fixed calls (add_scalar, add_text, add_scalars, add_histogram,
add_histogram_raw with fixed walltimes, add_hparams), for tests/spec/trackers_spec.lua to compare
fp8.SummaryWriter's records with, byte for byte (but the wall_time of the file_version event and of
add_hparams' events, which torch takes from the clock). Run from the repository root with a PyTorch 2.x and the
tensorboard package:
    /opt/torch2/bin/python3 scripts/gen_tensorboard_fixture.py"""
import glob
import os
import shutil

import torch

from torch.utils.tensorboard import SummaryWriter

OUT = "tests/data/tensorboard"
shutil.rmtree(OUT, ignore_errors=True)
w = SummaryWriter(OUT + "/run", filename_suffix=".fixture")
T = 1700000000.25
for i, v in enumerate([2.5, 1.25, 0.0, -0.0, 1e-30, 3.4e38, float("inf")]):
    w.add_scalar("train/loss", v, i, walltime=T + i)
w.add_scalar("no_step", 0.5, walltime=T)
w.add_scalar("big_step", 7.0, 2**40, walltime=T)
w.add_scalar("neg_step", 7.0, -3, walltime=T)
w.add_text("sample", "héllo\nworld", 5, walltime=T + 10)
w.add_scalars("lr", {"a": 0.1, "b": 0.25}, 3, walltime=T + 20)
# histograms (fp32 tensors, as fp8lab's; sums exact in float64, so numpy's summation order does not show)
H = [-1.5, -0.25, 0.0, 0.0, 0.125, 0.5, 0.5, 2.0, 3.75, 1e-13]
w.add_histogram("h/default", torch.tensor(H), 1, walltime=T + 30)
w.add_histogram("h/count", torch.arange(10.0), 2, bins=4, walltime=T + 31)
w.add_histogram("h/edges", torch.tensor([-1.0, 0.0, 0.5, 1.0, 3.0, 8.0, 9.0]), 3, bins=[0, 1, 2, 4, 8], walltime=T + 32)
w.add_histogram("h/max_bins", torch.tensor([1e-6, 1e-3, -1.0, 1.0, 1e3, 0.0]), 4, walltime=T + 33, max_bins=50)
w.add_histogram("h/single", torch.tensor([2.5]), 5, walltime=T + 34)
w.add_histogram("h/neg", torch.tensor([-3.0, -0.0, -2.0]), 6, bins=3, walltime=T + 35)
w.add_histogram_raw("h/raw", 0, 3, 4, 6, 14, [1, 2, 3], [1, 1, 2], 7, walltime=T + 36)
# sorted keys, as fp8lab writes them (a Lua table has no order)
w.add_hparams({"fp8": True, "layers": 4, "lr": 0.001, "opt": "adamw"}, {"hparam/loss": 1.5}, run_name="hp")
w.close()
for f in sorted(glob.glob(OUT + "/**/events.out.tfevents.*", recursive=True)):
    d = os.path.dirname(f)
    os.rename(f, os.path.join(d, "events.fixture"))
    print(os.path.join(d, "events.fixture"))
