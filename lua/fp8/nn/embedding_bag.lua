-- embedding_bag.lua — torch's EmbeddingBag and F.embedding_bag: the sum, mean or max of each bag of embeddings,
-- without the [tokens, dim] intermediate a user would reduce by hand. Bags are the rows of a 2-D input, or the
-- spans of a 1-D input that offsets start (include_last_offset: offsets also end the last one). per_sample_weights
-- scale each entry (mode "sum" only, torch's rule); padding_idx entries are left out (of the mean's count too); an
-- empty bag gives zeros. fp32 CPU weights take core's one-pass kernel (fused below); otherwise built of embedding,
-- index_add (sum, mean) and a gather of each bag padded by repeating its last entry (max), so gradients flow to the
-- weight and the per-sample weights as torch's.
local fp8 = require "fp8.core"
local Module = require "fp8.nn.module"
local F = require "fp8.nn.functional"
local O = require "fp8.opts"
local init = require "fp8.nn.init_fns"

local M = {}
local public, strip = require("fp8.errfmt").public_of("embedding_bag.lua")

local MODES = { sum = true, mean = true, max = true }

-- the bags: a list per bag of the (1-based) positions of input it takes
local function bags_of(fname, input, offsets, include_last)
  local n = input:numel()
  if input:dim() == 2 then
    if offsets ~= nil then error(("%s: offsets must be nil for a 2-D input (each row is a bag)"):format(fname), 0) end
    local B, L, bags = input:size(1), input:size(2), {}
    for b = 1, B do
      local bag = {}
      for j = 1, L do bag[j] = (b - 1) * L + j end
      bags[b] = bag
    end
    return bags
  end
  if input:dim() ~= 1 then
    error(("%s: input must be 1-D (with offsets) or 2-D (one bag per row), got %s"):format(fname, input:shape_str()),
      0)
  end
  if not fp8.is_tensor(offsets) or offsets:dim() ~= 1 then
    error(("%s: a 1-D input needs offsets, a 1-D tensor of the bags' starts, got %s"):format(fname,
      fp8.is_tensor(offsets) and offsets:shape_str() or O.got(offsets)), 0)
  end
  local starts = offsets:numel() > 0 and offsets:tolist() or {}
  if include_last then
    if #starts == 0 then error(("%s: include_last_offset needs at least one offset"):format(fname), 0) end
    if starts[#starts] ~= n then
      error(("%s: with include_last_offset the last offset must be the input's length %d, got %s"):format(fname, n,
        O.got(starts[#starts])), 0)
    end
  else
    starts[#starts + 1] = n
  end
  local bags = {}
  for b = 1, #starts - 1 do
    local s, e = starts[b], starts[b + 1]
    if s ~= math.floor(s) or s < 0 or e < s or s > n then
      error(("%s: offsets must be whole numbers rising from 0 to at most %d, got %s at %d"):format(fname, n,
        O.got(math.tointeger(s) or s), b), 0)
    end
    if b == 1 and s ~= 0 then error(("%s: the first offset must be 0, got %s"):format(fname, O.got(s)), 0) end
    local bag = {}
    for j = s + 1, e do bag[#bag + 1] = math.tointeger(j) end
    bags[b] = bag
  end
  return bags
end

-- The bags' starts [B + 1] as a tensor for core's embedding_bag (fl_embedding_bag), or nil where bags_of would
-- refuse the offsets or there is no bag (the composite path then gives its error or its empty result)
local function starts_of(input, offsets, include_last)
  local n = input:numel()
  if n > 1 << 24 then return nil end   -- (fp32 starts count exactly up to 2^24)
  local st = {}
  if input:dim() == 2 then
    if offsets ~= nil then return nil end
    local L = input:size(2)
    for b = 0, input:size(1) do st[b + 1] = b * L end
  elseif input:dim() == 1 and fp8.is_tensor(offsets) and offsets:dim() == 1 and offsets:numel() > 0 then
    st = offsets:tolist()
    if include_last then
      if st[#st] ~= n then return nil end
    else
      st[#st + 1] = n
    end
    for b = 1, #st do
      local s = st[b]
      if s ~= math.floor(s) or s < 0 or s > n or (b == 1 and s ~= 0) or (b > 1 and s < st[b - 1]) then return nil end
    end
  else
    return nil
  end
  if #st < 2 then return nil end
  return fp8.tensor(st)
end

-- fp32 CPU weights (and per_sample_weights) without max_norm: core's segment sums or maxima in one pass over the ids
-- (core/embedding_bag.c: the same bits as the composite below, each bag's rows added in order from zero, max's
-- first maximum); nil where it does not apply or refuses (a bad id: the composite then raises its own message)
local function fused(input, weight, offsets, o, mode, pad)
  local psw = o.per_sample_weights
  if o.max_norm ~= nil or input:numel() == 0 or weight:device() ~= "cpu" or weight:dtype() ~= "fp32"
      or (psw ~= nil and (psw:device() ~= "cpu" or psw:dtype() ~= "fp32")) then
    return nil
  end
  local starts = starts_of(input, offsets, o.include_last_offset == true)
  if starts == nil then return nil end
  local ok, y = pcall(require("fp8._nn")._embedding_bag, input, weight, starts, mode, pad or -1, psw)
  if ok then return y end
  return nil
end

local function embedding_bag(fname, input, weight, offsets, o)
  if not fp8.is_tensor(input) then error(("%s: input must be a tensor, got %s"):format(fname, O.got(input)), 0) end
  if not fp8.is_tensor(weight) or weight:dim() ~= 2 then
    error(("%s: weight must be [num_embeddings, dim], got %s"):format(fname, fp8.is_tensor(weight)
      and weight:shape_str() or O.got(weight)), 0)
  end
  local mode = o.mode or "mean"
  if not MODES[mode] then
    error(("%s: mode must be \"sum\", \"mean\" or \"max\", got %s"):format(fname, O.got(mode)), 0)
  end
  for _, k in ipairs { "scale_grad_by_freq", "sparse" } do
    if o[k] ~= nil and o[k] ~= false then
      error(("%s: %s=%s is not supported (%s)"):format(fname, k, O.got(o[k]), k == "sparse"
        and "there are no sparse gradients here" or "gradients are not scaled by frequency here"), 0)
    end
  end
  if o.include_last_offset ~= nil and type(o.include_last_offset) ~= "boolean" then
    error(("%s: include_last_offset must be a boolean, got %s"):format(fname, O.got(o.include_last_offset)), 0)
  end
  local psw = o.per_sample_weights
  if psw ~= nil then
    if mode ~= "sum" then
      error(("%s: per_sample_weights are only supported for mode \"sum\" (torch's), got mode \"%s\""):format(fname,
        mode), 0)
    end
    local ok = fp8.is_tensor(psw) and psw:dim() == input:dim()
    for d = 1, input:dim() do ok = ok and psw:size(d) == input:size(d) end
    if not ok then
      error(("%s: per_sample_weights must have the input's shape %s, got %s"):format(fname, input:shape_str(),
        fp8.is_tensor(psw) and psw:shape_str() or O.got(psw)), 0)
    end
  end
  local V, D = weight:size(1), weight:size(2)
  local pad = F._padding_idx(fname, o.padding_idx, V, 0)
  local y = fused(input, weight, offsets, o, mode, pad)
  if y ~= nil then return y end
  local bags = bags_of(fname, input, offsets, o.include_last_offset == true)
  local ids = input:numel() > 0 and input:reshape({ -1 }):tolist() or {}
  for i, v in ipairs(ids) do
    if not (v == math.floor(v) and v >= 0 and v < V) then
      error(("%s: index %s at %d is out of range for %d embeddings (0-based ids 0..%d)"):format(fname,
        O.got(math.tointeger(v) or v), i, V, V - 1), 0)
    end
  end
  -- the entries each bag keeps (padding_idx's left out)
  local kept, counts, Lmax = {}, {}, 0
  for b, bag in ipairs(bags) do
    local k = {}
    for _, j in ipairs(bag) do if pad == nil or ids[j] ~= pad then k[#k + 1] = j end end
    kept[b], counts[b], Lmax = k, #k, math.max(Lmax, #k)
  end
  local B, dev = #bags, weight:device()
  -- a bf16/fp16 weight: the bags summed in fp32 and the result rounded once to the weight's dtype, as torch's
  -- (index_add refused F.embedding's fp32 rows into a bf16 result: "mean" and "sum" failed)
  local T = require "fp8.tensor"
  local low = T._low_dtype(weight)
  local function in_dtype(t) return T._round_to(t, low) end
  local function on_dev(list) return require("fp8.tensor")._list_on(list, dev) end
  -- zeros of that shape in the graphs of the weight and of per_sample_weights (their gradients: zeros, as torch's)
  local function nothing(shape)
    local r = T._full_in_graph(weight, shape, 0)
    if psw ~= nil and psw:requires_grad() then r = r + T._full_in_graph(psw, shape, 0):to(r:dtype()) end
    return r
  end
  if B == 0 then return nothing({ 0, D }) end
  local emb_opts = o.max_norm ~= nil and { max_norm = o.max_norm, norm_type = o.norm_type } or nil
  if mode == "max" then
    if Lmax == 0 then return nothing({ B, D }) end
    local at, empty = {}, {}
    for b = 1, B do
      local k = kept[b]
      for t = 1, Lmax do at[#at + 1] = ids[k[math.min(t, #k)] or 1] end
      empty[b] = #k == 0 and 0 or 1
    end
    local e = F.embedding(on_dev(at), weight, emb_opts):reshape({ B, Lmax, D })
    local out = (e:max(2))
    return in_dtype(out * on_dev(empty):reshape({ B, 1 }))
  end
  local tok, bag_of, pos = {}, {}, {}
  for b = 1, B do
    for _, j in ipairs(kept[b]) do tok[#tok + 1] = ids[j]; bag_of[#bag_of + 1] = b - 1; pos[#pos + 1] = j - 1 end
  end
  if #tok == 0 then return nothing({ B, D }) end
  local e = F.embedding(on_dev(tok), weight, emb_opts)   -- [kept entries, D]
  if low then e = e:to("fp32") end
  if psw ~= nil then e = e * psw:reshape({ -1 }):index_select(1, on_dev(pos)):reshape({ #pos, 1 }) end
  local out = fp8.zeros({ B, D }, { dtype = e:dtype(), device = dev }):index_add(1, on_dev(bag_of), e)
  if mode == "mean" then
    local c = {}
    for b = 1, B do c[b] = math.max(counts[b], 1) end
    out = out / on_dev(c):reshape({ B, 1 })
  end
  return in_dtype(out)
end

local KEYS = { "mode", "per_sample_weights", "include_last_offset", "padding_idx", "max_norm", "norm_type",
  "scale_grad_by_freq", "sparse" }

-- embedding_bag(input, weight [, offsets] [, {mode="mean", per_sample_weights=, include_last_offset=false,
-- padding_idx=, max_norm=, norm_type=2}])
local function impl(input, weight, offsets, opts, ...)
  O.no_more("embedding_bag", "(input, weight [, offsets] [, {mode=, per_sample_weights=, include_last_offset=, "
    .. "padding_idx=, max_norm=, norm_type=}])", ...)
  if type(offsets) == "table" and not fp8.is_tensor(offsets) and opts == nil then offsets, opts = nil, offsets end
  return embedding_bag("embedding_bag", input, weight, offsets, O.check("embedding_bag", opts, KEYS))
end
F.embedding_bag = public(impl)

-- EmbeddingBag(num_embeddings, embedding_dim [, {mode="mean", include_last_offset=false, padding_idx=, max_norm=,
-- norm_type=2}]); m(input [, offsets [, per_sample_weights]]). weight N(0, 1), its padding row zeros, as torch's.
M.EmbeddingBag = Module.class("EmbeddingBag")
function M.EmbeddingBag:__init(num, dim, opts, ...)
  local ok, err = pcall(function(...)
    O.no_more("EmbeddingBag", "(num_embeddings, embedding_dim [, {options}])", ...)
    if type(num) == "table" then
      if dim ~= nil then error("EmbeddingBag: pass the sizes and options as one table or as arguments, not both", 0) end
      local keys = { "num_embeddings", "embedding_dim" }
      for _, k in ipairs(KEYS) do if k ~= "per_sample_weights" then keys[#keys + 1] = k end end
      opts = O.check("EmbeddingBag", num, keys)
      num, dim = opts.num_embeddings, opts.embedding_dim
    else
      local keys = {}
      for _, k in ipairs(KEYS) do if k ~= "per_sample_weights" then keys[#keys + 1] = k end end
      opts = O.check("EmbeddingBag", opts, keys)
    end
    for _, a in ipairs { { "num_embeddings", num }, { "embedding_dim", dim } } do
      if math.type(a[2]) ~= "integer" or a[2] < 1 then
        error(("EmbeddingBag: %s must be a positive integer, got %s"):format(a[1], O.got(a[2])), 0)
      end
    end
    Module._check_size("EmbeddingBag", 3, "num_embeddings * embedding_dim", num, dim)
    -- the options checked now, on an empty bag
    embedding_bag("EmbeddingBag", fp8.zeros({ 0 }), fp8.zeros({ num, dim }), fp8.zeros({ 1 }), opts)
    self.num_embeddings, self.embedding_dim = num, dim
    self.mode, self.include_last_offset = opts.mode or "mean", opts.include_last_offset == true
    self.padding_idx = F._padding_idx("EmbeddingBag", opts.padding_idx, num, 0)
    self.max_norm, self.norm_type = opts.max_norm, opts.norm_type or 2.0
    local w = init.normal({ num, dim }, 0, 1)
    if self.padding_idx then fp8.no_grad(function() w:narrow(1, self.padding_idx + 1, 1):fill_(0) end) end
    self:register_parameter("weight", w)
  end, ...)
  if not ok then error(strip(err), 3) end
end
function M.EmbeddingBag:forward(input, offsets, per_sample_weights)
  return embedding_bag("EmbeddingBag", input, self.weight, offsets, { mode = self.mode,
    per_sample_weights = per_sample_weights, include_last_offset = self.include_last_offset,
    padding_idx = self.padding_idx, max_norm = self.max_norm, norm_type = self.norm_type })
end
function M.EmbeddingBag:extra_repr()
  return ("%d, %d, mode='%s'%s"):format(self.num_embeddings, self.embedding_dim, self.mode,
    self.padding_idx and (", padding_idx=%d"):format(self.padding_idx) or "")
end

return M
