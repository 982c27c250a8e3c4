"""lua_literal.py — Python values (numbers, nested lists, torch tensors, None) as Lua literals, for the generator
scripts that print PyTorch's values for the specs (scripts/gen_gaps15b.py, scripts/gen_gaps16.py). NaN and the
infinities are printed as the names NAN and INF the specs define; a zero keeps its sign (-0.0); None is nil."""
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


def write_lines(path, lines):
    """The lines, each ended by a newline, as the file at path, atomically: a temporary file beside it, synced, renamed
    over it, and the directory synced (a generator stopped halfway leaves the old fixture, not half of a new one)."""
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write("\n".join(lines) + "\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    d = os.open(os.path.dirname(os.path.abspath(path)), os.O_RDONLY)
    try:
        os.fsync(d)
    finally:
        os.close(d)
