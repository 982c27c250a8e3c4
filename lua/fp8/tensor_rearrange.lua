-- tensor_rearrange.lua — torch's ops that lay a tensor's elements out anew: unbind, flip, roll, tile (torch's
-- x.repeat(...), a Lua keyword here) and repeat_interleave. Each is made of differentiable views and copies
-- (select, index_select, narrow, cat), so gradients flow back to every element taken (a repeated element gets the
-- sum of its copies' gradients), and none needs more dims than the tensor has.
local core = require "fp8.core"
local T = require "fp8.tensor"
local opts = require "fp8.opts"
local Tensor = core.Tensor
local no_more, got = opts.no_more, opts.got
local check_self, check_not_fp8, norm_dim = T._check_self, T._check_not_fp8, T._norm_dim
local at_caller = T._at_caller   -- every method below raises its errors at the user's line

local function self_of(name, t)
  check_not_fp8(name, check_self(name, t))
  if t:dim() == 0 then error(("%s: a 0-d tensor has no dim to work along"):format(name)) end
end

-- v as a list: a plain table's entries 1..n read raw (a proxy's __len or __index cannot make it endless), at most
-- max of them, or a lone value as a list of one
local function list_of(name, what, v, max)
  if type(v) ~= "table" or core.is_tensor(v) then return { v } end
  require("fp8.opts").check_list(name, what, v, 2)   -- (at_caller places it at the caller)
  local n = rawlen(v)
  if n > max then error(("%s: %s has %d entries, more than %d"):format(name, what, n, max)) end
  local out = {}
  for i = 1, n do out[i] = rawget(v, i) end
  return out
end

-- dims: one dim or a list of distinct dims, each normalised to 1..nd
local function dims_of(name, d, nd)
  local list = list_of(name, "the list of dims", d, nd)
  if #list == 0 then error(("%s: expected a dim or a list of dims, got %s"):format(name, got(d))) end
  local seen, out = {}, {}
  for i, v in ipairs(list) do
    out[i] = norm_dim(name, v, nd)
    if seen[out[i]] then
      error(("%s: dim %d appears twice in {%s}"):format(name, out[i], table.concat(list, ", ")))
    end
    seen[out[i]] = true
  end
  return out
end

-- unbind([dim=1]): the slices along dim, as several values (torch's tuple): local q, k, v = qkv:unbind(3)
Tensor.unbind = at_caller(function(t, dim, ...)
  no_more("unbind", "([dim=1])", ...)
  check_self("unbind", t)
  if t:dim() == 0 then error("unbind: a 0-d tensor has no dim to unbind") end
  dim = norm_dim("unbind", dim or 1, t:dim())
  local out = {}
  for i = 1, t:size(dim) do out[i] = t:select(dim, i) end
  return table.unpack(out, 1, t:size(dim))
end)

-- flip(dims): the order of each listed dim reversed (a copy, as torch's)
Tensor.flip = at_caller(function(t, dims, ...)
  no_more("flip", "(dims)", ...)
  self_of("flip", t)
  local ds = dims_of("flip", dims, t:dim())
  local dt = t:dtype()
  if t:device() == "cpu" and dt ~= "e4m3" and dt ~= "e5m2" then
    -- one pass, a row at a time (core/flip.c); the index_select per dim below was 10× torch's
    local mask = 0
    for _, d in ipairs(ds) do mask = mask | (1 << (d - 1)) end
    return t:_flip(mask)
  end
  local r = t
  for _, d in ipairs(ds) do
    local n = t:size(d)
    opts.exact_positions("flip", n - 1, ("the indices along dim %d"):format(d), 2)
    if n > 1 then r = r:index_select(d, core.arange(n - 1, -1, -1)) end
  end
  if r == t then r = t:clone() end
  return r
end)

-- roll(shifts [, dims]): elements shifted along each dim by its shift, those past the end coming round to the start;
-- without dims over the flattened tensor, then its shape again (torch's)
Tensor.roll = at_caller(function(t, shifts, dims, ...)
  no_more("roll", "(shifts [, dims])", ...)
  self_of("roll", t)
  local sl = list_of("roll", "the list of shifts", shifts, t:dim())
  for _, s in ipairs(sl) do
    if math.type(s) ~= "integer" then error(("roll: shifts must be integers, got %s"):format(got(shifts))) end
  end
  if dims == nil then
    if #sl ~= 1 then error(("roll: without dims, one shift (got %d)"):format(#sl)) end
    return t:reshape(-1):roll(sl[1], 1):view(t:shape())
  end
  local dl = dims_of("roll", dims, t:dim())
  if #dl ~= #sl then error(("roll: %d shifts for %d dims"):format(#sl, #dl)) end
  local r = t
  for i, d in ipairs(dl) do
    local n = t:size(d)
    local s = n > 0 and sl[i] % n or 0
    if s ~= 0 then r = core.cat({ r:narrow(d, n - s + 1, s), r:narrow(d, 1, n - s) }, d) end
  end
  if r == t then r = t:clone() end
  return r
end)

-- tile(reps...) / tile{reps}: torch's x.repeat(reps) (and torch.tile): the tensor repeated reps[i] times along dim
-- i (positions selected dim by dim); more reps than dims add leading dims of size 1 first (fewer: tile leaves the
-- leading dims as they are)
local MAX_DIMS = 8   -- core/tensor.h's FL_MAX_DIMS
Tensor.tile = at_caller(function(t, ...)
  check_not_fp8("tile", check_self("tile", t))
  local reps
  if type((...)) == "table" then
    no_more("tile", "({reps}) or (reps...)", select(2, ...))
    reps = list_of("tile", "the list of repeats", (...), MAX_DIMS)
  else
    reps = list_of("tile", "the repeats", { ... }, MAX_DIMS)
  end
  if #reps == 0 then error("tile: expected the repeats (integers >= 0), got none") end
  for _, r in ipairs(reps) do
    if math.type(r) ~= "integer" or r < 0 then
      error(("tile: repeats must be integers >= 0, got %s"):format(got(r)))
    end
  end
  local shape = t:shape()
  while #reps < #shape do table.insert(reps, 1, 1) end
  while #shape < #reps do table.insert(shape, 1, 1) end
  local bytes = core.format(t:dtype()).bits / 8   -- a float product: never overflows
  for i = 1, #shape do bytes = bytes * reps[i] * shape[i] end
  if bytes > core._max_bytes then
    error(("tile: the result would take %.4g bytes, more than one tensor may hold (%d)"):format(bytes, core._max_bytes))
  end
  local x = t:reshape(shape)
  local copied = false   -- (x is a view of t until an index_select or narrow: tile copies, as torch's)
  for d, r in ipairs(reps) do
    local n = shape[d]
    if r == 0 then x = x:narrow(d, 1, 0); copied = true
    elseif r > 1 and n > 0 then
      copied = true
      if r * (n + 0.0) > 2 ^ 24 then   -- the positions are fp32 whole numbers, exact up to 2^24
        error(("tile: %d × %d positions along dim %d, more than 2^24"):format(r, n, d))
      end
      local pos = core.arange(r * n)
      x = x:index_select(d, pos - (pos / n):floor() * n)   -- position i takes element i mod n
    end
  end
  if not copied then x = x:clone() end
  return x
end)

-- repeat_interleave(repeats [, dim]): each element repeated `repeats` times in place along dim (an integer; without
-- dim over the flattened tensor), as torch's; repeats given per element (a tensor) are not offered
Tensor.repeat_interleave = at_caller(function(t, repeats, dim, ...)
  no_more("repeat_interleave", "(repeats [, dim])", ...)
  check_not_fp8("repeat_interleave", check_self("repeat_interleave", t))
  if math.type(repeats) ~= "integer" or repeats < 0 then
    error(("repeat_interleave: repeats must be an integer >= 0 (repeats per element, a tensor, are not offered), "
      .. "got %s"):format(got(repeats)))
  end
  if dim == nil then return t:reshape(-1):repeat_interleave(repeats, 1) end
  if t:dim() == 0 then t = t:reshape(1) end
  dim = norm_dim("repeat_interleave", dim, t:dim())
  local n = t:size(dim)
  if n * (repeats + 0.0) > 2 ^ 24 then   -- the positions are fp32 whole numbers, exact up to 2^24 (a float product)
    error(("repeat_interleave: %d × %d positions along dim %d, more than 2^24"):format(n, repeats, dim))
  end
  -- position i of the result takes element floor(i / repeats): index_select's backward adds the copies' gradients
  return t:index_select(dim, (core.arange(n * repeats) / repeats):floor())
end)

-- movedim(source, destination) (alias moveaxis): the dims in source (a dim or a list) moved to the positions in
-- destination, the others keeping their order (torch's); a view
local function movedim(name)
  return at_caller(function(t, src, dst, ...)
    no_more(name, "(source, destination)", ...)
    check_self(name, t)
    local nd = t:dim()
    local s, d = dims_of(name, src, math.max(nd, 1)), dims_of(name, dst, math.max(nd, 1))
    if #s ~= #d then
      error(("%s: source and destination must list as many dims, got %d and %d"):format(name, #s, #d))
    end
    local perm, taken, used = {}, {}, {}
    for i = 1, #s do perm[d[i]] = s[i]; taken[s[i]] = true; used[d[i]] = true end
    local rest = {}
    for k = 1, nd do if not taken[k] then rest[#rest + 1] = k end end
    local j = 1
    for k = 1, nd do
      if not used[k] then perm[k] = rest[j]; j = j + 1 end
    end
    if nd < 2 then return t:view(t:shape()) end
    return t:permute(perm)
  end)
end
Tensor.movedim, Tensor.moveaxis = movedim("movedim"), movedim("moveaxis")

-- swapaxes(dim0, dim1) (alias swapdims): transpose's torch aliases
local function swap(name)
  return at_caller(function(t, a, b, ...)
    no_more(name, "(dim0, dim1)", ...)
    check_self(name, t)
    local nd = math.max(t:dim(), 1)
    a, b = norm_dim(name, a, nd), norm_dim(name, b, nd)
    if t:dim() < 2 then return t:view(t:shape()) end
    return t:transpose(a, b)
  end)
end
Tensor.swapaxes, Tensor.swapdims = swap("swapaxes"), swap("swapdims")

-- unflatten(dim, sizes): dim split into sizes (a list whose product is the dim's size; one -1 is inferred), torch's
Tensor.unflatten = at_caller(function(t, dim, sizes, ...)
  no_more("unflatten", "(dim, sizes)", ...)
  check_self("unflatten", t)
  if t:dim() == 0 then error("unflatten: a 0-d tensor has no dim to unflatten") end
  dim = norm_dim("unflatten", dim, t:dim())
  if type(sizes) ~= "table" or core.is_tensor(sizes) or rawlen(sizes) == 0 then
    error(("unflatten: sizes must be a non-empty list of sizes, got %s"):format(got(sizes)))
  end
  local list = list_of("unflatten", "sizes", sizes, 8)
  local n, known, infer = t:size(dim), 1, nil
  for i, v in ipairs(list) do
    if math.type(v) ~= "integer" or (v < 0 and v ~= -1) then
      error(("unflatten: sizes must be integers >= 0 or one -1, got %s at %d"):format(got(v), i))
    end
    if v == -1 then
      if infer then error("unflatten: only one size can be -1") end
      infer = i
    else
      known = known * v
    end
  end
  if infer then
    if known == 0 or n % known ~= 0 then
      error(("unflatten: dim %d of size %d cannot take the sizes {%s}"):format(dim, n, table.concat(list, ", ")))
    end
    list[infer] = n // known
  elseif known ~= n then
    error(("unflatten: the sizes {%s} multiply to %d, not dim %d's size %d"):format(table.concat(list, ", "), known,
      dim, n))
  end
  local shape = {}
  for k = 1, t:dim() do
    if k == dim then for _, v in ipairs(list) do shape[#shape + 1] = v end else shape[#shape + 1] = t:size(k) end
  end
  return t:reshape(shape)
end)

return {}
