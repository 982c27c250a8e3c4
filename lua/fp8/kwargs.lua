-- fp8.kwargs — the kwargs handlers of docs/fp8-spec.md §5 (Accelerate's FP8RecipeKwargs, TERecipeKwargs,
-- MSAMPRecipeKwargs, AORecipeKwargs, AutocastKwargs, GradScalerKwargs, DistributedDataParallelKwargs,
-- InitProcessGroupKwargs, ProfileKwargs) and resolve(), which merges the handlers, the FP8LAB_*
-- environment, the config file and the defaults into one settings table.
--
-- Precedence, field by field: a key the user passed to a handler > environment > config file >
-- default. Keys left out of a handler fall through to the environment and the config file, as
-- Accelerate's TERecipeKwargs.__post_init__ reads ACCELERATE_FP8_* for the fields left None. The
-- Accelerator's own mixed_precision argument beats the environment too (source "argument").
--
-- The recipe handlers' fields, their checks and messages, the FP8LAB_* variables and the config-file keys
-- all come from the one settings table (core/settings.c, as fp8.settings.list()); an empty variable
-- counts as unset, a bad value is an error naming the variable. docs/config.md lists them.
--
-- FP8RecipeKwargs carries exactly the keys of the original API (backend, opt_level, and the te
-- fields), not the ao options: it mirrors Accelerate's deprecated FP8RecipeKwargs that existing
-- scripts use, and one handler per engine keeps every key meaningful. backend="ao" selects torchao
-- with its defaults (or FP8LAB_*/config values); ao options go through AORecipeKwargs, and an ao key
-- given to FP8RecipeKwargs is an error that says so.
local settings = require "fp8.settings"
local O = require "fp8.opts"
local M = {}

-- ---- values: printing and comparing --------------------------------------------------------

local function numstr(v)
  if math.type(v) == "integer" then return tostring(v) end
  if v ~= v then return "nan" end
  if v == math.huge then return "inf" elseif v == -math.huge then return "-inf" end
  return ("%.14g"):format(v)
end

local DATA = setmetatable({}, { __mode = "k" })   -- handler -> { values = {...}, given = {...} }
local CLASS_OF_MT = {}                            -- handler metatable -> its class

local function is_handler(v)
  local mt = type(v) == "table" and getmetatable(v)
  return mt ~= nil and mt ~= false and CLASS_OF_MT[mt] ~= nil
end
M.is_handler = is_handler

local function repr(v, depth)
  local t = type(v)
  if t == "string" then return ("%q"):format(v) end
  if t == "number" then return numstr(v) end
  if t == "function" then return "<function>" end
  if t ~= "table" then return tostring(v) end
  if is_handler(v) then return tostring(v) end
  depth = (depth or 0) + 1
  if depth > 3 then return "{...}" end
  local parts, n = {}, rawlen(v)   -- raw: a __len or __index that lies must not loop for ever
  for i = 1, n do parts[i] = repr(rawget(v, i), depth) end
  local keys = {}
  for k in next, v do
    if not (math.type(k) == "integer" and k >= 1 and k <= n) then keys[#keys + 1] = k end
  end
  table.sort(keys, function(a, b) return tostring(a) < tostring(b) end)
  for _, k in ipairs(keys) do
    local ks = type(k) == "string" and k:match("^[%a_][%w_]*$") and k or ("[" .. repr(k, depth) .. "]")
    parts[#parts + 1] = ks .. "=" .. repr(rawget(v, k), depth)
  end
  return "{" .. table.concat(parts, ", ") .. "}"
end
-- (public with one parameter: depth is the recursion's own, and repr(v, "x") was an arithmetic error, repr(t, 5)
-- "{...}"; until stop 99)
M.repr = function(v) return repr(v) end

-- What came, for "expected X, got Y" when the type is wrong: the type, and the value if short.
local function got(v)
  local t = type(v)
  if t == "string" or t == "number" or t == "boolean" then return t .. " " .. repr(v) end
  if is_handler(v) then return "a " .. v.handler_type end
  return t
end

local function deep_equal(a, b)
  if a == b then return true end
  if type(a) ~= "table" or type(b) ~= "table" or is_handler(a) or is_handler(b) then return false end
  for k, v in next, a do if not deep_equal(v, b[k]) then return false end end
  for k in next, b do if a[k] == nil then return false end end
  return true
end
M._deep_equal = deep_equal   -- (fp8_autocast compares a recipe's fields with a layer's)

-- Copies plain tables (lists, option tables); objects with a metatable (handlers, callables) are shared.
local function copy(v)
  if type(v) ~= "table" or getmetatable(v) ~= nil then return v end
  local out = {}
  for k, x in next, v do out[k] = copy(x) end
  return out
end

-- The closest name in `names` to `key` if it is a likely typo: the program's one suggestion
-- (fp8.settings.suggest, core/settings.c: a small edit distance, or one name a prefix of the other).
local function nearest(key, names)
  if type(key) ~= "string" then return nil end
  if type(names) ~= "table" then error(("nearest: names must be a list of strings, got %s"):format(type(names)), 2) end
  return settings.suggest(key, names)
end
M.nearest = nearest

-- ---- kinds: how the other handlers' fields are checked ------------------------------------
-- (The FP8 recipe handlers' fields are settings: the settings table checks them.)
-- kind.types: the accepted Lua types; kind.check(v) -> true, normalized | false [, message].

local function quoted_list(list)
  local q = {}
  for i, c in ipairs(list) do q[i] = ('"%s"'):format(c) end
  return table.concat(q, ", ")
end

local Kind = {}

Kind.bool = { expect = "a boolean", types = { boolean = true }, check = function(v) return true, v end }

function Kind.int(min)
  return { expect = ("an integer >= %d"):format(min), types = { number = true },
    check = function(v)
      local i = math.tointeger(v)
      if i and i >= min then return true, i end
      return false
    end }
end

function Kind.num(expect, ok)
  return { expect = expect, types = { number = true },
    check = function(v) if v == v and ok(v) then return true, v end return false end }
end

-- A choice of lower-case names (input case does not matter).
function Kind.choice(list)
  local set = {}
  for _, c in ipairs(list) do set[c] = true end
  return { expect = "one of " .. quoted_list(list), choices = list, types = { string = true },
    check = function(v) if set[v:lower()] then return true, v:lower() end return false end }
end

local function callable(v)
  if type(v) == "function" then return true end
  local mt = type(v) == "table" and getmetatable(v)
  return type(mt) == "table" and mt.__call ~= nil and not is_handler(v)
end

Kind.func = { expect = "a function", types = { ["function"] = true }, callable = true,
  check = function(v) return true, v end }

-- A directory name: "" would put files at the root ("" .. "/profile_0.json"); a NUL byte would cut it short (refused
-- here, not at the end of the profiled run).
Kind.dir = { expect = "a directory name (a non-empty string without NUL bytes)", types = { string = true },
  check = function(v)
    local ok = v ~= "" and not v:find("\0", 1, true)
    return ok, ok and v or nil
  end }

-- Checks v against field f: true, normalized | false, "origin: expected X, got Y" (without "origin: "
-- when origin is nil). A setting's field goes to the settings table, whose message names the origin.
local function check_field(f, v, origin)
  if f.setting then
    local ok, res = pcall(settings.check, f.name, v, origin or f.name)
    if ok then return true, res end
    if not origin then res = tostring(res):gsub("^" .. f.name .. ": ", "") end
    return false, res
  end
  local k, msg = f.kind, nil
  if not k.types[type(v)] and not (k.callable and callable(v)) then
    msg = ("expected %s, got %s"):format(k.expect, got(v))
  else
    local ok, res = k.check(v)
    if ok then return true, res end
    msg = res or ("expected %s, got %s"):format(k.expect, repr(v))
  end
  return false, origin and (origin .. ": " .. msg) or msg
end

-- ---- recipe fields: the rows of the settings table ---------------------------------------------

local ROWS = settings.list()
local ROW = {}
for _, r in ipairs(ROWS) do ROW[r.name] = r end

-- A handler field per setting of an FP8 recipe (and the backend itself).
local F = {}
for _, r in ipairs(ROWS) do
  -- a setting fp8lab recognises only to refuse it (r.unsupported) has no default to carry into a recipe
  local default = r.default
  if r.unsupported then default = nil end
  F[r.name] = { name = r.name, setting = true, default = default, env = r.env,
                doc = r.help, backend = r.backends and r.backends[1], alias = r.alias, file = r.file }
end

M.BACKENDS = copy(ROW.backend.choices)   -- the default first
local BACKEND_TITLE = ROW.backend.choice_help

-- BACKEND_FIELDS[b]: the names of backend b's fields, in table order; FP8_RECIPE_FIELDS: the recipe
-- fields FP8RecipeKwargs carries (Accelerate's original handler: backend, MS-AMP's and te's fields).
local BACKEND_FIELDS, FP8_RECIPE_FIELDS = {}, {}
for _, b in ipairs(M.BACKENDS) do BACKEND_FIELDS[b] = {} end
for _, r in ipairs(ROWS) do
  for _, b in ipairs(r.backends or {}) do table.insert(BACKEND_FIELDS[b], r.name) end
  if r.fp8_recipe_kwargs and r.backends then FP8_RECIPE_FIELDS[#FP8_RECIPE_FIELDS + 1] = r.name end
end

-- RECIPE_FIELDS[backend] = ordered list of { name, default, doc, expect, choices, env, backend }, also
-- indexed by name; RECIPE_FIELDS[backend].title. For docs and the CLI: read-only.
M.RECIPE_FIELDS = {}
for _, b in ipairs(M.BACKENDS) do
  local list = { title = BACKEND_TITLE[b] }
  for i, name in ipairs(BACKEND_FIELDS[b]) do
    local r = ROW[name]
    local default = copy(r.default)
    if r.unsupported then default = nil end
    local e = { name = name, default = default, doc = r.help, expect = r.expected,
                choices = copy(r.choices), env = r.env, backend = b }
    list[i] = e
    list[name] = e
  end
  M.RECIPE_FIELDS[b] = list
end

-- The environment variables resolve() reads: every setting's, then the config file's path.
M.ENV = {}
for _, r in ipairs(ROWS) do
  if r.env then M.ENV[#M.ENV + 1] = { name = r.env, field = r.name } end
end
M.ENV[#M.ENV + 1] = { name = "FP8LAB_CONFIG_FILE", field = nil }
M.ENV[#M.ENV + 1] = { name = "FP8LAB_LAUNCH_FLAGS", field = nil }   -- VAR=--flag,...: what fp8lab launch's flags set

-- ---- handler classes ---------------------------------------------------------------------------

local CLASSES, CLASS_NAMES = {}, {}   -- name -> class; names in definition order
M.HANDLER_NAMES = CLASS_NAMES

local methods = {}

-- The default of field f given the handler's other values (InitProcessGroupKwargs' timeout depends on
-- its backend).
local function default_of(f, values)
  if f.default_fn then return f.default_fn(values) end
  return copy(f.default)
end

-- the name an arity refusal gives a handler's method: "TERecipeKwargs:to_kwargs"
local function method_name(self, m)
  local mt = getmetatable(self)
  return (type(mt) == "table" and rawget(mt, "__name") or "KwargsHandler") .. ":" .. m
end

-- h:to_kwargs() -> { field = value } for the fields whose value differs from the default.
function methods:to_kwargs(...)
  O.no_more(method_name(self, "to_kwargs"), "no arguments", ...)
  local d, cls = DATA[self], CLASS_OF_MT[getmetatable(self)]
  local out = {}
  for _, f in ipairs(cls.field_list) do
    local v = d.values[f.name]
    if not deep_equal(v, default_of(f, d.values)) then out[f.name] = copy(v) end
  end
  return out
end

-- h:to_table() -> every field with its effective value (defaults included), a fresh table.
function methods:to_table(...)
  O.no_more(method_name(self, "to_table"), "no arguments", ...)
  local d, cls = DATA[self], CLASS_OF_MT[getmetatable(self)]
  local out = {}
  for _, f in ipairs(cls.field_list) do out[f.name] = copy(d.values[f.name]) end
  return out
end

-- h:is_set(name) -> true when the user passed this key (or its alias) to the constructor.
function methods:is_set(name, ...)
  O.no_more(method_name(self, "is_set"), "(name)", ...)
  local cls = CLASS_OF_MT[getmetatable(self)]
  name = cls.aliases[name] or name
  return DATA[self].given[name] == true
end

local function unknown_key_message(cls, k)
  if type(k) ~= "string" then
    return ("%s: unexpected positional value at [%s]; handlers take named fields: %s{key=value, ...} (valid keys: %s)")
      :format(cls.handler_type, repr(k), cls.handler_type, cls.valid_text)
  end
  local names = {}
  for _, f in ipairs(cls.field_list) do names[#names + 1] = f.name end
  for a in next, cls.aliases do names[#names + 1] = a end
  table.sort(names)
  local msg = ("%s: unknown key '%s'"):format(cls.handler_type, k)
  local near = nearest(k, names)
  if near then msg = msg .. (" (did you mean '%s'?)"):format(near) end
  -- a key of another FP8 recipe handler: say which one takes it
  if not near then
    for _, n in ipairs(CLASS_NAMES) do
      local other = CLASSES[n]
      if other ~= cls and other.fp8 and other.by_name[k] and n ~= "FP8RecipeKwargs" then
        msg = msg .. ("; '%s' belongs to the %s recipe: use %s{%s=...}"):format(k, other.fp8, n, k)
        break
      end
    end
  end
  return msg .. "; valid keys: " .. cls.valid_text
end

-- Builds a handler from an options table: handler | nil, message.
local function build(cls, opts)
  if opts == nil then opts = {} end
  if type(opts) ~= "table" or is_handler(opts) then
    return nil, ("%s: expected an options table {key=value, ...}, got %s"):format(cls.handler_type, got(opts))
  end
  local proxy = require("fp8.opts").proxy_text(opts)   -- a proxy's keys are not read (stop 102)
  if proxy then return nil, cls.handler_type .. ": " .. proxy end
  -- the keys as stored (next, not pairs): every handler looped for ever on a table whose __pairs never ends, each
  -- key it answered collected (sweep 115); the other walks of a caller's table below are raw for the same reason
  local keys = {}
  for k in next, opts do keys[#keys + 1] = k end
  table.sort(keys, function(a, b)
    if type(a) ~= type(b) then return type(a) < type(b) end
    return tostring(a) < tostring(b)
  end)
  local raw, given = {}, {}
  for _, k in ipairs(keys) do
    local canon = cls.by_name[k] and k or cls.aliases[k]
    if not canon then return nil, unknown_key_message(cls, k) end
    if given[canon] then
      local names = { canon }
      for a, c in next, cls.aliases do if c == canon then names[#names + 1] = a end end
      table.sort(names)
      return nil, ("%s: %s name the same option; give one"):format(cls.handler_type, "'" .. table.concat(names, "', '") .. "'")
    end
    raw[canon], given[canon] = opts[k], true
  end
  local values = {}
  for _, f in ipairs(cls.field_list) do
    if given[f.name] then
      local ok, v = check_field(f, raw[f.name], cls.handler_type .. ": " .. f.name)
      if not ok then return nil, v end
      values[f.name] = v
    end
  end
  for _, f in ipairs(cls.field_list) do
    if not given[f.name] then values[f.name] = default_of(f, values) end
  end
  if cls._finish then
    local err = cls._finish(values, given)
    if err then return nil, cls.handler_type .. ": " .. err end
  end
  local h = setmetatable({}, cls.mt)
  DATA[h] = { values = values, given = given }
  return h
end

-- define(name, fields, {aliases=, fp8=backend|true, finish=fn(values, given) -> err|nil, doc=})
local function define(name, fields, opts)
  opts = opts or {}
  local cls = { handler_type = name, field_list = fields, by_name = {}, aliases = opts.aliases or {},
                fp8 = opts.fp8, _finish = opts.finish }   -- (internal: "_", out of the public names)
  local valid = {}
  for _, f in ipairs(fields) do
    cls.by_name[f.name] = f
    valid[#valid + 1] = f.name
  end
  for i, v in ipairs(valid) do
    local al = {}
    for a, canon in next, cls.aliases do if canon == v then al[#al + 1] = a end end
    table.sort(al)
    if #al > 0 then valid[i] = ("%s (alias %s)"):format(v, table.concat(al, ", ")) end
  end
  cls.valid_text = table.concat(valid, ", ")
  cls.fields = {}
  for i, f in ipairs(fields) do cls.fields[i] = f.name end

  local mt = { __name = name }
  mt.__index = function(self, k)
    if methods[k] then return methods[k] end
    if k == "handler_type" then return name end
    local canon = cls.by_name[k] and k or cls.aliases[k]
    if canon then return copy(DATA[self].values[canon]) end
    return nil
  end
  mt.__newindex = function(_, k)
    error(("%s is read-only (setting '%s'); build a new one: %s{%s=...}"):format(name, tostring(k), name, tostring(k)), 2)
  end
  mt.__tostring = function(self)
    local parts, values = {}, DATA[self].values
    for _, f in ipairs(fields) do parts[#parts + 1] = f.name .. "=" .. repr(values[f.name]) end
    return name .. "(" .. table.concat(parts, ", ") .. ")"
  end
  cls.mt = mt
  CLASS_OF_MT[mt] = cls

  -- cls.defaults() -> every field's default value
  function cls.defaults()
    local v = {}
    for _, f in ipairs(fields) do if not f.default_fn then v[f.name] = copy(f.default) end end
    for _, f in ipairs(fields) do if f.default_fn then v[f.name] = f.default_fn(v) end end
    return v
  end

  setmetatable(cls, {
    __call = function(_, t, ...)
      O.no_more(name, "one options table {key=value, ...}", ...)
      local h, err = build(cls, t)
      if not h then error(err, 2) end
      return h
    end,
    __tostring = function() return name .. " (kwargs handler; call " .. name .. "{key=value, ...})" end,
  })
  CLASSES[name] = cls
  CLASS_NAMES[#CLASS_NAMES + 1] = name
  M[name] = cls
  return cls
end

-- An explicit FP8RecipeKwargs field that the backend does not use, with a non-default value: an error
-- message, else nil.
local function foreign_field_error(values, given, backend, origin)
  for _, name in ipairs(FP8_RECIPE_FIELDS) do
    local f = F[name]
    if given[name] and f.backend ~= backend and not deep_equal(values[name], f.default) then
      return ("%s=%s belongs to the %s recipe, but the backend is \"%s\" (%s%s fields: %s); pass backend=\"%s\""):format(
        name, repr(values[name]), f.backend, backend, origin and (origin .. "; ") or "", backend,
        table.concat(BACKEND_FIELDS[backend], ", "), f.backend)
    end
  end
  return nil
end

-- The FP8 recipe handlers: their fields are the settings table's rows, in its order; the aliases are
-- the names Accelerate's config questionnaire writes (docs/fp8-spec.md §5).
local function recipe_handler(name, field_names, opts)
  local fields, aliases = {}, {}
  for i, n in ipairs(field_names) do
    fields[i] = F[n]
    if F[n].alias then aliases[F[n].alias] = n end
  end
  opts.aliases = aliases
  return define(name, fields, opts)
end

local FP8_KWARGS_FIELDS = {}
for _, r in ipairs(ROWS) do if r.fp8_recipe_kwargs then FP8_KWARGS_FIELDS[#FP8_KWARGS_FIELDS + 1] = r.name end end
recipe_handler("FP8RecipeKwargs", FP8_KWARGS_FIELDS, { fp8 = "any",
  finish = function(values, given)
    if given.backend then return foreign_field_error(values, given, values.backend) end
  end })
-- Accelerate's AORecipeKwargs builds Float8LinearConfig(pad_inner_dim=True,
-- enable_fsdp_float8_all_gather=True) when given no config: those are the table's defaults.
M.RECIPE_HANDLER = { te = "TERecipeKwargs", msamp = "MSAMPRecipeKwargs", ao = "AORecipeKwargs" }
for _, b in ipairs { "te", "msamp", "ao" } do recipe_handler(M.RECIPE_HANDLER[b], BACKEND_FIELDS[b], { fp8 = b }) end

define("AutocastKwargs", {
  { name = "enabled", kind = Kind.bool, default = true },
  -- what fp8lab does: no cast cache, every op casts afresh (torch's None means its cache, which fp8lab lacks, so
  -- the default shows what happens; true is refused by the Accelerator)
  { name = "cache_enabled", kind = Kind.bool, default = false },
})

-- The same limits as fp8.amp.GradScaler, so settings.grad_scaler can be handed to it.
define("GradScalerKwargs", {
  { name = "init_scale", default = 65536.0,
    -- the scale is fp32 (torch's: "value cannot be converted to type float without overflow")
    -- and so does its reciprocal, which unscaling multiplies by (from about 2.9e-39)
    kind = Kind.num("a number > 0 that fits fp32 (at most 3.4028235e38), its reciprocal too", O.fp32_scale_ok) },
  { name = "growth_factor", default = 2.0,
    kind = Kind.num("a number > 1 (at most fp32's max)", function(v) return v > 1 and v <= O.F32_MAX end) },
  { name = "backoff_factor", default = 0.5, kind = Kind.num("a number in (0, 1)", function(v) return v > 0 and v < 1 end) },
  { name = "growth_interval", default = 2000, kind = Kind.int(1) },
  { name = "enabled", default = true, kind = Kind.bool },
})

-- PowerSGDState's options (torch.distributed.algorithms.ddp_comm_hooks.powerSGD_hook), less process_group.
local POWER_SGD_OPTIONS = {
  matrix_approximation_rank = Kind.int(1), start_powerSGD_iter = Kind.int(1),
  min_compression_rate = Kind.num("a number > 0", function(v) return v > 0 end),
  use_error_feedback = Kind.bool, warm_start = Kind.bool,
  orthogonalization_epsilon = Kind.num("a number >= 0", function(v) return v >= 0 end),
  random_seed = Kind.int(0), compression_stats_logging_frequency = Kind.int(1),
  batch_tensors_with_same_shape = Kind.bool,
}
local POWER_SGD_NAMES = {}
for k in next, POWER_SGD_OPTIONS do POWER_SGD_NAMES[#POWER_SGD_NAMES + 1] = k end
table.sort(POWER_SGD_NAMES)

local comm_state_kind = { expect = "a table of PowerSGD options", types = { table = true },
  check = function(v)
    -- (its keys are read raw: a proxy's options were dropped, PowerSGD's defaults kept; stop 104)
    local proxy = O.proxy_text(v)
    if proxy then return false, proxy end
    local out = {}
    for k, x in next, v do
      local kind = POWER_SGD_OPTIONS[k]
      if not kind then return false, O.unknown_text(k, POWER_SGD_NAMES, "PowerSGD option") end
      local ok, res = check_field({ kind = kind }, x)
      if not ok then return false, k .. ": " .. res end
      out[k] = res
    end
    return true, out
  end }

local POWER_SGD_HOOKS = { power_sgd = true, batched_power_sgd = true }
define("DistributedDataParallelKwargs", {
  { name = "dim", kind = Kind.int(0), default = 0 },
  { name = "broadcast_buffers", kind = Kind.bool, default = true },
  { name = "bucket_cap_mb", default = 25,
    kind = Kind.num("a finite number > 0", function(v) return v > 0 and v < math.huge end) },
  { name = "find_unused_parameters", kind = Kind.bool, default = false },
  { name = "check_reduction", kind = Kind.bool, default = false },
  { name = "gradient_as_bucket_view", kind = Kind.bool, default = false },
  { name = "static_graph", kind = Kind.bool, default = false },
  { name = "comm_hook", kind = Kind.choice({ "no", "fp16", "bf16", "power_sgd", "batched_power_sgd" }, "lower"),
    default = "no" },
  { name = "comm_wrapper", kind = Kind.choice({ "no", "fp16", "bf16" }, "lower"), default = "no" },
  { name = "comm_state_option", kind = comm_state_kind, default = {} },
}, { finish = function(v)
  -- Accelerate drops these silently when the hook cannot use them; we say so.
  if v.comm_wrapper ~= "no" and not POWER_SGD_HOOKS[v.comm_hook] then
    return ("comm_wrapper=%s wraps a PowerSGD hook; it needs comm_hook \"power_sgd\" or \"batched_power_sgd\", got %s")
      :format(repr(v.comm_wrapper), repr(v.comm_hook))
  end
  if next(v.comm_state_option) ~= nil and not POWER_SGD_HOOKS[v.comm_hook] then
    return ("comm_state_option configures PowerSGD; it needs comm_hook \"power_sgd\" or \"batched_power_sgd\", got %s")
      :format(repr(v.comm_hook))
  end
end })

define("InitProcessGroupKwargs", {
  { name = "backend", kind = Kind.choice({ "nccl", "mpi" }, "lower"), default = "nccl" },
  { name = "init_method", default = nil,
    kind = { expect = "a URL starting with env://, tcp:// or file://", types = { string = true },
             check = function(v)
               if v:match("^env://") or v:match("^tcp://.+") or v:match("^file://.+") then return true, v end
               return false
             end } },
  { name = "timeout", default_fn = function(v) return v.backend == "nccl" and 600 or 1800 end,
    kind = Kind.num("a finite number of seconds > 0", function(v) return v > 0 and v < math.huge end) },
})

local ACTIVITIES = { "cpu", "cuda" }
-- skip_first_wait: torch.profiler.schedule's (torch >= 2.6, which Accelerate passes the dict to); nonzero: the first
-- cycle after skip_first starts at warmup, without its wait
local SCHEDULE_KEYS = { "wait", "warmup", "active", "repeat", "skip_first", "skip_first_wait" }
define("ProfileKwargs", {
  { name = "activities", default = nil,
    kind = { expect = 'a non-empty list of "cpu", "cuda"', types = { table = true },
             check = function(v)
               local out, seen, n = {}, {}, 0
               for _ in next, v do n = n + 1 end
               if n == 0 or n ~= #v then return false end
               for i, a in ipairs(v) do
                 if type(a) ~= "string" then return false end
                 a = a:lower()
                 if a ~= "cpu" and a ~= "cuda" then
                   return false, ("[%d]: expected one of %s, got %s"):format(i, quoted_list(ACTIVITIES), repr(v[i]))
                 end
                 if seen[a] then return false, ("%s is listed twice"):format(repr(a)) end
                 seen[a], out[i] = true, a
               end
               -- host ops are always recorded: a list without "cpu" (PyTorch's device-only profile) is refused
               if not seen.cpu then
                 return false, 'must list "cpu": fp8lab always records host ops ({"cpu", "cuda"} adds device time)'
               end
               return true, out
             end } },
  { name = "schedule_option", default = nil,
    kind = { expect = "a table {wait=, warmup=, active= [, repeat=, skip_first=, skip_first_wait=]}",
             types = { table = true },
             check = function(v)
               -- (its keys are checked raw: a proxy's went unchecked, a misspelt one passed; stop 104)
               local proxy = O.proxy_text(v)
               if proxy then return false, proxy end
               for k in next, v do
                 local ok = false
                 for _, s in ipairs(SCHEDULE_KEYS) do ok = ok or k == s end
                 if not ok then return false, O.unknown_text(k, SCHEDULE_KEYS, "key") end
               end
               local out = {}
               for _, s in ipairs(SCHEDULE_KEYS) do
                 local x = v[s]
                 if x == nil and s ~= "wait" and s ~= "warmup" and s ~= "active" then x = 0 end
                 if x == nil then return false, ("%s is missing (wait, warmup and active are required)"):format(s) end
                 local min = s == "active" and 1 or 0
                 local ok, res = check_field({ kind = Kind.int(min) }, x)
                 if not ok then return false, ("%s: %s"):format(s, res) end
                 out[s] = res
               end
               -- the schedule works modulo a cycle's length: one past the largest integer would wrap around
               if out.warmup > math.maxinteger - out.active or out.wait > math.maxinteger - out.active - out.warmup then
                 return false, ("wait + warmup + active must be at most %d (math.maxinteger)"):format(math.maxinteger)
               end
               return true, out
             end } },
  { name = "on_trace_ready", kind = Kind.func, default = nil },
  { name = "record_shapes", kind = Kind.bool, default = false },
  { name = "profile_memory", kind = Kind.bool, default = false },
  { name = "with_stack", default = false,   -- refused when on: no stacks are recorded
    kind = { expect = "false (stacks are not recorded; with_modules gives module paths)", types = { boolean = true },
             check = function(v)
               if v then return false, "true is not supported: fp8lab records no stacks (with_modules=true gives module paths)" end
               return true, v
             end } },
  { name = "with_flops", kind = Kind.bool, default = false },
  { name = "with_modules", kind = Kind.bool, default = false },
  { name = "output_trace_dir", kind = Kind.dir, default = nil },
})

local FP8_HANDLER = { FP8RecipeKwargs = true, TERecipeKwargs = true, MSAMPRecipeKwargs = true, AORecipeKwargs = true }

-- ---- resolve -----------------------------------------------------------------------------------

-- Errors inside resolve are thrown as {kwargs_error=msg} and re-raised at the caller's level.
local function fail(msg, ...) error({ kwargs_error = select("#", ...) > 0 and msg:format(...) or msg }, 0) end

-- A setting's value from the environment or a config file, checked by the settings table: a string
-- is read as text ("false", "3"), anything else as a value. Raises {kwargs_error = "origin: ..."}.
local function coerce(name, v, origin)
  local ok, res = pcall(settings.coerce, name, v, origin)
  if not ok then fail(tostring(res)) end
  return res
end

-- The keys a config file's fp8_config: block holds (with their aliases), for suggestions.
local CONFIG_FIELDS, CONFIG_ALIASES = {}, {}
for _, r in ipairs(ROWS) do
  if r.file == "fp8_config" then
    CONFIG_FIELDS[#CONFIG_FIELDS + 1] = r.name
    if r.alias then CONFIG_ALIASES[r.alias] = r.name end
  end
end

local function read_env(env)
  local get
  if env == nil then
    get = os.getenv
  else
    get = function(name) local v = env[name]; if v ~= nil then v = tostring(v) end; return v end
  end
  local vals, raw = {}, {}
  for _, e in ipairs(M.ENV) do
    local s = get(e.name)
    if s ~= nil and s ~= "" then
      raw[e.field or e.name] = s
      if e.field then vals[e.field] = coerce(e.field, s, e.name) end
    end
  end
  return vals, raw
end

local function module_missing(err, name)
  return type(err) == "string" and err:find("module '" .. name .. "' not found", 1, true) ~= nil
end

-- The config table: opts.config (false: none), else from fp8.config when that module exists:
-- load(path) for the FP8LAB_CONFIG_FILE we read (so an injected env table is honoured), otherwise
-- load_default() (which looks at the real environment and the default location; nil = no file).
local function load_config(opts, env_raw)
  if opts.config == false then return nil end
  if opts.config ~= nil then return opts.config end
  local ok, mod = pcall(require, "fp8.config")
  if not ok then
    if module_missing(mod, "fp8.config") then return nil end
    error(mod, 0)
  end
  if type(mod) ~= "table" then return nil end
  local path = env_raw.FP8LAB_CONFIG_FILE
  if path and type(mod.load) == "function" then
    local ok2, cfg = pcall(mod.load, path)
    if not ok2 then error((tostring(cfg):gsub("^lua/fp8/[^:]*:%d+: ", "")), 0) end   -- the file's fault, not this line's
    return cfg
  end
  if type(mod.load_default) ~= "function" then return nil end
  -- (a module without load gets the path; fp8.config's load_default takes no argument, so a nil is not passed on)
  if path ~= nil then return mod.load_default(path) end
  return mod.load_default()
end

local function read_config(cfg, notices)
  if cfg == nil then return {}, nil, nil end
  if type(cfg) ~= "table" then fail("resolve: config: expected a table, got %s", got(cfg)) end
  -- (its keys are checked raw below and its values read by lookups: a proxy's keys went unchecked; stop 103)
  local proxy = O.proxy_text(cfg)
  if proxy then fail("resolve: config: %s", proxy) end
  -- path and notices: what fp8.config.load adds to a file's settings (the file, what it noticed reading it)
  local path = cfg.path
  if path ~= nil and type(path) ~= "string" then fail("resolve: config: path: expected a string, got %s", got(path)) end
  local where = path and ("config file " .. path) or "config"
  local vals = {}
  if cfg.notices ~= nil and type(cfg.notices) ~= "table" then
    fail("%s: notices: expected a list of strings, got %s", where, got(cfg.notices))
  end
  for _, n in ipairs(cfg.notices or {}) do notices[#notices + 1] = tostring(n) end
  local top = {}
  for _, r in ipairs(ROWS) do   -- the top-level keys
    if r.file == "top" then
      top[#top + 1] = r.name
      if cfg[r.name] ~= nil then vals[r.name] = coerce(r.name, cfg[r.name], where .. ": " .. r.name) end
    end
  end
  top[#top + 1] = "fp8_config"
  for k in next, cfg do   -- a table given as config= is checked as a file is: an unknown key is an error
    local known = k == "path" or k == "notices"   -- accepted, not offered: a file has no such keys
    for _, n in ipairs(top) do known = known or n == k end
    if not known then fail("%s: %s", where, O.unknown_text(k, top, "key")) end
  end
  local fc = cfg.fp8_config
  if fc ~= nil then
    if type(fc) ~= "table" then fail("%s: fp8_config: expected a table, got %s", where, got(fc)) end
    -- (read raw as config= itself: a proxy's settings were dropped, the defaults taken; stop 104)
    local fproxy = O.proxy_text(fc)
    if fproxy then fail("%s: fp8_config: %s", where, fproxy) end
    local keys = {}
    for k in next, fc do keys[#keys + 1] = k end
    table.sort(keys, function(a, b) return tostring(a) < tostring(b) end)
    local seen = {}   -- name -> the key that gave it: an alias beside its name is refused, as in a file
    for _, k in ipairs(keys) do
      local name = CONFIG_ALIASES[k] or k
      local f = type(name) == "string" and F[name]
      if f and seen[name] then
        fail("%s: fp8_config: '%s' and '%s' name the same option; give one", where, seen[name], k)
      end
      seen[name] = k
      if f and f.file == "fp8_config" then   -- the fields a config file can carry (not config/module_filter_func)
        vals[name] = coerce(name, fc[k], ("%s: fp8_config.%s"):format(where, tostring(k)))
      else   -- fp8.config.load refuses these in a file; a table given as config= is refused the same way
        fail("%s: %s", where, O.unknown_text(k, CONFIG_FIELDS, "key", " in fp8_config"))
      end
    end
  end
  return vals, where, path
end

local function check_handlers(list, keyname)
  if is_handler(list) then
    fail("resolve: %s: expected a list of handlers, got a single %s; wrap it: {%s{...}}", keyname,
      list.handler_type, list.handler_type)
  end
  if type(list) ~= "table" then fail("resolve: %s: expected a list of kwargs handlers, got %s", keyname, got(list)) end
  local n = 0
  for _ in next, list do n = n + 1 end
  if n ~= #list then fail("resolve: %s: expected a list {h1, h2, ...}, got a table with non-list keys", keyname) end
  local by_type, fp8h, fp8i = {}, nil, nil
  for i, h in ipairs(list) do
    if not is_handler(h) then
      local cls = type(h) == "table" and CLASSES[rawget(h, "handler_type") or ""]
      if cls == h then
        fail("resolve: %s[%d]: got the class %s itself; call it: %s{...}", keyname, i, cls.handler_type, cls.handler_type)
      end
      fail("resolve: %s[%d]: expected a kwargs handler (%s), got %s", keyname, i, table.concat(CLASS_NAMES, ", "), got(h))
    end
    local t = h.handler_type
    if by_type[t] then
      fail("resolve: %s has two %s (items %d and %d); pass each handler type once", keyname, t, by_type[t].i, i)
    end
    by_type[t] = { h = h, i = i }
    if FP8_HANDLER[t] then
      if fp8h then
        fail("resolve: %s has two FP8 recipe handlers (%s at %d, %s at %d); pass one", keyname,
          fp8h.handler_type, fp8i, t, i)
      end
      fp8h, fp8i = h, i
    end
  end
  local out = {}
  for t, e in next, by_type do out[t] = e.h end
  return out, fp8h
end

local SOURCE_TEXT = { argument = "the mixed_precision argument", handler = "a kwargs handler",
                      env = "the environment", config = "the config file", default = "the default" }

local RESOLVE_KEYS = { "mixed_precision", "kwargs_handlers", "kwarg_handlers", "env", "config" }

local function resolve(opts)
  if opts == nil then opts = {} end
  if type(opts) ~= "table" then fail("resolve: expected an options table, got %s", got(opts)) end
  local proxy = require("fp8.opts").proxy_text(opts)   -- (stop 102) a proxy's keys are not read
  if proxy then fail("resolve: %s", proxy) end
  for k in next, opts do
    local ok = false
    for _, v in ipairs(RESOLVE_KEYS) do ok = ok or k == v end
    if not ok then fail("resolve: %s", O.unknown_text(k, RESOLVE_KEYS, "key")) end
  end
  if opts.kwargs_handlers ~= nil and opts.kwarg_handlers ~= nil then
    fail("resolve: give kwargs_handlers or kwarg_handlers (the same list), not both")
  end
  local hkey = opts.kwarg_handlers ~= nil and "kwarg_handlers" or "kwargs_handlers"
  local handlers, fp8h = check_handlers(opts[hkey] or {}, hkey)
  if opts.env ~= nil and type(opts.env) ~= "table" then fail("resolve: env: expected a table, got %s", got(opts.env)) end
  for k, v in next, opts.env or {} do   -- it stands in for the process environment: names and values are text
    if type(k) ~= "string" then fail("resolve: env: expected variable names as keys, got %s", got(k)) end
    if type(v) ~= "string" then
      fail("resolve: env: %s: expected a string (env= stands in for the process environment), got %s", k, got(v))
    end
  end

  local notices = {}
  local envv, env_raw = read_env(opts.env)
  local cfgv, where, cfg_path = read_config(load_config(opts, env_raw), notices)
  -- the file's notices come first; fp8lab launch has shown them already when it exported FP8LAB_NOTICED = the file
  local out = { sources = {}, notices = notices, handlers = handlers, config_path = cfg_path,
                file_notices = #notices }
  -- a misspelled FP8LAB_* variable (of the process environment, or of an env= table) is named, not ignored
  for _, n in ipairs(require("fp8.env").misspelled(opts.env)) do notices[#notices + 1] = n end
  for _, n in ipairs(require("fp8.env").accelerate_names(opts.env)) do notices[#notices + 1] = n end
  local src = out.sources

  -- A setting the argument or a handler decided, as in Accelerate: its environment and config-file values, where they
  -- differ, are named in a notice ("<where it came from> overridden by <by>"). cfg_key: the key as the file spells it.
  -- the launch flags behind variables (fp8lab launch exports FP8LAB_LAUNCH_FLAGS): given for this run, so a flag
  -- the run does not use is refused; a variable set by hand (kept from a shell, say) only gets a notice
  local flag_of = {}
  for var, flag in (env_raw.FP8LAB_LAUNCH_FLAGS or ""):gmatch("([%w_]+)=(%-%-[%w_]+)") do flag_of[var] = flag end
  local function note_beaten(env_name, name, cfg_key, v, by)
    -- a launch flag the script's own setting overrides changes nothing: refused, as a flag the run does not use is
    -- (it was a notice naming the variable until 2026-12-06)
    if env_name and flag_of[env_name] and envv[name] ~= nil and not deep_equal(envv[name], v) then
      fail("%s %s (a launch flag) would change nothing: the script sets it, %s; leave the flag out or the setting",
        flag_of[env_name], tostring(env_raw[name]), by)
    end
    for _, o in ipairs { { envv[name], env_name and (env_name .. "=" .. tostring(env_raw[name])) },
                         { cfgv[name], (where or "") .. ": " .. cfg_key .. "=" .. repr(cfgv[name]) } } do
      if o[1] ~= nil and o[2] and not deep_equal(o[1], v) then
        notices[#notices + 1] = ("%s overridden by %s"):format(o[2], by)
      end
    end
  end

  -- mixed precision: argument > environment > config > "no"
  local mp, mps
  if opts.mixed_precision ~= nil then
    local ok, res = pcall(settings.check, "mixed_precision", opts.mixed_precision, "resolve: mixed_precision")
    if not ok then fail(tostring(res)) end
    mp, mps = res, "argument"
    note_beaten("FP8LAB_MIXED_PRECISION", "mixed_precision", "mixed_precision", mp,
      "the Accelerator's mixed_precision=" .. repr(mp))
  elseif envv.mixed_precision then mp, mps = envv.mixed_precision, "env"
  elseif cfgv.mixed_precision then mp, mps = cfgv.mixed_precision, "config"
  else mp, mps = ROW.mixed_precision.default, "default" end
  out.mixed_precision, src.mixed_precision = mp, mps

  -- the other top-level settings (num_processes, gradient_accumulation_steps): environment (what the
  -- launch flags set) > config file > default
  for _, r in ipairs(ROWS) do
    if r.file == "top" and r.name ~= "mixed_precision" then
      if envv[r.name] ~= nil then out[r.name], src[r.name] = envv[r.name], "env"
      elseif cfgv[r.name] ~= nil then out[r.name], src[r.name] = cfgv[r.name], "config"
      else out[r.name], src[r.name] = copy(r.default), "default" end
    end
  end

  if fp8h and mp ~= "fp8" then
    -- the argument outranks the environment and the config file: only it helps once it is given
    fail("%s needs mixed_precision=\"fp8\", but mixed_precision is %s (from %s); pass mixed_precision=\"fp8\"%s",
      fp8h.handler_type, repr(mp), SOURCE_TEXT[mps], mps == "argument" and ""
        or mps == "env" and " or set FP8LAB_MIXED_PRECISION=fp8"
        or " or set FP8LAB_MIXED_PRECISION=fp8 or mixed_precision: fp8 in the config file")
  end

  -- A field set by the environment or the config file that the run does not use: silent when it
  -- holds the default, a notice otherwise.
  local function unused(name, why)
    local f = F[name]
    if envv[name] ~= nil and flag_of[f.env] then
      fail("%s %s (a launch flag) would change nothing: %s; leave the flag out",
        flag_of[f.env], env_raw[name], why)
    end
    if envv[name] ~= nil and not deep_equal(envv[name], f.default) then
      notices[#notices + 1] = ("%s=%s ignored: %s"):format(f.env, env_raw[name], why)
    end
    if cfgv[name] ~= nil and not deep_equal(cfgv[name], f.default) then
      notices[#notices + 1] = ("%s: fp8_config.%s=%s ignored: %s"):format(where, name, repr(cfgv[name]), why)
    end
  end

  if mp == "fp8" then
    -- backend: the handler's type, or FP8RecipeKwargs' backend key, > environment > config > msamp
    local backend, bs
    if fp8h and fp8h.handler_type ~= "FP8RecipeKwargs" then
      backend, bs = CLASSES[fp8h.handler_type].fp8, "handler"
    elseif fp8h and fp8h:is_set("backend") then
      backend, bs = fp8h.backend, "handler"
    elseif envv.backend then backend, bs = envv.backend, "env"
    elseif cfgv.backend then backend, bs = cfgv.backend, "config"
    else backend, bs = ROW.backend.default, "default" end
    out.fp8_backend, src.fp8_backend = backend, bs
    if bs == "handler" then
      note_beaten("FP8LAB_FP8_BACKEND", "backend", "fp8_config.backend", backend,
        ("%s (backend %s)"):format(fp8h.handler_type, backend))
    end

    if fp8h and fp8h.handler_type == "FP8RecipeKwargs" and bs ~= "handler" then
      local err = foreign_field_error(fp8h:to_table(), DATA[fp8h].given, backend, "from " .. SOURCE_TEXT[bs])
      if err then fail("FP8RecipeKwargs: %s", err) end
    end

    local recipe = { backend = backend }
    local hcls = fp8h and CLASSES[fp8h.handler_type]
    for _, name in ipairs(BACKEND_FIELDS[backend]) do
      local v, s
      if hcls and hcls.by_name[name] and fp8h:is_set(name) then v, s = fp8h[name], "handler"
      elseif envv[name] ~= nil then v, s = envv[name], "env"
      elseif cfgv[name] ~= nil then v, s = cfgv[name], "config"
      else v, s = copy(F[name].default), "default" end
      recipe[name], src[name] = v, s
      if s == "handler" then
        note_beaten(F[name].env, name, "fp8_config." .. name, v, ("%s{%s=%s}"):format(fp8h.handler_type, name, repr(v)))
      end
    end
    out.fp8_recipe = recipe
    for _, b in ipairs(M.BACKENDS) do
      if b ~= backend then
        for _, name in ipairs(BACKEND_FIELDS[b]) do
          if F[name].env then unused(name, ("%s belongs to the %s recipe and the FP8 backend is %s"):format(name, b, backend)) end
        end
      end
    end
  else
    local why = ("mixed_precision is %s, not \"fp8\""):format(repr(mp))
    unused("backend", why)
    for _, b in ipairs(M.BACKENDS) do
      for _, name in ipairs(BACKEND_FIELDS[b]) do if F[name].env then unused(name, why) end end
    end
  end

  local function group(key, tname)
    local h = handlers[tname]
    src[key] = h and "handler" or "default"
    return h and h:to_table() or CLASSES[tname].defaults()
  end
  out.autocast = group("autocast", "AutocastKwargs")
  if handlers.AutocastKwargs and mp == "no" then   -- no autocast runs without mixed precision: it would change nothing
    fail("AutocastKwargs needs mixed precision (fp16, bf16 or fp8: the autocast it configures), but mixed_precision is "
      .. "%s (from %s); leave the handler out or pass a mixed_precision", repr(mp), SOURCE_TEXT[mps])
  end
  if mp == "fp16" then
    out.grad_scaler = group("grad_scaler", "GradScalerKwargs")
  elseif handlers.GradScalerKwargs then   -- as an FP8 recipe handler without fp8: a setting that would change nothing
    fail("GradScalerKwargs needs mixed_precision=\"fp16\" (loss scaling is for fp16), but mixed_precision is %s (from %s); "
      .. "leave the handler out or pass mixed_precision=\"fp16\"", repr(mp), SOURCE_TEXT[mps])
  end
  out.ddp = group("ddp", "DistributedDataParallelKwargs")
  out.process_group = group("process_group", "InitProcessGroupKwargs")
  -- which of the handler's keys the user passed: an unset backend is not a request for NCCL on the CPU
  local pgh = handlers.InitProcessGroupKwargs
  out.process_group_given = pgh and { backend = pgh:is_set("backend"), timeout = pgh:is_set("timeout"),
                                      init_method = pgh:is_set("init_method") } or {}
  -- the group a run uses (fp8.distributed.setup's rule): the handler's backend only where it was passed, else MPI
  -- (the dataclass default, nccl as in Accelerate, is not a request: NCCL needs GPU tensors, the DDP reducer runs on
  -- the CPU), and a timeout not passed follows that backend: 600 s for nccl, 1800 s for mpi
  local pg, given = out.process_group, out.process_group_given
  pg.backend = given.backend and pg.backend or "mpi"
  pg.timeout = given.timeout and pg.timeout or (pg.backend == "nccl" and 600 or 1800)
  out.profile = handlers.ProfileKwargs
  src.profile = out.profile and "handler" or "default"
  return out
end

-- resolve{mixed_precision=, kwargs_handlers= (or kwarg_handlers=), env=, config=} -> settings
-- (see the help entry below and docs/recipes.md).
function M.resolve(opts)
  local ok, res = pcall(resolve, opts)
  if ok then return res end
  if type(res) == "table" and res.kwargs_error then error(res.kwargs_error, 2) end
  error(res, 0)
end

-- describe(settings [, extra]) -> a multi-line summary: each setting, its value and where it came from. extra: a
-- list of {name, text} rows (the Accelerator's own options) shown after the settings, aligned with their names;
-- their text does not widen the value column.
function M.describe(s, extra)
  if type(s) ~= "table" or s.mixed_precision == nil then
    error(("describe: expected the settings table from fp8.kwargs.resolve, got %s"):format(got(s)), 2)
  end
  local src = type(s.sources) == "table" and s.sources or {}
  local rows = {}   -- {key, value, source} or a plain string; aligned at the end
  -- (a value or source that is not text, {mixed_precision = {}}, was Lua's own 'attempt to concatenate a table value
  -- (local 'text')' at the padding below; sweep 113's --messages)
  local function line(k, v, from, field)
    if type(v) ~= "string" then
      error(("describe: settings.%s must be a string, got %s (the settings table from fp8.kwargs.resolve)")
        :format(field or k:gsub("^%s+", ""), got(v)), 3)
    end
    if from ~= nil and type(from) ~= "string" then
      error(("describe: settings.sources.%s must be a string, got %s"):format(k:gsub("^%s+", ""), got(from)), 3)
    end
    rows[#rows + 1] = { k, v, from }
  end
  line("mixed_precision", s.mixed_precision, src.mixed_precision)
  if s.fp8_backend then
    line("fp8_backend", s.fp8_backend, src.fp8_backend)
    rows[#rows + 1] = ("fp8 recipe (%s: %s):"):format(s.fp8_backend, BACKEND_TITLE[s.fp8_backend] or "")
    for _, name in ipairs(BACKEND_FIELDS[s.fp8_backend] or {}) do
      local v = s.fp8_recipe[name]
      if name == "module_filter_func" and v == nil then v = "default filter" else v = repr(v) end
      line("  " .. name, v, src[name])
    end
  end
  local function nondefault(t, tname)
    local d = CLASSES[tname].defaults()
    local parts = {}
    for _, name in ipairs(CLASSES[tname].fields) do
      if not deep_equal(t[name], d[name]) then parts[#parts + 1] = name .. "=" .. repr(t[name]) end
    end
    return #parts == 0 and "defaults" or table.concat(parts, ", ")
  end
  for _, r in ipairs(ROWS) do
    if r.file == "top" and r.name ~= "mixed_precision" and s[r.name] ~= nil then
      line(r.name, tostring(s[r.name]), src[r.name])
    end
  end
  local a = s.autocast or {}
  line("autocast", ("enabled=%s, cache_enabled=%s"):format(tostring(a.enabled), tostring(a.cache_enabled)), src.autocast)
  if s.grad_scaler then
    local g = s.grad_scaler
    line("grad_scaler", ("init_scale=%s, growth=%s every %s, backoff=%s%s"):format(numstr(g.init_scale),
      numstr(g.growth_factor), numstr(g.growth_interval), numstr(g.backoff_factor), g.enabled and "" or ", disabled"),
      src.grad_scaler)
  end
  if s.ddp then line("ddp", nondefault(s.ddp, "DistributedDataParallelKwargs"), src.ddp) end
  if s.process_group then
    local p = s.process_group
    line("process_group", ("backend=%s, timeout=%s s%s"):format(p.backend, numstr(p.timeout),
      p.init_method and (", init_method=" .. p.init_method) or ""), src.process_group)
  end
  line("profile", s.profile and nondefault(s.profile:to_table(), "ProfileKwargs") or "off", src.profile)
  if s.config_path then line("config file", s.config_path, nil, "config_path") end
  if extra ~= nil and type(extra) ~= "table" then error(("describe: extra must be a list of {name, text}, got %s"):format(type(extra)), 2) end
  for i, e in ipairs(extra or {}) do
    if type(e) ~= "table" or type(e[1]) ~= "string" or type(e[2]) ~= "string" then
      error(("describe: extra row %d must be {name, text} (two strings)"):format(i), 2)
    end
    rows[#rows + 1] = { e[1], e[2], loose = true }
  end
  if s.notices and #s.notices > 0 then
    rows[#rows + 1] = "notices:"
    for _, n in ipairs(s.notices) do rows[#rows + 1] = "  - " .. n end
  end
  local wk, wv = 0, 0
  for _, r in ipairs(rows) do
    if type(r) == "table" then wk, wv = math.max(wk, #r[1]), r.loose and wv or math.max(wv, #r[2]) end
  end
  -- padded by hand: string.format takes widths up to 99, and a value (a ProfileKwargs with a schedule and a
  -- trace directory, a config file's path) can be longer
  local function pad(text, w) return text .. (" "):rep(w - #text) end
  local out = {}
  for i, r in ipairs(rows) do
    out[i] = type(r) == "string" and r
      or (pad(r[1], wk) .. "  " .. pad(r[2], wv) .. "  " .. (r[3] and ("(" .. r[3] .. ")") or "")):gsub("%s+$", "")
  end
  return table.concat(out, "\n")
end

-- ---- help ------------------------------------------------------------------------------------

local okh, help = pcall(require, "fp8.help")
if okh and type(help) == "table" and help.add then
  -- help.lua lists a fixed set of sections; use ours once it lists it.
  local section = "Other"
  for _, s in ipairs(type(help.sections) == "table" and help.sections or {}) do
    if s == "Accelerator & recipes" then section = s end
  end
  local function fields_sig(name)
    local parts = {}
    for _, f in ipairs(CLASSES[name].field_list) do
      local d = f.default   -- nil for defaults that depend on other fields (timeout)
      parts[#parts + 1] = d == nil and f.name or (f.name .. "=" .. repr(d))
    end
    return table.concat(parts, ", ")
  end
  local function add(name, doc)
    help.add { section = section, name = name, sig = ("fp8.%s{%s}"):format(name, fields_sig(name)), doc = doc }
  end
  local common = "\nh.field reads a value (defaults included); h:to_kwargs() lists the non-defaults; unknown keys and\n"
              .. "bad values are errors naming the valid ones."
  -- Where a setting also comes from, for its help line: "FP8LAB_X, --flag, fp8_config.x".
  local function places(r)
    local p = {}
    if r.env then p[#p + 1] = r.env end
    if r.flag then p[#p + 1] = "--" .. r.flag end
    if r.file then p[#p + 1] = (r.file == "fp8_config" and "fp8_config." or "") .. r.name end
    return #p > 0 and (" [" .. table.concat(p, ", ") .. "]") or ""
  end
  -- One line per field of a recipe handler, from the settings table.
  local function field_lines(name)
    local out = {}
    for _, f in ipairs(CLASSES[name].field_list) do
      local r = ROW[f.name]
      if r.unsupported then
        out[#out + 1] = ("  %s: refused: %s%s"):format(f.name, r.unsupported, places(r))
      else
        out[#out + 1] = ("  %s%s: %s; %s (default %s)%s"):format(f.name, r.alias and (" (alias " .. r.alias .. ")") or "",
          r.expected, r.help, repr(r.default), places(r))
      end
    end
    return "\n" .. table.concat(out, "\n")
  end
  add("FP8RecipeKwargs", "Accelerate's original FP8 handler: backend plus the MS-AMP level and the te fields; ao options\n"
    .. "go through AORecipeKwargs. Needs mixed_precision=\"fp8\"." .. field_lines("FP8RecipeKwargs") .. common)
  add("TERecipeKwargs", "Delayed scaling (TransformerEngine): scale = fp8_max / amax / 2^margin from an amax history,\n"
    .. "recomputed every `interval` steps." .. field_lines("TERecipeKwargs") .. common)
  add("MSAMPRecipeKwargs", "MS-AMP levels (power-of-two scales; O2 is the default)." .. field_lines("MSAMPRecipeKwargs")
    .. common)
  add("AORecipeKwargs", "Dynamic scaling (torchao); pad_inner_dim defaults to true, as Accelerate sets it. Accelerate's\n"
    .. "enable_fsdp_float8_all_gather is refused (no FSDP here)." .. field_lines("AORecipeKwargs") .. common)
  -- Every setting: what it takes, its default, and every place it comes from.
  local lines = {}
  for _, r in ipairs(ROWS) do
    local kw = r.backends and (" kwarg of " .. M.RECIPE_HANDLER[r.backends[1]]
      .. (r.fp8_recipe_kwargs and " and FP8RecipeKwargs" or "")) or (r.fp8_recipe_kwargs and " kwarg of FP8RecipeKwargs" or "")
    if r.unsupported then
      lines[#lines + 1] = ("%s: refused: %s%s%s"):format(r.name, r.unsupported, places(r), kw)
    else
      lines[#lines + 1] = ("%s: %s (default %s); %s%s%s"):format(r.name, r.expected, repr(r.default), r.help, places(r), kw)
    end
  end
  help.add { section = section, name = "settings", sig = "fp8.settings.list() / check(name, value) / parse(name, text)",
    doc = "The settings table (core/settings.c): one row per setting, read by the kwargs handlers, resolve(),\n"
       .. "config.yaml, launch flags, FP8LAB_* variables and `fp8lab config`; one check and one set of messages.\n"
       .. table.concat(lines, "\n") }
  add("AutocastKwargs", "The autocast for the non-FP8 ops (bf16 under fp8)." .. common)
  add("GradScalerKwargs", "The fp16 loss scaler (fp8.amp.GradScaler); refused unless mixed_precision is \"fp16\" (it would change nothing)."
    .. common)
  add("DistributedDataParallelKwargs", "Data-parallel options. comm_hook \"no\" | \"fp16\" | \"bf16\" | \"power_sgd\" |\n"
    .. "\"batched_power_sgd\"; comm_wrapper \"no\" | \"fp16\" | \"bf16\" and comm_state_option (PowerSGD options) need a\n"
    .. "PowerSGD hook." .. common)
  add("InitProcessGroupKwargs", "Process group: backend \"mpi\" | \"nccl\" (when not given: mpi, whatever the handler's\n"
    .. "Accelerate-style default says), timeout in seconds (default 600 for nccl, 1800 for mpi). init_method is refused:\n"
    .. "mpirun or srun start and wire the processes (fp8lab launch --num_processes N runs mpirun)." .. common)
  add("ProfileKwargs", "Profiler: activities {\"cpu\", \"cuda\"} (\"cpu\" must be listed: host ops are always recorded),\n"
    .. "schedule_option {wait=, warmup=, active= [, repeat=, skip_first=, skip_first_wait=]}, on_trace_ready(fn),\n"
    .. "record_shapes, profile_memory, with_stack (false only: no stacks are recorded), with_flops, with_modules,\n"
    .. "output_trace_dir (Chrome trace JSON)." .. common)
  help.add { section = section, name = "kwargs.resolve",
    sig = "fp8.kwargs.resolve{mixed_precision=, kwargs_handlers={...}, env=, config=} -> settings",
    doc = "Merges handlers > FP8LAB_* environment > config file > defaults into {mixed_precision, fp8_backend,\n"
       .. "fp8_recipe, autocast, grad_scaler (fp16), ddp, process_group, profile, sources, notices}. The FP8 backend\n"
       .. "defaults to msamp (O2). fp8.kwargs.describe(settings) prints where each value came from." }
  help.add { section = section, name = "kwargs.RECIPE_FIELDS", sig = "fp8.kwargs.RECIPE_FIELDS[backend]",
    doc = "Per backend (te, msamp, ao): the ordered recipe fields {name, default, doc, expect, choices, env}." }
  help.add { section = section, name = "kwargs.BACKENDS",
    sig = "fp8.kwargs.BACKENDS / ENV / HANDLER_NAMES / RECIPE_HANDLER (tables to read, not to change)",
    doc = "BACKENDS: the FP8 backends' names, the default first ({" .. table.concat(M.BACKENDS, ", ") .. "}).\n"
       .. "ENV: the environment variables resolve() reads, each {name=, field=} (field nil for FP8LAB_CONFIG_FILE and\n"
       .. "FP8LAB_LAUNCH_FLAGS). HANDLER_NAMES: the handler classes' names in definition order (fp8.<name> is each).\n"
       .. "RECIPE_HANDLER: backend -> the name of its recipe handler (te = \"TERecipeKwargs\", ...)." }
  for _, n in ipairs(CLASS_NAMES) do help.ALIASES["kwargs." .. n] = n end   -- fp8.kwargs.TERecipeKwargs is fp8's
  for _, n in ipairs { "kwargs.ENV", "kwargs.HANDLER_NAMES", "kwargs.RECIPE_HANDLER" } do
    help.ALIASES[n] = "kwargs.BACKENDS"
  end
  -- every handler's methods (h:to_kwargs(), ...): the entry KwargsHandler:to_kwargs (lua/fp8/help.lua)
  if help.class then help.class { class = methods, prefix = "KwargsHandler", entry = "KwargsHandler:to_kwargs" } end
end

-- each public function refuses arguments past its parameters (fp8.opts.strict_functions)
O.strict_functions(M, "kwargs")
return M
