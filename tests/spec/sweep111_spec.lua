-- Found on 2026-12-07 (stop 99): the hostile API sweep (tests/fuzz/api_sweep.lua, seed 111, ASan + UBSan) with
-- LeakSanitizer on in its children (--leaks) and the collector at its smallest generational step (--gc-stress), over
-- what the API gained since the last leak run (seed 101, stop 94), then the whole API, with the sweep's new entries
-- (the C modules fp8._fileio and fp8._luarng, and each key a function reads from an options table set to the hostile
-- value). docs/robustness.md, "The whole API under LeakSanitizer and the collector under stress (stop 99)".
local U = dofile("tests/spec/helpers/util.lua")
local ends, lying = U.ends, U.lying   -- a call under a budget of instructions; the sweep's lying table

describe("the -inf norm's smallest |x|", function()
  -- T._min_abs_norm (x:norm(-math.huge) and dist's, stop 97) walked its list of dims with ipairs: a table whose
  -- __index answers every key ran for ever (found by the sweep: require("fp8.tensor")._min_abs_norm(T, V)). It reads
  -- the list raw, as _dims_mask does; the sums after it refuse the lying table.
  it("ends on a lying list, and keeps its values for lists of dims", function()
    local T = require("fp8.tensor")
    local ok, e = ends(T._min_abs_norm, fp8.ones{2, 3}, lying())
    assert.is_false(ok)
    assert.truthy(tostring(e):find("does its __len lie?", 1, true), e)
    local x = fp8.tensor{{1, -2, 3}, {0.5, 4, -1}}
    assert.are.same({0.5}, {T._min_abs_norm(x, {1, 2}):item()})
    assert.are.same({{1}, {0.5}}, T._min_abs_norm(x, {-1}, true):tolist())
    assert.are.same({1, 0.5}, x:norm(-math.huge, 2):tolist())
  end)
end)
