-- crash_regressions_spec.lua — one case per class of crash, hang or silent accept that the API sweep
-- (tests/fuzz/api_sweep.lua) found on 891c8bc. Every case runs in a child process under a time limit
-- (a hang fails the case instead of the suite), and passes only when the child raised the expected
-- Lua error and went on to print "OK" and exit 0. docs/robustness.md lists the classes.
local BIN = assert(FP8LAB_BIN, "run through tests/busted.lua, which sets FP8LAB_BIN")

local U = dofile("tests/spec/helpers/util.lua")
local q = U.q
local function slurp(path) return U.take(path) or "" end   -- the file's bytes ("" if missing); removed

-- child(code [, prefix [, limit_s]]) -> stdout, stderr, exit code (124/137: killed by the time limit)
local function child(code, prefix, limit)
  local out, err = os.tmpname(), os.tmpname()
  local cmd = ("%stimeout -s KILL %d %s -e %s </dev/null >%s 2>%s"):format(prefix or "", limit or 20, q(BIN), q(code), out, err)
  local _, _, rc = os.execute(cmd)
  return slurp(out), slurp(err), rc
end

-- The child runs `body`, which must raise an error matching `pattern` (plain text), then prints OK.
local function refuses(body, pattern, prefix)
  local code = ("local ok, err = pcall(function() %s end)\n"
    .. "if ok then io.stderr:write('accepted\\n') os.exit(3) end\n"
    .. "if not tostring(err):find(%q, 1, true) then io.stderr:write('wrong message: ', tostring(err), '\\n') os.exit(4) end\n"
    .. "print('OK')"):format(body, pattern)
  local out, err, rc = child(code, prefix)
  assert.are.equal(0, rc, ("exit %s for: %s\nstderr: %s"):format(tostring(rc), body, err))
  assert.are.equal("OK\n", out)
end

local LYING = "setmetatable({}, {__len = function() return 1 << 62 end, __index = function() return 1 end})"
local TEXT = "fp8.data.TextDataset{text = 'hello world hello', block_size = 4}"

describe("crash regressions (child processes)", function()
  describe("1. binary ops with no tensor operand", function()
    for _, op in ipairs { "add", "sub", "mul", "div" } do
      it(op .. " called with two numbers raises 'expected a tensor'", function()
        refuses(("local x = fp8.ones{2}; return x.%s(1, 2)"):format(op), op .. ": expected a tensor")
      end)
    end
  end)

  describe("2. sizes that wrap around", function()
    it("fp8.tensor of a table whose # lies", function()
      refuses("return fp8.tensor(" .. LYING .. ")", "tensor: nested table has length")
    end)
    it("gather and windows with an index list whose # lies", function()
      refuses("return require('fp8._data').gather(fp8.ones{2, 3}, " .. LYING .. ")", "gather: indices has length")
      refuses("return require('fp8._data').windows(fp8.ones{9}, " .. LYING .. ", 2)", "windows: starts has length")
    end)
    it("kwargs.repr and TextDataset:decode of such a table end", function()
      local out, err, rc = child("local r = fp8.kwargs.repr(" .. LYING .. "); print('OK')", nil, 10)
      assert.are.equal(0, rc, err); assert.are.equal("OK\n", out)
      out, err, rc = child("local ds = " .. TEXT .. "; local s = ds:decode(" .. LYING .. "); print('OK')")
      assert.are.equal(0, rc, err); assert.are.equal("OK\n", out)
    end)
  end)

  describe("3. range checks that overflow", function()
    it("a batch start of math.maxinteger", function()
      refuses("local ds = " .. TEXT .. "; return ds:_batch({math.maxinteger})", "exceeds 17 tokens")
    end)
    it("expand to 2^63 elements", function()
      refuses("return fp8.ones{1}:expand{2^62, 2}:numel()", "expand: too large")
    end)
    it("GPT:generate with math.maxinteger new tokens", function()
      refuses("local m = fp8.nn.GPT{vocab_size = 5, block_size = 4, n_layer = 1, n_head = 2, n_embd = 4}\n"
        .. "return m:generate(fp8.zeros{1, 2}, math.maxinteger)", "generate: too large")
    end)
  end)

  describe("4. precompiled bytecode", function()
    it("load refuses a binary chunk, corrupted or not", function()
      refuses("local s = string.dump(function(a) return a + 1 end)\n"
        .. "s = s:sub(1, 20) .. string.char(255, 255, 255, 255) .. s:sub(25)\n"
        .. "local f, e = load(s); if f then return f() end; error(e)", "attempt to load a binary chunk")
      refuses("return load('return 1', 'x', 'b')", "load: mode must be \"t\"")
    end)
    it("the script loader refuses a binary file", function()
      local p = os.tmpname()
      local out, err, rc = child(("local f = io.open(%q, 'wb'); f:write(string.dump(function() print('ran') end)); f:close()"):format(p))
      assert.are.equal(0, rc, err)
      local _, err2, rc2 = child("dofile(" .. ("%q"):format(p) .. ")")
      local out3, _, rc3 = (function()
        local o, e = os.tmpname(), os.tmpname()
        local _, _, c = os.execute(("timeout -s KILL 20 %s %s >%s 2>%s"):format(q(BIN), q(p), o, e))
        return slurp(o), slurp(e), c
      end)()
      os.remove(p)
      assert.are_not.equal(0, rc2); assert.truthy(err2:find("binary chunk", 1, true), err2)
      assert.are_not.equal(0, rc3); assert.are.equal("", out3)
    end)
  end)

  describe("5. state that loads half-way", function()
    -- each load below raised on 891c8bc only after it had changed the object (weights overwritten, a bad
    -- optimizer step or scale kept); now everything is checked before anything is copied
    -- (tests/spec/state_load_spec.lua has the full set)
    it("a failed load leaves the model, the optimizer and the loss scaler as they were", function()
      local code = [[
local nn = fp8.nn
local model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 16))
local opt = fp8.optim.AdamW(model:parameters(), { lr = 3e-3 })
local acc = fp8.Accelerator { mixed_precision = "fp8", kwargs_handlers = { fp8.TERecipeKwargs {} }, config = false, env = {} }
model, opt = acc:prepare(model, opt)
local before = model:state_dict()["0.weight"]:sum():item()
local sd = model:state_dict()
for k, v in pairs(sd) do if not k:match("fp8_state$") then sd[k] = v * 0 + 5 end end
local t = {}
for i = 1, sd["4.fp8_state"]:numel() do t[i] = 99 end   -- the right size, an unknown layout
sd["4.fp8_state"] = fp8.tensor(t)
assert(not pcall(model.load_state_dict, model, sd))
assert(model:state_dict()["0.weight"]:sum():item() == before, "weights overwritten by a failed load")
local osd = opt:state_dict()
osd.param_groups[1].lr = 0 / 0
assert(not pcall(opt.load_state_dict, opt, osd), "lr = NaN accepted")
assert(opt.param_groups[1].lr == 3e-3, "lr changed by a failed load")
local sc = fp8.amp.GradScaler()
assert(not pcall(sc.load_state_dict, sc, { scale = "x" }), "scale = 'x' accepted")
assert(type(sc:get_scale()) == "number", "the scaler kept a bad scale")
print("OK")
]]
      local out, err, rc = child(code)
      assert.are.equal(0, rc, err)
      assert.are.equal("OK\n", out)
    end)
  end)

  describe("6. files", function()
    local dir
    before_each(function()
      dir = os.tmpname(); os.remove(dir); os.execute("mkdir -p " .. q(dir))
      os.execute("mkfifo " .. q(dir .. "/pipe"))
    end)
    after_each(function() os.execute("rm -rf " .. q(dir)) end)

    it("a named pipe as config, IDX or text file is refused at once", function()
      local pipe = ("%q"):format(dir .. "/pipe")
      refuses("return fp8.config.load(" .. pipe .. ")", "is a named pipe")
      refuses("return require('fp8._data').load_labels(" .. pipe .. ")", "is a named pipe")
      refuses("return fp8.data.TextDataset{path = " .. pipe .. ", block_size = 2}", "is a named pipe")
    end)
    it("a text dataset has a size cap (and /dev/zero is not a text file)", function()
      refuses("return fp8.data.TextDataset{path = '/dev/zero', block_size = 2}", "not a regular file")
      local p = dir .. "/t.txt"
      local f = io.open(p, "w"); f:write(("abc"):rep(100)); f:close()
      refuses(("fp8.data.TEXT_MAX_BYTES = 100; return fp8.data.TextDataset{path = %q, block_size = 2}"):format(p),
        "file too large for a text file")
    end)
    -- A SIGKILL that lands between naming the finished temporary file and renaming it (it is delivered
    -- when the link call returns) leaves that name: nothing can prevent it, so the next write removes it.
    it("a killed config writer leaves the file whole, and no temporary file survives the next write", function()
      local cfg = ("%q"):format(dir .. "/c.yaml")
      local code = "local c = {mixed_precision = 'fp8'} fp8.config.write(" .. cfg .. ", c) print('wrote') io.stdout:flush()\n"
        .. "while true do fp8.config.write(" .. cfg .. ", c) end"
      -- the loop really writes (a wrong call would make this test pass for nothing)
      local out, err, rc = child("local c = {mixed_precision = 'fp8'} fp8.config.write(" .. cfg .. ", c) print('OK')")
      assert.are.equal(0, rc, err)
      -- a name left by a writer killed in the instant between naming its file and the rename (nobody holds
      -- its lock): the next write of the same path removes it
      local stale = dir .. "/c.yaml.tmp4194305.0"
      assert(io.open(stale, "w")):close()
      local looping = 0   -- kills that landed in the write loop (after the first write printed 'wrote')
      for i = 1, 10 do
        local p = io.popen(("timeout -s KILL 0.%d %s -e %s 2>/dev/null"):format(2 + i % 4, q(BIN), q(code)))
        if p:read("a"):find("wrote", 1, true) then looping = looping + 1 end
        p:close()
      end
      assert.is_true(looping >= 3, looping .. " of 10 writers reached the loop before the kill")
      out, err, rc = child("assert(fp8.config.load(" .. cfg .. ").mixed_precision == 'fp8') "
        .. "fp8.config.write(" .. cfg .. ", {mixed_precision = 'fp8'}) print('OK')")
      assert.are.equal(0, rc, err)
      local p = io.popen("ls -A " .. q(dir))
      local names = {}
      for n in p:lines() do if n ~= "pipe" and n ~= "c.yaml" then names[#names + 1] = n end end
      p:close()
      assert.are.same({}, names)
    end)
  end)

  describe("7. silent accepts and raw messages", function()
    it("are refused with the function and the argument named", function()
      refuses("return fp8.ones{4}:quantize('e4m3', {margin = 2^40})", "quantize: margin must be an integer in [0, 64]")
      refuses("return fp8.nn.Dropout(0/0)", "Dropout: p must be a probability")
      refuses("return fp8.nn.Embedding()", "Embedding: num_embeddings must be a positive integer")
      refuses("return fp8.data.TextDataset{text = 'hello world', block_size = math.maxinteger}", "need at least block_size + 1")
      refuses("return fp8.nn.init.normal_(fp8.zeros{2}, 0, -1)", "normal_: std must be a finite number >= 0")
      refuses("local x = fp8.ones{2}:requires_grad(true); return fp8.nn.utils.clip_grad_norm_({x}, 0/0)",
        "clip_grad_norm_: max_norm must be a number >= 0")
      refuses("local o = fp8.optim.SGD(fp8.nn.Linear(2, 2):parameters(), {lr = 0.1}); return o:step(5)",
        "SGD:step: closure must be a function")
      refuses("local ds = " .. TEXT .. "; return ds:get(math.huge)", "TextDataset:get: index must be an integer")
      refuses("local o = fp8.optim.SGD(fp8.nn.Linear(2, 2):parameters(), {lr = 0.1})\n"
        .. "local s = fp8.optim.lr_scheduler.StepLR(o, {step_size = 1}); return s:load_state_dict{last_epoch = 'x'}",
        "StepLR:load_state_dict: last_epoch must be an integer")
    end)
  end)

  describe("an empty tensor's long axis", function()
    it("quantize per axis of an expand to [2^62, 2, 0] is 'too large' (its scales' byte count wrapped to 0)", function()
      refuses("return fp8.zeros(1):expand(1 << 62, 2, 0):quantize('e4m3', {axis = 1})", "quantize: too large")
    end)
  end)

  describe("memory limits are errors", function()
    -- ASan reserves terabytes of address space, so ulimit -v cannot apply to a sanitizer build
    -- (`make sanitize` sets ASAN_OPTIONS); there the sweep's max_allocation_size_mb plays that part.
    local it_mem = os.getenv("ASAN_OPTIONS") and pending or it
    it_mem("under ulimit -v 4000000 an over-large request raises and the process goes on", function()
      local out, err, rc = child("for _, f in ipairs { function() return fp8.zeros{1e6, 1e6} end,\n"
        .. "  function() return fp8.randn{1e5, 1e5} end, function() return fp8.ones{1}:expand{1e6, 1e6}:contiguous() end,\n"
        .. "  function() return fp8.full({3e8, 4}, 1) end } do\n"
        .. "  local ok, e = pcall(f); assert(not ok, 'accepted'); assert(tostring(e):find('memory') or tostring(e):find('too large'), e)\n"
        .. "end\nprint(fp8.ones{3}:sum():item() == 3 and 'OK' or 'bad')", "ulimit -v 4000000; ")
      assert.are.equal(0, rc, err)
      assert.are.equal("OK\n", out)
    end)
  end)

  -- A binding keeps raw pointers to its tensor arguments while Lua code runs inside it: a metamethod of an argument
  -- it reads, and any finalizer that a collection started by its allocations runs. A t:free() there freed memory the
  -- binding went on to use (heap-use-after-free under ASan in quantize, sum, get/set, backward, +, matmul, cat, view,
  -- clone, ...; 2026-12-01). Now the release waits until the binding is done: the box reads as released at once, the
  -- bytes go at the next free() made outside such a call.
  describe("a tensor freed while a binding uses it", function()
    -- (an options table's __index was the way in until stop 102; such proxies are refused before anything is read
    -- since then (sweep116), so the tensor is never freed under the op: the refusal is the check here, and the
    -- finalizers below still run inside the ops)
    it("from an options table's __index: refused before it is read, the tensor untouched", function()
      local code = [[
        local x = fp8.arange(1024):float()
        local ok, e = pcall(x.quantize, x, "e4m3", setmetatable({}, { __index = function() x:free() end }))
        assert(not ok and e:find("quantize: options must be a plain table", 1, true), tostring(e))
        assert(not x:is_released() and x:sum():item() == 1023 * 1024 / 2, "x was freed")
        print("OK")]]
      local out, err, rc = child(code)
      assert.are.equal(0, rc, err)
      assert.are.equal("OK\n", out)
    end)
    it("from a finalizer run inside the op, and an options proxy's coroutine refused", function()
      local code = [[
        local x, y = fp8.randn(16, 16), fp8.randn(16, 16)
        local mt = { __gc = function() if not x:is_released() then x:free() end end }
        local ops = { function() return x + y end, function() return x:matmul(y) end, function() return x:sum(2) end,
          function() return x:quantize("e4m3") end, function() return x:view(256) end, function() return x:clone() end,
          function() return fp8.cat({ x, y }) end, function() return x:t():contiguous() end }
        collectgarbage("generational", 1, 1)
        for i = 1, 4000 do
          setmetatable({}, mt)
          if not pcall(ops[i % #ops + 1]) then x = fp8.randn(16, 16) end
        end
        local z = fp8.randn(4, 4)
        local ok = pcall(z.quantize, z, "e4m3", setmetatable({}, { __index = function() coroutine.wrap(function() z:free() end)() end }))
        assert(not ok and not z:is_released(), "an options proxy was read")
        print("OK")]]
      local out, err, rc = child(code, nil, 120)
      assert.are.equal(0, rc, err)
      assert.are.equal("OK\n", out)
    end)
    it("a safe_open file closed by get_tensor's options: refused before they are read, the file open", function()
      local path = os.tmpname()
      local code = ([[
        fp8.save_file({ a = fp8.arange(4096):float() }, %q)
        local f = fp8.safe_open(%q)
        local ok, e = pcall(f.get_tensor, f, "a", setmetatable({}, { __index = function() f:close(); collectgarbage() end }))
        assert(not ok and e:find("get_tensor: options must be a plain table", 1, true), tostring(e))
        assert(f:get_tensor("a"):sum():item() == 4095 * 4096 / 2 and pcall(f.keys, f), "f was closed")
        print("OK")]]):format(path, path)
      local out, err, rc = child(code)
      os.remove(path)
      assert.are.equal(0, rc, err)
      assert.are.equal("OK\n", out)
    end)
  end)

  describe("Lua code inside a backward (gradient hooks, 2026-12-02)", function()
    it("a hook running backward through the graph under way is refused (it recursed, then called a freed node)",
      function()
      refuses("local x = fp8.tensor({1, 2}):requires_grad(true); local a = x * 3; local loss = (a * a):sum()\n"
        .. "local inner\n"
        .. "a:register_hook(function() local ok, e = pcall(function() loss:backward() end); inner = e end)\n"
        .. "loss:backward(); error(inner)", "the graph through MulBackward is being run by an unfinished backward")
    end)
    it("a module backward hook doing the same through its own output", function()
      refuses("local m = fp8.nn.Linear(2, 2); local loss\n"
        .. "m:register_full_backward_pre_hook(function() loss:backward() end)\n"
        .. "loss = m(fp8.ones(1, 2)):sum(); loss:backward()", "is being run by an unfinished backward")
    end)
  end)
end)
