-- Found on 2026-12-07 (stop 100): with_flops read against torch.profiler's FLOP counts (PyTorch 2.15 on the CPU, its
-- computeFlops: aten::mm, aten::bmm, aten::addmm, aten::baddbmm, aten::conv2d, aten::add, aten::mul and nothing
-- else): which ops carry a count and how much, forward and backward, fp32 and bf16, on the event named as torch names
-- the op; key_averages()'s rows, its group_by_input_shape rows and its table's "Total <unit>FLOPs" column; the Chrome
-- trace's flops args. The expected values come from tests/data/profflops_torch.lua, written by
--   /opt/torch2/bin/python3 scripts/gen_profflops.py
-- docs/robustness.md, "The profiler's FLOPs as torch's (stop 100)".
local ref = dofile("tests/data/profflops_torch.lua")
local F = fp8.nn.functional
local nn = fp8.nn

-- the fp8lab event torch's op is counted on: aten::mm and aten::bmm are fp8lab's one matmul op, and so is the
-- aten::addmm that torch's linear runs (its GEMM event inside linear; a program's own MAP says otherwise)
local NAMES = { ["aten::mm"] = "matmul", ["aten::bmm"] = "matmul", ["aten::addmm"] = "matmul",
                ["aten::baddbmm"] = "baddbmm", ["aten::conv2d"] = "conv2d", ["aten::add"] = "add", ["aten::mul"] = "mul" }

local function r(shape, dt, grad)
  local t = fp8.randn(shape)
  if dt == "bf16" then t = t:to("bf16") end
  if grad then t:requires_grad_() end
  return t
end

-- each program as gen_profflops.py writes it for torch: its inputs made outside the window, then the work
local P = {}
P.mul = function(dt) local a, b = r({ 4, 8 }, dt), r({ 4, 8 }, dt); return function() return a * b end end
P.mul_broadcast_first_smaller = function(dt)
  local v, a = r({ 8 }, dt), r({ 4, 8 }, dt)
  return function() return v * a end
end
P.mul_scalar = function(dt) local a = r({ 4, 8 }, dt); return function() return a * 2, 3 * a end end
P.add = function(dt)
  local a, b, v = r({ 4, 8 }, dt), r({ 4, 8 }, dt), r({ 8 }, dt)
  return function() return a + b, v + a, a + v end
end
P.add_scalar = function(dt) local a = r({ 4, 8 }, dt); return function() return a + 1, 1 + a end end
-- torch's 2 / x is aten::reciprocal then aten::mul(·, 2): fp8lab's one div op carries that count
P.scalar_div = function(dt) local a = r({ 4, 8 }, dt); return function() return 2 / a, a / 2 end, { ["aten::mul"] = "div" } end
P.other_elementwise = function(dt)
  local a, b = r({ 4, 8 }, dt), r({ 4, 8 }, dt)
  return function() return a - b, a / b, fp8.maximum(a, b), a - 1, a:exp(), a:tanh() end
end
P.inplace = function(dt)
  local a, b = r({ 4, 8 }, dt), r({ 4, 8 }, dt)
  return function() return a:add_(b):mul_(b):add_(1):mul_(0.5) end
end
P.mm = function(dt) local a, b = r({ 4, 8 }, dt), r({ 8, 6 }, dt); return function() return a:matmul(b) end end
P.mm_large = function(dt) local a, b = r({ 40, 80 }, dt), r({ 80, 600 }, dt); return function() return a:matmul(b) end end
P.bmm = function(dt) local a, b = r({ 5, 4, 8 }, dt), r({ 5, 8, 6 }, dt); return function() return a:matmul(b) end end
P.matmul_forms = function(dt)
  local x4, y2, v5, m45, b356 = r({ 2, 3, 4, 5 }, dt), r({ 5, 6 }, dt), r({ 5 }, dt), r({ 4, 5 }, dt), r({ 3, 5, 6 }, dt)
  return function()
    return x4:matmul(y2), v5:matmul(y2), v5:matmul(b356), m45:matmul(b356), r({ 2, 1, 4, 5 }, dt):matmul(b356)
  end
end
P.matmul_vector = function(dt)
  local v5, m45, b345 = r({ 5 }, dt), r({ 4, 5 }, dt), r({ 3, 4, 5 }, dt)
  return function() return v5:matmul(v5), m45:matmul(v5), b345:matmul(v5), v5:dot(v5) end
end
P.addmm = function(dt)
  local c, a, b = r({ 4, 6 }, dt), r({ 4, 8 }, dt), r({ 8, 6 }, dt)
  return function() return c:addmm(a, b), c:addmm(a, b, { beta = 0.5, alpha = 2 }) end, { ["aten::addmm"] = "addmm" }
end
P.baddbmm = function(dt)
  local c, a, b = r({ 5, 4, 6 }, dt), r({ 5, 4, 8 }, dt), r({ 5, 8, 6 }, dt)
  return function() return c:baddbmm(a, b) end
end
P.linear = function(dt)
  local x2, x3, w, b = r({ 4, 8 }, dt), r({ 5, 4, 8 }, dt), r({ 6, 8 }, dt), r({ 6 }, dt)
  return function() return F.linear(x2, w, b), F.linear(x3, w, b), F.linear(x2, w) end
end
P.conv2d = function(dt)
  local x, w, b = r({ 2, 3, 8, 8 }, dt), r({ 4, 3, 3, 3 }, dt), r({ 4 }, dt)
  local xd, wd = r({ 1, 6, 10, 10 }, dt), r({ 6, 1, 3, 3 }, dt)
  local x1, w1 = r({ 3, 5, 6, 6 }, dt), r({ 7, 5, 1, 1 }, dt)
  return function()
    return F.conv2d(x, w, b, { padding = 1 }), F.conv2d(xd, wd, { padding = 1, groups = 6 }), F.conv2d(x1, w1)
  end
end
P.conv_others = function(dt)
  local x1, w1 = r({ 2, 3, 8 }, dt), r({ 4, 3, 3 }, dt)
  local xt, wt = r({ 2, 3, 8, 8 }, dt), r({ 3, 4, 3, 3 }, dt)
  return function()
    return F.conv1d(x1, w1), F.conv_transpose2d(xt, wt, { stride = 2 }), F.conv_transpose1d(x1, w1:transpose(1, 2):contiguous())
  end
end
P.sdpa = function(dt)
  local q, k, v = r({ 2, 2, 4, 8 }, dt), r({ 2, 2, 4, 8 }, dt), r({ 2, 2, 4, 8 }, dt)
  local k6, v6 = r({ 2, 2, 6, 8 }, dt), r({ 2, 2, 6, 8 }, dt)
  local row = { 0, 0, 0, 0, 0, -math.huge }
  local mask = fp8.tensor { row, row, row, row }
  if dt == "bf16" then mask = mask:to("bf16") end
  local sdpa = F.scaled_dot_product_attention
  return function() return sdpa(q, k, v), sdpa(q, k, v, { is_causal = true }), sdpa(q, k6, v6, { attn_mask = mask }) end
end
P.mm_backward = function(dt)
  local a, b = r({ 4, 8 }, dt, true), r({ 8, 6 }, dt, true)
  local x, y = r({ 3, 4, 5 }, dt, true), r({ 5, 6 }, dt, true)
  return function() (a:matmul(b):sum() + x:matmul(y):sum()):backward() end
end
P.mul_backward = function(dt)
  local x, v, x2, v2, x3 = r({ 4, 8 }, dt, true), r({ 8 }, dt, true), r({ 4, 8 }, dt, true), r({ 8 }, dt, true),
    r({ 4, 8 }, dt, true)
  return function() ((x * v):sum() + (v2 * x2):sum() + (x3 * 3):sum()):backward() end
end
P.linear_backward = function(dt)
  local x, w, b = r({ 4, 8 }, dt, true), r({ 6, 8 }, dt, true), r({ 6 }, dt, true)
  return function() F.linear(x, w, b):sum():backward() end
end
P.conv2d_backward = function(dt)
  local x, w = r({ 2, 3, 8, 8 }, dt, true), r({ 4, 3, 3, 3 }, dt, true)
  return function() F.conv2d(x, w):sum():backward() end
end
P.sdpa_backward = function(dt)
  local q, k, v = r({ 2, 2, 4, 8 }, dt, true), r({ 2, 2, 4, 8 }, dt, true), r({ 2, 2, 4, 8 }, dt, true)
  return function() F.scaled_dot_product_attention(q, k, v, { is_causal = true }):sum():backward() end
end
-- torch's clip_grad_norm_ computes its coefficient, max_norm / (total + 1e-6), as 0-d tensors (an aten::add and the
-- reciprocal's aten::mul, 1 FLOP each); fp8lab's, in Lua numbers, is recorded as an add and a div of 1 FLOP each since
-- stop 101 (tests/spec/profcost_spec.lua): the reciprocal's aten::mul is fp8lab's div, as a number over a tensor's
-- fp8lab's bf16 model is the Accelerator's (mixed_precision="bf16": autocast; torch's: the model's parameters in
-- bf16, whose GEMMs torch counts the same); "te", "msamp" and "ao": mixed_precision="fp8" under that recipe, held to
-- torch's fp32 counts (an FP8 linear counts as the linear it replaces)
local RECIPES = { te = "TERecipeKwargs", msamp = "MSAMPRecipeKwargs", ao = "AORecipeKwargs" }
P.mlp_step = function(dt)
  fp8.manual_seed(1)
  local model = nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.LayerNorm(32), nn.Linear(32, 16))
  local opt = fp8.optim.AdamW(model:parameters(), { lr = 1e-3 })
  local acc
  if dt ~= "f32" then
    acc = fp8.Accelerator { mixed_precision = dt == "bf16" and "bf16" or "fp8", config = false,
                            kwargs_handlers = RECIPES[dt] and { fp8[RECIPES[dt]] {} } or nil }
    model, opt = acc:prepare(model, opt)
  end
  local x, y = r({ 16, 16 }, RECIPES[dt] and "f32" or dt), r({ 16, 16 }, RECIPES[dt] and "f32" or dt)
  if acc then x, y = x:float(), y:float() end
  return function()
    for _ = 1, 2 do
      local loss = F.mse_loss(model(x), y)
      opt:zero_grad()
      if acc then acc:backward(loss) else loss:backward() end
      nn.utils.clip_grad_norm_(model:parameters(), 1.0)
      opt:step()
    end
  end, { ["aten::mul"] = "div" }
end

-- The program's window: its events and key_averages() (and the profiler, for the table and the trace)
local function profile(program, dt)
  fp8.manual_seed(0)
  local work, map = P[program](dt)
  local prof = fp8.profiler.profile { with_flops = true, record_shapes = true }
  prof:start()
  work()
  prof:stop()
  return prof, map or {}
end

local function name_of(key, map) return map[key] or NAMES[key] or key end

local R = dofile("tests/spec/helpers/flop_rows.lua")
-- torch's rows as fp8lab's, per fp8lab name (map's names first)
local function expected_rows(case, map) return R.expected(case, function(key) return name_of(key, map) end) end
local got_rows, show = R.got, R.show

local function case_of(program, dt)
  for _, c in ipairs(ref.programs) do if c.program == program and c.dtype == dt then return c end end
end

describe("with_flops counts what torch.profiler counts", function()
  local names = {}
  for program in pairs(P) do names[#names + 1] = program end
  table.sort(names)
  it("has torch's counts for every program", function()
    for _, program in ipairs(names) do assert.truthy(case_of(program, "f32"), program) end
    assert.are.equal(#ref.programs, 2 * #names)
  end)
  for _, dt in ipairs { "f32", "bf16" } do
    for _, program in ipairs(names) do
      it(("%s (%s): the window's FLOPs and the ops that carry them, as torch's"):format(program, dt), function()
        local case = case_of(program, dt)
        local prof, map = profile(program, dt)
        assert.are.equal(show(expected_rows(case, map)), show(got_rows(prof)))
        local total = 0
        for _, r in ipairs(prof:key_averages()) do total = total + r.flops end
        assert.are.equal(case.total, math.tointeger(total))
      end)
    end
  end
end)

describe("an FP8 linear counts as the linear it replaces", function()
  it("a training step under each recipe has torch's fp32 counts", function()
    local case = case_of("mlp_step", "f32")
    for _, recipe in ipairs { "te", "msamp", "ao" } do
      -- (an FP8 GEMM's event is fp8_gemm, the forward's inside fp8_linear, the others' inside FP8LinearBackward; a
      -- layer the recipe keeps in high precision, as torchao's filter keeps the first and last, runs matmul)
      local prof = profile("mlp_step", recipe)
      local got = got_rows(prof)
      local gemm = { calls = 0, flops = 0 }
      for _, k in ipairs { "matmul", "fp8_gemm" } do
        if got[k] then gemm.calls, gemm.flops, got[k] = gemm.calls + got[k].calls, gemm.flops + got[k].flops, nil end
      end
      got.GEMM = gemm
      local map = { ["aten::addmm"] = "GEMM", ["aten::mm"] = "GEMM", ["aten::mul"] = "div" }
      assert.are.equal(show(expected_rows(case, map)), show(got), recipe)
      local n = 0
      for _, e in ipairs(prof:events()) do if e.name == "fp8_gemm" and e.flops then n = n + 1 end end
      assert.is_true(recipe == "ao" or n == 10, recipe .. ": the FP8 GEMMs ran")
    end
  end)
end)

-- torch's aten::addmm holds linear's bias, where fp8lab's matmul runs inside linear: linear's programs are left out.
-- matmul's event has the operands torch's aten::mm or aten::bmm gets since stop 101 ([2, 3, 4, 5] @ [5, 6] is aten::mm
-- of [24, 5] and [5, 6]; tests/spec/profcost_spec.lua has more forms)
local SHAPED = { "mul", "mul_broadcast_first_smaller", "mul_scalar", "add", "add_scalar", "scalar_div", "mm", "mm_large",
                 "bmm", "matmul_forms", "addmm", "baddbmm", "conv2d", "conv2d_backward", "mul_backward" }

describe("key_averages{group_by_input_shape=true} splits the counts as torch's", function()
  it("one row per op and input shapes, with torch's FLOPs", function()
    for _, program in ipairs(SHAPED) do
      local case = case_of(program, "f32")
      local prof, map = profile(program, "f32")
      local want, got = {}, {}
      for _, row in ipairs(case.shaped) do
        local k = name_of(row[1], map) .. " " .. row[2]
        want[#want + 1] = ("%s = %d"):format(k, row[3])
      end
      for _, row in ipairs(prof:key_averages { group_by_input_shape = true }) do
        if row.flops > 0 then got[#got + 1] = ("%s %s = %d"):format(row.key, row.input_shapes, math.tointeger(row.flops)) end
      end
      table.sort(want)
      table.sort(got)
      assert.are.equal(table.concat(want, "\n"), table.concat(got, "\n"), program)
    end
  end)
end)

describe("the table's FLOPs column is torch's", function()
  -- where each fp8lab row is one torch row (linear's matmul row is torch's aten::addmm and aten::mm together, whose
  -- smaller count sets torch's unit)
  local ONE_TO_ONE = { "mul", "add", "scalar_div", "mm", "mm_large", "bmm", "addmm", "baddbmm", "conv2d", "conv2d_backward" }
  it("titled Total FLOPs, KFLOPs or MFLOPs by the smallest count, each counted row's cell as torch prints it", function()
    for _, program in ipairs(ONE_TO_ONE) do
      local case = case_of(program, "f32")
      local prof, map = profile(program, "f32")
      local text = prof:key_averages():table { sort_by = "flops", row_limit = 0 }
      local lines = {}
      for l in text:gmatch("[^\n]+") do lines[#lines + 1] = l end
      assert.truthy(lines[2]:find(case.title, 1, true), program .. ": " .. lines[2])
      for key, cell in pairs(case.cells) do
        local name = name_of(key, map)
        local found
        for i = 4, #lines do
          local first = lines[i]:match("^(%S+)")
          if first == name then found = lines[i] end
        end
        assert.truthy(found, program .. ": no row " .. name)
        assert.truthy((" " .. found .. " "):find(" " .. cell .. " ", 1, true), ("%s: %s in %q"):format(program, cell, found))
      end
    end
  end)
  it("has no FLOPs column where nothing is counted, as torch's, and -- for a row without a count", function()
    local prof = profile("other_elementwise", "f32")
    assert.falsy(prof:key_averages():table():find("FLOPs", 1, true))
    prof = profile("mul", "f32")
    local text = prof:key_averages():table { row_limit = 0 }
    assert.truthy(text:match("\nProfilerStep%*[^\n]*%-%-"), text)
  end)
end)

describe("the Chrome trace's flops args", function()
  it("are the events' counts: torch's window total", function()
    for _, program in ipairs { "linear_backward", "conv2d", "conv2d_backward", "mlp_step" } do
      local case = case_of(program, "f32")
      local prof = profile(program, "f32")
      local path = os.tmpname()
      prof:export_chrome_trace(path)
      local f = assert(io.open(path))
      local text = f:read("a")
      f:close()
      os.remove(path)
      local total = 0
      for n in text:gmatch('"flops": (%d+)') do total = total + tonumber(n) end
      assert.are.equal(case.total, total, program)
    end
  end)
end)
