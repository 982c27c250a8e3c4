#!/usr/bin/env python3
"""gen_convcl.py — writes tests/data/convcl_torch.lua: what PyTorch 2.x's F.conv2d on the CPU gives for channels_last
operands (torch's memory format: NHWC memory seen as [N, C, H, W]), forward and backward (the input's, weight's and
bias's gradients of the output weighted by a fixed contiguous tensor): each tensor's bits as a string of hex digits
(four a bf16 value, eight an fp32 one) and the strides of the result and of the input's gradient (torch's layout rule:
a channels_last result where the input or the weight is channels_last by suggest_memory_format), for
tests/spec/convcl_spec.lua. The operands are gen_convbf16.py's formula, v(i, seed) = ((7919·i + 104729·seed) mod 251
− 125) / 64 over the flat (NCHW) index i from 0: multiples of 1/64 under 2, exact in bf16, whose sums are exact in
fp32 in any order, so every correct route gives the same bits. Run from the repository root with a PyTorch 2.x:
    /opt/torch2/bin/python3 scripts/gen_convcl.py"""

import torch
import torch.nn.functional as F
from torch_fixture import write


def v(shape, seed, dt):
    n = 1
    for s in shape:
        n *= s
    vals = [((7919 * i + 104729 * seed) % 251 - 125) / 64 for i in range(n)]
    return torch.tensor(vals, dtype=torch.float64).reshape(shape).to(dt)


def hexbits(t):
    """t's values as one string of their bits in flat (logical, NCHW) order"""
    t = t.detach().contiguous()
    if t.dtype == torch.bfloat16:
        return '"' + "".join("%04x" % (b & 0xFFFF) for b in t.view(torch.int16).reshape(-1).tolist()) + '"'
    return '"' + "".join("%08x" % (b & 0xFFFFFFFF) for b in t.view(torch.int32).reshape(-1).tolist()) + '"'


def lua_list(xs):
    return "{ " + ", ".join(str(x) for x in xs) + " }"


# name: x shape, w shape, bias, stride, padding, dilation, groups, dtype, layouts ("x": the input channels_last,
# "w": the weight, "xw": both)
CASES = {
    "k3_bias_bf16": ([1, 16, 4, 4], [16, 16, 3, 3], True, 1, 1, 1, 1, "bf16", "x"),
    "first3_bias_bf16": ([2, 3, 6, 6], [16, 3, 3, 3], True, 1, 1, 1, 1, "bf16", "x"),
    "first3_k7s2_bf16": ([1, 3, 10, 10], [16, 3, 7, 7], False, 2, 3, 1, 1, "bf16", "x"),
    "k1_bf16": ([2, 16, 4, 4], [16, 16, 1, 1], False, 1, 0, 1, 1, "bf16", "x"),
    "k1s2_bf16": ([1, 16, 6, 6], [16, 16, 1, 1], False, 2, 0, 1, 1, "bf16", "x"),
    "k3s4_bf16": ([1, 16, 9, 9], [16, 16, 3, 3], False, 4, 1, 1, 1, "bf16", "x"),
    "groups4_bf16": ([1, 32, 4, 4], [32, 8, 3, 3], False, 1, 1, 1, 4, "bf16", "x"),
    "k3_bias_fp32": ([1, 16, 5, 5], [16, 16, 3, 3], True, 1, 1, 1, 1, "fp32", "x"),
    "k3s2_dil_fp32": ([1, 16, 7, 7], [16, 16, 3, 3], False, 2, 2, 2, 1, "fp32", "x"),
    "first3_fp32": ([2, 3, 6, 6], [16, 3, 3, 3], True, 1, 1, 1, 1, "fp32", "x"),
    "k1_bias_fp32": ([2, 16, 4, 4], [16, 16, 1, 1], True, 1, 0, 1, 1, "fp32", "x"),
    "c1_fp32": ([2, 1, 5, 5], [8, 1, 3, 3], False, 1, 1, 1, 1, "fp32", "x"),
    "wcl_fp32": ([1, 16, 4, 4], [16, 16, 3, 3], False, 1, 1, 1, 1, "fp32", "w"),
    "xwcl_bf16": ([1, 16, 4, 4], [16, 16, 3, 3], True, 1, 1, 1, 1, "bf16", "xw"),
}


def main():
    out = {}
    for name, (xs, ws, has_b, s, p, d, g, dts, lay) in CASES.items():
        dt = {"bf16": torch.bfloat16, "fp32": torch.float32}[dts]
        x, w = v(xs, 1, dt), v(ws, 2, dt)
        # NHWC memory seen as NCHW, made as the spec makes it (x:permute(1, 3, 4, 2):contiguous():permute(1, 4, 2, 3));
        # torch's .contiguous(memory_format=torch.channels_last) would keep a 1-channel tensor's NCHW strides
        if "x" in lay:
            x = x.permute(0, 2, 3, 1).contiguous().permute(0, 3, 1, 2)
        if "w" in lay:
            w = w.permute(0, 2, 3, 1).contiguous().permute(0, 3, 1, 2)
        x.requires_grad_()
        w.requires_grad_()
        b = v([ws[0]], 3, dt).requires_grad_() if has_b else None
        y = F.conv2d(x, w, b, stride=s, padding=p, dilation=d, groups=g)
        gy = v(list(y.shape), 4, dt)
        y.backward(gy)
        parts = ["y = %s" % hexbits(y), "dx = %s" % hexbits(x.grad), "dw = %s" % hexbits(w.grad)]
        if has_b:
            parts.append("db = %s" % hexbits(b.grad))
        parts.append("y_stride = %s" % lua_list(y.stride()))
        parts.append("dx_stride = %s" % lua_list(x.grad.stride()))
        parts.append("x_stride = %s" % lua_list(x.stride()))
        out[name] = "{\n    " + ",\n    ".join(parts) + "\n  }"
    write("tests/data/convcl_torch.lua", "scripts/gen_convcl.py", torch.__version__, out)


if __name__ == "__main__":
    main()
