-- tensor_stats.lua — more of torch's order statistics, scans, distances and counts: methods msort, median, kthvalue,
-- quantile, logcumsumexp, cummax, cummin, cov, corrcoef, tensordot, bernoulli (function forms fp8.<name>(x, ...))
-- and the functions fp8.cdist, fp8.searchsorted, fp8.bucketize, fp8.bincount, fp8.isin, fp8.unique, fp8.logspace.
-- Values that select elements (median, kthvalue, cummax, ...) gather them, so their gradient goes to the element
-- chosen, torch's; index results are 0-based fp32 (torch's are int64); the counting ones carry no gradient.
local core = require "fp8.core"
local T = require "fp8.tensor"
local opts = require "fp8.opts"
local Tensor = core.Tensor
local no_more, got = opts.no_more, opts.got
local check_self, check_not_fp8, norm_dim = T._check_self, T._check_not_fp8, T._norm_dim
local at_caller = T._at_caller
local where = T.where

local M = {}

local function self_of(name, t) check_not_fp8(name, check_self(name, t)) end
local function on_dev(list, like) return T._list_on(list, like:device()) end
local function check_keepdim(name, k) T._check_keepdim(name, k, 4) end

Tensor.msort = at_caller(function(t, ...)
  no_more("msort", "no arguments", ...); self_of("msort", t)
  if t:dim() == 0 then return t * 1 end
  return (t:sort(1))
end)

-- the k-th smallest (1-based) along dim, and its index: sort, then select (NaN sorts last, as torch's)
local function kth(t, k, d, keepdim)
  local v, i = t:sort(d)
  local val, idx = v:narrow(d, k, 1), i:narrow(d, k, 1)
  val = t:gather(d, idx)   -- the element itself, so the gradient goes to it
  if not keepdim then val, idx = val:squeeze(d), idx:squeeze(d) end
  return val, idx
end

-- median([dim [, keepdim]]): the lower median (the ((n+1)//2)-th smallest), NaN if any element is NaN (torch's);
-- with dim also its index
Tensor.median = at_caller(function(t, dim, keepdim, ...)
  no_more("median", "([dim [, keepdim]])", ...)
  self_of("median", t); check_keepdim("median", keepdim)
  if dim == nil and keepdim ~= nil then   -- torch's: keepdim goes with a dim (it was taken and dropped)
    error("median: keepdim goes with a dim: give (dim, keepdim)", 2)
  end
  if dim == nil then
    if t:numel() == 0 then return T._full_in_graph(t, {}, 0 / 0) end
    local flat = t:reshape({ -1 })
    -- the value: the lower middle one, or NaN when there is one; its gradient spread evenly over the elements equal
    -- to it (all the NaNs for a NaN), as torch's median() without a dim (median(dim) gives it to the one index)
    local nan = flat:detach():isnan()
    local v = nan:any():item() ~= 0 and core.full({}, 0 / 0, { dtype = t:dtype(), device = t:device() })
      or kth(flat, (flat:numel() + 1) // 2, 1, false):detach()
    local mask = v:isnan():item() ~= 0 and nan or flat:detach():eq(v)
    local n = mask:sum():item()
    -- v itself, plus the masked elements' differences from it (exactly 0: a where, not a product, so an inf elsewhere
    -- makes no NaN), spread by 1/n
    return v + where(mask, flat - v, core.zeros({}, { dtype = t:dtype(), device = t:device() })):sum() / n
  end
  local d = norm_dim("median", dim, math.max(t:dim(), 1), 2)
  if t:dim() == 0 then return t * 1, core.zeros({}) end
  local v, i = kth(t, (t:size(d) + 1) // 2, d, true)
  -- a slice holding a NaN: NaN, at its first NaN (torch's)
  local nan = t:detach():isnan()
  local has = nan:any(d, true)
  if has:any():item() ~= 0 then
    local first = nan:to("fp32"):argmax(d, true)
    i = where(has, first, i)
    v = t:gather(d, i)
  end
  if not keepdim then v, i = v:squeeze(d), i:squeeze(d) end
  return v, i
end)

-- kthvalue(k [, dim=-1 [, keepdim]]): the k-th smallest along dim and its index
Tensor.kthvalue = at_caller(function(t, k, dim, keepdim, ...)
  no_more("kthvalue", "(k [, dim=-1 [, keepdim]])", ...)
  self_of("kthvalue", t); check_keepdim("kthvalue", keepdim)
  if t:dim() == 0 then t = t:reshape({ 1 }) end
  local d = norm_dim("kthvalue", dim or -1, t:dim(), 2)
  local n = t:size(d)
  if math.type(k) ~= "integer" or k < 1 or k > n then
    error(("kthvalue: k must be an integer in 1..%d (the size of dim %d), got %s"):format(n, d, got(k)), 2)
  end
  return kth(t, k, d, keepdim)
end)

-- quantile(q [, dim [, {keepdim=false, interpolation="linear"}]]): torch's, q a number or a 1-d tensor in [0, 1]
-- (its values a new first dim); between the sorted values at floor and ceil of q·(n-1) by interpolation "linear",
-- "lower", "higher", "nearest" (halves to even) or "midpoint"; NaN where the data holds a NaN
local INTERP = { linear = true, lower = true, higher = true, nearest = true, midpoint = true }
Tensor.quantile = at_caller(function(t, q, dim, o, ...)
  no_more("quantile", "(q [, dim [, {keepdim=, interpolation=}]])", ...)
  self_of("quantile", t)
  t = T._autocast_fp32(t)   -- fp32 under autocast, as torch's CPU autocast
  o = opts.check("quantile", o, { "keepdim", "interpolation" }, 2)
  check_keepdim("quantile", o.keepdim)
  local interp = o.interpolation or "linear"
  if not INTERP[interp] then
    error(("quantile: interpolation must be \"linear\", \"lower\", \"higher\", \"nearest\" or \"midpoint\", got %s")
      :format(got(interp)), 2)
  end
  local qs, scalar_q
  if type(q) == "number" then qs, scalar_q = { q }, true
  elseif core.is_tensor(q) and q:dim() == 0 then qs, scalar_q = { q:item() }, true   -- a 0-d q: a 0-d-shaped result
  elseif core.is_tensor(q) and q:dim() == 1 then qs = q:numel() > 0 and q:reshape({ -1 }):tolist() or {}
  else error(("quantile: q must be a number or a 0-d or 1-d tensor, got %s"):format(got(q)), 2) end
  for _, v in ipairs(qs) do
    if not (v >= 0 and v <= 1) then error(("quantile: q must be in [0, 1], got %s"):format(got(v)), 2) end
  end
  local x, d = t, nil
  if dim == nil then x, d = t:reshape({ -1 }), 1
  else d = norm_dim("quantile", dim, math.max(t:dim(), 1), 2); if t:dim() == 0 then x = t:reshape({ 1 }) end end
  local n = x:size(d)
  if n == 0 then error("quantile: the input is empty along the dim", 2) end
  local sorted = x:sort(d)
  local has_nan = x:isnan():any(d, true)
  local outs = {}
  for i, qv in ipairs(qs) do
    local pos = qv * (n - 1)
    local lo, hi = math.floor(pos), math.ceil(pos)
    local a, b = sorted:narrow(d, lo + 1, 1), sorted:narrow(d, hi + 1, 1)
    local r
    if interp == "lower" then r = a
    elseif interp == "higher" then r = b
    elseif interp == "nearest" then
      local rnd = pos - lo == 0.5 and (lo % 2 == 0 and lo or hi) or math.floor(pos + 0.5)
      r = sorted:narrow(d, rnd + 1, 1)
    elseif interp == "midpoint" then r = a + (b - a) * 0.5
    else r = a:lerp(b, pos - lo) end
    r = where(has_nan, 0 / 0, r)
    if not o.keepdim then r = r:squeeze(d) end
    if dim == nil and o.keepdim then   -- every dim kept, as size 1
      local s = {}
      for j = 1, t:dim() do s[j] = 1 end
      r = r:reshape(s)
    end
    outs[i] = r
  end
  if scalar_q then return outs[1] end
  if #outs == 0 then error("quantile: q is empty", 2) end
  return T.stack(outs, 1)
end)

-- the Hillis-Steele scan of f along dim d (f associative: logaddexp), differentiable
local function scan(x, d, f)
  local n, k = x:size(d), 1
  while k < n do
    x = core.cat({ x:narrow(d, 1, k), f(x:narrow(d, k + 1, n - k), x:narrow(d, 1, n - k)) }, d)
    k = k * 2
  end
  return x
end

-- logcumsumexp(dim): log of the running sums of exp, each step a logaddexp (no overflow, no underflow to -inf of a
-- prefix far below the maximum), differentiable
Tensor.logcumsumexp = at_caller(function(t, dim, ...)
  no_more("logcumsumexp", "(dim)", ...)
  self_of("logcumsumexp", t)
  if dim == nil then error("logcumsumexp: dim is required, got none", 2) end
  local d = norm_dim("logcumsumexp", dim, math.max(t:dim(), 1), 2)
  if t:dim() == 0 then return t * 1 end
  local x = (t:dtype() == "bf16" or t:dtype() == "fp16") and t:float() or t
  local r = scan(x, d, function(a, b) return a:logaddexp(b) end)
  return r:dtype() == t:dtype() and r or r:to(t:dtype())
end)

-- cummax / cummin(dim): the running maximum (minimum) and the index it was taken from, the latest among equals and a
-- NaN once one is met (torch's); the values gathered from those indices (their gradient goes there)
local function cum_extreme(name, better)
  return at_caller(function(t, dim, ...)
    no_more(name, "(dim)", ...)
    self_of(name, t)
    if dim == nil then error(("%s: dim is required, got none"):format(name), 2) end
    local d = norm_dim(name, dim, math.max(t:dim(), 1), 2)
    if t:dim() == 0 then return t * 1, core.zeros({}) end
    opts.exact_positions(name, t:size(d) - 1, ("the indices along dim %d"):format(d), 2)
    local moved = t:detach():movedim(d, -1):contiguous()
    local n = moved:size(-1)
    local rows = moved:numel() // math.max(n, 1)
    local vals = moved:numel() > 0 and moved:reshape({ -1 }):tolist() or {}
    local idx = {}
    for r = 0, rows - 1 do
      local best, at = nil, 0
      for j = 1, n do
        local v = vals[r * n + j]
        -- a NaN takes the place, and each later NaN moves the index to it (torch's: [1, nan, 2, nan] -> 0, 1, 1, 3)
        if best == nil or v ~= v or (best == best and better(v, best)) then best, at = v, j - 1 end
        idx[r * n + j] = at
      end
    end
    local ind = #idx > 0 and on_dev(idx, t):reshape(moved:shape()):movedim(-1, d) or core.zeros(t:shape())
    return t:gather(d, ind:contiguous()), ind:contiguous()
  end)
end
Tensor.cummax = cum_extreme("cummax", function(v, best) return v >= best end)
Tensor.cummin = cum_extreme("cummin", function(v, best) return v <= best end)

-- cov([{correction=1}]) of the rows (variables) over the columns (observations), and corrcoef(): torch's, without
-- the frequency and analytic weights (refused)
Tensor.cov = at_caller(function(t, o, ...)
  no_more("cov", "([{correction=1}])", ...)
  self_of("cov", t)
  for _, k in ipairs { "fweights", "aweights" } do
    if type(o) == "table" and rawget(o, k) ~= nil then
      error(("cov: %s is not supported (unweighted observations only)"):format(k), 2)
    end
  end
  o = opts.check("cov", o, { "correction", "fweights", "aweights" }, 2)
  local c = o.correction or 1
  if math.type(c) ~= "integer" or c < 0 then
    error(("cov: correction must be an integer >= 0, got %s"):format(got(c)), 2)
  end
  if t:dim() > 2 then error(("cov: expected a 1-d or 2-d input, got %s"):format(t:shape_str()), 2) end
  local x = t:dim() < 2 and t:reshape({ 1, -1 }) or t
  local N = x:size(2)
  local centred = x - x:mean(2, true)
  local r = centred:matmul(centred:t()) / math.max(N - c, 0)
  -- torch squeezes the [1, 1] result of one variable, a 1-d input or a single row (before stop 94 a row gave [1, 1])
  if x:size(1) == 1 then return r:reshape({}) end
  return r
end)
Tensor.corrcoef = at_caller(function(t, ...)
  no_more("corrcoef", "no arguments", ...)
  self_of("corrcoef", t)
  local c = t:cov()
  if c:dim() == 0 then return c / c end
  local s = c:diagonal():sqrt()
  return (c / s:reshape({ -1, 1 }) / s:reshape({ 1, -1 })):clamp(-1, 1)
end)

-- tensordot(other [, dims=2]): contract x's last dims with other's first (dims a count), or the dims listed
-- ({{x's}, {other's}}, 1-based)
Tensor.tensordot = at_caller(function(t, y, dims, ...)
  no_more("tensordot", "(other [, dims=2 | {{x dims}, {other dims}}])", ...)
  self_of("tensordot", t)
  if not core.is_tensor(y) then error(("tensordot: other must be a tensor, got %s"):format(got(y)), 2) end
  dims = dims or 2
  local da, db = {}, {}
  if math.type(dims) == "integer" then
    if dims < 0 or dims > t:dim() or dims > y:dim() then
      error(("tensordot: dims %d is more than the tensors' dims (%d and %d)"):format(dims, t:dim(), y:dim()), 2)
    end
    for i = 1, dims do da[i], db[i] = t:dim() - dims + i, i end
  elseif type(dims) == "table" and type(dims[1]) == "table" and type(dims[2]) == "table" and #dims[1] == #dims[2] then
    opts.check_list("tensordot", "dims", dims, 2)   -- (a third entry was dropped)
    if #dims ~= 2 then error(("tensordot: dims must be a pair of lists, got %d entries"):format(#dims), 2) end
    local seen_a, seen_b = {}, {}
    for i = 1, #dims[1] do
      da[i], db[i] = norm_dim("tensordot", dims[1][i], t:dim(), 2), norm_dim("tensordot", dims[2][i], y:dim(), 2)
      if seen_a[da[i]] or seen_b[db[i]] then   -- torch's message (it was permute's, about 3 dims)
        error(("tensordot: dim %d appears twice in the list of dims"):format(seen_a[da[i]] and da[i] or db[i]), 2)
      end
      seen_a[da[i]], seen_b[db[i]] = true, true
    end
  else
    error(("tensordot: dims must be a count or a pair of equal-length lists of dims, got %s"):format(got(dims)), 2)
  end
  local inA, inB, K = {}, {}, 1
  for i = 1, #da do
    if t:size(da[i]) ~= y:size(db[i]) then
      error(("tensordot: dim %d of %s and dim %d of %s differ"):format(da[i], t:shape_str(), db[i], y:shape_str()), 2)
    end
    inA[da[i]], inB[db[i]], K = true, true, K * t:size(da[i])
  end
  local pa, pb, out, M, N = {}, {}, {}, 1, 1
  for i = 1, t:dim() do if not inA[i] then pa[#pa + 1] = i; out[#out + 1] = t:size(i); M = M * t:size(i) end end
  for _, i in ipairs(da) do pa[#pa + 1] = i end
  for _, i in ipairs(db) do pb[#pb + 1] = i end
  for i = 1, y:dim() do if not inB[i] then pb[#pb + 1] = i; out[#out + 1] = y:size(i); N = N * y:size(i) end end
  -- the sizes given, not -1: a contracted size of 0 (torch's zeros) made -1 ambiguous (until 2026-12-05)
  local a = (#pa > 0 and t:permute(pa) or t):reshape({ M, K })
  local b = (#pb > 0 and y:permute(pb) or y):reshape({ K, N })
  return a:matmul(b):reshape(out)
end)

-- bernoulli(): 1 with each element's probability (x in [0, 1]), else 0, from fp8's generator; no gradient
Tensor.bernoulli = at_caller(function(t, ...)
  no_more("bernoulli", "no arguments", ...)
  self_of("bernoulli", t)
  local p = t:detach()
  local lo, hi = p:numel() > 0 and p:min():item() or 0, p:numel() > 0 and p:max():item() or 0
  if not (lo >= 0 and hi <= 1) then
    error(("bernoulli: the probabilities must be in [0, 1], got %s"):format(got(lo < 0 and lo or hi)), 2)
  end
  return core.rand(p:shape(), { device = p:device() }):lt(p):to(p:dtype())
end)

-- ---- functions -------------------------------------------------------------------------------------------------

-- cdist's p = inf on the differences d [.., P, R, M]: the largest |d| along the last dim, whose gradient is torch's
-- cdist backward's, g·sign(d) at every coordinate equal to it (ties each take the whole of g; a NaN row none), where
-- amax's (the inf-norm's, torch's too) splits g evenly among the ties: until stop 100 the gradient of a pair with two
-- tied coordinates was half torch's at each. Made on first use (fp8.autograd.Function).
local CDIST_INF
local function cdist_inf()
  if not CDIST_INF then
    CDIST_INF = require("fp8.autograd_function").Function {
      name = "CdistInf",
      forward = function(ctx, d)
        local r = d:amax(-1)   -- (max |d|: amax's FP8 sense)
        ctx:save_for_backward(d, r)
        return r
      end,
      backward = function(ctx, g)
        local d, r = ctx.saved_tensors[1], ctx.saved_tensors[2]
        local at = d:abs():eq(r:unsqueeze(-1)):to(g:dtype())
        return g:unsqueeze(-1) * d:sign():to(g:dtype()) * at
      end,
    }
  end
  return CDIST_INF
end

-- the distances of a [.., P, M] and b [.., R, M] by the differences [.., P, R, M] (on the graph where an input
-- requires grad): every pair at once, what cdist computed up to stop 101 (and still does where they fit a chunk)
local function cdist_of(a, b, p)
  local diff = a:unsqueeze(-2) - b:unsqueeze(-3)   -- [.., P, R, M]
  local ad = diff:abs()
  if p == math.huge then
    -- no features (x1 [P, 0], x2 [R, 0]): every distance is 0, torch 2.15's zeros [P, R] (and its empty gradients);
    -- amax over the empty last dim raised 'amax: the reduced range of tensor [P, R, 0] is empty' (stop 101). The sum
    -- of nothing is that 0, on the graph where an input requires grad.
    if diff:size(-1) == 0 then return ad:sum(-1) end
    if not diff:requires_grad() then return ad:amax(-1) end
    return cdist_inf()(diff)
  end
  if p == 0 then
    -- the count of nonzero coordinates, NaN where a coordinate is NaN (torch's cdist; its norm(0) counts a NaN as 1:
    -- the count did here too until stop 101), on the graph with a zero gradient where an input requires grad
    -- (torch's has a grad_fn and its backward gives zeros; until stop 100 backward() raised 'tensor does not require
    -- grad'), by where, not d·0 (an inf coordinate would make the count NaN), as F.pairwise_distance's p = 0; the
    -- graph's term is diff's sum, not |diff|'s (abs's backward at a NaN coordinate gave NaN, torch's 0; stop 101)
    local add = ad:detach()
    local count = add:ne(0):to(ad:dtype()):sum(-1)
    count = where(add:isnan():to(ad:dtype()):sum(-1):gt(0), 0 / 0, count)
    if not ad:requires_grad() then return count end
    return where(T.ones_like(count), count, diff:sum(-1))
  end
  -- torch's cdist at p = 1 has a NaN gradient at a NaN coordinate (its kernel's sign of the difference), where abs's
  -- backward gives torch's sgn, 0, since stop 102: sign(d)·d is |d| (±0 to +0, NaN at NaN) and its gradient sign(d)
  -- (sign's own is zero), NaN there
  if p == 1 then return (diff:requires_grad() and diff:sign() * diff or ad):sum(-1) end
  return T._norm_rescaled(diff, -1, function(v)   -- Σ|d|^p out of range: d scaled first
    local s = p == 2 and (v * v):sum(-1) or T._abs_pow(v:abs(), p):sum(-1)
    return T._root(s, p), s
  end, p)
end

-- cdist's differences are [.., P, R, M]: the whole of them (and the graph's copies of them, which its backward
-- read) took 2 GiB of fp32 for [4096, 64] and [2048, 64], refused far earlier than torch's (its _cdist_backward
-- needs no [P, R, M]). Past CDIST_CHUNK elements of them the rows of x1 go by chunks: each chunk's distances by
-- cdist_of, the same operations on the same values (so the same bits, row by row); where an input requires grad
-- the graph keeps x1 and x2 only (fp8.autograd.Function "Cdist") and the backward makes each chunk's differences
-- again and takes their gradients (x2's summed over the chunks, in chunk order: a different rounding of the same
-- sum than the whole tensor's). stop 102.
local CDIST_CHUNK = 1 << 22   -- elements of a chunk's differences (16 MiB of fp32)

-- the rows of x1 a chunk takes (P where the differences fit one chunk)
local function cdist_rows(a, b)
  local na, nb = a:dim(), b:dim()
  local batch = 1   -- the broadcast leading dims' product
  for i = 3, math.max(na, nb) do
    local x = i <= na and a:size(na - i + 1) or 1
    local y = i <= nb and b:size(nb - i + 1) or 1
    batch = batch * math.max(x, y)
  end
  local per = batch * b:size(-2) * math.max(a:size(-1), 1)   -- a row's differences
  return math.max(1, CDIST_CHUNK // math.max(per, 1))
end

-- x1's rows s .. s + len - 1 (dim -2)
local function rows_of(t, s, len) return t:narrow(t:dim() - 1, s, len) end

local function cdist_chunked(a, b, p, c)
  local P, parts = a:size(-2), {}
  for s = 1, P, c do parts[#parts + 1] = cdist_of(rows_of(a, s, math.min(c, P - s + 1)), b, p) end
  return core.cat(parts, a:dim() - 1)
end

local CDIST
local function cdist_fn()
  if not CDIST then
    local autograd = require "fp8.autograd"
    CDIST = require("fp8.autograd_function").Function {
      name = "Cdist",
      forward = function(ctx, a, b, p, c)
        ctx:save_for_backward(a, b)
        ctx.p, ctx.c = p, c
        return cdist_chunked(a, b, p, c):float()   -- (fp32: see M.cdist)
      end,
      backward = function(ctx, g)
        local a, b = ctx.saved_tensors[1], ctx.saved_tensors[2]
        local p, c, P = ctx.p, ctx.c, a:size(-2)
        local ga, gb = {}, nil
        for s = 1, P, c do
          local len = math.min(c, P - s + 1)
          core.enable_grad(function()
            local ac = rows_of(a, s, len):detach():requires_grad(true)
            local bd = b:detach():requires_grad(true)
            local d = cdist_of(ac, bd, p)
            local x, y = autograd.grad(d, { ac, bd }, rows_of(g, s, len), { materialize_grads = true })
            ga[#ga + 1] = x
            gb = gb and gb + y or y
          end)
        end
        return core.cat(ga, a:dim() - 1), gb, nil, nil
      end,
    }
  end
  return CDIST
end

-- fp8._cdist_chunk(n, fn, ...) -> fn(...)'s results, with n elements a chunk while fn runs (the tests' chunks of a few
-- rows); the chunk as it was after, fn's error or not (a setting that stayed would slow every later cdist: the API
-- sweep calls underscore functions too)
function M._cdist_chunk(n, fn, ...)
  if math.type(n) ~= "integer" or n < 1 then
    error(("_cdist_chunk: expected an integer >= 1 (elements of a chunk's differences), got %s"):format(got(n)), 2)
  end
  if type(fn) ~= "function" then error(("_cdist_chunk: expected a function to run, got %s"):format(got(fn)), 2) end
  local old = CDIST_CHUNK
  CDIST_CHUNK = n
  local res = table.pack(pcall(fn, ...))
  CDIST_CHUNK = old
  if not res[1] then error(res[2], 0) end
  return table.unpack(res, 2, res.n)
end

-- cdist(x1 [.., P, M], x2 [.., R, M] [, p=2]): the p-norm distance of every row pair, [.., P, R]; computed directly
-- (torch's matrix-product shortcut for large p=2 inputs trades digits for speed), by chunks of x1's rows where the
-- differences are large (cdist_rows); a zero distance's gradient is 0
M.cdist = at_caller(function(a, b, p, ...)
  no_more("cdist", "(x1, x2 [, p=2])", ...)
  for i = 1, 2 do   -- (not ipairs{a, b}: it stops at a nil a or b)
    local v = select(i, a, b)
    if not core.is_tensor(v) or v:dim() < 2 then
      error(("cdist: x%d must be a tensor of 2 or more dims [..., rows, features], got %s"):format(i,
        core.is_tensor(v) and v:shape_str() or got(v)), 2)
    end
    -- (refused by the difference's sub as 'sub: e4m3 tensor: ...', naming an op the caller did not call; stop 98)
    if v:is_fp8() then error(("cdist: x%d is an %s tensor: call :dequantize() first"):format(i, v:dtype()), 2) end
  end
  p = p or 2
  if type(p) ~= "number" or not (p >= 0) then error(("cdist: p must be a number >= 0, got %s"):format(got(p)), 2) end
  if a:size(-1) ~= b:size(-1) then
    error(("cdist: x1 %s and x2 %s must have the same number of features"):format(a:shape_str(), b:shape_str()), 2)
  end
  a, b = T._autocast_fp32(a, b)   -- fp32 under autocast, as torch's CPU autocast
  local c = cdist_rows(a, b)
  if c >= a:size(-2) then return cdist_of(a, b, p) end
  if not (core.is_grad_enabled() and (a:requires_grad() or b:requires_grad())) then return cdist_chunked(a, b, p, c) end
  -- the Function's result is fp32, rounded here to the dtype the chunks' distances have (cdist_of of no rows): a
  -- Function's gradient takes its result's dtype, and the chunks' backward is to read the fp32 gradient the whole
  -- tensor's graph reads (a bf16 one was x1's gradient up to 2e-2 off the unchunked one; stop 103)
  local dt = cdist_of(rows_of(a, 1, 0):detach(), b:detach(), p):dtype()
  return cdist_fn()(a, b, p, c):to(dt)
end)

-- searchsorted(sorted_sequence, values [, {right=false, side=}]): for each value the 0-based position in its row of
-- the sorted sequence (1-d, or one row per leading index of values) where it would be inserted, before equal
-- elements (after them with right=true or side="right"); bucketize(input, boundaries [, {right=false}]): the same
-- over 1-d boundaries
local function search(name, seq, vals, right)
  local n = seq:size(-1)
  opts.exact_positions(name, n, ("the insertion positions in a sequence of %d"):format(n), 3)
  local rows = seq:dim() == 1 and 1 or seq:numel() // math.max(n, 1)
  local s = seq:numel() > 0 and seq:reshape({ -1 }):tolist() or {}
  local vshape = vals:shape()
  local per = seq:dim() == 1 and vals:numel() or vals:numel() // math.max(rows, 1)
  local v = vals:numel() > 0 and vals:reshape({ -1 }):tolist() or {}
  local out = {}
  for i, x in ipairs(v) do
    local r = seq:dim() == 1 and 0 or (i - 1) // math.max(per, 1)
    local lo, hi = 0, n   -- the first position whose element is > x (right) or >= x (left); NaN sorts last
    while lo < hi do
      local mid = (lo + hi) // 2
      local e = s[r * n + mid + 1]
      local before = right and (e <= x) or (not right and e < x)
      if x ~= x then before = e == e end
      if before then lo = mid + 1 else hi = mid end
    end
    out[i] = lo
  end
  if #out == 0 then return core.zeros(vshape) end
  return on_dev(out, vals):reshape(vshape)
end
local function side_of(name, o)
  o = opts.check(name, o, { "right", "side" }, 3)
  if o.right ~= nil and type(o.right) ~= "boolean" then
    error(("%s: right must be a boolean, got %s"):format(name, got(o.right)), 3)
  end
  if o.side ~= nil and o.side ~= "left" and o.side ~= "right" then
    error(("%s: side must be \"left\" or \"right\", got %s"):format(name, got(o.side)), 3)
  end
  if o.side == "left" and o.right then error(("%s: side=\"left\" and right=true disagree"):format(name), 3) end
  return o.right == true or o.side == "right"
end
M.searchsorted = at_caller(function(seq, vals, o, ...)
  no_more("searchsorted", "(sorted_sequence, values [, {right=, side=}])", ...)
  if not core.is_tensor(seq) or seq:dim() < 1 then
    error(("searchsorted: sorted_sequence must be a tensor of 1 or more dims, got %s"):format(got(seq)), 2)
  end
  if type(vals) == "number" then vals = core.tensor({ vals }):reshape({}) end
  if not core.is_tensor(vals) then
    error(("searchsorted: values must be a tensor or a number, got %s"):format(
      got(vals)), 2)
  end
  if seq:dim() > 1 then
    local ok = vals:dim() == seq:dim()
    for i = 1, seq:dim() - 1 do ok = ok and vals:size(i) == seq:size(i) end
    if not ok then
      error(("searchsorted: values %s must share the leading dims of the sorted sequence %s"):format(vals:shape_str(),
        seq:shape_str()), 2)
    end
  end
  return search("searchsorted", seq, vals, side_of("searchsorted", o))
end)
M.bucketize = at_caller(function(input, boundaries, o, ...)
  no_more("bucketize", "(input, boundaries [, {right=}])", ...)
  if type(input) == "number" then input = core.tensor({ input }):reshape({}) end
  if not core.is_tensor(input) then error(("bucketize: input must be a tensor or a number, got %s"):format(got(input)),
    2) end
  if not core.is_tensor(boundaries) or boundaries:dim() ~= 1 then
    error(("bucketize: boundaries must be a 1-d tensor, got %s"):format(got(boundaries)), 2)
  end
  o = opts.check("bucketize", o, { "right" }, 2)
  if o.right ~= nil and type(o.right) ~= "boolean" then
    error(("bucketize: right must be a boolean, got %s"):format(got(o.right)), 2)
  end
  return search("bucketize", boundaries, input, o.right == true)
end)

-- bincount(input [, {weights=, minlength=0}]): how often each whole number 0..max occurs in the 1-d input (or the
-- sum of the weights at its positions), at least minlength entries
M.bincount = at_caller(function(input, o, ...)
  no_more("bincount", "(input [, {weights=, minlength=0}])", ...)
  if not core.is_tensor(input) or input:dim() ~= 1 then
    error(("bincount: input must be a 1-d tensor of whole numbers >= 0, got %s"):format(got(input)), 2)
  end
  o = opts.check("bincount", o, { "weights", "minlength" }, 2)
  local minlength = o.minlength or 0
  if math.type(minlength) ~= "integer" or minlength < 0 then
    error(("bincount: minlength must be an integer >= 0, got %s"):format(got(minlength)), 2)
  end
  local w = o.weights
  if w ~= nil and (not core.is_tensor(w) or w:dim() ~= 1 or w:numel() ~= input:numel()) then
    error(("bincount: weights must be a 1-d tensor of the input's %d elements, got %s"):format(input:numel(),
      got(w)), 2)
  end
  local xs = input:numel() > 0 and input:tolist() or {}
  local ws = w and (w:numel() > 0 and w:tolist() or {}) or nil
  local hi = -1
  for i, v in ipairs(xs) do
    if not (v == math.floor(v) and v >= 0 and v < 1 << 24) then
      error(("bincount: input must hold whole numbers in 0..2^24, got %s at %d"):format(got(math.tointeger(v) or v), i),
        2)
    end
    if v > hi then hi = v end
  end
  local n = math.max(math.tointeger(hi) + 1, minlength)
  local counts = {}
  for i = 1, n do counts[i] = 0 end
  for i, v in ipairs(xs) do counts[v + 1] = counts[v + 1] + (ws and ws[i] or 1) end
  if n == 0 then return core.zeros({ 0 }) end
  return on_dev(counts, input)
end)

-- isin(elements, test_elements [, {invert=false}]): 1 where an element equals one of test_elements (a tensor or a
-- number), else 0; NaN is in nothing
M.isin = at_caller(function(elements, test, o, ...)
  no_more("isin", "(elements, test_elements [, {invert=}])", ...)
  if type(elements) == "number" then elements = core.tensor({ elements }):reshape({}) end
  if not core.is_tensor(elements) then
    error(("isin: elements must be a tensor or a number, got %s"):format(
      got(elements)), 2)
  end
  if type(test) == "number" then test = core.tensor({ test }) end
  if not core.is_tensor(test) then error(("isin: test_elements must be a tensor or a number, got %s"):format(got(test)),
    2) end
  o = opts.check("isin", o, { "invert" }, 2)
  if o.invert ~= nil and type(o.invert) ~= "boolean" then
    error(("isin: invert must be a boolean, got %s"):format(got(o.invert)), 2)
  end
  local set = {}
  for _, v in ipairs(test:numel() > 0 and test:reshape({ -1 }):tolist() or {}) do
    if v == v then set[v == 0 and 0 or v] = true end
  end
  local out = {}
  for i, v in ipairs(elements:numel() > 0 and elements:reshape({ -1 }):tolist() or {}) do
    local hit = v == v and set[v == 0 and 0 or v] == true
    if o.invert then hit = not hit end
    out[i] = hit and 1 or 0
  end
  if #out == 0 then return core.zeros(elements:shape()) end
  return on_dev(out, elements):reshape(elements:shape())
end)

-- unique(input [, {sorted=true, return_inverse=false, return_counts=false}]): the distinct values, ascending (NaNs
-- each their own, last), or with sorted=false in the order they first appear (torch leaves that order unspecified);
-- and as asked the inverse (each element's position among them, in the input's shape) and the counts; no gradient
M.unique = at_caller(function(input, o, ...)
  no_more("unique", "(input [, {sorted=, return_inverse=, return_counts=}])", ...)
  if not core.is_tensor(input) then error(("unique: input must be a tensor, got %s"):format(got(input)), 2) end
  self_of("unique", input)   -- live, not FP8 (its result's to(dtype) named to(), not unique, before)
  if type(o) == "table" and rawget(o, "dim") ~= nil then
    error("unique: dim is not supported (the distinct elements of the whole tensor only)", 2)
  end
  o = opts.check("unique", o, { "sorted", "return_inverse", "return_counts", "dim" }, 2)
  for _, k in ipairs { "sorted", "return_inverse", "return_counts" } do
    if o[k] ~= nil and type(o[k]) ~= "boolean" then
      error(("unique: %s must be a boolean, got %s"):format(k, got(o[k])), 2)
    end
  end
  local xs = input:numel() > 0 and input:reshape({ -1 }):tolist() or {}
  local distinct, seen = {}, {}
  for _, v in ipairs(xs) do
    local key = v == 0 and 0 or v
    if v ~= v then distinct[#distinct + 1] = v
    elseif not seen[key] then seen[key] = true; distinct[#distinct + 1] = v end
  end
  if o.sorted ~= false then
    table.sort(distinct, function(a, b) if a ~= a then return false elseif b ~= b then return true end return a < b end)
  end
  local pos, count, nans = {}, {}, {}
  for i, v in ipairs(distinct) do
    if v == v then pos[v == 0 and 0 or v] = i - 1 else nans[#nans + 1] = i - 1 end
    count[i] = 0
  end
  local inverse, nan_at = {}, 0
  for i, v in ipairs(xs) do
    local p
    if v ~= v then nan_at = nan_at + 1; p = nans[nan_at] else p = pos[v == 0 and 0 or v] end
    inverse[i] = p
    count[p + 1] = count[p + 1] + 1
  end
  if o.return_inverse then
    opts.exact_positions("unique", #distinct - 1, ("the inverse indices of %d distinct values"):format(#distinct), 2)
  end
  if o.return_counts then
    local most = 0
    for _, c in ipairs(count) do if c > most then most = c end end
    opts.exact_positions("unique", most, "the counts", 2)
  end
  local vals = #distinct > 0 and on_dev(distinct, input):to(input:dtype())
    or core.zeros({ 0 }, { dtype = input:dtype(), device = input:device() })   -- (an empty one kept fp32)
  local res = { vals }
  if o.return_inverse then
    res[#res + 1] = #inverse > 0 and on_dev(inverse, input):reshape(input:shape()) or core.zeros(input:shape())
  end
  if o.return_counts then res[#res + 1] = #count > 0 and on_dev(count, input) or core.zeros({ 0 }) end
  return table.unpack(res)
end)

-- logspace(start, end, steps [, {base=10, dtype=, device=}]): base^linspace(start, end, steps), in double and rounded
-- once to the dtype (torch's dtype= and device=, checked as the other factories check them: {dtype=} was refused)
M.logspace = at_caller(function(a, b, steps, o, ...)
  no_more("logspace", "(start, end, steps [, {base=, dtype=, device=}])", ...)
  o = opts.check("logspace", o, { "base", "dtype", "device" }, 2)
  local ok, z = pcall(core.empty, { 0 }, { dtype = o.dtype, device = o.device })
  if not ok then error("logspace: " .. tostring(z):gsub("^empty: ", ""):gsub("^logspace: ", ""), 2) end
  local base = o.base or 10
  for _, v in ipairs { { "start", a }, { "end", b }, { "base", base } } do
    if type(v[2]) ~= "number" then error(("logspace: %s must be a number, got %s"):format(v[1], got(v[2])), 2) end
  end
  if math.type(steps) ~= "integer" or steps < 0 or steps > 1 << 24 then
    error(("logspace: steps must be an integer in 0..2^24, got %s"):format(got(steps)), 2)
  end
  local out = {}
  for i = 0, steps - 1 do
    local e = steps == 1 and a or a + (b - a) * i / (steps - 1)
    out[i + 1] = base ^ e
  end
  if steps == 0 then return z end
  local r = core.tensor(out, z:dtype())
  if z:device() ~= "cpu" then r = r:to(z:device()) end
  return r
end)

return M
