-- Found on 2026-12-07 (stop 100): the hostile sweep over stop 99's additions (tests/fuzz/api_sweep.lua, seed 114, ASan +
-- UBSan, the entries new since 0ca70b09 and the areas stop 99 changed), the LeakSanitizer sweep's last batches (seed 111,
-- --leaks --gc-stress from nn.Transformer's option keys to the end) and hostile scripts written by hand over the C paths
-- they reach (conv2d's oneDNN backward, gather read in place, the norms' rescue and gate, fp8.opts.strict_functions,
-- the schedulers' state, the profiler's restarts).
-- docs/robustness.md, "The hostile sweep over stop 99's additions (stop 100)".
local U = dofile("tests/spec/helpers/util.lua")
local ends = U.ends   -- a call under a budget of instructions

local function err_of(f, ...)
  local ok, err = pcall(f, ...)
  assert.is_false(ok)
  return tostring(err)
end

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
