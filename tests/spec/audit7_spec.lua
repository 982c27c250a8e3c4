-- Found or changed on 2026-12-06 (stop 91): the activations' vectorised fp32 code (sigmoid, tanh, SiLU and the exact
-- GELU, core/cpu/cpu_vmath.h: test_core's vmath_* tests measure it over the floats), SiLU as one node, and the
-- plot reader's CSV fields.
local U = dofile("tests/spec/helpers/util.lua")
local F = fp8.nn.F

local function rel(got, want) return math.abs(got - want) / math.max(math.abs(want), 1e-300) end

describe("activations in fp32 vector code", function()
  it("SiLU is one node with torch's values and gradient", function()
    -- torch 2.15, float64: F.silu(x) and the gradient of its sum
    local xs = { -20, -6, -3, -1, -0.25, 0, 0.25, 1, 3, 6, 20 }
    local ys = { -4.1223072363804073e-08, -0.014835738939808647, -0.14227761953270035, -0.2689414213699951,
                 -0.10945587477855048, 0, 0.14054412522144952, 0.7310585786300049, 2.8577223804672998,
                 5.9851642610601923, 19.999999958776925 }
    local gs = { -3.9161918660646786e-08, -0.012326432591525513, -0.088104106015169617, 0.072329488128513253,
                 0.37628997842980233, 0.5, 0.62371002157019773, 0.92767051187148686, 1.0881041060151693,
                 1.0123264325915249, 1.0000000391619202 }
    local x = fp8.tensor(xs):requires_grad_()
    local y = F.silu(x)
    assert.are.equal("SiluBackward", y:grad_fn())   -- one node (it was x·sigmoid(x): a Mul of a Sigmoid)
    y:sum():backward()
    local yv, gv = y:totable(), x.grad:totable()
    for i = 1, #xs do
      assert(rel(yv[i], ys[i]) < 4e-7, ("silu(%g) = %.9g, torch %.9g"):format(xs[i], yv[i], ys[i]))
      assert(rel(gv[i], gs[i]) < 4e-7, ("silu'(%g) = %.9g, torch %.9g"):format(xs[i], gv[i], gs[i]))
    end
    -- a bf16 input keeps its dtype (computed in fp32, rounded once), and the module is the function
    assert.are.equal("bf16", F.silu(fp8.randn { 5 }:to("bf16")):dtype())
    assert.are.equal("bf16", fp8.nn.SiLU()(fp8.randn { 5 }:to("bf16")):dtype())
    -- -inf gives NaN as torch's x·sigmoid(x) (-inf·0), +inf itself, NaN NaN
    local s = F.silu(fp8.tensor { -math.huge, math.huge, 0 / 0 }):totable()
    assert.is_true(s[1] ~= s[1] and s[2] == math.huge and s[3] ~= s[3])
    U.fails_with({ "silu: input must be a tensor, got string" }, F.silu, "a")
    U.fails_with({ "silu: takes (input) (no inplace); got 1 more argument" }, F.silu, fp8.randn { 2 }, true)
  end)

  it("tanh within 1.5 ulp and sigmoid within 2.5 of the exact value; tiny and far-out inputs", function()
    -- (they were double tanh and exp rounded once: a libm call per element, 20x slower; test_core's vmath_* tests
    -- measure every float)
    fp8.manual_seed(3)
    local x = fp8.randn { 20000 } * 6
    local xv, tv, sv = x:totable(), x:tanh():totable(), x:sigmoid():totable()
    for i = 1, #xv do
      local v = xv[i]
      local t, s = math.tanh and math.tanh(v) or (1 - math.exp(-2 * v)) / (1 + math.exp(-2 * v)), 1 / (1 + math.exp(-v))
      assert(rel(tv[i], t) < 1.5 * 2 ^ -23, ("tanh(%.9g) = %.9g, exact %.12g"):format(v, tv[i], t))
      assert(rel(sv[i], s) < 2.5 * 2 ^ -23, ("sigmoid(%.9g) = %.9g, exact %.12g"):format(v, sv[i], s))
    end
    local t = fp8.tensor { 1e-30, -1e-30, 10, -10, 0 }:tanh():totable()
    assert.are.same({ 1.0000000031710769e-30, -1.0000000031710769e-30, 1, -1, 0 }, t)   -- tanh of a tiny x is x
    -- a subnormal sigmoid far out on the left, as the double form gave (e^-100 = 3.7e-44)
    local s = fp8.tensor { -100, -200 }:sigmoid():totable()
    assert.is_true(s[1] > 0 and s[1] < 1e-43 and s[2] == 0, tostring(s[1]))
  end)

  it("tanh's and sigmoid's backward is one pass with the three ops' bits", function()
    -- dy·(1 − y·y) and dy·((1 − y)·y) from the output, rounded as the tensor ops round them (fp32 and contiguous:
    -- the device's act_bwd; a bf16 output keeps the ops, each rounding to bf16)
    fp8.manual_seed(5)
    for _, case in ipairs { { "fp32", false }, { "fp32", true } } do
      local x = (fp8.randn { 300, 7 } * 3):to(case[1])
      if case[2] then x = x:t() end
      x = x:detach():requires_grad_()
      local g = fp8.randn(x:shape()):to(case[1])
      for _, op in ipairs { "tanh", "sigmoid" } do
        local y = x[op](x)
        y:backward(g)
        local yd = y:detach()
        local want = op == "tanh" and g * (1 - yd * yd) or g * ((1 - yd) * yd)
        assert.are.same(U.flat(want:to("fp32")), U.flat(x.grad:to("fp32")), op .. " " .. case[1])
        x.grad = nil
      end
    end
  end)

  it("the exact GELU keeps its left tail's relative precision (0.5v(1 + erf) lost it)", function()
    -- GELU(v) = v·Φ(v) with Φ from erfc in the tail: torch's 0.5v(1 + erf(v/√2)) gives -1.19e-06 at -5 (17% off)
    -- and -0 at -8; the values are v·erfc(-v/√2)/2 in double
    local want = { [-5] = -1.4332578593959731e-06, [-8] = -4.9767684594174555e-15, [-10] = -7.619853024160593e-23,
                   [-12] = -2.1317785344932424e-32, [-2] = -0.045500263896358417, [3] = 2.9959502005691337 }
    for v, w in pairs(want) do
      local got = F.gelu(fp8.tensor { v }):item()
      assert(rel(got, w) < 1e-6, ("gelu(%g) = %.9g, exact %.12g"):format(v, got, w))
    end
    -- the derivative Φ(v) + v·φ(v) at those points, Φ by Simpson's rule in double (2000 intervals from 0)
    local x = fp8.tensor { -5, -2, 0, 1.5, 3 }:requires_grad_()
    F.gelu(x):sum():backward()
    local function pdf(t) return math.exp(-0.5 * t * t) / math.sqrt(2 * math.pi) end
    local function cdf(v)
      local n, h, sum = 2000, v / 2000, pdf(0) + pdf(v)
      for k = 1, n - 1 do sum = sum + (k % 2 == 1 and 4 or 2) * pdf(k * h) end
      return 0.5 + sum * h / 3
    end
    for i, v in ipairs { -5, -2, 0, 1.5, 3 } do
      local d = cdf(v) + v * pdf(v)
      assert(rel(x.grad:totable()[i], d) < 1e-6, ("gelu'(%g) = %.9g, exact %.12g"):format(v, x.grad:totable()[i], d))
    end
  end)
end)

describe("fp8.plot's CSV reader", function()
  it("splits quoted fields as RFC 4180 writes them", function()
    local f = require("fp8.plot")._csv_fields
    assert.are.same({ "1", "a", "input", "e4m3", "1", "2", "3" }, f("1,a,input,e4m3,1,2,3"))
    assert.are.same({ "1", "a,b", "x" }, f('1,"a,b",x'))
    assert.are.same({ "1", 'x",', "input" }, f('1,"x"",",input'))   -- a quote then a comma inside the name
    assert.are.same({ "1", 'he said "hi"', "" }, f('1,"he said ""hi""",'))
    assert.are.same({ "1", "", "", "" }, f("1,,,"))
    assert.are.same({ "" }, f(""))
  end)

  it("fp8_history finds the rows of a layer whose name holds a quote and a comma", function()
    -- the old reader took '"x"",",...' for an unquoted name and found no rows for the layer 'x",'
    local dir = U.tmpdir()
    local rows = { "step,layer,role,format,scale,amax,amax_history_max,underflow_frac,saturated_frac" }
    for step = 1, 3 do
      for _, role in ipairs { "input", "weight", "grad" } do
        rows[#rows + 1] = ('%d,"x"",",%s,e4m3,%g,%g,%g,0,0'):format(step, role, 2 ^ step, step, step)
      end
    end
    U.write(dir .. "/s.csv", table.concat(rows, "\n") .. "\n")
    local ok, png = pcall(fp8.plot.fp8_history, { csv = dir .. "/s.csv", png = dir .. "/h.png", layer = 'x",' })
    assert.is_true(ok, tostring(png))
    if fp8.plot.available() then assert.are.equal(dir .. "/h.png", png) end
    os.execute("rm -rf " .. U.q(dir))
  end)
end)

describe("the REPL's Tab completion", function()
  it("does not offer the Accelerate names fp8lab refuses (reading one raises)", function()
    local complete = require("fp8.repl").complete
    assert.are.same({}, complete("fp8.DeepSpeed"))   -- fp8.DeepSpeedPlugin: "not in fp8lab: ..."
    local par = complete("fp8.Par")
    for _, c in ipairs(par) do assert.are_not.equal("fp8.PartialState", c) end
    assert.is_true(pcall(function() return fp8.PartialState end) == false)   -- still refused when read
    -- the lazy names behind the same __index are still offered
    local acc = complete("fp8.Accel")
    assert.truthy(table.concat(acc, " "):find("fp8.Accelerator", 1, true), table.concat(acc, " "))
    assert.truthy(table.concat(complete("fp8.TERecipe"), " "):find("fp8.TERecipeKwargs", 1, true))
  end)
end)

describe("the channel norms with no channels", function()
  it("batch_norm and instance_norm of [N, 0, L] give an empty result, as torch's (a division by zero before)", function()
    local F = fp8.nn.F
    local x = fp8.randn { 2, 0, 3 }
    assert.are.same({ 2, 0, 3 }, F.batch_norm(x, nil, nil, nil, nil, true):shape())
    assert.are.same({ 2, 0, 3 }, F.batch_norm(x, fp8.zeros { 0 }, fp8.ones { 0 }, nil, nil, false):shape())
    assert.are.same({ 2, 0, 3 }, F.instance_norm(x):shape())
    -- the fused kernel's binding refuses more groups than channels (N·groups could overflow; groups = 3 of 0 channels
    -- "succeeded" with statistics of nothing)
    local cn = require("fp8._nn")._channel_norm
    U.fails_with({ "positive divisor of the channels (0), got 3" }, cn, x, 3, nil, nil, 1e-5)
    U.fails_with({ "positive divisor of the channels (4), got 8" }, cn, fp8.randn { 2, 4, 3 }, 8, nil, nil, 1e-5)
    U.fails_with({ "got 9223372036854775807" }, cn, fp8.randn { 2, 4, 3 }, math.maxinteger, nil, nil, 1e-5)
  end)
end)

describe("the native windows under hostile geometry (a review of the im2col change)", function()
  local F = fp8.nn.functional
  it("refuses window counts whose product overflows (a segfault: the product wrapped and sized the buffer)", function()
    local P, Q = (1 << 31) - 1, (1 << 31) - 32768   -- (2^32 + 65536)·(2^32 − 65535) ≡ 65536 mod 2^64
    U.fails_with({ "unfold: 4295032832×4294901761 windows are too many" }, F.unfold, fp8.zeros { 1, 1, 65538, 1 }, 1,
      { padding = { P, Q } })
    U.fails_with({ "windows are too many" }, F.conv2d, fp8.zeros { 1, 1, 65538, 1 }, fp8.ones { 1, 1, 1, 1 }, nil,
      { padding = { P, Q } })
    U.fails_with({ "fold: 4295032832×4294901761 windows are too many" }, F.fold, fp8.ones { 1, 1, 65536 },
      { 65538, 1 }, 1, { padding = { P, Q } })
  end)

  it("1-d geometry past 2^31 - 1 is refused by its public name, and core errors carry no library position", function()
    local x = fp8.randn { 1, 2, 5 }
    U.fails_with({ "max_pool1d: stride: expected an integer in 1..2^31-1, got 2147483648" }, F.max_pool1d, x, 2,
      { stride = 1 << 31 })
    U.fails_with({ "conv1d: stride: expected an integer in 1..2^31-1, got 2147483648" }, F.conv1d, x,
      fp8.randn { 2, 2, 1 }, nil, { stride = 1 << 31 })
    local ok, err = pcall(F.conv2d, fp8.randn { 1, 2, 6, 6 }:quantize("e4m3"), fp8.randn { 4, 2, 3, 3 })
    assert.is_false(ok)
    assert.is_nil(err:find("conv_geometry.lua", 1, true), err)
  end)

  it("max pools' return_indices are limited by the input's plane, not the padded one", function()
    local _, i = F.max_pool2d(fp8.randn { 1, 1, 4096, 4096 }, 2, { return_indices = true, padding = 1 })
    assert.are.equal(16777215, i:max():item())
    U.fails_with({ "the positions in the 4097×4097 input plane would reach 16785408" }, F.max_pool2d,
      fp8.randn { 1, 1, 4097, 4097 }, 2, { return_indices = true })
    -- a window holding no input position (padding with dilation): -inf, index -1, no gradient
    local x = fp8.tensor { { { 1.5 } } }:requires_grad_()
    local y, idx = F.max_pool1d(x, 2, { stride = 2, padding = 1, dilation = 2, return_indices = true })
    assert.are.same({ -math.huge }, U.flat(y))
    assert.are.same({ -1 }, U.flat(idx))
  end)
end)
