-- embedding_losses.lua — torch's losses over pairs and triplets of embeddings and over signed targets, in
-- fp8.nn.functional: margin_ranking_loss, triplet_margin_loss, cosine_embedding_loss, hinge_embedding_loss,
-- soft_margin_loss (their modules: lua/fp8/nn/losses.lua). Each is made of differentiable tensor ops with torch's
-- formulas, so every input that requires grad gets torch's gradient; targets are +1/-1 (as torch's, not checked
-- beyond being tensors: other values count as torch's formulas count them). Under autocast each computes in fp32 and
-- returns fp32, as torch's CPU autocast runs them (F._util.autocast_fp32).
local O = require "fp8.opts"
local F = require "fp8.nn.functional"
local U = F._util
local check_tensor, check_opts, reduce_loss, where = U.check_tensor, U.check_opts, U.reduce_loss, U.where
local check_number, autocast_fp32 = U.check_number, U.autocast_fp32
local no_more = O.no_more

-- The tensors' shapes broadcast together (what: their names), as torch's broadcasts them; else an error naming
-- each (it failed inside an op, "embedding_losses.lua:24: sub: shapes ..."). level: as error's.
local function broadcast_together(fname, what, tensors, level)
  local full = tensors[1]:shape()
  for i = 2, #tensors do
    full = full and require("fp8.tensor")._broadcast_shape(full, tensors[i]:shape())
  end
  if full == nil then
    local shown = {}
    for i = 1, #tensors do shown[i] = what[i] .. " " .. tensors[i]:shape_str() end
    error(("%s: %s and %s do not broadcast"):format(fname, table.concat(shown, ", ", 1, #shown - 1),
      shown[#shown]), level + 1)
  end
end

-- margin_ranking_loss(x1, x2, y [, {margin=0, reduction="mean"}]): max(0, −y·(x1 − x2) + margin)
function F.margin_ranking_loss(x1, x2, y, opts, ...)
  local N = "margin_ranking_loss"
  no_more(N, "(input1, input2, target [, {margin=, reduction=}])", ...)
  check_tensor(N, "input1", x1); check_tensor(N, "input2", x2); check_tensor(N, "target", y)
  opts = check_opts(N, opts, { margin = true, reduction = true })
  local margin = check_number(N, "margin", opts.margin, 0.0)
  if x1:dim() ~= x2:dim() or x1:dim() ~= y:dim() then
    error(("%s: input1 %s, input2 %s and target %s must have the same number of dims"):format(N, x1:shape_str(),
      x2:shape_str(), y:shape_str()), 2)
  end
  broadcast_together(N, { "input1", "input2", "target" }, { x1, x2, y }, 2)
  x1, x2, y = autocast_fp32(x1, x2, y)
  return reduce_loss(N, (-y * (x1 - x2) + margin):clamp_min(0), opts.reduction)
end

-- p, eps and keepdim checked and defaulted (F.pairwise_distance's and nn.PairwiseDistance's); level: where errors go
function F._pairwise_options(name, p, eps, keepdim, level)
  if p == nil then p = 2.0 end   -- (defaults only when not given: false is refused below)
  if eps == nil then eps = 1e-6 end
  -- any number but NaN, as torch 2.15's (its norm of d: p < 0 is (Σ|d|^p)^(1/p), -math.huge the smallest |d|; p < 0
  -- was refused until stop 101); NaN refused by name, as norm's and normalize's
  if type(p) ~= "number" or p ~= p then
    error(("%s: p must be a number (math.huge and -math.huge included, NaN not), got %s"):format(name, O.got(p)),
      level)
  end
  if type(eps) ~= "number" or eps ~= eps or math.abs(eps) == math.huge then
    error(("%s: eps must be a finite number, got %s"):format(name, O.got(eps)), level)
  end
  if keepdim ~= nil and type(keepdim) ~= "boolean" then
    error(("%s: keepdim must be a boolean, got %s"):format(name, O.got(keepdim)), level)
  end
  return p, eps, keepdim or false
end

-- pairwise_distance(x1, x2 [, p=2 [, eps=1e-6 [, keepdim=false]]]) (or {p=, eps=, keepdim=}): ‖x1 − x2 + eps‖_p
-- along the last dim, torch's (the eps inside the norm, so equal vectors have a finite gradient)
function F.pairwise_distance(x1, x2, p, eps, keepdim, ...)
  local N = "pairwise_distance"
  no_more(N, "(x1, x2 [, p [, eps [, keepdim]]])", ...)
  check_tensor(N, "x1", x1); check_tensor(N, "x2", x2)
  for i, v in ipairs { x1, x2 } do   -- (refused by the difference's sub at the library's line until stop 98)
    if v:is_fp8() then error(("%s: x%d is an %s tensor: call :dequantize() first"):format(N, i, v:dtype()), 2) end
  end
  if type(p) == "table" then
    if eps ~= nil or keepdim ~= nil then
      error(("%s: give p, eps and keepdim in order or in one table"):format(N), 2)
    end
    local o = check_opts(N, p, { p = true, eps = true, keepdim = true })
    p, eps, keepdim = o.p, o.eps, o.keepdim
  end
  p, eps, keepdim = F._pairwise_options(N, p, eps, keepdim, 3)
  local d = x1 - x2 + eps
  if d:dim() == 0 then error(("%s: the inputs are 0-d; it reduces along the last dim, so needs one"):format(N), 2) end
  if (p < 0 or p == math.huge) and d:size(-1) == 0 then
    -- (said 'norm: the inf norm of an empty reduction ...', an op the caller never called, until stop 101)
    error(("%s: the %s norm of an empty last dim has no value (the operation has no identity; torch refuses it too), "
      .. "difference %s"):format(N, p == math.huge and "inf" or p == -math.huge and "-inf" or ("%.14g"):format(p),
      d:shape_str()), 2)
  end
  return F._p_norm(d, p, keepdim)
end

-- ‖d‖_p along the last dim for any p but NaN (torch's: norm takes 1, 2 and inf only here, and pairwise_distance's
-- p = 3 or 0.5 failed inside it): 0 counts the nonzero entries (no gradient), inf is the largest |d|, p < 0 norm's
-- (Σ|d|^p)^(1/p) (0 where a coordinate is 0) and -math.huge the smallest |d|, as torch's; others (Σ|d|^p)^(1/p)
-- (F._root: a zero row's gradient stays finite)
function F._p_norm(d, p, keepdim)
  if p == 1 or p == 2 or p == math.huge or p < 0 then return d:norm(p, -1, keepdim) end
  if p == 0 then   -- the count, on the graph with a zero gradient (torch's has a grad_fn; backward gives zeros)
    local count = d:detach():ne(0):to(d:dtype()):sum(-1, keepdim)
    if not d:requires_grad() then return count end
    local W = require("fp8.tensor")   -- where, not d·0: an inf coordinate would make the count NaN
    return W.where(W.ones_like(count), count, d:sum(-1, keepdim))
  end
  local T = require "fp8.tensor"
  return T._norm_rescaled(d, -1, function(v)   -- (p < 1: equal coordinates too); Σ|d|^p out of range: d scaled first
    local s = T._abs_pow(v, p):sum(-1, keepdim)
    return F._root(s, p), s
  end, p)
end

-- triplet_margin_loss(anchor, positive, negative [, {margin=1, p=2, eps=1e-6, swap=false, reduction=}]):
-- max(0, margin + d(a, p) − d(a, n)), d the pairwise distance; swap: d(a, n) is min(d(a, n), d(p, n)). p any number
-- but NaN, as pairwise_distance's (torch's; p < 0 refused until stop 101); the three broadcast together; 0-d inputs are distances of
-- one coordinate, as torch's
function F.triplet_margin_loss(a, pos, neg, opts, ...)
  local N = "triplet_margin_loss"
  no_more(N, "(anchor, positive, negative [, {margin=, p=, eps=, swap=, reduction=}])", ...)
  check_tensor(N, "anchor", a); check_tensor(N, "positive", pos); check_tensor(N, "negative", neg)
  opts = check_opts(N, opts, { margin = true, p = true, eps = true, swap = true, reduction = true })
  local margin = check_number(N, "margin", opts.margin, 1.0)
  if margin <= 0 then error(("%s: margin must be positive, got %s"):format(N, O.got(margin)), 2) end
  if opts.swap ~= nil and type(opts.swap) ~= "boolean" then
    error(("%s: swap must be a boolean, got %s"):format(N, O.got(opts.swap)), 2)
  end
  if a:dim() ~= pos:dim() or a:dim() ~= neg:dim() then
    error(("%s: anchor %s, positive %s and negative %s must have the same number of dims"):format(N,
      a:shape_str(), pos:shape_str(), neg:shape_str()), 2)
  end
  broadcast_together(N, { "anchor", "positive", "negative" }, { a, pos, neg }, 2)
  local p, eps = F._pairwise_options(N, opts.p, opts.eps, nil, 3)
  if a:dim() == 0 then a, pos, neg = a:reshape { 1 }, pos:reshape { 1 }, neg:reshape { 1 } end
  a, pos, neg = autocast_fp32(a, pos, neg)
  local dp = F.pairwise_distance(a, pos, p, eps)
  local dn = F.pairwise_distance(a, neg, p, eps)
  if opts.swap then dn = dn:minimum(F.pairwise_distance(pos, neg, p, eps)) end
  return reduce_loss(N, (dp - dn + margin):clamp_min(0), opts.reduction)
end

-- cosine_embedding_loss(x1, x2, y [, {margin=0, reduction=}]): 1 − cos(x1, x2) where y = 1, max(0, cos − margin)
-- where y = −1, cos along the last dim with torch's 1e-12 added to each squared norm
function F.cosine_embedding_loss(x1, x2, y, opts, ...)
  local N = "cosine_embedding_loss"
  no_more(N, "(input1, input2, target [, {margin=, reduction=}])", ...)
  check_tensor(N, "input1", x1); check_tensor(N, "input2", x2); check_tensor(N, "target", y)
  opts = check_opts(N, opts, { margin = true, reduction = true })
  local margin = check_number(N, "margin", opts.margin, 0.0)
  if y:dim() > 1 then
    error(("%s: the target must be 0-d or 1-d (one per pair), got %s"):format(N, y:shape_str()), 2)
  end
  if x1:dim() ~= y:dim() + 1 or x2:dim() ~= y:dim() + 1 then
    error(("%s: a %d-d target takes %d-d inputs, got %s and %s"):format(N, y:dim(), y:dim() + 1, x1:shape_str(),
      x2:shape_str()), 2)
  end
  if y:dim() == 1 and (y:size(1) ~= x1:size(1) or y:size(1) ~= x2:size(1)) then   -- (it failed inside where)
    error(("%s: the target %s must hold one value per pair of %s and %s"):format(N, y:shape_str(), x1:shape_str(),
      x2:shape_str()), 2)
  end
  x1, x2, y = autocast_fp32(x1, x2, y)
  local EPS = 1e-12
  local prod = (x1 * x2):sum(-1)
  local m1, m2 = (x1 * x1):sum(-1) + EPS, (x2 * x2):sum(-1) + EPS
  local cos = prod / (m1 * m2):sqrt()
  local per = where(y:eq(1), 1 - cos, 0) + where(y:eq(-1), (cos - margin):clamp_min(0), 0)
  return reduce_loss(N, per, opts.reduction)
end

-- hinge_embedding_loss(x, y [, {margin=1, reduction=}]): x where y = 1, max(0, margin − x) where y = −1 (torch's:
-- y ≠ −1 takes x, y ≠ 1 the margin term)
function F.hinge_embedding_loss(x, y, opts, ...)
  local N = "hinge_embedding_loss"
  no_more(N, "(input, target [, {margin=, reduction=}])", ...)
  check_tensor(N, "input", x); check_tensor(N, "target", y)
  opts = check_opts(N, opts, { margin = true, reduction = true })
  local margin = check_number(N, "margin", opts.margin, 1.0)
  x, y = autocast_fp32(x, y)
  local per = where(y:ne(1), (margin - x):clamp_min(0), 0) + where(y:ne(-1), x, 0)
  return reduce_loss(N, per, opts.reduction)
end

-- soft_margin_loss(x, y [, {reduction=}]): log(1 + exp(−y·x)), torch's formula; the target broadcast to the input's
-- shape, and not differentiated (one that requires grad is refused, as torch's)
function F.soft_margin_loss(x, y, opts, ...)
  local N = "soft_margin_loss"
  no_more(N, "(input, target [, {reduction=}])", ...)
  check_tensor(N, "input", x); check_tensor(N, "target", y)
  opts = check_opts(N, opts, { reduction = true })
  U.broadcasts_to(N, "target", y, x, 2)
  U.refuse_grad(N, "target", y, 2)
  x, y = autocast_fp32(x, y)
  return reduce_loss(N, (-x * y):exp():log1p(), opts.reduction)
end

return F
