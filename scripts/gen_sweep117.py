#!/usr/bin/env python3
"""gen_sweep117.py — torch 2.15's 0-d and empty-index forms of gather, scatter, scatter_add, index_fill, index_add
and index_copy (tests/spec/sweep117_spec.lua reads the file it writes). torch counts a 0-d tensor, index or source
as 1-d of size 1 (so dim is 0 or -1 there), gives gather the index's shape and the others the tensor's, takes an
empty index without its shape rules (gather, scatter), and raises on the rest. Each case: the op, the tensor, torch's
dim, the index (flat values and shape), the src/source/value (a number: scatter's and index_fill's value, the
others' 0-d tensor; or a tensor's flat values and shape), then the result's
shape and values and the gradients of sum(3 * result) for the tensor and the src (all zeros where torch gives
zeros; backward_raises = true where torch's own backward raises), or raises = true.
Run: /opt/torch2/bin/python3 scripts/gen_sweep117.py   (writes tests/data/sweep117_torch.lua)."""
import os
import sys
import torch

sys.path.insert(0, os.path.dirname(__file__))
from lua_literal import lua, write_data  # noqa: E402

X0, X1, X2 = 5.0, [1.0, 2.0, 3.0], [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]]
E = ("empty", [0])          # an empty 1-d index
E05 = ("empty", [0, 5])     # an empty 2-d index whose other size fits nothing
E02 = ("empty", [0, 2])
CASES = [
    # gather: (op, x, dim, index)
    ("gather", X0, 0, 0), ("gather", X0, -1, 0), ("gather", X0, 0, [0]), ("gather", X0, 0, [0, 0]),
    ("gather", X0, 0, E), ("gather", X0, 0, E02), ("gather", X0, 0, 1), ("gather", X0, 0, -1), ("gather", X0, 1, 0),
    ("gather", X0, -2, 0), ("gather", X0, 0, [[0]]),
    ("gather", X1, 0, 2), ("gather", X1, -1, 0), ("gather", X1, 0, 3), ("gather", X1, 0, [2, 0, 2]),
    ("gather", X1, 0, [[0]]), ("gather", X1, 0, E02),
    ("gather", X2, 0, 1), ("gather", X2, 1, E), ("gather", X2, 0, E05), ("gather", X2, 1, [[2], [0]]),
    # scatter / scatter_add: (op, x, dim, index, src: a number value or a tensor)
    ("scatter", X0, 0, 0, [7.0]), ("scatter", X0, 0, 0, 7.0), ("scatter", X0, 0, 0, ("t", 7.0)),
    ("scatter", X1, 0, 1, ("t", 7.0)), ("scatter", X0, -1, [0], 7.0),
    ("scatter", X0, 0, 1, 7.0), ("scatter", X0, 0, [0, 0], [7.0, 8.0]), ("scatter", X0, 0, E, 7.0),
    ("scatter", X0, 0, 0, [[7.0]]), ("scatter", X0, 1, 0, 7.0),
    ("scatter", X1, 0, 1, 7.0), ("scatter", X1, -1, 2, 7.0), ("scatter", X1, 0, E, [7.0]),
    ("scatter", X1, 0, [[1]], 7.0), ("scatter", X2, 0, 1, 7.0), ("scatter", X2, 1, E, 7.0),
    ("scatter_add", X0, 0, 0, 7.0), ("scatter_add", X0, 0, [0, 0], [7.0, 8.0]), ("scatter_add", X0, 0, 1, 7.0),
    ("scatter_add", X1, 0, 1, 7.0), ("scatter_add", X1, 0, E, 7.0), ("scatter_add", X2, 0, 1, 7.0),
    # index_fill: (op, x, dim, index, value)
    ("index_fill", X0, 0, 0, 7.0), ("index_fill", X0, -1, [0], 7.0), ("index_fill", X0, 0, [0, 0], 7.0),
    ("index_fill", X0, 0, E, 7.0), ("index_fill", X0, 0, 1, 7.0), ("index_fill", X0, 1, 0, 7.0),
    ("index_fill", X1, 0, 1, 7.0), ("index_fill", X2, 1, 0, 7.0), ("index_fill", X2, 0, [[0]], 7.0),
    # index_add / index_copy: (op, x, dim, index, source)
    ("index_add", X0, 0, 0, 7.0), ("index_add", X0, 0, [0], 7.0), ("index_add", X0, 0, 0, [7.0]),
    ("index_add", X0, 0, [0, 0], [7.0, 8.0]), ("index_add", X1, 0, 1, [7.0]), ("index_add", X1, 0, 1, 7.0),
    ("index_add", X1, 0, [0, 0], [7.0, 8.0]), ("index_add", X2, 1, 2, [[7.0], [8.0]]),
    ("index_copy", X0, 0, 0, 7.0), ("index_copy", X0, 0, 0, [7.0]), ("index_copy", X0, 0, [0, 0], [7.0, 8.0]),
    ("index_copy", X0, 0, 1, 7.0), ("index_copy", X1, 0, 1, 7.0), ("index_copy", X1, 0, [0, 0], 7.0),
    ("index_copy", X2, 0, 0, 7.0), ("index_copy", X2, 0, 0, [[7.0, 8.0, 9.0]]),
]


def index_of(v):
    if isinstance(v, tuple):
        return torch.zeros(v[1], dtype=torch.long)
    return torch.tensor(v, dtype=torch.long)


def flat(t):
    return lua(t.reshape(-1))


def main():
    out = ["-- tests/data/sweep117_torch.lua: written by scripts/gen_sweep117.py with torch " + torch.__version__,
           "-- { op, x, dim (torch's, 0-based), index = flat, index_shape = , src = number or flat, src_shape = ,",
           "--   shape = , values = , grad = (x's), src_grad = } or { ..., raises = true }",
           "return {"]
    for case in CASES:
        op, x, dim, idx = case[:4]
        src = case[4] if len(case) > 4 else None
        xt = torch.tensor(x, requires_grad=True)
        it = index_of(idx)
        head = "{ op = %s, x = %s, dim = %d, index = %s, index_shape = %s" % (
            '"' + op + '"', lua(x), dim, flat(it), lua(list(it.shape)))
        st = None
        # a number: scatter's and index_fill's value, the others' 0-d tensor; ("t", v): a 0-d tensor for scatter
        if isinstance(src, tuple):
            src = src[1]
            st = torch.tensor(src, requires_grad=True)
        elif isinstance(src, list) or (src is not None and op in ("scatter_add", "index_add", "index_copy")):
            st = torch.tensor(src, requires_grad=True)
        if st is not None:
            head += ", src = %s, src_shape = %s" % (flat(st), lua(list(st.shape)))
        elif src is not None:
            head += ", src = %s" % lua(src)
        try:
            if op == "gather":
                r = torch.gather(xt, dim, it)
            elif op in ("scatter", "scatter_add"):
                r = getattr(torch, op)(xt, dim, it, st if st is not None else src)
            elif op == "index_fill":
                r = torch.index_fill(xt, dim, it, src)
            else:
                r = getattr(torch, op)(xt, dim, it, st)
        except (RuntimeError, IndexError):
            out.append("  " + head + ", raises = true },")
            continue
        tail = ", shape = %s, values = %s" % (lua(list(r.shape)), flat(r.detach()))
        try:
            (3 * r).sum().backward()
        except RuntimeError:   # torch's own backward fails on some 0-d forms (scatter of a 0-d x from a 1-d src)
            out.append("  " + head + tail + ", backward_raises = true },")
            continue
        tail += ", grad = %s" % flat(xt.grad if xt.grad is not None else torch.zeros_like(xt))
        if st is not None:
            tail += ", src_grad = %s" % flat(st.grad if st.grad is not None else torch.zeros_like(st))
        out.append("  " + head + tail + " },")
    out.append("}")
    write_data("sweep117_torch.lua", out)


if __name__ == "__main__":
    main()
