# gen_opspeed2.py — torch 2.15's rsqrt values and gradients for tests/spec/opspeed2_spec.lua (stop 95), printed as
# fp32 bit patterns: /opt/torch2/bin/python scripts/gen_opspeed2.py
import torch

X = [0.25, 2.0, 3.0, 7.3, 1e-3, 123.456, 0.7071, 5e-39, 3.0e38, 1.1, 9.99, 0.031]
G = [1.0, -0.5, 3.7, 0.125, 2.0, -1.3, 0.9, 1e-3, 4.0, -7.5, 0.33, 1.0]
x = torch.tensor(X, dtype=torch.float32, requires_grad=True)
g = torch.tensor(G, dtype=torch.float32)
y = x.rsqrt()
y.backward(g)

def bits(t):
    return ", ".join("0x%08x" % (v & 0xffffffff) for v in t.detach().view(torch.int32).tolist())

print("x    = {", bits(x), "}")
print("g    = {", bits(g), "}")
print("y    = {", bits(y), "}")
print("grad = {", bits(x.grad), "}")
