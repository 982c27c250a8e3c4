-- Found on 2026-12-07 (stop 103, review20: stop 102's code read again). docs/robustness.md, "Stop 102's code read
-- again (stop 103)".
-- fp8.hist of a tensor scaled per index along a dim (axis=): stop 102's faster path read the codes through a flat
-- reshape, which such a tensor refuses ('reshape: e4m3 tensor [37, 29] is scaled per index along dim 1 ...'); the
-- counts are checked against the cast's own bytes, counted here.
-- fp8.cdist by chunks with a bf16 (or fp16) input requiring grad: the chunks' autograd.Function got the output's
-- gradient rounded to bf16 (a Function's gradient takes its result's dtype), where the whole tensor's graph reads the
-- fp32 gradient: x1's gradient was up to 2e-2 off the unchunked one. Checked against the unchunked graph's bits and
-- against the derivative worked in doubles.
local F8 = fp8

-- each code's class counted from the cast's bytes (fp8.format's fields; the sign dropped)
local function classes(q, fmt)
  local f = F8.format(fmt)
  local emask = (1 << f.exp_bits) - 1
  local c = { zero = 0, sub = 0, nan = 0, inf = 0, normal = 0 }
  for _, b in ipairs(q:bytes()) do
    b = b & 0x7F
    local e = b >> f.mantissa_bits
    if b == 0 then c.zero = c.zero + 1
    elseif e == 0 then c.sub = c.sub + 1
    elseif fmt == "e4m3" and b == 0x7F or fmt == "e5m2" and e == emask and (b & 3) ~= 0 then c.nan = c.nan + 1
    elseif fmt == "e5m2" and e == emask then c.inf = c.inf + 1
    else c.normal = c.normal + 1 end
  end
  return c
end

local function source(shape)
  local n = 1
  for _, s in ipairs(shape) do n = n * s end
  local v = {}
  for i = 1, n do v[i] = ((i * 7919) % 2003 - 1001) * 2.0 ^ ((i % 40) - 20) end
  v[3], v[5], v[7], v[9] = 0 / 0, 1 / 0, -1 / 0, 0.0
  return F8.tensor(v):reshape(shape)
end

describe("fp8.hist of a tensor scaled per index along a dim (stop 102's flat read refused it)", function()
  for _, case in ipairs {
    { shape = { 37, 29 }, axis = 1 }, { shape = { 37, 29 }, axis = 2 }, { shape = { 70, 100 }, axis = 1 },
    { shape = { 3, 5000 }, axis = 2 }, { shape = { 2, 5000 }, axis = 1 }, { shape = { 2, 3, 3000 }, axis = 2 },
    { shape = { 5000 } },
  } do
    for _, fmt in ipairs { "e4m3", "e5m2" } do
      it(("%s %s axis %s: the counts of the cast's codes"):format(fmt, table.concat(case.shape, "x"),
        tostring(case.axis)), function()
        local x = source(case.shape)
        local q = x:quantize(fmt, { axis = case.axis })
        local want = classes(q, fmt)
        for _, h in ipairs { F8.hist(x, fmt, { axis = case.axis, quiet = true }), F8.hist(q, nil, { quiet = true }) } do
          assert.are.equal(x:numel(), h.n)
          assert.are.equal(want.nan, h.nan)
          assert.are.equal(want.inf, h.inf)
          assert.are.equal(want.sub, h.subnormal)
          assert.are.equal(want.zero, h.zero + h.underflow)
          local binned = h.saturated
          for _, c in pairs(h.bins) do binned = binned + c end
          assert.are.equal(want.normal, binned)
        end
      end)
    end
  end
end)

describe("fp8.cdist by chunks: a bf16 or fp16 input's gradient is the unchunked graph's", function()
  -- d/dx1[i] of sum_ij w[i][j] * ||x1[i] - x2[j]||_p, and d/dx2[j], in doubles from the inputs' values
  local function ref_grads(a, b, w, p)
    local ga, gb = {}, {}
    for i = 1, #a do ga[i] = { 0, 0, 0 } end
    for j = 1, #b do gb[j] = { 0, 0, 0 } end
    for i = 1, #a do
      for j = 1, #b do
        local s = 0.0
        for k = 1, 3 do s = s + math.abs(a[i][k] - b[j][k]) ^ p end
        local dist = s ^ (1 / p)
        for k = 1, 3 do
          local d = a[i][k] - b[j][k]
          local g = (d > 0 and 1 or d < 0 and -1 or 0) * (math.abs(d) / dist) ^ (p - 1) * w[i][j]
          ga[i][k] = ga[i][k] + g
          gb[j][k] = gb[j][k] - g
        end
      end
    end
    return ga, gb
  end
  for _, dt in ipairs { "bf16", "fp16" } do
    for _, p in ipairs { 2, 3, 1.5 } do
      it(("%s, p = %s"):format(dt, p), function()
        local a0 = F8.tensor({ { 0.5, -1.25, 2 }, { 1.5, 0.75, -0.5 }, { -2, 1, 0.25 }, { 0.125, 3, -1 },
          { 2.5, -0.25, 1.75 } }):to(dt)
        local b0 = F8.tensor({ { -0.5, 0.5, 1 }, { 1, -1, 0 }, { 0.25, 2, -1.5 }, { -1.5, -0.75, 2.25 } }):to(dt)
        local wv = {}
        for i = 1, 5 do wv[i] = {} for j = 1, 4 do wv[i][j] = 1 + (i * 4 + j) / 1000 + 1 / 3 end end
        local w = F8.tensor(wv)
        local function run(chunk)
          local a, b = a0:clone():requires_grad_(true), b0:clone():requires_grad_(true)
          local y = chunk and F8._cdist_chunk(6, function() return F8.cdist(a, b, p) end) or F8.cdist(a, b, p)
          assert.are.equal(dt, y:dtype())
          ;(y:float() * w):sum():backward()
          return a.grad:tolist(), b.grad:tolist()
        end
        local ga1, gb1 = run(false)
        local ga2, gb2 = run(true)
        local ra, rb = ref_grads(a0:float():tolist(), b0:float():tolist(), wv, p)
        for i = 1, 5 do
          for k = 1, 3 do
            assert.are.equal(ga1[i][k], ga2[i][k], ("x1's gradient [%d][%d]: chunked %.9g, whole %.9g"):format(i, k,
              ga2[i][k], ga1[i][k]))
            assert.is_true(math.abs(ga2[i][k] - ra[i][k]) <= 3e-2 * (1 + math.abs(ra[i][k])))
          end
        end
        for j = 1, 4 do
          for k = 1, 3 do   -- (x2's: summed over the chunks, another order of the same fp32 sum)
            assert.is_true(math.abs(gb1[j][k] - gb2[j][k]) <= 1e-6 * (1 + math.abs(gb1[j][k])),
              ("x2's gradient [%d][%d]: chunked %.9g, whole %.9g"):format(j, k, gb2[j][k], gb1[j][k]))
            assert.is_true(math.abs(gb2[j][k] - rb[j][k]) <= 3e-2 * (1 + math.abs(rb[j][k])))
          end
        end
      end)
    end
  end

  it("the result's dtype is the unchunked one's (bf16 x1 with fp32 x2: fp32), for every p", function()
    for _, p in ipairs { 0, 1, 2, 0.5, math.huge } do
      for _, d in ipairs { { "bf16", "fp32" }, { "fp32", "bf16" }, { "bf16", "fp16" }, { "bf16", "bf16" } } do
        local a = F8.tensor({ { 0.5, -1.25, 2 }, { 1.5, 0.75, -0.5 }, { -2, 1, 0.25 } }):to(d[1]):requires_grad_(true)
        local b = F8.tensor({ { -0.5, 0.5, 1 }, { 1, -1, 0 } }):to(d[2])
        local w = F8.cdist(a, b, p)
        local c = F8._cdist_chunk(4, function() return F8.cdist(a, b, p) end)
        assert.are.equal(w:dtype(), c:dtype(), ("p = %s, %s and %s"):format(p, d[1], d[2]))
        assert.are.same(w:float():tolist(), c:float():tolist())
      end
    end
  end)
end)

-- stop 102 refused proxies (a metatable with __index or __pairs) as options tables, whose keys are read raw and
-- values by lookups; an optimizer's parameter group (torch's dict {params=, lr=, ...}), the one-table form
-- SGD{params=, lr=} and resolve's config= are read the same way and still took a proxy: its lr (its __index's)
-- dropped and the default kept, its keys unchecked.
describe("options read raw refuse a proxy there too (stop 102's refusal)", function()
  local function proxy(stored, index) return setmetatable(stored, { __index = index }) end
  local function refused(where, f)
    local ok, err = pcall(f)
    assert.is_false(ok, where .. ": accepted")
    assert.is_truthy(tostring(err):find("plain table", 1, true), where .. ": " .. tostring(err))
  end
  it("a parameter group, in the list or by add_param_group, and the one-table form", function()
    local w = F8.randn({ 3 }):requires_grad_(true)
    refused("SGD{proxy}", function() return F8.optim.SGD(proxy({ params = { w } }, { lr = 0.5 })) end)
    refused("SGD{params in __index}", function() return F8.optim.SGD(proxy({}, { params = { w }, lr = 0.5 })) end)
    refused("a group", function() return F8.optim.SGD({ proxy({ params = { w } }, { lr = 0.5 }) }, { lr = 0.1 }) end)
    refused("AdamW's group", function() return F8.optim.AdamW({ proxy({ params = { w } }, { lr = 0.5 }) }) end)
    local o = F8.optim.SGD({ F8.randn({ 2 }):requires_grad_(true) }, { lr = 0.1 })
    refused("add_param_group", function() return o:add_param_group(proxy({ params = { w } }, { lr = 0.5 })) end)
    assert.are.equal(1, #o.param_groups)
    -- plain ones as before: the group's lr taken
    local p = F8.optim.SGD({ { params = { w }, lr = 0.5 } }, { lr = 0.1 })
    assert.are.equal(0.5, p.param_groups[1].lr)
    assert.are.equal(0.5, F8.optim.SGD({ params = { w }, lr = 0.5 }).param_groups[1].lr)
  end)
  it("resolve's config= table", function()
    local K = require "fp8.kwargs"
    refused("config", function() return K.resolve({ config = proxy({}, { mixed_precision = "bf16" }) }) end)
    refused("config __pairs", function()
      return K.resolve({ config = setmetatable({}, { __pairs = function() return next, {}, nil end }) })
    end)
  end)
end)

-- fp8.opts.internal_functions tells the library's callers from a user's by the calling chunk's name (lua/fp8/...):
-- a user's chunk loaded under a library file's name passed for the library's own (stop 101's and 102's leftover),
-- its bad call raising the raw 'lua/fp8/ddp.lua:56: attempt to index a nil value'. Since stop 103 the host registers
-- the library's chunks (their _ENV upvalues, lua/main.c note_library_chunk) and such a chunk is a user's.
describe("internal_functions: a user's chunk named as a library file is a user's caller", function()
  local code = [[
local agree = require("fp8.ddp").agree
local ok, err = pcall(agree, nil, nil)
return err
]]
  it("gets the named error a user's chunk gets", function()
    local user = load(code, "@/tmp/review20_user.lua")()
    assert.truthy(user:find("fp8.ddp.agree: got (nil, nil)", 1, true), user)
    local forged = load(code, "@lua/fp8/ddp.lua")()
    assert.are.equal(user, forged)
  end)
  it("a chunk registered as the library's takes the library's path (the raw error, as before)", function()
    local f = load(code, "@lua/fp8/ddp.lua")
    local envs = debug.getregistry()["fp8.library_envs"]
    assert.are.equal("table", type(envs), "the host registers the library's chunks")
    envs[debug.upvalueid(f, 1)] = true
    local err = f()
    envs[debug.upvalueid(f, 1)] = nil
    assert.truthy(err:find("^lua/fp8/ddp%.lua:%d+: attempt to index a nil value"), err)
  end)
end)
