-- Found on 2026-12-07 (stop 99): the profiler read against torch.profiler (PyTorch 2.15, on the CPU) and Accelerate's
-- ProfileKwargs: which steps each schedule records and when on_trace_ready fires with what (wait, warmup, active,
-- repeat, skip_first, skip_first_wait; repeat=0, wait=0, active=1, steps past the end, stop() inside a window, no
-- schedule; a profiler started again after stop(), whose steps and schedule go on as torch's), and with_flops' count
-- for a convolution (aten::conv2d's, whichever route fp8lab's conv takes). The
-- expected values come from tests/data/profparity_torch.lua, written by
--   /opt/torch2/bin/python3 scripts/gen_profparity.py
-- docs/robustness.md, "The profiler against torch.profiler (stop 99)".
local ref = dofile("tests/data/profparity_torch.lua")
local F = fp8.nn.functional

local function list(t) return "{" .. table.concat(t, ", ") .. "}" end
local function show(calls)
  local out = {}
  for i, c in ipairs(calls) do out[i] = ("{at=%d steps=%s work=%s}"):format(c[1], list(c[2]), list(c[3])) end
  return table.concat(out, " ")
end

-- fp8.profiler's on_trace_ready calls for runs of n steps (start(), n steps, each one's work in a "work<i>" range then
-- prof:step(), stop(); the same profiler started again for the next run): {step_num, steps, work} as the generator
-- takes torch's (the numbers of the ProfilerStep# ranges and of the work<i> ranges of the window's Chrome trace)
local function calls_of(schedule, runs)
  local calls, dir = {}, os.tmpname()
  os.remove(dir)
  local prof = fp8.profiler.profile { schedule_option = schedule, on_trace_ready = function(p)
    local path = dir .. "_" .. #calls .. ".json"
    p:export_chrome_trace(path)
    local f = assert(io.open(path))
    local text = f:read("a")
    f:close()
    os.remove(path)
    local steps, work = {}, {}
    for name in text:gmatch('"ph": "X", "cat": "[%w_]+", "name": "([^"]*)"') do
      local s, w = name:match("^ProfilerStep#(%d+)$"), name:match("^work(%d+)$")
      if s then steps[#steps + 1] = tonumber(s) end
      if w then work[#work + 1] = tonumber(w) end
    end
    table.sort(steps)
    table.sort(work)
    calls[#calls + 1] = { p.step_num, steps, work }
  end }
  local i = 0
  for _, n in ipairs(runs) do
    prof:start()
    for _ = 1, n do
      fp8.profiler.record_function("work" .. i, function() return fp8.ones { 2 } + 1 end)
      prof:step()
      i = i + 1
    end
    prof:stop()
  end
  return calls
end

-- torch's calls with fp8lab's two documented differences (docs/lua-api.md, "## Profiler"): without a schedule
-- fp8lab opens a ProfilerStep#N range per step (torch none: the steps are those of the work); the ProfilerStep#N that
-- the last step() opened is no step when stop() finds nothing in it (torch's trace keeps it, empty, in the call stop()
-- makes, at that N), and a window holding only that is no window once an earlier one was saved (torch calls back)
local function expected(case)
  local out = {}
  for _, c in ipairs(case.calls) do
    local steps, work = {}, {}
    for _, w in ipairs(c[3]) do work[w] = true end
    if case.schedule == nil then
      for _, w in ipairs(c[3]) do steps[#steps + 1] = w end
    else
      for _, s in ipairs(c[2]) do
        if s ~= c[1] or work[s] then steps[#steps + 1] = s end
      end
    end
    if #steps > 0 or #c[3] > 0 or #out == 0 then out[#out + 1] = { c[1], steps, c[3] } end
  end
  return out
end

describe("the schedule records the steps torch.profiler records", function()
  it("each on_trace_ready call: the step it fires at, the ProfilerStep#N ranges and the work in its trace", function()
    assert.is_true(#ref.schedules >= 14)
    for _, case in ipairs(ref.schedules) do
      local what = ("schedule_option %s, runs of %s steps"):format(case.schedule and (function()
        local t = {}
        for k, v in pairs(case.schedule) do t[#t + 1] = k .. "=" .. v end
        table.sort(t)
        return list(t)
      end)() or "none", list(case.runs))
      assert.are.equal(show(expected(case)), show(calls_of(case.schedule, case.runs)), what)
    end
  end)
end)

describe("a profiler started again after stop() goes on as torch's", function()
  it("keeps counting steps and windows: the second run's trace goes to a file of its own", function()
    local dir = os.tmpname()
    os.remove(dir)
    local prof = fp8.profiler.profile({ output_trace_dir = dir }, { rank = 0 })
    for run = 0, 1 do
      prof:start()
      fp8.profiler.record_function("work" .. run, function() return fp8.ones { 2 } + 1 end)
      prof:step()
      prof:stop()
    end
    assert.are.equal(2, prof.step_num)
    assert.are.equal(2, prof.windows)
    local function read(path)
      local f = assert(io.open(path))
      local text = f:read("a")
      f:close()
      return text
    end
    assert.are.equal(dir .. "/profile_0_window2.json", prof:trace_path())
    local first, second = read(dir .. "/profile_0.json"), read(prof:trace_path())
    assert.truthy(first:find('"name": "work0"', 1, true) and first:find('"name": "ProfilerStep#0"', 1, true))
    assert.truthy(second:find('"name": "work1"', 1, true) and second:find('"name": "ProfilerStep#1"', 1, true))
    assert.falsy(second:find('"name": "work0"', 1, true))
    os.remove(dir .. "/profile_0.json")
    os.remove(dir .. "/profile_0_window2.json")
    os.remove(dir)
  end)
end)

describe("with_flops counts a convolution as torch counts aten::conv2d", function()
  -- 2·N·OC·OH·OW·(C/groups)·kh·kw on the conv2d event (torch's aten::conv2d), whether the conv runs oneDNN's direct
  -- route (fp32) or the columns' GEMMs (bf16, a 1×1 kernel), whose events inside it count none (stop 100: until then
  -- the GEMM events carried it on that route); the bias is not counted
  it("the window's FLOPs are torch's, for fp32 and bf16 convs of each geometry", function()
    assert.is_true(#ref.conv2d_flops >= 5)
    for _, c in ipairs(ref.conv2d_flops) do
      for _, dt in ipairs { "f32", "bf16" } do
        fp8.manual_seed(0)
        local x, w = fp8.randn(c.x), fp8.randn(c.w)
        local b = c.bias and fp8.randn { c.w[1] } or nil
        if dt == "bf16" then x, w = x:to("bf16"), w:to("bf16") end
        local prof = fp8.profiler.profile { with_flops = true }
        prof:start()
        local y = F.conv2d(x, w, b, { stride = c.stride, padding = c.padding, dilation = c.dilation, groups = c.groups })
        prof:stop()
        assert.are.same(c.x[1], y:size(1))
        local total, conv, on_conv = 0, 0, 0
        for _, e in ipairs(prof:events()) do
          total = total + (e.flops or 0)
          if e.name == "conv2d" then conv, on_conv = conv + 1, on_conv + (e.flops or 0) end
        end
        assert.are.equal(1, conv, dt)
        assert.are.equal(total, on_conv, dt)
        assert.are.equal(c.flops, math.tointeger(total), ("%s conv2d x %s w %s groups %d"):format(dt, list(c.x),
          list(c.w), c.groups))
      end
    end
  end)
end)
