#!/usr/bin/env python3
"""gen_sweep116.py — torch 2.15's index_select at 0-d (tests/spec/sweep116_spec.lua reads the file it writes): a 0-d
index is one position, the result keeping dim with size 1; a 0-d input takes dim 0 or -1 and an index of exactly one
element, 0, and gives a 0-d result; everything else raises. Each case: the input, torch's dim, the index (0-d or a
list), then the result's shape, values and the input's gradient of sum(3 * result), or raises = true.
Run: /opt/torch2/bin/python3 scripts/gen_sweep116.py   (writes tests/data/sweep116_torch.lua)."""
import os
import sys
import torch

sys.path.insert(0, os.path.dirname(__file__))
from lua_literal import lua, write_data  # noqa: E402

CASES = [
    (5.0, 0, 0), (5.0, -1, 0), (5.0, 0, [0]), (5.0, 0, [0, 0]), (5.0, 0, []), (5.0, 0, 1), (5.0, 0, -1),
    (5.0, 1, 0), (5.0, -2, 0), (5.0, 0, [[0]]),
    ([1.0, 2.0, 3.0], 0, 2), ([1.0, 2.0, 3.0], -1, 0), ([1.0, 2.0, 3.0], 0, 3), ([1.0, 2.0, 3.0], 0, [2, 0, 2]),
    ([[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]], 1, 1), ([[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]], 0, 1),
    ([[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]], -1, 2),
]


def main():
    out = ["-- tests/data/sweep116_torch.lua: written by scripts/gen_sweep116.py with torch " + torch.__version__,
           "-- { x, dim (torch's, 0-based), index, shape = , values = , grad = } or { x, dim, index, raises = true }",
           "return {"]
    for x, dim, idx in CASES:
        xt = torch.tensor(x, requires_grad=True)
        it = torch.tensor(idx, dtype=torch.long)
        head = "{ x = %s, dim = %d, index = %s, index_0d = %s" % (lua(x), dim, lua(idx), "true" if it.dim() == 0 else "false")
        try:
            r = torch.index_select(xt, dim, it)
        except (RuntimeError, IndexError):
            out.append("  " + head + ", raises = true },")
            continue
        (3 * r).sum().backward()
        out.append("  " + head + ", shape = %s, values = %s, grad = %s }," % (
            lua(list(r.shape)), lua(r.reshape(-1)), lua(xt.grad.reshape(-1))))
    out.append("}")
    write_data("sweep116_torch.lua", out)


if __name__ == "__main__":
    main()
