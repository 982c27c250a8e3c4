-- Found on 2026-12-06 (stop 97): stop 96's code read again as a reviewer who assumes it is wrong (the columns'
-- softmax, the one-pass rms_norm, the bf16 GELU table, gather's prefetch, hypot1.h, the strided logsumexp, l_luarng.c
-- and math_random in checkpoints, the self-referring hooks, ReduceLROnPlateau's _is_better, the clipping functions'
-- foreach). docs/robustness.md, "Stop 96's code read again (stop 97)".
local F = fp8.nn.functional

-- the fp32 bits of every element of t, in order
local function bits(t)
  local out = {}
  for i, v in ipairs(t:float():contiguous():reshape({ -1 }):tolist()) do out[i] = string.pack("<f", v) end
  return out
end

describe("review14: softmax along a dim with a stride has one layout whether a gradient is recorded or not", function()
  -- stop 96 computed it down the columns where a gradient is recorded (a contiguous result, torch's) and kept the
  -- transposed route with nothing to record, whose result is a transposed view: x:softmax(1):view(...) ran in
  -- training and was refused under no_grad ('view [12] is not compatible with the layout of tensor [3, 4]')
  it("gives a contiguous result that views, under no_grad and for a tensor that requires none, the same bits", function()
    fp8.manual_seed(14)
    for _, shp in ipairs { { 3, 4 }, { 2, 5, 3 }, { 4, 1, 6 }, { 17, 33 } } do
      for _, fn in ipairs { "softmax", "log_softmax" } do
        for _, src in ipairs { "contiguous", "transposed" } do
          local x = fp8.randn(shp) * 3
          if src == "transposed" then x = x:transpose(1, #shp) end
          for d = 1, #shp - 1 do
            local what = ("%s of %s %s along dim %d"):format(fn, x:shape_str(), src, d)
            local xr = x:clone():requires_grad(true)
            local with_grad = F[fn](xr, d)
            local plain = F[fn](x, d)
            local no_grad = fp8.no_grad(function() return F[fn](xr, d) end)
            for _, y in ipairs { plain, no_grad } do
              assert.is_true(y:is_contiguous(), what)
              assert.are.same(bits(with_grad), bits(y), what)
              assert.are.same(bits(with_grad), bits(y:view({ -1 })), what .. ", viewed flat")
            end
          end
        end
      end
    end
  end)
end)

describe("review14: ReduceLROnPlateau:step checks what _is_better reads before it counts the step", function()
  local function plateau()
    local p = fp8.zeros({ 2 }):requires_grad(true)
    local s = fp8.optim.lr_scheduler.ReduceLROnPlateau(fp8.optim.SGD({ p }, { lr = 0.1 }))
    s:step(1.0)
    return s
  end

  -- a best written by hand that is not a number was refused by _is_better, naming it rather than step, after the
  -- step had been counted; a mode or threshold_mode not in the constructor's choices was taken as "max" or "abs",
  -- a threshold that is not a number was Lua's own "attempt to perform arithmetic on a string value"
  it("refuses a best, mode, threshold_mode or threshold written by hand, and moves nothing", function()
    for _, c in ipairs {
      { "best", "x", "ReduceLROnPlateau:step: best must be a number (not NaN), got \"x\" (a string)" },
      { "best", {}, "ReduceLROnPlateau:step: best must be a number (not NaN), got a table" },
      { "mode", "mx", "ReduceLROnPlateau:step: mode must be \"min\" or \"max\", got \"mx\" (a string)" },
      { "threshold_mode", "ab",
        "ReduceLROnPlateau:step: threshold_mode must be \"rel\" or \"abs\", got \"ab\" (a string)" },
      { "threshold", "1", "ReduceLROnPlateau:step: threshold must be a finite number >= 0, got \"1\" (a string)" },
      { "threshold", -1, "ReduceLROnPlateau:step: threshold must be a finite number >= 0, got -1" },
      { "threshold", math.huge, "ReduceLROnPlateau:step: threshold must be a finite number >= 0, got inf" },
    } do
      local s = plateau()
      s[c[1]] = c[2]
      local before = { s.last_epoch, s.num_bad_epochs, s.cooldown_counter, s.optimizer.param_groups[1].lr }
      assert.has_error(function() s:step(0.5) end, c[3])
      assert.are.same(before, { s.last_epoch, s.num_bad_epochs, s.cooldown_counter, s.optimizer.param_groups[1].lr })
      if c[1] ~= "best" then
        assert.has_error(function() s:_is_better(0.5, 1.0) end, (c[3]:gsub(":step:", ":_is_better:")))
      end
    end
  end)

  it("still steps as torch's with the settings it was made with", function()
    local s = plateau()
    s:step(0.5)
    assert.are.same({ 2, 0.5, 0 }, { s.last_epoch, s.best, s.num_bad_epochs })
    assert.is_true(s:_is_better(0.4, 0.5))
    assert.is_false(s:_is_better(0.5, 0.5))
  end)
end)

-- load_state refused math_random in upper-case hex digits, which fp8.set_math_random_state takes: found by gaps 14
-- and sweep 106 too; its case is gaps14_spec's "load_state takes what set_math_random_state takes".

describe("review14: F.rms_norm names an FP8 weight itself", function()
  -- stop 96's one-pass form (nothing to record) refused it with its own internal words at the library's line
  -- ('lua/fp8/nn/functional.lua:876: rms_norm: the one-pass form takes fp32 tensors, got fp32 and e4m3'), the ops'
  -- form (a gradient to record) as 'mul: e4m3 tensor: ...': one refusal for both, as an FP8 input's
  it("refuses it, with a gradient to record or not, as it refuses an FP8 input", function()
    local F = fp8.nn.functional
    local x = fp8.randn({ 2, 4 })
    for _, dt in ipairs { "e4m3", "e5m2" } do
      local w = fp8.ones({ 4 }):quantize(dt)
      local msg = ("rms_norm: %s weight: call :dequantize() first"):format(dt)
      assert.has_error(function() F.rms_norm(x, 4, w) end, msg)
      assert.has_error(function() F.rms_norm(x:clone():requires_grad(true), 4, w) end, msg)
      assert.has_error(function() F.rms_norm(w:dequantize():reshape({ 1, 4 }), 4, w) end, msg)
    end
    assert.has_error(function() F.rms_norm(x:quantize("e4m3"), 4) end, "rms_norm: e4m3 input: call :dequantize() first")
  end)
end)
