"""lua_literal.py — Python values (numbers, nested lists, torch tensors, None) as Lua literals, for the generator
scripts that print PyTorch's values for the specs (scripts/gen_gaps15b.py, scripts/gen_gaps16.py). NaN and the
infinities are printed as the names NAN and INF the specs define; a zero keeps its sign (-0.0); None is nil.
write_data writes such a file into tests/data atomically."""
import math
import os


def lua(v):
    if v is None:
        return "nil"
    if hasattr(v, "tolist"):   # a torch tensor (or numpy array)
        return lua(v.tolist())
    if isinstance(v, list):
        return "{ " + ", ".join(lua(e) for e in v) + " }"
    if math.isnan(v):
        return "NAN"
    if math.isinf(v):
        return "INF" if v > 0 else "-INF"
    if v == 0:
        return "-0.0" if math.copysign(1, v) < 0 else "0"
    return repr(v)


def write_data(name, lines):
    """lines, one a line, as tests/data/<name>, written to a temporary file and renamed over it."""
    path = os.path.join(os.path.dirname(__file__), "..", "tests", "data", name)
    with open(path + ".tmp", "w") as f:
        f.write("\n".join(lines) + "\n")
    os.replace(path + ".tmp", path)
