#!/usr/bin/env python3
"""gen_sweep118.py — torch 2.15's index sizes for gather, scatter and scatter_add: an index smaller than the tensor
in the dims other than dim (and, scatter, smaller than src in every dim) reads or writes only its own extent; one
larger raises. Also take_along_dim's broadcasting of the indices against the tensor (sizes 1 broadcast, others must
match). tests/spec/sweep118_spec.lua reads the file it writes. Each case: the op, the tensor (flat values and shape),
torch's dim, the index (flat values and shape), the src (a number: scatter's value; or flat values and shape), then the
result's shape and values and the gradients of sum(3 * result) for the tensor and the src, or raises = true.
Run: /opt/torch2/bin/python3 scripts/gen_sweep118.py   (writes tests/data/sweep118_torch.lua)."""
import os
import sys
import torch

sys.path.insert(0, os.path.dirname(__file__))
from lua_literal import lua  # noqa: E402


def ar(*shape):
    """a tensor of the shape with distinct values (0.5, 1.5, ... scaled, signs mixed)"""
    n = 1
    for s in shape:
        n *= s
    v = torch.arange(n, dtype=torch.float32) * 0.5 + 0.25
    v[1::3] = -v[1::3]
    return v.reshape(shape)


X34, X345 = ar(3, 4), ar(3, 4, 5)
I22 = [[2, 0], [1, 1]]
CASES = [
    # gather: (op, x, dim, index)
    ("gather", X34, 0, I22), ("gather", X34, 1, [[3, 0], [1, 1]]), ("gather", X34, -1, [[3], [2], [0]]),
    ("gather", X34, 0, [[2, 0, 1]]), ("gather", X34, 0, [[1], [2], [0], [2], [1]]),
    ("gather", X345, 2, [[[4, 0, 1]], [[2, 2, 3]]]), ("gather", X345, 1, [[[3, 0], [1, 1], [2, 0], [0, 3], [3, 3]]]),
    ("gather", X345, 0, [[[2]]]),
    ("gather", X34, 0, [[2, 0, 1, 0, 2]]), ("gather", X34, 1, [[0, 0]] * 4), ("gather", X345, 2, [[[0]] * 5]),
    ("gather", X34, 0, [2, 0]),
    # scatter / scatter_add: (op, x, dim, index, src: a number value or a tensor)
    ("scatter", X34, 0, I22, ar(3, 4) + 100), ("scatter", X34, 1, [[3, 0], [1, 2]], ar(2, 2) + 100),
    ("scatter", X34, 0, [[0, 0]] * 4, ar(5, 5) + 100), ("scatter", X34, 0, I22, 7.5),
    ("scatter", X34, -1, [[3, 1, 2]], ar(2, 4) + 100), ("scatter", X345, 1, [[[3, 0, 1], [1, 2, 0]]] * 2,
                                                                     ar(3, 4, 5) + 100),
    ("scatter", X345, 0, [[[2, 0], [1, 1], [0, 2]]] * 2, ar(2, 3, 2) + 100),
    ("scatter", X345, 2, [[[4, 0]]], 7.5), ("scatter", ar(3), 0, [1], ar(3) + 100),
    ("scatter", X34, 0, I22, ar(1, 2) + 100), ("scatter", X34, 0, [[0] * 5] * 2, ar(3, 5) + 100),
    ("scatter", X34, 1, [[0, 1]] * 4, 7.5),
    ("scatter_add", X34, 0, [[2, 0], [2, 2]], ar(3, 4) + 100), ("scatter_add", X34, 1, [[0, 0, 3]] * 2,
                                                                   ar(2, 3) + 100),
    ("scatter_add", X345, 2, [[[1, 1, 4, 0]] * 2], ar(3, 4, 5) + 100),
    ("scatter_add", X345, 1, [[[0, 3], [0, 3], [1, 1], [2, 0]]] * 2, ar(2, 4, 2) + 100),
    ("scatter_add", ar(4), 0, [3, 3], ar(3) + 100),
    ("scatter_add", X34, 1, [[0, 0]] * 2, ar(2, 1) + 100), ("scatter_add", X34, 1, [[0]] * 4, ar(4, 1) + 100),
    # take_along_dim: (op, x, dim, indices): broadcast against x in the other dims
    ("take_along_dim", X34, 1, [[0, 3]]), ("take_along_dim", X34, 1, [[2], [1], [0]]),
    ("take_along_dim", X34, 0, [[2]]), ("take_along_dim", X34, 1, [[0], [1]]), ("take_along_dim", X34, 0, [[0, 1]]),
    ("take_along_dim", X345, 2, [[[1, 4]], [[0, 0]], [[3, 2]]]),
]


def main():
    out = ["-- tests/data/sweep118_torch.lua: written by scripts/gen_sweep118.py with torch " + torch.__version__,
           "-- { op, x = flat, x_shape = , dim (torch's, 0-based), index = flat, index_shape = , src = number or flat,",
           "--   src_shape = , shape = , values = , grad = (x's), src_grad = } or { ..., raises = true }",
           "return {"]
    for case in CASES:
        op, x, dim, idx = case[:4]
        src = case[4] if len(case) > 4 else None
        xt = x.clone().requires_grad_(True)
        it = torch.tensor(idx, dtype=torch.long)
        head = "{ op = %s, x = %s, x_shape = %s, dim = %d, index = %s, index_shape = %s" % (
            '"' + op + '"', lua(x.reshape(-1)), lua(list(x.shape)), dim, lua(it.reshape(-1)), lua(list(it.shape)))
        st = None
        if isinstance(src, torch.Tensor):
            st = src.clone().requires_grad_(True)
            head += ", src = %s, src_shape = %s" % (lua(st.detach().reshape(-1)), lua(list(st.shape)))
        elif src is not None:
            head += ", src = %s" % lua(src)
        try:
            if op == "gather":
                r = torch.gather(xt, dim, it)
            elif op == "take_along_dim":
                r = torch.take_along_dim(xt, it, dim)
            else:
                r = getattr(torch, op)(xt, dim, it, st if st is not None else src)
        except (RuntimeError, IndexError):
            out.append("  " + head + ", raises = true },")
            continue
        tail = ", shape = %s, values = %s" % (lua(list(r.shape)), lua(r.detach().reshape(-1)))
        try:
            (3 * r).sum().backward()
        except RuntimeError:
            # torch's own backward raises where src is larger than the index (ScatterBackward0 gives src's gradient
            # the index's shape): the gradients of the same result computed from src narrowed to the index's shape
            # (a view of the leaf: zeros where no value was read), which is what a src's unread values get
            xt = x.clone().requires_grad_(True)
            st = src.clone().requires_grad_(True)
            r = getattr(torch, op)(xt, dim, it, st[tuple(slice(0, n) for n in it.shape)])
            (3 * r).sum().backward()
            tail += ", torch_backward_raises = true"
        tail += ", grad = %s" % lua(xt.grad.reshape(-1))
        if st is not None:
            tail += ", src_grad = %s" % lua(st.grad.reshape(-1) if st.grad is not None else torch.zeros(st.numel()))
        out.append("  " + head + tail + " },")
    out.append("}")
    path = os.path.join(os.path.dirname(__file__), "..", "tests", "data", "sweep118_torch.lua")
    with open(path + ".tmp", "w") as f:
        f.write("\n".join(out) + "\n")
    os.replace(path + ".tmp", path)


if __name__ == "__main__":
    main()
