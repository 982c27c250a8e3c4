#!/usr/bin/env python3
"""gen_clnorm.py — writes tests/data/clnorm_torch.lua for tests/spec/clnorm_spec.lua (stop 103): what PyTorch 2.x gives
the norms (batch_norm in training and eval, group_norm, instance_norm, layer_norm), the poolings (max_pool2d,
avg_pool2d, adaptive_avg_pool2d, adaptive_max_pool2d) and dropout on a channels_last 4-D input (NHWC memory seen as
[N, C, H, W], made as the spec makes it: x.permute(0, 2, 3, 1).contiguous().permute(0, 3, 1, 2)), fp32 and bf16:
the result's strides and whether it is channels_last (is_contiguous(memory_format=torch.channels_last)), the strides
of the gradient a channels_last intermediate x (= leaf * 1, its hook's argument) receives from y.backward(gy) with a
channels_last gy, and the values of both (batch_norm's running
statistics after the training call too). Shapes: [2, 3, 4, 5] and torch's ambiguous ones, C = 1, H = W = 1, N = 1.
The inputs are fp32 values exact in bf16 (randn rounded), written into the fixture, so both dtypes start from the same
numbers. torch's rule: the norms and poolings allocate their result and input gradient in the input's
suggest_memory_format (c10's is_channels_last_strides_2d: an N111 shape reads as contiguous), dropout multiplies by
an empty_like mask (the input's exact strides). Run from the repository root with a PyTorch 2.x:
    /opt/torch2/bin/python3 scripts/gen_clnorm.py"""

import torch
import torch.nn.functional as F
from torch_fixture import write, lua_num


def lua_list(xs):
    return "{ " + ", ".join(str(x) for x in xs) + " }"


def flat(t):
    """values in NCHW order as one Lua list"""
    return "{ " + ", ".join(lua_num(v) for v in t.detach().double().contiguous().reshape(-1).tolist()) + " }"


def cl(t):
    return t.permute(0, 2, 3, 1).contiguous().permute(0, 3, 1, 2)


SHAPES = {"main": (2, 3, 4, 5), "c1": (2, 1, 4, 5), "hw1": (2, 3, 1, 1), "n1": (1, 3, 4, 5)}


def ops(C):
    w = torch.linspace(0.5, 1.5, C)
    b = torch.linspace(-0.25, 0.25, C)
    rm = torch.linspace(-0.1, 0.1, C)
    rv = torch.linspace(0.8, 1.2, C)
    return {
        # (op, whether it takes running statistics that it updates)
        "bn_train": lambda x, st: F.batch_norm(x, st[0], st[1], w, b, True, 0.1, 1e-5),
        "bn_eval": lambda x, st: F.batch_norm(x, rm, rv, w, b, False, 0.1, 1e-5),
        "gn1": lambda x, st: F.group_norm(x, 1, w, b, 1e-5),
        "gnc": lambda x, st: F.group_norm(x, C, w, b, 1e-5),
        "in": lambda x, st: F.instance_norm(x, None, None, w, b, True, 0.1, 1e-5),
        "ln_chw": lambda x, st: F.layer_norm(x, x.shape[1:], None, None, 1e-5),
        "ln_w": lambda x, st: F.layer_norm(x, x.shape[3:], None, None, 1e-5),
        "maxp": lambda x, st: F.max_pool2d(x, 3, 2, 1),
        "avgp": lambda x, st: F.avg_pool2d(x, 3, 2, 1),
        "aap": lambda x, st: F.adaptive_avg_pool2d(x, (2, 3)),
        "aap1": lambda x, st: F.adaptive_avg_pool2d(x, 1),
        "amp": lambda x, st: F.adaptive_max_pool2d(x, (2, 3)),
        "drop": lambda x, st: F.dropout(x, 0.5, True),
    }


def main():
    torch.manual_seed(0)
    out = {}
    for sname, shape in SHAPES.items():
        C = shape[1]
        x0 = torch.randn(shape).bfloat16().float()
        parts = ["shape = %s" % lua_list(shape), "x = %s" % flat(x0), "x_strides = %s" % lua_list(cl(x0).stride())]
        gys = {}
        for oname, op in ops(C).items():
            if oname == "in" and shape[2] * shape[3] == 1:
                continue   # torch refuses one position per instance in training (so does ours)
            for dname, dt in (("fp32", torch.float32), ("bf16", torch.bfloat16)):
                leaf = cl(x0.to(dt)).requires_grad_()
                x = leaf * 1   # an intermediate: its hook sees the gradient the op's backward hands on
                seen = {}
                x.register_hook(lambda g: seen.__setitem__("g", g))
                st = [torch.linspace(-0.1, 0.1, C), torch.linspace(0.8, 1.2, C)]
                y = op(x, st)
                if oname not in gys:   # one gy per op (fp32 values exact in bf16) for both dtypes
                    gys[oname] = torch.randn(y.shape).bfloat16().float()
                    parts.append("%s_gy = %s" % (oname, flat(gys[oname])))
                y.backward(cl(gys[oname].to(dt)))
                key = "%s_%s" % (oname, dname)
                parts.append("%s = { shape = %s, y = %s, cl = %s, dx = %s, y_v = %s, dx_v = %s%s }" % (
                    key, lua_list(y.shape), lua_list(y.stride()), str(y.is_contiguous(memory_format=torch.channels_last)).lower(),
                    lua_list(seen["g"].stride()), flat(y) if oname != "drop" else "{}",
                    flat(seen["g"]) if oname != "drop" else "{}",
                    ", rm = %s, rv = %s" % (flat(st[0]), flat(st[1])) if oname == "bn_train" else ""))
        out[sname] = "{\n    " + ",\n    ".join(parts) + "\n  }"
    write("tests/data/clnorm_torch.lua", "scripts/gen_clnorm.py", torch.__version__, out)


if __name__ == "__main__":
    main()
