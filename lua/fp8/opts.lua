-- opts.lua — the one check of an options table in fp8's Lua functions (the C bindings have lua/l_util.c's
-- fl_lcheckopts, with the same message): every key must be a valid name, else an error naming the function, the
-- key, the nearest valid name when the key looks like a typo (fp8.settings.suggest) and every valid name:
--   AdamW: unknown option 'weight_decy' (did you mean 'weight_decay'?) (valid: amsgrad, betas, ...)
local settings = require "fp8.settings"

local M = {}

-- check(fname, opts, valid [, level]) -> opts, or {} when opts is nil. valid: a list of names (listed in its
-- order) or a set {name = true} (listed sorted). level: what the caller would pass to error() itself (default
-- 2: the caller's caller is blamed). A non-table is refused with the names the table takes (where torch takes them
-- positionally): "fname: options must be a table {name = value} (torch's later positional arguments go in it by
-- name: a, b), got 5".
-- valid is read raw (rawget, next): a table with __index or __len metamethods is read as it holds, never asked.
-- Whether k is one of valid (a list: searched, they are short; a set: indexed).
local function has(valid, k)
  if rawget(valid, 1) == nil then return k ~= nil and rawget(valid, k) ~= nil end
  local i = 1
  while true do
    local n = rawget(valid, i)
    if n == nil then return false end
    if n == k then return true end
    i = i + 1
  end
end

local function check_valid(valid, fname, level)
  if type(valid) ~= "table" then
    error(("%s: the valid names must be a table (a list or a set), got %s"):format(fname, type(valid)), level + 1)
  end
end

-- unknown_text(k, valid [, noun [, after]]) -> "unknown <noun> 'k'<after> (did you mean 'x'?) (valid: a, b, ...)":
-- the one wording of an unknown name, for check below and for the tables checked elsewhere (fp8.kwargs: the
-- config= table, PowerSGD and schedule options). noun defaults to "option"; after follows the quoted name (" in
-- fp8_config"). valid: as check takes it. The names are listed only now: check runs on hot paths, e.g. every
-- attention call.
function M.unknown_text(k, valid, noun, after)
  check_valid(valid, "unknown_text", 2)
  local names = {}
  if rawget(valid, 1) ~= nil then
    local i = 1
    while rawget(valid, i) ~= nil do names[i] = tostring(rawget(valid, i)); i = i + 1 end
  else
    for n in next, valid do names[#names + 1] = tostring(n) end
    table.sort(names)
  end
  local near = type(k) == "string" and settings.suggest(k, names) or nil
  return ("unknown %s '%s'%s%s (valid: %s)"):format(tostring(noun or "option"), tostring(k), tostring(after or ""),
    near and (" (did you mean '%s'?)"):format(near) or "", table.concat(names, ", "))
end

-- more_args_message(fname, takes, n) -> "fname: takes <takes>; got n more argument(s)": the one wording of a call
-- with n > 0 arguments too many, for no_more, strict_arity and Module's forward check (lua/fp8/nn/module.lua); the
-- C bindings' fl_lmaxargs (lua/l_util.c) says the same.
function M.more_args_message(fname, takes, n)
  return ("%s: takes %s; got %d more argument%s"):format(fname, takes, n, n == 1 and "" or "s")
end

-- no_more(fname, takes, ...): the arguments past the last one a function takes (its own `...`); any there is an
-- error naming what the function takes (a Lua function would drop them silently: fp8.stack(list, 1, "bf16")).
-- Blames the function's caller.
function M.no_more(fname, takes, ...)
  local n = select("#", ...)
  if n > 0 then error(M.more_args_message(fname, takes, n), 3) end
end

-- check_list(fname, what, t [, level]): t is a list (keys 1..n, n its raw length): a key past them would be read by
-- nothing ({2, 1, keepdim=true}, {a, b, dim=2}). Errors at level (default 3: the caller's caller).
function M.check_list(fname, what, t, level)
  local n = rawlen(t)
  for k in next, t do
    if math.type(k) ~= "integer" or k < 1 or k > n then
      error(("%s: %s must be a list (keys 1..%d), got the key %s"):format(fname, what, n,
        type(k) == "string" and ("'" .. k .. "'") or tostring(k)), level or 3)
    end
  end
end

-- What a Lua function written with a fixed parameter list takes: its parameter count (self included) and the
-- text "(a, b)" naming them (self left out; "no arguments" when none); nil for a C function or one with `...`.
-- Cached per function.
local ARITY = setmetatable({}, { __mode = "k" })
function M.arity(f)
  local a = ARITY[f]
  if a == nil then
    local info = type(f) == "function" and debug.getinfo(f, "Su")
    a = false
    if info and info.what == "Lua" and not info.isvararg then
      local names = {}
      for i = 1, info.nparams do
        local pn = debug.getlocal(f, i)
        if not (i == 1 and pn == "self") then names[#names + 1] = pn end
      end
      a = { n = info.nparams, takes = #names == 0 and "no arguments" or "(" .. table.concat(names, ", ") .. ")" }
    end
    ARITY[f] = a
  end
  return a or nil
end

-- What a method was given in place of its object, for the message of a call written with a dot (a Python habit:
-- opt.step(), acc.backward(loss)): "nil", "a tensor", "a number", ...
local function given(v)
  if v == nil then return "nil" end
  if require("fp8.core").is_tensor(v) then return "a tensor" end
  return "a " .. type(v)   -- boolean, number, string, table, function, thread, userdata
end

-- is_a(v, name) -> whether v is an instance of the class whose metatable's __name is `name`. By name, not by
-- identity: a spec or a REPL session that reloads a module makes a second class table.
function M.is_a(v, name)
  local mt = getmetatable(v)
  return type(v) == "table" and type(mt) == "table" and rawget(mt, "__name") == name
end

-- got(v) -> v as an error message shows a value that should have been a number: a number as it is, a string quoted
-- (num_steps="2" read "got 2", as if it were the number), anything else by its kind ("a table", "a tensor", "nil").
function M.got(v)
  if type(v) == "number" or type(v) == "boolean" then return tostring(v) end
  if type(v) == "string" then return ("%q (a string)"):format(v) end
  return given(v)
end

-- shown(v) -> v as a refusal shows a value read from a file or given in place of a long string (a seed, a generator's
-- state): a string quoted as %q quotes it, cut to its first 64 characters and "..." where it is longer than 70 (a
-- megabyte was all in the message until stop 97), anything else as got shows it ("a table", not "table: 0x...").
-- The one cut rule (checkpointing's load_state and fp8.set_math_random_state each wrote it until stop 98, and
-- load_state's put the string between quotes unescaped: a quote or a newline in it read as the message's own).
function M.shown(v)
  if type(v) == "string" then return ("%q"):format(#v > 70 and v:sub(1, 64) .. "..." or v) end
  return M.got(v)
end

-- Whether self is an object a method `name` can be called on: a table whose lookup of name finds a method (an
-- instance of the class, or of a subclass). A call written with a dot passes its first argument, or nothing, here.
-- The lookup must find a function: a table whose __index answers every key (1) passed as an object, and the method
-- failed inside on its fields ('lua/fp8/data.lua:634: attempt to index a number value (local 'gs')' from
-- fp8.Accelerator.gather_for_metrics(t), sweep 114).
-- A table whose lookup answers every key with a function passed too ('lua/fp8/data.lua:634: attempt to index a
-- function value (local 'gs')' from fp8.Accelerator.gather_for_metrics(t), sweep 115): a key no class has is asked
-- as well, and an answer there is a lie (an __index that raises on it is a class's own refusal, not a lie).
local PROBE = "\0fp8.opts: a key no object has"
local function is_object(self, name)
  if type(self) ~= "table" or getmetatable(self) == nil then return false end
  local f = self[name]
  local mt = type(f) == "table" and getmetatable(f)
  if not (type(f) == "function" or (type(mt) == "table" and rawget(mt, "__call") ~= nil)) then return false end
  local ok, lie = pcall(function() return self[PROBE] end)
  return not (ok and lie ~= nil)
end

-- strict_arity(class, label): each public method of `class` (a name not starting with "_") written in Lua with a
-- fixed parameter list refuses a call with more arguments than it has parameters (acc:gather(t, 5) would drop
-- the 5 silently): "label:name: takes (tensor); got 1 more argument". Each public method written in Lua whose first
-- parameter is self (vararg ones too) refuses a call without its object, the mistake of writing obj.name(...) for
-- obj:name(...): "label:name: called without its object (got a tensor as self): write obj:name(...), with a
-- colon". The checks wrap the method and tail-call it, so an error the method raises at level 2 still blames its
-- caller. name_of(self), when given, names the object's own class in the arity message (a subclass calling an
-- inherited method: "AdamW:zero_grad", not "Optimizer:zero_grad"); a string it returns replaces label. Returns
-- class.
local WRAPPED = setmetatable({}, { __mode = "k" })   -- strict_arity's wrappers: a subclass's copy is not wrapped again
function M.strict_arity(class, label, name_of)
  -- each function's public names in class (an alias shares its wrapper: acc.clear == acc.free_memory)
  local names = {}
  for name, f in next, class do
    if type(name) == "string" and name:sub(1, 1) ~= "_" and type(f) == "function" and not WRAPPED[f] then
      names[f] = names[f] or {}
      table.insert(names[f], name)
    end
  end
  for f, list in next, names do
    table.sort(list)
    local name = list[1]
    local info = debug.getinfo(f, "Su")
    local method = info.what == "Lua" and info.nparams >= 1 and debug.getlocal(f, 1) == "self"
    -- forward's arity is checked by Module's __call (lua/fp8/nn/module.lua), which names the layer's place in
    -- the model
    local a = name ~= "forward" and M.arity(f)
    if a or method then
      local fname = name == "new" and label or label .. ":" .. table.concat(list, "/")
      local n, takes = a and a.n, a and a.takes
      local w = function(...)
        if method and not is_object((...), name) then
          error(("%s: called without its object (got %s as self): write obj:%s(...), with a colon, not "
            .. "obj.%s(...)"):format(fname, given((...)), name, name), 2)
        end
        local more = a and select("#", ...) - n or 0
        if more > 0 then
          local own = name ~= "new" and name_of and type((...)) == "table" and name_of((...))
          error(M.more_args_message(type(own) == "string" and own .. ":" .. name or fname, takes, more), 2)
        end
        return f(...)
      end
      WRAPPED[w] = true
      ARITY[w] = M.arity(f) or false   -- what the method takes, for Module's forward check
      for _, k in ipairs(list) do class[k] = w end
    end
  end
  return class
end

-- the public functions of a module table not yet wrapped (a name not starting with "_"), read raw: name -> function
local function unwrapped_functions(tbl)
  local todo = {}
  for name, f in next, tbl do
    if type(name) == "string" and name:sub(1, 1) ~= "_" and type(f) == "function" and not WRAPPED[f] then
      todo[name] = f
    end
  end
  return todo
end

-- strict_functions(tbl [, prefix]): each public function of the module table `tbl` (a name not starting with "_")
-- written in Lua with a fixed parameter list refuses a call with more arguments than it has parameters, as
-- strict_arity does for a class's methods: "prefix.name: takes (key, names); got 1 more argument" (fp8.kwargs.nearest,
-- fp8.convert_model, fp8.nn.Parameter, ... dropped them silently until stop 99, where the C bindings and the
-- classes' methods refuse them). The wrapper tail-calls the function, so its own errors still blame its caller.
-- Returns tbl.
-- tbl is read and written raw (next, rawset), as check reads valid: a table whose __pairs never ends looped for ever
-- (sweep 114).
function M.strict_functions(tbl, prefix)
  if type(tbl) ~= "table" then
    error(("strict_functions: expected a module table, got %s"):format(M.got(tbl)), 2)
  end
  if prefix ~= nil and type(prefix) ~= "string" then
    error(("strict_functions: prefix must be a string, got %s"):format(M.got(prefix)), 2)
  end
  local todo = unwrapped_functions(tbl)
  for name, f in next, todo do
    local a = M.arity(f)
    if a then
      local fname, n, takes = (prefix and prefix .. "." or "") .. name, a.n, a.takes
      local w = function(...)
        local more = select("#", ...) - n
        if more > 0 then error(M.more_args_message(fname, takes, more), 2) end
        return f(...)
      end
      WRAPPED[w], ARITY[w] = true, a
      rawset(tbl, name, w)
    end
  end
  return tbl
end

-- internal_functions(tbl, prefix [, names]): the functions of a library-internal module (fp8.ddp, fp8.distributed,
-- fp8.nn.conv_geometry, ...: each the inside of a public API that checks its arguments before the call) named when
-- a user's code calls one directly. Called from the library's own Lua, a wrapper tail-calls the function, so nothing
-- changes there (its errors, their levels, its cost but a debug.getinfo). Called from elsewhere (a script, the REPL,
-- the API sweep), an error it raises comes back naming it: Lua's raw error at the module's line ('lua/fp8/ddp.lua:56:
-- attempt to index a nil value (local 'acc')', until stop 101) as 'fp8.ddp.agree: got (nil, nil) where it takes (acc,
-- model), which this internal helper cannot use (...): index a nil value (local 'acc'), at lua/fp8/ddp.lua:56', and a message
-- without the function's name ('FP8 recipe state: expected a 1-d tensor, got number') with it in front; both at the
-- caller's line. names: the functions to wrap (nil: every public one). Returns tbl.
local RAW_ERRORS = { "attempt to ", "bad argument #%d+ to '%?'", "table index is ", "number has no integer "
  .. "representation", "invalid key to 'next'", "invalid value %(at index" }
-- each calling function's kind, read once ("C", or whether its chunk is the library's): a frame's "S" fields cost
-- more than its function ("f": no chunk name made), and a library function calls these helpers again and again
local CALLER_KIND = setmetatable({}, { __mode = "k" })
-- Whether f, a function of a chunk named as the library's, was made by one of the library's chunks: where the host
-- registered them (lua/main.c note_library_chunk: their _ENV upvalues' identities), an _ENV upvalue of f must be one
-- of those; a user's chunk loaded under a library file's name (load(code, "@lua/fp8/ddp.lua")) has its own _ENV and
-- passed for the library's until stop 103. A function with no _ENV upvalue (it reads no global) is taken by its name,
-- as before; so is every one where no host registered the chunks (the library loaded by another Lua).
local function library_made(f, nups)
  local envs = debug.getregistry()["fp8.library_envs"]
  if type(envs) ~= "table" then return true end
  for i = 1, nups do
    if debug.getupvalue(f, i) == "_ENV" then return rawget(envs, debug.upvalueid(f, i)) == true end
  end
  return true
end
local function own_caller()
  -- the first Lua frame above the wrapper (C frames, pcall's, skipped): the library's own chunks are named
  -- lua/fp8/... (errfmt's rule) and made by the library (library_made); a wrapper reached by a tail call looks at
  -- the frame below the one that made it
  for level = 3, 12 do
    local fi = debug.getinfo(level, "f")
    if fi == nil then return false end
    local kind = CALLER_KIND[fi.func]
    if kind == nil then
      local info = debug.getinfo(fi.func, "Su")
      kind = info.what == "C" and "C" or ((info.source:match("^@lua/fp8/") ~= nil or info.source:match("^@.*/lua/fp8/") ~= nil)
        and library_made(fi.func, info.nups))
      CALLER_KIND[fi.func] = kind
    end
    if kind ~= "C" then return kind end
  end
  return false
end
function M.internal_functions(tbl, prefix, names)
  local todo = unwrapped_functions(tbl)
  if names then
    local keep = {}
    for _, n in ipairs(names) do keep[n] = todo[n] end
    todo = keep
  end
  for name, f in pairs(todo) do
    local info = debug.getinfo(f, "u")
    local params = {}
    for i = 1, info.nparams do params[i] = debug.getlocal(f, i) end
    if info.isvararg then params[#params + 1] = "..." end
    local qname = prefix .. "." .. name
    local sig = "(" .. table.concat(params, ", ") .. ")"
    local function finish(n, ok, ...)
      if ok then return ... end
      local e = (...)
      if type(e) ~= "string" then error(e, 0) end   -- an error object: the library's own, as it is
      local body = e:match("^[^\n:]+:%d+: (.*)$") or e
      local where = e:match("^([^\n:]+:%d+): ")
      local raw = false
      for _, pat in ipairs(RAW_ERRORS) do raw = raw or body:find(pat) ~= nil end
      if raw then
        local got = {}
        for i = 1, math.min(math.max(n.n, info.nparams), 8) do got[i] = M.got(n[i]) end
        body = body:gsub("^attempt to ", ""):gsub("bad argument #(%d+) to '%?'", "argument #%1 of a call inside it is bad")
        error(("%s: got (%s) where it takes %s, which this internal helper cannot use (the library's public "
          .. "functions check what they pass it): %s%s"):format(qname, table.concat(got, ", "), sig, body,
          where and ", at " .. where or ""), 2)
      end
      if body:find(name, 1, true) then error(body, 2) end
      error(qname .. ": " .. body, 2)
    end
    local w = function(...)
      if own_caller() then return f(...) end
      return finish(table.pack(...), pcall(f, ...))
    end
    WRAPPED[w], ARITY[w] = true, M.arity(f) or nil
    rawset(tbl, name, w)
  end
  return tbl
end

-- proxy_text(opts) -> nil for a table the option readers can read, else the refusal's text: a table whose metatable
-- has __index or __pairs (an enum-like proxy) is refused (stop 102). Options are read as stored: the keys by next
-- (raw, since a __pairs that never ended looped for ever, sweep 115) and the values by lookups; a proxy's keys were
-- not seen, so a proxy with no stored keys read as empty options in one reader ({__index = {lr = 0.5}}: AdamW kept
-- its default lr, TERecipeKwargs its margin) while another read its __index's answers unchecked. torch and
-- Accelerate take plain dicts; so does fp8. lua/l_util.c's fl_lcheckopts refuses with the same words.
function M.proxy_text(opts)
  local mt = type(opts) == "table" and debug.getmetatable(opts)
  if not mt then return nil end
  local which = rawget(mt, "__index") ~= nil and "__index" or rawget(mt, "__pairs") ~= nil and "__pairs" or nil
  if not which then return nil end
  return ("options must be a plain table {name = value}, got a table whose metatable has %s (a proxy's options "
    .. "are not read through it: copy them into a plain table)"):format(which)
end

-- check_plain(fname, opts [, level]): refuses a proxy (proxy_text above) by fname, for the readers that walk an
-- options table without check. Errors at level (default 2: the caller's caller).
function M.check_plain(fname, opts, level)
  local text = M.proxy_text(opts)
  if text then error(fname .. ": " .. text, (level or 2) + 1) end
  return opts
end

function M.check(fname, opts, valid, level)
  level = (level or 2) + 1
  check_valid(valid, tostring(fname), level)
  if opts == nil then return {} end
  if type(opts) ~= "table" then
    -- a value where torch takes its next positional argument (F.cross_entropy(x, y, w), F.pad(x, p, "reflect")): the
    -- names the table takes, so the port reads {weight = w}, {mode = "reflect"}
    local names = {}
    for k, v in next, valid do names[#names + 1] = type(k) == "string" and k or v end
    table.sort(names)
    error(("%s: options must be a table {name = value} (torch's later positional arguments go in it by name: %s), "
      .. "got %s"):format(fname, table.concat(names, ", "), M.got(opts)), level)
  end
  -- a kwargs handler keeps its fields out of pairs' sight: as options it would pass unread
  local kw = getmetatable(opts) ~= nil and package.loaded["fp8.kwargs"]
  if kw and kw.is_handler(opts) then
    error(("%s: options must be a plain table {key=value, ...}, got a kwargs handler (%s)"):format(fname,
      opts.handler_type), level)
  end
  local proxy = M.proxy_text(opts)
  if proxy then error(fname .. ": " .. proxy, level) end
  -- raw (next): the names as stored; a __pairs that answered a valid name for ever looped here (sweep 115)
  for k in next, opts do
    if not has(valid, k) then error(fname .. ": " .. M.unknown_text(k, valid), level) end
  end
  return opts
end

-- x rounded to fp32 (what a C float holds: torch's float arguments, the loss scale), and whether v can be an fp32
-- loss scale: > 0 and at most fp32's max (torch: "value cannot be converted to type float without overflow"), not 0
-- once rounded, and its reciprocal, which unscaling multiplies the gradients by, finite in fp32 (from about 2.9e-39).
-- fp8.amp.GradScaler and GradScalerKwargs share it, so settings.grad_scaler can be handed to the scaler.
M.F32_MAX = 3.4028234663852886e38
function M.f32(x) return (string.unpack("f", string.pack("f", x))) end
function M.fp32_scale_ok(v)
  return v > 0 and v <= M.F32_MAX and M.f32(v) > 0 and M.f32(1 / M.f32(v)) <= M.F32_MAX
end

-- Positions (0-based indices) are fp32 tensors, the index dtype, whose whole numbers are exact up to 2^24: an op
-- that builds positions up to `largest` refuses past that, as argmax and sort do, where it read or wrote a rounded
-- neighbour without a word. what: what the positions count ("positions along dim 2").
M.MAX_POSITION = 1 << 24
function M.exact_positions(fname, largest, what, level)
  if largest > M.MAX_POSITION then
    error(("%s: %s would reach %.0f: indices above 2^24 are not exact in fp32, the index dtype"):format(fname, what,
      largest), level or 0)
  end
end

-- called from a user's code, these name themselves in their errors (fp8.opts.internal_functions; stop 101)
M.internal_functions(M, "fp8.opts", { "check", "exact_positions", "fp32_scale_ok" })
return M
