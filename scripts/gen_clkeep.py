#!/usr/bin/env python3
"""gen_clkeep.py — writes tests/data/clkeep_torch.lua: the strides PyTorch 2.x gives the results of elementwise ops,
activations, in-place forms and dtype conversions of dense tensors that are not contiguous (channels_last: NHWC memory
seen as [N, C, H, W], made as the spec makes it, x.permute(0, 2, 3, 1).contiguous().permute(0, 3, 1, 2); and a
permutation of a 3-D tensor), and the strides of a leaf's .grad after a backward, for tests/spec/clkeep_spec.lua.
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
}


def bias(x):
    """a per-channel tensor (dim -3's size, ones elsewhere) of fixed values, broadcast against x"""
    shape = [1] * x.dim()
    shape[-3] = x.shape[-3]
    return torch.arange(x.shape[-3], dtype=x.dtype).reshape(shape)


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
    write("tests/data/clkeep_torch.lua", "scripts/gen_clkeep.py", torch.__version__, out)


if __name__ == "__main__":
    main()
