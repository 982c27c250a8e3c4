#!/usr/bin/env python3
"""st_interop.py FILE EXPECTED.json OUT — for interop_spec.lua: reads a file fp8lab wrote with the
reference `safetensors` parser (deserialize), checks every tensor's dtype, shape and values against
EXPECTED (written by fp8lab: values as hex floats, FP8 also as raw bytes), decoding bf16/FP8 with
ml_dtypes (FP8 bytes compared as bytes, and decode(byte) * scale_inv compared as values), checks the
metadata, then writes the same tensors back to OUT with the Python package. Exit 0 and "ok N" when
everything matches, else a message and exit 1."""
import json
import sys

import ml_dtypes
import numpy as np
from safetensors import TensorSpec, deserialize, serialize_file

NP = {"F32": np.float32, "F16": np.float16, "BF16": ml_dtypes.bfloat16, "F8_E4M3": ml_dtypes.float8_e4m3fn,
      "F8_E5M2": ml_dtypes.float8_e5m2}


def fl(s):
    return {"inf": np.inf, "-inf": -np.inf}.get(s, np.nan if "nan" in s else None) if s in ("inf", "-inf") or "nan" in s \
        else float.fromhex(s)


def main():
    path, exp_path, out = sys.argv[1:4]
    raw = open(path, "rb").read()
    exp = json.load(open(exp_path))
    got = {name: v for name, v in deserialize(raw)}
    # metadata: the header's __metadata__
    n = int.from_bytes(raw[:8], "little")
    meta = json.loads(raw[8:8 + n]).get("__metadata__", {})
    exp["metadata"], exp["companions"] = exp["metadata"] or {}, exp["companions"] or {}   # Lua writes {} as []
    if meta != exp["metadata"]:
        sys.exit(f"metadata {meta} != {exp['metadata']}")
    if sorted(got) != sorted(list(exp["tensors"]) + list(exp["companions"])):
        sys.exit(f"names {sorted(got)} != {sorted(exp['tensors'])} + {sorted(exp['companions'])}")
    for name, shape in exp["companions"].items():
        if got[name]["dtype"] != "F32" or list(got[name]["shape"]) != shape:
            sys.exit(f"{name}: {got[name]['dtype']} {got[name]['shape']}, expected F32 {shape}")
    for name, e in exp["tensors"].items():
        v = got[name]
        if v["dtype"] != e["dtype"] or list(v["shape"]) != e["shape"]:
            sys.exit(f"{name}: {v['dtype']} {v['shape']} != {e['dtype']} {e['shape']}")
        arr = np.frombuffer(bytes(v["data"]), dtype=NP[e["dtype"]]).reshape(e["shape"])
        vals = arr.astype(np.float32)
        want = np.array([fl(s) for s in e["values"]], dtype=np.float32).reshape(e["shape"])
        if e["dtype"].startswith("F8_"):
            c = got[name + "_scale_inv"]
            si = np.frombuffer(bytes(c["data"]), dtype=np.float32).reshape(c["shape"])
            if e.get("pow2"):   # bytes as bytes: ml_dtypes' encoding of value / scale_inv (exact for 2^k)
                enc = (want / si).astype(NP[e["dtype"]]).view(np.uint8)
                if not (enc.reshape(-1) == np.frombuffer(bytes(v["data"]), dtype=np.uint8)).all():
                    sys.exit(f"{name}: FP8 bytes differ from ml_dtypes' encoding")
            vals = (vals * si).astype(np.float32)
        same = (vals == want) | (np.isnan(vals) & np.isnan(want))
        if not same.all() or not (np.signbit(vals) == np.signbit(want)).all():
            sys.exit(f"{name}: values differ: {vals.reshape(-1)[:8]} vs {want.reshape(-1)[:8]}")
    alive, specs = [], {}
    for name, v in got.items():
        buf = np.frombuffer(bytes(v["data"]), dtype=np.uint8).copy()
        alive.append(buf)
        specs[name] = TensorSpec(dtype={"F32": "float32", "F16": "float16", "BF16": "bfloat16", "F8_E4M3": "float8_e4m3fn",
                                        "F8_E5M2": "float8_e5m2"}[v["dtype"]], shape=list(v["shape"]),
                                 data_ptr=buf.ctypes.data, data_len=buf.nbytes)
    serialize_file(specs, out, meta or None)
    print(f"ok {len(got)}")


if __name__ == "__main__":
    main()
