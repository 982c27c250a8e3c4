#!/usr/bin/env python3
"""gen_safetensors_fixtures.py — writes tests/data/safetensors/*.safetensors with the Python
`safetensors` package (and ml_dtypes for bf16/FP8 encodings), plus expected.json: every tensor's
dtype, shape and values (float.hex strings, "inf"/"-inf"/"nan"), which tests/spec/interop_spec.lua
checks fp8lab reads exactly. FP8 tensors follow fp8lab's convention (docs/checkpoints.md): a
companion F32 tensor name + "_scale_inv"; the expected values are decode(byte) * scale_inv.
Run: python3 scripts/gen_safetensors_fixtures.py  (needs: pip install safetensors ml_dtypes numpy)."""
import json
import os

import ml_dtypes
import numpy as np
from safetensors import TensorSpec, serialize_file

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "data", "safetensors")
NP = {"F32": np.float32, "F16": np.float16, "BF16": ml_dtypes.bfloat16, "F8_E4M3": ml_dtypes.float8_e4m3fn,
      "F8_E5M2": ml_dtypes.float8_e5m2, "I64": np.int64, "I32": np.int32, "U8": np.uint8, "BOOL": np.bool_}


def hexs(v):
    v = float(v)
    if v != v:
        return "nan"
    if v in (float("inf"), float("-inf")):
        return "inf" if v > 0 else "-inf"
    return v.hex()


def write(name, tensors, metadata=None):
    """tensors: {name: (dtype, np.ndarray)}; expected values are computed from the stored bytes."""
    payload, expected, alive = {}, {}, []
    for tname, (dt, arr) in tensors.items():
        a = np.asarray(arr).astype(NP[dt]).copy(order="C")   # (ascontiguousarray would make a 0-d array 1-d)
        alive.append(a)   # TensorSpec holds a raw pointer: keep the buffer until serialize_file is done
        payload[tname] = TensorSpec(dtype=a.dtype.name, shape=list(a.shape), data_ptr=a.ctypes.data, data_len=a.nbytes)
    for tname, (dt, arr) in tensors.items():
        if tname.endswith("_scale_inv") and tname[: -len("_scale_inv")] in tensors:
            continue                                       # folded into its FP8 tensor
        a = np.asarray(arr).astype(NP[dt]).astype(np.float32)
        comp = tensors.get(tname + "_scale_inv")
        if dt.startswith("F8_") and comp is not None:
            a = a * np.asarray(comp[1], dtype=np.float32)  # broadcast: [1] or size 1 but the scaled axis
        expected[tname] = {"dtype": dt, "shape": list(np.asarray(arr).shape),
                           "values": [hexs(v) for v in a.astype(np.float32).reshape(-1)]}
    serialize_file(payload, os.path.join(OUT, name + ".safetensors"), metadata)
    return expected


def main():
    os.makedirs(OUT, exist_ok=True)
    rng = np.random.default_rng(7)
    exp = {}
    exp["all_dtypes"] = write("all_dtypes", {
        "f32": ("F32", np.array([[1.5, -2.25, 3e-38], [np.inf, -np.inf, -0.0]])),
        "f16": ("F16", np.array([1.0, 65504.0, 6e-8, -0.5])),
        "bf16": ("BF16", rng.standard_normal((2, 3))),
        "e4m3": ("F8_E4M3", rng.standard_normal((2, 4)) * 100),
        "e4m3_scale_inv": ("F32", np.array([0.25])),
        "e5m2": ("F8_E5M2", np.array([57344.0, -1.0, 1.52587890625e-05])),
        "rows": ("F8_E4M3", rng.standard_normal((3, 2)) * 10),
        "rows_scale_inv": ("F32", np.array([[0.5], [1.0], [2.0]])),
        "i64": ("I64", np.array([-5, 0, 16777216])),
        "i32": ("I32", np.array([[7, -2147483648]])),
        "u8": ("U8", np.array([0, 1, 255, 128])),
        "flags": ("BOOL", np.array([True, False, True])),
    }, {"format": "np", "producer": "scripts/gen_safetensors_fixtures.py"})
    exp["empty_and_scalar"] = write("empty_and_scalar", {
        "empty": ("F32", np.zeros((0,))),
        "empty2d": ("BF16", np.zeros((2, 0))),
        "scalar": ("F32", np.array(3.25)),
        "scalar16": ("F16", np.array(-0.125)),
    })
    exp["metadata_only"] = write("metadata_only", {}, {"note": "no tensors", "unicode": "h\u00e9llo \u2713"})
    with open(os.path.join(OUT, "expected.json"), "w") as f:
        json.dump({"files": exp, "metadata": {"all_dtypes": {"format": "np", "producer": "scripts/gen_safetensors_fixtures.py"},
                                              "empty_and_scalar": {}, "metadata_only": {"note": "no tensors",
                                                                                        "unicode": "h\u00e9llo \u2713"}}},
                  f, indent=1, sort_keys=True)
        f.write("\n")


if __name__ == "__main__":
    main()
