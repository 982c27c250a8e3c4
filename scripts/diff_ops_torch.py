#!/usr/bin/env python3
# diff_ops_torch.py — a differential fuzzer of fp8lab's tensor ops against PyTorch (stop 94's audit, docs/robustness.md).
# Random cases (an op, operands built as non-contiguous views of fp32/bf16/fp16 bases, random dims/keepdim/options)
# run in torch here and in one fp8lab script; forward values, result shapes and dtypes, and for differentiable ops the
# gradient of a weighted sum of the outputs reaching each base, are compared with a tolerance set by the dtype.
# Needs torch (not CI): /opt/torch2/bin/python scripts/diff_ops_torch.py [--n 2000] [--seed 1] [--ops sum,var]
import argparse, math, random, subprocess, sys, os
try:
    import torch
except ImportError:
    sys.exit("diff_ops_torch.py needs PyTorch (run it with a python that has torch: /opt/torch2/bin/python here)")

DT = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
EPS = {"fp32": 2.0 ** -23, "bf16": 2.0 ** -8, "fp16": 2.0 ** -11}


def L(d):  # torch dim -> fp8lab dim (1-based, negatives as torch)
    return d + 1 if d >= 0 else d


def llist(xs):
    return "{" + ", ".join(str(x) for x in xs) + "}"


def fnum(v):
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        if v != v:
            return "(-(0/0))"  # x86's 0/0 has the sign bit set; torch's float('nan') has not
        if v == math.inf:
            return "math.huge"
        if v == -math.inf:
            return "(-math.huge)"
        return repr(v)
    return str(v)


class Operand:
    """An operand of logical shape `shape`, built from a base by a chain of views (both spellings kept)."""

    def __init__(self, rng, shape, dtype, views=True, kind="normal"):
        self.shape = list(shape)
        self.dtype = dtype
        self.nograd = kind == "mask"
        base = list(shape)
        lua, py = [], []  # applied in order to the base
        steps = rng.randint(0, 2) if views else 0
        for _ in range(steps):
            base, l, p = self.view_step(rng, base)
            lua.insert(0, l)
            py.insert(0, p)
        self.base = base
        self.lua_views, self.py_views = lua, py
        n = 1
        for s in base:
            n *= s
        self.vals = [self.draw(rng, kind) for _ in range(n)]

    @staticmethod
    def draw(rng, kind):
        if kind == "pos":
            return round(rng.uniform(0.1, 3.0), 4)
        if kind == "int":
            return float(rng.randint(-4, 4))
        if kind == "mask":
            return float(rng.random() < 0.5)
        if kind == "special" and not FINITE and rng.random() < 0.15:
            return rng.choice([0.0, -0.0, math.inf, -math.inf, math.nan, 1.0, -1.0])
        return round(rng.gauss(0, 1.5), 4)

    @staticmethod
    def view_step(rng, shape):
        """Returns (base shape, lua view, py view) so that view(base) has `shape`."""
        n = len(shape)
        choices = ["select", "step"]
        if n >= 2:
            choices += ["transpose", "permute"]
        if n >= 1:
            choices += ["narrow", "expand"]
        c = rng.choice(choices)
        if c == "transpose":
            i, j = rng.sample(range(n), 2)
            b = list(shape)
            b[i], b[j] = b[j], b[i]
            return b, f":transpose({L(i)}, {L(j)})", f".transpose({i}, {j})"
        if c == "permute":
            perm = list(range(n))
            rng.shuffle(perm)
            # result dim k is base dim perm[k]: base[perm[k]] = shape[k]
            b = [0] * n
            for k in range(n):
                b[perm[k]] = shape[k]
            return b, ":permute(" + ", ".join(str(p + 1) for p in perm) + ")", ".permute(" + ", ".join(map(str, perm)) + ")"
        if c == "narrow":
            d = rng.randrange(n)
            extra = rng.randint(1, 2)
            start = rng.randint(0, extra)
            b = list(shape)
            b[d] += extra
            dl = d if rng.random() < 0.5 else d - n
            return b, f":narrow({L(dl)}, {start + 1}, {shape[d]})", f".narrow({dl}, {start}, {shape[d]})"
        if c == "expand":
            ones = [i for i in range(n) if shape[i] >= 1]
            if not ones:
                return shape, "", ""
            d = rng.choice(ones)
            b = list(shape)
            b[d] = 1
            return b, ":expand(" + llist(shape) + ")", ".expand(" + str(list(shape)) + ")"
        if c == "select":
            d = rng.randint(0, n)
            k = rng.randint(1, 3)
            i = rng.randrange(k)
            b = list(shape)
            b.insert(d, k)
            il = i + 1 if rng.random() < 0.5 else i - k
            ip = il - 1 if il > 0 else il
            return b, f":select({d + 1}, {il})", f".select({d}, {ip})"
        # step: every other element along a dim: base [..., s, 2, ...] viewed, select index 0 of the 2
        d = rng.randrange(n) if n else 0
        if n == 0:
            return shape, "", ""
        b = list(shape)
        b[d] = shape[d] * 2
        v = list(shape)
        v.insert(d + 1, 2)
        return b, f":reshape({llist(v)}):select({d + 2}, 1)", f".reshape({v}).select({d + 1}, 0)"

    def lua_build(self, name, grad):
        if self.base == []:
            t = f"fp8.tensor({fnum(self.vals[0])})"
        elif 0 in self.base:
            t = f"fp8.zeros({llist(self.base)})"
        else:
            t = "fp8.tensor({" + ",".join(fnum(v) for v in self.vals) + "}):reshape(" + llist(self.base) + ")"
        if self.dtype != "fp32":
            t += f":to('{self.dtype}')"
        if grad:
            t += ":requires_grad_()"
        return f"local {name}0 = {t}\nlocal {name} = {name}0{''.join(self.lua_views)}\n"

    def torch_build(self, grad):
        t = torch.tensor(self.vals, dtype=torch.float32).reshape(self.base).to(DT[self.dtype])
        if grad:
            t.requires_grad_()
        v = t
        for p in self.py_views:
            if p:
                v = eval("v" + p)
        return t, v


# ---- the ops: each returns (operands, lua expr, py expr, differentiable, tol factor) ----------------------------
def rshape(rng, nd=None, lo=1, hi=4, allow0=True):
    nd = rng.randint(0, 4) if nd is None else nd
    s = [rng.randint(lo, hi) for _ in range(nd)]
    if nd and BIG and rng.random() < 0.35:  # one long dim: the vectorised and blocked paths
        s[rng.randrange(nd)] = rng.choice([7, 8, 9, 15, 16, 17, 31, 33, 63, 64, 65, 100, 129])
    if allow0 and nd and rng.random() < 0.08:
        s[rng.randrange(nd)] = 0
    return s


def rdtype(rng):
    return rng.choice(["fp32", "fp32", "bf16", "fp16"])


def bcast_partner(rng, shape):
    s = list(shape)
    # drop leading dims, set some to 1
    k = rng.randint(0, len(s))
    s = s[k:]
    s = [1 if rng.random() < 0.3 else x for x in s]
    if rng.random() < 0.3:  # the other side broadcasts instead
        s = [rng.randint(1, 3)] + s
    return s


OPS = {}
BIG = False
FINITE = False


def op(name):
    def reg(f):
        OPS[name] = f
        return f
    return reg


UNARY = {
    "abs": ("pos", 1), "neg": ("n", 1), "exp": ("n", 4), "log": ("pos", 4), "sqrt": ("pos", 2), "tanh": ("n", 4),
    "sigmoid": ("n", 4), "sin": ("n", 4), "cos": ("n", 4), "atan": ("n", 4), "erf": ("n", 4), "log1p": ("pos", 4),
    "expm1": ("n", 4), "floor": ("n", 1), "ceil": ("n", 1), "round": ("n", 1), "trunc": ("n", 1), "rsqrt": ("pos", 4),
    "reciprocal": ("pos", 2), "square": ("n", 2), "sign": ("n", 1), "relu": ("n", 1), "sinh": ("n", 4),
    "cosh": ("n", 4), "log2": ("pos", 4), "exp2": ("n", 4), "frac": ("n", 1),
}


def unary_factory(name, kind, tol):
    def f(rng):
        a = Operand(rng, rshape(rng), rdtype(rng), kind="pos" if kind == "pos" else "n" if name == "sign" else "special")
        return [a], f"A:{name}()", f"A.{name}()", name not in ("sign", "floor", "ceil", "round", "trunc"), tol
    return f


for _n, (_k, _t) in UNARY.items():
    OPS["u_" + _n] = unary_factory(_n, _k, _t)


@op("binary")
def _binary(rng):
    s = rshape(rng)
    s2 = bcast_partner(rng, s)
    if rng.random() < 0.5:
        s, s2 = s2, s
    nm = rng.choice(["add", "sub", "mul", "div", "maximum", "minimum", "atan2", "pow"])
    d1, d2 = rdtype(rng), rdtype(rng)
    if rng.random() < 0.6:
        d2 = d1
    if d1 != d2 and "fp32" not in (d1, d2):
        d2 = "fp32"  # torch's bf16+fp16 is fp32 too, but keep to one documented rule
    kinda = "pos" if nm == "pow" else "n"
    a = Operand(rng, s, d1, kind=kinda)
    b = Operand(rng, s2, d2, kind="n")
    if nm == "pow":
        return [a, b], "A:pow(B)", "torch.pow(A, B)", True, 8
    return [a, b], f"A:{nm}(B)", f"torch.{nm}(A, B)", True, 4


@op("scalar_binary")
def _sbin(rng):
    a = Operand(rng, rshape(rng), "fp32", kind="n")
    c = rng.choice([2.5, -0.75, 3.0])
    nm = rng.choice([("A * %s", "A * %s"), ("A + %s", "A + %s"), ("%s - A", "%s - A"), ("A / %s", "A / %s")])
    return [a], nm[0] % fnum(c), nm[1] % repr(c), True, 2


def red_dims(rng, n):
    if n == 0:
        return rng.choice([0, -1])
    return rng.randint(-n, n - 1)


@op("reduce")
def _reduce(rng):
    s = rshape(rng, rng.randint(1, 4))
    a = Operand(rng, s, rdtype(rng), kind="n")
    n = len(s)
    nm = rng.choice(["sum", "mean", "prod", "logsumexp", "max_d", "min_d", "amax_t", "amin_t", "sum_list", "mean_list",
                     "max_all", "sum_all", "cumsum", "cumprod", "cummax", "cummin", "argmax", "norm", "softmax",
                     "log_softmax"])
    d = red_dims(rng, n)
    k = rng.random() < 0.5
    kl = fnum(k)
    if nm in ("sum", "mean", "prod", "logsumexp"):
        if nm == "prod":
            return [a], f"A:prod({L(d)}, {kl})", f"A.prod({d}, keepdim={k})", True, 16
        return [a], f"A:{nm}({L(d)}, {kl})", f"A.{nm}({d}, keepdim={k})", True, 8
    if nm in ("sum_list", "mean_list"):
        ds = rng.sample(range(n), rng.randint(1, n))
        ds = [x if rng.random() < 0.5 else x - n for x in ds]
        m = nm[:-5]
        return [a], f"A:{m}({llist([L(x) for x in ds])}, {kl})", f"A.{m}({ds}, keepdim={k})", True, 8
    if nm in ("max_d", "min_d"):
        m = nm[:3]
        return [a], f"{{A:{m}({L(d)}, {kl})}}", f"tuple(A.{m}({d}, keepdim={k}))", True, 1
    if nm == "amax_t":  # torch's amax (max x) vs fp8lab's max over a dim
        return [a], f"({{A:max({L(d)}, {kl})}})[1]", f"A.amax({d}, keepdim={k})", False, 1
    if nm == "amin_t":
        return [a], f"({{A:min({L(d)}, {kl})}})[1]", f"A.amin({d}, keepdim={k})", False, 1
    if nm == "max_all":
        return [a], "A:max()", "A.max()", True, 1
    if nm == "sum_all":
        return [a], "A:sum()", "A.sum()", True, 8
    if nm in ("cumsum", "cumprod"):
        return [a], f"A:{nm}({L(d)})", f"A.{nm}({d})", True, 16
    if nm in ("cummax", "cummin"):
        return [a], f"{{A:{nm}({L(d)})}}", f"tuple(A.{nm}({d}))", True, 1
    if nm == "argmax":
        return [a], f"A:argmax({L(d)}, {kl})", f"A.argmax({d}, keepdim={k})", False, 1
    if nm == "norm":
        p = rng.choice([2, 1])
        return [a], f"A:norm({p}, {L(d)}, {kl})", f"A.norm({p}, {d}, keepdim={k})", True, 8
    return [a], f"A:{nm}({L(d)})", f"A.{nm}({d})", True, 8


@op("var")
def _var(rng):
    s = rshape(rng, rng.randint(1, 3))
    a = Operand(rng, s, rdtype(rng), kind="n")
    n = len(s)
    nm = rng.choice(["var", "std"])
    d = red_dims(rng, n)
    k = rng.random() < 0.5
    form = rng.choice(["corr", "unb", "all", "list"])
    if form == "corr":
        c = rng.choice([0, 1, 2])
        return [a], f"A:{nm}({L(d)}, {{correction={c}, keepdim={fnum(k)}}})", f"A.{nm}({d}, correction={c}, keepdim={k})", True, 16
    if form == "unb":
        u = rng.random() < 0.5
        return [a], f"A:{nm}({L(d)}, {fnum(u)}, {fnum(k)})", f"A.{nm}({d}, {u}, {k})", True, 16
    if form == "list":
        ds = rng.sample(range(n), rng.randint(1, n))
        return [a], f"A:{nm}({llist([L(x) for x in ds])}, {{keepdim={fnum(k)}}})", f"A.{nm}({ds}, keepdim={k})", True, 16
    return [a], f"A:{nm}()", f"A.{nm}()", True, 16


@op("where")
def _where(rng):
    s = rshape(rng)
    c = Operand(rng, bcast_partner(rng, s), "fp32", kind="mask")
    a = Operand(rng, s, rdtype(rng))
    b = Operand(rng, bcast_partner(rng, s), a.dtype)
    return [c, a, b], "fp8.where(A, B, C)", "torch.where(A != 0, B, C)", True, 1


@op("clamp")
def _clamp(rng):
    a = Operand(rng, rshape(rng), rdtype(rng), kind="special")
    lo, hi = rng.choice([(-0.5, 0.5), (0.0, 1.0), (-1.0, None), (None, 0.25)])
    ll = f"A:clamp({fnum(lo) if lo is not None else 'nil'}, {fnum(hi) if hi is not None else 'nil'})"
    return [a], ll, f"A.clamp({lo}, {hi})", True, 1


@op("masked_fill")
def _mf(rng):
    s = rshape(rng)
    a = Operand(rng, s, rdtype(rng))
    m = Operand(rng, bcast_partner(rng, s) if rng.random() < 0.5 else s, "fp32", kind="mask")
    return [a, m], "A:masked_fill(B, -2.5)", "A.masked_fill(B != 0, -2.5)", True, 1


@op("matmul")
def _mm(rng):
    m, k, n = rng.randint(1, 4), rng.randint(1, 5), rng.randint(1, 4)
    form = rng.choice(["2d", "vec_l", "vec_r", "batch", "bcast", "bmm", "einsum"])
    dt = rng.choice(["fp32", "fp32", "bf16"])
    if form == "2d":
        sa, sb = [m, k], [k, n]
    elif form == "vec_l":
        sa, sb = [k], [rng.randint(1, 2), k, n] if rng.random() < 0.5 else [k, n]
    elif form == "vec_r":
        sa, sb = [rng.randint(1, 3), m, k] if rng.random() < 0.5 else [m, k], [k]
    elif form == "batch" or form == "bmm":
        b = rng.randint(1, 3)
        sa, sb = [b, m, k], [b, k, n]
    elif form == "bcast":
        sa, sb = [rng.randint(1, 3), 1, m, k], [rng.randint(1, 2), k, n]
        sb = [sa[0] if rng.random() < 0.5 else 1] + sb
    else:
        b = rng.randint(1, 3)
        sa, sb = [b, m, k], [k, n]
        A, B = Operand(rng, sa, dt), Operand(rng, sb, dt)
        return [A, B], 'fp8.einsum("bmk,kn->bnm", A, B)', 'torch.einsum("bmk,kn->bnm", A, B)', True, 32
    A, B = Operand(rng, sa, dt), Operand(rng, sb, dt)
    if form == "bmm":
        return [A, B], "A:bmm(B)", "A.bmm(B)", True, 32
    return [A, B], "A:matmul(B)", "A.matmul(B)", True, 32


@op("index")
def _index(rng):
    s = rshape(rng, rng.randint(1, 3), allow0=False)
    n = len(s)
    a = Operand(rng, s, rdtype(rng))
    d = red_dims(rng, n)
    dd = d % n
    nm = rng.choice(["gather", "index_select", "take_along_dim", "masked_select", "scatter", "scatter_add",
                     "index_add"])
    if nm in ("gather", "take_along_dim"):
        isz = list(s)
        isz[dd] = rng.randint(1, 4)
        idx = Operand(rng, isz, "fp32", views=True)
        idx.vals = [float(rng.randrange(s[dd])) for _ in idx.vals]
        idx.nograd = True
        if nm == "gather":
            return [a, idx], f"A:gather({L(d)}, B)", f"A.gather({d}, B.long())", True, 1
        return [a, idx], f"fp8.take_along_dim(A, B, {L(d)})", f"torch.take_along_dim(A, B.long(), {d})", True, 1
    if nm == "index_select":
        idx = Operand(rng, [rng.randint(0, 4)], "fp32")
        idx.vals = [float(rng.randrange(s[dd])) for _ in idx.vals]
        idx.nograd = True
        return [a, idx], f"A:index_select({L(d)}, B)", f"A.index_select({d}, B.long())", True, 1
    if nm == "masked_select":
        m = Operand(rng, bcast_partner(rng, s)[-n:] if rng.random() < 0.5 else s, "fp32", kind="mask")
        if len(m.shape) > n:
            m = Operand(rng, s, "fp32", kind="mask")
        return [a, m], "A:masked_select(B)", "A.masked_select(B != 0)", True, 1
    if nm in ("scatter", "scatter_add"):
        isz = list(s)
        isz[dd] = rng.randint(1, s[dd])
        idx = Operand(rng, isz, "fp32")
        # scatter with repeated positions is order-dependent: use distinct positions per line for scatter
        idx.vals = [float(rng.randrange(s[dd])) for _ in idx.vals]
        idx.nograd = True
        if nm == "scatter":
            # rebuild with a permutation along dd so that positions are distinct
            import itertools
            t = torch.zeros(isz)
            perm_idx = torch.stack([torch.randperm(s[dd], generator=torch.Generator().manual_seed(rng.randrange(1 << 30)))[:isz[dd]]
                                    for _ in range(max(1, t.numel() // max(1, isz[dd])))])
            # shape [rows, isz[dd]] -> move to dim dd
            other = [x for i, x in enumerate(isz) if i != dd]
            pi = perm_idx.reshape(other + [isz[dd]]).movedim(-1, dd).contiguous()
            idx = Operand(rng, isz, "fp32", views=False)
            idx.vals = [float(v) for v in pi.reshape(-1).tolist()]
            idx.nograd = True
        src = Operand(rng, isz, a.dtype)
        return [a, idx, src], f"A:{nm}({L(d)}, B, C)", f"A.{nm}({d}, B.long(), C)", True, 2
    # index_add
    ni = rng.randint(1, 4)
    idx = Operand(rng, [ni], "fp32")
    idx.vals = [float(rng.randrange(s[dd])) for _ in idx.vals]
    idx.nograd = True
    ssz = list(s)
    ssz[dd] = ni
    src = Operand(rng, ssz, a.dtype)
    return [a, idx, src], f"A:index_add({L(d)}, B, C)", f"A.index_add({d}, B.long(), C)", True, 2


@op("shape")
def _shape(rng):
    s = rshape(rng, rng.randint(1, 4))
    n = len(s)
    a = Operand(rng, s, rdtype(rng))
    d = red_dims(rng, n)
    nm = rng.choice(["cat", "stack", "split", "chunk", "unbind", "flip", "roll", "tile", "tril", "triu", "diagonal",
                     "squeeze", "unsqueeze", "flatten", "movedim", "repeat_interleave"])
    if nm in ("cat", "stack"):
        s2 = list(s)
        if nm == "cat":
            s2[d % n] = rng.randint(0, 3)
        b = Operand(rng, s2, a.dtype if rng.random() < 0.8 else "fp32")
        dd = d if nm == "cat" else rng.randint(-n - 1, n)
        return [a, b], f"fp8.{nm}({{A, B}}, {L(dd)})", f"torch.{nm}([A, B], {dd})", True, 1
    if nm == "split":
        k = rng.randint(1, 3)
        return [a], f"{{A:split({k}, {L(d)})}}", f"A.split({k}, {d})", True, 1
    if nm == "chunk":
        k = rng.randint(1, 4)
        return [a], f"{{A:chunk({k}, {L(d)})}}", f"A.chunk({k}, {d})", True, 1
    if nm == "unbind":
        return [a], f"{{A:unbind({L(d)})}}", f"A.unbind({d})", True, 1
    if nm == "flip":
        ds = rng.sample(range(n), rng.randint(1, n))
        return [a], f"A:flip({llist([L(x) for x in ds])})", f"A.flip({ds})", True, 1
    if nm == "roll":
        sh = rng.randint(-5, 5)
        if rng.random() < 0.3:
            return [a], f"A:roll({sh})", f"A.roll({sh})", True, 1
        return [a], f"A:roll({sh}, {L(d)})", f"A.roll({sh}, {d})", True, 1
    if nm == "tile":
        reps = [rng.randint(1, 2) for _ in range(rng.randint(1, n + 1))]
        return [a], f"A:tile({llist(reps)})", f"A.tile({reps})", True, 1
    if nm in ("tril", "triu"):
        if n < 2:
            return [a], f"A:{nm}()", None, True, 1
        k = rng.randint(-2, 2)
        return [a], f"A:{nm}({k})", f"A.{nm}({k})", True, 1
    if nm == "diagonal":
        if n < 2:
            return [a], "A:sum()", "A.sum()", True, 1
        i, j = rng.sample(range(n), 2)
        off = rng.randint(-2, 2)
        return [a], f"A:diagonal({off}, {L(i)}, {L(j)})", f"A.diagonal({off}, {i}, {j})", True, 1
    if nm == "squeeze":
        return [a], f"A:squeeze({L(d)})", f"A.squeeze({d})", True, 1
    if nm == "unsqueeze":
        dd = rng.randint(-n - 1, n)
        return [a], f"A:unsqueeze({L(dd)})", f"A.unsqueeze({dd})", True, 1
    if nm == "flatten":
        i = rng.randrange(n)
        j = rng.randint(i, n - 1)
        return [a], f"A:flatten({L(i)}, {L(j)})", f"A.flatten({i}, {j})", True, 1
    if nm == "movedim":
        i, j = rng.randrange(n), rng.randrange(n)
        return [a], f"A:movedim({L(i)}, {L(j)})", f"A.movedim({i}, {j})", True, 1
    r = rng.randint(1, 3)
    return [a], f"A:repeat_interleave({r}, {L(d)})", f"A.repeat_interleave({r}, {d})", True, 1


@op("inplace")
def _inplace(rng):
    s = rshape(rng, rng.randint(1, 3), allow0=False)
    a = Operand(rng, s, rdtype(rng))
    b = Operand(rng, bcast_partner(rng, s)[-len(s):] if rng.random() < 0.5 else s, a.dtype)
    if len(b.shape) > len(s) or any(x not in (1, y) for x, y in zip(b.shape[::-1], s[::-1])):
        b = Operand(rng, s, a.dtype)
    nm = rng.choice(["add_", "sub_", "mul_", "div_", "copy_", "clamp_", "masked_fill_"])
    # the write goes to a view of a clone of A0; the result is the whole base
    if nm == "clamp_":
        l, p = "V:clamp_(-0.5, 0.5)", "V.clamp_(-0.5, 0.5)"
    elif nm == "masked_fill_":
        l, p = "V:masked_fill_(B:gt(0), 7)", "V.masked_fill_(B > 0, 7)"
    else:
        l, p = f"V:{nm}(B)", f"V.{nm}(B)"
    # A's view chain is applied to a clone of A0, written under no_grad, and the clone returned
    return [a, b], ("INPLACE", l), ("INPLACE", p), False, 2


@op("nn")
def _nn(rng):
    nm = rng.choice(["layer_norm", "group_norm", "conv1d", "conv2d", "max_pool2d", "avg_pool2d", "interpolate",
                     "pad", "embedding", "mse", "l1", "smooth_l1", "huber", "bce_logits", "cross_entropy", "nll",
                     "kl_div", "dropout_eval", "gelu", "silu", "softplus", "leaky_relu", "elu", "hardtanh"])
    dt = rng.choice(["fp32", "fp32", "bf16"])
    if nm == "layer_norm":
        s = rshape(rng, rng.randint(1, 3), allow0=False)
        k = rng.randint(1, len(s))
        ns = s[-k:]
        x = Operand(rng, s, dt)
        w = Operand(rng, ns, dt)
        b = Operand(rng, ns, dt)
        return [x, w, b], f"F.layer_norm(A, {llist(ns)}, B, C)", f"F.layer_norm(A, {ns}, B, C)", True, 64
    if nm == "group_norm":
        g = rng.choice([1, 2])
        c = g * rng.randint(1, 2)
        s = [rng.randint(1, 2), c] + [rng.randint(1, 3) for _ in range(rng.randint(0, 2))]
        x = Operand(rng, s, dt)
        w = Operand(rng, [c], dt)
        b = Operand(rng, [c], dt)
        return [x, w, b], f"F.group_norm(A, {g}, B, C)", f"F.group_norm(A, {g}, B, C)", True, 64
    if nm in ("conv1d", "conv2d"):
        nd = 1 if nm == "conv1d" else 2
        g = rng.choice([1, 1, 2])
        cin, cout = g * rng.randint(1, 2), g * rng.randint(1, 2)
        ks = [rng.randint(1, 3) for _ in range(nd)]
        st, pd, dl = rng.randint(1, 2), rng.randint(0, 2), rng.randint(1, 2)
        sp = [rng.randint(3, 6) for _ in range(nd)]
        x = Operand(rng, [rng.randint(1, 2), cin] + sp, dt)
        w = Operand(rng, [cout, cin // g] + ks, dt)
        b = Operand(rng, [cout], dt)
        opts = f"{{stride={st}, padding={pd}, dilation={dl}, groups={g}}}"
        return ([x, w, b], f"F.{nm}(A, B, C, {opts})",
                f"F.{nm}(A, B, C, stride={st}, padding={pd}, dilation={dl}, groups={g})", True, 64)
    if nm in ("max_pool2d", "avg_pool2d"):
        k = rng.randint(1, 3)
        st = rng.randint(1, 2)
        pd = rng.randint(0, k // 2)
        cm = rng.random() < 0.3
        x = Operand(rng, [rng.randint(1, 2), rng.randint(1, 2), rng.randint(3, 6), rng.randint(3, 6)], dt)
        return ([x], f"F.{nm}(A, {k}, {{stride={st}, padding={pd}, ceil_mode={fnum(cm)}}})",
                f"F.{nm}(A, {k}, stride={st}, padding={pd}, ceil_mode={cm})", True, 4)
    if nm == "interpolate":
        mode = rng.choice(["nearest", "bilinear", "bicubic"])
        x = Operand(rng, [1, rng.randint(1, 2), rng.randint(2, 5), rng.randint(2, 5)], "fp32")
        sz = [rng.randint(1, 7), rng.randint(1, 7)]
        if mode == "nearest":
            return [x], f"F.interpolate(A, {{size={llist(sz)}, mode='nearest'}})", f"F.interpolate(A, size={sz}, mode='nearest')", True, 8
        ac = rng.random() < 0.5
        return ([x], f"F.interpolate(A, {{size={llist(sz)}, mode='{mode}', align_corners={fnum(ac)}}})",
                f"F.interpolate(A, size={sz}, mode='{mode}', align_corners={ac})", True, 64)
    if nm == "pad":
        mode = rng.choice(["constant", "reflect", "replicate", "circular"])
        x = Operand(rng, [1, rng.randint(1, 2), rng.randint(3, 5), rng.randint(3, 5)], dt)
        p = [rng.randint(0, 2) for _ in range(rng.choice([2, 4]))]
        if mode == "constant":
            return [x], f"F.pad(A, {llist(p)}, {{mode='constant', value=1.5}})", f"F.pad(A, {p}, 'constant', 1.5)", True, 1
        return [x], f"F.pad(A, {llist(p)}, {{mode='{mode}'}})", f"F.pad(A, {p}, mode='{mode}')", True, 1
    if nm == "embedding":
        w = Operand(rng, [rng.randint(2, 5), rng.randint(1, 3)], dt)
        idx = Operand(rng, rshape(rng, rng.randint(1, 2), allow0=False), "fp32")
        idx.vals = [float(rng.randrange(w.shape[0])) for _ in idx.vals]
        idx.nograd = True
        return [idx, w], "F.embedding(A, B)", "F.embedding(A.long(), B)", True, 1
    red = rng.choice(["mean", "sum", "none"])
    s = rshape(rng, rng.randint(1, 3), allow0=False)
    if nm in ("mse", "l1", "smooth_l1", "huber"):
        x, y = Operand(rng, s, dt), Operand(rng, s, dt)
        fn = {"mse": "mse_loss", "l1": "l1_loss", "smooth_l1": "smooth_l1_loss", "huber": "huber_loss"}[nm]
        return [x, y], f"F.{fn}(A, B, {{reduction='{red}'}})", f"F.{fn}(A, B, reduction='{red}')", True, 16
    if nm == "bce_logits":
        x, y = Operand(rng, s, dt), Operand(rng, s, dt, kind="mask")
        return [x, y], f"F.binary_cross_entropy_with_logits(A, B, {{reduction='{red}'}})", f"F.binary_cross_entropy_with_logits(A, B, reduction='{red}')", True, 16
    if nm in ("cross_entropy", "nll"):
        nb, c = rng.randint(1, 4), rng.randint(2, 5)
        x = Operand(rng, [nb, c], dt)
        t = Operand(rng, [nb], "fp32")
        t.vals = [float(rng.randrange(c)) for _ in t.vals]
        t.nograd = True
        ls = rng.choice([0.0, 0.0, 0.1])
        if nm == "cross_entropy":
            return ([x, t], f"F.cross_entropy(A, B, {{reduction='{red}', label_smoothing={ls}}})",
                    f"F.cross_entropy(A, B.long(), reduction='{red}', label_smoothing={ls})", True, 16)
        return [x, t], f"F.nll_loss(A, B, {{reduction='{red}'}})", f"F.nll_loss(A, B.long(), reduction='{red}')", True, 16
    if nm == "kl_div":
        x, y = Operand(rng, s, dt), Operand(rng, s, dt, kind="pos")
        red = rng.choice(["batchmean", "sum", "none", "mean"])
        return [x, y], f"F.kl_div(A, B, {{reduction='{red}'}})", f"F.kl_div(A, B, reduction='{red}')", True, 16
    if nm == "dropout_eval":
        x = Operand(rng, s, dt)
        return [x], "F.dropout(A, 0.5, false)", "F.dropout(A, 0.5, False)", True, 1
    x = Operand(rng, rshape(rng), dt, kind="special")
    if nm == "leaky_relu":
        return [x], "F.leaky_relu(A, 0.2)", "F.leaky_relu(A, 0.2)", True, 4
    if nm == "hardtanh":
        return [x], "F.hardtanh(A, -0.5, 0.5)", "F.hardtanh(A, -0.5, 0.5)", True, 1
    return [x], f"F.{nm}(A)", f"F.{nm}(A)", True, 8


@op("order")
def _order(rng):
    s = rshape(rng, rng.randint(1, 3), allow0=rng.random() < 0.5)
    n = len(s)
    a = Operand(rng, s, rdtype(rng), kind=rng.choice(["n", "int", "special"]))
    d = red_dims(rng, n)
    k = rng.random() < 0.5
    nm = rng.choice(["sort", "argsort", "topk", "median", "kthvalue", "logcumsumexp", "nansum", "nanmean", "aminmax",
                     "all", "any", "count_nonzero", "msort", "max_all", "min_all", "argmax_all", "argmin", "std_mean",
                     "diff", "mode"])
    if nm == "sort":
        desc = rng.random() < 0.5
        return [a], f"{{A:sort({L(d)}, {fnum(desc)}, true)}}", f"tuple(A.sort(dim={d}, descending={desc}, stable=True))", True, 1
    if nm == "argsort":
        desc = rng.random() < 0.5
        return [a], f"A:argsort({L(d)}, {fnum(desc)}, true)", f"A.argsort(dim={d}, descending={desc}, stable=True)", False, 1
    if nm == "topk":
        sz = s[d % n]
        kk = rng.randint(0, sz)
        lg = rng.random() < 0.5
        if a.vals and any(v != v for v in a.vals):
            a.vals = [0.0 if v != v else v for v in a.vals]
        return [a], f"{{A:topk({kk}, {L(d)}, {fnum(lg)})}}", f"tuple(A.topk({kk}, {d}, {lg}))", True, 1
    if nm in ("median", "kthvalue", "mode"):
        if 0 in s:
            return [a], "A:sum()", "A.sum()", True, 8
        if nm == "median":
            return [a], f"{{fp8.median(A, {L(d)}, {fnum(k)})}}", f"tuple(torch.median(A, {d}, {k}))", True, 1
        if nm == "mode":
            return [a], "A:sum()", "A.sum()", True, 8
        kk = rng.randint(1, s[d % n])
        return [a], f"{{fp8.kthvalue(A, {kk}, {L(d)}, {fnum(k)})}}", f"tuple(torch.kthvalue(A, {kk}, {d}, {k}))", True, 1
    if nm == "logcumsumexp":
        return [a], f"fp8.logcumsumexp(A, {L(d)})", f"torch.logcumsumexp(A, {d})", True, 16
    if nm in ("nansum", "nanmean"):
        return [a], f"fp8.{nm}(A, {L(d)}, {fnum(k)})", f"torch.{nm}(A, {d}, keepdim={k})", True, 16
    if nm in ("all", "any"):
        return [a], f"A:{nm}({L(d)}, {fnum(k)})", f"A.{nm}({d}, keepdim={k}).to(A.dtype)", False, 1
    if nm == "count_nonzero":
        return [a], f"A:count_nonzero({L(d)})", f"A.count_nonzero({d}).to(A.dtype)", False, 1
    if nm == "msort":
        return [a], "fp8.msort(A)", "torch.msort(A)", True, 1
    if nm == "max_all":
        return [a], "A:min()", "A.min()", True, 1
    if nm == "min_all":
        return [a], "A:mean()", "A.mean()", True, 16
    if nm == "argmax_all":
        if 0 in s:
            return [a], "A:sum()", "A.sum()", True, 8
        return [a], "A:argmax()", "A.argmax()", False, 1
    if nm == "argmin":
        if 0 in s:
            return [a], "A:sum()", "A.sum()", True, 8
        return [a], f"A:argmin({L(d)}, {fnum(k)})", f"A.argmin({d}, keepdim={k})", False, 1
    if nm == "std_mean":
        return [a], f"{{fp8.std_mean(A, {L(d)})}}", f"tuple(torch.std_mean(A, {d}))", True, 16
    if nm == "aminmax":
        return [a], "A:sum()", "A.sum()", True, 8
    nn = rng.randint(1, 2)
    return [a], f"fp8.diff(A, {nn}, {L(d)})", f"torch.diff(A, {nn}, {d})", True, 2


@op("pointwise2")
def _pw2(rng):
    s = rshape(rng)
    s2 = bcast_partner(rng, s)
    if rng.random() < 0.5:
        s, s2 = s2, s
    dt = rdtype(rng)
    nm = rng.choice(["fmod", "remainder", "hypot", "logaddexp", "xlogy", "copysign", "lerp", "addcmul", "addcdiv",
                     "heaviside", "floor_divide", "isclose", "eq", "lt", "ge", "logical_and", "float_power"])
    a = Operand(rng, s, dt, kind="special")
    b = Operand(rng, s2, dt, kind="special" if rng.random() < 0.5 else "n")
    if nm in ("lerp", "addcmul", "addcdiv"):
        c = Operand(rng, bcast_partner(rng, s), dt, kind="n")
        if nm == "lerp":
            return [a, b, c], "A:lerp(B, C)", "A.lerp(B, C)", True, 4
        return [a, b, c], f"A:{nm}(B, C, 0.5)", f"A.{nm}(B, C, value=0.5)", True, 4
    if nm in ("heaviside", "isclose", "eq", "lt", "ge", "logical_and"):
        cast = ".to(A.dtype)" if nm != "heaviside" else ""
        return [a, b], f"A:{nm}(B)", f"A.{nm}(B){cast}", False, 1
    if nm == "float_power":
        return [a, b], "A:sum()", "A.sum()", True, 8
    return [a, b], f"A:{nm}(B)", f"A.{nm}(B)", nm not in ("floor_divide",), 4


@op("linalg")
def _linalg(rng):
    dt = rng.choice(["fp32", "fp32", "bf16"])
    nm = rng.choice(["addmm", "baddbmm", "trace", "diag", "outer", "dot", "kron", "cross", "rot90", "tensordot",
                     "cdist", "einsum_tr", "einsum_bc", "cumsum_big"])
    m, k, n = rng.randint(1, 4), rng.randint(1, 5), rng.randint(1, 4)
    if nm == "addmm":
        x = Operand(rng, bcast_partner(rng, [m, n])[-2:], dt)
        return ([x, Operand(rng, [m, k], dt), Operand(rng, [k, n], dt)], "A:addmm(B, C, {beta=0.5, alpha=2})",
                "A.addmm(B, C, beta=0.5, alpha=2)", True, 32)
    if nm == "baddbmm":
        b = rng.randint(1, 3)
        return ([Operand(rng, [b, m, n], dt), Operand(rng, [b, m, k], dt), Operand(rng, [b, k, n], dt)],
                "A:baddbmm(B, C)", "A.baddbmm(B, C)", True, 32)
    if nm == "trace":
        return [Operand(rng, [m, n], dt)], "A:trace()", "A.trace()", True, 4
    if nm == "diag":
        off = rng.randint(-2, 2)
        if rng.random() < 0.5:
            return [Operand(rng, [m], dt)], f"A:diag({off})", f"A.diag({off})", True, 1
        return [Operand(rng, [m, n], dt)], f"A:diag({off})", f"A.diag({off})", True, 1
    if nm == "outer":
        return [Operand(rng, [m], dt), Operand(rng, [n], dt)], "A:outer(B)", "A.outer(B)", True, 4
    if nm == "dot":
        return [Operand(rng, [k], dt), Operand(rng, [k], dt)], "A:dot(B)", "A.dot(B)", True, 16
    if nm == "kron":
        return [Operand(rng, [m, k], dt), Operand(rng, [n, 2], dt)], "fp8.kron(A, B)", "torch.kron(A, B)", True, 4
    if nm == "cross":
        return ([Operand(rng, [m, 3], dt), Operand(rng, [m, 3], dt)], "fp8.cross(A, B, 2)",
                "torch.linalg.cross(A, B, dim=1)", True, 8)
    if nm == "rot90":
        kk = rng.randint(-3, 3)
        return [Operand(rng, [m, n, k], dt)], f"fp8.rot90(A, {kk}, {{1, 3}})", f"torch.rot90(A, {kk}, [0, 2])", True, 1
    if nm == "tensordot":
        return ([Operand(rng, [m, k, 2], dt), Operand(rng, [2, k, n], dt)], "fp8.tensordot(A, B, {{2, 3}, {2, 1}})",
                "torch.tensordot(A, B, ([1, 2], [1, 0]))", True, 32)
    if nm == "cdist":
        return ([Operand(rng, [m, k], "fp32"), Operand(rng, [n, k], "fp32")], "fp8.cdist(A, B)",
                "torch.cdist(A, B)", True, 32)
    if nm == "einsum_tr":
        return [Operand(rng, [2, m, m], dt)], 'fp8.einsum("bii->b", A)', 'torch.einsum("bii->b", A)', True, 8
    if nm == "einsum_bc":
        return ([Operand(rng, [2, 1, m, k], dt), Operand(rng, [3, k, n], dt)], 'fp8.einsum("...mk,...kn->...mn", A, B)',
                'torch.einsum("...mk,...kn->...mn", A, B)', True, 32)
    return [Operand(rng, [rng.randint(1, 3), 70], "fp32")], "A:cumsum(1)", "A.cumsum(0)", True, 16


@op("nn2")
def _nn2(rng):
    dt = rng.choice(["fp32", "fp32", "bf16"])
    nm = rng.choice(["ce_w", "ce_ignore", "ce_prob", "nll_w", "emb_pad", "conv_same", "conv_mode", "avg_cip",
                     "max_dil", "interp_scale", "adaptive", "pixel_shuffle", "unfold", "batch_norm", "instance_norm",
                     "normalize", "cos_sim", "rms_norm", "conv_big", "ce_3d", "glu", "softmin", "avg1d", "max1d",
                     "interp_lin", "fold", "conv_t"])
    if nm in ("ce_w", "ce_ignore", "nll_w", "ce_3d"):
        nb, c = rng.randint(1, 5), rng.randint(2, 5)
        extra = [rng.randint(1, 3)] if nm == "ce_3d" else []
        x = Operand(rng, [nb, c] + extra, dt)
        t = Operand(rng, [nb] + extra, "fp32")
        t.vals = [float(rng.randrange(c)) for _ in t.vals]
        t.nograd = True
        red = rng.choice(["mean", "sum", "none"])
        if nm == "ce_ignore":
            ig = rng.randrange(c)
            ls = rng.choice([0.0, 0.2])
            return ([x, t], f"F.cross_entropy(A, B, {{ignore_index={ig}, reduction='{red}', label_smoothing={ls}}})",
                    f"F.cross_entropy(A, B.long(), ignore_index={ig}, reduction='{red}', label_smoothing={ls})", True, 16)
        w = Operand(rng, [c], dt, kind="pos", views=False)
        w.nograd = True
        fn = "nll_loss" if nm == "nll_w" else "cross_entropy"
        ls = rng.choice([0.0, 0.3]) if fn == "cross_entropy" else 0.0
        lsl = f", label_smoothing={ls}" if fn == "cross_entropy" else ""
        return ([x, t, w], f"F.{fn}(A, B, {{weight=C, reduction='{red}'{lsl}}})",
                f"F.{fn}(A, B.long(), weight=C, reduction='{red}'{lsl})", True, 16)
    if nm == "ce_prob":
        nb, c = rng.randint(1, 4), rng.randint(2, 5)
        x = Operand(rng, [nb, c], dt)
        p = Operand(rng, [nb, c], dt, kind="pos")
        red = rng.choice(["mean", "sum", "none"])
        ls = rng.choice([0.0, 0.1])
        return ([x, p], f"F.cross_entropy(A, B, {{reduction='{red}', label_smoothing={ls}}})",
                f"F.cross_entropy(A, B, reduction='{red}', label_smoothing={ls})", True, 16)
    if nm == "emb_pad":
        w = Operand(rng, [rng.randint(3, 6), rng.randint(1, 4)], dt)
        idx = Operand(rng, [rng.randint(1, 3), rng.randint(1, 4)], "fp32")
        idx.vals = [float(rng.randrange(w.shape[0])) for _ in idx.vals]
        idx.nograd = True
        pi = rng.randrange(w.shape[0])
        return [idx, w], f"F.embedding(A, B, {{padding_idx={pi}}})", f"F.embedding(A.long(), B, padding_idx={pi})", True, 1
    if nm in ("conv_same", "conv_mode", "conv_big"):
        nd = rng.choice([1, 2])
        fn = f"conv{nd}d"
        g = rng.choice([1, 2]) if nm != "conv_big" else rng.choice([1, 3])
        cin, cout = g * rng.randint(1, 2), g * rng.randint(1, 3)
        ks = [rng.randint(1, 4) for _ in range(nd)]
        sp = [rng.randint(4, 9) if nm != "conv_big" else rng.randint(10, 20) for _ in range(nd)]
        nbatch = rng.randint(1, 2) if nm != "conv_big" else rng.randint(3, 9)
        x = Operand(rng, [nbatch, cin] + sp, dt)
        w = Operand(rng, [cout, cin // g] + ks, dt)
        b = Operand(rng, [cout], dt)
        dl = rng.randint(1, 2)
        if nm == "conv_same":
            return ([x, w, b], f"F.{fn}(A, B, C, {{padding='same', dilation={dl}, groups={g}}})",
                    f"F.{fn}(A, B, C, padding='same', dilation={dl}, groups={g})", True, 64)
        if nm == "conv_big":
            st, pd = rng.randint(1, 3), rng.randint(0, 2)
            return ([x, w, b], f"F.{fn}(A, B, C, {{stride={st}, padding={pd}, dilation={dl}, groups={g}}})",
                    f"F.{fn}(A, B, C, stride={st}, padding={pd}, dilation={dl}, groups={g})", True, 64)
        mode = rng.choice(["reflect", "replicate", "circular"])
        pd = rng.randint(1, 2)
        ln = "nn.Conv1d" if nd == 1 else "nn.Conv2d"
        # the module's padding_mode: F.pad first, then a conv without padding (torch's own Conv*d forward)
        padl = [pd] * (2 * nd)
        return ([x, w, b], f"F.{fn}(F.pad(A, {llist(padl)}, {{mode='{mode}'}}), B, C, {{groups={g}}})",
                f"F.{fn}(F.pad(A, {padl}, mode='{mode}'), B, C, groups={g})", True, 64)
    if nm in ("avg_cip", "max_dil", "avg1d", "max1d"):
        oned = nm.endswith("1d")
        k = rng.randint(1, 4)
        st = rng.randint(1, 3)
        pd = rng.randint(0, k // 2)
        cm = rng.random() < 0.4
        sp = [rng.randint(3, 11)] if oned else [rng.randint(3, 11), rng.randint(3, 11)]
        x = Operand(rng, [rng.randint(1, 2), rng.randint(1, 3)] + sp, dt)
        fn = ("avg_pool" if nm.startswith("avg") else "max_pool") + ("1d" if oned else "2d")
        if fn.startswith("avg"):
            cip = rng.random() < 0.5
            return ([x], f"F.{fn}(A, {k}, {{stride={st}, padding={pd}, ceil_mode={fnum(cm)}, count_include_pad={fnum(cip)}}})",
                    f"F.{fn}(A, {k}, stride={st}, padding={pd}, ceil_mode={cm}, count_include_pad={cip})", True, 8)
        dl = rng.randint(1, 3)
        return ([x], f"F.{fn}(A, {k}, {{stride={st}, padding={pd}, dilation={dl}, ceil_mode={fnum(cm)}}})",
                f"F.{fn}(A, {k}, stride={st}, padding={pd}, dilation={dl}, ceil_mode={cm})", True, 1)
    if nm in ("interp_scale", "interp_lin"):
        if nm == "interp_lin":
            x = Operand(rng, [1, rng.randint(1, 2), rng.randint(2, 9)], dt)
            mode = rng.choice(["linear", "nearest", "nearest-exact", "area"])
        else:
            x = Operand(rng, [rng.randint(1, 2), rng.randint(1, 2), rng.randint(2, 7), rng.randint(2, 7)], dt)
            mode = rng.choice(["nearest", "bilinear", "nearest-exact", "area", "bicubic"])
        sf = rng.choice([0.5, 1.5, 2.0, 2.5, 3.0, 0.75])
        if mode in ("linear", "bilinear", "bicubic"):
            ac = rng.random() < 0.5
            return ([x], f"F.interpolate(A, {{scale_factor={sf}, mode='{mode}', align_corners={fnum(ac)}}})",
                    f"F.interpolate(A, scale_factor={sf}, mode='{mode}', align_corners={ac})", True, 64)
        if mode == "area":
            return ([x], f"F.interpolate(A, {{scale_factor={sf}, mode='{mode}'}})",
                    f"F.interpolate(A, scale_factor={sf}, mode='{mode}')", True, 16)
        return ([x], f"F.interpolate(A, {{scale_factor={sf}, mode='{mode}'}})",
                f"F.interpolate(A, scale_factor={sf}, mode='{mode}')", True, 1)
    if nm == "adaptive":
        fn = rng.choice(["adaptive_avg_pool2d", "adaptive_max_pool2d", "adaptive_avg_pool1d", "adaptive_max_pool1d"])
        if fn.endswith("1d"):
            x = Operand(rng, [rng.randint(1, 2), rng.randint(1, 3), rng.randint(1, 13)], dt)
            o = rng.randint(1, 7)
            return [x], f"F.{fn}(A, {o})", f"F.{fn}(A, {o})", True, 8
        x = Operand(rng, [rng.randint(1, 2), rng.randint(1, 3), rng.randint(1, 9), rng.randint(1, 9)], dt)
        o = [rng.randint(1, 5), rng.randint(1, 5)]
        return [x], f"F.{fn}(A, {llist(o)})", f"F.{fn}(A, {o})", True, 8
    if nm == "pixel_shuffle":
        r = rng.randint(1, 3)
        x = Operand(rng, [rng.randint(1, 2), r * r * rng.randint(1, 2), rng.randint(1, 3), rng.randint(1, 3)], dt)
        return [x], f"F.pixel_shuffle(A, {r})", f"F.pixel_shuffle(A, {r})", True, 1
    if nm in ("unfold", "fold"):
        k = [rng.randint(1, 3), rng.randint(1, 3)]
        dl, pd, st = rng.randint(1, 2), rng.randint(0, 1), rng.randint(1, 2)
        hw = [rng.randint(3, 7), rng.randint(3, 7)]
        if nm == "unfold":
            x = Operand(rng, [rng.randint(1, 2), rng.randint(1, 2)] + hw, dt)
            return ([x], f"F.unfold(A, {llist(k)}, {{dilation={dl}, padding={pd}, stride={st}}})",
                    f"F.unfold(A, {k}, dilation={dl}, padding={pd}, stride={st})", True, 1)
        c = rng.randint(1, 2)
        L_ = 1
        for i in range(2):
            L_ *= (hw[i] + 2 * pd - dl * (k[i] - 1) - 1) // st + 1
        if L_ <= 0:
            return [Operand(rng, [2], dt)], "A:sum()", "A.sum()", True, 8
        x = Operand(rng, [1, c * k[0] * k[1], L_], dt)
        return ([x], f"F.fold(A, {llist(hw)}, {llist(k)}, {{dilation={dl}, padding={pd}, stride={st}}})",
                f"F.fold(A, {hw}, {k}, dilation={dl}, padding={pd}, stride={st})", True, 8)
    if nm == "conv_t":
        nd = rng.choice([1, 2])
        g = rng.choice([1, 2])
        cin, cout = g * rng.randint(1, 2), g * rng.randint(1, 2)
        ks = [rng.randint(1, 3) for _ in range(nd)]
        st, pd, dl = rng.randint(1, 2), rng.randint(0, 1), rng.randint(1, 2)
        op_ = rng.randint(0, max(st, dl) - 1)
        x = Operand(rng, [rng.randint(1, 2), cin] + [rng.randint(2, 5) for _ in range(nd)], dt)
        w = Operand(rng, [cin, cout // g] + ks, dt)
        b = Operand(rng, [cout], dt)
        fn = f"conv_transpose{nd}d"
        return ([x, w, b], f"F.{fn}(A, B, C, {{stride={st}, padding={pd}, output_padding={op_}, groups={g}, dilation={dl}}})",
                f"F.{fn}(A, B, C, stride={st}, padding={pd}, output_padding={op_}, groups={g}, dilation={dl})", True, 64)
    if nm in ("batch_norm", "instance_norm"):
        c = rng.randint(1, 3)
        x = Operand(rng, [rng.randint(2, 4), c] + [rng.randint(1, 4) for _ in range(rng.randint(1, 2))], dt)
        w, b = Operand(rng, [c], dt), Operand(rng, [c], dt)
        if nm == "batch_norm":
            rm = Operand(rng, [c], "fp32", views=False)
            rv = Operand(rng, [c], "fp32", kind="pos", views=False)
            rm.nograd = rv.nograd = True
            tr = rng.random() < 0.5
            return ([x, w, b, rm], f"F.batch_norm(A, D:clone(), D:abs() + 0.5, B, C, {fnum(tr)}, 0.1, 1e-5)",
                    f"F.batch_norm(A, D.clone(), D.abs() + 0.5, B, C, {tr}, 0.1, 1e-5)", True, 64)
        return [x, w, b], "F.instance_norm(A, nil, nil, B, C)", "F.instance_norm(A, None, None, B, C)", True, 64
    if nm == "normalize":
        x = Operand(rng, rshape(rng, rng.randint(1, 3), allow0=False), dt)
        d = rng.randint(-len(x.shape), len(x.shape) - 1)
        p = rng.choice([1, 2])
        return [x], f"F.normalize(A, {{p={p}, dim={L(d)}}})", f"F.normalize(A, p={p}, dim={d})", True, 16
    if nm == "cos_sim":
        s = rshape(rng, rng.randint(1, 3), allow0=False)
        x, y = Operand(rng, s, dt), Operand(rng, bcast_partner(rng, s)[-len(s):], dt)
        if len(y.shape) < len(s) or any(a not in (1, b) for a, b in zip(y.shape, s)):
            y = Operand(rng, s, dt)
        d = rng.randint(-len(s), len(s) - 1)
        return [x, y], f"F.cosine_similarity(A, B, {L(d)})", f"F.cosine_similarity(A, B, {d})", True, 16
    if nm == "rms_norm":
        s = rshape(rng, rng.randint(1, 3), allow0=False)
        k = rng.randint(1, len(s))
        x, w = Operand(rng, s, dt), Operand(rng, s[-k:], dt)
        return [x, w], f"F.rms_norm(A, {llist(s[-k:])}, B, 1e-6)", f"F.rms_norm(A, {s[-k:]}, B, 1e-6)", True, 64
    if nm == "glu":
        s = rshape(rng, rng.randint(1, 3), allow0=False)
        d = rng.randrange(len(s))
        s[d] *= 2
        x = Operand(rng, s, dt)
        return [x], f"F.glu(A, {L(d)})", f"F.glu(A, {d})", True, 8
    s = rshape(rng, rng.randint(1, 3), allow0=False)
    x = Operand(rng, s, dt)
    d = rng.randint(-len(s), len(s) - 1)
    return [x], f"F.softmin(A, {L(d)})", f"F.softmin(A, {d})", True, 16


@op("misc")
def _misc(rng):
    nm = rng.choice(["pow_s", "clamp_t", "where_mixed", "where_scalar", "cmp_mixed", "lerp_s", "addcdiv_b",
                     "sum_dtype", "mean_bf16_big", "prod_zero", "cumprod_zero", "logsumexp_inf", "norm_inf",
                     "softmax_neg_inf", "cumsum_rev", "trapz"])
    dt = rdtype(rng)
    if nm == "pow_s":
        e = rng.choice([0.0, 0.5, 1.0, 2.0, 3.0, -1.0, -2.0, -0.5, 1.5, 4.0, 0.25, -3.0])
        a = Operand(rng, rshape(rng), dt, kind=rng.choice(["n", "pos", "special"]))
        return [a], f"A:pow({fnum(e)})", f"A.pow({e})", True, 8
    if nm == "clamp_t":
        s = rshape(rng)
        a = Operand(rng, s, dt)
        lo = Operand(rng, bcast_partner(rng, s)[-len(s):] if s else [], dt)
        if len(lo.shape) > len(s) or any(x not in (1, y) for x, y in zip(lo.shape[::-1], s[::-1])):
            lo = Operand(rng, s, dt)
        hi = Operand(rng, s, dt)
        hi.vals = [abs(v) + 0.1 for v in hi.vals]
        return [a, lo, hi], "A:clamp(B, C)", "A.clamp(B, C)", True, 1
    if nm == "where_mixed":
        s = rshape(rng)
        c = Operand(rng, s, "fp32", kind="mask")
        a = Operand(rng, s, "bf16")
        b = Operand(rng, s, rng.choice(["fp32", "fp16"]))
        return [c, a, b], "fp8.where(A, B, C)", "torch.where(A != 0, B, C)", True, 1
    if nm == "where_scalar":
        s = rshape(rng)
        c = Operand(rng, s, "fp32", kind="mask")
        a = Operand(rng, s, dt)
        return [c, a], "fp8.where(A, B, -1.5)", "torch.where(A != 0, B, -1.5)", True, 1
    if nm == "cmp_mixed":
        s = rshape(rng)
        a = Operand(rng, s, "bf16", kind="int")
        b = Operand(rng, bcast_partner(rng, s), "fp32", kind="int")
        op_ = rng.choice(["eq", "lt", "ge", "ne"])
        return [a, b], f"A:{op_}(B)", f"A.{op_}(B).float()", False, 1
    if nm == "lerp_s":
        s = rshape(rng)
        a, b = Operand(rng, s, dt), Operand(rng, bcast_partner(rng, s), dt)
        w = rng.choice([0.0, 0.25, 0.5, 0.75, 1.0])
        return [a, b], f"A:lerp(B, {fnum(w)})", f"A.lerp(B, {w})", True, 4
    if nm == "addcdiv_b":
        s = rshape(rng)
        a, b, c = Operand(rng, s, dt), Operand(rng, bcast_partner(rng, s), dt), Operand(rng, s, dt, kind="pos")
        return [a, b, c], "A:addcdiv(B, C, -2)", "A.addcdiv(B, C, value=-2)", True, 4
    if nm == "mean_bf16_big":
        a = Operand(rng, [rng.randint(1, 3), rng.choice([100, 257, 1000])], rng.choice(["bf16", "fp16"]))
        d = rng.choice([0, 1, -1])
        return [a], f"A:mean({L(d)})", f"A.mean({d})", True, 4
    if nm == "sum_dtype":
        a = Operand(rng, [rng.randint(1, 3), rng.choice([100, 257, 1000])], rng.choice(["bf16", "fp16"]))
        return [a], "A:sum(2)", "A.sum(1)", True, 4
    if nm in ("prod_zero", "cumprod_zero"):
        s = rshape(rng, rng.randint(1, 3), allow0=False)
        a = Operand(rng, s, dt)
        for _ in range(rng.randint(1, 2)):
            a.vals[rng.randrange(len(a.vals))] = 0.0
        d = rng.randint(-len(s), len(s) - 1)
        if nm == "prod_zero":
            return [a], f"A:prod({L(d)})", f"A.prod({d})", True, 16
        return [a], f"A:cumprod({L(d)})", f"A.cumprod({d})", True, 16
    if nm == "logsumexp_inf":
        s = rshape(rng, rng.randint(1, 3), allow0=False)
        a = Operand(rng, s, dt)
        for _ in range(rng.randint(1, 3)):
            a.vals[rng.randrange(len(a.vals))] = rng.choice([-math.inf, math.inf])
        d = rng.randint(-len(s), len(s) - 1)
        return [a], f"A:logsumexp({L(d)})", f"A.logsumexp({d})", True, 8
    if nm == "norm_inf":
        s = rshape(rng, rng.randint(1, 3), allow0=False)
        a = Operand(rng, s, dt, kind="int")
        d = rng.randint(-len(s), len(s) - 1)
        return [a], f"A:norm(math.huge, {L(d)})", f"A.norm(float('inf'), {d})", True, 1
    if nm == "softmax_neg_inf":
        s = rshape(rng, rng.randint(1, 3), allow0=False)
        a = Operand(rng, s, dt)
        for _ in range(rng.randint(1, 4)):
            a.vals[rng.randrange(len(a.vals))] = -math.inf
        d = rng.randint(-len(s), len(s) - 1)
        f = rng.choice(["softmax", "log_softmax"])
        return [a], f"A:{f}({L(d)})", f"A.{f}({d})", True, 8
    if nm == "cumsum_rev":
        s = rshape(rng, rng.randint(1, 3), allow0=False)
        a = Operand(rng, s, dt)
        d = rng.randint(-len(s), len(s) - 1)
        return [a], f"A:flip({L(d)}):cumsum({L(d)}):flip({L(d)})", f"A.flip({d}).cumsum({d}).flip({d})", True, 16
    s = rshape(rng, rng.randint(1, 3), allow0=False)
    a = Operand(rng, s, dt)
    d = rng.randint(-len(s), len(s) - 1)
    return [a], f"fp8.diff(A, 1, {L(d)}):sum()", f"torch.diff(A, 1, {d}).sum()", True, 8


@op("stats")
def _stats(rng):
    dt = rdtype(rng)
    nm = rng.choice(["quantile", "cov", "corrcoef", "nan_to_num", "logit", "sinc", "searchsorted", "bucketize",
                     "renorm", "cummax_sp", "frac", "heaviside", "logaddexp2", "float_power", "nanquantile",
                     "var_mean", "dist", "cdist_p", "unique", "bincount", "isin", "clamp_min_t"])
    if nm == "nanquantile":  # not offered by fp8lab
        nm = "quantile"
    if nm == "quantile":
        s = rshape(rng, rng.randint(1, 3), allow0=False)
        a = Operand(rng, s, "fp32", kind="special" if nm == "nanquantile" else "n")
        q = rng.choice([0.0, 0.25, 0.5, 0.9, 1.0, 0.333])
        it = rng.choice(["linear", "lower", "higher", "nearest", "midpoint"])
        d = rng.randint(-len(s), len(s) - 1)
        k = rng.random() < 0.5
        return ([a], f"fp8.{nm}(A, {q}, {L(d)}, {{keepdim={fnum(k)}, interpolation='{it}'}})",
                f"torch.{nm}(A, {q}, {d}, {k}, interpolation='{it}')", True, 8)
    if nm in ("cov", "corrcoef"):
        a = Operand(rng, [rng.randint(1, 4), rng.randint(2, 6)], "fp32")
        return [a], f"fp8.{nm}(A)", f"torch.{nm}(A)", True, 64
    if nm == "nan_to_num":
        a = Operand(rng, rshape(rng), dt, kind="special")
        return [a], "A:nan_to_num(0.5, 100, -100)", "A.nan_to_num(0.5, 100, -100)", True, 1
    if nm == "logit":
        a = Operand(rng, rshape(rng), "fp32", kind="pos")
        a.vals = [v / 3.5 for v in a.vals]
        e = rng.choice([None, 0.1])
        return [a], f"A:logit({'' if e is None else e})", f"A.logit({'' if e is None else e})", True, 16
    if nm in ("sinc", "frac"):
        a = Operand(rng, rshape(rng), dt, kind="special")
        return [a], f"A:{nm}()", f"A.{nm}()", True, 8
    if nm in ("heaviside", "logaddexp2", "float_power", "clamp_min_t"):
        s = rshape(rng)
        a = Operand(rng, s, "fp32", kind="special" if nm != "float_power" else "pos")
        b = Operand(rng, bcast_partner(rng, s), "fp32", kind="special" if nm != "float_power" else "n")
        if nm == "float_power":
            return [a, b], "A:float_power(B)", "A.float_power(B).float()", True, 8
        if nm == "clamp_min_t":
            return [a, b], "A:clamp_min(B)", "A.clamp_min(B)", True, 1
        return [a, b], f"A:{nm}(B)", f"A.{nm}(B)", nm != "heaviside", 8
    if nm in ("searchsorted", "bucketize"):
        sorted_ = Operand(rng, [rng.randint(1, 9)], "fp32", views=False)
        sorted_.vals = sorted(sorted_.vals)
        sorted_.nograd = True
        v = Operand(rng, rshape(rng, rng.randint(0, 2)), "fp32", kind="int")
        v.nograd = True
        r = rng.random() < 0.5
        if nm == "searchsorted":
            return [sorted_, v], f"fp8.searchsorted(A, B, {{right={fnum(r)}}})", f"torch.searchsorted(A, B, right={r}).float()", False, 1
        return [v, sorted_], f"fp8.bucketize(A, B, {{right={fnum(r)}}})", f"torch.bucketize(A, B, right={r}).float()", False, 1
    if nm == "renorm":
        a = Operand(rng, [rng.randint(1, 4), rng.randint(1, 4)], "fp32")
        return [a], "fp8.renorm(A, 2, 1, 1.0)", "torch.renorm(A, 2, 0, 1.0)", True, 16
    if nm == "cummax_sp":
        s = rshape(rng, rng.randint(1, 2), allow0=False)
        a = Operand(rng, s, "fp32", kind="special")
        d = rng.randint(-len(s), len(s) - 1)
        return [a], f"{{A:cummax({L(d)})}}", f"tuple(A.cummax({d}))", True, 1
    if nm == "var_mean":
        s = rshape(rng, rng.randint(1, 3), allow0=False)
        a = Operand(rng, s, dt)
        d = rng.randint(-len(s), len(s) - 1)
        return [a], f"{{fp8.var_mean(A, {L(d)})}}", f"tuple(torch.var_mean(A, {d}))", True, 16
    if nm == "dist":
        s = rshape(rng)
        a, b = Operand(rng, s, "fp32"), Operand(rng, bcast_partner(rng, s), "fp32")
        p = rng.choice([1, 2, 3, 0.5])
        return [a, b], f"fp8.dist(A, B, {p})", f"torch.dist(A, B, {p})", True, 16
    if nm == "cdist_p":
        m, n, k = rng.randint(1, 4), rng.randint(1, 4), rng.randint(1, 5)
        p = rng.choice([1.0, 3.0, 0.5])
        return ([Operand(rng, [m, k], "fp32"), Operand(rng, [n, k], "fp32")], f"fp8.cdist(A, B, {p})",
                f"torch.cdist(A, B, {p})", True, 32)
    if nm == "unique":
        a = Operand(rng, rshape(rng, rng.randint(1, 2)), "fp32", kind="int")
        return [a], "{fp8.unique(A, {return_inverse=true, return_counts=true})}", "tuple(x.float() for x in torch.unique(A, return_inverse=True, return_counts=True))", False, 1
    if nm == "bincount":
        a = Operand(rng, [rng.randint(0, 9)], "fp32", kind="int")
        a.vals = [abs(v) for v in a.vals]
        return [a], "fp8.bincount(A)", "torch.bincount(A.long()).float()", False, 1
    a = Operand(rng, rshape(rng), "fp32", kind="int")
    b = Operand(rng, [rng.randint(1, 5)], "fp32", kind="int")
    return [a, b], "fp8.isin(A, B)", "torch.isin(A, B).float()", False, 1


@op("nn3")
def _nn3(rng):
    dt = rng.choice(["fp32", "fp32", "bf16"])
    nm = rng.choice(["sdpa", "sdpa_mask", "linear", "bilinear", "ce_all", "nll_all", "gauss", "poisson", "smooth_beta",
                     "huber_delta", "margin", "triplet", "cos_emb", "hinge", "soft_margin", "pairwise", "bce",
                     "multi_margin", "emb_bag", "one_hot_ce", "mse_bcast", "log_softmax_nll"])
    if nm in ("sdpa", "sdpa_mask"):
        b, h, tq, tk, d = rng.randint(1, 2), rng.randint(1, 3), rng.randint(1, 5), rng.randint(1, 5), rng.randint(1, 8)
        q, k, v = Operand(rng, [b, h, tq, d], dt), Operand(rng, [b, h, tk, d], dt), Operand(rng, [b, h, tk, d], dt)
        if nm == "sdpa":
            c = rng.random() < 0.5
            sc = rng.choice([None, 0.3])
            scl, scp = ("", "") if sc is None else (f", scale={sc}", f", scale={sc}")
            return ([q, k, v], f"F.scaled_dot_product_attention(A, B, C, {{is_causal={fnum(c)}{scl}}})",
                    f"F.scaled_dot_product_attention(A, B, C, is_causal={c}{scp})", True, 64)
        m = Operand(rng, bcast_partner(rng, [b, h, tq, tk])[-2:], dt)
        m.nograd = True
        return ([q, k, v, m], "F.scaled_dot_product_attention(A, B, C, {attn_mask=D})",
                "F.scaled_dot_product_attention(A, B, C, attn_mask=D)", True, 64)
    if nm == "linear":
        s = rshape(rng, rng.randint(1, 3), allow0=False)
        o = rng.randint(1, 5)
        x, w, bb = Operand(rng, s, dt), Operand(rng, [o, s[-1]], dt), Operand(rng, [o], dt)
        if rng.random() < 0.3:
            return [x, w], "F.linear(A, B)", "F.linear(A, B)", True, 32
        return [x, w, bb], "F.linear(A, B, C)", "F.linear(A, B, C)", True, 32
    if nm == "bilinear":
        n, i1, i2, o = rng.randint(1, 3), rng.randint(1, 3), rng.randint(1, 3), rng.randint(1, 3)
        return ([Operand(rng, [n, i1], "fp32"), Operand(rng, [n, i2], "fp32"), Operand(rng, [o, i1, i2], "fp32"),
                 Operand(rng, [o], "fp32")], "F.bilinear(A, B, C, D)", "F.bilinear(A, B, C, D)", True, 32)
    red = rng.choice(["mean", "sum", "none"])
    if nm in ("ce_all", "nll_all", "log_softmax_nll"):
        nb, c = rng.randint(1, 6), rng.randint(2, 5)
        x = Operand(rng, [nb, c], dt)
        t = Operand(rng, [nb], "fp32")
        ig = rng.randrange(c)
        t.vals = [float(rng.randrange(c)) for _ in t.vals]
        t.nograd = True
        w = Operand(rng, [c], dt, kind="pos", views=False)
        w.nograd = True
        if nm == "ce_all":
            ls = rng.choice([0.0, 0.25])
            return ([x, t, w], f"F.cross_entropy(A, B, {{weight=C, ignore_index={ig}, reduction='{red}', label_smoothing={ls}}})",
                    f"F.cross_entropy(A, B.long(), weight=C, ignore_index={ig}, reduction='{red}', label_smoothing={ls})", True, 16)
        if nm == "log_softmax_nll":
            return ([x, t], f"F.nll_loss(F.log_softmax(A, 2), B, {{reduction='{red}'}})",
                    f"F.nll_loss(F.log_softmax(A, 1), B.long(), reduction='{red}')", True, 16)
        return ([x, t, w], f"F.nll_loss(A, B, {{weight=C, ignore_index={ig}, reduction='{red}'}})",
                f"F.nll_loss(A, B.long(), weight=C, ignore_index={ig}, reduction='{red}')", True, 16)
    s = rshape(rng, rng.randint(1, 3), allow0=False)
    if nm == "gauss":
        x, y, v = Operand(rng, s, dt), Operand(rng, s, dt), Operand(rng, s, dt, kind="pos")
        f = rng.random() < 0.5
        return ([x, y, v], f"F.gaussian_nll_loss(A, B, C, {{full={fnum(f)}, reduction='{red}'}})",
                f"F.gaussian_nll_loss(A, B, C, full={f}, reduction='{red}')", True, 16)
    if nm == "poisson":
        li = rng.random() < 0.5
        x, y = Operand(rng, s, dt, kind="n" if li else "pos"), Operand(rng, s, dt, kind="pos")
        f = rng.random() < 0.5
        return ([x, y], f"F.poisson_nll_loss(A, B, {{log_input={fnum(li)}, full={fnum(f)}, reduction='{red}'}})",
                f"F.poisson_nll_loss(A, B, log_input={li}, full={f}, reduction='{red}')", True, 16)
    if nm in ("smooth_beta", "huber_delta"):
        x, y = Operand(rng, s, dt), Operand(rng, s, dt)
        p = rng.choice([0.5, 1.0, 2.0, 0.0]) if nm == "smooth_beta" else rng.choice([0.5, 1.0, 2.0])
        fn, k = ("smooth_l1_loss", "beta") if nm == "smooth_beta" else ("huber_loss", "delta")
        return [x, y], f"F.{fn}(A, B, {{{k}={p}, reduction='{red}'}})", f"F.{fn}(A, B, {k}={p}, reduction='{red}')", True, 16
    if nm == "mse_bcast":
        x, y = Operand(rng, s, dt), Operand(rng, s, dt)
        return [x, y], f"F.mse_loss(A, B, {{reduction='{red}'}})", f"F.mse_loss(A, B, reduction='{red}')", True, 16
    if nm == "bce":
        x, y = Operand(rng, s, dt, kind="pos"), Operand(rng, s, dt, kind="mask")
        x.vals = [v / 3.2 for v in x.vals]
        y.nograd = False
        return [x, y], f"F.binary_cross_entropy(A, B, {{reduction='{red}'}})", f"F.binary_cross_entropy(A, B, reduction='{red}')", True, 16
    if nm in ("margin", "cos_emb", "hinge", "soft_margin"):
        n = rng.randint(1, 5)
        y = Operand(rng, [n], "fp32")
        y.vals = [rng.choice([1.0, -1.0]) for _ in y.vals]
        y.nograd = True
        if nm == "margin":
            m = rng.choice([0.0, 0.5])
            return ([Operand(rng, [n], dt), Operand(rng, [n], dt), y], f"F.margin_ranking_loss(A, B, C, {{margin={m}, reduction='{red}'}})",
                    f"F.margin_ranking_loss(A, B, C, margin={m}, reduction='{red}')", True, 8)
        if nm == "cos_emb":
            d = rng.randint(1, 4)
            return ([Operand(rng, [n, d], "fp32"), Operand(rng, [n, d], "fp32"), y], f"F.cosine_embedding_loss(A, B, C, {{margin=0.2, reduction='{red}'}})",
                    f"F.cosine_embedding_loss(A, B, C, margin=0.2, reduction='{red}')", True, 16)
        if nm == "hinge":
            return ([Operand(rng, [n], dt), y], f"F.hinge_embedding_loss(A, B, {{margin=0.7, reduction='{red}'}})",
                    f"F.hinge_embedding_loss(A, B, margin=0.7, reduction='{red}')", True, 8)
        return ([Operand(rng, [n], dt), y], f"F.soft_margin_loss(A, B, {{reduction='{red}'}})",
                f"F.soft_margin_loss(A, B, reduction='{red}')", True, 16)
    if nm in ("triplet", "pairwise"):
        n, d = rng.randint(1, 4), rng.randint(1, 5)
        a, p_, q_ = Operand(rng, [n, d], "fp32"), Operand(rng, [n, d], "fp32"), Operand(rng, [n, d], "fp32")
        if nm == "pairwise":
            pp = rng.choice([1.0, 2.0, 3.0])
            k = rng.random() < 0.5
            return [a, p_], f"F.pairwise_distance(A, B, {pp}, 1e-6, {fnum(k)})", f"F.pairwise_distance(A, B, {pp}, 1e-6, {k})", True, 16
        sw = rng.random() < 0.5
        return ([a, p_, q_], f"F.triplet_margin_loss(A, B, C, {{margin=1.0, p=2, swap={fnum(sw)}, reduction='{red}'}})",
                f"F.triplet_margin_loss(A, B, C, margin=1.0, p=2, swap={sw}, reduction='{red}')", True, 16)
    if nm == "multi_margin":
        n, c = rng.randint(1, 4), rng.randint(2, 5)
        t = Operand(rng, [n], "fp32")
        t.vals = [float(rng.randrange(c)) for _ in t.vals]
        t.nograd = True
        p = rng.choice([1, 2])
        return ([Operand(rng, [n, c], "fp32"), t], f"F.multi_margin_loss(A, B, {{p={p}, reduction='{red}'}})",
                f"F.multi_margin_loss(A, B.long(), p={p}, reduction='{red}')", True, 16)
    if nm == "emb_bag":
        w = Operand(rng, [rng.randint(2, 6), rng.randint(1, 4)], "fp32")
        idx = Operand(rng, [rng.randint(1, 8)], "fp32", views=False)
        idx.vals = [float(rng.randrange(w.shape[0])) for _ in idx.vals]
        idx.nograd = True
        nb = rng.randint(1, 3)
        offs = sorted(rng.sample(range(len(idx.vals)), min(nb, len(idx.vals))))
        offs[0] = 0
        o = Operand(rng, [len(offs)], "fp32", views=False)
        o.vals = [float(v) for v in offs]
        o.nograd = True
        mode = rng.choice(["sum", "mean", "max"])
        return ([idx, w, o], f"F.embedding_bag(A, B, C, {{mode='{mode}'}})",
                f"F.embedding_bag(A.long(), B, C.long(), mode='{mode}')", True, 8)
    n, c = rng.randint(1, 4), rng.randint(2, 5)
    t = Operand(rng, [n], "fp32")
    t.vals = [float(rng.randrange(c)) for _ in t.vals]
    t.nograd = True
    return [t], f"F.one_hot(A, {c})", f"F.one_hot(A.long(), {c}).float()", False, 1


@op("inplace2")
def _inplace2(rng):
    s = rshape(rng, rng.randint(1, 3), allow0=False)
    a = Operand(rng, s, rdtype(rng))
    n = len(s)
    d = rng.randint(-n, n - 1)
    dd = d % n
    nm = rng.choice(["index_add_", "index_fill_", "index_copy_", "scatter_", "scatter_add_", "add_alpha", "lerp_",
                     "fill_", "zero_", "mul_s", "copy_t"])
    if nm in ("index_add_", "index_copy_"):
        k = rng.randint(1, s[dd])
        idx = Operand(rng, [k], "fp32", views=False)
        idx.vals = [float(v) for v in rng.sample(range(s[dd]), k)]
        idx.nograd = True
        ssz = list(s)
        ssz[dd] = k
        src = Operand(rng, ssz, a.dtype)
        return [a, idx, src], ("INPLACE", f"V:{nm}({L(d)}, B, C)"), ("INPLACE", f"V.{nm}({d}, B.long(), C)"), False, 2
    if nm == "index_fill_":
        idx = Operand(rng, [rng.randint(1, 3)], "fp32", views=False)
        idx.vals = [float(rng.randrange(s[dd])) for _ in idx.vals]
        idx.nograd = True
        return [a, idx], ("INPLACE", f"V:index_fill_({L(d)}, B, -3.5)"), ("INPLACE", f"V.index_fill_({d}, B.long(), -3.5)"), False, 1
    if nm in ("scatter_", "scatter_add_"):
        isz = list(s)
        isz[dd] = rng.randint(1, s[dd])
        other = [x for i, x in enumerate(isz) if i != dd]
        rows = 1
        for x in other:
            rows *= x
        perm = [rng.sample(range(s[dd]), isz[dd]) for _ in range(rows)]
        pi = torch.tensor(perm, dtype=torch.float32).reshape(other + [isz[dd]]).movedim(-1, dd).contiguous()
        idx = Operand(rng, isz, "fp32", views=False)
        idx.vals = pi.reshape(-1).tolist()
        idx.nograd = True
        src = Operand(rng, isz, a.dtype)
        return [a, idx, src], ("INPLACE", f"V:{nm}({L(d)}, B, C)"), ("INPLACE", f"V.{nm}({d}, B.long(), C)"), False, 2
    b = Operand(rng, s, a.dtype)
    if nm == "add_alpha":
        return [a, b], ("INPLACE", "V:add_(B, 0.37)"), ("INPLACE", "V.add_(B, alpha=0.37)"), False, 4
    if nm == "lerp_":
        return [a, b], ("INPLACE", "V:lerp_(B, 0.3)"), ("INPLACE", "V.lerp_(B, 0.3)"), False, 4
    if nm == "fill_":
        return [a, b], ("INPLACE", "V:fill_(2.5)"), ("INPLACE", "V.fill_(2.5)"), False, 1
    if nm == "zero_":
        return [a, b], ("INPLACE", "V:zero_()"), ("INPLACE", "V.zero_()"), False, 1
    if nm == "mul_s":
        return [a, b], ("INPLACE", "V:mul_(-1.5)"), ("INPLACE", "V.mul_(-1.5)"), False, 1
    if nm == "copy_t":
        c = Operand(rng, s[::-1], rdtype(rng))
        perm = list(range(n))[::-1]
        return ([a, c], ("INPLACE", "V:copy_(B:permute(" + ", ".join(str(p + 1) for p in perm) + "))"),
                ("INPLACE", f"V.copy_(B.permute({perm}))"), False, 1)
    c = Operand(rng, s, a.dtype)
    return [a, b, c], ("INPLACE", "V:addcmul_(B, C, 0.5)"), ("INPLACE", "V.addcmul_(B, C, value=0.5)"), False, 4


@op("nn4")
def _nn4(rng):
    dt = rng.choice(["fp32", "fp32", "bf16"])
    nm = rng.choice(["trilinear", "area3", "avg_div", "max_idx", "adaptive_odd", "interp_size1", "lrn", "pixel_un",
                     "conv1d_same_even", "max_pool1d_ceil", "celu", "prelu", "hardshrink", "logsigmoid"])
    if nm == "trilinear":
        x = Operand(rng, [1, rng.randint(1, 2), rng.randint(1, 4), rng.randint(1, 4), rng.randint(1, 4)], dt)
        sz = [rng.randint(1, 6) for _ in range(3)]
        ac = rng.random() < 0.5
        return ([x], f"F.interpolate(A, {{size={llist(sz)}, mode='trilinear', align_corners={fnum(ac)}}})",
                f"F.interpolate(A, size={sz}, mode='trilinear', align_corners={ac})", True, 64)
    if nm == "area3":
        x = Operand(rng, [1, rng.randint(1, 2), rng.randint(1, 9), rng.randint(1, 9)], dt)
        sz = [rng.randint(1, 7), rng.randint(1, 7)]
        return [x], f"F.interpolate(A, {{size={llist(sz)}, mode='area'}})", f"F.interpolate(A, size={sz}, mode='area')", True, 16
    if nm == "interp_size1":
        x = Operand(rng, [1, 1, rng.randint(1, 3), rng.randint(1, 3)], dt)
        mode = rng.choice(["bilinear", "bicubic", "nearest"])
        sz = [rng.randint(1, 5), rng.randint(1, 5)]
        if mode == "nearest":
            return [x], f"F.interpolate(A, {{size={llist(sz)}}})", f"F.interpolate(A, size={sz})", True, 1
        return ([x], f"F.interpolate(A, {{size={llist(sz)}, mode='{mode}', align_corners=true}})",
                f"F.interpolate(A, size={sz}, mode='{mode}', align_corners=True)", True, 64)
    if nm == "avg_div":
        x = Operand(rng, [1, rng.randint(1, 2), rng.randint(3, 8), rng.randint(3, 8)], dt)
        k, dv = rng.randint(1, 3), rng.choice([1, 2, 5])
        return [x], f"F.avg_pool2d(A, {k}, {{divisor_override={dv}}})", f"F.avg_pool2d(A, {k}, divisor_override={dv})", True, 8
    if nm == "max_idx":
        x = Operand(rng, [1, rng.randint(1, 2), rng.randint(3, 8), rng.randint(3, 8)], dt)
        k, st, pd = rng.randint(2, 3), rng.randint(1, 2), rng.randint(0, 1)
        return ([x], f"{{F.max_pool2d(A, {k}, {{stride={st}, padding={pd}, return_indices=true}})}}",
                f"tuple(F.max_pool2d(A, {k}, stride={st}, padding={pd}, return_indices=True))", True, 1)
    if nm == "adaptive_odd":
        x = Operand(rng, [1, rng.randint(1, 2), rng.randint(1, 11), rng.randint(1, 11)], dt)
        o = [rng.randint(1, 12), rng.randint(1, 12)]
        fn = rng.choice(["adaptive_avg_pool2d", "adaptive_max_pool2d"])
        return [x], f"F.{fn}(A, {llist(o)})", f"F.{fn}(A, {o})", True, 8
    if nm == "lrn":
        x = Operand(rng, [rng.randint(1, 2), rng.randint(1, 6), rng.randint(1, 4)], "fp32")
        sz = rng.randint(1, 5)
        return [x], f"F.local_response_norm(A, {sz})", f"F.local_response_norm(A, {sz})", True, 32
    if nm == "pixel_un":
        r = rng.randint(1, 3)
        x = Operand(rng, [1, rng.randint(1, 2), r * rng.randint(1, 3), r * rng.randint(1, 3)], dt)
        return [x], f"F.pixel_unshuffle(A, {r})", f"F.pixel_unshuffle(A, {r})", True, 1
    if nm == "conv1d_same_even":
        k = rng.choice([2, 4])
        x = Operand(rng, [1, 2, rng.randint(3, 9)], dt)
        w = Operand(rng, [3, 2, k], dt)
        dl = rng.randint(1, 2)
        return [x, w], f"F.conv1d(A, B, nil, {{padding='same', dilation={dl}}})", f"F.conv1d(A, B, None, padding='same', dilation={dl})", True, 32
    if nm == "max_pool1d_ceil":
        x = Operand(rng, [1, 2, rng.randint(2, 12)], dt, kind="special")
        k, st = rng.randint(1, 4), rng.randint(1, 3)
        pd = rng.randint(0, k // 2)
        return ([x], f"F.max_pool1d(A, {k}, {{stride={st}, padding={pd}, ceil_mode=true}})",
                f"F.max_pool1d(A, {k}, stride={st}, padding={pd}, ceil_mode=True)", True, 1)
    x = Operand(rng, rshape(rng), dt, kind="special")
    if nm == "prelu":
        if len(x.shape) < 2:
            return [x], "F.celu(A)", "F.celu(A)", True, 8
        w = Operand(rng, [x.shape[1]], dt)
        return [x, w], "F.prelu(A, B)", "F.prelu(A, B)", True, 4
    if nm == "rrelu_eval":
        return [x], "F.rrelu(A, 0.1, 0.3, false)", "F.rrelu(A, 0.1, 0.3, False)", True, 4
    return [x], f"F.{nm}(A)", f"F.{nm}(A)", True, 8


# ---- running ---------------------------------------------------------------------------------------------------
NAMES = "ABCD"


def weight(i):  # the weights of the summed outputs, the same formula on both sides
    return ((i * 7919 + 3) % 17 - 8) / 4.0


LUA_PRELUDE = r'''
local F = fp8.nn.functional
local function W(n) local t = {} for i = 0, n - 1 do t[i + 1] = ((i * 7919 + 3) % 17 - 8) / 4.0 end return t end
local function emit(tag, t)
  local f = t:float():reshape(-1):totable()
  local out = {}
  for i = 1, #f do out[i] = string.format("%.9g", f[i]) end
  io.write(tag, " ", t:dtype(), " ", t:shape_str():gsub(" ", ""), " ", table.concat(out, ","), "\n")
end
local function as_list(r) if fp8.is_tensor(r) then return {r} end return r end
'''


def lua_case(i, ins, lexpr, diff):
    s = [f"do local ok, err = pcall(function()"]
    for k, a in enumerate(ins):
        s.append(a.lua_build(NAMES[k], diff and not a.nograd))
    if isinstance(lexpr, tuple):  # in place: a view of a clone of A0 written, the clone's values out
        s.append("local Z = fp8.no_grad(function() local Z = A0:clone() local V = Z" + "".join(ins[0].lua_views) +
                 " " + lexpr[1] + " return Z end)")
        s.append(f'emit("{i} out0", Z)')
    else:
        s.append(f"local R = as_list({lexpr})")
        s.append(f'for k, r in ipairs(R) do emit("{i} out" .. (k - 1), r) end')
        if diff:
            s.append("local tot")
            s.append("for k, r in ipairs(R) do if r:dtype() ~= 'int' and (DIFF[k]) then local n = r:numel() "
                     "local w = fp8.tensor(W(n > 0 and n or 1)):narrow(1, 1, n):reshape(r:shape()) "
                     "local t = (r:float() * w):sum() tot = tot and tot + t or t end end")
            s.append("if tot and tot.requires_grad then tot:backward() end")
            for k, a in enumerate(ins):
                s.append(f'if {NAMES[k]}0.grad then emit("{i} grad{k}", {NAMES[k]}0.grad) end')
    s.append(f'end) if not ok then io.write("{i} error ", (tostring(err):gsub("\\n", " ")), "\\n") end end')
    return "\n".join(s) + "\n"


def parse_lua(out):
    res = {}
    for line in out.splitlines():
        parts = line.split(" ", 3)
        if len(parts) < 2 or not parts[0].isdigit():
            continue
        i = int(parts[0])
        d = res.setdefault(i, {})
        if parts[1] == "error":
            d["error"] = line.split(" ", 2)[2] if len(line.split(" ", 2)) > 2 else ""
            continue
        dtype, shape = parts[2], parts[3].split(" ", 1)[0]
        vals = parts[3].split(" ", 1)[1] if " " in parts[3] else ""
        shp = [int(x) for x in shape.strip("[]").split(",") if x]
        v = [float(x) for x in vals.split(",") if x]
        d[parts[1]] = (dtype, shp, v)
    return res


TN = {torch.float32: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16"}


def run_torch(ins, pexpr, diff):
    F = torch.nn.functional  # noqa
    env = {"torch": torch, "F": torch.nn.functional}
    bases = []
    for k, a in enumerate(ins):
        g = diff and not a.nograd
        t, v = a.torch_build(g and not isinstance(pexpr, tuple))
        bases.append(t)
        env[NAMES[k]] = v
    if isinstance(pexpr, tuple):
        with torch.no_grad():
            Z = bases[0].clone()
            V = Z
            for p in ins[0].py_views:
                if p:
                    V = eval("V" + p)
            env["V"] = V
            env["B"] = env["B"]
            exec(pexpr[1], env)
        return {"out0": Z}, []
    r = eval(pexpr, env)
    rs = list(r) if isinstance(r, (tuple, list)) else [r]
    out = {f"out{k}": x for k, x in enumerate(rs)}
    if diff:
        tot = None
        for x in rs:
            if x.dtype.is_floating_point and x.requires_grad:
                n = x.numel()
                w = torch.tensor([weight(j) for j in range(max(n, 1))], dtype=torch.float32)[:n].reshape(x.shape)
                t = (x.float() * w).sum()
                tot = t if tot is None else tot + t
        if tot is not None:
            tot.backward()
            for k, b in enumerate(bases):
                if b.grad is not None:
                    out[f"grad{k}"] = b.grad
    return out, [x.dtype.is_floating_point for x in rs]


def close(got, want, dtype, tol):
    e = EPS.get(dtype, EPS["fp32"]) * tol
    scale = max([abs(w) for w in want if math.isfinite(w)] + [1.0])
    for k, (g, w) in enumerate(zip(got, want)):
        if math.isnan(w):
            if not math.isnan(g):
                return k
        elif math.isinf(w):
            if g != w:
                return k
        elif not (abs(g - w) <= e * (abs(w) + scale * 0.5) or g == w):
            return k
    return None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--ops", default="")
    ap.add_argument("--bin", default="build/fp8lab")
    ap.add_argument("--show", type=int, default=40)
    ap.add_argument("--strict-dtype", action="store_true", help="also report an fp32 result where torch keeps bf16/fp16"
                    " (documented for softmax, layer_norm, the losses, a 0-d fp32 operand)")
    ap.add_argument("--errors", action="store_true", help="also report cases where only one side raised")
    ap.add_argument("--dump", action="store_true", help="print each shown case's Lua code and torch inputs")
    ap.add_argument("--finite", action="store_true", help="no NaN, inf or signed zeros among the values")
    ap.add_argument("--big", action="store_true", help="a long dim in a third of the shapes")
    args = ap.parse_args()
    global BIG, FINITE
    BIG, FINITE = args.big, args.finite
    rng = random.Random(args.seed)
    names = args.ops.split(",") if args.ops else list(OPS)
    cases = []
    for i in range(args.n):
        nm = rng.choice(names)
        ins, lexpr, pexpr, diff, tol = OPS[nm](rng)
        if pexpr is None:
            continue
        cases.append((i, nm, ins, lexpr, pexpr, diff, tol))
    # torch first: which outputs are differentiable (floating) decides the Lua side's weighted sum
    tres = {}
    torch_odd = 0
    for (i, nm, ins, lexpr, pexpr, diff, tol) in cases:
        try:
            tres[i] = run_torch(ins, pexpr, diff)
        except Exception as ex:  # noqa
            tres[i] = ("error", str(ex).split("\n")[0])
            continue
        if isinstance(pexpr, str) and any(a.py_views for a in ins):
            # torch itself on contiguous operands: where the two differ (torch.median of an expanded row gave
            # another row's value in 2.15), the case says nothing about fp8lab and is left out
            try:
                saved = [(a.py_views, a.base, a.vals) for a in ins]
                for a in ins:
                    t = torch.tensor(a.vals, dtype=torch.float32).reshape(a.base)
                    for p in a.py_views:
                        if p:
                            t = eval("t" + p)
                    a.base, a.vals, a.py_views = list(t.shape), t.reshape(-1).tolist(), []
                alt = run_torch(ins, pexpr, False)[0]
                for a, (v, b, x) in zip(ins, saved):
                    a.py_views, a.base, a.vals = v, b, x
                for key, tv in alt.items():
                    w = tres[i][0][key].detach().double().reshape(-1).tolist()
                    g = tv.detach().double().reshape(-1).tolist()
                    wdt = max([a.dtype for a in ins], key=lambda d: EPS[d])
                    if close(g, w, wdt, tol) is not None:
                        torch_odd += 1
                        print(f"--- case {i} {nm}: torch differs from itself on contiguous operands: {pexpr}")
                        tres[i] = ("error", "torch inconsistent")
                        break
            except Exception:  # noqa
                pass
    script = [LUA_PRELUDE]
    for (i, nm, ins, lexpr, pexpr, diff, tol) in cases:
        fl = tres[i][1] if tres[i][0] != "error" else []
        script.append("DIFF = {" + ",".join("true" if f else "false" for f in fl) + "}\n")
        script.append(lua_case(i, ins, lexpr, diff))
    path = f"/tmp/diff_ops_{os.getpid()}.lua"
    with open(path, "w") as f:
        f.write("".join(script))
    p = subprocess.run([args.bin, path], capture_output=True, text=True)
    if p.returncode != 0:
        print("fp8lab failed:", p.stderr[-2000:])
    lres = parse_lua(p.stdout)
    bad = 0
    shown = 0
    for (i, nm, ins, lexpr, pexpr, diff, tol) in cases:
        t = tres[i]
        l = lres.get(i, {} if t[0] != "error" and not t[0] else {"error": "no output (crash?)"})
        msgs = []
        if t[0] == "error" or "error" in l:
            if (t[0] == "error") != ("error" in l) and (args.errors or t[0] == "error"):
                msgs.append(f"torch: {t[1] if t[0] == 'error' else 'ok'} | fp8lab: {l.get('error', 'ok')}")
            elif "error" in l and t[0] != "error":
                msgs.append(f"fp8lab error only: {l['error'][:300]}")
        else:
            tout = t[0]
            for key, tv in tout.items():
                if key not in l:
                    msgs.append(f"{key} missing in fp8lab")
                    continue
                ldt, lshp, lv = l[key]
                if list(tv.shape) != lshp:
                    msgs.append(f"{key} shape torch {list(tv.shape)} fp8lab {lshp}")
                    continue
                tdn = TN.get(tv.dtype, "idx")
                if key.startswith("out") and tdn != "idx" and tdn != ldt and (args.strict_dtype or ldt != "fp32"):
                    msgs.append(f"{key} dtype torch {tdn} fp8lab {ldt}")
                want = tv.detach().double().reshape(-1).tolist()
                dtv = tdn if tdn != "idx" else "fp32"
                worst_dt = max([a.dtype for a in ins], key=lambda d: EPS[d])
                k = close(lv, want, worst_dt if key.startswith("grad") else dtv, tol)
                if k is not None:
                    msgs.append(f"{key} [{k}] fp8lab {lv[k]!r} torch {want[k]!r}  (n={len(want)})")
            for key in l:
                if key != "error" and key not in tout:
                    msgs.append(f"{key} only in fp8lab")
        if msgs:
            bad += 1
            if shown < args.show:
                shown += 1
                print(f"--- case {i} {nm}: {lexpr if isinstance(lexpr, str) else lexpr[1]}")
                for k, a in enumerate(ins):
                    print(f"    {NAMES[k]}: {a.dtype} base {a.base} views {''.join(a.lua_views)} -> {a.shape}")
                for m in msgs:
                    print("    " + m)
                if args.dump:
                    print(lua_case(i, ins, lexpr, diff))
                    print("    torch:", pexpr, [(a.base, a.vals[:40], a.py_views) for a in ins])
    print(f"{len(cases)} cases, {bad} differ")


if __name__ == "__main__":
    main()
