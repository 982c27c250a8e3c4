-- hist_spec.lua — fp8.hist on tensors whose FP8 histogram is known by hand (docs/concepts.md §Scaling):
-- every value's binade, subnormal, underflow and saturation worked out from the format tables.
local fp8 = fp8 or require "fp8"

local function quiet_hist(t, fmt, o)
  o = o or {}
  o.quiet = true
  return fp8.hist(t, fmt, o)
end

describe("fp8.hist", function()
  it("counts each value of a hand-made tensor in its E4M3 bucket (scale 1)", function()
    -- 0 exact zero; 1, 1.5 in [2^0,2^1); 2, 3 in [2^1,2^2); -4 in [2^2,2^3); 2^-8 and 0.001 subnormal
    -- (E4M3 subnormals 2^-9..2^-6, 0.001 > 2^-10 rounds up to 2^-9); 1e-4 < 2^-10 underflows; 1000 saturates.
    local t = fp8.tensor{0, 1, 1.5, 2, 3, 0.001, 0.0001, 1000, 2^-8, -4}
    local h = quiet_hist(t, "e4m3", {scale = 1})
    assert.are.equal(10, h.n)
    assert.are.equal(2, h.bins[0]); assert.are.equal(2, h.bins[1]); assert.are.equal(1, h.bins[2])
    assert.is_nil(h.bins[8])    -- the saturated value is not counted in the top binade
    assert.are.equal(2, h.subnormal); assert.are.equal(1, h.underflow); assert.are.equal(1, h.saturated)
    assert.are.equal(1, h.zero)
    assert.are.equal(0, h.lo); assert.are.equal(2, h.hi)
    assert.are.equal(0.1, h.underflow_frac)
    assert.are.equal(0.1, h.zero_frac)   -- the zero that was zero already, not the underflow
    assert.are.equal(0.2, h.subnormal_frac); assert.are.equal(0.1, h.saturated_frac)
  end)

  it("E5M2 keeps what E4M3 loses at the bottom and does not saturate 1000", function()
    local t = fp8.tensor{0.0001, 1000, 2^-15}
    local h = quiet_hist(t, "e5m2", {scale = 1})
    -- 1e-4 in [2^-14, 2^-13); 1000 rounds to 1024 (neighbours 896, 1024) in [2^10, 2^11); 2^-15 is an E5M2 subnormal
    assert.are.equal(1, h.bins[-14]); assert.are.equal(1, h.bins[10]); assert.are.equal(1, h.subnormal)
    assert.are.equal(0, h.underflow); assert.are.equal(0, h.saturated)
  end)

  it("with the default scale (fp8_max/amax) the largest value lands in the top binade", function()
    local t = fp8.tensor{1e-3, 2e-3, 4e-3}
    local h = quiet_hist(t, "e4m3")
    assert.are.equal(1, h.bins[8]); assert.are.equal(1, h.bins[7]); assert.are.equal(1, h.bins[6])
    assert.are.equal(0, h.saturated); assert.are.equal(0, h.underflow)
    assert.is_true(math.abs(h.scale - 448 / 4e-3) / h.scale < 1e-6)
  end)

  it("reads an FP8 tensor as it is, and prints a table plus a one-line summary", function()
    local q = fp8.tensor{1, 2, 0}:quantize("e4m3", {scale = 1})
    local h = quiet_hist(q)
    assert.are.equal(1, h.bins[0]); assert.are.equal(1, h.bins[1]); assert.are.equal(1, h.zero)
    assert.matches("fp8.hist e4m3: 3 values, underflow 0.00%%", tostring(h))
    local lines = {}
    local old = _G.print
    _G.print = function(s) lines[#lines + 1] = s end
    local ok, err = pcall(fp8.hist, fp8.tensor{1, 2, 1000, 300}, "e4m3", {scale = 1})
    _G.print = old
    assert.is_true(ok, err)
    local text = table.concat(lines, "\n")
    assert.matches("saturated to %+%-448", text)
    -- the top binade's source range ends at max, where the saturated line starts (it said 256 .. 512)
    assert.matches("%[2%^8, 2%^9%)%s+256 %.%. 448 ", text)
    assert.matches("%[2%^1, 2%^2%)", text)
  end)

  it("under the IEEE policy counts an overflow once, as a NaN or inf, and leaves the max values in their binade",
    function()
    local h = quiet_hist(fp8.tensor { 448, 1000, 1, 0, 460 }:quantize("e4m3", { scale = 1, saturate = false }))
    assert.are.equal(0, h.saturated); assert.are.equal(1, h.nan); assert.are.equal(1, h.overflow)
    assert.are.equal(2, h.bins[8])   -- 448 and 460 (which rounds to 448) are the max, not clamped
    h = quiet_hist(fp8.tensor { 57344, 1e6, 0 / 0 }:quantize("e5m2", { scale = 1, saturate = false }))
    assert.are.equal(0, h.saturated); assert.are.equal(1, h.inf); assert.are.equal(1, h.nan)
    assert.are.equal(1, h.overflow); assert.are.equal(1, h.bins[15])
    -- the one-line summary says so (it read "saturated 0.00%" alone)
    assert.matches("saturated 0.00%, overflowed 33.33%", tostring(h), 1, true)
    -- every count has its share, as the docs promise (*_frac): overflow, nan and inf had none
    assert.are.equal(1 / 3, h.overflow_frac); assert.are.equal(1 / 3, h.nan_frac); assert.are.equal(1 / 3, h.inf_frac)
    -- saturating: a NaN source is no overflow
    h = quiet_hist(fp8.tensor { 448, 1000, 0 / 0 }:quantize("e4m3", { scale = 1 }))
    assert.are.equal(1, h.saturated); assert.are.equal(0, h.overflow); assert.are.equal(1, h.bins[8])
  end)

  it("keeps the NaN and inf bars within the width (a tensor of 1000 NaNs drew one of 40000 #)", function()
    local lines = {}
    local old = _G.print
    _G.print = function(s) lines[#lines + 1] = s end
    local ok, err = pcall(fp8.hist, fp8.cat { fp8.full({ 1000 }, 0 / 0), fp8.tensor { 1 } }, "e4m3", { scale = 1 })
    local infs = fp8.cat { fp8.full({ 500 }, 1 / 0), fp8.tensor { 1 } }
    infs = infs:quantize("e5m2", { scale = 1, saturate = false })
    local ok2, err2 = pcall(fp8.hist, infs, nil, { width = 10 })
    _G.print = old
    assert.is_true(ok, err); assert.is_true(ok2, err2)
    local nan_bar, inf_bar
    for _, l in ipairs(lines) do
      if l:match("^  NaN ") then nan_bar = l:match("(#*)$") end
      if l:match("^  inf") then inf_bar = l:match("(#*)$") end
    end
    assert.are.equal(40, #nan_bar)
    assert.are.equal(10, #inf_bar)
  end)

  it("draws no bars with width=0 (each nonzero line drew one #)", function()
    local lines = {}
    local old = _G.print
    _G.print = function(s) lines[#lines + 1] = s end
    local ok, err = pcall(fp8.hist, fp8.tensor { 1, 2, 1000, 0, 1e-9 }, "e4m3", { scale = 1, width = 0 })
    _G.print = old
    assert.is_true(ok, err)
    assert.is_true(#lines > 5)
    for _, l in ipairs(lines) do assert.is_nil(l:find("#", 1, true), l) end
  end)

  it("files infinite sources with the saturated values, not in the top binade", function()
    local h = quiet_hist(fp8.tensor { math.huge, -math.huge, 1, 448 }, "e4m3", { scale = 1 })
    assert.are.equal(2, h.saturated)
    assert.are.equal(1, h.bins[8])   -- 448 itself is representable: it is in its binade
    assert.are.equal(1, h.bins[0])
  end)

  it("refuses a view of part of an FP8 tensor, whose cast counters are the whole tensor's", function()
    local q = fp8.tensor { { 0, 0, 1, 1 }, { 1e-6, 1e-6, 1, 1000 } }:quantize("e4m3", { scale = 1 })
    assert.is_nil(q:qstats().part)
    assert.is_nil(q:transpose(1, 2):qstats().part)
    assert.is_nil(q:narrow(1, 1, 2):qstats().part)
    for _, v in ipairs { q[1], q:narrow(1, 1, 1), q:narrow(2, 2, 2), q:narrow(2, 2, 2):contiguous() } do
      assert.is_true(v:qstats().part)
      assert.matches("saturated=1 %(of the whole cast this is part of%)", tostring(v))
      local ok, err = pcall(fp8.hist, v, nil, { quiet = true })
      assert.is_false(ok)
      assert.truthy(err:find("hist: this FP8 tensor is part of a cast", 1, true), err)
    end
    local h = quiet_hist(q)
    assert.are.equal(2, h.underflow)
    assert.are.equal(1, h.saturated)
  end)

  it("refuses an expand that repeats an FP8 tensor's elements, whose cast counted each once", function()
    local q = fp8.tensor { { 1e-9, 100, 3 } }:quantize("e4m3")
    assert.is_nil(q:expand(1, 3):qstats().part)
    assert.is_nil(q:unsqueeze(1):expand(1, 1, 3):qstats().part)
    local e = q:expand(4, 3)
    assert.is_true(e:qstats().part)
    -- was n 12, underflow 1 (1/12) and 3 exact zeros: the three copies of the underflowed value
    local ok, err = pcall(fp8.hist, e, nil, { quiet = true })
    assert.is_false(ok)
    assert.truthy(err:find("hist: this FP8 tensor is part of a cast (a select or narrow view, an expand", 1, true), err)
  end)

  it("takes the format under any of its names, as quantize does (\"E4M3\" and \"float8_e5m2\" were refused)", function()
    assert.are.equal("e4m3", quiet_hist(fp8.tensor { 1 }, "E4M3").format)
    assert.are.equal("e5m2", quiet_hist(fp8.tensor { 1 }, "float8_e5m2").format)
    assert.are.equal(1, quiet_hist(fp8.tensor { 1000 }, "fp8_e4m3", { scale = 1 }).saturated)
    assert.are.equal("e4m3", quiet_hist(fp8.tensor { 1 }:quantize("e4m3"), "Float8_E4M3FN").format)
    local ok, err = pcall(fp8.hist, fp8.tensor { 1 }:quantize("e4m3"), "E5M2")
    assert.is_false(ok); assert.matches("already e4m3", err)
    ok, err = pcall(fp8.hist, fp8.tensor { 1 }, "bf16")
    assert.is_false(ok); assert.matches("expected \"e4m3\" or \"e5m2\", got bf16", err, 1, true)
  end)

  it("refuses bad arguments with messages naming hist", function()
    assert.has_error(function() fp8.hist(42, "e4m3") end)
    local ok, err = pcall(fp8.hist, fp8.tensor{1}, "e3m4")
    assert.is_false(ok); assert.matches("hist", err); assert.matches("e4m3", err)
    ok, err = pcall(fp8.hist, fp8.tensor{1}, "e4m3", {bins = 3})
    assert.is_false(ok); assert.matches("unknown option 'bins'", err)
    ok, err = pcall(fp8.hist, fp8.tensor{1}, "e4m3", {scale = -1})
    assert.is_false(ok); assert.matches("hist: scale must be a finite number > 0, got -1", err, 1, true)
    ok, err = pcall(fp8.hist, fp8.tensor{1}:quantize("e4m3"), "e5m2")
    assert.is_false(ok); assert.matches("already e4m3", err)
    ok, err = pcall(fp8.hist, fp8.tensor{1}:quantize("e4m3"), nil, {scale = 2})
    assert.is_false(ok); assert.matches("needs a float tensor", err)
  end)
end)

describe("docs/concepts.md: looking inside a training step with hooks", function()
  it("a backward pre-hook per block catches the gradient at its output, which fp8.hist reads", function()
    fp8.manual_seed(0)
    local m = fp8.nn.GPT { vocab_size = 96, block_size = 32, n_layer = 2, n_head = 4, n_embd = 64 }
    local grads = {}
    for i = 1, #m.blocks do m.blocks[i]:register_full_backward_pre_hook(function(_, go) grads[i] = go[1] end) end
    local r = {}
    for b = 1, 4 do r[b] = {} for t = 1, 32 do r[b][t] = (b * 7 + t * 13) % 96 end end
    local ids = fp8.tensor(r)
    local _, loss = m(ids, ids)
    loss:backward()
    assert.are.same({ 4, 32, 64 }, grads[1]:shape())
    assert.are.same({ 4, 32, 64 }, grads[2]:shape())
    local unscaled = quiet_hist(grads[1], "e5m2", { scale = 1 })
    local scaled = quiet_hist(grads[1], "e5m2")
    assert.are.equal(8192, unscaled.n)
    -- gradients of a cross-entropy over 8192 logits are small: unscaled, some land below E5M2's normals
    assert.is_true(unscaled.subnormal + unscaled.underflow > 0)
    assert.are.equal(0, scaled.underflow)
    assert.is_true(unscaled.hi < 0)            -- every binade below 1
  end)
end)
