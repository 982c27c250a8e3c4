#!/usr/bin/env python3
"""gen_grad_specials.py — writes tests/data/grad_specials_torch.lua: PyTorch 2.x's values and gradients of 64
pointwise ops (the unary math ops, the activations, pow with a number exponent or base, clamp, atan2, fmod, remainder,
maximum/minimum with 0, x·log x, dropout with p = 1) at 16 special points (NaN, ±inf, ±0, ±subnormal, ±3e38, 1e-30
and a few ordinary values), each gradient for three upstream gradients: 1, NaN and -0. tests/spec/grad_specials_spec.lua
compares fp8lab's with them; what differs on purpose is listed there with the reason.
Run from the repository root with a PyTorch 2.x:
    /opt/torch2/bin/python3 scripts/gen_grad_specials.py"""
import math

import torch
import torch.nn.functional as F
from torch_fixture import rows, write

XS = [math.nan, math.inf, -math.inf, 0.0, -0.0, 1e-40, -1e-40, 1.0, -1.0, 0.5, -0.5, 2.0, -2.0, 3e38, -3e38, 1e-30]
N = len(XS)
ONES, ZEROS = torch.ones(N), torch.zeros(N)
OPS = {
    "abs": torch.abs, "neg": torch.neg, "exp": torch.exp, "log": torch.log, "sqrt": torch.sqrt, "rsqrt": torch.rsqrt,
    "sin": torch.sin, "cos": torch.cos, "tan": torch.tan, "tanh": torch.tanh, "sigmoid": torch.sigmoid,
    "erf": torch.erf, "log1p": torch.log1p, "expm1": torch.expm1, "asin": torch.asin, "acos": torch.acos,
    "atan": torch.atan, "sinh": torch.sinh, "cosh": torch.cosh, "log2": torch.log2, "log10": torch.log10,
    "exp2": torch.exp2, "floor": torch.floor, "ceil": torch.ceil, "round": torch.round, "trunc": torch.trunc,
    "sign": torch.sign, "reciprocal": torch.reciprocal, "square": torch.square,
    "pow2": lambda t: t.pow(2), "pow05": lambda t: t.pow(0.5), "pow3": lambda t: t.pow(3),
    "powm1": lambda t: t.pow(-1), "pow0": lambda t: t.pow(0), "exp_scalar": lambda t: torch.pow(2, t),
    "zero_pow": lambda t: torch.pow(0, t),
    "clamp": lambda t: t.clamp(-1, 1), "relu": F.relu, "gelu": F.gelu,
    "gelu_tanh": lambda t: F.gelu(t, approximate="tanh"), "silu": F.silu, "softplus": F.softplus, "elu": F.elu,
    "leaky_relu": lambda t: F.leaky_relu(t, 0.01), "hardtanh": F.hardtanh, "mish": F.mish,
    "logsigmoid": F.logsigmoid, "softsign": F.softsign, "selu": F.selu, "celu": F.celu,
    "hardswish": F.hardswish, "hardsigmoid": F.hardsigmoid, "relu6": F.relu6, "tanhshrink": F.tanhshrink,
    "softshrink": F.softshrink, "hardshrink": F.hardshrink,
    "atan2y": lambda t: torch.atan2(t, ONES), "atan2x": lambda t: torch.atan2(ONES, t),
    "fmod": lambda t: torch.fmod(t, 1.5), "remainder": lambda t: torch.remainder(t, 1.5),
    "dropout1": lambda t: F.dropout(t, 1.0),
    "maximum0": lambda t: torch.maximum(t, ZEROS), "minimum0": lambda t: torch.minimum(t, ZEROS),
    "xlogx": lambda t: t * t.log(),
}
UPSTREAM = {"g1": torch.ones(N), "gnan": torch.full((N,), math.nan), "gnegzero": torch.full((N,), -0.0)}

out = {"xs": rows(torch.tensor(XS, dtype=torch.float64))}
for name, f in OPS.items():
    out[name] = rows(f(torch.tensor(XS)))
    for kind, g in UPSTREAM.items():
        x = torch.tensor(XS, requires_grad=True)
        f(x).backward(g)
        out[name + "_" + kind] = rows(x.grad)
write("tests/data/grad_specials_torch.lua", "scripts/gen_grad_specials.py", torch.__version__, out)
