#!/usr/bin/env python3
"""gen_profflops.py — writes tests/data/profflops_torch.lua: torch.profiler's FLOP counts (with_flops=True, PyTorch
2.x on the CPU) for the programs tests/spec/profflops_spec.lua runs in fp8lab: elementwise add and mul (torch counts
the first input's elements), the other elementwise ops (none), in-place ops (none), mm, bmm and matmul's other forms
(dot and mv: none), addmm, baddbmm, linear, conv2d (forward only: its backward counts none), conv1d and
conv_transpose2d (none), scaled_dot_product_attention (none), the backward of each, and an MLP's training step. For
each program and dtype: the window's total, the key_averages() rows that carry FLOPs ({key, count, flops}), those rows
grouped by input shape ({key, shapes, flops}), and the table's FLOPs column (its title and each counted row's cell).
It also writes tests/data/profcost_torch.lua (stop 101, tests/spec/profcost_spec.lua): the same for the programs of
gaps() — the backwards of div, pow and the unary ops whose formulas torch writes with aten::mul or aten::add, and
matmul's folded operands (with an operand that requires grad, a non-contiguous batch, a vector first), and
torch._scaled_mm (none: fp8lab's FP8 GEMM keeps 2·M·N·K, docs/lua-api.md); since stop 102 also the backwards of 0 ** x,
a tensor to a tensor's power, erf and tan, and those fp8lab counts otherwise (left_backward: 2 / x, asin, acos, dot,
a matrix times a vector); since stop 103 recip_asin_acos_backward and mv_backward. torch._scaled_mm's count is the host's: on the Intel AMX host that wrote the committed
scaled_mm records none; on an AMD Zen 3 (stop 102) torch's CPU _scaled_mm ran as aten::mm of the decoded operands and
two aten::mul (68,096 FLOPs), so a run there keeps the committed scaled_mm records (put them back after regenerating).
Run from the repository root with a PyTorch 2.x:
    /opt/torch2/bin/python3 scripts/gen_profflops.py"""

import warnings

import torch
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, profile

from torch_fixture import write

warnings.filterwarnings("ignore")


def r(*shape, grad=False, dt=torch.float32):
    t = torch.randn(*shape).to(dt)
    return t.requires_grad_() if grad else t


def programs(dt):
    """name -> (setup) a function returning the program to profile; each builds its inputs outside the window"""
    P = {}

    def prog(name):
        def deco(f):
            P[name] = f
            return f
        return deco

    @prog("mul")
    def _():
        a, b = r(4, 8, dt=dt), r(4, 8, dt=dt)
        return lambda: a * b

    @prog("mul_broadcast_first_smaller")
    def _():
        v, a = r(8, dt=dt), r(4, 8, dt=dt)
        return lambda: v * a

    @prog("mul_scalar")
    def _():
        a = r(4, 8, dt=dt)
        return lambda: (a * 2, 3 * a)

    @prog("add")
    def _():
        a, b, v = r(4, 8, dt=dt), r(4, 8, dt=dt), r(8, dt=dt)
        return lambda: (a + b, v + a, a + v)

    @prog("add_scalar")
    def _():
        a = r(4, 8, dt=dt)
        return lambda: (a + 1, 1 + a)

    @prog("scalar_div")
    def _():
        a = r(4, 8, dt=dt)
        return lambda: (2 / a, a / 2)

    @prog("other_elementwise")
    def _():
        a, b = r(4, 8, dt=dt), r(4, 8, dt=dt)
        return lambda: (a - b, a / b, torch.maximum(a, b), a - 1, a.exp(), torch.tanh(a))

    @prog("inplace")
    def _():
        a, b = r(4, 8, dt=dt), r(4, 8, dt=dt)
        return lambda: a.add_(b).mul_(b).add_(1).mul_(0.5)

    @prog("mm")
    def _():
        a, b = r(4, 8, dt=dt), r(8, 6, dt=dt)
        return lambda: a @ b

    @prog("mm_large")
    def _():
        a, b = r(40, 80, dt=dt), r(80, 600, dt=dt)
        return lambda: a @ b

    @prog("bmm")
    def _():
        a, b = r(5, 4, 8, dt=dt), r(5, 8, 6, dt=dt)
        return lambda: a @ b

    @prog("matmul_forms")
    def _():
        x4, y2 = r(2, 3, 4, 5, dt=dt), r(5, 6, dt=dt)
        v5, m45, b345, b356 = r(5, dt=dt), r(4, 5, dt=dt), r(3, 4, 5, dt=dt), r(3, 5, 6, dt=dt)
        return lambda: (x4 @ y2, v5 @ y2, v5 @ b356, m45 @ b356, r(2, 1, 4, 5, dt=dt) @ b356)

    @prog("matmul_vector")
    def _():
        v5, m45, b345 = r(5, dt=dt), r(4, 5, dt=dt), r(3, 4, 5, dt=dt)
        return lambda: (v5 @ v5, m45 @ v5, b345 @ v5, v5.dot(v5))

    @prog("addmm")
    def _():
        c, a, b = r(4, 6, dt=dt), r(4, 8, dt=dt), r(8, 6, dt=dt)
        return lambda: (torch.addmm(c, a, b), torch.addmm(c, a, b, beta=0.5, alpha=2))

    @prog("baddbmm")
    def _():
        c, a, b = r(5, 4, 6, dt=dt), r(5, 4, 8, dt=dt), r(5, 8, 6, dt=dt)
        return lambda: torch.baddbmm(c, a, b)

    @prog("linear")
    def _():
        x2, x3, w, b = r(4, 8, dt=dt), r(5, 4, 8, dt=dt), r(6, 8, dt=dt), r(6, dt=dt)
        return lambda: (F.linear(x2, w, b), F.linear(x3, w, b), F.linear(x2, w))

    @prog("conv2d")
    def _():
        x, w, b = r(2, 3, 8, 8, dt=dt), r(4, 3, 3, 3, dt=dt), r(4, dt=dt)
        xd, wd = r(1, 6, 10, 10, dt=dt), r(6, 1, 3, 3, dt=dt)
        x1, w1 = r(3, 5, 6, 6, dt=dt), r(7, 5, 1, 1, dt=dt)
        return lambda: (F.conv2d(x, w, b, padding=1), F.conv2d(xd, wd, padding=1, groups=6), F.conv2d(x1, w1))

    @prog("conv_others")
    def _():
        x1, w1 = r(2, 3, 8, dt=dt), r(4, 3, 3, dt=dt)
        xt, wt = r(2, 3, 8, 8, dt=dt), r(3, 4, 3, 3, dt=dt)
        return lambda: (F.conv1d(x1, w1), F.conv_transpose2d(xt, wt, stride=2), F.conv_transpose1d(x1, w1.transpose(0, 1).contiguous()))

    @prog("sdpa")
    def _():
        q, k, v = r(2, 2, 4, 8, dt=dt), r(2, 2, 4, 8, dt=dt), r(2, 2, 4, 8, dt=dt)
        k6, v6 = r(2, 2, 6, 8, dt=dt), r(2, 2, 6, 8, dt=dt)
        mask = torch.zeros(4, 6, dtype=dt)
        mask[:, 5] = -float("inf")
        return lambda: (F.scaled_dot_product_attention(q, k, v), F.scaled_dot_product_attention(q, k, v, is_causal=True),
                        F.scaled_dot_product_attention(q, k6, v6, attn_mask=mask))

    @prog("mm_backward")
    def _():
        a, b = r(4, 8, grad=True, dt=dt), r(8, 6, grad=True, dt=dt)
        x, y = r(3, 4, 5, grad=True, dt=dt), r(5, 6, grad=True, dt=dt)
        return lambda: ((a @ b).sum() + (x @ y).sum()).backward()

    @prog("mul_backward")
    def _():
        # (each leaf used once: torch's engine sums two gradients of one tensor out of place, aten::add, or in place,
        # aten::add_, by rules of its own)
        x, v, x2, v2, x3 = (r(4, 8, grad=True, dt=dt), r(8, grad=True, dt=dt), r(4, 8, grad=True, dt=dt),
                            r(8, grad=True, dt=dt), r(4, 8, grad=True, dt=dt))
        return lambda: ((x * v).sum() + (v2 * x2).sum() + (x3 * 3).sum()).backward()

    @prog("linear_backward")
    def _():
        x, w, b = r(4, 8, grad=True, dt=dt), r(6, 8, grad=True, dt=dt), r(6, grad=True, dt=dt)
        return lambda: F.linear(x, w, b).sum().backward()

    @prog("conv2d_backward")
    def _():
        x, w = r(2, 3, 8, 8, grad=True, dt=dt), r(4, 3, 3, 3, grad=True, dt=dt)
        return lambda: F.conv2d(x, w).sum().backward()

    @prog("sdpa_backward")
    def _():
        q, k, v = r(2, 2, 4, 8, grad=True, dt=dt), r(2, 2, 4, 8, grad=True, dt=dt), r(2, 2, 4, 8, grad=True, dt=dt)
        return lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True).sum().backward()

    @prog("mlp_step")
    def _():
        torch.manual_seed(1)
        model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.LayerNorm(32),
                                    torch.nn.Linear(32, 16)).to(dt)   # (dims of 16s: fp8lab's FP8 GEMMs' rule)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        x, y = r(16, 16, dt=dt), r(16, 16, dt=dt)

        def step():
            for _ in range(2):
                loss = F.mse_loss(model(x), y)
                opt.zero_grad()
                loss.backward()
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                opt.step()
        return step

    return P


def gaps(dt):
    """stop 101's programs (tests/data/profcost_torch.lua): name -> setup, as programs()"""
    P = {}

    def prog(name):
        def deco(f):
            P[name] = f
            return f
        return deco

    def pos(*shape):   # a leaf > 0 (for the roots and logarithms), made outside the window
        return (torch.randn(*shape).abs() + 0.5).to(dt).requires_grad_()

    @prog("div_backward")
    def _():
        # DivBackward0: grad / other (aten::div, none) and -grad * ((self / other) / other): one aten::mul of the
        # output's size; DivBackward1 (x / 2): grad / 2, none
        a, b, a2, v, a3 = r(4, 8, grad=True, dt=dt), pos(4, 8), r(4, 8, grad=True, dt=dt), pos(8), r(4, 8, grad=True, dt=dt)
        return lambda: ((a / b).sum().backward(), (a2 / v).sum().backward(), (a3 / 2).sum().backward())

    @prog("pow_backward")
    def _():
        # PowBackward0 (x ** s): grad * (s * x.pow(s - 1)), two aten::mul; PowBackward2 (s ** x): grad * (result * ln s)
        a, a2, a3 = pos(4, 8), pos(4, 8), r(4, 8, grad=True, dt=dt)
        return lambda: ((a ** 2).sum().backward(), (a2 ** 3.5).sum().backward(), (2 ** a3).sum().backward())

    @prog("unary_backward")
    def _():
        # each of these backwards multiplies (or adds a number) as torch's derivatives.yaml writes it
        fs = [torch.abs, torch.exp, torch.sqrt, torch.sin, torch.cos, torch.log1p, torch.expm1, torch.atan,
              torch.sinh, torch.cosh, torch.log2, torch.log10, torch.exp2, torch.rsqrt, torch.log, torch.neg,
              torch.tanh, torch.sigmoid]
        xs = [pos(4, 8) for _ in fs]
        return lambda: [f(x).sum().backward() for f, x in zip(fs, xs)]

    @prog("pow_tensor_backward")
    def _():
        # stop 102: 0 ** x (PowBackward2 at a zero base: grad * where(cond, 0, result * log 0), two aten::mul) and a
        # tensor to a tensor's power (PowBackward1: grad * (exponent * self.pow(exponent - 1)) and grad * where(...,
        # result * self.log()): four aten::mul)
        b, c, d = r(4, 8, grad=True, dt=dt), pos(4, 8), r(4, 8, grad=True, dt=dt)
        return lambda: ((0 ** b).sum().backward(), (c ** d).sum().backward())

    @prog("erf_tan_backward")
    def _():
        # stop 102: erf's 2/sqrt(pi) * exp(-(self.pow(2))) * grad (two aten::mul) and tan's grad * (1 + result.pow(2))
        # (aten::add, aten::mul): aten::pow and aten::neg count none
        x, y = (torch.rand(4, 8) * 0.8 + 0.1).to(dt).requires_grad_(), (torch.rand(4, 8) * 0.8 + 0.1).to(dt).requires_grad_()
        return lambda: (torch.erf(x).sum().backward(), torch.tan(y).sum().backward())

    @prog("left_backward")
    def _():
        # stop 102, counted differently in fp8lab (docs/robustness.md, "The profiler's last FLOPs, the norms' edges
        # (stop 102)"): 2 / x (ReciprocalBackward0's two products and MulBackward0's), asin and acos (three each),
        # dot (DotBackward0: the 0-d grad times each vector, 1 FLOP each), M @ v (MvBackward0: grad.ger(vec), an
        # aten::mul of grad's size, and an uncounted aten::mv)
        a = r(4, 8, grad=True, dt=dt)
        xs, xc = (torch.rand(4, 8) * 0.8 + 0.1).to(dt).requires_grad_(), (torch.rand(4, 8) * 0.8 + 0.1).to(dt).requires_grad_()
        u, w = r(5, grad=True, dt=dt), r(5, grad=True, dt=dt)
        m, v = r(6, 5, grad=True, dt=dt), r(5, grad=True, dt=dt)
        return lambda: ((2 / a).sum().backward(), torch.asin(xs).sum().backward(), torch.acos(xc).sum().backward(),
                        torch.dot(u, w).backward(), (m @ v).sum().backward())

    @prog("recip_asin_acos_backward")
    def _():
        # stop 103: left_backward's 2 / x, asin and acos, their forwards made outside the window: the backwards alone
        # (ReciprocalBackward0 and MulBackward0: three aten::mul of x's size; AsinBackward0 and AcosBackward0: an
        # aten::mul, an aten::add and an aten::mul each), which fp8lab counts as torch's since stop 103
        a = r(4, 8, grad=True, dt=dt)
        xs, xc = (torch.rand(4, 8) * 0.8 + 0.1).to(dt).requires_grad_(), (torch.rand(4, 8) * 0.8 + 0.1).to(dt).requires_grad_()
        ys = [(2 / a).sum(), torch.asin(xs).sum(), torch.acos(xc).sum()]
        return lambda: [y.backward() for y in ys]

    @prog("mv_backward")
    def _():
        # stop 103: matmul's aten::mv and aten::dot routes and their backwards (MvBackward0: grad.ger(vec), an
        # aten::mul of [R, 1] and [K] counting R, for the matrix, an uncounted aten::mv for the vector; DotBackward0:
        # grad * other, 1 each), a vector times a batch torch folds into mv, one it runs as aten::bmm, and a
        # non-foldable batch times a vector, aten::bmm of [4, 3, 5] and [4, 5, 1] (120)
        mg, v, m, vg = r(6, 5, grad=True, dt=dt), r(5, dt=dt), r(6, 5, dt=dt), r(5, grad=True, dt=dt)
        ag, vg2 = r(3, 6, 5, grad=True, dt=dt), r(5, grad=True, dt=dt)
        vg3, bg = r(5, grad=True, dt=dt), r(3, 5, 6, grad=True, dt=dt)
        v4, bg2 = r(5, dt=dt), r(3, 5, 6, grad=True, dt=dt)
        ug, w = r(5, grad=True, dt=dt), r(5, dt=dt)
        xt, v5 = r(3, 4, 5, dt=dt).transpose(0, 1), r(5, dt=dt)
        return lambda: ((mg @ v).sum().backward(), (m @ vg).sum().backward(), (ag @ vg2).sum().backward(),
                        (vg3 @ bg).sum().backward(), (v4 @ bg2).sum().backward(), (ug @ w).backward(), xt @ v5)

    @prog("matmul_folded")
    def _():
        # torch's matmul folds a batch into aten::mm where it need not copy, or where the other operand requires grad
        # (it folds then even at a copy), and takes the transposed route when the second operand is the larger
        x4, y2, v5 = r(2, 3, 4, 5, dt=dt), r(5, 6, dt=dt), r(5, dt=dt)
        m45g, b356 = r(4, 5, grad=True, dt=dt), r(3, 5, 6, dt=dt)
        xt = r(3, 4, 5, dt=dt).transpose(0, 1)              # [4, 3, 5], its batch not foldable without a copy
        y2g = r(5, 6, grad=True, dt=dt)
        m45 = r(4, 5, dt=dt)
        return lambda: (x4 @ y2, v5 @ y2, m45g @ b356, xt @ y2, xt @ y2g, m45 @ b356, v5 @ b356)

    @prog("scaled_mm")
    def _():
        # torchao's FP8 GEMM: torch.profiler counts none for aten::_scaled_mm (torch.utils.flop_counter's
        # FlopCounterMode counts it 2·M·N·K); fp8lab's fp8_gemm keeps 2·M·N·K, a documented difference
        a = torch.randn(16, 32).to(torch.float8_e4m3fn)
        b = torch.randn(64, 32).to(torch.float8_e4m3fn).t()
        s = torch.tensor(1.0)
        return lambda: torch._scaled_mm(a, b, scale_a=s, scale_b=s, out_dtype=torch.float32)

    return P


def run(fn):
    with profile(activities=[ProfilerActivity.CPU], with_flops=True, record_shapes=True) as p:
        fn()
    avg = p.key_averages()
    rows = sorted((e.key, e.count, int(e.flops)) for e in avg if e.flops > 0)
    shaped = sorted((e.key, str(e.input_shapes), int(e.flops)) for e in p.key_averages(group_by_input_shape=True)
                    if e.flops > 0)
    total = sum(int(e.flops) for e in avg)
    # the table's FLOPs column: its title and each counted row's cell, as torch prints them
    lines = avg.table(sort_by="flops", row_limit=-1).splitlines()
    head = lines[1]
    title = [w for w in head.split("  ") if w.strip().startswith("Total ") and "FLOPs" in w]
    cells = {}
    for line in lines[3:]:
        parts = [c.strip() for c in line.split("  ") if c.strip()]
        if len(parts) > 2 and any(k == parts[0] for k, _, _ in rows):
            cells[parts[0]] = parts[-1]
    return total, rows, shaped, title[0].strip() if title else None, cells


def lua_str(s):
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


def entries(make):
    out = []
    for dt, dname in ((torch.float32, "f32"), (torch.bfloat16, "bf16")):
        for name, setup in make(dt).items():
            torch.manual_seed(0)
            total, rows, shaped, title, cells = run(setup())
            out.append("{program = %s, dtype = %s, total = %d, rows = {%s}, shaped = {%s}, title = %s, cells = {%s}}" % (
                lua_str(name), lua_str(dname), total,
                ", ".join("{%s, %d, %d}" % (lua_str(k), c, f) for k, c, f in rows),
                ", ".join("{%s, %s, %d}" % (lua_str(k), lua_str(s), f) for k, s, f in shaped),
                "nil" if title is None else lua_str(title),
                ", ".join("[%s] = %s" % (lua_str(k), lua_str(v)) for k, v in sorted(cells.items()))))
    return out


def main():
    out = entries(programs)
    write("tests/data/profflops_torch.lua", "scripts/gen_profflops.py", torch.__version__, {
        # each: the program (tests/spec/profflops_spec.lua runs it in fp8lab), the dtype, the window's FLOPs, the
        # key_averages() rows with FLOPs as {key, count, flops}, those grouped by input shape as {key, shapes, flops},
        # the table's FLOPs column title (nil: no column) and its cell of each counted row
        "programs": "{\n    " + ",\n    ".join(out) + "}",
    })
    out = entries(gaps)
    write("tests/data/profcost_torch.lua", "scripts/gen_profflops.py", torch.__version__, {
        # as profflops_torch.lua's, for the programs of gaps() (stop 101)
        "programs": "{\n    " + ",\n    ".join(out) + "}",
    })


if __name__ == "__main__":
    main()
