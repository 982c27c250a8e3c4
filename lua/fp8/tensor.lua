-- fp8.tensor — the Lua half of the fp8.Tensor class: PyTorch-style printing (tostring, REPL) and
-- small methods that are clearer in Lua. The C half (lua/l_tensor.c) owns the memory.
local core = require "fp8.core"
local no_more = require("fp8.opts").no_more
local Tensor, mt = core.Tensor, core._metatable

local M = {}
M.threshold = 1000   -- more elements than this → summarised print
M.edgeitems = 3      -- kept at each end of a long dimension when summarised
M.precision = 4
M.small = 16               -- tensors with at most this many elements print significant digits (see make_formatter)
M.small_max_decimals = 8
M.linewidth = 80     -- a row wraps to stay within this many columns (torch's linewidth)

local function shape_str(shape)
  return "[" .. table.concat(shape, ", ") .. "]"
end

-- One number formatter for the whole tensor, chosen like PyTorch's _Formatter: whole numbers as "1." (scientific
-- past 1e8); else fixed point unless the magnitudes are very large (> 1e8), very small (< 1e-4), or span more than
-- 3 decades (max / min > 1000).
local function make_formatter(values)
  local maxa, mina, whole = 0, math.huge, true
  for _, v in ipairs(values) do
    local a = math.abs(v)
    if a == a and a ~= math.huge then
      if a ~= 0 then
        if a > maxa then maxa = a end
        if a < mina then mina = a end
      end
      if whole and v ~= math.floor(v) then whole = false end
    end
  end
  local p = M.precision
  local function special(v)
    if v ~= v then return "nan" end
    if v == math.huge then return "inf" elseif v == -math.huge then return "-inf" end
  end
  local sci = maxa > 0 and (maxa > 1e8 or maxa / mina > 1e3 or (mina < 1e-4 and not whole))   -- torch's bounds
  if whole and not sci then
    return function(v) return special(v) or (("%.0f"):format(v) .. ".") end
  end
  local decimals = p
  -- A scalar or a small tensor shows p significant digits of its smallest value, not p decimals
  -- (a max error of 0.000123 reads 0.0001230, not 0.0001); up to M.small_max_decimals, then e-notation.
  if not sci and #values <= M.small and mina < 1 and mina > 0 then
    decimals = p - 1 - math.floor(math.log(mina, 10))
    if decimals > M.small_max_decimals then sci = true; decimals = p end
  end
  local pat = sci and ("%." .. p .. "e") or ("%." .. decimals .. "f")
  return function(v) return special(v) or pat:format(v) end
end

local ELL = "..."

-- Render the flat row-major `strs` (kept sizes `kept`, real sizes `shape`) as nested brackets. A row of
-- the last dim wraps as torch's does: as many elements per line as fit in M.linewidth after the bracket's
-- indent, the continuation lines aligned under the first element.
local function render(strs, kept, shape, summarised, indent)
  local nd = #kept
  local pos = 1
  local w = strs[1] and #strs[1] or 1
  local function row(parts, ind)
    local per_line = math.max(1, (M.linewidth - #ind) // (w + 2))
    if #parts <= per_line then return "[" .. table.concat(parts, ", ") .. "]" end
    local lines = {}
    for i = 1, #parts, per_line do
      lines[#lines + 1] = table.concat(parts, ", ", i, math.min(#parts, i + per_line - 1))
    end
    return "[" .. table.concat(lines, ",\n" .. ind .. " ") .. "]"
  end
  local function block(d, ind)
    local parts = {}
    local n = kept[d]
    local cut = summarised and shape[d] > 2 * M.edgeitems
    for i = 1, n do
      -- (torch's: " ..." among the elements of a row, "..." for the rows left out)
      if cut and i == M.edgeitems + 1 then parts[#parts + 1] = d == nd and " " .. ELL or ELL end
      if d == nd then
        parts[#parts + 1] = strs[pos]; pos = pos + 1
      else
        parts[#parts + 1] = block(d + 1, ind .. " ")
      end
    end
    if d == nd then return row(parts, ind) end
    local sep = "," .. ("\n"):rep(nd - d) .. ind .. " "
    return "[" .. table.concat(parts, sep) .. "]"
  end
  return block(1, indent)
end

local function body(t)
  local shape = t:shape()
  local n = t:numel()
  if #shape == 0 then
    local v = t:item()
    return make_formatter({ v })(v)
  end
  if n == 0 then return "[]" end
  local summarised = n > M.threshold
  local values, kept
  if summarised then
    values, kept = t:_values(M.edgeitems)
  else
    values, kept = t:_values(), shape
  end
  local f = make_formatter(values)
  local strs, w = {}, 0
  for i, v in ipairs(values) do
    strs[i] = f(v)
    -- the column width of the finite values, as torch's (nan and inf are not padded to it, nor it to them)
    if #strs[i] > w and v == v and v ~= math.huge and v ~= -math.huge then w = #strs[i] end
  end
  for i, s in ipairs(strs) do strs[i] = (" "):rep(w - #s) .. s end
  return render(strs, kept, shape, summarised, (" "):rep(#"tensor("))
end

local function num(v) return ("%.6g"):format(v) end

function mt.__tostring(t)
  if t:is_released() then return "tensor(<released>)" end
  local parts = {}
  if t:is_fp8() then
    -- its values read dequantized element by element (as :dequantize() makes them): a dequantized copy of the whole
    -- ran out of memory for an expand of 2^40 elements, and cost a pass over all of a large tensor for 36 values
    parts[1] = body(t)
    parts[#parts + 1] = "dtype=" .. t:dtype()
    parts[#parts + 1] = "shape=" .. shape_str(t:shape())
    parts[#parts + 1] = "device=" .. t:device()
    local ax = t:scale_axis()
    if ax then
      local s = t:scale():_values()
      local shown = {}
      if #s <= 2 * M.edgeitems then
        for i, v in ipairs(s) do shown[i] = num(v) end
      else
        for i = 1, M.edgeitems do shown[#shown + 1] = num(s[i]) end
        shown[#shown + 1] = ELL
        for i = #s - M.edgeitems + 1, #s do shown[#shown + 1] = num(s[i]) end
      end
      parts[#parts + 1] = ("scale=[%s] (per index of dim %d)"):format(table.concat(shown, ", "), ax)
    else
      parts[#parts + 1] = "scale=" .. num(t:scale())
    end
    local q = t:qstats()
    if q.unknown then
      parts[#parts + 1] = "read from a file (its cast's amax and counters unknown)"
    else
      parts[#parts + 1] = "amax=" .. num(q.amax)
      parts[#parts + 1] = "underflow=" .. q.underflow
      parts[#parts + 1] = "saturated=" .. q.saturated
      if q.nan > 0 then parts[#parts + 1] = "nan=" .. q.nan end
      if q.part then parts[#parts] = parts[#parts] .. " (of the whole cast this is part of)" end
    end
  else
    parts[1] = body(t)
    parts[#parts + 1] = "dtype=" .. t:dtype()
    parts[#parts + 1] = "shape=" .. shape_str(t:shape())
    parts[#parts + 1] = "device=" .. t:device()
  end
  -- in the autograd graph: a leaf that takes a gradient, or the op that made it (torch's requires_grad=True,
  -- grad_fn=<MulBackward0>)
  local fn = t:grad_fn()
  if fn then parts[#parts + 1] = ("grad_fn=<%s>"):format(fn)
  elseif t:requires_grad() then parts[#parts + 1] = "requires_grad=true" end
  return "tensor(" .. table.concat(parts, ", ") .. ")"
end

-- t:print() — print and return the tensor (handy at the end of a chain).
function Tensor.print(t, ...)
  no_more("print", "no arguments", ...)
  print(tostring(t))
  return t
end

-- Lua-level convenience: t:tolist() for 1-D tensors is the same as totable().
Tensor.tolist = Tensor.totable

-- Dims in the Lua API count from 1 (negative from the end); nd is the number of valid positions.
-- level: that of the user's call as error() counts it from here (3: the method calling norm_dim was theirs).
local function norm_dim(who, d, nd, level)
  if math.type(d) ~= "integer" or d == 0 or d > nd or d < -nd then
    error(("%s: dim must be an integer in 1..%d or -%d..-1, got %s"):format(who, nd, nd, require("fp8.opts").got(d)),
      level or 3)
  end
  return d < 0 and nd + d + 1 or d
end

-- dim: one dim, or a list of them (torch's tuple: sorted, each once), of a tensor of nd dims; returns an integer or a
-- list of two or more. level: error's, from here (3: the caller's caller, as norm_dim's).
local function dims_of(who, dim, nd, level)
  level = level or 3
  if type(dim) ~= "table" or getmetatable(dim) ~= nil then return norm_dim(who, dim, nd, level + 1) end
  require("fp8.opts").check_list(who, "the dims", dim, level + 1)   -- {2, keepdim=true}'s keepdim was read by nothing
  if rawget(dim, 1) == nil then error(("%s: the list of dims is empty"):format(who), level) end
  local out, seen = {}, {}
  for i = 1, #dim do
    local d = norm_dim(who, rawget(dim, i), nd, level + 1)
    if seen[d] then error(("%s: dim %d appears twice in the list of dims"):format(who, d), level) end
    seen[d] = true
    out[#out + 1] = d
  end
  table.sort(out)
  return #out == 1 and out[1] or out
end

-- self must be a live tensor: a released one failed in the first core method the Lua method called, naming that
-- method ("calling 'to' on bad self") at this file's line. One C call, as is_tensor alone was; returns t's dtype.
local live_dtype = core._live_dtype
local function check_self(who, t, level)
  local dt = live_dtype(t)
  if dt == nil then error(("%s: expected a tensor as self, got %s"):format(who, type(t)), level or 3) end
  if not dt then error(("%s: the tensor has been released (freed or closed)"):format(who), level or 3) end
  return dt
end

-- an argument that is a tensor must be a live one (what: how the message names it)
local function check_live(who, what, v, level)
  if live_dtype(v) == false then error(("%s: %s has been released (freed or closed)"):format(who, what), level or 3) end
end

-- methods made of arithmetic (mul, div, sqrt, mean) refuse an FP8 self by their own name, with the core's advice
-- (dt: check_self's answer; the table caches each dtype's is_fp8)
local IS_FP8 = setmetatable({}, { __index = function(m, dt) m[dt] = core.format(dt).is_fp8; return m[dt] end })
local function check_not_fp8(who, dt, level)
  if IS_FP8[dt] then
    error(("%s: %s tensor: call :dequantize() first (FP8 tensors only hold quantized data)"):format(who, dt),
      level or 3)
  end
end

local function dtype_of(v) return core.is_tensor(v) and v:dtype() or nil end
local SELECTABLE = { fp32 = true, bf16 = true, fp16 = true }

-- torch's rule for a number written into (or compared as a bound of) a tensor of dtype dt: a finite one past the
-- dtype's range is refused ("value cannot be converted to type ... without overflow"), not made inf. Errors at level.
local function check_in_range(who, what, dt, v, level, kind)
  if type(v) == "number" and SELECTABLE[dt] and v == v and math.abs(v) ~= math.huge and
     math.abs(v) > core.format(dt).max then
    local function num(x)   -- as the C side's messages print a number (lua_pushfstring's %f: -1000000000.0)
      local t = ("%.14g"):format(x)
      return t:find("[.eEn]") and t or t .. ".0"
    end
    error(("%s: %s %s overflows %s (largest finite %s; give ±math.huge for an infinite %s)"):format(who, what,
      num(v), dt, num(core.format(dt).max), kind or what), level + 1)
  end
end

-- fp8.where(cond, a, b): torch.where: a where cond is nonzero (true), b elsewhere; a and b tensors or numbers,
-- everything broadcast. A selection, never a product: an inf or NaN in the branch not taken stays out, and each
-- value is the one chosen, bit for bit. Differentiable in a and b (each takes the gradient where it was chosen);
-- cond takes none. The result's dtype is a's and b's (fp32 when they differ or both are numbers).
function M.where(cond, a, b, ...)
  no_more("where", "(cond, a, b)", ...)
  if not core.is_tensor(cond) then
    error(("where: expected a tensor as the condition, got %s"):format(type(cond)), 2)
  end
  check_live("where", "the condition", cond)
  local vals = { a, b }
  for i = 1, 2 do   -- not ipairs: it would stop at a nil a
    if not core.is_tensor(vals[i]) and type(vals[i]) ~= "number" then
      error(("where: argument %d must be a tensor or a number, got %s"):format(i + 1, type(vals[i])), 2)
    end
    check_live("where", ("argument %d"):format(i + 1), vals[i])
  end
  local da, db = dtype_of(a), dtype_of(b)
  for _, d in pairs { da, db } do
    if not SELECTABLE[d] then error(("where: %s tensors cannot be selected from; dequantize them first"):format(d), 2) end
  end
  -- one node over a and b (the condition takes no gradient, not even a zero one), which keeps a byte per element
  -- of cond
  local ok, r = pcall(cond._where, cond, a, b)
  if not ok then   -- without this file's position, if the message carried one ahead of the caller's
    error((tostring(r):gsub("^[^:\n]*%.lua:%d+: ", "")), 2)
  end
  return r
end

-- t:masked_fill(mask, value): torch's: value where mask is nonzero, t elsewhere (value a number or a 0-d tensor).
function Tensor.masked_fill(t, mask, value, ...)
  check_self("masked_fill", t)
  no_more("masked_fill", "(mask, value)", ...)
  if not core.is_tensor(mask) then error(("masked_fill: expected a mask tensor, got %s"):format(type(mask)), 2) end
  check_live("masked_fill", "the mask", mask)
  check_live("masked_fill", "value", value)
  if type(value) ~= "number" and not (core.is_tensor(value) and value:dim() == 0) then
    error(("masked_fill: value must be a number or a 0-d tensor, got %s"):format(core.is_tensor(value) and
      ("a tensor of shape " .. shape_str(value:shape())) or type(value)), 2)
  end
  -- torch's: a finite value past t's dtype's range is refused (-1e9 in fp16 scores), not written as inf; a 0-d
  -- tensor's value too (torch converts its item)
  check_in_range("masked_fill", "value", t:dtype(), core.is_tensor(value) and value:detach():float():item() or value, 2,
    "fill")
  local ok, r = pcall(M.where, mask, value, t)
  if not ok then error((tostring(r):gsub("^where: ", "masked_fill: ")), 2) end
  if r:dtype() ~= t:dtype() then r = r:to(t:dtype()) end
  return r
end

-- t:tril([diagonal=0]) / t:triu([diagonal=0]): torch's, the lower (upper) triangle of the last two dims (of each
-- matrix of a batch), the rest zeros; diagonal shifts the edge (0: the main diagonal kept, 1: one above too, -1:
-- one below dropped). A selection (fp8.where), so the gradient flows where the triangle was kept.
local function triangle(name, t, k, lower, ...)
  local dt = check_self(name, t, 4)
  no_more(name, "([diagonal=0])", ...)
  k = k or 0
  if math.type(k) ~= "integer" then
    error(("%s: diagonal must be an integer, got %s"):format(name, require("fp8.opts").got(k)), 3)
  end
  if t:dim() < 2 then
    error(("%s: expects a matrix (or a batch of them), got a %d-d tensor"):format(name, t:dim()), 3)
  end
  if not SELECTABLE[dt] then error(("%s: %s tensor: dequantize it first"):format(name, dt), 3) end
  -- a CPU tensor: one pass, a row at a time (core/triangle.c, the same bits); the masks and where below were 7× torch
  if t:device() == "cpu" then return t:_triangle(k, lower) end
  local R, C = t:size(-2), t:size(-1)
  require("fp8.opts").exact_positions(name, math.max(R, C) - 1, ("the row and column indices of %d×%d"):format(R, C), 4)
  local dev = { device = t:device() }
  -- column − row for each place: kept where ≤ k (lower) or ≥ k (upper)
  local off = core.arange(C, dev):view(1, C) - core.arange(R, dev):view(R, 1)
  local keep = lower and off:le(k) or off:ge(k)
  local r = M.where(keep, t, 0)
  if r:dtype() ~= dt then r = r:to(dt) end
  return r
end
-- t:index_select(dim, index) (also fp8.index_select(t, dim, index)): torch's, the positions (a 1-d index, 0-based)
-- of dim in that order, the other dims whole (core/gather.c's fl_index_select copies each position's run), the
-- gradient going back to each position taken (a repeat adds).
function Tensor.index_select(t, dim, index, ...)
  local dt = check_self("index_select", t)
  no_more("index_select", "(dim, index)", ...)
  if not core.is_tensor(index) then
    error(("index_select: expected an index tensor, got %s"):format(type(index)), 2)
  end
  check_live("index_select", "the index", index)
  if index:dim() > 1 then
    error(("index_select: the index must be 1-d (or 0-d), got %s"):format(shape_str(index:shape())), 2)
  end
  -- torch 2.15's rules for 0-d (tests/data/index_select0d_torch.lua): a 0-d index is one position (the result keeps
  -- dim, of size 1); a 0-d x takes dim 1 or -1 (its one implicit dim, as sum's) and an index of exactly one element,
  -- which must be 0, and gives a 0-d result
  if index:dim() == 0 then index = index:reshape { 1 } end
  local nd = math.max(t:dim(), 1)
  if math.type(dim) ~= "integer" or dim == 0 or math.abs(dim) > nd then
    error(("index_select: dim must be in 1..%d or -%d..-1%s, got %s"):format(nd, nd,
      t:dim() == 0 and " (a 0-d tensor's one implicit dim)" or "", require("fp8.opts").got(dim)), 2)
  end
  if dim < 0 then dim = nd + 1 + dim end
  if not SELECTABLE[dt] then error(("index_select: %s tensor: dequantize it first"):format(dt), 2) end
  local src = t
  if t:dim() == 0 then
    if index:numel() ~= 1 then
      error(("index_select: the index into a 0-d tensor must have exactly 1 element, got %d"):format(index:numel()), 2)
    end
    src = t:reshape { 1 }
  end
  -- whole runs copied per position (core/gather.c's fl_index_select); it went through gather with the index expanded
  -- to the result's shape
  local ok, r = pcall(src._index_select, src, dim, index)
  if not ok then error((tostring(r):gsub("^[^:]*:%d+: ", "")), 2) end
  if t:dim() == 0 then r = r:reshape {} end
  return r
end
M.index_select = Tensor.index_select

function Tensor.tril(t, k, ...) return (triangle("tril", t, k, true, ...)) end
function Tensor.triu(t, k, ...) return (triangle("triu", t, k, false, ...)) end

-- t:clamp([min [, max]]) (also clamp{min=, max=}): torch's, as maximum(t, min) then minimum(., max), so
-- min > max gives max everywhere; min/max are numbers or tensors (broadcast). The gradient passes where t is
-- within the bounds, bounds included (PyTorch 1.x's rule; docs/lua-api.md says where 2.15 differs; tensor bounds
-- take it where t is past them). NaN stays NaN; a NaN tensor bound gives NaN there.
-- At least one bound is needed.
function Tensor.clamp(t, lo, hi, ...)
  check_self("clamp", t)
  if select("#", ...) > 0 then error("clamp: expected (min, max) or {min=, max=}", 2) end
  if type(lo) == "table" and not core.is_tensor(lo) and hi == nil then
    lo = require("fp8.opts").check("clamp", lo, { "min", "max" }, 2)
    lo, hi = lo.min, lo.max
  end
  for i, v in pairs { lo, hi } do   -- pairs: a nil min must not hide a bad max
    if type(v) ~= "number" and not core.is_tensor(v) then
      error(("clamp: %s must be a number, a tensor or nil, got %s"):format(i == 1 and "min" or "max", type(v)), 2)
    end
  end
  if lo == nil and hi == nil then error("clamp: at least one of min and max must be given", 2) end
  check_in_range("clamp", "min", t:dtype(), lo, 2, "bound")   -- (a bound past fp16's range clamped everything to inf)
  check_in_range("clamp", "max", t:dtype(), hi, 2, "bound")
  -- torch's gradients (2.15 on, the minimum-norm subgradient): number bounds pass t's gradient strictly inside
  -- them only (none at a bound, as relu's at 0), in one node that keeps t alone (the core's clamp; a missing bound
  -- is ±inf there, and masks nothing); a tensor bound is maximum's or minimum's, which split a tie's gradient
  -- between t and the bound and take a NaN from either (NaN in, NaN out, as torch's)
  local ok, r = pcall(function()
    local r = t
    local nlo, nhi = type(lo) == "number" and lo or nil, type(hi) == "number" and hi or nil
    if nlo ~= nil or nhi ~= nil then r = t:_clamp(nlo or -math.huge, nhi or math.huge) end
    local chained = r
    if core.is_tensor(lo) and core.is_tensor(hi) and (lo:requires_grad() or hi:requires_grad()) then
      -- with both bounds tensors, torch's gives a NaN's gradient (in t, min or max) to t alone; the chain of maximum
      -- and minimum gave it to all three (3·g in all, until 2026-12-05), so there the bounds enter detached
      local nan = r:detach():isnan():logical_or(lo:detach():isnan()):logical_or(hi:detach():isnan())
      if nan:any():item() ~= 0 then
        lo, hi = M.where(nan, lo:detach(), lo), M.where(nan, hi:detach(), hi)
      end
    end
    if core.is_tensor(lo) then r = r:maximum(lo) end
    if core.is_tensor(hi) then r = r:minimum(hi) end
    -- where min == max, torch gives the whole gradient to one of them: min below, x at the tie, max above (the chain
    -- split x == min == max among all three, and x < min between min and max)
    if core.is_tensor(lo) and core.is_tensor(hi) then
      local same = lo:detach():eq(hi:detach())
      if same:any():item() ~= 0 then
        local x = chained
        r = M.where(same, M.where(x:detach():lt(lo:detach()), lo, M.where(x:detach():gt(hi:detach()), hi, x)), r)
      end
    end
    return r
  end)
  -- a failure (a bound's shape, a device, an FP8 operand) is the caller's, by clamp's name: it was "lt: shapes ..."
  -- after this file's position
  if not ok then error((tostring(r):gsub("^[^:\n]*%.lua:%d+: ", ""):gsub("^[%a_]+: ", "clamp: ")), 2) end
  return r
end
function Tensor.clamp_min(t, v, ...)
  check_self("clamp_min", t)
  -- (a table went on to clamp as its {min=, max=} options: clamp_min{max=2} clamped the maximum)
  if select("#", ...) > 0 or type(v) == "table" and not core.is_tensor(v) then
    error(("clamp_min: expected (min), a number or a tensor, got %s"):format(require("fp8.opts").got(v)), 2)
  end
  return Tensor.clamp(t, v, nil)
end
function Tensor.clamp_max(t, v, ...)
  check_self("clamp_max", t)
  if select("#", ...) > 0 or type(v) == "table" and not core.is_tensor(v) then
    error(("clamp_max: expected (max), a number or a tensor, got %s"):format(require("fp8.opts").got(v)), 2)
  end
  return Tensor.clamp(t, nil, v)
end

-- Conversions by torch's names: t:float() (fp32), t:bfloat16(), t:half() (fp16); FP8 tensors are
-- dequantized with :dequantize() (their scale is part of the value), so :to refuses them with that advice.
function Tensor.float(t, ...) check_self("float", t); no_more("float", "no arguments", ...); return t:to("fp32") end
function Tensor.bfloat16(t, ...) check_self("bfloat16", t); no_more("bfloat16", "no arguments", ...); return t:to("bf16") end
function Tensor.half(t, ...) check_self("half", t); no_more("half", "no arguments", ...); return t:to("fp16") end

-- Shape helpers by torch's names, built on reshape (a view when the layout allows, else a copy) and transpose
-- (a view); all differentiable.
function Tensor.unsqueeze(t, dim, ...)
  check_self("unsqueeze", t)
  no_more("unsqueeze", "(dim)", ...)
  local s = t:shape()
  table.insert(s, norm_dim("unsqueeze", dim, #s + 1), 1)
  return t:reshape(s)
end

-- t:squeeze([dim]): without dim, every dim of size 1 goes; with dim, that one if its size is 1 (else t as it is).
-- A new view of all of t (torch's view ops return one even when nothing moves): the result is another tensor, so
-- freeing it, closing it or changing its requires_grad leaves t as it is.
local function alias(t) return t:expand(t:shape()) end
M._alias = alias

-- f(...) computed in fp32 where its tensor arguments are all bf16 or all fp16, the result rounded once to that dtype:
-- torch's CPU kernels compute these ops in fp32, and in the low dtype an intermediate overflowed or cancelled (fp16
-- softplus(12) was inf, a bf16 lerp whose terms cancel was 0, sinc's π·x was rounded before the sine). With an fp32
-- operand, or bf16 beside fp16, the result is fp32 (the promotion) and the low operands are widened first: run op by
-- op in their own dtype, addcmul's bf16 product was rounded to bf16 before its fp32 sum (65,536 fp32 ulps off).
-- Other dtypes (FP8, integers) leave f as it is.
local WIDE = { bf16 = "low", fp16 = "low", fp32 = "fp32" }

-- t's dtype where it is bf16 or fp16, else nil; and r rounded to such a dtype (nil: r as it is). The ops whose
-- kernels compute in fp32 give a bf16/fp16 input its dtype back through them, rounding once.
function M._low_dtype(t)
  local dt = t:dtype()
  if dt == "bf16" or dt == "fp16" then return dt end
end
function M._round_to(r, dt)
  if dt and r:dtype() ~= dt then return r:to(dt) end
  return r
end

-- Its arguments, the bf16 and fp16 tensors among them widened to fp32 (a differentiable cast) where the autocast
-- dtype is bf16 or fp16: the ops on torch 2.15's CPU autocast fp32 list compute in fp32 and return fp32 there (the
-- losses, prod, trace, quantile/nanquantile, cdist, local_response_norm, reflect/replicate pad). Outside autocast
-- each keeps its inputs' dtype, as torch's.
function M._autocast_fp32(...)
  if core.autocast_dtype() == "fp32" then return ... end
  local a = table.pack(...)
  for i = 1, a.n do
    local v = a[i]
    if core.is_tensor(v) and (v:dtype() == "bf16" or v:dtype() == "fp16") then a[i] = v:to("fp32") end
  end
  return table.unpack(a, 1, a.n)
end
function M._low_in_fp32(f, ...)
  local args, low, mixed = table.pack(...), nil, false
  for i = 1, args.n do
    local a = args[i]
    if core.is_tensor(a) then
      local dt = a:dtype()
      local kind = WIDE[dt]
      if not kind then return f(...) end
      if kind == "fp32" or (low and low ~= dt) then mixed = true end
      if kind == "low" then low = low or dt end
    end
  end
  if not low then return f(...) end
  for i = 1, args.n do
    local a = args[i]
    if core.is_tensor(a) and a:dtype() ~= "fp32" then args[i] = a:to("fp32") end
  end
  local r = f(table.unpack(args, 1, args.n))
  if mixed then return r end
  return r:to(low)
end

function Tensor.squeeze(t, dim, ...)
  check_self("squeeze", t)
  no_more("squeeze", "([dim])", ...)
  local s, out = t:shape(), {}
  if dim ~= nil then
    if #s == 0 then   -- a 0-d tensor: dim 1 or -1, as torch's (any value was taken)
      if dim ~= 1 and dim ~= -1 then
        error(("squeeze: dim must be 1 or -1 for a 0-d tensor, got %s"):format(require("fp8.opts").got(dim)), 2)
      end
      return alias(t)
    end
    local d = norm_dim("squeeze", dim, #s)
    if s[d] ~= 1 then return alias(t) end
    table.remove(s, d)
    return t:reshape(s)
  end
  for _, n in ipairs(s) do if n ~= 1 then out[#out + 1] = n end end
  if #out == #s then return alias(t) end
  return t:reshape(out)
end

-- t:flatten([start=1 [, end=-1]]): dims start..end merged into one.
function Tensor.flatten(t, first, last, ...)
  check_self("flatten", t)
  no_more("flatten", "([start [, end]])", ...)
  local s = t:shape()
  -- a 0-d tensor takes the dims a 1-d one would (torch's): 1 or -1
  first = norm_dim("flatten", first or 1, math.max(#s, 1))
  last = norm_dim("flatten", last or -1, math.max(#s, 1))
  if #s == 0 then return t:reshape { 1 } end
  if first > last then
    error(("flatten: start dim %d comes after end dim %d"):format(first, last), 2)
  end
  local out, n = {}, 1
  for d = 1, first - 1 do out[#out + 1] = s[d] end
  for d = first, last do n = n * s[d] end
  out[#out + 1] = n
  for d = last + 1, #s do out[#out + 1] = s[d] end
  -- reshape's refusal (a copy too large, out of memory; an FP8 tensor's scaled dim merged with another), by
  -- flatten's name at the caller's line
  local ok, r = pcall(t.reshape, t, out)
  if not ok then error((tostring(r):gsub("^[^:\n]*%.lua:%d+: ", ""):gsub("^reshape: ", "flatten: ")), 2) end
  return r
end

-- t:permute(d1, d2, ...) or t:permute{d1, d2, ...}: dim i of the result is dim d_i of t (a view: a sequence of
-- transposes).
function Tensor.permute(t, ...)
  check_self("permute", t)
  local dims = select("#", ...) == 1 and type((...)) == "table" and (...) or { ... }
  require("fp8.opts").check_list("permute", "the dims", dims)
  local nd = t:dim()
  if #dims ~= nd then
    error(("permute: expected %d dims for a %d-d tensor, got %d"):format(nd, nd, #dims), 2)
  end
  local want, seen = {}, {}
  for i = 1, nd do
    local d = norm_dim("permute", dims[i], nd)
    if seen[d] then error(("permute: dim %d appears twice"):format(d), 2) end
    seen[d], want[i] = true, d
  end
  local at = {}   -- at[k]: the dim of t now at position k
  for k = 1, nd do at[k] = k end
  local r = t
  for i = 1, nd do
    local j = i
    while at[j] ~= want[i] do j = j + 1 end
    if j ~= i then
      r = r:transpose(i, j)
      at[i], at[j] = at[j], at[i]
    end
  end
  return rawequal(r, t) and alias(t) or r
end

-- fp8.set_printoptions{precision=, threshold=, edgeitems=, linewidth=} (torch's names and meanings):
-- decimals shown, the element count past which a print is summarised, the elements kept at each end of a
-- summarised dim, and the columns a row wraps at. Returns the options as they were before the call.
local PRINT_OPTS = { precision = { 0, 16 }, threshold = { 0, math.maxinteger }, edgeitems = { 1, 1000 },
                     linewidth = { 10, 100000 } }
function M.set_printoptions(o, ...)
  no_more("set_printoptions", "({precision=, threshold=, edgeitems=, linewidth=})", ...)
  o = require("fp8.opts").check("set_printoptions", o, PRINT_OPTS)
  local before = {}
  for k in next, PRINT_OPTS do before[k] = M[k] end
  for k, v in next, o do
    local lo, hi = PRINT_OPTS[k][1], PRINT_OPTS[k][2]
    if math.type(v) ~= "integer" or v < lo or v > hi then
      error(("set_printoptions: %s must be an integer in %d..%d, got %s"):format(k, lo, hi, tostring(v)), 2)
    end
  end
  for k, v in next, o do M[k] = v end
  return before
end

-- fp8.stack(list [, dim=1]): the tensors (all of one shape) along a new dim, as torch.stack: each gets a
-- dimension of size 1 at dim (a differentiable reshape), then fp8.cat joins them there.
function M.stack(list, dim, ...)
  no_more("stack", "(list [, dim])", ...)
  if type(list) ~= "table" or getmetatable(list) ~= nil then
    error(("stack: expected a list of tensors, got %s"):format(type(list) == "table" and "a table with a metatable" or type(list)), 2)
  end
  local n = rawlen(list)
  if n == 0 then error("stack: expected a non-empty list of tensors", 2) end
  for i = 1, n do
    if not core.is_tensor(list[i]) then
      error(("stack: element %d of the list: expected a tensor, got %s"):format(i, type(list[i])), 2)
    end
    check_live("stack", ("element %d of the list"):format(i), list[i])
  end
  local shape = list[1]:shape()
  local nd = #shape + 1
  dim = dim or 1
  if math.type(dim) ~= "integer" or dim == 0 or dim > nd or dim < -nd then
    error(("stack: dim must be an integer in 1..%d or -%d..-1, got %s"):format(nd, nd, tostring(dim)), 2)
  end
  if dim < 0 then dim = nd + dim + 1 end
  local parts = {}
  for i = 1, n do
    local s = list[i]:shape()
    if #s ~= #shape then
      error(("stack: tensor %d has %d dims, tensor 1 %d: stack takes tensors of one shape"):format(i, #s, #shape), 2)
    end
    for d = 1, #s do
      if s[d] ~= shape[d] then
        error(("stack: tensor %d has shape %s, tensor 1 %s: stack takes tensors of one shape"):format(i, shape_str(s),
          shape_str(shape)), 2)
      end
    end
    table.insert(s, dim, 1)
    parts[i] = list[i]:reshape(s)
  end
  local ok, r = pcall(core.cat, parts, dim)
  if not ok then error((tostring(r):gsub("^cat: ", "stack: ")), 2) end
  return r
end

-- A factory's error raised again as `who`'s: without the internal location, Lua's "bad argument #n to 'f'" wrapper
-- or the factory's own name.
local function reraise(who, err)
  local msg = tostring(err):gsub("^[^:\n]*%.lua:%d+: ", "")
  msg = msg:match("^bad argument #%d+ to '[^']*' %((.*)%)$") or msg
  error(who .. ": " .. msg:gsub("^[%a_]+: ", ""), 3)
end

-- fp8.zeros_like / ones_like / empty_like / rand_like / randn_like (t [, dtype | {dtype=, device=}]) and
-- full_like(t, v [, ...]): t's shape, dtype and device unless given (torch's *_like). An FP8 t has no such
-- factory: its dtype must then be given.
local function like_opts(who, t, o)
  if not core.is_tensor(t) then error(("%s: expected a tensor, got %s"):format(who, type(t)), 3) end
  check_live(who, "the tensor", t, 4)
  local dt, dev = nil, t:device()
  if type(o) == "string" then dt = o
  elseif type(o) == "table" and getmetatable(o) == nil then
    require("fp8.opts").check(who, o, { dtype = true, device = true }, 3)
    dt, dev = o.dtype, o.device or dev
  elseif o ~= nil then
    error(("%s: expected a dtype name or {dtype=, device=} after the tensor, got %s"):format(who, type(o)), 3)
  end
  if dt == nil and t:is_fp8() then
    error(("%s: the tensor is %s, an FP8 format: give a dtype ({dtype=\"fp32\"}) and :quantize the result"):format(who,
      t:dtype()), 3)
  end
  return { dtype = dt or t:dtype(), device = dev }
end

for _, name in ipairs { "zeros", "ones", "empty", "rand", "randn" } do
  local who = name .. "_like"
  M[who] = function(t, o, ...)
    no_more(who, "(tensor [, dtype | {dtype=, device=}])", ...)
    local opts = like_opts(who, t, o)   -- first: it checks that t is a tensor (t:shape() of a number raised inside)
    local ok, r = pcall(core[name], t:shape(), opts)
    if not ok then reraise(who, r) end
    return r
  end
end

function M.full_like(t, v, o, ...)
  no_more("full_like", "(tensor, value [, dtype | {dtype=, device=}])", ...)
  local opts = like_opts("full_like", t, o)
  if type(v) ~= "number" then error(("full_like: expected a number as the value, got %s"):format(type(v)), 2) end
  local ok, r = pcall(core.full, t:shape(), v, opts)
  if not ok then reraise("full_like", r) end
  return r
end

-- t:new_zeros(shape [, dtype | {dtype=, device=}]) / new_ones / new_empty, t:new_full(shape, v [, ...]) and
-- t:new_tensor(data [, ...]): torch's, a new tensor with t's dtype and device unless given, and nothing else of t
-- (not its values, not requires_grad). shape: a list {2, 3}, or the sizes themselves, new_zeros(2, 3 [, opts]).
local function new_shape(who, args)
  local a = args[1]
  if type(a) == "table" and not core.is_tensor(a) then return a, 2 end
  local shape, i = {}, 1
  while math.type(args[i]) == "integer" do shape[i] = args[i]; i = i + 1 end
  if i == 1 then
    error(("%s: expected a shape (a list {2, 3} or sizes 2, 3), got %s"):format(who, require("fp8.opts").got(a)), 3)
  end
  return shape, i
end

-- (new_of is tail-called by the methods, so level 2 of its errors is the user's line)
local function new_of(who, name, t, rest, takes_value)
  check_self(who, t, 3)
  local args = table.pack(table.unpack(rest, 1, rest.n))
  local shape, i = new_shape(who, args)
  local v
  if takes_value then
    v = args[i]
    if type(v) ~= "number" then
      error(("%s: expected a number as the value after the shape, got %s"):format(who, require("fp8.opts").got(v)), 2)
    end
    i = i + 1
  end
  if args.n > i then
    error(("%s: takes (shape%s [, dtype | {dtype=, device=}]); got %d arguments after the tensor"):format(who,
      takes_value and ", value" or "", args.n), 2)
  end
  local opts = like_opts(who, t, args[i])
  local ok, r
  if takes_value then ok, r = pcall(core.full, shape, v, opts) else ok, r = pcall(core[name], shape, opts) end
  if not ok then reraise(who, r) end
  return r
end

for _, name in ipairs { "zeros", "ones", "empty" } do
  Tensor["new_" .. name] = function(t, ...) return new_of("new_" .. name, name, t, table.pack(...)) end
end
function Tensor.new_full(t, ...) return new_of("new_full", "full", t, table.pack(...), true) end

function Tensor.new_tensor(t, data, o, ...)
  check_self("new_tensor", t)
  no_more("new_tensor", "(data [, dtype | {dtype=, device=}])", ...)
  local opts = like_opts("new_tensor", t, o)
  local ok, r = pcall(core.tensor, data, opts.dtype)
  if not ok then reraise("new_tensor", r) end
  if r:device() ~= opts.device then r = r:to(opts.device) end
  return r
end

-- t:expand_as(y), t:view_as(y), t:reshape_as(y): expand / view / reshape to y's shape; t:type_as(y): t in y's dtype
-- and on y's device (the tensor itself when both already match)
local function other_tensor(who, y)
  if not core.is_tensor(y) then error(("%s: expected a tensor as other, got %s"):format(who, type(y)), 3) end
  check_live(who, "other", y, 4)
end
for _, name in ipairs { "expand", "view", "reshape" } do
  local who = name .. "_as"
  Tensor[who] = function(t, y, ...)
    check_self(who, t); no_more(who, "(other)", ...); other_tensor(who, y)
    local ok, r = pcall(t[name], t, y:shape())
    if not ok then reraise(who, r) end
    return r
  end
end
function Tensor.type_as(t, y, ...)
  check_self("type_as", t); no_more("type_as", "(other)", ...); other_tensor("type_as", y)
  local ok, r = pcall(function()
    local x = t
    if x:dtype() ~= y:dtype() then x = x:to(y:dtype()) end
    if x:device() ~= y:device() then x = x:to(y:device()) end
    return x
  end)
  if not ok then reraise("type_as", r) end
  return r
end

-- fp8.linspace(start, stop, steps [, dtype | {dtype=, device=}]): steps values from start to stop, both included
-- (torch.linspace), computed in double (start + i·step for the first half, stop − (steps − 1 − i)·step for the
-- second, so both ends are exact) and rounded once to the dtype.
function M.linspace(a, b, steps, o, ...)
  no_more("linspace", "(start, end, steps [, dtype | {dtype=, device=}])", ...)
  for i = 1, 2 do   -- (not ipairs{a, b}: it stops at a nil start or end)
    local v = select(i, a, b)
    if type(v) ~= "number" or v ~= v or v == math.huge or v == -math.huge then
      error(("linspace: %s must be a finite number, got %s"):format(i == 1 and "start" or "end", tostring(v)), 2)
    end
  end
  if math.type(steps) ~= "integer" or steps < 0 or steps > 1 << 24 then
    error(("linspace: steps must be an integer in 0..%d, got %s"):format(1 << 24, tostring(steps)), 2)
  end
  local vals, step = {}, steps > 1 and (b - a) / (steps - 1) or 0
  for i = 0, steps - 1 do
    vals[i + 1] = (i < steps // 2 or steps == 1) and a + i * step or b - (steps - 1 - i) * step
  end
  -- the options checked by a factory that takes a device too (fp8.tensor takes only a dtype: {device=} was refused)
  local ok, z = pcall(core.empty, { 0 }, o)
  if not ok then reraise("linspace", z) end
  if steps == 0 then return z end
  local r = core.tensor(vals, z:dtype())
  if z:device() ~= "cpu" then r = r:to(z:device()) end
  return r
end

-- fp8.eye(n [, m] [, dtype | {dtype=, device=}]): ones on the diagonal of an [n, m] matrix (m defaults to n).
function M.eye(n, m, o, ...)
  no_more("eye", "(n [, m] [, dtype | {dtype=, device=}])", ...)
  if m ~= nil and type(m) ~= "number" then   -- eye(n, dtype | opts); a nil m keeps the options after it
    if o ~= nil then error(("eye: m must be an integer in 0..%d, got %s"):format(1 << 16, tostring(m)), 2) end
    m, o = nil, m
  end
  if m == nil then m = n end
  for i = 1, 2 do   -- (not ipairs{n, m}: it stops at a nil n)
    local v = select(i, n, m)
    if math.type(v) ~= "integer" or v < 0 or v > 1 << 16 then
      error(("eye: %s must be an integer in 0..%d, got %s"):format(i == 1 and "n" or "m", 1 << 16, tostring(v)), 2)
    end
  end
  -- the options checked by the factory that takes them (zeros), then the identity made in fp32 on the host
  local ok, z = pcall(core.zeros, { 0 }, o)
  if not ok then reraise("eye", z) end
  local r = core.zeros({ n, m }, "fp32")
  for i = 1, math.min(n, m) do r:set({ i, i }, 1) end
  if z:dtype() ~= "fp32" then r = r:to(z:dtype()) end
  if z:device() ~= "cpu" then r = r:to(z:device()) end
  return r
end

-- t:var([dim] [, {correction=1, keepdim=false}]) and t:std(...): torch's (Bessel's correction by default;
-- its older (dim, unbiased [, keepdim]) too;
-- correction=0 is the population's), over everything, one dim or a list of dims; differentiable (made of mean, sub,
-- mul, sum).
local function var_of(who, t, dim, o)
  check_not_fp8(who, check_self(who, t, 4), 4)   -- var_of runs under var or std: the user's call is one level up
  -- a list of dims, as torch's tuple ({1, 3}); any other table without a metatable is the options
  local dims = nil
  if type(dim) == "table" and getmetatable(dim) == nil and rawget(dim, 1) ~= nil then
    dim = dims_of(who, dim, math.max(t:dim(), 1), 4)
    if type(dim) == "table" then dims = dim end
  elseif type(dim) == "table" and o == nil and getmetatable(dim) == nil then
    dim, o = nil, dim
  end
  o = require("fp8.opts").check(who, o or {}, { correction = true, keepdim = true }, 3)
  local corr, keep = o.correction or 1, o.keepdim or false
  if type(corr) ~= "number" or corr < 0 or corr ~= corr or corr == math.huge then
    error(("%s: correction must be a finite number >= 0, got %s"):format(who, tostring(corr)), 3)
  end
  if type(keep) ~= "boolean" then error(("%s: keepdim must be a boolean, got %s"):format(who, type(keep)), 3) end
  local n
  if dim == nil then
    n = t:numel()
  elseif dims then
    n = 1
    for _, d in ipairs(dims) do n = n * t:size(d) end
  else
    dim = norm_dim(who, dim, math.max(t:dim(), 1), 4)
    n = t:dim() == 0 and 1 or t:size(dim)
  end
  -- bf16/fp16: computed in fp32 and rounded once at the end, as torch's; each step rounded to bf16 (the mean, x - mean,
  -- its square) lost up to half the variance where the mean is large against the spread
  local odt = t:dtype()
  if odt == "bf16" or odt == "fp16" then t = t:to("fp32") end
  local function sums(x)   -- Σ (x − mean)² / (n − correction)
    local d
    if dim == nil then d = x - x:mean() else d = x - x:mean(dim, true) end
    local ss = dim == nil and (d * d):sum() or (d * d):sum(dim, keep)
    if dim == nil and keep then   -- every dim kept, of size 1
      local ones = {}
      for k = 1, x:dim() do ones[k] = 1 end
      ss = ss:reshape(ones)
    end
    return ss / math.max(n - corr, 0)   -- n ≤ correction: x / 0, inf or NaN, as torch's
  end
  local v = sums(t)
  if t:numel() == 0 then return v, odt end
  -- A row whose squares leave fp32 (|x| past 2^64, as 1e20's, or under 2^-60, as 1e-30's) made an inf or a tiny or
  -- 0 variance: such rows are brought near 1 (a large one near 2^40) by a power of two of their own (exact) and
  -- summed again, and the result is scaled back (once for std, so a std past 1.8e19 is finite), as torch's, which
  -- sums in double. back is that scale (a number, or a tensor of the result's shape), nil when no row needs it. The
  -- usual case costs two reductions over the result (its largest and smallest variance, all in range: the same
  -- bits); the rows' amax is read only when one is past 2^100 or under 2^-100 (a constant row's 0 too), or NaN.
  -- The gradient flows through the scales: where var itself is subnormal or 0, the back-scalings underflow its
  -- gradient to 0 (torch's is finite there).
  local vd = v:detach()
  if vd:amax():item() <= 2.0 ^ 100 and vd:min():item() >= 2.0 ^ -100 then return v, odt end
  local a = dim == nil and t:detach():amax() or nil
  if dims then
    a = t:detach()
    for _, d in ipairs(dims) do a = a:amax(d, true) end
  elseif dim ~= nil then
    a = t:detach():amax(dim, true)
  end
  local up, down, need = {}, {}, false
  for i, x in ipairs(a:reshape({ -1 }):tolist()) do
    local e = 0   -- 2^±126 and their products with a row stay normal fp32
    if x == x and x < math.huge and (x > 2.0 ^ 60 or (x > 0 and x < 2.0 ^ -60)) then
      need = true
      e = math.max(-126, math.min(126, math.floor(math.log(x, 2))))
      -- a large row lands near 2^40, not 1: the backward multiplies the gradient by back² before it meets the
      -- row's 1/back, so back² = 2^2e made it inf (and the gradient NaN) wherever g·2^2e passed fp32's max, though
      -- var itself was finite (1e19s); squares near 2^80 still sum in range
      if e > 0 then e = e - 40 end
    end
    up[i], down[i] = 2.0 ^ -e, 2.0 ^ e
  end
  if not need then return v, odt end
  local back
  if dim == nil then t, back = t * up[1], down[1]
  else
    t = t * core.tensor(up):reshape(a:shape()):to(t:device())
    back = core.tensor(down):to(t:device())
  end
  v = sums(t)
  if type(back) ~= "number" then back = back:reshape(v:shape()) end
  return v, odt, back
end

-- x · back (back from var_of: nil, a number or a tensor of x's shape)
local function scaled(x, back) if back == nil then return x end return x * back end

local function rounded(r, dt) if r:dtype() ~= dt then return r:to(dt) end return r end

-- torch's older forms, (unbiased) and (dim, unbiased [, keepdim]): unbiased false is correction 0 (it was taken as
-- no options: the unbiased result). → dim, the options. Errors at the caller of var or std.
local VAR_TAKES = "([dim] [, {correction=, keepdim=}]) or ([dim,] unbiased [, keepdim])"
local function var_args(who, dim, o, ...)
  local unbiased, keep, extra = nil, nil, 0
  if type(dim) == "boolean" then
    unbiased, keep, extra, dim = dim, o, select("#", ...), nil
  elseif type(o) == "boolean" then
    unbiased, keep, extra = o, ..., math.max(select("#", ...) - 1, 0)
  else
    extra = select("#", ...)
  end
  if extra > 0 then error(require("fp8.opts").more_args_message(who, VAR_TAKES, extra), 3) end
  if unbiased == nil then return dim, o end
  if keep ~= nil and type(keep) ~= "boolean" then
    error(("%s: keepdim must be a boolean, got %s"):format(who, require("fp8.opts").got(keep)), 3)
  end
  return dim, { correction = unbiased and 1 or 0, keepdim = keep }
end

function Tensor.var(t, dim, o, ...)
  dim, o = var_args("var", dim, o, ...)
  local v, odt, back = var_of("var", t, dim, o)
  return rounded(scaled(scaled(v, back), back), odt)
end

function Tensor.std(t, dim, o, ...)
  dim, o = var_args("std", dim, o, ...)
  local v, odt, back = var_of("std", t, dim, o)
  if not v:requires_grad() then return rounded(scaled(v:sqrt(), back), odt) end
  -- torch's gradient is 0 where the std is 0 (a constant row): sqrt's derivative there is inf, and inf·0 made it
  -- NaN. The root is taken of a stand-in 1 there and selected away, so nothing infinite meets the zero gradient.
  local zero = v:eq(0)
  return rounded(scaled(M.where(zero, 0, M.where(zero, 1, v):sqrt()), back), odt)
end

-- t:chunk(n [, dim=1]) and t:split(size | {sizes} [, dim=1]): narrow views along dim, as torch's (chunk: pieces
-- of ceil(len / n), so fewer than n when they run out; split: pieces of `size`, the last shorter, or the sizes
-- given, which must add up to the length).
local function pieces(t, sizes, dim)
  local out, start = {}, 1
  for i, sz in ipairs(sizes) do out[i] = t:narrow(dim, start, sz); start = start + sz end
  return table.unpack(out)
end

function Tensor.chunk(t, n, dim, ...)
  no_more("chunk", "(chunks [, dim])", ...)
  check_self("chunk", t)
  if math.type(n) ~= "integer" or n < 1 then
    error(("chunk: chunks must be an integer >= 1, got %s"):format(require("fp8.opts").got(n)), 2)
  end
  if t:dim() == 0 then error("chunk: a 0-d tensor cannot be split", 2) end
  dim = norm_dim("chunk", dim or 1, t:dim())
  local len = t:size(dim)
  local each = len // n + (len % n > 0 and 1 or 0)   -- ceil(len / n) without len + n overflowing
  local sizes = {}
  if len == 0 then   -- n empty pieces, as torch's
    if n > 4096 then error(("chunk: %d empty pieces asked for (at most 4096)"):format(n), 2) end
    for i = 1, n do sizes[i] = 0 end
  else
    local left = len
    while left > 0 do sizes[#sizes + 1] = math.min(each, left); left = left - each end
  end
  return pieces(t, sizes, dim)
end

function Tensor.split(t, size, dim, ...)
  no_more("split", "(split_size | {sizes} [, dim])", ...)
  check_self("split", t)
  if t:dim() == 0 then error("split: a 0-d tensor cannot be split", 2) end
  dim = norm_dim("split", dim or 1, t:dim())
  local len, sizes = t:size(dim), {}
  if type(size) == "table" and getmetatable(size) == nil then
    -- torch takes any number of empty pieces ({1, 0, 0} of a length of 1); the bound is the one chunk keeps, so that
    -- the pieces fit on Lua's stack as results
    local total, n = 0, rawlen(size)
    if n > math.max(len + 1, 4096) then
      error(("split: %d sizes for a length of %d (at most %d)"):format(n, len, math.max(len + 1, 4096)), 2)
    end
    for i = 1, n do
      local v = rawget(size, i)
      if math.type(v) ~= "integer" or v < 0 then
        error(("split: sizes[%d] must be an integer >= 0, got %s"):format(i, tostring(v)), 2)
      end
      total = total + v
      sizes[i] = v
    end
    if total ~= len then
      error(("split: the sizes add up to %d, but dim %d has length %d"):format(total, dim, len), 2)
    end
  elseif math.type(size) == "integer" and size >= 1 then
    local left = len
    if left == 0 then sizes = { 0 } end
    while left > 0 do sizes[#sizes + 1] = math.min(size, left); left = left - size end
  else
    error(("split: expected a size (an integer >= 1) or a list of sizes, got %s"):format(tostring(size)), 2)
  end
  return pieces(t, sizes, dim)
end

-- t:square(), t:rsqrt(), t:reciprocal(): x·x, 1/√x, 1/x (differentiable; square and reciprocal made of mul and div;
-- rsqrt core/ops.h's FL_OP_RSQRT, the bits of 1 / x:sqrt() in one pass, its gradient that graph's, -g/(2·√x³) from
-- x rounded as it rounded it; not torch's -0.5·g·y³, which is further from the exact derivative: robustness.md).
function Tensor.square(t, ...)
  check_not_fp8("square", check_self("square", t)); no_more("square", "no arguments", ...); return t * t
end
function Tensor.rsqrt(t, ...)
  local dt = check_self("rsqrt", t); no_more("rsqrt", "no arguments", ...); check_not_fp8("rsqrt", dt)
  -- bf16/fp16: in fp32, rounded once (torch's); the root rounded to bf16 first made 3 results in 10 one ulp off
  if dt == "bf16" or dt == "fp16" then return t:to("fp32"):_rsqrt():to(dt) end
  return t:_rsqrt()
end
function Tensor.reciprocal(t, ...)
  check_not_fp8("reciprocal", check_self("reciprocal", t)); no_more("reciprocal", "no arguments", ...)
  return 1 / t
end

-- An arithmetic method's self (live, not FP8), and a tensor argument of one (live, not FP8; with numbers, a number
-- too), for the methods of tensor_linalg.lua and tensor_pointwise.lua, which run under M._at_caller (it puts the
-- caller's line on what these raise).
local function check_arith_self(who, t) check_not_fp8(who, check_self(who, t)) end
local function check_operand(who, what, v, numbers)
  if numbers and type(v) == "number" then return v end
  if not core.is_tensor(v) then
    error(("%s: %s must be a tensor%s, got %s"):format(who, what, numbers and " or a number" or "",
      require("fp8.opts").got(v)))
  end
  check_live(who, what, v)
  check_not_fp8(who, v:dtype())
  return v
end

-- the argument checks, shared with the other files of the Tensor class (tensor_inplace.lua, tensor_logic.lua, ...)
M._check_self, M._check_live, M._check_not_fp8, M._norm_dim = check_self, check_live, check_not_fp8, norm_dim
M._dims_of = dims_of
M._check_arith_self, M._check_operand = check_arith_self, check_operand

-- keepdim, when given, must be a boolean (who's message, raised at level)
function M._check_keepdim(who, keepdim, level)
  if keepdim ~= nil and type(keepdim) ~= "boolean" then
    error(("%s: keepdim must be a boolean, got %s"):format(who, require("fp8.opts").got(keepdim)), level)
  end
end

-- a Lua list of numbers as an fp32 tensor on device (index lists, masks, counts built on the host)
function M._list_on(list, device)
  local t = core.tensor(list)
  return device == "cpu" and t or t:to(device)
end

-- M._broadcast_shape(a, b): the shape two shapes (lists of sizes) broadcast to, torch's rule (aligned from the last
-- dim; each pair equal, or one of them 1), or nil when they do not: what an elementwise op's result would have,
-- without computing one
function M._broadcast_shape(a, b)
  local na, nb = #a, #b
  local n = math.max(na, nb)
  local out = {}
  for k = 1, n do
    local x, y = a[na - n + k] or 1, b[nb - n + k] or 1
    if x ~= y and x ~= 1 and y ~= 1 then return nil end
    out[k] = x == 1 and y or x
  end
  return out
end

-- M._at_caller(f): f as a public function whose errors are raised at its caller's line. Inside, errors may be
-- raised at any level: a position in one of fp8lab's files (or none) is dropped and the caller's put instead.
function M._at_caller(f)
  return function(...)
    local r = table.pack(pcall(f, ...))
    if r[1] then return table.unpack(r, 2, r.n) end
    local e = r[2]
    if type(e) == "string" then e = e:gsub("^[^:\n]*%.lua:%d+: ", "") end
    error(e, 2)
  end
end

return M
