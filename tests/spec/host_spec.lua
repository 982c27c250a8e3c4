-- host_spec.lua — the fp8lab command line, spawned as a child process: options, arg, stdin
-- scripts, exit codes, error reports, sub-commands and Ctrl-C.
local BIN = assert(FP8LAB_BIN, "run through tests/busted.lua, which sets FP8LAB_BIN")

local U = dofile("tests/spec/helpers/util.lua")
local q = U.q

local function slurp(path) return U.take(path) or "" end   -- the file's bytes ("" if missing); removed

-- run(args [, stdin_text [, prefix]]) -> stdout, stderr, exit code. args is a shell fragment.
local function run(args, input, prefix)
  local out, err, inp = os.tmpname(), os.tmpname(), os.tmpname()
  local f = assert(io.open(inp, "wb")); f:write(input or ""); f:close()
  local cmd = string.format("%s%s %s <%s >%s 2>%s", prefix or "", q(BIN), args, inp, out, err)
  local _, _, code = os.execute(cmd)
  os.remove(inp)
  return slurp(out), slurp(err), code
end

local function script(text)
  local p = os.tmpname()
  local f = assert(io.open(p, "wb")); f:write(text); f:close()
  return p
end

describe("fp8lab command line", function()
  it("FP8LAB_VERBOSE and FP8LAB_PROGRESS take their values or refuse, never fall through", function()
    local p = script("local function inner() error('boom') end\ninner()\n")
    local _, err, code = run(q(p), nil, "FP8LAB_VERBOSE=yes ")
    assert.are.equal(1, code)
    assert.falsy(err:find("traceback (your code", 1, true), err)   -- the full traceback, not the user's frames only
    _, err, code = run("-e " .. q("print(1)"), nil, "FP8LAB_VERBOSE=maybe ")
    assert.are.equal(2, code)
    assert.truthy(err:find('FP8LAB_VERBOSE: expected a boolean (true or false), got "maybe" (also yes/no, on/off, y/n, '
      .. 't/f, 1/0, in any case)', 1, true), err)
    _, err, code = run("-e " .. q("fp8.progress(3)"), nil, "FP8LAB_PROGRESS=fancy ")
    assert.are.equal(1, code)
    assert.truthy(err:find("FP8LAB_PROGRESS: expected \"plain\" (or unset), got 'fancy'", 1, true), err)
    os.remove(p)
  end)
  it("a torch method a tensor lacks: the error points at the op fp8lab has, in scripts and at the prompt", function()
    local p = script("local x = fp8.randn{2, 3}\nlocal y = x:gelu()\n")
    local _, err, code = run(q(p))
    os.remove(p)
    assert.are.equal(1, code)
    assert.truthy(err:find(":2: attempt to call a nil value (method 'gelu')\n  (if that is a tensor: fp8lab's tensors "
      .. "have no :gelu(); the op is fp8.nn.functional.gelu(x, ...); help(\"tensors\") lists what they have)\n"
      .. "traceback (your code", 1, true), err)
    _, err = run("-i", "x = fp8.randn{2}\nx:frobnicate()\n")
    assert.truthy(err:find("(method 'frobnicate')\n  (if that is a tensor: fp8lab's tensors have no :frobnicate(); "
      .. "help(\"tensors\") lists what they have)", 1, true), err)
    -- other errors are left as they are
    _, err = run("-e " .. q("error('plain')"))
    assert.falsy(err:find("if that is a tensor", 1, true), err)
  end)

  it("-e runs code, repeatedly and in order", function()
    local out, err, code = run("-e " .. q("x = 20") .. " -e " .. q("print(x + 22)"))
    assert.are.equal("42\n", out)
    assert.are.equal("", err)
    assert.are.equal(0, code)
  end)

  it("sets the globals fp8 and help in scripts", function()
    local out, _, code = run("-e " .. q("print(type(fp8), type(help))"))
    assert.are.equal(0, code)
    assert.are.equal("table\tfunction\n", out)
  end)

  it("gives a script its arguments in arg and in ...", function()
    local p = script("print(arg[0] == (...) and 'x' or 'ok', #arg, arg[1], arg[2], select('#', ...), ...)\n"
      .. "print(arg[-1], arg[-2])\n")
    local out, _, code = run("-e " .. q("y=1") .. " " .. q(p) .. " a 'b c'")
    os.remove(p)
    assert.are.equal(0, code)
    local l1, l2 = out:match("^(.-)\n(.-)\n$")
    assert.are.equal("ok\t2\ta\tb c\t2\ta\tb c", l1)
    assert.are.equal("y=1\t-e", l2)   -- negative indices: the options before the script
  end)

  it("runs a script from stdin with -", function()
    local out, _, code = run("- one two", "print('stdin', ...)\n")
    assert.are.equal(0, code)
    assert.are.equal("stdin\tone\ttwo\n", out)
  end)

  it("stops reading options after --", function()
    local p = script("print(...)\n")
    local out, _, code = run("-- " .. q(p) .. " -v")
    os.remove(p)
    assert.are.equal(0, code)
    assert.are.equal("-v\n", out)
  end)

  it("-v prints the version", function()
    local out, _, code = run("-v")
    assert.are.equal(0, code)
    assert.matches("^fp8lab 0%.1%.0 %(Lua 5%.4%.%d+%)\n$", out)
    assert.are.equal(out, (run("--version")))
  end)

  it("--help lists options and sub-commands", function()
    local out, _, code = run("--help")
    assert.are.equal(0, code)
    for _, w in ipairs { "usage:", "-e CODE", "-i", "-v", "--", "env", "launch", "config", "test" } do
      assert.truthy(out:find(w, 1, true), "help lacks " .. w)
    end
    assert.are.equal(out, (run("-h")))
  end)

  it("rejects an unknown option with usage and exit 1", function()
    local out, err, code = run("--frobnicate")
    assert.are.equal(1, code)
    assert.are.equal("", out)
    assert.truthy(err:find("unrecognized option '--frobnicate'", 1, true))
    assert.truthy(err:find("usage:", 1, true))
  end)

  it("-e without its argument is an error", function()
    local _, err, code = run("-e")
    assert.are.equal(1, code)
    assert.truthy(err:find("'-e' needs an argument", 1, true))
  end)

  it("-l NAME and -l G=NAME require a module into a global, in order with -e", function()
    local out, err, code = run("-l g=fp8.nn -e " .. q("print(g == require('fp8.nn'), rawget(_G, 'fp8.nn'))"))
    assert.are.equal(0, code, err)
    assert.are.equal("true\tnil\n", out)
    out, err, code = run("-l fp8.nn -e " .. q("print(_G['fp8.nn'] == require('fp8.nn'))") .. " -lx=fp8.optim -e "
      .. q("print(x == fp8.optim)"))
    assert.are.equal(0, code, err)
    assert.are.equal("true\ntrue\n", out)
    for _, bad in ipairs { "=fp8.nn", "g=", "''" } do
      _, err, code = run("-l " .. bad)
      assert.are.equal(1, code, bad)
      assert.truthy(err:find("expected NAME or GLOBAL=NAME", 1, true), err)
    end
    _, err, code = run("-l g=no.such.mod")
    assert.are.equal(1, code)
    assert.truthy(err:find("module 'no.such.mod' not found", 1, true), err)
  end)

  it("a failing script exits 1 with message and traceback on stderr", function()
    local p = script("local function inner() error('boom') end\ninner()\n")
    local out, err, code = run(q(p))
    os.remove(p)
    assert.are.equal(1, code)
    assert.are.equal("", out)
    -- the user's line first, then the user's frames only (fp8lab -v: the full traceback)
    assert.matches("^fp8lab: [^\n]*:1: boom\ntraceback %(your code", err)
    assert.truthy(err:find(":1: in local 'inner'", 1, true) or err:find(":1: in function 'inner'", 1, true), err)
    assert.truthy(err:find(":2: in main chunk", 1, true), err)
  end)

  it("reports a syntax error and exits 1", function()
    local p = script("x = = 1\n")
    local _, err, code = run(q(p))
    os.remove(p)
    assert.are.equal(1, code)
    assert.truthy(err:find("unexpected symbol near '='", 1, true))
  end)

  it("reports a missing script", function()
    local _, err, code = run(q("/nonexistent/dir/x.lua"))
    assert.are.equal(1, code)
    assert.truthy(err:find("cannot open /nonexistent/dir/x.lua", 1, true))
    assert.falsy(err:find("commands are", 1, true), err)   -- a path: no word about commands
    -- a bare word that is no file (`fp8lab help`, a mistyped command) is told what the commands are
    _, err, code = run("lauch")
    assert.are.equal(1, code)
    assert.truthy(err:find("cannot open lauch", 1, true), err)
    assert.truthy(err:find("fp8lab's commands are env, launch, config and test, and fp8lab --help lists its options", 1, true), err)
  end)

  it("shows error objects through __tostring", function()
    local _, err, code = run("-e " .. q("error(setmetatable({}, {__tostring = function() return 'custom error' end}))"))
    assert.are.equal(1, code)
    assert.are.equal("fp8lab: custom error\n", err)
  end)

  it("loads the Lua library from the embedded sources", function()
    local out, _, code = run("-e " .. q("print(debug.getinfo(require('fp8.repl').format, 'S').source)"),
      nil, "env -u FP8LAB_LUA_DIR ")
    assert.are.equal(0, code)
    assert.are.equal("@lua/fp8/repl.lua\n", out)
  end)

  it("loads fp8 modules from FP8LAB_LUA_DIR first", function()
    local dir = os.tmpname(); os.remove(dir)
    assert(os.execute("mkdir -p " .. q(dir .. "/fp8")))
    local f = assert(io.open(dir .. "/fp8/devmod.lua", "w")); f:write("return 'from dev dir'\n"); f:close()
    local out, _, code = run("-e " .. q("print((require('fp8.devmod')))"), nil, "FP8LAB_LUA_DIR=" .. q(dir) .. " ")
    os.execute("rm -rf " .. q(dir))
    assert.are.equal(0, code)
    assert.are.equal("from dev dir\n", out)
  end)

  it("env prints versions", function()
    local out, _, code = run("env")
    assert.are.equal(0, code)
    assert.matches("fp8lab%s+0%.1%.0", out)
    assert.matches("Lua%s+Lua 5%.4", out)
    assert.matches("oneDNN%s+%S+", out)
    assert.matches("CUDA%s+%S+", out)
  end)

  it("Ctrl-C stops a running script with 'interrupted!' and ends it by SIGINT (status 130)", function()
    -- --foreground: otherwise timeout signals the child and then its whole group, and a second
    -- SIGINT before the hook fires takes the default action (kill), as in lua.c
    local _, err, code = run("-e " .. q("while true do end"), nil, "timeout --foreground --preserve-status -s INT 1 ")
    assert.are.equal(130, code)   -- (1 until stop 101: docs/cli.md)
    assert.truthy(err:find("interrupted!", 1, true), err)
  end)

  it("Ctrl-C while the host loads a module (-l, or fp8 itself on a slow start) ends it by SIGINT too", function()
    -- make test's Ctrl-C cases below came at 0.3 s on a loaded host while `require "fp8"` still ran: the host reported
    -- the error and exited 1 (report, not report_user's check); a module that never finishes loading stands for it
    local dir = os.tmpname()
    os.remove(dir)
    assert(os.execute("mkdir " .. q(dir)))
    local f = assert(io.open(dir .. "/slowmod.lua", "wb")); f:write("while true do end\n"); f:close()
    local _, err, code = run("-l slowmod -e " .. q("print('ran')"), nil,
      "LUA_PATH=" .. q(dir .. "/?.lua;;") .. " timeout --foreground --preserve-status -s INT 1 ")
    os.remove(dir .. "/slowmod.lua"); os.remove(dir)
    assert.are.equal(130, code, err)
    assert.truthy(err:find("interrupted!", 1, true), err)
  end)

  it("Ctrl-C during oneDNN's matmuls stops cleanly every time (the handler's frame once corrupted the heap)", function()
    -- before the handler had a stack of its own, 3 to 11 of 20 such interrupts aborted ("corrupted double-linked list")
    local loop = "local x = fp8.randn{256, 256}; while true do x = x:matmul(x):tanh() end"
    for i = 1, 10 do
      local wait = ("0.%d"):format(3 + i % 6)
      local _, err, code = run("-e " .. q(loop), nil, "timeout --foreground --preserve-status -s INT " .. wait .. " ")
      assert.are.equal(130, code, ("interrupt %d after %s s: %s"):format(i, wait, err))
      -- one error either way (since stop 100, lua-api.md): 'interrupted!' where Lua code ran when it came,
      -- 'interrupted' where a C loop (the matmul, tanh) took it first
      assert.truthy(err:find("%(command line%):1: interrupted!?\n") and not err:find("corrupted"), err)
    end
  end)
end)
