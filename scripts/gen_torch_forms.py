#!/usr/bin/env python3
"""gen_torch_forms.py — writes tests/data/torch_forms_torch.lua: what PyTorch 2.x gives on fixed inputs for the tensor
ops of lua/fp8/torch_forms.lua, tensor_logic.lua and tensor_inplace.lua and the unary ops sin, cos, floor, ceil,
round, trunc, erf, log1p, expm1 (values in fp32 and bf16, and the gradient of the output weighted by a fixed tensor),
isnan/isinf/isfinite, the logical ops, all/any, logsumexp and norm (values and gradients, a zero row included), prod
and cumprod (values and gradients, zeros included), atan2, fmod and remainder (edge values, gradients), the pointwise
ops and reductions of tensor_math.lua, lerp (number and tensor weights; gradients), einsum (values and every
operand's gradient), dot, addmm, baddbmm, diagonal, diag, trace, addcmul, addcdiv, nan_to_num, logaddexp, xlogy,
logit, isclose, count_nonzero, movedim and unflatten (values and gradients) and the in-place methods' results, for
tests/spec/torch_forms_spec.lua to compare fp8's against.
Run from the repository root with a PyTorch 2.x:
    /opt/torch2/bin/python3 scripts/gen_torch_forms.py"""
import math

import torch
from torch_fixture import rows, write

X = [[0.5, -1.25, 2.5, 0.0], [-3.5, 0.75, 1.5, -0.5], [1e-3, -2e-3, 4.0, 8.25]]
G = [[1.0, -1.0, 0.5, 2.0], [0.25, 3.0, -0.5, 1.0], [-2.0, 1.0, 1.0, 0.5]]
Z = [[0.0, 0.0, 0.0, 0.0], [3.0, -4.0, 0.0, 12.0], [-1.0, 2.0, -2.0, 2.0]]   # a zero row, ties for the max
S = [float("nan"), float("inf"), float("-inf"), 0.0, -0.0, 2.0, -1e-40]
P = [0.0, 1.0, 0.0, -2.0, float("nan"), 0.0, 3.0]


out = {}
# each op on X mapped into its domain (torch_forms_spec.lua's DOMAIN): log1p of the magnitudes, log2 and log10 of the
# magnitudes + 0.5, asin and acos of X / 10
DOMAIN = {"log1p": lambda x: x.abs(), "log2": lambda x: x.abs() + 0.5, "log10": lambda x: x.abs() + 0.5,
          "asin": lambda x: x / 10, "acos": lambda x: x / 10}
for name in ("sin", "cos", "floor", "ceil", "round", "trunc", "erf", "log1p", "expm1", "tan", "asin", "acos", "atan",
             "sinh", "cosh", "log2", "log10", "exp2"):
    x = torch.tensor(X, requires_grad=True)
    dom = DOMAIN.get(name, lambda t: t)
    y = getattr(torch, name)(dom(x))
    (y * torch.tensor(G)).sum().backward()
    out[name] = rows(y)
    out[name + "_dx"] = rows(x.grad)
    xb = torch.tensor(X).bfloat16()
    out[name + "_bf16"] = rows(getattr(torch, name)(dom(xb)).float())
out["round_halves"] = rows(torch.round(torch.tensor([-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 3.5])))
s = torch.tensor(S)
for name in ("isnan", "isinf", "isfinite", "logical_not"):
    out[name] = rows(getattr(torch, name)(s).float())
p = torch.tensor(P)
for name in ("logical_and", "logical_or", "logical_xor"):
    out[name] = rows(getattr(torch, name)(s, p).float())
z = torch.tensor(Z)
out["all"], out["any"] = rows(z.all().float()), rows(z.any().float())
out["all_d2"], out["any_d1"] = rows(z.all(1).float()), rows(z.any(0, keepdim=True).float())
out["all_nan"] = rows(torch.tensor([float("nan"), 1.0]).all().float())
for key, dim, keep in (("lse_d2", 1, False), ("lse_d1k", 0, True)):
    x = torch.tensor(X, requires_grad=True)
    y = torch.logsumexp(x, dim, keepdim=keep)
    (y * torch.tensor(G).sum(dim, keepdim=keep)).sum().backward()
    out[key] = rows(y)
    out[key + "_dx"] = rows(x.grad)
out["lse_inf"] = rows(torch.logsumexp(torch.tensor([[float("-inf"), float("-inf")], [float("inf"), 1.0]]), 1))
out["lse_big"] = rows(torch.logsumexp(torch.tensor([1000.0, 1000.0]), 0))
for key, kw in (("norm2", {}), ("norm1", {"p": 1}), ("norminf", {"p": math.inf}), ("norm2_d2", {"dim": 1}),
                ("norm1_d1k", {"p": 1, "dim": 0, "keepdim": True}), ("norminf_d2", {"p": math.inf, "dim": 1})):
    x = torch.tensor(Z, requires_grad=True)
    y = x.norm(**kw)
    gw = torch.tensor(G)
    if "dim" in kw:
        gw = gw.sum(kw["dim"], keepdim=kw.get("keepdim", False))
    else:
        gw = torch.tensor(1.5)
    (y * gw).sum().backward()
    out[key] = rows(y)
    out[key + "_dx"] = rows(x.grad)
out["norm_bf16"] = rows(torch.tensor(X).bfloat16().norm().float())
# prod and cumprod: values and gradients (weighted by G's reduction / G), zeros in a row (Z's first row, and its
# second with one 0), all elements, bf16
for key, dim, keep in (("prod_all", None, False), ("prod_d2", 1, False), ("prod_d1k", 0, True)):
    for src, tag in ((X, ""), (Z, "_z")):
        x = torch.tensor(src, requires_grad=True)
        y = x.prod() if dim is None else x.prod(dim, keepdim=keep)
        gw = torch.tensor(1.5) if dim is None else torch.tensor(G).sum(dim, keepdim=keep)
        (y * gw).sum().backward()
        out[key + tag] = rows(y)
        out[key + tag + "_dx"] = rows(x.grad)
for key, dim in (("cumprod_d2", 1), ("cumprod_d1", 0)):
    for src, tag in ((X, ""), (Z, "_z")):
        x = torch.tensor(src, requires_grad=True)
        y = x.cumprod(dim)
        (y * torch.tensor(G)).sum().backward()
        out[key + tag] = rows(y)
        out[key + tag + "_dx"] = rows(x.grad)
# atan2, fmod, remainder: every quadrant and sign, zeros, infinities and NaN (values), a number on either side, and
# the gradients of both operands (weighted by G) away from the steps
SA = [1.0, -1.0, -1.0, 1.0, 0.0, -0.0, 5.5, -5.5, 7.25, -7.25, float("inf"), 3.0, float("nan"), 2.0]
SB = [1.0, 1.0, -1.0, -1.0, 1.0, -1.0, 2.0, 2.0, -2.5, -2.5, 2.0, float("inf"), 1.0, 0.0]
for name in ("atan2", "fmod", "remainder"):
    out[name + "_edge"] = rows(getattr(torch, name)(torch.tensor(SA), torch.tensor(SB)))
    out[name + "_s2"] = rows(getattr(torch, name)(torch.tensor(SA), torch.tensor(1.5)))
    a = torch.tensor(X, requires_grad=True) * 3
    a.retain_grad()
    b = torch.tensor([[1.25, -0.75, 2.5, 0.5]], requires_grad=True)
    y = getattr(torch, name)(a, b)
    (y * torch.tensor(G)).sum().backward()
    out[name + "_y"] = rows(y)
    out[name + "_da"] = rows(a.grad)
    out[name + "_db"] = rows(b.grad)
    out[name + "_bf16"] = rows(getattr(torch, name)(torch.tensor(X).bfloat16() * 3,
                                                    torch.tensor([[1.25, -0.75, 2.5, 0.5]]).bfloat16()).float())
# hypot, logaddexp2, floor_divide, copysign (values at the edges and the gradients of both operands, where torch has
# them), frac, sinc, signbit, heaviside, rad2deg, nansum, nanmean, std_mean, var_mean, dist, renorm
E1 = [-2.5, -0.0, 0.0, 1.5, 3e30, float("inf"), -7.0, 0.75, 5.0]
E2 = [1.0, -1.0, 2.0, -2.0, 4e30, 1.0, 2.0, -0.25, 0.0]
for name in ("hypot", "logaddexp2", "floor_divide", "copysign"):
    out[name + "_edge"] = rows(getattr(torch, name)(torch.tensor(E1), torch.tensor(E2)))
for name in ("hypot", "logaddexp2", "copysign"):
    a = (torch.tensor(X) * 2).requires_grad_(True)
    b = torch.tensor([[1.25, -0.75, 2.5, 0.5]], requires_grad=True)
    y = getattr(torch, name)(a, b)
    (y * torch.tensor(G)).sum().backward()
    out[name + "_y"], out[name + "_da"] = rows(y), rows(a.grad)
    out[name + "_db"] = rows(b.grad) if b.grad is not None else rows(torch.zeros(1, 4))
for name in ("frac", "sinc", "rad2deg"):
    x = (torch.tensor(X) * 1.5).requires_grad_(True)
    y = getattr(torch, name)(x)
    (y * torch.tensor(G)).sum().backward()
    out[name + "_y"], out[name + "_dx"] = rows(y), rows(x.grad)
z0 = torch.tensor([0.0, 1.0], requires_grad=True)
torch.sinc(z0).sum().backward()
out["sinc_at0_dx"] = rows(z0.grad)
out["signbit_edge"] = rows(torch.signbit(torch.tensor(E1)).float())
out["heaviside_edge"] = rows(torch.heaviside(torch.tensor(E1), torch.tensor([0.5])))
NX = [[1.0, float("nan"), 3.0], [float("nan"), float("nan"), -2.0]]
out["nansum_all"], out["nansum_d2"] = rows(torch.tensor(NX).nansum()), rows(torch.tensor(NX).nansum(1))
out["nanmean_all"], out["nanmean_d1"] = rows(torch.tensor(NX).nanmean()), rows(torch.tensor(NX).nanmean(0))
sm = torch.std_mean(torch.tensor(X), 1)
vm = torch.var_mean(torch.tensor(X), 0, correction=0, keepdim=True)
out["std_mean_s"], out["std_mean_m"], out["var_mean_v"], out["var_mean_m"] = (rows(sm[0]), rows(sm[1]), rows(vm[0]),
                                                                              rows(vm[1]))
out["dist_2"] = rows(torch.dist(torch.tensor(X), torch.tensor(G)))
out["dist_1"] = rows(torch.dist(torch.tensor(X), torch.tensor(G), 1))
x = torch.tensor(X, requires_grad=True)
y = torch.renorm(x, 2, 0, 2.0)
(y * torch.tensor(G)).sum().backward()
out["renorm_y"], out["renorm_dx"] = rows(y), rows(x.grad)
out["renorm_inf"] = rows(torch.renorm(torch.tensor(X), float("inf"), 1, 1.0))
out["remainder_s1"] = rows(torch.remainder(5.0, torch.tensor([2.0, -2.0, 3.5, -0.75])))
out["prod_bf16"] = rows(torch.tensor(X).bfloat16().prod(1).float())
out["cumprod_bf16"] = rows(torch.tensor(X).bfloat16().cumprod(1).float())
out["cumprod_long"] = rows(torch.linspace(0.9, 1.1, 37).cumprod(0))
for key, w in (("lerp_s", 0.25), ("lerp_s9", 0.75), ("lerp_t", None)):
    a = torch.tensor(X, requires_grad=True)
    e = torch.tensor(G, requires_grad=True)
    wt = torch.tensor([[0.1, 0.6, 1.0, -0.5]], requires_grad=True) if w is None else w
    y = torch.lerp(a, e, wt)
    (y * torch.tensor(Z)).sum().backward()
    out[key] = rows(y)
    out[key + "_da"], out[key + "_de"] = rows(a.grad), rows(e.grad)
    if w is None:
        out[key + "_dw"] = rows(wt.grad)
t = torch.tensor(X)
t.add_(torch.tensor(G), alpha=0.5).mul_(torch.tensor([2.0, -1.0, 0.5, 3.0])).sub_(1.25).div_(3.0).clamp_(-2.0, 1.5)
out["inplace_chain"] = rows(t)
t = torch.tensor(X).bfloat16()
t.add_(torch.tensor(G), alpha=0.3)
out["inplace_bf16"] = rows(t.float())
t = torch.tensor(X)
t.masked_fill_(torch.tensor(G) > 0.75, -7.0).lerp_(torch.tensor(Z), 0.5)
out["inplace_mask_lerp"] = rows(t)
a, b = torch.tensor([1.5, -2.0, 0.25]), torch.tensor([4.0, 0.5])
out["outer"] = rows(torch.outer(a, b))
out["bmm"] = rows(torch.bmm(torch.tensor(X).reshape(3, 1, 4), torch.tensor(G).reshape(3, 4, 1)).reshape(3))

# einsum: each case's operands and the output's weight made by fill() (torch_forms_spec.lua makes the same)
EINSUM = [("ij,jk->ik", [(2, 3), (3, 4)]), ("bhqd,bhkd->bhqk", [(2, 2, 3, 4), (2, 2, 5, 4)]), ("ii", [(3, 3)]),
          ("ii->i", [(3, 3)]), ("...ij,...jk", [(2, 1, 2, 3), (3, 3, 2)]), ("bA,AC", [(2, 3), (3, 4)]),
          ("ij,ij->ij", [(3, 1), (1, 4)]), ("i,i->", [(3,), (1,)]), ("ijk->kj", [(2, 3, 4)]),
          ("ab,bc,cd->ad", [(2, 3), (3, 4), (4, 2)]), ("iij->j", [(2, 2, 3)]), ("ij,kl", [(2, 2), (2, 3)]),
          ("a...->...a", [(2, 3, 4)]), ("b i d, b j d -> b i j", [(2, 3, 4), (1, 2, 4)]),
          ("ij,jk->ik", [(1, 2), (2, 1)]), ("bij,bjk->bik", [(2, 1, 2), (2, 2, 1)]), ("ij,j->i", [(3, 1), (1,)])]


def fill(shape, seed):
    n = math.prod(shape)
    return torch.tensor([((i * 37 + seed * 11) % 23 - 11) / 8 for i in range(n)]).reshape(shape)


for k, (eq, shapes) in enumerate(EINSUM, 1):
    ops = [fill(sh, j).requires_grad_() for j, sh in enumerate(shapes, 1)]
    y = torch.einsum(eq, *ops)
    (y * fill(tuple(y.shape), 0)).sum().backward()
    out["einsum%d" % k] = rows(y)
    out["einsum%d_shape" % k] = "{" + ", ".join(str(d) for d in y.shape) + "}"
    for j, o in enumerate(ops, 1):
        out["einsum%d_d%d" % (k, j)] = rows(o.grad)

# the linear-algebra and further pointwise methods (tensor_linalg.lua, tensor_pointwise.lua, tensor_rearrange.lua):
# each case's value and its tensor arguments' gradients (the output weighted by fill(shape, 0)); args are fill()ed
# tensors (seeds 1, 2, 3) or the fixed tensors named in the case
SPECIAL = {
    "nan": [[float("nan"), float("inf"), float("-inf"), 0.5], [-2.0, 0.0, 3.0, float("-inf")]],
    "lae_b": [[1.0, float("inf"), float("-inf"), 0.5], [-2.0, 0.0, float("-inf"), float("inf")]],
    "xz": [[0.0, 0.0, 1.5, -2.0], [3.0, 0.0, 0.25, 1.0]],
    "yz": [[0.0, 2.0, 3.0, 0.5], [float("nan"), 1.0, 4.0, 2.0]],
    "prob": [[0.0, 0.01, 0.5, 0.75], [0.999, 1.0, 0.2, 0.3]],
}


def arg(spec, j):
    if isinstance(spec, str):
        return torch.tensor(SPECIAL[spec])
    return fill(spec, j)


METHODS = [  # key, method, tensor arg shapes (or SPECIAL names), other arguments
    ("dot", "dot", [(5,), (5,)], []),
    ("addmm", "addmm", [(2, 4), (2, 3), (3, 4)], [{"beta": 0.5, "alpha": 2.0}]),
    ("addmm_b0", "addmm", [(4,), (2, 3), (3, 4)], [{"beta": 0.0}]),
    ("baddbmm", "baddbmm", [(2, 3, 4), (2, 3, 5), (2, 5, 4)], [{"beta": 1.5, "alpha": -1.0}]),
    ("diagonal", "diagonal", [(3, 4)], []),
    ("diagonal_o1", "diagonal", [(3, 4)], [1]),
    ("diagonal_om2", "diagonal", [(4, 3)], [-2]),
    ("diagonal_3d", "diagonal", [(2, 3, 4)], [1, 0, 2]),
    ("diag_v", "diag", [(3,)], []),
    ("diag_vk", "diag", [(3,)], [-2]),
    ("diag_m", "diag", [(3, 4)], [1]),
    ("trace", "trace", [(3, 4)], []),
    ("addcmul", "addcmul", [(2, 4), (2, 4), (1, 4)], [{"value": 0.5}]),
    ("addcdiv", "addcdiv", [(2, 4), (2, 4), "yz"], [{"value": -2.0}]),
    ("nan_to_num", "nan_to_num", ["nan"], []),
    ("nan_to_num_v", "nan_to_num", ["nan"], [{"nan": 1.0, "posinf": 9.0, "neginf": -9.0}]),
    ("logaddexp", "logaddexp", [(2, 4), (2, 4)], []),
    ("logaddexp_inf", "logaddexp", ["nan", "lae_b"], []),
    ("logaddexp_tie", "logaddexp", [(2, 4), (2, 4)], ["tie"]),
    ("xlogy", "xlogy", ["xz", "yz"], []),
    ("logit", "logit", ["prob"], []),
    ("logit_eps", "logit", ["prob"], [0.05]),
    ("isclose", "isclose", ["nan", "nan"], [{"equal_nan": True}]),
    ("isclose_tol", "isclose", [(2, 4), (2, 4)], [{"rtol": 0.5, "atol": 0.1}]),
    ("isclose_inf", "isclose", ["nan", "lae_b"], []),
    ("count_nonzero", "count_nonzero", ["xz"], [1]),
    ("movedim", "movedim", [(2, 3, 4)], [[0, 1], [2, 0]]),
    ("unflatten", "unflatten", [(2, 12)], [1, (3, -1, 2)]),
]
for key, name, shapes, extra in METHODS:
    ts = [arg(sh, j).requires_grad_() for j, sh in enumerate(shapes, 1)]
    if extra == ["tie"]:
        extra = []
        with torch.no_grad():
            ts[1].copy_(ts[0])
    kw = {}
    if extra and isinstance(extra[-1], dict):
        kw = extra[-1]
        extra = extra[:-1]
    y = getattr(ts[0], name)(*ts[1:], *extra, **kw)
    out["m_" + key] = rows(y.float())
    if y.requires_grad:
        (y * fill(tuple(y.shape), 0)).sum().backward()
        for j, t in enumerate(ts, 1):
            if t.grad is not None:
                out["m_%s_d%d" % (key, j)] = rows(t.grad)

# scatter, scatter_add, index_add, index_copy, index_fill: values and the gradients of the tensor and of src / source
# (weighted by fill()); the index as written (0-based, repeated positions where the result is defined)
SCATTER = [  # key, method, tensor shape, dim, index, src shape (or a number value), keyword arguments
    ("scatter_add_d0", "scatter_add", (3, 4), 0, [[0, 1, 2, 0], [2, 0, 0, 1], [0, 0, 1, 2]], (3, 4), {}),
    ("scatter_add_d1", "scatter_add", (2, 5), 1, [[4, 0, 4], [1, 1, 3]], (2, 3), {}),
    ("scatter_d0", "scatter", (3, 4), 0, [[2, 0, 1, 2], [0, 2, 0, 1]], (2, 4), {}),
    ("scatter_value", "scatter", (2, 4), 1, [[3, 0], [1, 2]], 2.5, {}),
    ("index_add_d0", "index_add", (4, 3), 0, [0, 2, 0], (3, 3), {"alpha": -1.5}),
    ("index_add_3d", "index_add", (2, 4, 3), 1, [3, 1], (2, 2, 3), {}),
    ("index_copy", "index_copy", (4, 3), 0, [3, 0], (2, 3), {}),
    ("index_fill", "index_fill", (2, 4), 1, [1, 3], -2.0, {}),
]
for key, name, shape, dim, index, src, kw in SCATTER:
    t = fill(shape, 1).requires_grad_()
    s = src if isinstance(src, float) else fill(src, 2).requires_grad_()
    y = getattr(t, name)(dim, torch.tensor(index), s, **kw)
    out["s_" + key] = rows(y)
    (y * fill(tuple(y.shape), 0)).sum().backward()
    out["s_%s_d1" % key] = rows(t.grad)
    if not isinstance(src, float):
        out["s_%s_d2" % key] = rows(s.grad)

write("tests/data/torch_forms_torch.lua", "scripts/gen_torch_forms.py", torch.__version__, out)
