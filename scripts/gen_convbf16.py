#!/usr/bin/env python3
"""gen_convbf16.py — writes tests/data/convbf16_torch.lua: what PyTorch 2.x's bf16 F.conv2d on the CPU (its mkldnn
route: the products summed in fp32, rounded to bf16 once) gives, forward and backward (the input's, weight's and
bias's gradients of the output weighted by a fixed tensor; each tensor's bf16 bits as a string of hex digits), for
tests/spec/convbf16_spec.lua to compare fp8.nn's bf16 conv2d against bit for bit. The operands are made by a formula both sides share, v(i, seed) = ((7919·i +
104729·seed) mod 251 − 125) / 64 over the flat index i from 0: multiples of 1/64 under 2, exact in bf16, whose sums
(a few hundred products of multiples of 1/4096 under 4) are exact in fp32 in any order, so the only rounding is the
last one and every correct route gives the same bits. Run from the repository root with a PyTorch 2.x:
    /opt/torch2/bin/python3 scripts/gen_convbf16.py"""

import torch
import torch.nn.functional as F
from torch_fixture import write


def v(shape, seed):
    n = 1
    for s in shape:
        n *= s
    vals = [((7919 * i + 104729 * seed) % 251 - 125) / 64 for i in range(n)]
    return torch.tensor(vals, dtype=torch.float64).reshape(shape).to(torch.bfloat16)


def hexbits(t):
    """a bf16 tensor's values as one string of their bits, four hex digits a value, in flat order"""
    return '"' + "".join("%04x" % (b & 0xFFFF) for b in t.detach().contiguous().view(torch.int16).reshape(-1).tolist()) + '"'


# name: x shape, w shape, bias, stride, padding, dilation, groups
CASES = {
    "k3p1_bias": ([2, 16, 5, 5], [16, 16, 3, 3], True, 1, 1, 1, 1),
    "k3s2": ([2, 16, 7, 7], [16, 16, 3, 3], False, 2, 1, 1, 1),
    "groups2": ([2, 32, 4, 4], [32, 8, 3, 3], False, 1, 1, 1, 4),
    "first3": ([2, 3, 8, 8], [16, 3, 3, 3], True, 1, 1, 1, 1),
    "dil2": ([1, 16, 7, 7], [16, 16, 3, 3], False, 1, 2, 2, 1),
    "k1s2": ([2, 16, 6, 6], [32, 16, 1, 1], False, 2, 0, 1, 1),
}


def main():
    torch.manual_seed(0)
    out = {}
    for name, (xs, ws, has_b, s, p, d, g) in CASES.items():
        x = v(xs, 1).requires_grad_()
        w = v(ws, 2).requires_grad_()
        b = v([ws[0]], 3).requires_grad_() if has_b else None
        y = F.conv2d(x, w, b, stride=s, padding=p, dilation=d, groups=g)
        gy = v(list(y.shape), 4)
        y.backward(gy)
        parts = ["y = %s" % hexbits(y), "dx = %s" % hexbits(x.grad), "dw = %s" % hexbits(w.grad)]
        if has_b:
            parts.append("db = %s" % hexbits(b.grad))
        parts.append("dtypes = { %s, %s, %s }" % tuple('"%s"' % str(t.dtype) for t in (y, x.grad, w.grad)))
        out[name] = "{\n    " + ",\n    ".join(parts) + "\n  }"
    write("tests/data/convbf16_torch.lua", "scripts/gen_convbf16.py", torch.__version__, out)


if __name__ == "__main__":
    main()
