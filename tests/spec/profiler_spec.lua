-- profiler_spec.lua — fp8.profiler and acc:profile: a profiled training run writes a Chrome trace that
-- parses as JSON and nests (per thread, backward nodes inside "backward", ops inside their module
-- ranges), the schedule keeps the right steps, key_averages adds up to the events, bad options fail
-- clearly, and nothing is recorded while no profiler runs.
local fp8 = fp8 or require "fp8"
local P = require "fp8._profiler"
-- Modules required here rather than through fp8.* (cached by earlier spec files): busted reloads
-- Lua modules per file, and the with_modules hook lives on the fp8.nn.module loaded now.
local Module = require "fp8.nn.module"
local nn, optim = require "fp8.nn", require "fp8.optim"
local F = nn.functional
local profiler = require "fp8.profiler"
local Accelerator = require "fp8.accelerator"

local U = dofile("tests/spec/helpers/util.lua")
local tmpdir = U.tmpdir()
local fails_with, read = U.fails_with, U.must_read

-- ---- a small JSON reader (RFC 8259; numbers as Lua floats, null as the sentinel) ----------------
local NULL = setmetatable({}, { __tostring = function() return "null" end })
local function json_decode(s)
  local pos = 1
  local function fail(what) error(("JSON: %s at byte %d"):format(what, pos), 0) end
  local function ws() pos = s:find("[^ \t\r\n]", pos) or #s + 1 end
  local value
  local ESC = { ['"'] = '"', ["\\"] = "\\", ["/"] = "/", b = "\b", f = "\f", n = "\n", r = "\r", t = "\t" }
  local function str()
    pos = pos + 1
    local out = {}
    while true do
      local c = s:sub(pos, pos)
      if c == "" then fail("unterminated string") end
      if c == '"' then pos = pos + 1; return table.concat(out) end
      if c:byte() < 32 then fail("control character in string") end
      if c == "\\" then
        local e = s:sub(pos + 1, pos + 1)
        if e == "u" then
          local hex = s:sub(pos + 2, pos + 5)
          if not hex:match("^%x%x%x%x$") then fail("bad \\u escape") end
          out[#out + 1] = utf8.char(tonumber(hex, 16))
          pos = pos + 6
        elseif ESC[e] then
          out[#out + 1] = ESC[e]
          pos = pos + 2
        else
          fail("bad escape")
        end
      else
        out[#out + 1] = c
        pos = pos + 1
      end
    end
  end
  function value()
    ws()
    local c = s:sub(pos, pos)
    if c == "{" then
      pos = pos + 1
      local t = {}
      ws()
      if s:sub(pos, pos) == "}" then pos = pos + 1; return t end
      while true do
        ws()
        if s:sub(pos, pos) ~= '"' then fail("expected a key") end
        local k = str()
        ws()
        if s:sub(pos, pos) ~= ":" then fail("expected ':'") end
        pos = pos + 1
        t[k] = value()
        ws()
        local d = s:sub(pos, pos)
        pos = pos + 1
        if d == "}" then return t end
        if d ~= "," then fail("expected ',' or '}'") end
      end
    elseif c == "[" then
      pos = pos + 1
      local t = {}
      ws()
      if s:sub(pos, pos) == "]" then pos = pos + 1; return t end
      while true do
        t[#t + 1] = value()
        ws()
        local d = s:sub(pos, pos)
        pos = pos + 1
        if d == "]" then return t end
        if d ~= "," then fail("expected ',' or ']'") end
      end
    elseif c == '"' then
      return str()
    elseif s:find("^true", pos) then pos = pos + 4; return true
    elseif s:find("^false", pos) then pos = pos + 5; return false
    elseif s:find("^null", pos) then pos = pos + 4; return NULL
    else
      local num = s:match("^-?%d+%.?%d*[eE]?[-+]?%d*", pos)
      if not num or num == "" or not s:match("^-?0?[1-9]?%d*", pos) then fail("unexpected character") end
      if num:match("^-?0%d") then fail("leading zero") end
      pos = pos + #num
      return assert(tonumber(num), "bad number " .. num)
    end
  end
  local v = value()
  ws()
  if pos <= #s then fail("trailing data") end
  return v
end

-- ---- checks on a parsed trace -------------------------------------------------------------------
local EPS = 1e-6   -- µs; ts/dur are exact decimals of integer nanoseconds

-- The complete events of each thread must nest: each event lies inside every open enclosing event.
-- Returns, per event, the list of its enclosing events (outermost first).
local function check_nesting(events)
  local by_tid = {}
  for _, e in ipairs(events) do
    assert.equal("X", e.ph)
    assert.equal("number", type(e.ts)); assert.equal("number", type(e.dur))
    assert.truthy(e.dur >= 0)
    by_tid[e.tid] = by_tid[e.tid] or {}
    table.insert(by_tid[e.tid], e)
  end
  local enclosing = {}
  for _, list in pairs(by_tid) do
    table.sort(list, function(a, b)
      if a.ts ~= b.ts then return a.ts < b.ts end
      return a.dur > b.dur
    end)
    local stack = {}
    for _, e in ipairs(list) do
      while #stack > 0 and stack[#stack].ts + stack[#stack].dur < e.ts + EPS and
            not (stack[#stack].ts + stack[#stack].dur >= e.ts + e.dur - EPS and stack[#stack].ts <= e.ts + EPS) do
        table.remove(stack)
      end
      local top = stack[#stack]
      if top then
        assert.truthy(e.ts >= top.ts - EPS and e.ts + e.dur <= top.ts + top.dur + EPS,
          ("%s [%.3f, %.3f] overlaps %s [%.3f, %.3f] without nesting"):format(e.name, e.ts, e.ts + e.dur, top.name,
            top.ts, top.ts + top.dur))
      end
      local enc = {}
      for i, s in ipairs(stack) do enc[i] = s end
      enclosing[e] = enc
      stack[#stack + 1] = e
    end
  end
  return enclosing
end

local function mlp()
  fp8.manual_seed(0)
  return nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 16))
end

local function batch()
  local x = fp8.randn{ 16, 32 }
  local labels = {}
  for j = 1, 16 do labels[j] = (j * 7) % 16 end
  return x, fp8.tensor(labels)
end

local function train(acc, model, opt, steps)
  local x, y = batch()
  for _ = 1, steps do
    local loss = F.cross_entropy(model(x), y)
    opt:zero_grad()
    acc:backward(loss)
    opt:step()
  end
end

local function steps_of(prof)
  local out = {}
  for _, e in ipairs(prof:events()) do
    local n = e.name:match("^ProfilerStep#(%d+)$")
    if n then out[#out + 1] = tonumber(n) end
  end
  return out
end

local function stop_leftovers()
  local cur = profiler.current
  if cur then pcall(cur.stop, cur) end
end

describe("profiled training run", function()
  after_each(stop_leftovers)

  for _, mp in ipairs { "no", "fp8" } do
    it("writes a Chrome trace that parses and nests (mixed_precision=" .. mp .. ")", function()
      local dir = tmpdir .. "/run_" .. mp
      local handlers = { fp8.ProfileKwargs{ schedule_option = { wait = 1, warmup = 1, active = 2 }, record_shapes = true,
        with_flops = true, profile_memory = true, with_modules = true, output_trace_dir = dir } }
      if mp == "fp8" then handlers[2] = fp8.TERecipeKwargs{} end
      local acc = Accelerator{ mixed_precision = mp, kwargs_handlers = handlers }
      local model = mlp()
      local opt = optim.AdamW(model:parameters(), { lr = 1e-3 })
      model, opt = acc:prepare(model, opt)
      local ready = 0
      local prof = acc:profile(function(p)
        assert.equal(acc._profiler.profiler, p)
        train(acc, model, opt, 5)
      end)
      assert.same({ 2, 3 }, steps_of(prof))
      assert.is_nil(Module._call_hook)
      assert.is_false(P.enabled())

      local doc = json_decode(read(dir .. "/profile_0.json"))
      assert.equal("table", type(doc.traceEvents))
      local xs = {}
      for _, e in ipairs(doc.traceEvents) do
        if e.ph == "X" then xs[#xs + 1] = e else assert.equal("M", e.ph) end
      end
      assert.equal(#prof:events(), #xs)
      local enc = check_nesting(xs)

      local names, nodes = {}, 0
      for _, e in ipairs(xs) do
        names[e.name] = (names[e.name] or 0) + 1
        local inside = {}
        for _, s in ipairs(enc[e]) do inside[s.name] = true end
        -- every event of a recorded step lies inside its ProfilerStep range
        if not e.name:match("^ProfilerStep#") then
          assert.truthy(inside["ProfilerStep#" .. math.tointeger(e.args.step)], e.name .. " outside its step")
        end
        if e.name:match("Backward$") then
          nodes = nodes + 1
          assert.truthy(inside.backward, e.name .. " outside the backward range")
        end
        if e.cat == "cpu_op" and e.args.module then
          local found = false
          for _, s in ipairs(enc[e]) do found = found or (s.cat == "module" and s.args.module == e.args.module) end
          assert.truthy(found, e.name .. " outside its module range " .. e.args.module)
        end
      end
      assert.truthy(nodes >= 4)
      assert.equal(2, names.backward)
      local cls = mp == "fp8" and "FP8Linear" or "Linear"
      assert.equal(2, names["0 (" .. cls .. ")"])
      assert.equal(2, names["2 (" .. cls .. ")"])
      assert.equal(2, names["1 (ReLU)"])
      assert.equal(2, names["Sequential"])
      local lin = mp == "fp8" and "fp8_linear" or "linear"
      assert.equal(4, names[lin])
      assert.equal(4, names[mp == "fp8" and "FP8LinearBackward" or "LinearBackward"])
      -- the first layer: its shapes and module; the FLOPs (2·16·32·64) are on its GEMM only (torch: aten::addmm
      -- has them, aten::linear none)
      local checked = 0
      for _, e in ipairs(xs) do
        if e.name == lin and e.args.module == "0 (" .. cls .. ")" then
          assert.equal("[[16, 32], [64, 32], [64]]", e.args.shapes)
          assert.is_nil(e.args.flops)
          assert.equal("number", type(e.args.bytes))
          checked = checked + 1
        end
        local inside = enc[e][#enc[e]]
        if (e.name == "matmul" or e.name == "fp8_gemm") and inside and inside.name == lin and
           inside.args.module == "0 (" .. cls .. ")" then
          assert.equal(2 * 16 * 32 * 64, e.args.flops)
          checked = checked + 1
        end
      end
      assert.equal(4, checked)
    end)
  end

  for _, mp in ipairs { "no", "fp8" } do
    it("with_flops counts each GEMM once: one training step's total (mixed_precision=" .. mp .. ")", function()
      local handlers = { fp8.ProfileKwargs{ with_flops = true } }
      if mp == "fp8" then handlers[2] = fp8.TERecipeKwargs{} end
      local acc = Accelerator{ mixed_precision = mp, kwargs_handlers = handlers }
      local model = mlp()
      local opt = optim.SGD(model:parameters(), { lr = 0.1 })
      model, opt = acc:prepare(model, opt)
      local prof = acc:profile(function() train(acc, model, opt, 1) end)
      local total, counted = 0, {}
      for _, e in ipairs(prof:events()) do
        if e.flops then
          total = total + e.flops
          counted[#counted + 1] = e.name
          assert.truthy(e.name == "matmul" or e.name == "fp8_gemm", e.name .. " is not a GEMM but has FLOPs")
        end
      end
      -- the GEMMs run, 2·M·N·K each: forward [16,32]x[32,64] and [16,64]x[64,16]; backward of the second
      -- layer: dgrad [16,16]x[16,64], wgrad [16,16]x[16,64]; of the first: wgrad [64,16]x[16,32] (the
      -- batch needs no gradient, so no dgrad)
      local gemms = { { 16, 64, 32 }, { 16, 16, 64 }, { 16, 64, 16 }, { 16, 64, 16 }, { 64, 32, 16 } }
      local want = 0
      for _, g in ipairs(gemms) do want = want + 2 * g[1] * g[2] * g[3] end
      assert.equal(#gemms, #counted)
      assert.equal(want, total)
    end)
  end

  it("acc:profile with output_trace_dir waits for every process once its trace is written (Accelerate's)", function()
    -- Accelerate's profile() calls wait_for_everyone() after export_chrome_trace: once profile returns on the main
    -- process every rank's file is there (under launch -n 2 a slower rank's file was still missing)
    local dir = tmpdir .. "/barrier"
    local acc = Accelerator{ kwargs_handlers = { fp8.ProfileKwargs{ output_trace_dir = dir } } }
    local waits, present = 0, nil
    acc.wait_for_everyone = function() waits = waits + 1; present = io.open(dir .. "/profile_0.json") ~= nil end
    acc:profile(function() local _ = fp8.ones{ 2 } + 1 end)
    assert.equal(1, waits)
    assert.is_true(present)
    -- not after an error (a rank that failed never arrives), nor without a trace directory
    fails_with("boom", acc.profile, acc, function() error("boom") end)
    assert.equal(1, waits)
    local acc2 = Accelerator{}
    acc2.wait_for_everyone = function() waits = waits + 1 end
    acc2:profile(function() end)
    assert.equal(1, waits)
  end)

  it("acc:profile without a ProfileKwargs records every step until the end", function()
    local acc = Accelerator{}
    local model = mlp()
    local opt = optim.SGD(model:parameters(), { lr = 0.1 })
    model, opt = acc:prepare(model, opt)
    local prof = acc:profile(function() train(acc, model, opt, 3) end)
    assert.same({ 0, 1, 2 }, steps_of(prof))   -- the empty step the last opt:step() opened is dropped
    local seen = {}
    for _, e in ipairs(prof:events()) do seen[e.name] = true; assert.is_nil(e.shapes); assert.is_nil(e.flops); assert.is_nil(e.bytes) end
    assert.truthy(seen.sgd_step and seen.backward and seen.linear and seen["Optimizer.step#SGD.step"])
    assert.is_nil(seen["0 (Linear)"])          -- with_modules is off
  end)

  it("acc:profile: a prof:step() after an optimizer's step is refused; called first, it steps alone", function()
    local sched = { fp8.ProfileKwargs { schedule_option = { wait = 1, warmup = 1, active = 2, ["repeat"] = 1 } } }
    local acc = Accelerator { kwargs_handlers = sched }
    local model = mlp()
    local opt = optim.SGD(model:parameters(), { lr = 0.1 })
    model, opt = acc:prepare(model, opt)
    local x, y = batch()
    -- Accelerate's guide: opt.step(), then prof.step(): each iteration would count twice
    fails_with("under acc:profile each opt:step() of a prepared optimizer is one profiler step already", acc.profile,
      acc, function(p)
        for _ = 1, 3 do acc:backward(F.cross_entropy(model(x), y)); opt:step(); opt:zero_grad(); p:step() end
      end)
    assert.is_false(P.enabled())
    -- prof:step() first: the user's calls step it, the optimizer's do not (two iterations in the active window)
    local acc2 = Accelerator { kwargs_handlers = sched }
    local m2 = mlp()
    local o2 = optim.SGD(m2:parameters(), { lr = 0.1 })
    m2, o2 = acc2:prepare(m2, o2)
    local prof = acc2:profile(function(p)
      for _ = 1, 5 do p:step(); acc2:backward(F.cross_entropy(m2(x), y)); o2:step(); o2:zero_grad() end
    end)
    assert.same({ 2, 3 }, steps_of(prof))
    -- two prepared optimizers stepped after one backward: one profiler step, as one training step
    local acc3 = Accelerator { kwargs_handlers = sched }
    local m3 = mlp()
    local ps = m3:parameters()
    local oa, ob = optim.SGD({ ps[1], ps[2] }, { lr = 0.1 }), optim.SGD({ ps[3], ps[4] }, { lr = 0.1 })
    m3, oa, ob = acc3:prepare(m3, oa, ob)
    local prof3 = acc3:profile(function()
      for _ = 1, 5 do acc3:backward(F.cross_entropy(m3(x), y)); oa:step(); ob:step(); oa:zero_grad(); ob:zero_grad() end
    end)
    assert.same({ 2, 3 }, steps_of(prof3))
    assert.are.equal(5, acc3.step)
  end)

  it("a profiler dropped while it runs is collected, stops recording and lets a new one start", function()
    do local p = profiler.profile {}; p:start() end   -- never stopped, nothing refers to it
    collectgarbage(); collectgarbage()
    assert.is_nil(profiler.current)
    assert.is_false(P.enabled())
    local p2 = profiler.profile {}:start()
    local ok, err = pcall(function() profiler.profile {}:start() end)
    assert.is_false(ok)
    assert.truthy(tostring(err):find("another profiler is running (stop it first: fp8.profiler.current:stop())", 1,
      true))
    p2:stop()
  end)

  -- the collector clears a weak reference at the start of a cycle and runs finalizers at its end: with a large
  -- heap, a program runs between the two
  it("a dropped profiler's late __gc leaves the profiler started after it alone", function()
    local heap = {}
    for i = 1, 300000 do heap[i] = { i } end
    local x = fp8.randn{ 4, 4 }
    for _, opts in ipairs { { schedule_option = { wait = 5, warmup = 0, active = 1 } }, {} } do
      do local p = profiler.profile(opts); p:start() end   -- waiting (recorder off), then recording
      collectgarbage("stop")
      while profiler.current ~= nil do collectgarbage("step", 0) end
      local q = profiler.profile {}
      local ok, err = pcall(q.start, q)
      collectgarbage("restart")
      assert(ok, err)
      local _ = x + x
      collectgarbage(); collectgarbage()
      assert.is_true(P.enabled())
      q:stop()
      local names = {}
      for _, e in ipairs(q:events()) do names[#names + 1] = e.name end
      assert.same({ "ProfilerStep#0", "add" }, names)
    end
    heap = nil
  end)

  it("an error inside the profiled function stops the profiler and propagates", function()
    local acc = Accelerator{}
    fails_with("boom", acc.profile, acc, function() error("boom") end)
    assert.is_false(P.enabled())
    assert.is_nil(profiler.current)
    assert.is_nil(acc._profiler)
  end)
end)

describe("schedule", function()
  after_each(stop_leftovers)

  -- steps kept at the end (the last window's), on_trace_ready calls, and the steps each call saw, for a
  -- schedule over n steps
  local function run(sched, n)
    local calls, per_call = 0, {}
    local prof = profiler.profile{ schedule_option = sched, on_trace_ready = function(p)
      calls = calls + 1
      per_call[calls] = steps_of(p)
    end }
    local x = fp8.randn{ 4, 4 }
    prof:start()
    for _ = 1, n do
      local _ = x:matmul(x)
      prof:step()
    end
    prof:stop()
    return steps_of(prof), calls, per_call
  end

  it("wait, warmup, active, repeat, skip_first", function()
    local steps, calls, per = run({ wait = 1, warmup = 1, active = 2, ["repeat"] = 2, skip_first = 1 }, 12)
    assert.equal(2, calls)
    assert.same({ { 3, 4 }, { 7, 8 } }, per)   -- each call sees its own window (torch: the current cycle)
    assert.same({ 7, 8 }, steps)               -- and the profiler keeps the last one
  end)

  it("repeat=0 cycles until stop; a window cut short by stop is saved", function()
    local steps, calls, per = run({ wait = 0, warmup = 0, active = 3 }, 7)
    assert.same({ { 0, 1, 2 }, { 3, 4, 5 }, { 6 } }, per)
    assert.same({ 6 }, steps)
    assert.equal(3, calls)
  end)

  it("a window stop() finds empty is none once one was saved (torch calls back once more)", function()
    local steps, calls, per = run({ wait = 0, warmup = 0, active = 3 }, 6)
    assert.same({ { 0, 1, 2 }, { 3, 4, 5 } }, per)   -- torch: a third call, with only an empty ProfilerStep#6
    assert.equal(2, calls)
    assert.same({ 3, 4, 5 }, steps)
  end)

  it("warmup steps are not kept, wait steps are not recorded", function()
    local steps, calls = run({ wait = 2, warmup = 2, active = 1, ["repeat"] = 1 }, 8)
    assert.same({ 4 }, steps)
    assert.equal(1, calls)
  end)

  it("a cycle longer than the largest integer is refused (it wrapped around and recorded nothing)", function()
    fails_with("wait + warmup + active must be at most", profiler.profile,
      { schedule_option = { wait = 1, warmup = 0, active = math.maxinteger } })
    local steps, calls = run({ wait = 1, warmup = 0, active = math.maxinteger - 1 }, 4)
    assert.same({ 1, 2, 3 }, steps)   -- torch.profiler.schedule: steps 1, 2, 3 (and the open 4) active
    assert.equal(1, calls)
  end)

  it("skip_first_wait: the first cycle after skip_first has no wait (torch.profiler.schedule's, as it steps)", function()
    -- torch 2.15, 10 steps: calls with ProfilerStep#4 then #8 (skip_first=3), #1, #5, #9 (skip_first=0)
    local _, calls, per = run({ wait = 2, warmup = 1, active = 1, skip_first = 3, skip_first_wait = 1 }, 10)
    assert.same({ { 4 }, { 8 } }, per)
    assert.equal(2, calls)
    _, calls, per = run({ wait = 2, warmup = 1, active = 1, skip_first = 3, skip_first_wait = 1, ["repeat"] = 1 }, 10)
    assert.same({ { 4 } }, per)
    _, calls, per = run({ wait = 2, warmup = 1, active = 1, skip_first_wait = 1 }, 10)
    assert.same({ { 1 }, { 5 }, { 9 } }, per)
    _, calls, per = run({ wait = 2, warmup = 1, active = 1, skip_first = 3, skip_first_wait = 0 }, 10)
    assert.same({ { 6 } }, per)   -- 0: the first cycle waits (torch: ProfilerStep#6 only)
    fails_with("skip_first_wait", profiler.profile, { schedule_option = { wait = 1, warmup = 0, active = 1,
      skip_first_wait = -1 } })
  end)

  it("skip_first larger than the run records nothing and never calls back", function()
    local steps, calls = run({ wait = 0, warmup = 0, active = 1, skip_first = 10 }, 5)
    assert.same({}, steps)
    assert.equal(0, calls)
  end)

  it("an error in on_trace_ready is raised by step() and the schedule goes on", function()
    local calls = 0
    local prof = profiler.profile{ schedule_option = { wait = 0, warmup = 0, active = 1 },
      on_trace_ready = function() calls = calls + 1; if calls == 1 then error("callback failed") end end }
    prof:start()
    fails_with({ "on_trace_ready", "callback failed" }, prof.step, prof)
    prof:step()
    prof:stop()
    assert.same({ 1 }, steps_of(prof))
    assert.equal(2, calls)
  end)

  it("prof:stop() inside on_trace_ready is honoured: the recorder stays off, the next profiler can start", function()
    local calls = 0
    local prof = profiler.profile{ schedule_option = { wait = 0, warmup = 0, active = 1 },
      on_trace_ready = function(p) calls = calls + 1; p:stop() end }
    prof:start()
    local x = fp8.randn{ 2, 2 }
    for _ = 1, 3 do local _ = x + x; prof:step() end   -- the loop's later steps do nothing
    assert.equal(1, calls)
    assert.is_false(P.enabled())
    assert.equal(0, P.count())
    assert.is_nil(profiler.current)
    assert.same({ 0 }, steps_of(prof))
    fails_with("stop() without start()", prof.stop, prof)
    local q = profiler.profile{}
    q:run(function() local _ = x * x end)
    assert.is_false(P.enabled())
    -- through acc:profile: each opt:step() steps the profiler, which the callback stopped after the first window
    local acc = Accelerator{ kwargs_handlers = { fp8.ProfileKwargs{ schedule_option = { wait = 0, warmup = 0, active = 2 },
      on_trace_ready = function(p) calls = calls + 1; p:stop() end } } }
    local model = mlp()
    local opt = optim.SGD(model:parameters(), { lr = 0.1 })
    model, opt = acc:prepare(model, opt)
    local p = acc:profile(function() train(acc, model, opt, 5) end)
    assert.equal(2, calls)
    assert.same({ 0, 1 }, steps_of(p))
    assert.is_false(P.enabled())
    -- a stop() in the callback that stop() itself runs is a no-op
    local r = profiler.profile{ on_trace_ready = function(pp) calls = calls + 1; pp:stop() end }
    r:run(function() local _ = x + x end)
    assert.equal(3, calls)
    assert.is_false(P.enabled())
  end)

  it("each recorded step holds its own ops", function()
    local prof = profiler.profile{ schedule_option = { wait = 0, warmup = 0, active = 2 } }
    local x = fp8.randn{ 3, 3 }
    prof:start()
    for i = 1, 2 do
      for _ = 1, i do local _ = x + x end
      prof:step()
    end
    prof:stop()
    local adds = {}
    for _, e in ipairs(prof:events()) do if e.name == "add" then adds[e.step] = (adds[e.step] or 0) + 1 end end
    assert.same({ [0] = 1, [1] = 2 }, adds)
  end)
end)

describe("key_averages", function()
  after_each(stop_leftovers)

  local function profiled()
    local acc = Accelerator{}
    local model = mlp()
    local opt = optim.AdamW(model:parameters(), { lr = 1e-3 })
    model, opt = acc:prepare(model, opt)
    return acc:profile(function() train(acc, model, opt, 3) end,
      fp8.ProfileKwargs{ with_flops = true, profile_memory = true, with_modules = true })
  end

  it("totals, calls and self times add up to the events", function()
    local prof = profiled()
    local ka = prof:key_averages()
    local total, count, top = {}, {}, 0
    for _, e in ipairs(prof:events()) do
      local k = e.name:match("^ProfilerStep#") and "ProfilerStep*" or e.name
      total[k] = (total[k] or 0) + e.dur_ns
      count[k] = (count[k] or 0) + 1
      if not e.parent then top = top + e.dur_ns end
    end
    local self_sum, n = 0, 0
    for i, r in ipairs(ka) do
      n = n + 1
      assert.equal(total[r.key], r.cpu_time_total_ns)
      assert.equal(count[r.key], r.count)
      assert.truthy(r.self_cpu_time_total_ns <= r.cpu_time_total_ns and r.self_cpu_time_total_ns >= 0)
      assert.near(r.cpu_time_total / r.count, r.cpu_time, 1e-9)
      if i > 1 then assert.truthy(ka[i - 1].cpu_time_total_ns >= r.cpu_time_total_ns) end
      self_sum = self_sum + r.self_cpu_time_total_ns
    end
    local keys = 0
    for _ in pairs(total) do keys = keys + 1 end
    assert.equal(keys, n)
    assert.equal(top, self_sum)     -- self times partition the top-level time
    assert.equal("ProfilerStep*", ka[1].key)
    local by = {}
    for _, r in ipairs(ka) do by[r.key] = r end
    assert.equal(0, by.linear.flops)   -- its GEMMs carry them
    -- 3 steps of: forward 2·16·32·64 + 2·16·64·16; backward: the second layer's dgrad and wgrad (2·16·64·16
    -- each), the first layer's wgrad (2·64·32·16; its input needs no gradient)
    assert.equal(3 * (2 * (2 * 16 * 32 * 64) + 3 * (2 * 16 * 64 * 16)), by.matmul.flops)
  end)

  it("prints a table, sorts and limits rows like PyTorch", function()
    local ka = profiled():key_averages()
    local s = tostring(ka)
    assert.truthy(s:find("Name", 1, true) and s:find("# Calls", 1, true) and s:find("Self (ms)", 1, true))
    assert.truthy(s:find("FLOP/s", 1, true) and s:find("CPU Mem", 1, true))
    assert.truthy(s:find("Self CPU time total", 1, true))
    local t = ka:table{ sort_by = "self_cpu_time_total", row_limit = 3 }
    local rows = 0
    for l in t:gmatch("[^\n]+") do if not l:match("^%-") and not l:match("^Name") and not l:match("^Self CPU") then rows = rows + 1 end end
    assert.equal(3, rows)
    fails_with("sort_by must be one of", ka.table, ka, { sort_by = "speed" })
    fails_with("unknown option 'rows'", ka.table, ka, { rows = 3 })
    fails_with("row_limit must be an integer", ka.table, ka, { row_limit = 2.5 })
    -- torch's -1 (any row_limit <= 0): every row; it was refused
    local all = ka:table{ row_limit = -1 }
    local n = 0
    for l in all:gmatch("[^\n]+") do
      if not l:match("^%-") and not l:match("^Name") and not l:match("^Self CPU") then n = n + 1 end
    end
    assert.is_true(#ka > 3)
    assert.equal(#ka, n)
  end)

  it("refuses what it would not record: stacks, and a profile without host ops", function()
    fails_with("with_stack: true is not supported: fp8lab records no stacks", fp8.ProfileKwargs, { with_stack = true })
    fails_with('activities: must list "cpu"', fp8.ProfileKwargs, { activities = { "cuda" } })
    fails_with('activities: must list "cpu"', fp8.profiler.profile, { activities = { "cuda" } })
    assert.is_false(fp8.ProfileKwargs { with_stack = false, activities = { "cpu", "cuda" } }:to_table().with_stack)
  end)

  it("group_by_input_shape splits rows by shapes", function()
    local prof = profiler.profile{ record_shapes = true }
    prof:run(function()
      local a, b = fp8.randn{ 2, 3 }, fp8.randn{ 4, 5 }
      local _ = a + a; _ = b + b; _ = b + b
    end)
    local by = {}
    for _, r in ipairs(prof:key_averages{ group_by_input_shape = true }) do
      if r.key == "add" then by[r.input_shapes] = r.count end
    end
    -- (torch's aten::add lists its alpha as a third input, [], and so does add since stop 100)
    assert.same({ ["[[2, 3], [2, 3], []]"] = 1, ["[[4, 5], [4, 5], []]"] = 2 }, by)
  end)
end)

describe("device time", function()
  after_each(stop_leftovers)

  -- Events as a GPU session leaves them (device spans from the CUDA clock), without a GPU: the table,
  -- the sort keys and the trace's device track are the Lua side's work.
  local function with_device_events()
    local prof = profiler.profile{ with_flops = true }
    prof._events = {
      { name = "ProfilerStep#0", kind = "range", tid = 1, depth = 0, ts_ns = 0, dur_ns = 9000, ts = 0, dur = 9,
        device_ts_ns = 1000, device_dur_ns = 20000, device_ts = 1, device_dur = 20 },
      { name = "linear", kind = "op", tid = 1, depth = 1, parent = 1, ts_ns = 1000, dur_ns = 3000, ts = 1, dur = 3,
        flops = 2e6, device_ts_ns = 2000, device_dur_ns = 12000, device_ts = 2, device_dur = 12 },
      { name = "gelu", kind = "op", tid = 1, depth = 1, parent = 1, ts_ns = 5000, dur_ns = 2000, ts = 5, dur = 2,
        device_ts_ns = 14000, device_dur_ns = 4000, device_ts = 14, device_dur = 4 },
    }
    prof.windows = 1
    return prof
  end

  it("key_averages adds device totals and self times; the table shows them", function()
    local ka = with_device_events():key_averages()
    local by = {}
    for _, r in ipairs(ka) do by[r.key] = r end
    assert.equal(12000, by.linear.device_time_total_ns)
    assert.equal(12000, by.linear.self_device_time_total_ns)
    assert.equal(20000, by["ProfilerStep*"].device_time_total_ns)
    assert.equal(4000, by["ProfilerStep*"].self_device_time_total_ns)   -- 20 µs minus its ops' 16
    assert.near(4, by.gelu.device_time, 1e-9)
    local s = tostring(ka)
    assert.truthy(s:find("Device Total (ms)", 1, true) and s:find("Device Self %", 1, true))
    assert.truthy(s:find("Self device time total: 0.020 ms", 1, true))
    assert.truthy(s:find("166.67 G", 1, true))   -- FLOP/s over the device time: 2e6 / 12 µs
    local t = ka:table{ sort_by = "cuda_time_total", row_limit = 2 }   -- PyTorch's older name
    local first = t:match("\n%-+[^\n]*\n([^\n]+)")
    assert.truthy(first:find("^ProfilerStep%*"), first)
    local t2 = ka:table{ sort_by = "self_device_time_total" }
    assert.truthy(t2:match("\n%-+[^\n]*\n([^\n]+)"):find("^linear"))
  end)

  it("the Chrome trace carries a device track with the same events", function()
    local path = tmpdir .. "/dev.json"
    with_device_events():export_chrome_trace(path)
    local doc = json_decode(read(path))
    local dev, named = 0, false
    for _, e in ipairs(doc.traceEvents) do
      if e.ph == "M" and e.args.name == "cuda stream (device time)" then named = true end
      if e.cat == "device" then
        dev = dev + 1
        if e.name == "linear" then assert.near(2, e.ts, EPS); assert.near(12, e.dur, EPS) end
      end
    end
    assert.is_true(named)
    assert.equal(3, dev)
  end)

  it("without a GPU, activities \"cuda\" records host time only", function()
    local prof = profiler.profile{ activities = { "cpu", "cuda" } }
    if prof.device then return end   -- a GPU is in use: tests/gpu/cuda_spec.lua checks the real thing
    prof:run(function() local _ = fp8.randn{ 4, 4 } + 1 end)
    for _, e in ipairs(prof:events()) do assert.is_nil(e.device_dur_ns) end
    assert.is_nil(tostring(prof:key_averages()):find("Device", 1, true))
  end)
end)

describe("profiler API", function()
  after_each(stop_leftovers)

  it("is off by default: no events while no profiler runs", function()
    P.clear()
    assert.is_false(P.enabled())
    local acc = Accelerator{}
    local model = mlp()
    local opt = optim.AdamW(model:parameters(), { lr = 1e-3 })
    model, opt = acc:prepare(model, opt)
    train(acc, model, opt, 2)
    assert.equal(0, P.count())
    assert.equal(0, profiler.push("x"))
  end)

  it("rejects bad options with clear messages", function()
    local prof = fp8.profiler
    fails_with({ "unknown key 'recrod_shapes'", "did you mean 'record_shapes'" }, prof.profile, { recrod_shapes = true })
    fails_with("record_shapes: expected a boolean, got number 1", prof.profile, { record_shapes = 1 })
    fails_with("schedule_option: active is missing", prof.profile, { schedule_option = { wait = 1, warmup = 0 } })
    fails_with("active: expected an integer >= 1", prof.profile, { schedule_option = { wait = 1, warmup = 0, active = 0 } })
    fails_with({ "unknown key 'wiat'", "did you mean 'wait'" }, prof.profile, { schedule_option = { wiat = 1, warmup = 0, active = 1 } })
    fails_with("on_trace_ready: expected a function", prof.profile, { on_trace_ready = "print" })
    fails_with("output_trace_dir: expected a directory name (a non-empty string without NUL bytes), got number 3", prof.profile,
      { output_trace_dir = 3 })
    -- "" would write the trace at the root of the file system (/profile_0.json)
    fails_with('fp8.profiler.profile: output_trace_dir: expected a directory name (a non-empty string without NUL bytes), got ""',
      prof.profile, { output_trace_dir = "" })
    fails_with('ProfileKwargs: output_trace_dir: expected a directory name (a non-empty string without NUL bytes), got ""',
      fp8.ProfileKwargs, { output_trace_dir = "" })
    fails_with("expected an options table", prof.profile, 42)
    fails_with("got a TERecipeKwargs", prof.profile, fp8.TERecipeKwargs{})
    local p = prof.profile{}
    fails_with("step() before start()", p.step, p)
    fails_with("stop() without start()", p.stop, p)
    p:start()
    p:stop()
    fails_with("step() after stop() (start() again first)", p.step, p)
    p:start()
    fails_with("start() called twice", p.start, p)
    local q = prof.profile{}
    fails_with("another profiler is running", q.start, q)
    -- refusals blame the user's call, not a line inside the library (start through run and acc:profile too)
    local here = "^tests/spec/profiler_spec%.lua:%d+: "
    local acc0 = Accelerator{}
    for _, call in ipairs { function() q:start() end, function() q:run(function() end) end,
                            function() acc0:profile(function() end) end,
                            function() prof.record_function(3, function() end) end } do
      local ok, err = pcall(call)
      assert.is_false(ok)
      assert.truthy(tostring(err):find(here), err)
    end
    assert.is_nil(acc0._profiler)
    p:stop()
    fails_with("expected a function", p.run, p, 3)
    fails_with("expected a file name", p.export_chrome_trace, p, "")
    fails_with("cannot write", p.export_chrome_trace, p, tmpdir .. "/no/such/dir/t.json")
    fails_with("unknown option 'group'", p.key_averages, p, { group = true })
    local acc = Accelerator{}
    fails_with("profile: expected a function", acc.profile, acc, 3)
    fails_with("ProfileKwargs: unknown key", fp8.ProfileKwargs, { with_flop = true })
  end)

  it("refuses wrong types where they were taken: rank, group_by_input_shape, pop's token", function()
    -- a rank that is not a count failed only at the end of the window (a format error from stop()), or named
    -- the trace profile_-1.json
    fails_with('rank must be an integer >= 0, got "x" (a string)', profiler.profile, { output_trace_dir = tmpdir },
      { rank = "x" })
    fails_with("rank must be an integer >= 0, got -1", profiler.profile, {}, { rank = -1 })
    local p = profiler.profile{ record_shapes = true }
    p:run(function() local _ = fp8.randn{ 2, 2 } + 1 end)
    fails_with('group_by_input_shape must be a boolean, got "yes" (a string)', p.key_averages, p,
      { group_by_input_shape = "yes" })
    fails_with("profiler.pop: expected a token from profiler.push, got nil", profiler.pop)
    fails_with('profiler.pop: expected a token from profiler.push, got "t" (a string)', profiler.pop, "t")
  end)

  it("acc:state() shows a ProfileKwargs whose summary is longer than 99 characters", function()
    local acc = Accelerator{ kwargs_handlers = { fp8.ProfileKwargs{
      schedule_option = { wait = 1, warmup = 1, active = 2 }, with_flops = true, output_trace_dir = "traces" } } }
    local text = tostring(acc:state())
    local line = text:match("\nprofile +([^\n]*)")
    assert.truthy(line and line:find('output_trace_dir="traces"  (handler)', 1, true), text)
  end)

  it("accepts a ProfileKwargs handler; record_function adds nested ranges", function()
    local prof = profiler.profile(fp8.ProfileKwargs{ record_shapes = true })
    prof:run(function()
      profiler.record_function("outer", function()
        profiler.record_function("inner", function() local _ = fp8.randn{ 2, 2 }:exp() end)
      end)
    end)
    local ev = prof:events()
    local by = {}
    for i, e in ipairs(ev) do by[e.name] = i end
    assert.equal(by.outer, ev[by.inner].parent)
    assert.equal(by.inner, ev[by.exp].parent)
    assert.equal("[[2, 2]]", ev[by.exp].shapes)
    assert.equal(ev[by.outer].depth + 2, ev[by.exp].depth)
  end)

  it("export_chrome_trace writes atomically and escapes names", function()
    local prof = profiler.profile{}
    prof:run(function() profiler.record_function('a "quoted"\\name\n', function() end) end)
    local path = tmpdir .. "/x.json"
    assert.equal(path, prof:export_chrome_trace(path))
    local doc = json_decode(read(path))
    local found = false
    for _, e in ipairs(doc.traceEvents) do found = found or e.name == 'a "quoted"\\name\n' end
    assert.is_true(found)
    local p = io.popen("ls " .. tmpdir)
    local listing = p:read("a")
    p:close()
    assert.is_nil(listing:find("x.json.tmp", 1, true))
  end)

  it("the Chrome trace is valid UTF-8 JSON whatever bytes a name holds", function()
    -- a lone byte, a truncated sequence, a UTF-16 surrogate, an overlong "/", and valid text around them
    local names = { "bad \xff\xfe name", "cut \xe2\x82", "sur \xed\xa0\x80", "long \xc0\xaf", "ok \xe2\x82\xac \x7f" }
    local prof = profiler.profile{}
    prof:run(function() for _, n in ipairs(names) do profiler.record_function(n, function() end) end end)
    local path = tmpdir .. "/bytes.json"
    prof:export_chrome_trace(path)
    local text = read(path)
    assert.truthy(utf8.len(text), "the trace is not valid UTF-8")
    local got = {}
    for _, e in ipairs(json_decode(text).traceEvents) do got[e.name] = true end
    -- each stray byte reads as the code point of the same value (\u00XX)
    for _, want in ipairs { "bad " .. utf8.char(0xff, 0xfe) .. " name", "cut " .. utf8.char(0xe2, 0x82),
                            "sur " .. utf8.char(0xed, 0xa0, 0x80), "long " .. utf8.char(0xc0, 0xaf), "ok \u{20ac} \x7f" } do
      assert.truthy(got[want], want)
    end
    assert.equal("table", type(require("fp8._checkpoint").json_decode(text, "trace")))   -- the project's decoder too
  end)

  it("output_trace_dir is created; each window's trace is a file of its own; prof:run returns the profiler", function()
    local dir = tmpdir .. "/nested/dir"
    local prof = profiler.profile{ output_trace_dir = dir .. "/", schedule_option = { wait = 0, warmup = 0, active = 1 } }
    local x = fp8.randn{ 2, 2 }
    local paths = {}
    prof.options.on_trace_ready = function(p) paths[#paths + 1] = p:trace_path() end
    assert.equal(prof, prof:run(function(p)
      for _ = 1, 3 do local _ = x * x; p:step() end
    end))
    local want = { dir .. "/profile_0.json", dir .. "/profile_0_window2.json", dir .. "/profile_0_window3.json" }
    assert.same(want, paths)
    for w, path in ipairs(want) do
      local doc = json_decode(read(path))
      local steps = {}
      for _, e in ipairs(doc.traceEvents) do
        if e.ph == "X" and e.name:match("^ProfilerStep#") then steps[#steps + 1] = e.name end
      end
      assert.same({ "ProfilerStep#" .. (w - 1) }, steps)
      assert.equal(w, doc.otherData.window)
      assert.equal(path, prof:trace_path(w))
    end
    assert.equal(want[3], prof:trace_path())
    fails_with("trace_path: expected a window number >= 1, got 0", prof.trace_path, prof, 0)
    assert.is_nil(profiler.profile{}:trace_path())
  end)

  it("a repeating schedule keeps one window: memory and the time per window do not grow with the run", function()
    local dir = tmpdir .. "/many"
    local prof = profiler.profile{ schedule_option = { wait = 1, warmup = 1, active = 2 }, output_trace_dir = dir }
    local x = fp8.randn{ 2, 2 }
    local sizes = {}
    prof.options.on_trace_ready = function(p) sizes[#sizes + 1] = #p:events() end
    prof:start()
    for _ = 1, 400 do local _ = x + x; prof:step() end
    prof:stop()
    assert.equal(100, #sizes)
    for _, n in ipairs(sizes) do assert.equal(sizes[1], n) end   -- each window: 2 steps and their ops, no more
    assert.equal(sizes[1], #prof:events())
    assert.same({ 398, 399 }, steps_of(prof))
    assert.equal(0, P.count())                                    -- the recorder is emptied at each window's end
    local first = json_decode(read(dir .. "/profile_0.json"))     -- not rewritten by the later windows
    assert.equal(1, first.otherData.window)
    assert.equal(100, json_decode(read(dir .. "/profile_0_window100.json")).otherData.window)
  end)

  it("nesting deeper than the recorder's stack (256 levels): true depths, no wrong parent, self time >= 0", function()
    local prof = profiler.profile{}
    prof:run(function()
      local toks = {}
      for i = 1, 300 do toks[i] = profiler.push("level" .. i) end
      for i = 300, 1, -1 do profiler.pop(toks[i]) end
      local _ = fp8.randn{ 2, 2 } + 1   -- the stack is back at the step's level
      -- ending an outer range closes every range opened inside it, past the stack's depth too
      local first = profiler.push("skipped1")
      for i = 2, 300 do profiler.push("skipped" .. i) end
      profiler.pop(first)
    end)
    local ev = prof:events()
    local at = {}
    for i, e in ipairs(ev) do at[e.name] = i end
    local d0 = ev[at.level1].depth
    for i = 1, 300 do
      local e = ev[at["level" .. i]]
      assert.equal(d0 + i - 1, e.depth)
      assert.truthy(e.dur_ns >= 0)
      if e.parent and i > 1 then assert.equal("level" .. (i - 1), ev[e.parent].name) end
    end
    assert.equal(at.level255, ev[at.level256].parent)
    assert.equal(d0, ev[at.add].depth)
    assert.equal(ev[at.level1].parent, ev[at.add].parent)
    for i = 1, 300 do assert.truthy(at["skipped" .. i], "skipped" .. i .. " was left open") end
    for _, r in ipairs(prof:key_averages()) do
      assert.truthy(r.self_cpu_time_total_ns >= 0, r.key .. " self time " .. r.self_cpu_time_total_ns)
    end
  end)

  it("events past the recorder's cap: a notice per window that lost some, the count in the trace and the table", function()
    local dir = tmpdir .. "/capped"
    local prof = profiler.profile{ schedule_option = { wait = 0, warmup = 0, active = 1 }, output_trace_dir = dir }
    local x = fp8.randn{ 2, 2 }
    local said, stderr = {}, io.stderr
    P.set_max_events(20)
    io.stderr = { write = function(_, ...) said[#said + 1] = table.concat({ ... }) end }
    local ok, err = pcall(function()
      prof:start()
      for _ = 1, 30 do local _ = x + x end   -- window 1: ProfilerStep#0 and 19 adds kept, 11 adds dropped
      prof:step()
      for _ = 1, 5 do local _ = x + x end    -- window 2: all kept
      prof:step()
      prof:stop()
    end)
    io.stderr = stderr
    P.set_max_events(0)
    assert(ok, err)
    assert.equal(4194304, P.max_events())   -- back to the default
    assert.same({ "fp8lab: notice: profiler: window 1 dropped 11 events: the recorder holds at most 20 events per "
      .. "window (shorten the active window or profile fewer ops per step)\n" }, said)
    local doc = json_decode(read(dir .. "/profile_0.json"))
    assert.equal(11, doc.otherData.dropped_events)
    assert.equal(20, doc.otherData.max_events)
    assert.equal(0, json_decode(read(dir .. "/profile_0_window2.json")).otherData.dropped_events)
    assert.is_nil(tostring(prof:key_averages()):find("dropped", 1, true))   -- the last window lost none
    prof._events, prof.dropped = {}, 11
    assert.truthy(tostring(prof:key_averages()):find("Events dropped: 11 (the recorder holds at most 20 events per window)",
      1, true))
  end)

  it("with_modules nests ops under module paths and removes its hook", function()
    local model = nn.Sequential(nn.Linear(4, 4), nn.Sequential(nn.ReLU(), nn.Linear(4, 2)))
    local prof = profiler.profile{ with_modules = true }
    prof:run(function() model(fp8.randn{ 3, 4 }) end)
    assert.is_nil(Module._call_hook)
    local mods = {}
    for _, e in ipairs(prof:events()) do
      if e.kind == "op" then mods[e.name] = mods[e.name] or {}; table.insert(mods[e.name], e.module) end
    end
    assert.same({ "0 (Linear)", "1.1 (Linear)" }, mods.linear)
    assert.same({ "1.0 (ReLU)" }, mods.relu)
    -- errors inside a module keep their context and close the ranges
    local bad = nn.Sequential(nn.Linear(4, 4))
    local p2 = profiler.profile{ with_modules = true }
    local err = fails_with("in layer 0 (Linear) forward", p2.run, p2, function() bad(fp8.randn{ 3, 5 }) end)
    assert.truthy(err:find("got [3, 5]", 1, true))
    for _, e in ipairs(p2:events()) do assert.truthy(e.dur_ns >= 0) end
  end)
end)
