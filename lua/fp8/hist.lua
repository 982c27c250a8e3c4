-- fp8.hist — a text histogram of a tensor on the FP8 grid, for the REPL and the lessons
-- (docs/concepts.md, "Seeing a tensor on the FP8 grid"): how many values land in each binade of the
-- format, how many become subnormal, underflow to zero or saturate at ±max.
-- The counts come from the real cast (Tensor:quantize and its cast statistics), read back as bytes.
local O = require "fp8.opts"
-- a value in a refusal: a string as it is, anything else as fp8.opts.got shows it (tostring of a table whose
-- __tostring answers no string raised Lua's own "'__tostring' must return a string", the sweep of stop 104)
local function named(v) return type(v) == "string" and v or O.got(v) end
local fp8 = require "fp8.core"

local unplaced = require("fp8.errfmt").unplaced
local HIST_CHUNK = 1 << 12   -- bytes read into a Lua table at a time (64 KiB of it: under a finite address-space
                             -- limit a malloc of 1 MiB or more is a mapping of its own, cpu_device.c, and a full
                             -- heap's free runs are short)
local VALID = { "scale", "amax", "margin", "axis", "width", "quiet" }

local function pct(k, n) return n > 0 and 100 * k / n or 0 end

-- The canonical name of an FP8 format under any of its names (case and aliases as fp8.format takes them), or nil.
local function fp8_name(fmt)
  if type(fmt) ~= "string" then return nil end
  local ok, f = pcall(fp8.format, fmt)
  return ok and f.is_fp8 and f.name or nil
end

local Result = {}
Result.__index = Result
Result.__name = "fp8.Histogram"
function Result.__tostring(h)
  -- (overflow only where a saturate=false cast made some: there saturated reads 0 while values went to NaN or inf)
  return ("fp8.hist %s: %d values, underflow %.2f%%, subnormal %.2f%%, saturated %.2f%%%s%s"):format(h.format, h.n,
    100 * h.underflow_frac, 100 * h.subnormal_frac, 100 * h.saturated_frac,
    h.overflow > 0 and (", overflowed %.2f%%"):format(100 * h.overflow_frac) or "",
    h.lo and (", binades 2^%d..2^%d"):format(h.lo, h.hi) or "")
end

-- hist(t, fmt [, {scale=, amax=, margin=, axis=, width=40, quiet=false}]) -> histogram table.
-- t is a float tensor (cast here with Tensor:quantize's options; default scale = fp8_max/amax) or an
-- FP8 tensor (its bytes are read as they are; then fmt may be nil and cast options are refused).
local function hist(t, fmt, opts, ...)
  O.no_more("hist", "(t, format [, options])", ...)
  if not fp8.is_tensor(t) then
    error(("bad argument #1 to 'hist' (expected a tensor, got %s)"):format(type(t)), 2)
  end
  if opts ~= nil and type(opts) ~= "table" then
    error(("bad argument #3 to 'hist' (expected an options table, got %s)"):format(type(opts)), 2)
  end
  opts = opts or {}
  O.check("hist", opts, VALID, 2)
  local width = opts.width or 40
  if math.type(width) ~= "integer" or width < 0 then
    error(("hist: width must be an integer >= 0, got %s"):format(O.got(opts.width)), 2)
  end
  if opts.quiet ~= nil and type(opts.quiet) ~= "boolean" then
    error(("hist: quiet must be a boolean, got %s"):format(type(opts.quiet)), 2)
  end
  local q
  if t:is_fp8() then
    if fmt ~= nil and fp8_name(fmt) ~= t:dtype() then
      error(("hist: the tensor is already %s, got format '%s'"):format(t:dtype(), named(fmt)), 2)
    end
    for k in next, opts do
      if k ~= "width" and k ~= "quiet" then
        error(("hist: option '%s' needs a float tensor (this one is already %s)"):format(k, t:dtype()), 2)
      end
    end
    if t:qstats().unknown then
      error("hist: this FP8 tensor was read from a file, which holds its bytes and scales but not its cast's counters: "
        .. "underflow and saturation cannot be told apart from zeros and max values; pass the float source with the "
        .. "same scale", 2)
    end
    if t:qstats().part then
      error("hist: this FP8 tensor is part of a cast (a select or narrow view, an expand, or a copy of one): its cast "
        .. "counters describe the whole tensor, so underflow and saturation here cannot be told apart from zeros "
        .. "and max values; pass the whole FP8 tensor, or the float source with the same scale", 2)
    end
    q, fmt = t, t:dtype()
  else
    if not fp8_name(fmt) then
      error(("bad argument #2 to 'hist' (expected \"e4m3\" or \"e5m2\", got %s)"):format(named(fmt)), 2)
    end
    fmt = fp8_name(fmt)
    local qo = {}
    for _, k in ipairs { "scale", "amax", "margin", "axis" } do qo[k] = opts[k] end
    local ok, res = pcall(t.quantize, t, fmt, qo)
    if not ok then error("hist: " .. tostring(res):gsub("^.-quantize: ", ""), 2) end
    q = res
  end

  local f = fp8.format(fmt)
  local mbits, bias = f.mantissa_bits, f.bias
  local emask = (1 << f.exp_bits) - 1
  local maxcode = fp8.encode(f.max, fmt, true) & 0x7F
  local st = q:qstats()
  -- each code's count (its sign dropped), read HIST_CHUNK bytes at a time: a table of every byte (q:bytes()) took 16
  -- bytes a value, 64 MiB for a 2048 × 2048 tensor, and where that did not fit the call raised Lua's bare 'not enough
  -- memory' (stop 102); what still does not fit is named
  local n = q:numel()
  local counts = {}
  local function count(bytes)
    for i = 1, #bytes do
      local b = bytes[i] & 0x7F
      counts[b] = (counts[b] or 0) + 1
    end
  end
  -- by runs of dim 1, or each slice of it where one is larger than a chunk: a tensor scaled per index along a dim
  -- (axis=) has no flat view (reshape refuses to merge its scaled dim; stop 102 read a flat one and refused those)
  local function walk(t)
    local m = t:numel()
    if m <= HIST_CHUNK or t:dim() == 0 then return count(t:bytes()) end
    local rows = t:size(1)
    local per = m // rows
    if per > HIST_CHUNK then
      for i = 1, rows do walk(t:select(1, i)) end
      return
    end
    local step = HIST_CHUNK // per
    for s = 1, rows, step do count(t:narrow(1, s, math.min(step, rows - s + 1)):bytes()) end
  end
  local ok, err = pcall(walk, q)
  if not ok then
    local msg = unplaced(err)
    if msg:find("not enough memory", 1, true) or msg:find("out of memory", 1, true) then
      error(("hist: out of memory reading the %d codes of the %s tensor %s (%s)"):format(n, fmt, q:shape_str(),
        msg:gsub("^bytes%(?%)?: ", "")), 2)
    end
    error(msg, 2)
  end
  local bins, zero, sub, nan, inf, atmax = {}, 0, 0, 0, 0, 0
  for b, c in next, counts do
    local e = b >> mbits
    if b == 0 then zero = zero + c
    elseif e == 0 then sub = sub + c
    elseif fp8.is_nan_code(b, fmt) then nan = nan + c
    elseif f.has_inf and e == emask then inf = inf + c
    else
      local p = e - bias
      bins[p] = (bins[p] or 0) + c
      if b == maxcode then atmax = atmax + c end
    end
  end
  -- Saturated values (±inf sources among them) were clamped to the max code: shown on their own line, not in
  -- the top binade. Under the IEEE policy they overflowed to NaN or inf codes instead, counted there: the cast's
  -- `saturated` counts both, and the NaN/inf codes not made from a NaN source are those overflows (a saturating
  -- cast makes none), which leave the max codes to the values that are the max.
  local overflow = math.max(0, math.min(st.saturated, nan + inf - st.nan))
  local sat = math.max(0, math.min(st.saturated - overflow, atmax))
  local top = (maxcode >> mbits) - bias
  if sat > 0 then bins[top] = bins[top] - sat; if bins[top] == 0 then bins[top] = nil end end
  local underflow = math.min(st.underflow, zero)
  local lo, hi
  for p in next, bins do lo = math.min(lo or p, p); hi = math.max(hi or p, p) end

  local h = setmetatable({ format = fmt, n = n, bins = bins, lo = lo, hi = hi, zero = zero - underflow,
    underflow = underflow, subnormal = sub, saturated = sat, overflow = overflow, nan = nan, inf = inf,
    underflow_frac = n > 0 and underflow / n or 0, subnormal_frac = n > 0 and sub / n or 0,
    zero_frac = n > 0 and (zero - underflow) / n or 0,
    saturated_frac = n > 0 and sat / n or 0, overflow_frac = n > 0 and overflow / n or 0,
    nan_frac = n > 0 and nan / n or 0, inf_frac = n > 0 and inf / n or 0 }, Result)
  local per_tensor = q:scale_axis() == nil
  h.scale = per_tensor and q:scale() or nil

  if not opts.quiet then
    local biggest = 1
    for _, c in next, bins do biggest = math.max(biggest, c) end
    for _, c in ipairs { h.zero, underflow, sub, sat, inf, nan } do biggest = math.max(biggest, c) end
    local function bar(c)   -- (a nonzero count gets at least one #, unless width=0 asks for no bars)
      return ("#"):rep(c > 0 and width > 0 and math.max(1, math.floor(width * c / biggest + 0.5)) or 0)
    end
    local function line(label, range, c)
      print(("  %-26s %-24s %9d %7.2f%%  %s"):format(label, range, c, pct(c, n), bar(c)))
    end
    local function src(a, b)
      if not per_tensor then return "(per-row scales)" end
      local s = h.scale
      return ("%.3g .. %.3g"):format(a / s, b / s)
    end
    print(("fp8.hist: %d values cast to %s, %s"):format(n, fmt,
      per_tensor and ("scale %.6g (source value = FP8 value / scale)"):format(h.scale)
      or ("one scale per slice along dim %d"):format(q:scale_axis())))
    print(("  %-26s %-24s %9s %8s"):format("FP8 bucket", "source |x|", "count", "share"))
    if sat > 0 or st.saturated > overflow then line(("saturated to +-%g"):format(f.max), src(f.max, math.huge), sat) end
    local ovf = overflow > 0 and (" (%d overflowed)"):format(overflow) or ""
    if inf > 0 then line("inf" .. (f.has_inf and ovf or ""), "", inf) end
    if nan > 0 then line("NaN" .. (f.has_inf and "" or ovf), "", nan) end
    if hi then
      for p = hi, lo, -1 do
        local c = bins[p] or 0
        -- (the top binade ends at max: E4M3's holds 256 .. 448, and 464 .. 512 saturate)
        line(("[2^%d, 2^%d)"):format(p, p + 1), src(2.0 ^ p, math.min(2.0 ^ (p + 1), f.max)), c)
      end
    end
    local smin, snorm = f.min_subnormal, f.min_normal
    line(("subnormal [2^%d, 2^%d)"):format(math.floor(math.log(smin, 2) + 0.5), 1 - bias), src(smin, snorm), sub)
    line("underflow (x != 0 -> 0)", src(0, smin / 2), underflow)
    line("zero in the source", "", h.zero)
    if hi and (hi < top or lo > 1 - bias) then
      print(("  (empty binades of %s not shown: it spans 2^%d .. 2^%d)"):format(fmt, 1 - bias, top))
    end
  end
  return h
end

local okh, help = pcall(require, "fp8.help")
if okh and help.add then
  help.add { section = "Quantization", name = "hist",
    sig = "fp8.hist(t, \"e4m3\"|\"e5m2\" [, {scale=, amax=, margin=, axis=, width=40, quiet=false}]) -> summary",
    doc = "Text histogram of a tensor on the FP8 grid: per binade of the format, how many values land there\n"
       .. "(with the source range each binade covers), how many become subnormal, underflow to zero and\n"
       .. "saturate at ±max. The cast is x:quantize(fmt, opts) (default scale = fp8_max/amax; {scale=1} shows\n"
       .. "the unscaled cast). An FP8 tensor is read as it is (one cast with saturate=false: its overflows are\n"
       .. "its NaN or inf codes, counted in overflow, not in saturated). Returns a table (n, bins, underflow,\n"
       .. "subnormal, saturated, overflow, nan, inf, *_frac) that prints as one line. See docs/concepts.md." }
end

return hist
