-- Found on 2026-12-06 (stop 93): the prompt, the tour and the lessons as a learner meets them.
-- docs/robustness.md, "The prompt and the lessons, as a learner meets them (stop 93)".
local BIN = FP8LAB_BIN or "build/fp8lab"
local U = dofile("tests/spec/helpers/util.lua")
local q = U.q

-- Runs `fp8lab ARGS` with `input` on stdin (a pipe: no terminal); returns stdout, stderr, exit status.
local function run(args, input, env)
  local inp, out, err = os.tmpname(), os.tmpname(), os.tmpname()
  U.write(inp, input or "")
  local _, _, code = os.execute(("%s%s %s < %s > %s 2> %s"):format(env or "", q(BIN), args, q(inp), q(out), q(err)))
  os.remove(inp)
  return U.take(out), U.take(err), code
end

describe("the tour", function()
  it("shows code that runs when retyped at the prompt, line by line (its locals were gone on the next line)", function()
    local shown = run("scripts/tour.lua")
    local typed = {}
    for line in shown:gmatch("[^\n]+") do
      local code = line:match("^fp8> (.*)$")
      if code then typed[#typed + 1] = code end
    end
    assert.is_true(#typed >= 20, shown)
    -- -i with piped input runs each line as the prompt does (a chunk of its own) and reports an error and goes on
    local out, err, code = run("-i", table.concat(typed, "\n") .. "\n")
    assert.are.equal(0, code)
    assert.are.equal("", err)
    assert.truthy(out:find("scale 1:   underflowed\t709\tof\t1024", 1, true), out)
    assert.truthy(out:find("relative error of the FP8 GEMM:", 1, true), out)
  end)
end)

describe("help at the prompt", function()
  it("says that help(nil) got nil, which a misspelt name gives, rather than listing the sections", function()
    local out, err = run("-i", "help(fp8.hsit)\nhelp(fp8.nn.Lnear)\n")
    assert.are.equal("", err)
    local n = select(2, out:gsub("help%(nil%): the value given is nil", ""))
    assert.are.equal(2, n, out)
    assert.is_nil(out:find("formats", 1, true), out)   -- not the index of sections
    out = run("-i", "help()\n")
    assert.truthy(out:find("formats        Formats", 1, true), out)   -- help() still lists them
  end)

  it("answers `help` typed without parentheses with how to call it", function()
    local out = run("-i", "help\n")
    assert.are.equal('help is a function: help() lists the sections, help("name") or help(fp8.fn) shows one entry\n', out)
    out = run("-i", "h = help\nh == help, type(help)\n")   -- the function itself is unchanged
    assert.are.equal('true\t"function"\n', out)
  end)

  it("says how to leave when exit() or quit() is called, as Python's prompt would take them", function()
    local _, err = run("-i", "exit()\nquit()\nprint('still here')\n")
    assert.truthy(err:find("global 'exit')\n  (Lua has no exit(): os.exit() ends fp8lab; at the prompt, so does Ctrl-D)",
      1, true), err)
    assert.truthy(err:find("(Lua has no quit():", 1, true), err)
    -- a script's own exit is its own: no hint
    _, err = run("-i", "exit = function() print('mine') end\nexit()\n")
    assert.are.equal("", err)
  end)
end)

-- The history file needs a terminal (readline) and python3's pty module to drive one.
local has_python = os.execute("python3 -c 'import pty' >/dev/null 2>&1")
local env_out = run("env")
local hist_it = (has_python and not env_out:find("readline%s+not built")) and it or pending

describe("the prompt's history file", function()
  local driver = [==[
import os, pty, sys, time, select
pid, fd = pty.fork()
if pid == 0:
    os.environ["FP8LAB_HISTORY"] = sys.argv[2]
    os.environ["FP8LAB_HISTSIZE"] = "3"
    os.execv(sys.argv[1], [sys.argv[1]])
buf = b""
def expect(s, t=20):
    global buf
    end = time.time() + t
    while s.encode() not in buf:
        r, _, _ = select.select([fd], [], [], max(0, end - time.time()))
        if not r or time.time() > end:
            print("TIMEOUT waiting for %r; got %r" % (s, buf[-300:])); sys.exit(1)
        buf += os.read(fd, 4096)
    buf = buf[buf.index(s.encode()) + len(s):]
expect("fp8> ")
if sys.argv[3] == "type":
    os.write(fd, b"a1 = 1\n"); expect("fp8> ")
    os.write(fd, b"function g()\n"); expect(">> ")
    os.write(fd, b"  return 42\n"); expect(">> ")
    os.write(fd, b"end\n"); expect("fp8> ")
    os.write(fd, b"a2 = 2\n"); expect("fp8> ")
    os.write(fd, b"a3 = 3\n"); expect("fp8> ")
os.write(fd, b"\x04")
_, st = os.waitpid(pid, 0)
print("exit", os.waitstatus_to_exitcode(st))
]==]
  local function drive(hist, mode)
    local py = os.tmpname()
    U.write(py, driver)
    local p = io.popen("python3 " .. q(py) .. " " .. q(BIN) .. " " .. q(hist) .. " " .. mode .. " 2>&1")
    local out = p:read("a")
    p:close()
    os.remove(py)
    return out
  end

  hist_it("keeps the last FP8LAB_HISTSIZE entries whole, each after its #<time> line, across sessions", function()
    local hist = os.tmpname()
    os.remove(hist)
    assert.are.equal("exit 0\n", drive(hist, "type"))
    local text = U.must_read(hist)
    -- readline's truncation by lines cut the first kept entry's "#<time>" line: the next session then read the file as
    -- one without timestamps and split `function g() ... end` into three entries
    local entries = {}
    for stamp, entry in text:gmatch("#(%d+)\n([^#]*)") do entries[#entries + 1] = entry end
    assert.truthy(text:match("^#%d+\n"), text)
    assert.are.same({ "function g()\n  return 42\nend\n", "a2 = 2\n", "a3 = 3\n" }, entries)
    -- a second session reads it as written and leaves it so
    assert.are.equal("exit 0\n", drive(hist, "quit"))
    assert.are.equal(text, U.must_read(hist))
    os.remove(hist)
  end)
end)

describe("fp8lab -i", function()
  it("gives the prompt after a script's or -e's error too, with the globals it left, and exits 1", function()
    local path = os.tmpname() .. ".lua"
    U.write(path, "x = 5\nerror('stop here')\n")
    local out, err, code = run("-i " .. q(path), "print(x + 1)\n")
    os.remove(path)
    assert.are.equal("6\n", out)   -- the old code ended at the error: the line never ran
    assert.truthy(err:find(":2: stop here", 1, true), err)
    assert.are.equal(1, code)
    out, err, code = run("-e 'y = 2; error(\"e\")' -e 'y = 3' -i", "print(y)\n")
    assert.are.equal("2\n", out)   -- the -e options after the failing one do not run
    assert.are.equal(1, code)
    -- without -i an error still ends the run
    out, err, code = run("-e 'error(\"e\")'", "print(1)\n")
    assert.are.equal("", out)
    assert.are.equal(1, code)
  end)
end)
