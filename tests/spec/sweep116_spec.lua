-- Found on 2026-12-07 (stop 102): the hostile sweep's new values (83-93) over the whole API, the rest of their calls
-- (tests/fuzz/api_sweep.lua, seed 116, ASan + UBSan), and the ends stop 101 left: index_select at 0-d (torch 2.15's
-- rules, tests/data/sweep116_torch.lua from scripts/gen_sweep116.py), options tables that are proxies, and
-- `fp8lab test`'s status when its child is killed by a signal.
-- docs/robustness.md, "The hostile sweep's new values, the rest (stop 102)".
local U = dofile("tests/spec/helpers/util.lua")

local err_of = U.err_of   -- (the three sweep specs' copy, in util.lua since stop 103)

describe("index_select at 0-d, as torch 2.15's", function()
  local cases = dofile("tests/data/sweep116_torch.lua")
  local function idx(c)
    if c.index_0d then return fp8.tensor(c.index) end
    if #c.index == 0 then return fp8.zeros { 0 } end
    return fp8.tensor(c.index)
  end
  local function flat(t)
    if t:numel() == 0 then return {} end
    return t:reshape { -1 }:tolist()
  end
  for i, c in ipairs(cases) do
    it(("case %d: dim %d, index %s"):format(i, c.dim, c.index_0d and "0-d" or "a list"), function()
      local x = fp8.tensor(c.x):requires_grad(true)
      local dim = c.dim >= 0 and c.dim + 1 or c.dim   -- torch's 0-based dim as fp8's 1-based one
      if c.raises then
        local e = err_of(x.index_select, x, dim, idx(c))
        assert.truthy(e:find("index_select: ", 1, true), e)
        return
      end
      local r = x:index_select(dim, idx(c))
      assert.are.same(c.shape, r:shape())
      assert.are.same(c.values, flat(r))
      ;(r * 3):sum():backward()
      assert.are.same(c.grad, flat(x.grad))
      assert.are.same(x:shape(), x.grad:shape())
    end)
  end
  it("names the 0-d rules in its refusals", function()
    local x = fp8.tensor(5)
    assert.truthy(err_of(x.index_select, x, 1, fp8.tensor { 0, 0 })
      :find("index_select: the index into a 0-d tensor must have exactly 1 element, got 2", 1, true))
    assert.truthy(err_of(x.index_select, x, 2, fp8.tensor(0))
      :find("index_select: dim must be in 1..1 or -1..-1 (a 0-d tensor's one implicit dim), got 2", 1, true))
    assert.truthy(err_of(x.index_select, x, 1, fp8.zeros { 1, 1 })
      :find("index_select: the index must be 1-d (or 0-d), got [1, 1]", 1, true))
  end)
end)

describe("fp8lab test when a signal ends its run", function()
  local BIN = assert(FP8LAB_BIN, "run through tests/busted.lua, which sets FP8LAB_BIN")
  local function q(x) return "'" .. tostring(x):gsub("'", "'\\''") .. "'" end
  -- a spec that sends SIG to the shell fp8lab test runs the suite in and to its busted (as a Ctrl-C or a kill of the
  -- process group does): the busted's parent is that shell
  local function run_with(sig)
    local d = os.tmpname(); os.remove(d); assert(os.execute("mkdir -p " .. q(d)))
    local f = assert(io.open(d .. "/die_spec.lua", "w"))
    f:write(([[
describe("a run that a signal ends", function()
  it("ends", function() os.execute("kill -%s $(awk '{print $4}' /proc/$PPID/stat) $PPID; sleep 1") end)
end)
]]):format(sig))
    f:close()
    -- exec'd, so a death by a signal is os.execute's "signal", not the shell's 128 + N
    local ok, how, code = os.execute(("exec %s test %s >%s 2>%s"):format(q(BIN), q(d .. "/die_spec.lua"),
      q(d .. "/out"), q(d .. "/err")))
    local e = assert(io.open(d .. "/err")); local err = e:read("a"); e:close()
    os.execute("sleep 1; rm -rf " .. q(d))
    return ok, how, code, err
  end
  it("says the signal and exits 128 + N, as a shell gives (it returned N: 15 for SIGTERM)", function()
    local _, how, code, err = run_with("TERM")
    assert.are.equal("exit", how, err)
    assert.are.equal(143, code, err)
    assert.truthy(err:find("fp8lab test: the test run was ended by signal 15 (SIGTERM)", 1, true), err)
  end)
  it("ends by SIGINT where its run did (a Ctrl-C: it exited 2, 'bad usage')", function()
    local _, how, code, err = run_with("INT")
    assert.are.equal("signal", how, err)
    assert.are.equal(2, code, err)
    assert.truthy(err:find("fp8lab test: the test run was ended by signal 2 (SIGINT)", 1, true), err)
  end)
end)

describe("an options table that is a proxy is refused by every reader, by name", function()
  -- (stop 101's leftover) a table whose metatable has __index or __pairs was read raw: its keys unseen, so a proxy
  -- with no stored keys read as empty options (AdamW kept lr 0.001, TERecipeKwargs margin 0), while C readers' lookups
  -- read __index's answers unchecked. torch and Accelerate take plain dicts.
  local w = fp8.ones { 2 }:requires_grad(true)
  local calls = {
    { "AdamW", function(p) return fp8.optim.AdamW({ w }, p) end },
    { "SGD", function(p) return fp8.optim.SGD({ w }, p) end },
    { "TERecipeKwargs", function(p) return fp8.TERecipeKwargs(p) end },
    { "AutocastKwargs", function(p) return fp8.AutocastKwargs(p) end },
    { "Accelerator", function(p) return fp8.Accelerator(p) end },
    { "ProjectConfiguration", function(p) return fp8.ProjectConfiguration(p) end },
    { "resolve", function(p) return require("fp8.kwargs").resolve(p) end },
    { "zeros", function(p) return fp8.zeros({ 2 }, p) end },   -- a C binding's (fl_lcheckopts)
    { "Linear", function(p) return fp8.nn.Linear(2, 2, p) end },
    { "options must be", function(p)
      local m = fp8.nn.MultiheadAttention(4, 2); local x = fp8.ones { 1, 2, 4 }; return m(x, x, x, p) end },
    { "options must be", function(p) return fp8.nn.TransformerEncoderLayer(4, 2)(fp8.ones { 1, 2, 4 }, p) end },
    { "get_scheduler: scheduler_specific_kwargs", function(p)
      return fp8.optim.lr_scheduler.get_scheduler("linear", fp8.optim.SGD({ w }, { lr = 0.1 }),
        { num_warmup_steps = 1, num_training_steps = 2, scheduler_specific_kwargs = p }) end },
    { "hist", function(p) return fp8.hist(fp8.ones { 4 }, nil, p) end },
    { "scaled_dot_product_attention", function(p)
      local x = fp8.ones { 1, 2, 4 }; return fp8.nn.functional.scaled_dot_product_attention(x, x, x, p) end },
    { "interpolate", function(p) return fp8.nn.functional.interpolate(fp8.ones { 1, 1, 2 }, p) end },
  }
  local proxies = {
    { "__index", setmetatable({}, { __index = { lr = 0.5, margin = 3, dtype = "bf16" } }) },
    { "__pairs", setmetatable({}, { __pairs = function() return next, { lr = 0.5 } end }) },
    { "__index", setmetatable({}, { __index = function() return 1 end, __metatable = false }) },   -- hidden
  }
  for _, c in ipairs(calls) do
    it(c[1] .. " refuses each proxy", function()
      for _, p in ipairs(proxies) do
        local e = err_of(c[2], p[2])
        assert.truthy(e:find(c[1], 1, true), e)
        assert.truthy(e:find("options must be a plain table {name = value}, got a table whose metatable has "
          .. p[1], 1, true), e)
      end
    end)
  end
  it("takes a table whose metatable has neither (its stored keys read, as before)", function()
    local o = fp8.optim.AdamW({ w }, setmetatable({ lr = 0.25 }, { __tostring = function() return "opts" end }))
    assert.are.equal(0.25, o.param_groups[1].lr)
    assert.are.equal(3, fp8.TERecipeKwargs(setmetatable({ margin = 3 }, { __name = "opts" })).margin)
    assert.are.equal("bf16", fp8.zeros({ 2 }, setmetatable({ dtype = "bf16" }, {})):dtype())
  end)
end)
