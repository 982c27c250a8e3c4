-- Added on 2026-12-07 (stop 105): the strides torch 2.15 gives the view- and copy-producing ops of a channels_last
-- tensor (NHWC memory seen as [N, C, H, W]): detach and .data keep every stride, a size-1 dim's too (fp8lab's
-- detach was a view of the same shape, which recomputed N's stride of a [1, C, H, W]: {C, 1, W·C, C} for
-- {H·W·C, 1, W·C, C}, read as contiguous by torch's rule), so the norms and poolings of a detached N = 1 leaf keep
-- channels_last as torch's. torch's strides: tests/data/clviews_torch.lua (scripts/gen_clviews.py).
-- docs/robustness.md, "channels_last: adaptive pools and detach (stop 105)".
local F = fp8.nn.F
local U = dofile("tests/spec/helpers/util.lua")

local cl, strides = U.cl, U.same_strides   -- channels_last of a contiguous tensor; a stride check

local VIEWS = {
  detach = function(t) return t:detach() end,
  data = function(t) return t.data end,
  clone = function(t) return t:clone() end,
  float = function(t) return t:float() end,
  bf16 = function(t) return t:to("bf16") end,
  bf16_detach = function(t) return t:to("bf16"):detach() end,
  requires_grad = function(t) return t:clone():requires_grad_() end,
  requires_grad_detach = function(t) return t:clone():requires_grad_():detach() end,
}

local OPS = {
  bn_train = function(x) return F.batch_norm(x, nil, nil, nil, nil, true, 0.1, 1e-5) end,
  maxp = function(x) return F.max_pool2d(x, 2) end,
  avgp = function(x) return F.avg_pool2d(x, 2) end,
  aap1 = function(x) return F.adaptive_avg_pool2d(x, 1) end,
  aap = function(x) return F.adaptive_avg_pool2d(x, { 2, 3 }) end,
  amp = function(x) return F.adaptive_max_pool2d(x, { 2, 3 }) end,
}

local function input(S)
  local n = S.shape[1] * S.shape[2] * S.shape[3] * S.shape[4]
  return cl(fp8.arange(1, n + 1):reshape(S.shape))
end

describe("channels_last through views and copies (torch 2.15's strides)", function()
  it("keeps every stride through detach, .data, clone, to and requires_grad_", function()
    local T = dofile("tests/data/clviews_torch.lua")
    local failed = {}
    for _, sname in ipairs { "n1", "main", "hw1" } do
      local S = T[sname]
      local x = input(S)
      strides(sname .. " x", x:stride(), S.x)
      for vname, f in pairs(VIEWS) do
        local ok, err = pcall(strides, sname .. " " .. vname, f(x):stride(), S[vname])
        if not ok then failed[#failed + 1] = tostring(err) end
      end
    end
    assert(#failed == 0, #failed .. " forms differ from torch's:\n" .. table.concat(failed, "\n"))
  end)

  it("keeps channels_last through the norms and poolings of a detached N = 1 leaf, with the contiguous bits", function()
    local S = dofile("tests/data/clviews_torch.lua").n1
    local x = input(S) / 50
    local failed = {}
    for oname, op in pairs(OPS) do
      local ok, err = pcall(function()
        local leaf = x:detach():requires_grad_()
        local y = op(leaf)
        assert.are.same(S["op_" .. oname].shape, y:shape())
        strides("n1 " .. oname, y:stride(), S["op_" .. oname].y)
        y:backward(fp8.ones(y:shape()))
        local lc = x:contiguous():requires_grad_()
        local yc = op(lc)
        yc:backward(fp8.ones(yc:shape()))
        U.same_bits("n1 " .. oname .. " against the contiguous input's", y:contiguous(), yc)
        U.same_bits("n1 " .. oname .. " gradient against the contiguous input's", leaf.grad:contiguous(), lc.grad)
      end)
      if not ok then failed[#failed + 1] = tostring(err) end
    end
    assert(#failed == 0, #failed .. " ops differ from torch's:\n" .. table.concat(failed, "\n"))
  end)
end)
