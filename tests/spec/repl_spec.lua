-- repl_spec.lua — the REPL: the value printer and completion of fp8.repl as pure functions,
-- help entries, and whole sessions through a pipe and through a pseudo-terminal.
local repl = require "fp8.repl"
local help = require "fp8.help"
local BIN = FP8LAB_BIN

local U = dofile("tests/spec/helpers/util.lua")
local q = U.q

describe("repl.format", function()
  local f = repl.format
  it("quotes strings and escapes control characters", function()
    assert.are.equal('"hi"', f("hi"))
    assert.are.equal('"a\\nb"', f("a\nb"))
    assert.are.equal('"say \\"x\\""', f('say "x"'))
  end)
  it("prints numbers, keeping floats and integers apart", function()
    assert.are.equal("3", f(3))
    assert.are.equal("2.0", f(2.0))
    assert.are.equal("0.5", f(0.5))
    assert.are.equal("nil", f(nil))
    assert.are.equal("true", f(true))
  end)
  it("prints tables nested, array part first, keys sorted", function()
    assert.are.equal('{1, "a", b = {c = true}, z = 2}', f({ 1, "a", z = 2, b = { c = true } }))
    assert.are.equal('{[10] = 2, ["x y"] = 1}', f({ [10] = 2, ["x y"] = 1 }))  -- numbers first
    assert.are.equal("{}", f({}))
  end)
  it("detects cycles", function()
    local t = { name = "root" }; t.self = t
    local s = f(t)
    assert.truthy(s:find('name = "root"', 1, true))
    assert.truthy(s:find("self = <cycle table: ", 1, true))
  end)
  it("prints a shared (non-cyclic) subtable in full each time", function()
    local s = { 1 }
    assert.are.equal("{a = {1}, b = {1}}", f({ a = s, b = s }))
  end)
  it("caps the depth", function()
    -- six nested tables, five shown: the sixth is elided
    assert.are.equal("{{{{{{...}}}}}}", f({ { { { { { 1 } } } } } }, { max_depth = 5, max_items = 40, width = 78 }))
    assert.are.equal("{a = {...}}", f({ a = { b = 1 } }, { max_depth = 1, max_items = 40, width = 78 }))
  end)
  it("caps the number of entries", function()
    local t = {}; for i = 1, 100 do t[i] = i end
    local s = f(t, { max_depth = 4, max_items = 5, width = 200 })
    assert.are.equal("{1, 2, 3, 4, 5, ... (95 more)}", s)
  end)
  it("goes multi-line when one line is too wide", function()
    local s = f({ alpha = string.rep("a", 40), beta = string.rep("b", 40) })
    assert.are.equal('{\n  alpha = "' .. string.rep("a", 40) .. '",\n  beta = "' .. string.rep("b", 40) .. '"\n}', s)
  end)
  it("uses __tostring for tables and userdata", function()
    local obj = setmetatable({}, { __tostring = function() return "Tensor[2, 3] f32" end })
    assert.are.equal("Tensor[2, 3] f32", f(obj))
    assert.are.equal("{Tensor[2, 3] f32}", f({ obj }))
    assert.matches("^file %(", f(io.stdout))
  end)
  it("survives a failing __tostring", function()
    local bad = setmetatable({}, { __tostring = function() error("nope") end })
    assert.matches("^<__tostring failed", f(bad))
  end)
end)

describe("repl.complete", function()
  local methods = { shape = function() end, sum = function() end, dtype = "f32" }
  local Tensor = { __index = methods }
  local env = {
    fp8 = { tensor = 1, zeros = 2, nn = { Linear = 3, LayerNorm = 4 } },
    print = print, pairs = pairs,
    x = setmetatable({}, Tensor),
    s = "text",
  }
  local c = repl.complete
  it("completes globals and keywords", function()
    assert.are.same({ "print" }, c("pri", env))
    assert.are.same({ "pairs", "print" }, c("p", env))
    assert.are.same({ "while" }, c("whi", env))
  end)
  it("completes fields after '.'", function()
    assert.are.same({ "fp8.tensor" }, c("fp8.ten", env))
    assert.are.same({ "fp8.nn.LayerNorm", "fp8.nn.Linear" }, c("fp8.nn.L", env))
    assert.are.same({ "fp8.nn", "fp8.tensor", "fp8.zeros" }, c("fp8.", env))
  end)
  it("completes methods after ':' through the metatable's __index", function()
    assert.are.same({ "x:shape", "x:sum" }, c("x:s", env))
    assert.are.same({ "s:upper" }, c("s:upp", env))   -- the string metatable
  end)
  it("uses only the expression at the end of the line", function()
    assert.are.same({ "fp8.zeros" }, c("local y = print(fp8.ze", env))
    assert.are.same({ "x:shape" }, c("a, b = x:sh", env))
  end)
  it("does not evaluate calls or unknown names", function()
    assert.are.same({}, c("f().x", env))
    assert.are.same({}, c("nothere.x", env))
    assert.are.same({}, c("fp8.tensor.x", env))   -- a number has no fields
    assert.are.same({}, c("12.", env))
  end)
  it("defaults to the globals", function()
    assert.are.same({ "fp8" }, c("fp8"))
  end)
  it("runs no user __index (a proxy's side effects), but fp8lab's own (the lazy fp8.nn, a tensor's fields)", function()
    local calls = 0
    local proxy = setmetatable({}, { __index = function(_, k) calls = calls + 1; return { [k .. "_x"] = 1 } end })
    local chained = setmetatable({}, { __index = setmetatable({}, { __index = { inner = { deep = 1 } } }) })
    local e = { p = proxy, ch = chained, fp8 = fp8, m = fp8.nn.Linear(2, 2) }
    assert.are.same({}, c("p.a.", e))
    assert.are.equal(0, calls)
    assert.are.same({ "ch.inner.deep" }, c("ch.inner.d", e))   -- __index tables are walked
    assert.are.same({ "fp8.nn.Linear" }, c("fp8.nn.Linea", e))
    -- a module's parameters come through Module's __index function (lua/fp8/nn/module.lua), not raw fields
    assert.is_nil(rawget(e.m, "weight"))
    assert.are.same({ "m.weight:shape", "m.weight:shape_str" }, c("m.weight:sha", e))
    local loop = {}
    setmetatable(loop, { __index = loop })
    assert.are.same({}, c("loop.a.", { loop = loop }))
  end)
end)

describe("the printer and a large table", function()
  it("orders only the keys it shows (sorting them all took half a minute for a million table keys)", function()
    local calls, t = 0, {}
    local mt = { __tostring = function(k) calls = calls + 1; return rawget(k, 1) end }
    for i = 1, 2000 do t[setmetatable({ ("key%05d"):format((i * 7919) % 2000) }, mt)] = i end
    local out = repl.format(t)
    assert.truthy(out:find("^{\n  %[key00000%] = %d+,\n  %[key00001%] = %d+,"), out:sub(1, 200))
    assert.truthy(out:find("%[key00039%] = %d+,\n  %.%.%. %(1960 more%)\n}$"), out:sub(-200))
    assert.truthy(calls < 20000, "tostring called " .. calls .. " times for 2000 keys")
  end)
end)

describe("the printer and a failing __tostring", function()
  it("prints a value whose __tostring raises an error object that cannot be printed either", function()
    local e = setmetatable({}, { __tostring = function() error("x") end })
    local v = setmetatable({}, { __tostring = function() error(e) end })
    -- the REPL's printer itself raised, with a traceback through repl.lua
    assert.are.equal("<__tostring failed: (error object is a table value)>", repl.format(v))
    assert.are.equal("{<__tostring failed: (error object is a table value)>}", repl.format({ v }))
  end)
  it("prints a table whose keys' __tostring fails or gives no string (sorting the keys raised)", function()
    local bad = setmetatable({}, { __tostring = function() error("nope") end })
    local odd = setmetatable({}, { __tostring = function() return {} end })
    local s = repl.format({ [bad] = 1, [{}] = 2 })
    assert.truthy(s:find("[<__tostring failed: ", 1, true) and s:find("nope>] = 1", 1, true), s)
    assert.truthy(s:find("[{}] = 2", 1, true), s)
    s = repl.format({ [odd] = 1, [{}] = 2 })
    assert.truthy(s:find("[<__tostring failed: '__tostring' must return a string>] = 1", 1, true), s)
    local many = {}
    for i = 1, 200 do many[setmetatable({}, { __tostring = i % 2 == 0 and function() error("e") end or nil })] = i end
    assert.truthy(repl.format(many):find("... (160 more)", 1, true))
  end)
end)

describe("help", function()
  it("has an overview with sections", function()
    local t = help.text()
    -- a short index: one line per section (help("tensors") lists one)
    for _, w in ipairs { "Formats", "Tensors", "Quantization", "REPL", "encode", "help(" } do
      assert.truthy(t:find(w, 1, true), "overview lacks " .. w)
    end
  end)
  it("finds one entry by name or by function", function()
    assert.truthy(help.text("encode"):find("fp8.encode(x, fmt", 1, true))
    assert.truthy(help.text("fp8.encode"):find("fp8.encode(x, fmt", 1, true))
    if type(fp8) == "table" and fp8.encode then
      assert.truthy(help.text(fp8.encode):find("fp8.encode(x, fmt", 1, true))
    end
    assert.truthy(help.text("nosuchthing"):find("no help for 'nosuchthing'", 1, true))
  end)
  it("shows an object's class entry, a tensor's methods, and any other value in one short line", function()
    if not (type(fp8) == "table" and fp8.Accelerator) then return pending("fp8 not available") end
    local m = fp8.nn.Linear(4, 4)
    local opt = fp8.optim.AdamW(m:parameters())
    local sig = {   -- help(object) said "no help for <the object's whole text>" for every one of them
      { m, "fp8.nn.Linear(in_features" }, { opt, "fp8.optim.AdamW(params" }, { fp8.Accelerator(), "fp8.Accelerator{" },
      { fp8.FP8RecipeKwargs(), "fp8.FP8RecipeKwargs{" }, { fp8.profiler.profile {}, "fp8.profiler.profile{" },
      { fp8.data.DataLoader { dataset = { 1, 2, 3, 4 }, batch_size = 2 }, "fp8.data.DataLoader" },
      { fp8.amp.GradScaler {}, "fp8.amp.GradScaler{" },
    }
    for i, c in ipairs(sig) do
      local t = help.text(c[1])
      assert.are.equal(c[2], t:sub(1, #c[2]), "object " .. i .. ": " .. t:sub(1, 200))
    end
    local t = help.text(fp8.randn { 300, 300 })
    assert.truthy(t:find("a Tensor", 1, true) and t:find("Tensors:", 1, true) and t:find("Quantization:", 1, true))
    assert.falsy(t:find("dtype=fp32", 1, true))
    local bad = setmetatable({}, { __tostring = function() error("no text") end })
    assert.matches("^no help for table %(help%(%) lists the sections%)$", help.text(bad))
    local multi = setmetatable({}, { __tostring = function() return "first line\nsecond line" end })
    assert.are.equal("no help for first line (help() lists the sections)", help.text(multi))
  end)
  it("help()'s overview fits 80 columns (it was up to 126 wide); help(\"Tensor\") is a section", function()
    local n = 0
    for line in (help.text() .. "\n"):gmatch("(.-)\n") do
      n = n + 1
      -- or a section line with one name only (the first, too long for more) and the count
      local one_name = line:match("^  %S+ +%S.- +[^, ]+, %.%.%. %(%d+%)$") ~= nil
      assert.is_true(utf8.len(line) <= 80 or one_name, line)
    end
    assert.is_true(n > 5)
    -- a section's one thing names it ("Tensor" gave only suggestions), unless an entry has the name
    assert.are.equal("Tensors:", help.text("Tensor"):match("^[^\n]*"))
    assert.are.equal("Checkpoints:", help.text("checkpoint"):match("^[^\n]*"))
    assert.is_nil(help.text("tensor"):find("Tensors:", 1, true))
  end)

  it("suggests no names for an empty word or a symbol (every two-letter name was 'near' them)", function()
    for _, w in ipairs { "", " ", "%", "()", "fp8." } do
      assert.are.equal(("no help for '%s' (help() lists the sections)"):format(w), help.text(w))
    end
    assert.truthy(help.text("tp"):find("did you mean: .*Tensor:to"))
    assert.truthy(help.text("encdoe"):find("did you mean: encode?", 1, true))
    -- a name documented inside another entry is suggested too (only entry names were)
    assert.truthy(help.text("acc:prepar"):find("did you mean: acc:prepare", 1, true))
    assert.truthy(help.text("Tensor:reshap"):find("did you mean: Tensor:reshape", 1, true))
  end)
  it("answers a module by its table or its name, and fp8 itself with the overview", function()
    if not (type(fp8) == "table" and fp8.nn) then return pending("fp8 not available") end
    -- help(fp8) and help("fp8") said "no help for table: 0x...", help("optim") or help("nn") suggested Tensor:ne,
    -- and help(fp8.nn.functional) (also fp8.nn.F) said "no help for table" though the overview lists it
    assert.are.equal(help.text(), help.text(fp8))
    assert.are.equal(help.text(), help.text("fp8"))
    for _, w in ipairs { "optim", "fp8.optim", "nn", "fp8.nn", "data" } do
      local mod = w:gsub("^fp8%.", "")
      assert.are.equal(help.text(fp8[mod]), help.text(w), w)
      assert.truthy(help.text(w):find("^fp8%." .. mod .. ", a module:"), w)
    end
    local F = help.text("nn.functional")
    assert.are.equal(F, help.text(fp8.nn.functional))
    assert.are.equal(F, help.text(fp8.nn.F))
    assert.truthy(help.text("nosuch.x"):find("^no help for 'nosuch.x'"))
  end)
  it("can be extended by other modules", function()
    help.add { name = "spec_demo", sig = "fp8.spec_demo(n)", doc = "A demo entry.", section = "Other" }
    assert.truthy(help.text("spec_demo"):find("A demo entry.", 1, true))
    assert.truthy(help.text("other"):find("fp8.spec_demo(n)", 1, true))
  end)
end)

describe("REPL session", function()
  -- session(input [, args [, env]]) -> output (stdout and stderr), exit code. Piped stdin without -i is one
  -- script (as lua.c does), so the line-by-line REPL is reached through -i.
  local function session(input, args, env)
    local inp, out = os.tmpname(), os.tmpname()
    local f = assert(io.open(inp, "wb")); f:write(input); f:close()
    local _, _, code = os.execute(string.format("%s%s %s <%s >%s 2>&1", env or "", q(BIN), args or "-i", inp, out))
    f = assert(io.open(out, "rb")); local s = f:read("a"); f:close()
    os.remove(inp); os.remove(out)
    return s, code
  end

  it("runs piped stdin without -i as one script: locals last, an error stops it with status 1", function()
    local out, code = session("local y = 1\nprint(y)\n", "")
    assert.are.equal(0, code)
    assert.are.equal("1\n", out)
    out, code = session('error("x")\nprint("after")\n', "")
    assert.are.equal(1, code)
    assert.truthy(out:find("stdin:1: x", 1, true), out)
    assert.falsy(out:find("after", 1, true), out)
    out, code = session("for i = 1, 3 do\nprint(i)\n", "")   -- cut off: the parser's error, nothing run
    assert.are.equal(1, code)
    assert.are.equal("fp8lab: stdin:3: 'end' expected (to close 'for' at line 1) near <eof>\n", out)
    -- with -i the same lines are REPL lines: a local ends with its line
    out, code = session("local y = 1\nprint(y)\n")
    assert.are.equal(0, code)
    assert.are.equal("nil\n", out)
  end)

  it("reports a statement cut off by the end of piped input, with status 1", function()
    local out, code = session("print('first')\nfor i = 1, 3 do\nprint(i)\n")
    assert.are.equal(1, code)
    assert.are.equal("first\nstdin:2: 'end' expected (to close 'for' at line 1) near <eof>\n", out)
  end)

  it("refuses a bad FP8LAB_HISTSIZE, naming it and the range", function()
    for _, v in ipairs { "abc", "-1", "1000001", "12x", " 5" } do
      local out, code = session("print(1)\n", "-i", "FP8LAB_HISTSIZE=" .. q(v) .. " ")
      assert.are.equal(2, code, v)
      assert.are.equal('fp8lab: FP8LAB_HISTSIZE: expected an integer in 0..1000000 (entries of REPL history), got "'
        .. v .. '"\n', out)
    end
    local out, code = session("print(1)\n", "-i", "FP8LAB_HISTSIZE=0 ")
    assert.are.equal(0, code)
    assert.are.equal("1\n", out)
  end)

  it("runs lines from a pipe, auto-printing expressions", function()
    local out, code = session('1 + 1\nx = {1, "a"}\nx\n"s", nil, 2.5\n=3\n')
    assert.are.equal(0, code)
    assert.are.equal('2\n{1, "a"}\n"s"\tnil\t2.5\n3\n', out)
  end)

  it("continues incomplete statements over several lines", function()
    local out = session("for i = 1, 3 do\n  print(i)\nend\nfunction f(a)\nreturn a * 2\nend\nf(21)\n")
    assert.are.equal("1\n2\n3\n42\n", out)
  end)

  it("reports errors with a traceback and goes on", function()
    local out, code = session("error('oops')\nprint('after')\nx = = 1\nprint('end')\n")
    assert.are.equal(0, code)
    assert.truthy(out:find("stdin:1: oops\nstack traceback:", 1, true))
    assert.truthy(out:find("after", 1, true))
    assert.truthy(out:find("unexpected symbol near '='", 1, true))
    assert.truthy(out:find("end\n$"))
  end)

  it("has help and fp8 as globals", function()
    local out = session("type(help), type(fp8)\n")
    assert.are.equal('"function"\t"table"\n', out)
  end)

  -- The terminal path (readline, Ctrl-C at the prompt and during a computation, completion)
  -- needs a pty; python3's pty module drives one.
  local has_python = os.execute("python3 -c 'import pty' >/dev/null 2>&1")
  local pty_it = has_python and it or pending
  -- driver BIN MODE [HISTORY_FILE]: MODE readline or plain (what `fp8lab env` says), or history (three
  -- lines into HISTORY_FILE), multiline (a statement on three lines, then one line) and recall (the first run again
  -- from the file), or resize (the window grows while a line runs)
  local driver = [==[
import os, pty, sys, time, select, fcntl, termios, struct
pid, fd = pty.fork()
if pid == 0:
    os.environ["FP8LAB_HISTORY"] = sys.argv[3] if len(sys.argv) > 3 else os.devnull
    if sys.argv[2] == "resize": os.environ["TERM"] = "xterm"   # cursor motions readline spells the same everywhere
    os.execv(sys.argv[1], [sys.argv[1]])
if sys.argv[2] == "resize": fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 40, 0, 0))
buf = b""
notices = 0
def expect(s, t=10):
    global buf, notices
    end = time.time() + t
    while s.encode() not in buf:
        r, _, _ = select.select([fd], [], [], max(0, end - time.time()))
        if not r or time.time() > end:   # output that never stops (a loop printing) fails in time too
            print("TIMEOUT waiting for %r; got %r" % (s, buf[-300:])); sys.exit(1)
        buf += os.read(fd, 4096)
    notices += buf[:buf.index(s.encode())].count(b"history not saved")
    buf = buf[buf.index(s.encode()) + len(s):]
expect("fp8> ")
if sys.argv[2] == "history":
    for line in (b"a1 = 1\n", b"a2 = 2\n", b"a3 = 3\n"):
        os.write(fd, line); expect("fp8> ")
    os.write(fd, b"\x04")
    _, st = os.waitpid(pid, 0)
    print("exit", os.waitstatus_to_exitcode(st))
    if notices: print("notices", notices)
    sys.exit(0)
if sys.argv[2] == "multiline":
    # a statement on three lines, then one on one line: two entries
    os.write(fd, b"function f(x)\n"); expect(">> ")
    os.write(fd, b"  return x * 2\n"); expect(">> ")
    os.write(fd, b"end\n"); expect("fp8> ")
    os.write(fd, b"b = 1\n"); expect("fp8> ")
    os.write(fd, b"\x04")
    _, st = os.waitpid(pid, 0)
    print("exit", os.waitstatus_to_exitcode(st))
    sys.exit(0)
if sys.argv[2] == "recall":
    # a new session: two entries back is the whole three-line statement, run again as it was typed
    os.write(fd, b"\x1b[A\x1b[A\n"); expect("fp8> ")
    os.write(fd, b"f(21)\n"); expect("42"); expect("fp8> ")
    os.write(fd, b"\x04")
    _, st = os.waitpid(pid, 0)
    print("exit", os.waitstatus_to_exitcode(st))
    sys.exit(0)
if sys.argv[2] == "resize":
    # the window grows from 40 to 200 columns while a line runs (readline is not reading); a 100-column line fits
    # it, so going to its start (Ctrl-A) moves no cursor up, as it did when readline kept wrapping at 40
    os.write(fd, b"os.execute('stty cols 200 </dev/tty')\n"); expect("fp8> ")
    os.write(fd, b"s = '" + b"x" * 100 + b"'"); expect("x" * 90); time.sleep(0.3)
    os.write(fd, b"\x01"); time.sleep(0.3)
    r, _, _ = select.select([fd], [], [], 1)
    moved = os.read(fd, 4096) if r else b""
    if b"\x1b[A" in moved: print("cursor up after Ctrl-A: %r" % moved)
    os.write(fd, b"\x05\n"); expect("fp8> ")
    os.write(fd, b"\x04")
    _, st = os.waitpid(pid, 0)
    print("exit", os.waitstatus_to_exitcode(st))
    sys.exit(0)
os.write(fd, b"x = 0 while true do x = x + 1 end\n"); time.sleep(0.5); os.write(fd, b"\x03")
expect("interrupted!"); expect("fp8> ")
os.write(fd, b"x > 0\n"); expect("true"); expect("fp8> ")
os.write(fd, b"abc"); time.sleep(0.2); os.write(fd, b"\x03"); expect("fp8> ")
os.write(fd, b"for i = 1, 2 do\n"); expect(">> "); os.write(fd, b"\x03"); expect("fp8> ")
os.write(fd, b"40 + 2\n"); expect("42"); expect("fp8> ")
# Ctrl-D at a continuation prompt drops the statement (the parser's <eof> error) and the session goes on
os.write(fd, b"for i = 1, 2 do\n"); expect(">> "); os.write(fd, b"\x04"); expect("near <eof>"); expect("fp8> ")
os.write(fd, b"40 + 3\n"); expect("43"); expect("fp8> ")
if sys.argv[2] == "readline":
    os.write(fd, b"string.for\t('%d', 7)\n"); expect("\"7\""); expect("fp8> ")
    # a unique completion adds no space, so a second one can follow it
    os.write(fd, b"fp8.opti\t.SG\t == fp8.optim.SGD\n"); expect("true"); expect("fp8> ")
    # Ctrl-C at completion's "Display all 300 possibilities? (y or n)" answers no and drops the line (it asked
    # again forever, printing ^C)
    os.write(fd, b"big = {} for i = 1, 300 do big['k' .. i] = i end\n"); expect("fp8> ")
    os.write(fd, b"big.k\t\t"); expect("(y or n)"); time.sleep(0.2); os.write(fd, b"\x03"); expect("fp8> ")
    os.write(fd, b"40 + 4\n"); expect("44"); expect("fp8> ")
os.write(fd, b"\x04")
_, st = os.waitpid(pid, 0)
print("exit", os.waitstatus_to_exitcode(st))
]==]
  -- tab completion and history need readline; `fp8lab env` says whether it was built in
  local e = io.popen(q(BIN) .. " env"); local env_out = e:read("a"); e:close()
  local rl = env_out:find("readline%s+not built") and "plain" or "readline"
  local function drive(mode, hist, env)
    local py = os.tmpname()
    local f = assert(io.open(py, "w")); f:write(driver); f:close()
    local p = io.popen((env or "") .. "python3 " .. q(py) .. " " .. q(BIN) .. " " .. mode .. (hist and (" " .. q(hist)) or "") .. " 2>&1")
    local out = p:read("a"); p:close()
    os.remove(py)
    return out
  end

  pty_it("handles Ctrl-C, Ctrl-D at a continuation prompt and completion at a terminal", function()
    assert.are.equal("exit 0\n", drive(rl))
  end)

  local hist_it = (has_python and rl == "readline") and it or pending
  hist_it("reads the window's size again after a line ran (a resize then left readline at the old width)", function()
    assert.are.equal("exit 0\n", drive("resize"))
  end)

  -- the history file less the "#<time>" line written before each entry
  local function entries(path) return (U.read(path):gsub("#%d+\n", "")) end

  hist_it("keeps FP8LAB_HISTSIZE lines of history in the file (0: none read or written)", function()
    local h = os.tmpname()
    U.write(h, "old1\nold2\nold3\nold4\nold5\n")
    assert.are.equal("exit 0\n", drive("history", h, "FP8LAB_HISTSIZE=2 "))
    assert.are.equal("a2 = 2\na3 = 3\n", entries(h))
    U.write(h, "old1\n")
    assert.are.equal("exit 0\n", drive("history", h, "FP8LAB_HISTSIZE=0 "))
    assert.are.equal("old1\n", U.read(h))
    assert.are.equal("exit 0\n", drive("history", h))   -- the default keeps them all (1000)
    assert.are.equal("old1\na1 = 1\na2 = 2\na3 = 3\n", entries(h))
    -- a file from before "#<time>" lines: its lines stay entries of their own, and it is rewritten with one each
    U.write(h, "old1\nold2\n")
    assert.are.equal("exit 0\n", drive("history", h))
    assert.matches("^#%d+\nold1\n#%d+\nold2\n#%d+\na1 = 1\n#%d+\na2 = 2\n#%d+\na3 = 3\n$", U.read(h))
    os.remove(h)
    -- a file that cannot be written (here a directory) is said once; the history was silently not kept
    local dir = os.tmpname()
    os.remove(dir)
    os.execute("mkdir " .. q(dir))
    assert.are.equal("exit 0\nnotices 1\n", drive("history", dir))
    os.execute("rmdir " .. q(dir))
    -- a named pipe is said once and not opened: opening it blocked before the first prompt
    local fifo = os.tmpname()
    os.remove(fifo)
    assert.is_true(os.execute("mkfifo " .. q(fifo)))
    assert.are.equal("exit 0\nnotices 1\n", drive("history", fifo))
    os.remove(fifo)
  end)

  hist_it("keeps a statement typed on several lines as one entry, in the file too (a new session recalls it whole)",
    function()
    local h = os.tmpname()
    assert.are.equal("exit 0\n", drive("multiline", h))
    assert.matches("^#%d+\nfunction f%(x%)\n  return x %* 2\nend\n#%d+\nb = 1\n$", U.read(h))
    assert.are.equal("exit 0\n", drive("recall", h))
    os.remove(h)
  end)
end)

describe("completion of fp8 tensors", function()
  it("lists tensor methods behind the C __index function", function()
    if not (type(fp8) == "table" and fp8.zeros) then return pending("fp8.zeros not available") end
    local got = require("fp8.repl").complete("x:sh", { x = fp8.zeros{2} })
    assert.truthy(#got > 0)
    for _, c in ipairs(got) do assert.matches("^x:sh", c) end
    local found = false
    for _, c in ipairs(got) do if c == "x:shape" then found = true end end
    assert.is_true(found)
  end)
end)
