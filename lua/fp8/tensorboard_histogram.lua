-- tensorboard_histogram.lua — the histogram of torch.utils.tensorboard's add_histogram (its make_histogram, numpy's
-- np.histogram underneath), for fp8.SummaryWriter (lua/fp8/tensorboard.lua): the values as float64, counted into
-- bins (TensorFlow's default exponential buckets, n equal bins over [min, max], or given edges), optionally merged
-- down to max_bins, then cut to the bins from the first to the last that holds a value, with one empty bin on the
-- left so that TensorBoard, which reads each bucket's right limit only, sees where the first one starts.
local O = require "fp8.opts"

local M = {}

-- TensorFlow's default buckets, as torch's SummaryWriter makes them: ±1e-12·1.1^k below 1e20, and 0
local DEFAULT
local function default_bins()
  if DEFAULT then return DEFAULT end
  local pos, v = {}, 1e-12
  while v < 1e20 do
    pos[#pos + 1] = v
    v = v * 1.1
  end
  local edges = {}
  for i = #pos, 1, -1 do edges[#edges + 1] = -pos[i] end
  edges[#edges + 1] = 0.0
  for i = 1, #pos do edges[#edges + 1] = pos[i] end
  DEFAULT = edges
  return edges
end

-- numpy's linspace(lo, hi, n + 1) as np.histogram makes equal bins: i·step + lo, the last edge hi itself
local function equal_bins(lo, hi, n)
  if lo == hi then lo, hi = lo - 0.5, hi + 0.5 end   -- (numpy's widening of an empty range)
  local step, edges = (hi - lo) / n, {}
  for i = 0, n - 1 do edges[i + 1] = i * step + lo end
  edges[n + 1] = hi
  return edges
end

-- the bin of x: the last edge <= x (the last bin also takes its right edge); nil outside the edges or NaN
local function bin_of(edges, x)
  local n = #edges
  if not (x >= edges[1] and x <= edges[n]) then return nil end
  if x == edges[n] then return n - 1 end
  local lo, hi = 1, n   -- edges[lo] <= x < edges[hi]
  while hi - lo > 1 do
    local mid = (lo + hi) // 2
    if edges[mid] <= x then lo = mid else hi = mid end
  end
  return lo
end

-- make(values, bins, max_bins) -> {min=, max=, num=, sum=, sum_squares=, limits={...}, counts={...}}: values a list
-- of numbers (at least one); bins "tensorflow", a count, or a list of increasing edges; max_bins nil or a count. An
-- error names what is wrong (the caller prefixes its own name).
-- t, checked to be a plain list of numbers (no metatable: a proxy's __len or __index cannot make it endless), or
-- an error naming what
local function numbers(what, t)
  if type(t) ~= "table" or getmetatable(t) ~= nil then
    error(("%s must be a plain list of numbers, got %s"):format(what, O.got(t)), 0)
  end
  for i = 1, rawlen(t) do
    local v = rawget(t, i)
    if type(v) ~= "number" then error(("%s[%d] must be a number, got %s"):format(what, i, O.got(v)), 0) end
  end
  return t
end

-- bins checked: nil is "tensorflow"; a count in 1..2^20; a list of at least 2 increasing numbers (copied)
local function bins_of(bins)
  if bins == nil or bins == "tensorflow" then return "tensorflow" end
  if math.type(bins) == "integer" then
    if bins < 1 or bins > 1 << 20 then error(("bins must be at least 1 (and at most 2^20), got %d"):format(bins), 0) end
    return bins
  end
  if type(bins) ~= "table" or getmetatable(bins) ~= nil then
    error(("bins must be \"tensorflow\", a count or a list of edges, got %s (numpy's other estimators are not "
      .. "offered)"):format(O.got(bins)), 0)
  end
  local edges = {}
  for i = 1, rawlen(bins) do
    local e = rawget(bins, i)
    if type(e) ~= "number" or e ~= e or (i > 1 and not (e > edges[i - 1])) then
      error(("bins must be increasing numbers, got %s at %d"):format(O.got(e), i), 0)
    end
    edges[i] = e
  end
  if #edges < 2 then error(("bins must hold at least 2 edges, got %d"):format(#edges), 0) end
  return edges
end

function M.make(values, bins, max_bins)
  values = numbers("values", values)
  bins = bins_of(bins)
  if max_bins ~= nil and (math.type(max_bins) ~= "integer" or max_bins < 1) then
    error(("max_bins must be an integer >= 1, got %s"):format(O.got(max_bins)), 0)
  end
  local n = #values
  if n == 0 then error("the values have no element", 0) end
  local mn, mx, sum, sq = values[1], values[1], 0.0, 0.0
  for i = 1, n do
    local x = values[i]
    -- numpy's min and max propagate a NaN
    if x ~= x or mn ~= mn then mn = 0 / 0 elseif x < mn then mn = x end
    if x ~= x or mx ~= mx then mx = 0 / 0 elseif x > mx then mx = x end
    sum = sum + x
    sq = sq + x * x
  end
  local edges
  if bins == "tensorflow" then
    edges = default_bins()
  elseif math.type(bins) == "integer" then
    if not (mn == mn and mx == mx and math.abs(mn) < math.huge and math.abs(mx) < math.huge) then
      error(("bins=%d spans the values' range, which is not finite (min %s, max %s): give edges"):format(bins,
        tostring(mn), tostring(mx)), 0)
    end
    edges = equal_bins(mn, mx, bins)
  else
    edges = bins
  end
  local counts = {}
  for i = 1, #edges - 1 do counts[i] = 0 end
  for i = 1, n do
    local b = bin_of(edges, values[i])
    if b then counts[b] = counts[b] + 1 end
  end
  local limits = edges
  if max_bins ~= nil and #counts > max_bins then
    -- merge runs of `sub` bins (the last run padded with empty ones), each keeping its first left edge
    local sub = #counts // max_bins
    local merged, ml = {}, {}
    for i = 1, #counts, sub do
      local c = 0
      for j = i, math.min(i + sub - 1, #counts) do c = c + counts[j] end
      merged[#merged + 1] = c
      ml[#ml + 1] = limits[i]
    end
    ml[#ml + 1] = limits[#limits]
    counts, limits = merged, ml
  end
  local first, last
  for i = 1, #counts do
    if counts[i] > 0 then
      first = first or i
      last = i
    end
  end
  if not first then
    error("no value falls inside the bins (all outside the edges, or NaN): the histogram would be empty", 0)
  end
  local oc, ol = {}, {}
  if first > 1 then
    -- the empty bin left of the first one holding a value, and the limits from its right edge on
    for i = first - 1, last do oc[#oc + 1] = counts[i] end
  else
    oc[1] = 0
    for i = 1, last do oc[#oc + 1] = counts[i] end
  end
  for i = first, last + 1 do ol[#ol + 1] = limits[i] end
  return { min = mn, max = mx, num = n, sum = sum, sum_squares = sq, limits = ol, counts = oc }
end

-- called from a user's code, these name themselves in their errors (fp8.opts.internal_functions; stop 101)
require("fp8.opts").internal_functions(M, "fp8.tensorboard_histogram")
return M
