#!/usr/bin/env python3
"""gen_clkeep.py — writes tests/data/clkeep_torch.lua: the strides PyTorch 2.x gives the results of elementwise ops,
activations, in-place forms and dtype conversions of dense tensors that are not contiguous (channels_last: NHWC memory
seen as [N, C, H, W], made as the spec makes it, x.permute(0, 2, 3, 1).contiguous().permute(0, 3, 1, 2); and a
permutation of a 3-D tensor), the strides of a leaf's .grad after a backward, and (stop 102) the strides of the
gradient a channels_last intermediate receives through chains of those ops and conv2d, for tests/spec/clkeep_spec.lua.
torch's rule (TensorIterator's fast setup): operands that are all non-overlapping and dense with the same strides give
a result with those strides; with a broadcast or a contiguous operand (reorder_dimensions) the first operand's strides
order the result's dims where they are nonzero; AccumulateGrad gives a dense leaf's .grad the leaf's strides. Run from the repository
root with a PyTorch 2.x:
    /opt/torch2/bin/python3 scripts/gen_clkeep.py"""

import torch
import torch.nn.functional as F
from torch_fixture import write


def lua_list(xs):
    return "{ " + ", ".join(str(x) for x in xs) + " }"


def cl(t):
    return t.permute(0, 2, 3, 1).contiguous().permute(0, 3, 1, 2)


# name: how the operand is made (shape and layout)
LAYOUTS = {
    "cl": lambda dt: cl(torch.randn(2, 3, 4, 5).to(dt)),
    "cl1": lambda dt: cl(torch.randn(2, 1, 4, 5).to(dt)),   # one channel: contiguous too (its stride never matters)
    "perm": lambda dt: torch.randn(4, 5, 3).to(dt).permute(2, 0, 1),
}

# name: the op on operands x and y of one layout (y another tensor of x's layout), as the spec runs it
OPS = {
    "relu": lambda x, y: torch.relu(x),
    "gelu": lambda x, y: F.gelu(x),
    "silu": lambda x, y: F.silu(x),
    "sigmoid": lambda x, y: torch.sigmoid(x),
    "tanh": lambda x, y: torch.tanh(x),
    "exp": lambda x, y: torch.exp(x),
    "abs": lambda x, y: torch.abs(x),
    "neg": lambda x, y: -x,
    "add": lambda x, y: x + y,
    "mul": lambda x, y: x * y,
    "sub": lambda x, y: x - y,
    "div": lambda x, y: x / y,
    "maximum": lambda x, y: torch.maximum(x, y),
    "add_s": lambda x, y: x + 2,
    "mul_s": lambda x, y: x * 0.5,
    "rsub_s": lambda x, y: 1 - x,
    "clone": lambda x, y: x.clone(),
    "to_bf16": lambda x, y: x.to(torch.bfloat16),
    "float": lambda x, y: x.float(),
    "relu_": lambda x, y: x.clone().relu_(),
    "add_": lambda x, y: x.clone().add_(y),
    # a broadcast or a contiguous operand: TensorIterator's reorder_dimensions (the first operand decides where its
    # strides do), not the fast setup
    "add_bias": lambda x, y: x + bias(x),
    "bias_add": lambda x, y: bias(x) + x,
    "add_c": lambda x, y: x + y.contiguous(),
    "c_add": lambda x, y: y.contiguous() + x,
    # stop 102: cat keeps channels_last where every input is so (compute_output_memory_format; a contiguous input,
    # cl1's, or a 3-D permutation gives a contiguous result)
    "cat1": lambda x, y: torch.cat([x, y], 1),
    "cat0": lambda x, y: torch.cat([x, y], 0),
    "cat_c": lambda x, y: torch.cat([x, y.contiguous()], 1),
}


def bias(x):
    """a per-channel tensor (dim -3's size, ones elsewhere) of fixed values, broadcast against x"""
    shape = [1] * x.dim()
    shape[-3] = x.shape[-3]
    return torch.arange(x.shape[-3], dtype=x.dtype).reshape(shape)


# stop 102: the gradient that reaches a channels_last intermediate a (= leaf * 1, its hook's argument) from each chain,
# by y.sum().backward() ("sum": one element expanded) and y.backward(gy) with a channels_last gy ("gy"); torch's
# autograd hands on the layout its ops' backwards produce
def grad_chains(dt):
    b = cl(torch.randn(2, 3, 4, 5)).to(dt)
    w = cl(torch.randn(4, 3, 3, 3) * 0.3).to(dt)
    w2 = (torch.randn(4, 4, 3, 3) * 0.3).to(dt)
    return {
        "relu": lambda a: torch.relu(a),
        "gelu": lambda a: F.gelu(a),
        "silu": lambda a: F.silu(a),
        "mul": lambda a: a * b,
        "add": lambda a: a + b,
        "sub": lambda a: b - a,
        "div": lambda a: a / (b.abs() + 1),
        "relu2": lambda a: torch.relu(a) * 2,
        "conv": lambda a: F.conv2d(a, w, padding=1),
        "cnn": lambda a: torch.relu(F.conv2d(torch.relu(F.conv2d(a, w, padding=1)), w2, padding=1)),
    }


def grad_strides(dt):
    parts = []
    for cname, f in grad_chains(dt).items():
        for how in ("sum", "gy"):
            leaf = cl(torch.randn(2, 3, 4, 5)).to(dt).requires_grad_()
            a = leaf * 1
            seen = {}
            a.register_hook(lambda g: seen.__setitem__("s", g.stride()))
            y = f(a)
            if how == "sum":
                y.sum().backward()
            else:
                y.backward(cl(torch.randn(y.shape)).to(dt))
            parts.append("%s_%s = %s" % (cname, how, lua_list(seen["s"])))
    return "{\n    " + ",\n    ".join(parts) + "\n  }"


def main():
    torch.manual_seed(0)
    out = {}
    for lname, make in LAYOUTS.items():
        for dname, dt in (("fp32", torch.float32), ("bf16", torch.bfloat16)):
            x, y = make(dt), make(dt)
            parts = ["x = %s" % lua_list(x.stride())]
            for oname, op in OPS.items():
                parts.append("%s = %s" % (oname, lua_list(op(x, y).stride())))
            # a leaf's .grad after the relu's sum's backward (AccumulateGrad: the leaf's strides)
            leaf = make(torch.float32).requires_grad_()
            (torch.relu(leaf) * 2).sum().backward()
            parts.append("grad = %s" % lua_list(leaf.grad.stride()))
            out["%s_%s" % (lname, dname)] = "{\n    " + ",\n    ".join(parts) + "\n  }"
    for dname, dt in (("fp32", torch.float32), ("bf16", torch.bfloat16)):
        out["grads_" + dname] = grad_strides(dt)
    write("tests/data/clkeep_torch.lua", "scripts/gen_clkeep.py", torch.__version__, out)


if __name__ == "__main__":
    main()
