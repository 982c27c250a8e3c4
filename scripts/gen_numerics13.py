#!/usr/bin/env python3
"""gen_numerics13.py — hypot on fp32 against PyTorch 2.15 and the correctly rounded value (stop 96; docs/robustness.md,
"hypot correctly rounded (stop 96)"). Run with a PyTorch 2.x:
    /opt/torch2/bin/python scripts/gen_numerics13.py
prints the pairs tests/spec/numerics13_spec.lua holds as literals: x, y, the correctly rounded hypot (exact, from
rationals: no torch in it) and torch.hypot's, as fp32 bit patterns.
    /opt/torch2/bin/python scripts/gen_numerics13.py --measure build/fp8lab
measures fp8lab's hypot (run through the binary given) and torch's against the correctly rounded value over a dense
sample (random bit patterns, normal pairs, pairs of nearby magnitude, the pairs where the double expression is wrong),
in ulps, and counts where fp8lab's bits and torch's differ."""
import json
import math
import os
import struct
import subprocess
import sys
import tempfile
from fractions import Fraction as F

import numpy as np
import torch


def f32(b):
    return struct.unpack("<f", struct.pack("<I", b))[0]


def bits(v):
    return struct.unpack("<I", struct.pack("<f", v))[0]


def correctly_rounded(x, y):
    """the fp32 nearest √(x² + y²) (ties to even), from exact rationals; x, y finite fp32 values as Python floats"""
    s = F(x) ** 2 + F(y) ** 2
    if s == 0:
        return 0
    b = bits(float(np.float32(math.sqrt(float(s)))))   # a candidate within an ulp

    def at(u):   # the float of bits u as a rational, past the largest one as if the exponent had no bound
        return F(f32(u)) if u < 0x7F800000 else F(2) ** 128 + (u - 0x7F800000) * F(2) ** 104
    lo, hi = (at(b - 1) + at(b)) / 2 if b else F(0), (at(b) + at(b + 1)) / 2
    if s < lo * lo or (s == lo * lo and b & 1):
        b -= 1
    elif s > hi * hi or (s == hi * hi and b & 1):
        b += 1
    return min(b, 0x7F800000)


def hard_pairs(n, k0=11863283):
    """x = round(k²/2^24 − 1/4), y = k/2^12: √(x² + y²) within 2^-30 of x + 1/2, where the double expression rounded
    to fp32 is wrong on about a third of them"""
    out = []
    for k in range(k0, k0 + n):
        x = float(round(F(k * k, 1 << 24) - F(1, 4)))
        if x >= 1 << 24:
            break
        out.append((x, k / 4096.0))
    return out


def literals():
    torch.set_num_threads(1)
    pairs = []
    for x, y in hard_pairs(4000):
        naive = bits(float(np.float32(math.sqrt(x * x + y * y))))
        if naive != correctly_rounded(x, y):
            pairs.append((x, y))
        if len(pairs) == 10:
            break
    pairs += [(3.0, 4.0), (2.0 ** 127, 2.0 ** 127), (3e-40, 4e-40), (1e-45, 1e-45), (0.1, 0.2), (1e20, 1e-20)]
    xs = torch.tensor([p[0] for p in pairs], dtype=torch.float32)
    ys = torch.tensor([p[1] for p in pairs], dtype=torch.float32)
    th = torch.hypot(xs, ys).numpy().view(np.uint32)
    print("-- x, y, correctly rounded, torch.hypot (fp32 bits); torch", torch.__version__)
    for i, (x, y) in enumerate(pairs):
        bx, by = bits(float(np.float32(x))), bits(float(np.float32(y)))
        cr = correctly_rounded(f32(bx), f32(by))
        print("{ 0x%08x, 0x%08x, 0x%08x, 0x%08x }," % (bx, by, cr, int(th[i])))


def write_safetensors(path, tensors):
    header, off, blobs = {}, 0, []
    for name, a in tensors.items():
        b = a.astype(np.float32).tobytes()
        header[name] = {"dtype": "F32", "shape": list(a.shape), "data_offsets": [off, off + len(b)]}
        off += len(b)
        blobs.append(b)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def read_safetensors(path, name):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    a, b = header[name]["data_offsets"]
    return np.frombuffer(data[a:b], dtype=np.float32)


def ulps(g, x, y):
    """|g − h| in ulps of fp32 at h, h = √(x² + y²) in double (good to 2^-29 ulp here)"""
    h = np.sqrt(x.astype(np.float64) ** 2 + y.astype(np.float64) ** 2)
    e = np.maximum(np.floor(np.log2(np.maximum(h, 1e-300))), -126) - 23
    return np.abs(g.astype(np.float64) - h) / np.exp2(e)


def measure(fp8lab):
    torch.set_num_threads(1)
    rng = np.random.default_rng(1)
    n = 1 << 21
    sets = {
        "bits": (rng.integers(0, 2 ** 32, n, dtype=np.uint64).astype(np.uint32).view(np.float32),
                 rng.integers(0, 2 ** 32, n, dtype=np.uint64).astype(np.uint32).view(np.float32)),
        "normal": (rng.standard_normal(n).astype(np.float32), rng.standard_normal(n).astype(np.float32)),
    }
    a = rng.standard_normal(n).astype(np.float32)
    sets["near"] = (a, (a * rng.uniform(0.5, 2.0, n)).astype(np.float32))
    hp = hard_pairs(1 << 18)
    sets["hard"] = (np.array([p[0] for p in hp], np.float32), np.array([p[1] for p in hp], np.float32))
    with tempfile.TemporaryDirectory() as d:
        src, dst = os.path.join(d, "in.safetensors"), os.path.join(d, "out.safetensors")
        tens = {}
        for k, (x, y) in sets.items():
            m = np.isfinite(x) & np.isfinite(y)
            tens[k + ".x"], tens[k + ".y"] = x[m], y[m]
        write_safetensors(src, tens)
        lua = ("local t = fp8.load_file(%r); local o = {}; for _, k in ipairs({'bits', 'normal', 'near', 'hard'}) do "
               "o[k] = t[k .. '.x']:hypot(t[k .. '.y']) end; fp8.save_file(o, %r)") % (src, dst)
        subprocess.run([fp8lab, "-e", lua], check=True)
        for k in sets:
            x, y = tens[k + ".x"], tens[k + ".y"]
            g = read_safetensors(dst, k)
            t = torch.hypot(torch.from_numpy(x), torch.from_numpy(y)).numpy()
            # the exact decision where the double is near a midpoint (fp8lab's is exact by construction; checked here)
            dbl = np.sqrt(x.astype(np.float64) ** 2 + y.astype(np.float64) ** 2)
            low = (dbl.view(np.uint64) & np.uint64(0x1FFFFFFF)).astype(np.int64) - 0x10000000
            hard = np.nonzero((np.abs(low) <= 4) | (dbl < 2.0 ** -126))[0]
            cr = dbl.astype(np.float32).view(np.uint32).copy()
            for i in hard:
                cr[i] = correctly_rounded(float(x[i]), float(y[i]))
            gu, tu = g.view(np.uint32), t.view(np.uint32)
            print("%-6s %8d pairs: fp8lab != correctly rounded %d; torch != correctly rounded %d (max %.4f ulp, "
                  "mean %.2e); fp8lab != torch %d; double expression != correctly rounded %d" % (
                      k, len(x), int((gu != cr).sum()), int((tu != cr).sum()), float(ulps(t, x, y).max()),
                      float(ulps(t, x, y).mean()), int((gu != tu).sum()),
                      int((dbl.astype(np.float32).view(np.uint32) != cr).sum())))


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--measure":
        measure(sys.argv[2])
    else:
        literals()
