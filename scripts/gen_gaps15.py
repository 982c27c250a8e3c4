#!/usr/bin/env python3
"""gen_gaps15.py — the hook orders tests/spec/gaps15_spec.lua checks against PyTorch 2.15: which of a tensor's
hooks run in a backward where an earlier hook removes a later one, or registers a new one, for register_hook on a
leaf and on a result and for register_post_accumulate_grad_hook, over two backwards (torch calls the hooks of a
snapshot of the list taken when it calls them: a hook removed meanwhile still runs in that call, a new one from the
next call on).
Run: /opt/torch2/bin/python scripts/gen_gaps15.py   (prints Lua literals, pasted into the spec)."""
import torch


def run(kind, action):
    """kind: "leaf", "result" (register_hook on x or on y = x * 2) or "post" (register_post_accumulate_grad_hook
    on x); action: "remove" (hook a removes hook b) or "add" (hook a registers hook c, in the first backward).
    Returns the hooks called in each of two backwards of y:sum() (the graph kept for the second)."""
    x = torch.ones(2, requires_grad=True)
    y = x * 2
    t = y if kind == "result" else x
    log, handles = [], {}

    def reg(name):
        def fn(_):
            log[-1].append(name)
            if name == "a" and action == "remove" and "b" in handles:
                handles.pop("b").remove()
            if name == "a" and action == "add" and len(log) == 1 and "c" not in handles:
                handles["c"] = reg("c")
        if kind == "post":
            return t.register_post_accumulate_grad_hook(fn)
        return t.register_hook(fn)

    handles["a"] = reg("a")
    handles["b"] = reg("b")
    for _ in range(2):
        log.append([])
        y.sum().backward(retain_graph=True)
    return log


def lua_list(v):
    return "{" + ", ".join('"%s"' % s for s in v) + "}"


def main():
    print("-- torch " + torch.__version__)
    print("local TORCH_HOOK_RUNS = {")
    for kind in ("leaf", "result", "post"):
        for action in ("remove", "add"):
            log = run(kind, action)
            print("  %s_%s = {%s}," % (kind, action, ", ".join(lua_list(l) for l in log)))
    print("}")


if __name__ == "__main__":
    main()
