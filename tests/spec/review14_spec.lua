-- Found on 2026-12-06 (stop 97): stop 96's code read again as a reviewer who assumes it is wrong (the columns'
-- softmax, the one-pass rms_norm, the bf16 GELU table, gather's prefetch, hypot1.h, the strided logsumexp, l_luarng.c
-- and math_random in checkpoints, the self-referring hooks, ReduceLROnPlateau's _is_better, the clipping functions'
-- foreach). docs/robustness.md, "Stop 96's code read again (stop 97)".
local F = fp8.nn.functional
local U = dofile("tests/spec/helpers/util.lua")

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

