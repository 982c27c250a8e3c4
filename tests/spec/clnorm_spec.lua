-- Added on 2026-12-07 (stop 103): a channels_last 4-D input (NHWC memory seen as [N, C, H, W]) keeps its layout through
-- batch_norm (training and eval), group_norm, max_pool2d, avg_pool2d, adaptive_avg_pool2d, adaptive_max_pool2d and
-- dropout, result and input gradient, as through torch 2.15's (they allocate both in the input's
-- suggest_memory_format; dropout's mask is the input's empty_like); instance_norm and layer_norm give a contiguous
-- result and gradient in both. torch's strides and values: tests/data/clnorm_torch.lua (scripts/gen_clnorm.py), the
-- shapes [2, 3, 4, 5] and torch's ambiguous ones (C = 1, H = W = 1, N = 1), fp32 and bf16. The values are also the
-- contiguous input's bits: the poolings and the eval pass do the same arithmetic in the same order in NHWC memory;
-- the training norms' statistics are summed in another order (per channel along the rows, in double: stop 104) and
-- round the same on these cases, so a failure of that check alone, on a new case, is one statistic's last bit (see
-- docs/robustness.md); dropout's mask is drawn in memory order, so only its rule (0 or x / (1 - p), the gradient
-- through the same mask) is checked. docs/performance.md and
-- docs/lua-api.md, "channels_last through norms and pooling (stop 104)".
local nn = fp8.nn
local F = nn.F
local U = dofile("tests/spec/helpers/util.lua")

local cl, same_list = U.cl, U.same_strides   -- channels_last of a contiguous tensor; a stride check

-- gen_clnorm.py's ops(C), as fp8lab spells them
local function ops(C)
  local w, b = fp8.linspace(0.5, 1.5, C), fp8.linspace(-0.25, 0.25, C)
  local rm, rv = fp8.linspace(-0.1, 0.1, C), fp8.linspace(0.8, 1.2, C)
  return {
    bn_train = function(x, st) return F.batch_norm(x, st[1], st[2], w, b, true, 0.1, 1e-5) end,
    bn_eval = function(x) return F.batch_norm(x, rm, rv, w, b, false, 0.1, 1e-5) end,
    gn1 = function(x) return F.group_norm(x, 1, w, b, 1e-5) end,
    gnc = function(x) return F.group_norm(x, C, w, b, 1e-5) end,
    ["in"] = function(x) return F.instance_norm(x, nil, nil, w, b, true, 0.1, 1e-5) end,
    ln_chw = function(x) return F.layer_norm(x, { x:size(2), x:size(3), x:size(4) }, nil, nil, 1e-5) end,
    ln_w = function(x) return F.layer_norm(x, { x:size(4) }, nil, nil, 1e-5) end,
    maxp = function(x) return F.max_pool2d(x, 3, { stride = 2, padding = 1 }) end,
    avgp = function(x) return F.avg_pool2d(x, 3, { stride = 2, padding = 1 }) end,
    aap = function(x) return F.adaptive_avg_pool2d(x, { 2, 3 }) end,
    aap1 = function(x) return F.adaptive_avg_pool2d(x, 1) end,
    amp = function(x) return F.adaptive_max_pool2d(x, { 2, 3 }) end,
    drop = function(x) return F.dropout(x, 0.5, true) end,
  }
end

-- (stop 105: the adaptive poolings, left at stop 103 and 104 with contiguous results and gradients, now give torch's
-- strides too: a channels_last result and gradient, but for the 1×1 average's gradient, contiguous as torch's)
local LEFT = {}

-- y = op(x) of the leaf's x = leaf * 1 and y:backward(gy): y, the gradient x's hook saw, the running statistics
local function run(op, x0, gy, C, layout)
  local leaf = layout(x0):requires_grad(true)
  local x = leaf * 1
  local seen
  x:register_hook(function(g) seen = g; return nil end)
  local st = { fp8.linspace(-0.1, 0.1, C), fp8.linspace(0.8, 1.2, C) }
  local y = op(x, st)
  y:backward(layout(gy))
  return y, seen, st
end

local function close(what, got, want, dt)
  local g = got:to("fp32"):contiguous():reshape(-1):totable()
  assert.are.equal(#want, #g, what)
  -- (bf16: 2^-7, relative, absolute below 1; layer_norm's bf16 gradient 2^-4: it is up to 0.025 from torch's on the
  -- contiguous input too, main's bits, left to its own stop)
  local tol = dt == "fp32" and 2e-5 or what:find("^%S+ ln_") and what:find("gradient") and 2 ^ -4 or 2 ^ -7
  for i = 1, #want do
    if not (math.abs(g[i] - want[i]) <= tol * math.max(1, math.abs(want[i]))) then
      error(("%s[%d]: %.9g, torch's %.9g"):format(what, i, g[i], want[i]), 2)
    end
  end
end

describe("channels_last through norms, poolings and dropout (torch 2.15's layouts)", function()
  it("gives torch's strides and values, and the contiguous input's bits, for every op, shape and dtype", function()
    local T = dofile("tests/data/clnorm_torch.lua")
    local function id(t) return t end
    local failed = {}
    for _, sname in ipairs { "main", "c1", "hw1", "n1" } do
      local S = T[sname]
      local C = S.shape[2]
      for oname, op in pairs(ops(C)) do
        for _, dt in ipairs { "fp32", "bf16" } do
          local want = S[oname .. "_" .. dt]
          local what = sname .. " " .. oname .. " " .. dt
          local ok, err = pcall(function()
          if want then
            local x0 = fp8.tensor(S.x):reshape(S.shape):to(dt)
            same_list(what .. " x", cl(x0):stride(), S.x_strides)
            local gy = fp8.tensor(S[oname .. "_gy"]):reshape(want.shape):to(dt)
            local y, g, st = run(op, x0, gy, C, cl)
            if not LEFT[oname] then
              same_list(what .. " result", y:stride(), want.y)
              same_list(what .. " gradient", g:stride(), want.dx)
            end
            if oname == "drop" then
              local xv, yv, gv, gyv = x0:to("fp32"):reshape(-1):totable(), y:to("fp32"):contiguous():reshape(-1):totable(),
                g:to("fp32"):contiguous():reshape(-1):totable(), gy:to("fp32"):reshape(-1):totable()
              local kept = 0
              for i = 1, #xv do
                if yv[i] ~= 0 then
                  kept = kept + 1
                  assert(yv[i] == xv[i] * 2 and gv[i] == gyv[i] * 2, what .. ": not x / (1 - p)")
                else
                  assert(xv[i] == 0 or gv[i] == 0, what .. ": a dropped element's gradient")
                end
              end
              assert(kept > 0 and (#xv < 8 or kept < #xv), what .. ": no mask")
            else
              close(what .. " result", y, want.y_v, dt)
              -- torch 2.15's instance_norm of a channels_last N = 1 input hands back a wrong gradient (4.6 off its
              -- group_norm's, which ours and its contiguous instance_norm's match): that one is checked by the
              -- contiguous input's bits alone
              if not (sname == "n1" and oname == "in") then close(what .. " gradient", g, want.dx_v, dt) end
              if want.rm then close(what .. " running_mean", st[1], want.rm, "fp32"); close(what .. " running_var", st[2], want.rv, "fp32") end
              local yc, gc = run(op, x0, gy, C, id)
              U.same_bits(what .. " result against the contiguous input's", y:contiguous(), yc)
              U.same_bits(what .. " gradient against the contiguous input's", g:contiguous(), gc)
            end
          end
          end)
          if not ok then failed[#failed + 1] = tostring(err) end
        end
      end
    end
    -- every case's first failure at once (which op, shape and dtype)
    assert(#failed == 0, #failed .. " cases differ from torch's:\n" .. table.concat(failed, "\n"))
  end)

  it("keeps channels_last through batch_norm's eval kernel (no gradient recorded)", function()
    local T = dofile("tests/data/clnorm_torch.lua")
    for _, sname in ipairs { "main", "n1", "hw1" } do
      local S = T[sname]
      for _, dt in ipairs { "fp32", "bf16" } do
        local want = S["bn_eval_" .. dt]
        local x0 = fp8.tensor(S.x):reshape(S.shape):to(dt)
        local y, yc = fp8.no_grad(function()
          local op = ops(S.shape[2]).bn_eval
          return op(cl(x0)), op(x0)
        end)
        same_list(sname .. " bn_eval " .. dt .. " (no grad)", y:stride(), want.y)
        U.same_bits(sname .. " bn_eval " .. dt .. " (no grad)", y:contiguous(), yc)
        close(sname .. " bn_eval " .. dt .. " (no grad)", y, want.y_v, dt)
      end
    end
  end)
end)
