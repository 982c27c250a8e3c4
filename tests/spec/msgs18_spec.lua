-- Found on 2026-12-07 (stop 101): the raw messages of the library's internal modules called directly, and the
-- norms' edge cases against torch 2.15 (p in {-inf, -2, -1, -0.5, 0, 0.5, 1, 2, 3, inf, nan} over zeros, NaN, inf,
-- one element, empty rows and plain numbers, fp32/bf16/fp16, values and gradients: tests/data/norm_edges_torch.lua,
-- made by `/opt/torch2/bin/python scripts/gen_norm_edges.py > tests/data/norm_edges_torch.lua`).
-- docs/robustness.md, "Raw messages and the norms' edge cases (stop 101)".
local U = dofile("tests/spec/helpers/util.lua")
local ref = dofile("tests/data/norm_edges_torch.lua")
local F = fp8.nn.functional

-- the fixture's inputs (scripts/gen_norm_edges.py's INPUTS and other())
local INPUTS = {
  plain = { { 1.5, -2.0, 0.5 }, { 3.0, 0.25, -4.0 } }, zeros = { { 0, 0, 0 }, { 0, 0, 0 } },
  somezero = { { 0, 2, -1 }, { 1, -1, 0 } }, nan = { { 1, 0 / 0, -2 }, { 0.5, 3, 4 } },
  inf = { { 1, math.huge, -2 }, { -math.huge, 3, 4 } }, one = { { -3 } },
}
local function make(name, dt)
  local x = INPUTS[name] and fp8.tensor(INPUTS[name], { dtype = dt }) or fp8.zeros({ 2, 0 }, { dtype = dt })
  return x:requires_grad_(true)
end
local function other(x)
  local vals, t = { 0.5, 1.0, -1.0, 2.0, -0.75, 0.125 }, {}
  for i = 1, x:numel() do t[i] = vals[i] end
  return fp8.tensor(x:numel() > 0 and t or {}, { dtype = x:dtype() }):reshape(x:shape())
end
local function flat(t) return t:numel() == 0 and {} or t:detach():float():reshape({ -1 }):tolist() end
local function records(op, pred)
  local out = {}
  for _, r in ipairs(ref) do if r.op == op and pred(r) then out[#out + 1] = r end end
  assert.is_true(#out > 0, op)
  return out
end
local TOL = { fp32 = 2e-6, bf16 = 8e-3, fp16 = 2e-3 }

describe("F.pairwise_distance takes p < 0 as torch 2.15 does", function()
  it("gives torch's values and gradients for p = -inf, -2, -1, -0.5 (fp32; bf16/fp16 values)", function()
    for _, r in ipairs(records("pairwise_distance", function(r) return r.p ~= "nan" and r.p < 0 and not r.error end)) do
      local x = make(r.input, r.dtype)
      local y = F.pairwise_distance(x, other(x), r.p)
      local where = ("%s %s p=%s"):format(r.input, r.dtype, tostring(r.p))
      U.near(r.y, flat(y), TOL[r.dtype], where .. " y")
      y:sum():backward()
      -- the zeros' signs are torch's but for the -inf norm's unselected elements (left: robustness.md), and bf16/fp16
      -- gradients differ by torch's rounding in the dtype (fp16's |d|^p of d = 1e-6 overflows in torch: NaN there)
      if r.dtype == "fp32" then U.near(r.g, flat(x.grad), 2e-5, where .. " grad", r.p == -math.huge) end
    end
  end)

  it("takes p < 0 in nn.PairwiseDistance and F.triplet_margin_loss, and refuses NaN and an empty last dim by name",
    function()
      local a, b = fp8.tensor { { 1, -2, 0.5 } }, fp8.tensor { { 0.5, 1, -1 } }
      U.near({ 0.5 }, flat(fp8.nn.PairwiseDistance(-math.huge, 0)(a, b)), 1e-6, "module -inf")
      local t = F.triplet_margin_loss(a, b, fp8.zeros { 1, 3 }, { p = -1, eps = 0 })
      -- d(a, b) = 1/(1/0.5 + 1/3 + 1/1.5), d(a, 0) = 1/(1 + 1/2 + 2): max(0, 1 + 1/3 - 2/7)
      U.near({ 1 + 1 / 3 - 2 / 7 }, { t:item() }, 1e-6, "triplet p=-1")
      U.fails_with("pairwise_distance: p must be a number (math.huge and -math.huge included, NaN not)",
        F.pairwise_distance, a, b, 0 / 0)
      for _, p in ipairs { -1, -math.huge, math.huge } do
        local err = U.fails_with("pairwise_distance: the ", F.pairwise_distance, fp8.zeros { 2, 0 }, fp8.zeros { 2, 0 }, p)
        assert.truthy(err:find("norm of an empty last dim has no value", 1, true), err)
      end
    end)
end)

describe("the inf-norm's gradient at a NaN element", function()
  it("is +0, as torch's (sgn(NaN) = 0), in fp32, bf16 and fp16, along a dim and over all", function()
    for _, op in ipairs { "norm", "norm_dim", "dist", "pairwise_distance" } do
      for _, r in ipairs(records(op, function(r) return r.input == "nan" and r.p == math.huge end)) do
        local x = make(r.input, r.dtype)
        local y = op == "norm" and x:norm(math.huge) or op == "norm_dim" and x:norm(math.huge, 2)
          or op == "dist" and x:dist(other(x), math.huge) or F.pairwise_distance(x, other(x), math.huge)
        y:sum():backward()
        U.near(r.g, flat(x.grad), 1e-6, ("%s %s grad"):format(op, r.dtype))
      end
    end
  end)
end)

describe("the -inf norm's gradient", function()
  it("is torch's to the zero's sign: sgn(x)·0 off the smallest |x| (-0 where x < 0), +0 at a NaN and at 0", function()
    for _, op in ipairs { "norm", "norm_dim", "dist", "pairwise_distance" } do
      for _, r in ipairs(records(op, function(r) return r.p == -math.huge and not r.error and r.g end)) do
        local x = make(r.input, r.dtype)
        local y = op == "norm" and x:norm(-math.huge) or op == "norm_dim" and x:norm(-math.huge, 2)
          or op == "dist" and x:dist(other(x), -math.huge) or F.pairwise_distance(x, other(x), -math.huge)
        y:sum():backward()
        local where = ("%s %s %s"):format(op, r.input, r.dtype)
        U.near(r.y, flat(y), TOL[r.dtype], where .. " y")
        U.near(r.g, flat(x.grad), TOL[r.dtype], where .. " grad")
      end
    end
  end)

  it("keeps its value without a graph, over a list of dims and with keepdim", function()
    local x = fp8.tensor { { { 3, -1 }, { 2, -5 } }, { { 0 / 0, 4 }, { 6, 7 } } }
    U.near({ 1, 0 / 0 }, flat(x:norm(-math.huge, { 2, 3 })), 0, "list")
    assert.are.same({ 2, 1, 1 }, x:norm(-math.huge, { 2, 3 }, true):shape())
    local xg = x:detach():requires_grad_(true)
    xg:norm(-math.huge, { 2, 3 }):sum():backward()
    U.near({ 0, -1, 0, -0.0, 0, 0, 0, 0 }, flat(xg.grad), 0, "list grad")
  end)
end)

describe("clip_grad_norm_ and get_total_norm at p = inf over an empty gradient", function()
  it("refuse it by their own name (amax's message at the library's line before)", function()
    local w = fp8.nn.Parameter(fp8.zeros { 2, 0 })
    w.grad = fp8.zeros { 2, 0 }
    local err = U.fails_with("clip_grad_norm_: the inf norm of an empty tensor has no value", fp8.nn.utils.clip_grad_norm_,
      { w }, 1, math.huge)
    assert.is_nil(err:find("amax", 1, true), err)
    U.fails_with({ "get_total_norm: the inf norm of an empty tensor has no value", "entry 2 is [0]" },
      fp8.nn.utils.get_total_norm, { fp8.ones { 2 }, fp8.zeros { 0 } }, math.huge)
  end)
end)

describe("fp8.cdist at its edges, as torch 2.15's", function()
  it("gives zeros for p = inf over no coordinates, and NaN for p = 0 where a coordinate is NaN", function()
    for _, r in ipairs(records("cdist", function(r)
      return r.dtype == "fp32" and ((r.input == "empty" and r.p == math.huge) or (r.input == "nan" and r.p == 0))
    end)) do
      local x = make(r.input, r.dtype)
      local y = fp8.cdist(x, other(x), r.p)
      U.near(r.y, flat(y), 1e-6, r.input .. " y")
      y:sum():backward()
      U.near(r.g, flat(x.grad), 1e-6, r.input .. " grad")
    end
  end)
end)

describe("the library's internal modules called from a user's code", function()
  it("name the function and what it got, for Lua's raw errors and for messages without the name", function()
    for _, c in ipairs {
      { function() return require("fp8.ddp").agree() end, "fp8.ddp.agree: got (nil, nil) where it takes (acc, model)" },
      { function() return require("fp8.nn.conv_geometry").fold(5) end, "fp8.nn.conv_geometry.fold: got (5" },
      { function() return require("fp8.model_files").join(1, 2) end, "fp8.model_files.join: got (1, 2) where it takes" },
      { function() return require("fp8.fp8_state").unpack(5) end,
        "fp8.fp8_state.unpack: FP8 recipe state: expected a 1-d tensor, got number" },
      { function() return require("fp8.opts").check("x", {}, nil) end,
        "fp8.opts.check: x: the valid names must be a table" },
      { function() return require("fp8.distributed").shard({}) end, "fp8.distributed.shard: acc must be an Accelerator" },
      { function() return require("fp8.prof_op")("add", nil, nil, nil) end, "fp8.prof_op: fn must be a function" },
      { function() return require("fp8.optim.msamp_adamw").from_adamw({ param_groups = { 5 } }) end,
        "from_adamw: expected an AdamW optimizer, whose param_groups are tables, got 5 as group 1" },
    } do
      local err = U.fails_with(c[2], c[1])
      assert.is_nil(err:find("attempt to", 1, true), err)
      assert.is_nil(err:find("lua/fp8/[%w_/]+%.lua:%d+: "), err)   -- not at the library's line
    end
  end)

  it("and the public entries the whole API's --messages sweep listed name the problem (progress, GradScaler)", function()
    -- fp8.progress(2, {total = math.huge}) raised "bad argument #2 to 'format' (number has no integer representation)"
    -- from its line; GradScaler:unscale_ of an optimizer-like table whose groups or parameters are numbers "attempt to
    -- index a number value (local 'g')"
    assert.truthy(fp8.progress(2, { total = math.huge }):line():find("0/inf", 1, true))
    assert.truthy(fp8.progress(2, { total = 1.5 }):line():find("0/1.50", 1, true))
    local s = fp8.amp.GradScaler()
    U.fails_with("GradScaler: the optimizer's param_groups[1] must be a parameter group (a table), got 5", s.unscale_, s,
      { param_groups = { 5 } })
    U.fails_with("GradScaler: the optimizer's parameter 1 must be a tensor, got 5", s.unscale_, s, { params = { 5 } })
  end)

  it("keep their messages and levels when the library calls them (a public function's refusal is unchanged)", function()
    U.fails_with("Linear: unknown option", fp8.nn.Linear, 2, 3, { nope = 1 })
    local err = U.fails_with("conv2d:", F.conv2d, fp8.zeros { 1, 1, 4, 4 }, fp8.zeros { 1, 1, 3, 3 }, nil, { stride = 0 })
    assert.is_nil(err:find("conv_geometry", 1, true), err)
  end)
end)
