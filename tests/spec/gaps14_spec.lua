-- Found on 2026-12-06 (stop 97): the gaps stop 96 left. A 2-norm (and the p-norms) whose true value is finite in
-- fp32 overflowed to inf or underflowed to 0 where Σ|x|^p left fp32's range; make test had no time limit on its
-- parts, so a hung C test hung it; the math_random state's check was written twice.
-- docs/robustness.md, "The gaps stop 96 left (stop 97)".
local U = dofile("tests/spec/helpers/util.lua")
local F = fp8.nn.functional

-- ‖v‖₂ of a list of numbers (fp32 values) in float64: Σv² cannot leave double's range for fp32 values
local function norm64(v, p)
  p = p or 2
  local s = 0
  for _, x in ipairs(v) do s = s + math.abs(x) ^ p end
  return s ^ (1 / p)
end

-- got (a number read from an fp32 tensor) within `ulps` fp32 ulps of the float64 value want
local function near(what, got, want, ulps)
  local ulp = 2.0 ^ (math.max(math.floor(math.log(math.abs(want), 2)), -126) - 23)
  assert.is_true(math.abs(got - want) <= (ulps or 1) * ulp, ("%s: %.9g, the float64 value %.9g"):format(what, got,
    want))
end

local BIG, TINY = U.f32(1e20), U.f32(1e-30)

describe("a norm whose sum of powers leaves fp32's range", function()
  it("x:norm() of huge or tiny elements is finite, within 1 ulp of the float64 norm (was inf or 0)", function()
    for _, v in ipairs { { 1e20, 1e20 }, { 1e-30, 1e-30 }, { 3e38, 1e38 }, { 1e-45, 1e-45 }, { 1e20, 1e-30, -3e19 },
        { 2e-38, -1e-38, 3e-39 } } do
      for i = 1, #v do v[i] = U.f32(v[i]) end
      near(table.concat(v, ", "), fp8.tensor(v):norm():item(), norm64(v))
    end
    -- torch 2.15: linalg.vector_norm(torch.tensor([1e20])) 1.0000000200408773e+20, of [1e-30] 1.0000000031710769e-30
    assert.are.equal(1.0000000200408773e+20, fp8.tensor({ 1e20 }):norm():item())
    assert.are.equal(1.0000000031710769e-30, fp8.tensor({ 1e-30 }):norm():item())
    -- a true norm past FLT_MAX is inf, an infinity inf, a NaN NaN, zeros 0
    assert.are.equal(math.huge, fp8.tensor({ 3e38, 3e38 }):norm():item())
    assert.are.equal(math.huge, fp8.tensor({ math.huge, 1 }):norm():item())
    local n = fp8.tensor({ 0 / 0, 1e20 }):norm():item()
    assert.is_true(n ~= n)
    assert.are.equal(0, fp8.tensor({ 0, 0 }):norm():item())
  end)

  it("along dims and with keepdim: each slice on its own, the ordinary ones in the plain formula's bits", function()
    local rows = { { BIG, BIG, 0 }, { 1.5, -2.25, 3 }, { 0, 0, 0 }, { TINY, -TINY, TINY }, { 0.1, 0.2, 0.3 } }
    local x = fp8.tensor(rows)
    for _, kd in ipairs { false, true } do
      local r = x:norm(2, 2, kd)
      assert.are.same(kd and { 5, 1 } or { 5 }, r:shape())
      local got = r:reshape({ -1 }):totable()
      near("row 1", got[1], norm64(rows[1]))
      near("row 4", got[4], norm64(rows[4]))
      assert.are.equal(0, got[3])
      for _, i in ipairs { 2, 5 } do   -- the ordinary rows: the bits of their norm alone (the plain formula's)
        assert.are.equal(fp8.tensor(rows[i]):norm():item(), got[i])
      end
    end
    near("over dims {1, 2}", x:norm(2, { 1, 2 }):item(), math.sqrt(2 * BIG * BIG + 1.5 ^ 2 + 2.25 ^ 2 + 9 + 3 * TINY ^ 2
      + U.f32(0.1) ^ 2 + U.f32(0.2) ^ 2 + U.f32(0.3) ^ 2))
    local c = x:t():norm(2, 1):totable()   -- along dim 1 of the transposed view: the same rows
    near("column 1", c[1], norm64(rows[1]))
    near("column 4", c[4], norm64(rows[4]))
  end)

  it("bf16 and fp16 inputs (computed in fp32, rounded once)", function()
    local b = fp8.tensor({ 1e20, 1e20 }):to("bf16")
    assert.are.equal(fp8.tensor({ 1.4142135e20 }):to("bf16"):item(), b:norm():item())
    assert.are.equal(fp8.tensor({ 1.4142135e-30 }):to("bf16"):item(),
      fp8.tensor({ 1e-30, 1e-30 }):to("bf16"):norm():item())
    assert.are.equal(math.huge, fp8.tensor({ 60000, 60000 }):to("fp16"):norm():item())   -- past fp16's 65504
    local h = fp8.tensor({ 1e-7 }):to("fp16"):item()   -- a subnormal fp16, 2 of its units
    assert.are.equal(fp8.tensor({ h * math.sqrt(2) }):to("fp16"):item(), fp8.tensor({ h, h }):to("fp16"):norm():item())
  end)

  it("the gradient is x/‖x‖ there (torch's 0 from x/inf and 0/0), 0 for a zero slice as torch's", function()
    local x = fp8.tensor({ { BIG, BIG }, { TINY, TINY }, { 1e-45, 1e-45 }, { 3e38, 3e38 }, { 0, 0 }, { 3, 4 } })
      :requires_grad_()
    x:norm(2, 2):sum():backward()
    local g = x.grad:totable()
    for i = 1, 4 do
      for j = 1, 2 do near(("grad [%d][%d]"):format(i, j), g[i][j], math.sqrt(0.5)) end
    end
    assert.are.same({ 0, 0 }, g[5])
    assert.are.same({ U.f32(0.6), U.f32(0.8) }, g[6])
    -- over all elements: each x/‖x‖, the tiny ones' quotients underflowing to 0
    local y = fp8.tensor({ BIG, TINY, -BIG }):requires_grad_()
    y:norm():backward()
    local gy, n = y.grad:totable(), norm64({ BIG, TINY, BIG })
    near("all [1]", gy[1], BIG / n)
    near("all [3]", gy[3], -BIG / n)
    assert.are.equal(0, gy[2])
  end)

  it("an fp16 input to F.normalize and get_total_norm: its own smallest normal number is the test (torch's values)",
    function()
      -- torch 2.15: F.normalize(torch.tensor([[1e-7, 1e-7], [1, 2]]).half()) and p=3: [[0.66650390625] * 2,
      -- [0.447265625, 0.89453125]] and [[0.66650390625] * 2, [0.480712890625, 0.96142578125]] (fp16's Σx² of the
      -- first row is 0, which the fp32 bound 2^-126 did not catch: inf); get_total_norm of [1e-3, 1e-3] in fp16 with
      -- p = 3: 0.0012607574462890625 (fp8lab sums the powers in float64 after the fp16 sum: within 2^-10)
      local x = fp8.tensor({ { 1e-7, 1e-7 }, { 1, 2 } }):to("fp16")
      assert.are.same({ { 0.66650390625, 0.66650390625 }, { 0.447265625, 0.89453125 } }, F.normalize(x):float():totable())
      assert.are.same({ { 0.66650390625, 0.66650390625 }, { 0.480712890625, 0.96142578125 } },
        F.normalize(x, { p = 3 }):float():totable())
      local n = fp8.nn.utils.get_total_norm({ fp8.tensor({ 1e-3, 1e-3 }):to("fp16") }, 3)
      assert.is_true(math.abs(n - 0.0012607574462890625) <= 2 ^ -10 * n, tostring(n))
    end)

  it("F.normalize, dist, cdist, pairwise_distance and renorm on the same rows", function()
    local s = math.sqrt(0.5)
    local u = F.normalize(fp8.tensor({ { BIG, BIG }, { TINY * 1e20, TINY * 1e20 } })):totable()
    near("normalize", u[1][1], s)
    near("normalize (p=3)", F.normalize(fp8.tensor({ { BIG, BIG } }), { p = 3 }):totable()[1][1], 0.5 ^ (1 / 3))
    local a, b = fp8.tensor({ { BIG, 0 } }), fp8.tensor({ { 0, BIG } })
    near("dist p=3", a:dist(b, 3):item(), norm64({ BIG, BIG }, 3))
    near("cdist", fp8.cdist(a, b):item(), norm64({ BIG, BIG }))
    near("cdist p=3", fp8.cdist(a, b, 3):item(), norm64({ BIG, BIG }, 3))
    near("pairwise_distance p=3", F.pairwise_distance(a, b, 3):item(), norm64({ BIG, BIG }, 3), 2)
    local r = fp8.tensor({ { BIG, BIG }, { 0.25, 0.5 } }):renorm(2, 1, 1e19):totable()
    near("renorm", r[1][1], 1e19 * s, 2)   -- (maxnorm / (norm + 1e-7), torch's)
    assert.are.same({ 0.25, 0.5 }, r[2])
  end)

  it("empty inputs as before: sums of nothing are 0 (the rescue's amax of nothing raised)", function()
    assert.are.same({ 0, 0, 0 }, fp8.zeros({ 0, 3 }):norm(2, 1):totable())
    assert.are.same({ 0 }, fp8.zeros({ 0, 3 }):norm(2, 2):shape())
    assert.are.equal(0, fp8.zeros({ 0 }):norm():item())
    assert.are.same({ 0, 3 }, F.normalize(fp8.zeros({ 0, 3 })):shape())
    assert.are.equal(0, fp8.zeros({ 2, 0 }):dist(fp8.zeros({ 2, 0 }), 3):item())
    assert.are.same({ { 0, 0 }, { 0, 0 } }, fp8.cdist(fp8.zeros({ 2, 0 }), fp8.zeros({ 2, 0 }), 3):totable())
    assert.are.same({ 0, 0 }, F.pairwise_distance(fp8.zeros({ 2, 0 }), fp8.zeros({ 2, 0 }), 3):totable())
    assert.are.same({ 3, 0 }, fp8.zeros({ 3, 0 }):renorm(3, 1, 1):shape())
    near("get_total_norm with an empty tensor", fp8.nn.utils.get_total_norm({ fp8.zeros({ 0 }), fp8.tensor({ BIG }) }, 3),
      BIG)
  end)

  it("get_total_norm and clip_grad_norm_ of any p (the fp32 Σ|g|^p was inf or 0 for p = 3)", function()
    local U8 = fp8.nn.utils
    for _, p in ipairs { 3, 4, 0.5, 7 } do
      near("p " .. p, U8.get_total_norm({ fp8.tensor({ BIG, BIG }) }, p), norm64({ BIG, BIG }, p))
      near("p " .. p .. " tiny", U8.get_total_norm({ fp8.tensor({ TINY, TINY }) }, p), norm64({ TINY, TINY }, p))
      near("p " .. p .. " mixed", U8.get_total_norm({ fp8.tensor({ TINY }), fp8.tensor({ 3, 4 }), fp8.tensor({ BIG }) },
        p), norm64({ TINY, 3, 4, BIG }, p))
    end
    local w = fp8.tensor({ 1, 1 }):requires_grad_()
    w.grad = fp8.tensor({ BIG, BIG })
    local total = U8.clip_grad_norm_({ w }, 1, 3)
    near("clip_grad_norm_'s total", total, norm64({ BIG, BIG }, 3))
    near("the clipped gradient", w.grad:totable()[1], 0.5 ^ (1 / 3), 2)
  end)
end)

-- scripts/run-tests.sh had no time limit: a C test (or spec) that never returned held make test until it was stopped
-- (CI's 90 minutes). Each part now runs under coreutils' timeout (FL_TEST_TIMEOUT_C, FL_TEST_TIMEOUT_SPECS). Stand-in
-- binaries: a test_core whose second test hangs (with a child of its own), an fp8lab that hangs likewise.
describe("run-tests.sh's time limits", function()
  local q, sh = U.q, U.sh
  local b = U.tmpdir()
  local function stand_in(name, body) U.write(b .. "/" .. name, "#!/bin/sh\n" .. body) end
  -- hang NAME: a child sleeping (its pid in NAME.child), then the stand-in itself sleeps
  local function hang(name)
    return "sleep 30 &\necho $! > " .. q(b .. "/" .. name .. ".child") .. "\nexec sleep 30\n"
  end
  local LIST = "if [ \"$1\" = --list ]; then printf 'c_first\\nc_hangs\\nc_last\\n'; exit 0; fi\n"
  local C_OK = LIST .. "echo 'ok   c_first  1.0 ms'\necho 'ok   c_hangs  1.0 ms'\necho 'ok   c_last  1.0 ms'\n"
    .. "echo '3 passed, 0 failed'\n"
  local S_OK = "echo '1 success / 0 failures / 0 errors / 0 pending : 0.1 seconds'\n"
  local function run(env)
    assert(os.execute("chmod +x " .. q(b .. "/test_core") .. " " .. q(b .. "/fp8lab")))
    os.remove(b .. "/test_core.child"); os.remove(b .. "/fp8lab.child")
    return sh(env .. " bash scripts/run-tests.sh " .. q(b) .. " 2>&1")
  end
  local function gone(name)   -- the hung stand-in's child was killed with its process group (a zombie is dead)
    local pid = U.must_read(b .. "/" .. name .. ".child"):match("%d+")
    local stat = U.read("/proc/" .. pid .. "/stat")
    local alive = stat ~= nil and not stat:match("^%d+ %b() Z")
    if alive then os.execute("kill " .. pid) end
    assert.is_falsy(alive, name .. "'s child left running")
  end
  local n_spec_files = tonumber((sh("ls tests/spec/*_spec.lua | wc -l")))   -- each prints S_OK's one success
  teardown(function() os.execute("rm -rf " .. q(b)) end)

  it("stops a hung C test, names it, kills its process group and fails", function()
    stand_in("test_core", LIST .. "echo 'ok   c_first  1.0 ms'\n" .. hang("test_core"))
    stand_in("fp8lab", S_OK)
    local out, ok = run("FL_TEST_TIMEOUT_C=1")
    assert.is_false(ok, out)
    assert.truthy(out:find("ran past their limit of 1 s (FL_TEST_TIMEOUT_C) and were stopped, their process group "
      .. "killed, while running test c_hangs", 1, true), out)
    assert.truthy(out:find("ok   c_first", 1, true), out)
    gone("test_core")
  end)

  -- each spec file is its own busted run under the limit (since stop 97's two lanes): the hung one is named and the
  -- others still run and count
  it("stops a hung spec file, names it, kills its process group, runs the others and fails", function()
    stand_in("test_core", C_OK)
    stand_in("fp8lab", "case \"$2\" in *tensor_spec.lua) echo 'running the tensor specs'\n" .. hang("fp8lab")
      .. ";;\nesac\n" .. S_OK)
    local out, ok = run("FL_TEST_TIMEOUT_SPECS=1")
    assert.is_false(ok, out)
    assert.truthy(out:find("tests/busted.lua tests/spec/tensor_spec.lua) ran past their limit of 1 s "
      .. "(FL_TEST_TIMEOUT_SPECS) and were stopped", 1, true), out)
    assert.truthy(out:find("running the tensor specs", 1, true), out)
    assert.truthy(out:find("\n" .. (3 + n_spec_files - 1) .. " passed, 0 failed\n", 1, true), out)
    gone("fp8lab")
  end)

  it("passes a run within its limits, and refuses a limit that is not a number of seconds", function()
    stand_in("test_core", C_OK)
    stand_in("fp8lab", S_OK)
    local out, ok = run("FL_TEST_TIMEOUT_C=0 FL_TEST_TIMEOUT_SPECS=60")
    assert.is_true(ok, out)
    assert.truthy(out:find("\n" .. (3 + n_spec_files) .. " passed, 0 failed\n", 1, true), out)
    out, ok = run("FL_TEST_TIMEOUT_C=ten")
    assert.is_false(ok, out)
    assert.truthy(out:find("run-tests.sh: FL_TEST_TIMEOUT_C must be a whole number of seconds (0: no limit), got 'ten'",
      1, true), out)
  end)
end)

-- A math_random state was checked in three places (load_state, fp8.set_math_random_state, the C set_state), the two
-- Lua ones with one condition written twice, apart in one letter: load_state refused the uppercase hex digits that
-- set_math_random_state (and the C side) took. One predicate now (fp8._luarng's is_state, the C side's own test).
describe("the math_random state's one check", function()
  local d
  before_each(function() d = U.tmpdir() end)
  after_each(function() os.execute("rm -rf " .. U.q(d)) end)
  local R = require "fp8._luarng"

  it("is_state, set_math_random_state and the C set_state agree on every value", function()
    local good = fp8.get_math_random_state()
    local values = { good, good:upper(), ("0"):rep(63) .. "1", ("0"):rep(64), good:sub(2), good .. "0", "abc",
      ("g"):rep(64), good:sub(1, 63) .. "\0", 5, nil, true, {}, ("f"):rep(64) .. " " }
    for i = 1, 14 do
      local v = values[i]
      local ok = pcall(fp8.set_math_random_state, v)
      assert.are.equal(ok, R.is_state(v), ("value %d"):format(i))
      assert.are.equal(ok, (pcall(R.set_state, v)), ("value %d (C)"):format(i))
      fp8.set_math_random_state(good)
    end
  end)

  it("load_state takes what set_math_random_state takes: a state in uppercase hex digits (refused before)", function()
    local acc, p, C, rs = U.fresh_random_states(d)
    local want = rs.math_random
    rs.math_random = want:upper()
    U.write(p, C.json_encode(rs))
    math.randomseed(3)
    acc:load_state(d .. "/ck")
    assert.are.equal(want, fp8.get_math_random_state())
    U.fails_with("random_states_0.json: math_random is \"" .. ("0"):rep(64) .. "\", expected the 64 hex digits of "
      .. "Lua's math.random state (not all zero)", function()
        rs.math_random = ("0"):rep(64)
        U.write(p, C.json_encode(rs))
        acc:load_state(d .. "/ck")
      end)
  end)
end)

-- stop 96's hook fix left two limits (docs/robustness.md, "Lua's generator in checkpoints, and the self-referring hook
-- (stop 96)"): a tensor used in another object's __gc after both became unreachable skipped its hooks (Lua clears a
-- weak value that only objects being finalized reach before their finalizers run; the ephemeron keeps it), and a
-- function stayed strongly held after its tensor stopped being shared, or after the tensor was freed, until the next
-- backward, register_hook or remove (a model dropped with its graph and no later backward kept its hooks' closures).
describe("the self-referring hook's limits", function()
  local function collected(f)   -- f(weak) fills weak (weak keys); whether all of it was collected after
    local weak = setmetatable({}, { __mode = "k" })
    f(weak)
    for _ = 1, 4 do collectgarbage() end
    return next(weak) == nil
  end

  it("a tensor used in another object's __gc after both became unreachable runs its hook", function()
    local res = {}
    do
      local b = fp8.tensor({ 1, 2 }):requires_grad_()
      b:register_hook(function(g) res.called = true; return g * 3 end)
      setmetatable({ b = b }, { __gc = function(o)
        res.ok, res.err = pcall(function() (o.b * 2):sum():backward(); res.grad = o.b.grad:totable() end)
      end })
    end
    collectgarbage(); collectgarbage()
    assert.is_true(res.ok, tostring(res.err))
    assert.is_true(res.called)
    assert.are.same({ 6, 6 }, res.grad)
  end)

  it("a hook's tensor no longer shared is collectable at once (no backward, register_hook or remove after)", function()
    assert.is_true(collected(function(weak)
      local p = fp8.randn({ 4 }):requires_grad_()
      local pp = p   -- (the closure's own upvalue: p = nil below must not cut the cycle)
      p:register_hook(function(g) return g * pp end)
      local y = (p * 2):sum()   -- p shared: the hook pinned
      weak[p] = true
      y = nil
      collectgarbage(); collectgarbage()   -- y's node freed: p back to its box alone
    end))
  end)

  it("a tensor dropped with its graph, or a model with a forward's graph, is collected without a backward", function()
    assert.is_true(collected(function(weak)
      local p = fp8.randn({ 4 }):requires_grad_()
      p:register_hook(function(g) return g * p end)
      local y = (p * 2):sum()
      weak[p] = true; weak[y] = true
    end))
    assert.is_true(collected(function(weak)
      local m = fp8.nn.Linear(4, 4)
      for _, q in ipairs(m:parameters()) do q:register_hook(function(g) return g * m.weight:sum() end) end
      local out = m(fp8.randn({ 2, 4 })):sum()
      weak[m] = true; weak[m.weight] = true; weak[out] = true
    end))
  end)

  it("a hook freed with its graph (a result's, moved to its node) lets go of its function at once", function()
    assert.is_true(collected(function(weak)
      local x = fp8.randn({ 4 }):requires_grad_()
      local big = fp8.randn({ 4 })   -- what the hook refers to
      weak[big] = true
      local y = x * 2
      y:register_hook(function(g) return g * big end)
      local z = (y * 3):sum()
      y = nil
      collectgarbage()   -- y's box collected: its hook runs at its node, which z's graph holds; z goes at the end
    end))
  end)
end)
