-- Found on 2026-12-06 (stop 96): two gaps stop 95's notes left. Lua's math.random state was not in checkpoints
-- (Accelerate's save_state keeps Python's random.getstate() beside torch's generator), and a gradient hook that
-- refers to its own tensor kept both for the session.
-- docs/robustness.md, "Lua's generator in checkpoints, and the self-referring hook (stop 96)".
local U = dofile("tests/spec/helpers/util.lua")
local BIN = FP8LAB_BIN or "build/fp8lab"

-- Runs `code` with `fp8lab -e` in a new process; its output.
local function run(code)
  local out, ok = U.sh(("%s -e %s 2>&1"):format(BIN, U.q(code)))
  assert(ok, out)
  return out
end

-- k draws of math.random in its three forms, as one string
local function draws(k)
  local out = {}
  for i = 1, k do out[i] = ("%d %a %d"):format(math.random(0), math.random(), math.random(1, 1000)) end
  return table.concat(out, ",")
end

describe("Lua's math.random state", function()
  it("is read and put back exactly: the draws after it come again", function()
    math.randomseed(42)
    math.random(0)
    local s = fp8.get_math_random_state()
    assert.truthy(s:match("^%x+$") and #s == 64, s)
    assert.are.equal(s, fp8.get_math_random_state())   -- reading it draws nothing
    local first = draws(5)
    assert.are_not.equal(s, fp8.get_math_random_state())
    fp8.set_math_random_state(s)
    assert.are.equal(first, draws(5))
  end)

  it("is xoshiro256** as Lua's randomseed(n) starts it (n, 0xff, 0, 0, then 16 draws dropped)", function()
    -- lmathlib.c's setseed: buff = { n, 0xff, 0, 0 } and 16 discarded draws; the state read back must be the one
    -- computed here independently (the words in order, each most significant digit first)
    local function rotl(x, n) return (x << n) | (x >> (64 - n)) end
    local s = { 7, 0xff, 0, 0 }
    local function nxt()
      local out = rotl(s[2] * 5, 7) * 9
      local t = s[2] << 17
      s[3] = s[3] ~ s[1]; s[4] = s[4] ~ s[2]; s[2] = s[2] ~ s[3]; s[1] = s[1] ~ s[4]; s[3] = s[3] ~ t
      s[4] = rotl(s[4], 45)
      return out
    end
    for _ = 1, 16 do nxt() end
    math.randomseed(7)
    assert.are.equal(("%016x%016x%016x%016x"):format(s[1], s[2], s[3], s[4]), fp8.get_math_random_state())
    assert.are.equal(nxt(), math.random(0))
  end)

  it("is kept by the library's math.random, not a replacement a script puts in its place", function()
    local lib = math.random
    math.randomseed(3)
    local s = fp8.get_math_random_state()
    math.random = function() return 4 end   -- luacheck: ignore
    local ok, err = pcall(function()
      assert.are.equal(s, fp8.get_math_random_state())
      fp8.set_math_random_state(s)
    end)
    math.random = lib   -- luacheck: ignore
    assert(ok, err)
  end)

  it("refuses loudly where the state is not lmathlib.c's RanState, and the check draws nothing", function()
    -- the module's state() reads math.random as the library opened it (its upvalue 1); put something else there:
    -- a C function without upvalues, a Lua function, and math.randomseed, whose upvalue is the very RanState but
    -- whose call with 0 reseeds it (the draw check fails, and the state is put back as it was)
    local R = require "fp8._luarng"
    local lib = select(2, debug.getupvalue(R.state, 1))
    assert.are.equal(math.random, lib)
    math.randomseed(5)
    local s = R.state()
    local cases = { { print, "math.random's first upvalue is not a plain full userdata" },
                    { function() end, "math.random is not Lua's C function" },
                    { math.randomseed, "math.random(0) from its state is not the number xoshiro256** gives" } }
    local ok, err = pcall(function()
      for _, c in ipairs(cases) do
        debug.setupvalue(R.state, 1, c[1])
        U.fails_with({ "math_random_state: cannot reach the state of Lua's math.random (" .. c[2],
          "it cannot be saved or restored" }, R.state)
      end
    end)
    debug.setupvalue(R.state, 1, lib)
    assert(ok, err)
    assert.are.equal(s, R.state())
  end)

  it("refuses what is not a state, naming what came", function()
    U.fails_with("set_math_random_state: expected the 64 hex digits fp8.get_math_random_state() returns",
      fp8.set_math_random_state, "12")
    U.fails_with("not all zero), got 12", fp8.set_math_random_state, 12)
    U.fails_with("got nil", fp8.set_math_random_state)
    U.fails_with("not all zero), got \"" .. ("0"):rep(64), fp8.set_math_random_state, ("0"):rep(64))
    U.fails_with("not one math.random can be in", require("fp8._luarng").set_state, ("0"):rep(64))
    U.fails_with("got number", require("fp8._luarng").set_state, 12)
    U.fails_with("takes (state)", fp8.set_math_random_state, ("1"):rep(64), 1)
    U.fails_with("takes ()", fp8.get_math_random_state, 1)
  end)

  it("is seeded by fp8.set_seed and fp8.utils.set_seed (Accelerate's seeds Python's random), not by manual_seed",
    function()
      math.randomseed(99)
      local want = draws(3)
      fp8.set_seed(99)
      assert.are.equal(want, draws(3))
      fp8.utils.set_seed(99)
      assert.are.equal(want, draws(3))
      math.randomseed(5)
      local s = fp8.get_math_random_state()
      fp8.manual_seed(99)   -- torch.manual_seed leaves Python's random alone
      assert.are.equal(s, fp8.get_math_random_state())
      -- fp8.get_rng_state is torch's: fp8's generator alone; setting it leaves math.random alone
      fp8.set_rng_state(fp8.get_rng_state())
      assert.are.equal(s, fp8.get_math_random_state())
    end)
end)

describe("acc:save_state and load_state keep math.random", function()
  local d
  before_each(function() d = U.tmpdir() end)
  after_each(function() os.execute("rm -rf " .. U.q(d)) end)

  -- draws, save_state, k more draws; then load_state in a new process and k draws: the same
  it("a new process that loads the checkpoint draws what the saving one drew after the save", function()
    local save = ([[
      fp8.set_seed(11)
      local acc = fp8.Accelerator { config = false, env = {}, cpu = true }
      local model = acc:prepare(fp8.nn.Linear(4, 4))
      for _ = 1, 7 do math.random() end
      acc:save_state(%q)
      local out = {}
      for i = 1, 6 do out[i] = ("%%d %%a %%d"):format(math.random(0), math.random(), math.random(1, 1000)) end
      print(table.concat(out, ","))]]):format(d .. "/ck")
    local load = ([[
      math.randomseed(12345)
      local acc = fp8.Accelerator { config = false, env = {}, cpu = true }
      local model = acc:prepare(fp8.nn.Linear(4, 4))
      acc:load_state(%q)
      local out = {}
      for i = 1, 6 do out[i] = ("%%d %%a %%d"):format(math.random(0), math.random(), math.random(1, 1000)) end
      print(table.concat(out, ","))]]):format(d .. "/ck")
    local saved = run(save)
    assert.truthy(saved:match("^%-?%d+ 0x"), saved)
    assert.are.equal(saved, run(load))
    local rs = require("fp8._checkpoint").json_decode(U.read(d .. "/ck/random_states_0.json"))
    assert.truthy(type(rs.math_random) == "string" and #rs.math_random == 64, U.read(d .. "/ck/random_states_0.json"))
  end)

  it("a checkpoint saved before stop 96 (no math_random) loads and leaves math.random as it is", function()
    local acc, p, C, rs = U.fresh_random_states(d)
    rs.math_random = nil
    U.write(p, C.json_encode(rs))
    math.randomseed(8)
    local s = fp8.get_math_random_state()
    acc:load_state(d .. "/ck")
    assert.are.equal(s, fp8.get_math_random_state())
  end)

  it("refuses a math_random that is not a state, before anything is loaded", function()
    local acc, p, C, rs = U.fresh_random_states(d)
    local fstate = fp8.get_rng_state()
    for _, bad in ipairs { "abc", ("0"):rep(64), ("g"):rep(64), 5 } do
      rs.math_random = bad
      U.write(p, C.json_encode(rs))
      fp8.manual_seed(77)
      local before = fp8.get_rng_state()
      U.fails_with("random_states_0.json: math_random is ", acc.load_state, acc, d .. "/ck")
      assert.are.equal(before, fp8.get_rng_state())   -- fp8's generator not restored either
    end
    assert.truthy(fstate)
  end)
end)

describe("a gradient hook that refers to its own tensor", function()
  -- fp8lab held every hook's function from the registry, so `t:register_hook(function(g) ... t ... end)` was a cycle
  -- through the registry that Lua's collector never freed (both kept for the session). A function is now held
  -- through the tensor's box while nothing else holds the tensor (lua/l_autograd.c), from the registry while a graph
  -- node, another box or C code does (the core says when: fl_set_hooks_shared)
  local function count(weak) local n = 0; for _ in pairs(weak) do n = n + 1 end; return n end
  local function collect() collectgarbage(); collectgarbage() end

  it("is collected with its tensor: never used, after a backward, a post-accumulate hook, a result's", function()
    local alive = setmetatable({}, { __mode = "k" })
    local x = fp8.tensor({ 1, 2 }):requires_grad(true)
    for i = 1, 40 do
      local t = fp8.randn({ 4 }):requires_grad(true)
      t:register_hook(function(g) return g * t:detach() end)
      if i % 4 == 1 then (t * 2):sum():backward() end
      if i % 4 == 2 then
        t:register_post_accumulate_grad_hook(function(p) assert(p == t) end)
        ;(t * t):sum():backward()
      end
      if i % 4 == 3 then
        local z = x * i
        z:register_hook(function(g) return g + z:detach() * 0 end)
        z:sum():backward()
        alive[z] = true
      end
      alive[t] = true
    end
    collect()
    assert.are.equal(0, count(alive))
  end)

  it("still runs where the graph holds the tensor after its box is dropped, its closure intact", function()
    -- a leaf: the box goes before the backward, and the hook's other upvalue v only it holds
    local seen
    local function make()
      local w = fp8.tensor({ 1, 2 }):requires_grad(true)
      local v = fp8.tensor({ 10, 100 })
      w:register_hook(function(g) seen = (g * v):totable(); assert(w:numel() == 2) end)
      return (w * 3):sum()
    end
    local loss = make()
    collect()
    loss:backward()
    assert.are.same({ 30, 300 }, seen)
    -- a result: its box goes, its grad_fn (shared with the graph) runs its hooks
    local x = fp8.tensor({ 1, 2 }):requires_grad(true)
    local function make2()
      local z = x * 2
      local v = fp8.tensor({ 5, 7 })
      z:register_hook(function(g) return g * v + z:detach() * 0 end)
      return (z * 3):sum()
    end
    local l2 = make2()
    collect()
    l2:backward()
    assert.are.same({ 30, 42 }, x.grad:totable())   -- 2 · (3 · v)
    -- a view's graph holds the leaf, whose box is dropped
    local ran = 0
    local function make3()
      local w = fp8.tensor({ 1, 2, 3, 4 }):requires_grad(true)
      w:register_hook(function(g) ran = ran + 1; seen = g:totable(); local _ = w end)
      return w:view({ 2, 2 })
    end
    local v3 = make3()
    collect()
    ;(v3 * 2):sum():backward()
    assert.are.equal(1, ran)
    assert.are.same({ 2, 2, 2, 2 }, seen)
  end)

  it("held by a module's parameter, runs every step while the model lives, and goes with the model", function()
    local alive = setmetatable({}, { __mode = "k" })
    local calls = 0
    do
      local model = fp8.nn.Linear(3, 2)
      for _, p in ipairs(model:parameters()) do
        p:register_hook(function(g) calls = calls + 1; local _ = model; return g end)
      end
      local opt = fp8.optim.SGD(model:parameters(), { lr = 0.1 })
      for _ = 1, 3 do
        collect()
        model(fp8.randn({ 4, 3 })):sum():backward()
        opt:step(); opt:zero_grad()
      end
      alive[model] = true
      alive[model.weight] = true
    end
    assert.are.equal(6, calls)
    collect()
    assert.are.equal(0, count(alive))
  end)

  it("removed by its handle, or kept when the handle is dropped, as before", function()
    local w = fp8.tensor({ 1, 2 }):requires_grad(true)
    local calls = 0
    local h = w:register_hook(function(g) calls = calls + 1; local _ = w end)
    w:register_hook(function(g) calls = calls + 10; local _ = w end)
    collect()
    ;(w * 1):sum():backward()
    h:remove()
    collect()
    ;(w * 1):sum():backward()
    assert.are.equal(21, calls)
  end)
end)
