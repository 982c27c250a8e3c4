-- likelihood_losses.lua — torch's negative log-likelihood losses of a distribution's parameters, in
-- fp8.nn.functional: gaussian_nll_loss (a mean and a variance) and poisson_nll_loss (a rate) (their modules:
-- lua/fp8/nn/losses.lua). Made of differentiable tensor ops with torch's formulas and checks.
local O = require "fp8.opts"
local F = require "fp8.nn.functional"
local core = require "fp8.core"
local U = F._util
local check_tensor, check_opts, reduce_loss, where = U.check_tensor, U.check_opts, U.reduce_loss, U.where
local no_more = O.no_more

local function flag(fname, opts, key)
  local v = opts[key]
  if v ~= nil and type(v) ~= "boolean" then
    error(("%s: %s must be a boolean, got %s"):format(fname, key, O.got(v)), 3)
  end
  return v
end
local function eps_of(fname, opts, default)
  local v = opts.eps
  if v == nil then return default end
  if type(v) ~= "number" or not (v >= 0 and v < math.huge) then
    error(("%s: eps must be a finite number >= 0, got %s"):format(fname, O.got(v)), 3)
  end
  return v
end
-- gaussian_nll_loss(input, target, var [, {full=false, eps=1e-6, reduction="mean"}]): 0.5·(log v + (input −
-- target)² / v) (+ 0.5·log 2π with full), v = var clamped at eps (the clamp passes var's gradient through, as
-- torch's, which clamps a copy without grad). var: input's shape, or one fewer dim (the last unsqueezed), or one dim
-- of size 1 where input's differs, or a number >= 0 for all
function F.gaussian_nll_loss(x, t, var, opts, ...)
  local N = "gaussian_nll_loss"
  no_more(N, "(input, target, var [, {full=, eps=, reduction=}])", ...)
  check_tensor(N, "input", x); check_tensor(N, "target", t)
  opts = check_opts(N, opts, { full = true, eps = true, reduction = true })
  local full, eps, red = flag(N, opts, "full"), eps_of(N, opts, 1e-6), opts.reduction
  if type(var) == "number" then
    if not (var >= 0) then error(("%s: var has negative entry/entries (got %s)"):format(N, O.got(var)), 2) end
    var = core.full(x:shape(), var):to(x:dtype()):to(x:device())
  else
    check_tensor(N, "var", var)
    if var:detach():lt(0):any():item() == 1 then error(("%s: var has negative entry/entries"):format(N), 2) end
    local xs, vs = x:shape(), var:shape()
    local same = #xs == #vs
    for i = 1, #xs do same = same and xs[i] == vs[i] end
    if not same then
      local short = #vs == #xs - 1
      for i = 1, #vs do short = short and vs[i] == xs[i] end
      if short then
        var = var:unsqueeze(-1)
      else
        local off = 0
        if #vs == #xs then for i = 1, #xs do if xs[i] ~= vs[i] then off = off + vs[i] end end end
        if #vs ~= #xs or off ~= 1 then
          error(("%s: var is of incorrect size %s for input %s (give input's shape, one dim fewer, or one dim of "
            .. "size 1)"):format(N, var:shape_str(), x:shape_str()), 2)
        end
      end
    end
  end
  local vd = var:detach()
  local v = var + (vd:clamp_min(eps) - vd)   -- the clamp's value, var's own gradient
  local d = x - t
  local loss = (v:log() + d * d / v) * 0.5
  if full then loss = loss + 0.5 * math.log(2 * math.pi) end
  return reduce_loss(N, loss, red)
end

-- poisson_nll_loss(input, target [, {log_input=true, full=false, eps=1e-8, reduction="mean"}]): exp(input) −
-- target·input (log_input), else input − target·log(input + eps); full adds Stirling's term target·log target −
-- target + 0.5·log(2π·target) where target > 1
function F.poisson_nll_loss(x, t, opts, ...)
  local N = "poisson_nll_loss"
  no_more(N, "(input, target [, {log_input=, full=, eps=, reduction=}])", ...)
  check_tensor(N, "input", x); check_tensor(N, "target", t)
  opts = check_opts(N, opts, { log_input = true, full = true, eps = true, reduction = true })
  local log_input, full = flag(N, opts, "log_input"), flag(N, opts, "full")
  local eps, red = eps_of(N, opts, 1e-8), opts.reduction
  x, t = U.autocast_fp32(x, t)   -- (torch's CPU autocast runs it in fp32; gaussian_nll_loss, Python, it leaves alone)
  local loss
  if log_input ~= false then loss = x:exp() - t * x else loss = x - t * (x + eps):log() end
  if full then
    -- (taken where target > 1 only, torch's masked_fill(target <= 1, 0): log of 0 and below is never selected, a
    -- NaN target takes the term and stays NaN, in its gradient too)
    local big = t:le(1):logical_not()
    local safe = where(big, t, 2)
    local stirling = safe * safe:log() - safe + (safe * (2 * math.pi)):log() * 0.5
    loss = loss + where(big, stirling, 0)
  end
  return reduce_loss(N, loss, red)
end

return F
