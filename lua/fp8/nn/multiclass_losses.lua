-- multiclass_losses.lua — torch's margin and soft-margin losses over classes, in fp8.nn.functional:
-- multi_margin_loss (a multi-class hinge), multilabel_margin_loss (a hinge between each target class and each other
-- class) and multilabel_soft_margin_loss (a per-class logistic loss, averaged over the classes); their modules are
-- in lua/fp8/nn/losses.lua. Inputs [N, C] or unbatched [C]; class indices are 0-based whole numbers in fp32 tensors
-- (torch's are int64), read on the host to build masks, and each loss is then made of differentiable tensor ops
-- with torch's CPU kernels' formulas (a weight multiplies a hinge after its power, as torch's kernel does). Under
-- autocast multi_margin_loss and multilabel_margin_loss compute in fp32 and return fp32, as torch's CPU autocast runs
-- them; multilabel_soft_margin_loss, Python in torch of ops autocast leaves alone, keeps the input's dtype.
local fp8 = require "fp8.core"
local O = require "fp8.opts"
local F = require "fp8.nn.functional"
local U = F._util
local check_tensor, check_opts, reduce_loss = U.check_tensor, U.check_opts, U.reduce_loss
local no_more = O.no_more
-- (selects, not products with 0/1 masks: a masked ±inf logit times 0 was NaN, and the loss NaN where torch's is finite)
local function where(...) return require("fp8.tensor").where(...) end

-- input as [N, C] (an unbatched [C] as [1, C]); whether it was unbatched
local function rows_of(fname, x)
  if x:dim() == 1 then return x:reshape({ 1, x:size(1) }), true end
  if x:dim() ~= 2 or x:size(2) == 0 then
    error(("%s: expected an input [N, C] or [C] with C >= 1, got %s"):format(fname, x:shape_str()), 3)
  end
  return x, false
end

-- weight: [C], one per class. no_grad: torch's loss is not differentiable in it (multi_margin_loss's kernel), so one
-- that requires grad is refused, as torch's; multilabel_soft_margin_loss's, made of tensor ops, takes a gradient.
local function class_weight(fname, w, C, no_grad)
  if w == nil then return nil end
  if not fp8.is_tensor(w) or w:dim() ~= 1 or w:size(1) ~= C then
    error(("%s: weight must be [%d] (one per class), got %s"):format(fname, C, fp8.is_tensor(w) and w:shape_str()
      or O.got(w)), 3)
  end
  if no_grad then U.refuse_grad(fname, "weight", w, 3) end
  return w
end

-- a whole number in 0..C-1 (what: how the message names it)
local function class_index(fname, what, v, C)
  if not (v == math.floor(v) and v >= 0 and v < C) then
    error(("%s: %s %s is not a class index in 0..%d"):format(fname, what, O.got(math.tointeger(v) or v), C - 1), 3)
  end
  return math.tointeger(v)
end

-- multi_margin_loss(input [N, C] or [C], target [N] (or 0-d) [, {p=1, margin=1, weight=, reduction="mean"}]):
-- Σ_{i≠y} w[y]·max(0, margin - x[y] + x[i])^p / C per sample
function F.multi_margin_loss(x, t, opts, ...)
  local N = "multi_margin_loss"
  no_more(N, "(input, target [, {p=, margin=, weight=, reduction=}])", ...)
  check_tensor(N, "input", x); check_tensor(N, "target", t)
  opts = check_opts(N, opts, { p = true, margin = true, weight = true, reduction = true })
  local p = opts.p
  if p == nil then p = 1 end   -- (false is refused below, not taken as 1)
  if p ~= 1 and p ~= 2 then error(("%s: p must be 1 or 2 (torch's), got %s"):format(N, O.got(p)), 2) end
  local margin = U.check_number(N, "margin", opts.margin, 1.0)
  local rows, unb = rows_of(N, x)
  local n, C = rows:size(1), rows:size(2)
  local w = class_weight(N, opts.weight, C, true)
  if t:numel() ~= n or t:dim() > 1 or (t:dim() == 0) ~= unb then
    error(("%s: target must be %s (one class per sample), got %s"):format(N, unb and "0-d" or ("[%d]"):format(n),
      t:shape_str()), 2)
  end
  local hit, ids = {}, {}
  for i, v in ipairs(t:reshape({ -1 }):tolist()) do
    local y = class_index(N, "target", v, C)
    ids[i] = y
    for c = 0, C - 1 do hit[#hit + 1] = c == y and 1 or 0 end
  end
  rows, w = U.autocast_fp32(rows, w)
  local onehot = fp8.tensor(hit):reshape({ n, C }):to(rows:device())
  if rows:dtype() ~= "fp32" then onehot = onehot:to(rows:dtype()) end
  local xy = rows:gather(2, fp8.tensor(ids):reshape({ n, 1 }):to(rows:device()))   -- x[y], [n, 1]
  local z = where(onehot:gt(0), 0, ((rows - xy) + margin):clamp_min(0))  -- the other classes' hinges
  if p == 2 then z = z * z end
  if w ~= nil then z = z * (onehot * w:reshape({ 1, C })):sum(2, true) end   -- w[y]
  local per = z:sum(2) / C
  if unb then per = per:reshape({}) end
  return reduce_loss(N, per, opts.reduction)
end

-- multilabel_margin_loss(input [N, C] or [C], target (same shape: each row's target classes, ended by the first -1;
-- every entry, those after it too, -1 or a class index, as torch's checks them) [, {reduction="mean"}]):
-- Σ_{j target} Σ_{i not target} max(0, 1 - (x[j] - x[i])) / C per sample
function F.multilabel_margin_loss(x, t, opts, ...)
  local N = "multilabel_margin_loss"
  no_more(N, "(input, target [, {reduction=}])", ...)
  check_tensor(N, "input", x); check_tensor(N, "target", t)
  opts = check_opts(N, opts, { reduction = true })
  local rows, unb = rows_of(N, x)
  local n, C = rows:size(1), rows:size(2)
  U.same_shape(N, x, t)
  local counts, istarget = {}, {}
  local list = t:reshape({ -1 }):tolist()
  for _, v in ipairs(list) do
    if v ~= -1 and not (v == math.floor(v) and v >= 0 and v < C) then
      error(("%s: target %s is not a class index in 0..%d or -1"):format(N, O.got(math.tointeger(v) or v), C - 1), 2)
    end
  end
  for r = 0, n - 1 do
    local cnt = {}
    for c = 1, C do cnt[c] = 0 end
    for c = 1, C do
      local v = list[r * C + c]
      if v == -1 then break end
      local y = math.tointeger(v)
      cnt[y + 1] = cnt[y + 1] + 1   -- a class listed twice counts twice, as torch's loop counts it
    end
    for c = 1, C do
      counts[#counts + 1] = cnt[c]
      istarget[#istarget + 1] = cnt[c] > 0 and 1 or 0
    end
  end
  rows = U.autocast_fp32(rows)
  local dev, dt = rows:device(), rows:dtype()
  local function tensor(l)
    local r = fp8.tensor(l):reshape({ n, C }):to(dev)
    return dt == "fp32" and r or r:to(dt)
  end
  local cnt, ist = tensor(counts), tensor(istarget)
  -- pairs [n, j, i]: the hinge of target j against class i, counted cnt[j] times where i is not a target
  local h = (rows:reshape({ n, 1, C }) - rows:reshape({ n, C, 1 }) + 1):clamp_min(0)
  local wgt = cnt:reshape({ n, C, 1 }) * (1 - ist):reshape({ n, 1, C })
  local per = (where(wgt:gt(0), h, 0) * wgt):sum({ 2, 3 }) / C
  if unb then per = per:reshape({}) end
  return reduce_loss(N, per, opts.reduction)
end

-- multilabel_soft_margin_loss(input [N, C] or [C], target (same shape, 0/1) [, {weight=, reduction="mean"}]):
-- -(y·log σ(x) + (1 - y)·log σ(-x)), weighted per class, averaged over the classes per sample
function F.multilabel_soft_margin_loss(x, t, opts, ...)
  local N = "multilabel_soft_margin_loss"
  no_more(N, "(input, target [, {weight=, reduction=}])", ...)
  check_tensor(N, "input", x); check_tensor(N, "target", t)
  opts = check_opts(N, opts, { weight = true, reduction = true })
  if x:dim() < 1 then error(("%s: expected an input [N, C] or [C], got %s"):format(N, x:shape_str()), 2) end
  local C = x:size(x:dim())
  local w = class_weight(N, opts.weight, C)
  U.same_shape(N, x, t)
  local loss = -(t * F.logsigmoid(x) + (1 - t) * F.logsigmoid(-x))
  if w ~= nil then loss = loss * w end
  return reduce_loss(N, loss:sum(x:dim()) / C, opts.reduction)
end

return F
