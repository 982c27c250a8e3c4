-- Found on 2026-12-07 (stop 100): the hostile sweep over stop 99's additions (tests/fuzz/api_sweep.lua, seed 114, ASan +
-- UBSan, the entries new since 0ca70b09 and the areas stop 99 changed), the LeakSanitizer sweep's last batches (seed 111,
-- --leaks --gc-stress from nn.Transformer's option keys to the end) and hostile scripts written by hand over the C paths
-- they reach (conv2d's oneDNN backward, gather read in place, the norms' rescue and gate, fp8.opts.strict_functions,
-- the schedulers' state, the profiler's restarts).
-- docs/robustness.md, "The hostile sweep over stop 99's additions (stop 100)".
local U = dofile("tests/spec/helpers/util.lua")
local ends = U.ends   -- a call under a budget of instructions

local err_of = U.err_of   -- (the three sweep specs' copy, in util.lua since stop 103)

describe("fp8.opts.strict_functions reads its module table raw", function()
  local O = require("fp8.opts")
  it("ends on a table whose __pairs never ends, and wraps only what the table holds", function()
    -- pairs() asked the table's __pairs, which here answers the same key for ever: the loop never ended
    local t = setmetatable({}, { __pairs = function(s) return function() return "f", function(a) return a end end, s, nil end })
    local ok, r = ends(O.strict_functions, t, "m")
    assert.is_true(ok, tostring(r))
    assert.are.equal(t, r)
    assert.is_nil(rawget(t, "f"))
  end)
  it("refuses a value that is not a table, and a prefix that is not a string, by name", function()
    assert.are.equal("strict_functions: expected a module table, got 5", err_of(O.strict_functions, 5):gsub("^.-:%d+: ", ""))
    assert.are.equal("strict_functions: prefix must be a string, got a table",
      err_of(O.strict_functions, { f = function(a) end }, {}):gsub("^.-:%d+: ", ""))
  end)
  it("still wraps a plain module's functions", function()
    local t = { f = function(a) return a end, _g = function(a) return a end }
    O.strict_functions(t, "m")
    assert.are.equal(1, t.f(1))
    assert.are.equal("m.f: takes (a); got 1 more argument", err_of(t.f, 1, 2):gsub("^.-:%d+: ", ""))
    assert.are.equal(1, t._g(1, 2))   -- a private one is left as it is
  end)
end)

describe("the inf and negative norms of an empty reduction are refused by the function called", function()
  -- torch 2.15 refuses them (linalg.vector_norm: 'cannot compute the inf norm on the dimension 1 because this
  -- dimension is empty and the operation does not have an identity'); x:norm(math.huge), dist, renorm and
  -- F.normalize refused the inf norm as 'amax: the reduced range of tensor [3, 0] is empty ...' (normalize's at
  -- lua/fp8/nn/functional.lua's line), normalize's -inf as 'min: ...', and normalize with p = -1 returned the empty input
  local function msg(f) return err_of(f):gsub("^.-:%d+: ", "") end
  it("x:norm and dist name norm", function()
    assert.are.equal("norm: the inf norm of an empty reduction has no value (the operation has no identity; torch "
      .. "refuses it too), input [3, 0]", msg(function() return fp8.zeros { 3, 0 }:norm(math.huge, 2) end))
    assert.are.equal("norm: the inf norm of an empty reduction has no value (the operation has no identity; torch "
      .. "refuses it too), input [0]", msg(function() return fp8.dist(fp8.zeros { 0 }, fp8.zeros { 0 }, math.huge) end))
    -- a reduction that is not empty: an empty result, as torch's
    assert.are.same({ 0 }, fp8.zeros { 3, 0 }:norm(math.huge, 1):shape())
    assert.are.same({ 0 }, fp8.zeros { 0, 3 }:norm(math.huge, 2):shape())
    assert.are.equal(3, fp8.tensor { 1, -3 }:norm(math.huge):item())
  end)
  it("renorm names itself where a slice is empty, and takes no slices", function()
    assert.are.equal("renorm: the inf norm of an empty slice has no value (the operation has no identity; torch refuses "
      .. "it too), input [3, 0]", msg(function() return fp8.zeros { 3, 0 }:renorm(math.huge, 1, 1) end))
    assert.truthy(msg(function() return fp8.zeros { 2, 0, 3 }:renorm(math.huge, 1, 1) end):find("^renorm: the inf norm"))
    assert.are.same({ 0, 3 }, fp8.zeros { 0, 3 }:renorm(math.huge, 1, 1):shape())   -- torch's: no slice
    assert.are.same({ 3, 0 }, fp8.zeros { 3, 0 }:renorm(2, 1, 1):shape())
  end)
  it("F.normalize names itself for p < 0 and ±inf along an empty dim, as torch refuses them", function()
    local F = fp8.nn.F
    for _, c in ipairs { { math.huge, "inf" }, { -math.huge, "-inf" }, { -1, "-1" } } do
      assert.are.equal(("normalize: the %s norm of an empty dim has no value (the operation has no identity; torch "
        .. "refuses it too), input [3, 0] along dim 2"):format(c[2]),
        msg(function() return F.normalize(fp8.zeros { 3, 0 }, { p = c[1] }) end))
    end
    for _, p in ipairs { 2, 0.5, 0 } do   -- torch's: an empty result
      assert.are.same({ 3, 0 }, F.normalize(fp8.zeros { 3, 0 }, { p = p }):shape())
    end
    assert.are.same({ 2, 0, 3 }, F.normalize(fp8.zeros { 2, 0, 3 }, { p = math.huge, dim = 1 }):shape())
  end)
end)

describe("a class's method called with a table that answers every key as its self", function()
  -- strict_arity's check of the object asked only that self[name] was not nil: the sweep's table whose __index answers
  -- 1 for every key passed, so fp8.Accelerator.gather_for_metrics(t) failed inside ('lua/fp8/data.lua:634: attempt to
  -- index a number value (local 'gs')') and fp8.Accelerator.gather(t, x) returned x as if t were an accelerator. The
  -- method found must be a function (or callable) now.
  local function t() return U.lying() end
  local function msg(f, ...) return err_of(f, ...):gsub("^.-:%d+: ", "") end
  it("is refused by name, as any value that is not the object", function()
    assert.are.equal("Accelerator:gather_for_metrics: called without its object (got a table as self): write "
      .. "obj:gather_for_metrics(...), with a colon, not obj.gather_for_metrics(...)",
      msg(fp8.Accelerator.gather_for_metrics, t(), fp8.ones { 2 }))
    assert.truthy(msg(fp8.Accelerator.gather, t(), fp8.ones { 2 }):find("^Accelerator:gather: called without its object"))
    assert.truthy(msg(fp8.optim.SGD.step, t()):find("^Optimizer:step: called without its object"))
    assert.truthy(msg(fp8.nn.Linear.parameters, t()):find("^Module:parameters: called without its object"))
  end)
  it("leaves the objects' own calls as they were", function()
    local acc = fp8.Accelerator()
    assert.are.same({ 2 }, acc:gather_for_metrics(fp8.ones { 2 }):shape())
    local m = fp8.nn.Linear(3, 2)
    assert.are.equal(2, #m:parameters())
    -- a method that is a callable table is still a method
    local cls = setmetatable({}, { __call = function(_, self, v) return v end })
    local obj = setmetatable({ f = cls }, { __index = {} })
    assert.are.equal(5, obj.f(obj, 5))
  end)
end)

describe("one Ctrl-C is one error", function()
  -- SIGINT's handler (lua/main.c) sets both Lua's hook and the core's flag that long C loops poll; each raised its
  -- own error, so a Ctrl-C caught by pcall in Lua code ('interrupted!', the hook) left the flag set and the next C
  -- call that polls it failed ('interrupted'), and one a C loop raised inside a pcall was raised again by the hook
  -- at the next Lua line, past the pcall (checked by hand: a backward of 3,000 nodes interrupted in its C loop).
  -- The hook takes the flag down with it now, and goes without raising where a C loop took the flag first.
  it("leaves no interrupt for the next C call after the hook's error was caught", function()
    local dir = os.tmpname()
    os.remove(dir)
    assert(os.execute("mkdir -p " .. U.q(dir)))
    local f = assert(io.open(dir .. "/s.lua", "wb"))
    f:write([[
local F = fp8.nn.F
local ok, e = pcall(function()
  local m = io.open(arg[1], "wb"); m:write("spinning"); m:close()
  while true do end
end)
print("caught", e)
for i = 1, 2 do
  print(pcall(function() return F.conv2d(fp8.ones{1, 16, 6, 6}, fp8.ones{16, 16, 3, 3}):sum():item() end))
end
]])
    f:close()
    -- SIGINT once the script spins in its pcall (a marker file), not at a fixed time: a slow start takes the default
    -- action before the handler is in place
    local cmd = ("cd %s && { %s s.lua marker >out 2>err & p=$!; i=0; while [ ! -s marker ] && [ $i -lt 600 ]; do "
      .. "sleep 0.05; i=$((i+1)); done; kill -INT $p; wait $p; }"):format(U.q(dir), U.q(FP8LAB_BIN))
    os.execute(cmd)
    local out = U.take(dir .. "/out") or ""
    local err = U.take(dir .. "/err") or ""
    os.execute("rm -rf " .. U.q(dir))
    assert.truthy(out:find("caught\t[^\n]*interrupted!\n"), out .. err)
    local _, n = out:gsub("true\t36864%.0", "")
    assert.are.equal(2, n, out .. err)
  end)
end)
