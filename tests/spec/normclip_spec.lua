-- Found on 2026-12-07 (stop 100): clip_grad_norm_ and get_total_norm (and the Accelerator's clip_grad_norm_) read
-- each gradient's sum back (one item() per tensor for p ~= 2, and the largest |g| where a sum left the range, with a
-- Lua rescue of their own), and gave an fp32 inf at p = 1 where p = 2 and 3 gave float64 totals past FLT_MAX; now the
-- per-tensor norms go through the core's rescue and their norm is read once, torch's norm of norms. And a fractional
-- p's gradient near FLT_MAX overflowed in the plain formula's backward (x:norm(0.5) of [1.07e38, 2.83e38, 1.87e-38]:
-- inf where float64's is 1.99e38).
-- docs/robustness.md, "clip_grad_norm_ and the norms' last gaps (stop 100)".
local U = dofile("tests/spec/helpers/util.lua")
local NAN, INF = 0 / 0, math.huge
local utils = fp8.nn.utils

-- The references, from scripts/gen_normclip.py (/opt/torch2/bin/python scripts/gen_normclip.py), torch 2.15.0+cu132:
-- { case, dtype, p, total = the expected total (torch's where torch is right, else float64's rounded to the dtype),
-- torch = torch's own total, grads = the gradients after clip_grad_norm_(params, 1.0, p) (torch's arithmetic) }
local LISTS = {
  big = { { 1e20, -2e20, 3e20 }, { 1.0, 2.0 } }, small = { { 1e-25, 2e-25 }, { -3e-25 } },
  mixed = { { 1e20 }, { 1e-25, 1.0 } }, plain = { { 0.5, -1.5, 2.0 }, { 3.0, 0.0, -4.0 } },
  huge = { { 3e38, 3e38 }, { 1.0 } },
}
local CLIP = {
  { "big", "fp32", 1.0, total = 6.000000120245264e+20, torch = 6.000000120245264e+20, grads = { { 0.1666666716337204, -0.3333333432674408, 0.5 }, { 1.6666666474339362e-21, 3.3333332948678724e-21 } } },
  { "big", "fp32", 2.0, total = 3.741657420726377e+20, torch = INF, grads = { { 0.267261266708374, -0.534522533416748, 0.8017837405204773 }, { 2.672612481223163e-21, 5.345224962446326e-21 } } },
  { "big", "fp32", INF, total = 3.000000060122632e+20, torch = 3.000000060122632e+20, grads = { { 0.3333333432674408, -0.6666666865348816, 1.0 }, { 3.3333332948678724e-21, 6.666666589735745e-21 } } },
  { "big", "fp32", 3.0, total = 3.301927360484805e+20, torch = INF, grads = { { 0.30285343527793884, -0.6057068705558777, 0.9085602760314941 }, { 3.0285342028069875e-21, 6.057068405613975e-21 } } },
  { "big", "fp32", 0.5, total = 1.7191509229818148e+21, torch = 1.7191509229818148e+21, grads = { { 0.05816825106739998, -0.11633650213479996, 0.17450475692749023 }, { 5.816825045223368e-22, 1.1633650090446736e-21 } } },
  { "small", "fp32", 1.0, total = 6.000000117248888e-25, torch = 6.000000117248888e-25, grads = { { 1.0000000195414814e-25, 2.0000000390829628e-25 }, { -3.000000058624444e-25 } } },
  { "small", "fp32", 2.0, total = 3.7416574994292936e-25, torch = 0, grads = { { 1.0000000195414814e-25, 2.0000000390829628e-25 }, { -3.000000058624444e-25 } } },
  { "small", "fp32", INF, total = 3.000000058624444e-25, torch = 3.000000058624444e-25, grads = { { 1.0000000195414814e-25, 2.0000000390829628e-25 }, { -3.000000058624444e-25 } } },
  { "small", "fp32", 3.0, total = 3.301927202374537e-25, torch = 0, grads = { { 1.0000000195414814e-25, 2.0000000390829628e-25 }, { -3.000000058624444e-25 } } },
  { "small", "fp32", 0.5, total = 1.719150962897536e-24, torch = 1.719150962897536e-24, grads = { { 1.0000000195414814e-25, 2.0000000390829628e-25 }, { -3.000000058624444e-25 } } },
  { "mixed", "fp32", 1.0, total = 1.0000000200408773e+20, torch = 1.0000000200408773e+20, grads = { { 1.0 }, { 1.401298464324817e-45, 9.999999682655225e-21 } } },
  { "mixed", "fp32", 2.0, total = 1.0000000200408773e+20, torch = INF, grads = { { 1.0 }, { 1.401298464324817e-45, 9.999999682655225e-21 } } },
  { "mixed", "fp32", INF, total = 1.0000000200408773e+20, torch = 1.0000000200408773e+20, grads = { { 1.0 }, { 1.401298464324817e-45, 9.999999682655225e-21 } } },
  { "mixed", "fp32", 3.0, total = 1.0000000200408773e+20, torch = INF, grads = { { 1.0 }, { 1.401298464324817e-45, 9.999999682655225e-21 } } },
  { "mixed", "fp32", 0.5, total = 1.0000000200408773e+20, torch = 1.0000000200408773e+20, grads = { { 1.0 }, { 1.401298464324817e-45, 9.999999682655225e-21 } } },
  { "plain", "fp32", 1.0, total = 11.0, torch = 11.0, grads = { { 0.045454543083906174, -0.13636362552642822, 0.1818181723356247 }, { 0.27272725105285645, 0, -0.3636363446712494 } } },
  { "plain", "fp32", 2.0, total = 5.612485885620117, torch = 5.612485885620117, grads = { { 0.08908706903457642, -0.26726120710372925, 0.35634827613830566 }, { 0.5345224142074585, 0, -0.7126965522766113 } } },
  { "plain", "fp32", INF, total = 4.0, torch = 4.0, grads = { { 0.12499997019767761, -0.37499991059303284, 0.49999988079071045 }, { 0.7499998211860657, 0, -0.9999997615814209 } } },
  { "plain", "fp32", 3.0, total = 4.679951190948486, torch = 4.679951190948486, grads = { { 0.10683869570493698, -0.32051607966423035, 0.4273547828197479 }, { 0.6410321593284607, 0, -0.8547095656394958 } } },
  { "plain", "fp32", 0.5, total = 50.09972381591797, torch = 50.09972381591797, grads = { { 0.009980094619095325, -0.02994028478860855, 0.0399203784763813 }, { 0.0598805695772171, 0, -0.0798407569527626 } } },
  { "huge", "fp32", 1.0, total = INF, torch = INF, grads = { { 0, 0 }, { 0 } } },
  { "huge", "fp32", 2.0, total = INF, torch = INF, grads = { { 0, 0 }, { 0 } } },
  { "huge", "fp32", INF, total = 3.0000000054977558e+38, torch = 3.0000000054977558e+38, grads = { { 0.9999999403953552, 0.9999999403953552 }, { 3.333333116818801e-39 } } },
  { "huge", "fp32", 3.0, total = INF, torch = INF, grads = { { 0, 0 }, { 0 } } },
  { "huge", "fp32", 0.5, total = INF, torch = INF, grads = { { 0, 0 }, { 0 } } },
  { "big", "bf16", 1.0, total = 5.995191823955604e+20, torch = 5.995191823955604e+20, grads = { { 0.166015625, -0.33203125, 0.5 }, { 1.6675961149069038e-21, 3.3351922298138076e-21 } } },
  { "big", "bf16", 2.0, total = 3.735465674926184e+20, torch = INF, grads = { { 0.267578125, -0.53515625, 0.80078125 }, { 2.6734477397713854e-21, 5.346895479542771e-21 } } },
  { "big", "bf16", INF, total = 2.997595911977802e+20, torch = 2.997595911977802e+20, grads = { { 0.33203125, -0.6640625, 1.0 }, { 3.3351922298138076e-21, 6.670384459627615e-21 } } },
  { "big", "bf16", 3.0, total = 3.2973555031755824e+20, torch = INF, grads = { { 0.302734375, -0.60546875, 0.91015625 }, { 3.0307897643942934e-21, 6.061579528788587e-21 } } },
  { "big", "bf16", 0.5, total = 1.7155471988549883e+21, torch = 1.7155471988549883e+21, grads = { { 0.05810546875, -0.1162109375, 0.1748046875 }, { 5.823351512373315e-22, 1.164670302474663e-21 } } },
  { "small", "bf16", 1.0, total = 6.009984138080592e-25, torch = 6.009984138080592e-25, grads = { { 1.001664023013432e-25, 2.003328046026864e-25 }, { -3.004992069040296e-25 } } },
  { "small", "bf16", 2.0, total = 3.7481621506309067e-25, torch = 0, grads = { { 1.001664023013432e-25, 2.003328046026864e-25 }, { -3.004992069040296e-25 } } },
  { "small", "bf16", INF, total = 3.004992069040296e-25, torch = 3.004992069040296e-25, grads = { { 1.001664023013432e-25, 2.003328046026864e-25 }, { -3.004992069040296e-25 } } },
  { "small", "bf16", 3.0, total = 3.311953624479896e-25, torch = 0, grads = { { 1.001664023013432e-25, 2.003328046026864e-25 }, { -3.004992069040296e-25 } } },
  { "small", "bf16", 0.5, total = 1.7189847104617606e-24, torch = 1.7189847104617606e-24, grads = { { 1.001664023013432e-25, 2.003328046026864e-25 }, { -3.004992069040296e-25 } } },
  { "mixed", "bf16", 1.0, total = 9.972771014849226e+19, torch = 9.972771014849226e+19, grads = { { 0.99609375 }, { 0, 1.0005576689441423e-20 } } },
  { "mixed", "bf16", 2.0, total = 9.972771014849226e+19, torch = INF, grads = { { 0.99609375 }, { 0, 1.0005576689441423e-20 } } },
  { "mixed", "bf16", INF, total = 9.972771014849226e+19, torch = 9.972771014849226e+19, grads = { { 0.99609375 }, { 0, 1.0005576689441423e-20 } } },
  { "mixed", "bf16", 3.0, total = 9.972771014849226e+19, torch = INF, grads = { { 0.99609375 }, { 0, 1.0005576689441423e-20 } } },
  { "mixed", "bf16", 0.5, total = 9.972771014849226e+19, torch = 9.972771014849226e+19, grads = { { 0.99609375 }, { 0, 1.0005576689441423e-20 } } },
  { "plain", "bf16", 1.0, total = 11.0, torch = 11.0, grads = { { 0.04541015625, -0.13671875, 0.181640625 }, { 0.2734375, 0, -0.36328125 } } },
  { "plain", "bf16", 2.0, total = 5.625, torch = 5.625, grads = { { 0.0888671875, -0.265625, 0.35546875 }, { 0.53125, 0, -0.7109375 } } },
  { "plain", "bf16", INF, total = 4.0, torch = 4.0, grads = { { 0.125, -0.375, 0.5 }, { 0.75, 0, -1.0 } } },
  { "plain", "bf16", 3.0, total = 4.6875, torch = 4.6875, grads = { { 0.1064453125, -0.3203125, 0.42578125 }, { 0.640625, 0, -0.8515625 } } },
  { "plain", "bf16", 0.5, total = 50.0, torch = 50.0, grads = { { 0.010009765625, -0.030029296875, 0.0400390625 }, { 0.06005859375, 0, -0.080078125 } } },
  { "huge", "bf16", 1.0, total = INF, torch = INF, grads = { { 0, 0 }, { 0 } } },
  { "huge", "bf16", 2.0, total = INF, torch = INF, grads = { { 0, 0 }, { 0 } } },
  { "huge", "bf16", INF, total = 3.00405527047391e+38, torch = 3.00405527047391e+38, grads = { { 0.9921875, 0.9921875 }, { 3.3060778616876836e-39 } } },
  { "huge", "bf16", 3.0, total = INF, torch = INF, grads = { { 0, 0 }, { 0 } } },
  { "huge", "bf16", 0.5, total = INF, torch = INF, grads = { { 0, 0 }, { 0 } } },
}
-- the non-finite gradients: torch's total, its clipped gradients (max_norm 1) and whether error_if_nonfinite raises
local NONFINITE_LISTS = { inf = { { 1.0, INF }, { 2.0 } }, nan = { { 1.0, NAN }, { 2.0 } } }
local NONFINITE = {
  { "inf", 1.0, total = INF, grads = { { 0, NAN }, { 0 } }, raises = true },
  { "inf", 2.0, total = INF, grads = { { 0, NAN }, { 0 } }, raises = true },
  { "inf", INF, total = INF, grads = { { 0, NAN }, { 0 } }, raises = true },
  { "inf", 3.0, total = INF, grads = { { 0, NAN }, { 0 } }, raises = true },
  { "inf", 0.5, total = INF, grads = { { 0, NAN }, { 0 } }, raises = true },
  { "nan", 1.0, total = NAN, grads = { { NAN, NAN }, { NAN } }, raises = true },
  { "nan", 2.0, total = NAN, grads = { { NAN, NAN }, { NAN } }, raises = true },
  { "nan", INF, total = NAN, grads = { { NAN, NAN }, { NAN } }, raises = true },
  { "nan", 3.0, total = NAN, grads = { { NAN, NAN }, { NAN } }, raises = true },
  { "nan", 0.5, total = NAN, grads = { { NAN, NAN }, { NAN } }, raises = true },
}
-- get_total_norm({bf16 [1, 2, 1e20], fp32 [3, 1e-25]}, p): the bf16 norm rounded to bf16, then promoted (torch's
-- stack); torch's where right, float64's of the rounded norms where torch's bf16 Σx² overflows (p = 2, 3: its inf)
local MIXED = {
  [1.0] = 9.972771014849226e+19, [2.0] = 9.972771014849226e+19, [INF] = 9.972771014849226e+19,
  [3.0] = 9.972771014849226e+19, [0.5] = 9.972771894458529e+19,
}
-- x:norm(p)'s gradient: float64's rounded to fp32 (g) and torch's fp32 one
local FRAC = {
  { x = { 1.0691000078952021e+38, 2.834300020703379e+38, 1.865200002497705e-38 }, p = 0.5, g = { 2.6282224655151367, 1.6141667366027832, 1.9897960586096374e+38 }, torch = { INF, INF, INF } },
  { x = { 3.0000000054977558e+38, 9.999999350456404e-39 }, p = 0.5, g = { 1.0, 1.7320508482001606e+38 }, torch = { 1.0, 1.7320508482001606e+38 } },
  { x = { 1.9999999360571385e+38, 1.0000000031710769e-30, 3.0000000181342878e-36 }, p = 0.25, g = { 1.0, INF, INF }, torch = { 1.0000001192092896, INF, INF } },
  { x = { 3.0000000054977558e+38, 2.5000000898478246e-37 }, p = 0.75, g = { 1.0, 5.885662103984931e+18 }, torch = { 1.0000005960464478, 5.885665952275628e+18 } },
}

-- |got - want| <= rel·|want|, or both the same non-finite, or both within 1e-44 (subnormal products)
local function near(want, got, rel, where)
  if type(want) == "table" then
    assert.are.equal(#want, #got, where)
    for i = 1, #want do near(want[i], got[i], rel, where .. "[" .. i .. "]") end
    return
  end
  if want ~= want then assert.is_true(got ~= got, ("%s: %s, want NaN"):format(where, got)); return end
  if want == INF or want == -INF then assert.are.equal(want, got, where); return end
  assert.is_true(math.abs(got - want) <= math.max(rel * math.abs(want), 1e-44),
    ("%s: %.9g, want %.9g"):format(where, got, want))
end

-- CLIP's entry c, but fp32's p = 2 of "huge": it stays float64's, finite past FLT_MAX, and scales by it
-- (docs/lua-api.md; torch's total is inf and zeroes the gradients)
local function expected(c)
  if c[1] ~= "huge" or c[2] ~= "fp32" or c[3] ~= 2 then return c end
  local a = fp8.tensor({ 3e38 }):item()
  local t = math.sqrt(2 * a * a + 1)
  return { c[1], c[2], c[3], total = t, grads = { { a / (t + 1e-6), a / (t + 1e-6) }, { 1 / (t + 1e-6) } } }
end

local function tensors(lists, dtype)
  local ts = {}
  for i, l in ipairs(lists) do ts[i] = fp8.tensor(l):to(dtype or "fp32") end
  return ts
end

local function params_with(lists, dtype)
  local ps = {}
  for i, g in ipairs(tensors(lists, dtype)) do
    ps[i] = fp8.zeros(g:shape()):to(dtype or "fp32"):requires_grad(true)
    ps[i].grad = g
  end
  return ps
end

-- the reads back from the device f makes: item, tolist, totable and the float64 sum of squares (one wait each)
local function reads_of(f)
  local n, T, C = 0, fp8.Tensor, require("fp8._optim")
  local saved = { item = T.item, tolist = T.tolist, totable = T.totable }
  for k, fn in pairs(saved) do T[k] = function(...) n = n + 1; return fn(...) end end
  -- (sumsq and, since stop 101, pnorm_total read the total once each, in C)
  local sumsq, pnorm_total = C.sumsq, C.pnorm_total
  C.sumsq = function(...) n = n + 1; return sumsq(...) end
  C.pnorm_total = function(...) n = n + 1; return pnorm_total(...) end
  local ok, err = pcall(f)
  for k, fn in pairs(saved) do T[k] = fn end
  C.sumsq, C.pnorm_total = sumsq, pnorm_total
  assert(ok, err)
  return n
end

describe("normclip: clip_grad_norm_ and get_total_norm on the core's rescue (stop 100)", function()
  it("give torch's totals where torch's are right and float64's where its sums over- or underflow", function()
    for _, c in ipairs(CLIP) do
      local name, dt, p = c[1], c[2], c[3]
      local where = ("%s %s p = %s"):format(name, dt, p)
      local rel = dt == "fp32" and 1e-6 or 0   -- (bf16: torch's norm of the bf16 norms, to the bit)
      c = expected(c)
      near(c.total, utils.get_total_norm(tensors(LISTS[name], dt), p), rel, where .. " get_total_norm")
      if dt == "fp32" then   -- (a parameter's .grad is fp32 here: a bf16 one assigned is converted)
        local ps = params_with(LISTS[name], dt)
        near(c.total, utils.clip_grad_norm_(ps, 1.0, p), rel, where .. " clip_grad_norm_")
        for i, q in ipairs(ps) do near(c.grads[i], q.grad:tolist(), 1e-6, where .. " grad " .. i) end
      end
    end
  end)

  it("promote a bf16 norm beside an fp32 one as torch's stack does (its bf16 norm rounded first)", function()
    for p, want in pairs(MIXED) do
      local ts = { fp8.tensor({ 1.0, 2.0, 1e20 }):to("bf16"), fp8.tensor({ 3.0, 1e-25 }) }
      assert.are.equal(want, utils.get_total_norm(ts, p), "p = " .. p)
    end
  end)

  it("raise on a NaN or infinite total with error_if_nonfinite and scale by it as torch does without", function()
    for _, c in ipairs(NONFINITE) do
      local name, p = c[1], c[2]
      local where = ("%s p = %s"):format(name, p)
      local ps = params_with(NONFINITE_LISTS[name])
      near(c.total, utils.clip_grad_norm_(ps, 1.0, p), 0, where)
      for i, q in ipairs(ps) do near(c.grads[i], q.grad:tolist(), 0, where .. " grad " .. i) end
      assert.is_false(pcall(utils.get_total_norm, tensors(NONFINITE_LISTS[name]), p, true), where)
      ps = params_with(NONFINITE_LISTS[name])
      U.fails_with("is non-finite", utils.clip_grad_norm_, ps, 1.0, p, true)
      near(NONFINITE_LISTS[name][1], ps[1].grad:tolist(), 0, where .. " left alone")
    end
  end)

  it("read the device once for any p, the per-tensor norms through the core's norm_rescue", function()
    local lists = { { 1e20, -2e20, 3e20 }, { 1e-25, 2e-25 }, { 0.5, -1.5, 2.0 } }
    for _, p in ipairs { 1, 2, INF, 3, 0.5 } do
      for _, dt in ipairs { "fp32", "bf16" } do
        local where = ("p = %s %s"):format(p, dt)
        assert.are.equal(1, reads_of(function() utils.get_total_norm(tensors(lists, dt), p) end), where)
        local ps = params_with(lists)
        assert.are.equal(1, reads_of(function() utils.clip_grad_norm_(ps, 1.0, p) end), where)
        if p == 3 or p == 0.5 then   -- (p = 1's sums cannot leave the range where the norm does not)
          local ops = U.ops_of(function() utils.get_total_norm(tensors(lists, dt), p) end)
          assert.truthy(ops:find(" norm_rescue ", 1, true), where .. ops)
          assert.falsy(ops:find(" max ", 1, true), where .. ops)
        end
      end
    end
  end)

  it("the Accelerator's clip_grad_norm_ (fp16's unscaling first) and MS-AMP's FP8 gradients take the same totals",
    function()
      local acc = fp8.Accelerator {}
      for _, c in ipairs(CLIP) do
        if c[2] == "fp32" then
          local ps = params_with(LISTS[c[1]])
          near(expected(c).total, acc:clip_grad_norm_(ps, 1.0, c[3]), 1e-6, c[1] .. " p = " .. c[3])
        end
      end
    end)
end)

describe("normclip: a fractional p's gradient near FLT_MAX (stop 100)", function()
  it("is float64's where the plain formula's backward overflowed (p < 1: 1/p times the gradient on the way)", function()
    for i, c in ipairs(FRAC) do
      local x = fp8.tensor(c.x):requires_grad(true)
      x:norm(c.p):backward()
      -- (the fourth is not steep: the plain formula's fp32 gradient, 2.6e-6 off float64's, torch's 6.5e-7; left)
      near(c.g, x.grad:tolist(), i <= 3 and 0 or 1e-5, ("case %d p = %s"):format(i, c.p))
    end
    -- along a dim, beside a row in range (that row keeps the plain formula's bits), and through dist
    local x = fp8.tensor({ FRAC[2].x, { 0.5, 2.0 } }):requires_grad(true)
    x:norm(0.5, 2):sum():backward()
    local plain = fp8.tensor({ 0.5, 2.0 }):requires_grad(true)
    plain:norm(0.5):backward()
    near({ FRAC[2].g, plain.grad:tolist() }, x.grad:tolist(), 0, "rows")
    local y = fp8.tensor(FRAC[2].x):requires_grad(true)
    y:dist(fp8.zeros(2), 0.5):backward()
    near(FRAC[2].g, y.grad:tolist(), 0, "dist")
    local z = fp8.tensor({ FRAC[1].x }):requires_grad(true)
    fp8.cdist(z, fp8.zeros(1, 3), 0.5):sum():backward()
    near({ FRAC[1].g }, z.grad:tolist(), 0, "cdist")
  end)
end)
