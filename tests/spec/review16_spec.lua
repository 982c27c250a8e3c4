-- Found on 2026-12-07 (stop 99): stop 98's code read again as a reviewer who assumes it is wrong (conv2d's direct
-- route by oneDNN and its primitive cache, the norms' rescue in the core and its CUDA kernels, the hooks removed
-- mid-backward, normalize/norm/dist for every p, the schedulers' state checks, renorm in fp32, the conv and pool
-- reprs). docs/robustness.md, "Stop 98's code read again (stop 99)".
-- scripts/gen_review16.py (/opt/torch2/bin/python scripts/gen_review16.py) printed torch 2.15's reprs and refusals
-- these cases follow.
local U = dofile("tests/spec/helpers/util.lua")
local ends, lying = U.ends, U.lying   -- a call under a budget of instructions; the sweep's lying table
local nn = fp8.nn

describe("the transposed convolutions' repr", function()
  -- Sweep 110 made Conv1d/Conv2d's and the poolings' reprs show a field written by hand as it holds it; the
  -- transposed convolutions kept the old extra_repr: table.concat of a list field, so a table whose __len lies ran
  -- for ever in tostring(m), and string.format's %d, whose raw error a string in_channels or a fractional groups was
  it("ends on a lying field and shows one written by hand", function()
    for _, k in ipairs { "kernel_size", "stride", "padding", "dilation", "output_padding" } do
      for _, m in ipairs { nn.ConvTranspose2d(4, 6, 3, { groups = 2 }), nn.ConvTranspose1d(4, 6, 3) } do
        m[k] = lying()
        local ok, s = ends(tostring, m)
        assert.is_true(ok, k .. ": " .. tostring(s))
        assert.truthy(s:find("ConvTranspose%dd%(4, 6"), s)
      end
    end
    local m = nn.ConvTranspose2d(4, 6, 3)
    m.in_channels, m.groups = "four", "2"
    assert.are.equal("ConvTranspose2d(four, 6, kernel_size=(3, 3), stride=1, padding=0, groups=2)", tostring(m))
    m = nn.ConvTranspose1d(4, 6, 3)
    m.groups = 2.5
    assert.are.equal("ConvTranspose1d(4, 6, kernel_size=(3), stride=1, padding=0, groups=2.5)", tostring(m))
  end)
end)

describe("a convolution's repr", function()
  -- torch's repr shows a dilation other than 1 (after padding, before output_padding: 'Conv2d(4, 6,
  -- kernel_size=(3, 3), stride=(1, 1), dilation=(2, 2))'); Conv1d/Conv2d's left it out, so two convs of other
  -- geometries printed alike, and ConvTranspose's showed it after output_padding
  it("shows a dilation other than 1, in torch's order", function()
    assert.are.equal("Conv2d(4, 6, kernel_size=(3, 3), stride=1, padding=0, dilation=2)",
      tostring(nn.Conv2d(4, 6, 3, { dilation = 2 })))
    assert.are.equal("Conv1d(4, 6, kernel_size=(3), stride=1, padding=0, dilation=3)",
      tostring(nn.Conv1d(4, 6, 3, { dilation = 3 })))
    assert.are.equal("Conv2d(4, 6, kernel_size=(3, 3), stride=1, padding=0, dilation=(1, 2), groups=2)",
      tostring(nn.Conv2d(4, 6, 3, { dilation = { 1, 2 }, groups = 2 })))
    assert.are.equal("Conv2d(4, 6, kernel_size=(3, 3), stride=1, padding=0)",
      tostring(nn.Conv2d(4, 6, 3, { dilation = { 1, 1 } })))
    assert.are.equal("ConvTranspose2d(2, 4, kernel_size=(3, 3), stride=2, padding=0, dilation=2, output_padding=1, "
      .. "groups=2)", tostring(nn.ConvTranspose2d(2, 4, 3, { stride = 2, dilation = 2, output_padding = 1,
        groups = 2 })))
    assert.are.equal("ConvTranspose1d(2, 4, kernel_size=(3), stride=1, padding=0, dilation=2)",
      tostring(nn.ConvTranspose1d(2, 4, 3, { dilation = 2 })))
  end)
end)

describe("renorm of fewer than 2 dims", function()
  -- torch 2.15 refuses it ('renorm: input needs at least 2 dimensions, got 1 dimensions'); a 1-d x was taken here,
  -- each element its own slice (|x| clamped to maxnorm, {3, 4} gave {1, 1})
  it("is refused by name, as torch's; 2-d stays", function()
    U.fails_with("renorm: input needs at least 2 dims (torch's too), got 1-d [2]", function()
      return fp8.tensor({ 3, 4 }):renorm(2, 1, 1)
    end)
    U.fails_with("renorm: input needs at least 2 dims (torch's too), got 0-d []", function()
      return fp8.renorm(fp8.tensor(3), 2, 1, 1)
    end)
    local r = fp8.tensor({ { 3, 4 } }):renorm(2, 1, 1):totable()[1]
    assert.is_true(math.abs(r[1] - 0.6) < 1e-6 and math.abs(r[2] - 0.8) < 1e-6)
  end)
end)

describe("the norms' rescue's refusals", function()
  -- core/norm_rescue.c formatted r's and x's shapes into one buffer, so 'norms [5] and sums [7] must hold one value
  -- per slice of tensor [5]' named the norms' shape for x's [2, 3]; a mask out of range was 'bad argument (a mask of
  -- reduced dims)' without its value, a NaN p '-nan'
  local x = fp8.ones { 2, 3 }
  it("name each operand's shape and the value refused", function()
    U.fails_with("norm_rescue: norms [5] and sums [7] must hold one value per slice of tensor [2, 3] (3)", function()
      return fp8.ones({ 5 }):_norm_rescue(fp8.ones { 7 }, x, 1, 2)
    end)
    U.fails_with("expected a mask of reduced dims in [0, 255], got 1024", function()
      return fp8.ones({ 3 }):_norm_rescue(fp8.ones { 3 }, x, 1024, 2)
    end)
    U.fails_with("norm_rescue: p must be a finite number > 0, got NaN", function()
      return fp8.ones({ 3 }):_norm_rescue(fp8.ones { 3 }, x, 1, 0 / 0)
    end)
    U.fails_with("norm_rescue: p must be a finite number > 0, got -2", function()
      return fp8.ones({ 3 }):_norm_rescue(fp8.ones { 3 }, x, 1, -2)
    end)
  end)
end)
