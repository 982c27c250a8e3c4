-- tensor_scatter.lua — torch's index_add, index_copy and index_fill: along dim, the positions a 1-d index names
-- (0-based) take source's slices, added (times alpha), copied, or a value. Each is scatter_add or scatter (core,
-- core/scatter.c) with the index spread over the other dims, as index_select was gather's, so gradients reach the
-- tensor and the source as torch's (a position index_copy writes gives the tensor no gradient there).
local core = require "fp8.core"
local T = require "fp8.tensor"
local opts = require "fp8.opts"
local Tensor = core.Tensor
local no_more, got = opts.no_more, opts.got
local check_self, check_live, check_not_fp8 = T._check_self, T._check_live, T._check_not_fp8
local at_caller = T._at_caller   -- every method below raises its errors at the user's line

-- torch's 0-d forms (torch 2.15, tests/data/sweep117_torch.lua from scripts/gen_sweep117.py): a 0-d tensor, index
-- or src counts as a 1-d one of size 1 (torch's ensure_nonempty_dim), so dim is 1 or -1 there, and the result has
-- the index's shape (gather: 0-d for a 0-d index) or the tensor's (scatter: 0-d for a 0-d tensor); an empty index
-- is taken without the shape rules (gather: an empty result of the index's shape; scatter: the tensor unchanged).
-- Every other form goes to core's gather/scatter as before (core/gather.c, core/scatter.c).
local c_gather, c_scatter, c_scatter_add = Tensor.gather, Tensor.scatter, Tensor.scatter_add
local function one_d(t) return t:dim() == 0 and t:reshape { 1 } or t end
local function dims(t) return math.max(t:dim(), 1) end

-- dim normalised (1-based, positive) against t's dims, a 0-d tensor's one implicit dim counted
local function dim_of(name, t, dim)
  local nd = dims(t)
  if math.type(dim) ~= "integer" or dim == 0 or math.abs(dim) > nd then
    error(("%s: dim must be in 1..%d or -%d..-1%s, got %s"):format(name, nd, nd,
      t:dim() == 0 and " (a 0-d tensor's one implicit dim)" or "", got(dim)))
  end
  return dim < 0 and nd + 1 + dim or dim
end

local function check_index(name, index)
  if not core.is_tensor(index) then error(("%s: expected an index tensor, got %s"):format(name, got(index))) end
  check_live(name, "the index", index)
end

-- a core error under the method's name
local function call(name, f, ...)
  local r = table.pack(pcall(f, ...))
  if r[1] then return r[2] end
  error((tostring(r[2]):gsub("^[^:\n]*%.lua:%d+: ", ""):gsub("^scatter_add: ", name .. ": "):gsub("^scatter: ",
    name .. ": ")), 0)
end

-- torch 2.15's size rules (tests/data/sweep118_torch.lua from scripts/gen_sweep118.py): an index may be smaller than
-- the tensor in every dim but dim, and (scatter) than src in every dim; only the index's extent is read or written.
-- Core's gather and scatter take an index of the tensor's shape but for dim, and src of the index's shape, so the
-- tensor (gather, scatter) and src are narrowed to the index's sizes first (views: gradients follow), and scatter's
-- result is the written box with the tensor's other values put back around it by cat, dim by dim (no arithmetic, so
-- the bits are the tensor's). FP8 tensors and the forms core refuses otherwise (dims, dim) keep core's messages.
local function is_fp8(t) local d = t:dtype(); return d == "e4m3" or d == "e5m2" end
local function shape_of(s) return "[" .. table.concat(s, ", ") .. "]" end

-- dim normalised (1-based) when it names one of t's dims (t not 0-d), else nil: core says what is wrong
local function dim_in(t, dim)
  local nd = t:dim()
  if math.type(dim) ~= "integer" or dim == 0 or math.abs(dim) > nd then return nil end
  return dim < 0 and nd + 1 + dim or dim
end

-- t narrowed to sizes in every dim but skip where sizes are smaller
local function narrow_to(t, sizes, skip)
  for i = 1, #sizes do
    if i ~= skip and sizes[i] < t:size(i) then t = t:narrow(i, 1, sizes[i]) end
  end
  return t
end

-- the first dim (not d) where the index is larger than the tensor's (or, every dim, src's) size: a refusal as torch's
local function check_sizes(name, t, d, index, src)
  local ts, is, ss = t:shape(), index:shape(), src and src:shape()
  for i = 1, #is do
    local over_t, over_s = i ~= d and is[i] > ts[i], ss and is[i] > ss[i]
    if over_t or over_s then
      error(("%s: index %s must be no larger than the tensor %s in every dim but dim %d%s (torch's rule), got %d > %d "
        .. "at dim %d"):format(name, shape_of(is), shape_of(ts), d, ss and (" and no larger than src " .. shape_of(ss))
        or "", is[i], over_t and ts[i] or ss[i], i))
    end
  end
end

-- core's gather of t (ndim as index's, d valid) with torch's smaller index sizes
local function gather_fit(t, d, index)
  check_sizes("gather", t, d, index)
  return call("gather", c_gather, narrow_to(t, index:shape(), d), d, index)
end

-- core's scatter/scatter_add of t (ndim as index's and src's, d valid) with torch's smaller index sizes
local function scatter_fit(name, cf, t, d, index, src)
  local st = core.is_tensor(src) and src or nil
  check_sizes(name, t, d, index, st)
  local is, ts = index:shape(), t:shape()
  if st then src = narrow_to(st, is) end
  local box = false
  for i = 1, #is do box = box or (i ~= d and is[i] < ts[i]) end
  if not box then return call(name, cf, t, d, index, src) end
  local r = call(name, cf, narrow_to(t, is, d), d, index, src)
  -- r is t's box written (full along d, the index's sizes elsewhere); each dim i it is short in takes t's rest there,
  -- of r's sizes in the dims before i (already full) and the index's in the dims after it
  for i = 1, #is do
    if i ~= d and is[i] < ts[i] then
      local rest = t:narrow(i, is[i] + 1, ts[i] - is[i])
      for j = i + 1, #is do
        if j ~= d and is[j] < ts[j] then rest = rest:narrow(j, 1, is[j]) end
      end
      r = core.cat({ r, rest }, i)
    end
  end
  return r
end

-- t:gather(dim, index) (also fp8.gather(t, dim, index))
Tensor.gather = at_caller(function(t, dim, index, ...)
  if core.is_tensor(t) and core.is_tensor(index) and t:dim() > 0 and index:dim() > 0 and index:numel() > 0 then
    local d = select("#", ...) == 0 and not is_fp8(t) and dim_in(t, dim)
    if d and index:dim() ~= t:dim() then
      error(("gather: the index must have the tensor's number of dims, %d, got %s"):format(t:dim(), index:shape_str()))
    end
    if d then return gather_fit(t, d, index) end   -- (torch's smaller index sizes)
    return call("gather", c_gather, t, dim, index, ...)   -- the other forms: core's checks and messages
  end
  check_self("gather", t)
  no_more("gather", "(dim, index)", ...)
  check_index("gather", index)
  local d = dim_of("gather", t, dim)
  local src = one_d(t)
  if index:numel() == 0 then
    -- an empty index of any shape (torch reads none of its sizes): an empty result of its shape, through core's
    -- gather with an index of the tensor's shape but 0 along dim (so the gradient reaches t, as zeros)
    local shape = src:shape()
    shape[d] = 0
    return (call("gather", c_gather, src, d, index:reshape(shape)):reshape(index:shape()))
  end
  if dims(index) ~= dims(t) then
    error(("gather: the index must have the tensor's number of dims, %d (a 0-d tensor or index counts as 1-d), got %s")
      :format(dims(t), index:shape_str()))
  end
  local r = gather_fit(src, d, one_d(index))
  return index:dim() == 0 and r:reshape {} or r
end)

-- t:scatter(dim, index, src | value), t:scatter_add(dim, index, src) (also fp8.scatter(t, ...))
local function scatter_form(name, cf)
  return at_caller(function(t, dim, index, src, ...)
    if select("#", ...) > 0 or (core.is_tensor(t) and core.is_tensor(index) and t:dim() > 0 and index:dim() > 0
        and index:numel() > 0 and not (core.is_tensor(src) and src:dim() == 0)) then
      local d = select("#", ...) == 0 and not is_fp8(t) and not is_fp8(index)
        and (type(src) == "number" or core.is_tensor(src)) and dim_in(t, dim)
      if d and (index:dim() ~= t:dim() or core.is_tensor(src) and src:dim() ~= t:dim()) then
        error(("%s: the index%s must have the tensor's number of dims, %d, got %s%s"):format(name,
          core.is_tensor(src) and " and src" or "", t:dim(), index:shape_str(),
          core.is_tensor(src) and (" and " .. src:shape_str()) or ""))
      end
      if d then return scatter_fit(name, cf, t, d, index, src) end   -- (torch's smaller index sizes)
      return call(name, cf, t, dim, index, src, ...)   -- the other forms (and reduce=): core's checks and messages
    end
    check_self(name, t)
    check_index(name, index)
    local d = dim_of(name, t, dim)
    if core.is_tensor(src) then check_live(name, "src", src)
    elseif not (name == "scatter" and type(src) == "number") then
      error(("%s: expected a src tensor%s, got %s"):format(name, name == "scatter" and " or a number value" or "",
        got(src)))
    end
    if index:numel() == 0 then
      -- an empty index of any shape (torch reads none of its sizes, nor src's): the tensor's values unchanged, through
      -- core's scatter with an index and a src of the tensor's shape but 0 along dim, so that the result is on src's
      -- graph as torch's (src's gradient zeros, t's passed on)
      check_not_fp8(name, t:dtype())
      if not core.is_tensor(src) then return t:clone() end
      local t1 = one_d(t)
      local shape = t1:shape()
      shape[d] = 0
      local src0 = src:reshape { src:numel() }:narrow(1, 1, 0):reshape(shape)
      local r = call(name, cf, t1, d, index:reshape(shape), src0)
      return t:dim() == 0 and r:reshape {} or r
    end
    if dims(index) ~= dims(t) or (core.is_tensor(src) and dims(src) ~= dims(t)) then
      error(("%s: the index%s must have the tensor's number of dims, %d (a 0-d tensor, index or src counts as "
        .. "1-d), got %s%s"):format(name, core.is_tensor(src) and " and src" or "", dims(t), index:shape_str(),
        core.is_tensor(src) and (" and " .. src:shape_str()) or ""))
    end
    local r = scatter_fit(name, cf, one_d(t), d, one_d(index), core.is_tensor(src) and one_d(src) or src)
    return t:dim() == 0 and r:reshape {} or r
  end)
end
Tensor.scatter = scatter_form("scatter", c_scatter)
Tensor.scatter_add = scatter_form("scatter_add", c_scatter_add)
core.gather, core.scatter, core.scatter_add = Tensor.gather, Tensor.scatter, Tensor.scatter_add

-- the index over the shape of t with dim's size k: [k] viewed and expanded as scatter takes it; dim normalised. A 0-d
-- t works as [1] (t1, returned), a 0-d index as one position (torch 2.15's, as index_select's).
local function spread(name, t, dim, index)
  check_not_fp8(name, check_self(name, t))
  dim = dim_of(name, t, dim)
  check_index(name, index)
  if index:dim() > 1 then error(("%s: the index must be 1-d (or 0-d), got %s"):format(name, index:shape_str())) end
  index = one_d(index)
  local t1 = one_d(t)
  local view, full = {}, t1:shape()
  for i = 1, t1:dim() do view[i] = i == dim and index:size(1) or 1 end
  full[dim] = index:size(1)
  return dim, index:view(view):expand(full), full, t1
end

-- source of the shape t has with dim's size k (torch's index_add/index_copy)
local function check_source(name, t, dim, source, full)
  if not core.is_tensor(source) then error(("%s: expected a source tensor, got %s"):format(name, got(source))) end
  check_live(name, "the source", source)
  local s = source:shape()
  local same = #s == #full
  for i = 1, #full do same = same and s[i] == full[i] end
  if not same then
    error(("%s: source must be %s (the tensor's shape with dim %d's size the index's %d), got %s"):format(name,
      "[" .. table.concat(full, ", ") .. "]", dim, full[dim], source:shape_str()))
  end
end

-- t:index_add(dim, index, source [, alpha | {alpha=1}])
Tensor.index_add = at_caller(function(t, dim, index, source, alpha, ...)
  no_more("index_add", "(dim, index, source [, {alpha=}])", ...)
  local d, idx, full, t1 = spread("index_add", t, dim, index)
  -- torch's: a 0-d tensor takes a 0-d source (as [1]); any other takes a source of its own number of dims
  if t:dim() == 0 and core.is_tensor(source) then
    if source:dim() ~= 0 then
      error(("index_add: a 0-d tensor takes a 0-d source (torch's), got %s"):format(source:shape_str()))
    end
    source = one_d(source)
  end
  check_source("index_add", t, d, source, full)
  if type(alpha) == "table" and not core.is_tensor(alpha) then
    alpha = opts.check("index_add", alpha, { "alpha" }, 3).alpha
  end
  if alpha ~= nil and (type(alpha) ~= "number" or alpha ~= alpha) then
    error(("index_add: alpha must be a number, got %s"):format(got(alpha)))
  end
  if alpha ~= nil and alpha ~= 1 then source = source * alpha end
  local r = call("index_add", t1.scatter_add, t1, d, idx, source)
  return t:dim() == 0 and r:reshape {} or r
end)

-- t:index_copy(dim, index, source)
Tensor.index_copy = at_caller(function(t, dim, index, source, ...)
  no_more("index_copy", "(dim, index, source)", ...)
  local d, idx, full, t1 = spread("index_copy", t, dim, index)
  -- torch's: a 0-d source into a 0-d or 1-d tensor is one slice (as [1]: the index must name one position); an index
  -- of another length is named against the 0-d shape given, not the [1] it is read as (before stop 105: "got [1]")
  if t:dim() <= 1 and core.is_tensor(source) and source:dim() == 0 then
    if full[d] ~= 1 then
      error(("index_copy: a 0-d source (shape []) is one slice: the index must have one element, got %d (torch's "
        .. "rule)"):format(full[d]))
    end
    source = one_d(source)
  end
  check_source("index_copy", t, d, source, full)
  local r = call("index_copy", t1.scatter, t1, d, idx, source)
  return t:dim() == 0 and r:reshape {} or r
end)

-- t:index_fill(dim, index, value): value a number (or a 0-d tensor's)
Tensor.index_fill = at_caller(function(t, dim, index, value, ...)
  no_more("index_fill", "(dim, index, value)", ...)
  local d, idx, _, t1 = spread("index_fill", t, dim, index)
  if core.is_tensor(value) then
    check_live("index_fill", "value", value)
    if value:dim() ~= 0 then
      error(("index_fill: value must be a number or a 0-d tensor, got a tensor of shape %s"):format(value:shape_str()))
    end
    value = value:detach():float():item()
  elseif type(value) ~= "number" then
    error(("index_fill: value must be a number or a 0-d tensor, got %s"):format(got(value)))
  end
  local r = call("index_fill", t1.scatter, t1, d, idx, value)
  return t:dim() == 0 and r:reshape {} or r
end)

return {}
