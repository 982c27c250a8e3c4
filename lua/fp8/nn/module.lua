-- module.lua — fp8.nn.Module: the class system every layer uses (Class(...) builds, instance(...)
-- runs forward), ordered registration of parameters, buffers and submodules, train/eval, state_dict,
-- PyTorch-style printing, and error context ("in layer 3 (Linear) forward: ...").
local fp8 = require "fp8.core"   -- the C half only, so loading never recurses into fp8/init.lua
local O = require "fp8.opts"

local Module = {}
Module.__name = "Module"

local function is_tensor(v) return fp8.is_tensor(v) end

local function shape_str(t)
  local s = t:shape()
  for i = 1, #s do s[i] = tostring(s[i]) end
  return "[" .. table.concat(s, ", ") .. "]"
end
Module._shape_str = shape_str

local function is_module(v)
  if type(v) ~= "table" then return false end
  local mt = getmetatable(v)
  return type(mt) == "table" and rawget(mt, "__is_module_class") == true
end
Module.is_module = is_module

-- Instance lookup: registered parameters, buffers and submodules first (they live in ordered
-- stores, not in the instance table, so that assignment can be intercepted), then the class.
local function make_index(cls)
  return function(self, k)
    local store = rawget(self, "_parameters")
    if store then
      local v = store.map[k]; if v ~= nil then return v end
      v = rawget(self, "_buffers").map[k]; if v ~= nil then return v end
      v = rawget(self, "_modules").map[k]; if v ~= nil then return v end
    end
    if cls.__getitem and type(k) == "number" then return cls.__getitem(self, Module._position(k, 2)) end   -- s[i]
    return cls[k]
  end
end

-- An ordered store: names in registration order (deterministic named_parameters), map name → value.
local function new_store() return { names = {}, map = {} } end
-- generation: bumped by every change of any module's parameters, buffers or children (store_set is the one place
-- they change), so a walk of a model's tree can be kept until the next change (Module.generation()). The counter
-- lives in the registry, one for every copy of this file: a harness that unloads modules between files (busted's
-- insulation) leaves objects of an earlier copy beside a later one's, and the Accelerator's cache missed the
-- changes the other copy made.
local REG = debug.getregistry()
local GEN = REG.fp8lab_module_generation or { 0 }
REG.fp8lab_module_generation = GEN
local function store_set(st, name, v)
  GEN[1] = GEN[1] + 1
  if st.map[name] == nil and v ~= nil then st.names[#st.names + 1] = name end
  if v == nil and st.map[name] ~= nil then
    for i, n in ipairs(st.names) do if n == name then table.remove(st.names, i) break end end
  end
  st.map[name] = v
end
function Module.generation() return GEN[1] end

-- Assignment: a Module becomes a submodule, a tensor that requires grad a parameter; assigning to an
-- already registered name replaces it in place (keeping its position); anything else is a plain field.
local new_name   -- (below: a name newly registered by assignment is checked as register_* and add_module check it)
local function newindex(self, k, v)
  local setitem = type(k) == "number" and getmetatable(self).__setitem   -- a container's s[i] = m
  if setitem then return setitem(self, Module._position(k, 2), v) end
  local params, bufs, mods = rawget(self, "_parameters"), rawget(self, "_buffers"), rawget(self, "_modules")
  if params and type(k) == "string" then
    if is_module(v) then
      if mods.map[k] == nil then new_name(self, k, "submodule") end
      store_set(params, k, nil); store_set(bufs, k, nil)
      rawset(v, "_name", k)
      return store_set(mods, k, v)
    elseif params.map[k] ~= nil then
      if v ~= nil and not is_tensor(v) then
        error(("cannot assign %s to parameter '%s' (expected a tensor or nil)"):format(type(v), k), 2)
      end
      -- a tensor an op made never holds a gradient of its own: no optimizer could train it (torch refuses all but
      -- an nn.Parameter); a leaf that takes no gradient stays a frozen parameter
      if v ~= nil and not v:is_leaf() then
        error(("cannot assign a tensor made by %s to parameter '%s': it would never get a gradient (assign a leaf: "
          .. "x:detach():requires_grad(true))"):format(v:grad_fn(), k), 2)
      end
      return store_set(params, k, v)
    elseif bufs.map[k] ~= nil then
      if v ~= nil and not is_tensor(v) then
        error(("cannot assign %s to buffer '%s' (expected a tensor or nil)"):format(type(v), k), 2)
      end
      return store_set(bufs, k, v)
    elseif mods.map[k] ~= nil then
      if v ~= nil then error(("cannot assign %s to submodule '%s' (expected a Module or nil)"):format(type(v), k), 2) end
      return store_set(mods, k, nil)
    elseif is_tensor(v) and v.requires_grad and v:requires_grad() and v:is_leaf() then
      new_name(self, k, "parameter")
      return store_set(params, k, v)
    end
  end
  rawset(self, k, v)
end

-- A class's __init as written (its parameters, for _check_arity), by the guard that wraps it
local INIT_OF = setmetatable({}, { __mode = "k" })

-- Whether self is an instance of cls (or of a subclass) that Module._setup prepared: read raw, so a table whose
-- __index answers every key is not one
local function instance_of(self, cls)
  if type(self) ~= "table" or type(rawget(self, "_parameters")) ~= "table" then return false end
  local c = getmetatable(self)
  for _ = 1, 64 do
    if c == cls then return true end
    if type(c) ~= "table" then return false end
    c = rawget(c, "super")
  end
  return false
end

-- A class's __init, guarded: reached directly (fp8.nn.Transformer.__init(V), the class's body) with a self that is
-- not an instance being built, it failed inside at its first use of self ('attempt to call a number value (method
-- 'parameters')' at encoder_decoder.lua, stop 103's sweep; 'attempt to index a nil value (local 'self')' in 100 of the
-- classes, stop 104): refused by the class's name. The guard tail-calls the body, so the body's error levels hold.
-- The name a user calls to build one: fp8.nn.<name> for the library's classes, the bare name for a user's own.
local function builder_of(name, cls)
  local nn = package.loaded["fp8.nn"]
  local ok, c = pcall(function() return type(nn) == "table" and nn[name] or nil end)
  return (ok and c == cls) and ("fp8.nn." .. name) or name
end

local function guard_init(name, cls, f)
  local w = function(self, ...)
    if not instance_of(self, cls) then
      error(("%s.__init: self must be a %s being built (%s(...) builds one and runs __init), got %s"):format(
        name, name, builder_of(name, cls), O.got(self)), 2)
    end
    return f(self, ...)
  end
  INIT_OF[w] = f
  return w
end

-- Module.class(name [, parent]) → a new class. Calling the class builds an instance and runs
-- its __init(self, ...). Metamethods are copied, since Lua does not inherit them through __index. The __init a class
-- defines is guarded (guard_init) as it is stored.
function Module.class(name, parent)
  if type(name) ~= "string" or name == "" then
    error(("class: name must be a non-empty string, got %s"):format(name == "" and "\"\"" or type(name)), 2)
  end
  parent = parent or Module
  if type(parent) ~= "table" or not rawget(parent, "__is_module_class") and parent ~= Module then
    error(("class: parent must be a Module class, got %s"):format(type(parent)), 2)
  end
  local cls = {}
  cls.__name = name
  cls.__is_module_class = true
  cls.__index = make_index(cls)
  cls.__newindex = newindex
  cls.__call = function(self, ...) return self:_call(...) end
  cls.__tostring = function(self) return self:_repr() end
  cls.__len = rawget(parent, "__len")
  cls.__pairs = rawget(parent, "__pairs")
  cls.super = parent
  setmetatable(cls, {
    __index = parent,
    __newindex = function(c, k, v)
      if k == "__init" and type(v) == "function" and not INIT_OF[v] then v = guard_init(name, c, v) end
      rawset(c, k, v)
    end,
    __call = function(c, ...)
      Module._check_arity(name, c.__init, select("#", ...))
      local self = setmetatable({}, c)
      Module._setup(self)
      self:__init(...)
      return self
    end,
    __tostring = function() return "fp8.nn." .. name end,
  })
  return cls
end

-- Whether m's forward is the one of its ancestor class named `name` (not replaced by a subclass or on the
-- instance): what lets a container run a fused path in its place. Compared through m's own class chain, so a
-- second copy of the class module (a test harness reloading modules) does not hide it.
-- A constructor's parameter of the given sizes (fp32), refused by the class's name before anything is allocated when
-- it is past what one tensor may hold (core._max_bytes): the initialiser refused it, naming 'uniform' or 'normal' at
-- the layer's file's line. what: the sizes' names ("out_features * in_features"); level as the constructor's error().
function Module._check_size(name, level, what, ...)
  local bytes, sizes = 4.0, { ... }   -- a float product: never overflows, exact at the limit's scale
  for i = 1, #sizes do bytes = bytes * sizes[i] end
  local limit = require("fp8.core")._max_bytes
  if bytes > limit then
    error(("%s: %s = %s makes an fp32 parameter of %.4g bytes, more than one tensor may hold (%d bytes)"):format(name,
      what, table.concat(sizes, " * "), bytes, limit), level + 1)
  end
end

-- Whether m has hooks (forward or backward, register_forward_hook and the like): a container then calls it, never a
-- fused path that would skip them.
local HOOK_LISTS = { "_forward_pre_hooks", "_forward_hooks", "_backward_pre_hooks", "_backward_hooks" }
local function has_hooks(m)
  for _, f in ipairs(HOOK_LISTS) do
    local l = rawget(m, f)
    if l ~= nil and #l > 0 then return true end
  end
  return false
end

function Module.runs_forward_of(m, name)
  if type(m) ~= "table" or rawget(m, "forward") ~= nil or has_hooks(m) then return false end
  local c = getmetatable(m)
  while type(c) == "table" and rawget(c, "__name") ~= name do c = rawget(c, "super") end
  return type(c) == "table" and m.forward == rawget(c, "forward")
end

function Module._setup(self)
  rawset(self, "_parameters", new_store())
  rawset(self, "_buffers", new_store())
  rawset(self, "_modules", new_store())
  rawset(self, "_non_persistent", {})   -- buffer names state_dict leaves out (register_buffer's persistent=false)
  rawset(self, "training", true)
end

Module.__init = guard_init("Module", Module, function(self) end)   -- (guarded as every class's, the body empty)

-- A constructor given more arguments than its __init takes (ReLU(true), Linear(3, 4, true, {x=1})) would drop
-- them silently: refused, naming the count. A vararg __init (Sequential) checks its own.
function Module._check_arity(name, init, given)
  local info = debug.getinfo(INIT_OF[init] or init, "u")
  if not info.isvararg and given > info.nparams - 1 then
    error(("%s: takes at most %d argument%s, got %d"):format(name, info.nparams - 1, info.nparams == 2 and "" or "s",
      given), 3)
  end
end

function Module:forward(...)   -- (any arguments: the missing forward is what to say, not their count)
  error(("%s has no forward() (subclasses define it)"):format(self:type_name()), 2)
end

function Module:type_name() return getmetatable(self).__name end

-- How the module is named in its parent's error messages: "layer 3" for container positions,
-- the attribute name otherwise ("attn", "blocks"), nothing for a top-level module.
local function context_name(self)
  local n = rawget(self, "_name")
  if n == nil then return self:type_name() end
  if tostring(n):match("^%d+$") then return ("in layer %s (%s)"):format(n, self:type_name()) end
  return ("in %s (%s)"):format(n, self:type_name())
end

-- A forward's own refusal of its input: "<Class>:forward: msg", so a direct m:forward(x) names the function (a bare
-- 'expected a tensor input, got number' named neither it nor the argument: sweep 113's --messages); called as m(x),
-- _call_with puts its context in the prefix's place ("Linear forward: ...", "in layer 2 (Linear) forward: ...").
-- method: the method refusing, where it is not forward (FP8Linear's forward_gelu and forward_residual check their
-- input as forward does: until stop 100 their refusals said "FP8Linear:forward: "); _call_with keeps that prefix.
function Module._forward_error(self, msg, method)
  local ok, name = pcall(Module.type_name, self)
  error(("%s:%s: %s"):format(ok and type(name) == "string" and name or "Module", method or "forward", msg), 0)
end

-- The input check of a layer over the last dim (Linear, FP8Linear, LayerNorm, RMSNorm): x a tensor [..., n], else
-- Module._forward_error's message for method (forward by default).
function Module._check_features(self, x, n, method)
  if not fp8.is_tensor(x) then
    Module._forward_error(self, ("expected a tensor input, got %s"):format(type(x)), method)
  end
  if x:dim() < 1 or x:size(-1) ~= n then
    Module._forward_error(self, ("expected input [..., %d], got %s"):format(n, Module._shape_str(x)), method)
  end
end

-- Runs forward; an error gets "in <name> (<Class>) forward: " in front, so nested containers
-- build a path down to the failing layer.
-- Module._call_hook, when set (fp8.profiler with_modules), runs in place of forward as hook(self, ...)
-- and calls self.forward itself, inside a range named after the module.
local function check_forward_arity(self, level, ...)
  local a = O.arity(self.forward)   -- forward(x) given (x, 5) would drop the 5 silently
  if a and select("#", ...) + 1 > a.n then
    local more = select("#", ...) + 1 - a.n
    error(O.more_args_message(context_name(self) .. " forward", a.takes, more), level > 0 and level + 1 or 0)
  end
end

local call_hooked   -- below, with the hooks' registration

function Module:_call(...)
  if has_hooks(self) then return call_hooked(self, ...) end
  check_forward_arity(self, 2, ...)
  return self:_call_with(Module._call_hook or self.forward, ...)
end

-- fn(self, ...) with forward's error context: what _call does after its argument count, for a container that runs
-- a child's fused path in place of its forward (Sequential, TransformerBlock).
function Module:_call_with(fn, ...)
  local res = table.pack(pcall(fn, self, ...))
  if res[1] then return table.unpack(res, 2, res.n) end
  local err = res[2]
  if type(err) == "string" and not err:match("^interrupted") then
    -- the module's own refusal (Module._forward_error) gives its "<Class>:forward: " for this context, and so does
    -- a fused forward's (FP8Linear's "<Class>:forward_gelu: ", run by a Sequential in forward's place)
    local own = self:type_name() .. ":"
    if err:sub(1, #own) == own then
      local m = err:match("^forward[%w_]*: ", #own + 1)
      if m then err = err:sub(#own + #m + 1) end
    end
    -- a top-level container passes on its child's "in layer ..." path as it is
    if rawget(self, "_name") ~= nil or not err:match("^in ") then
      error(context_name(self) .. " forward: " .. err, 0)
    end
  end
  error(err, 0)
end

-- ---- forward hooks ------------------------------------------------------------------------------
-- torch's register_forward_pre_hook / register_forward_hook. A module's hooks are lists on the instance
-- (_forward_pre_hooks, _forward_hooks: entries {fn=, always=}, in calling order); each registration returns a
-- RemovableHandle whose remove() takes its entry out (handle.id numbers registrations; a `local h <close> = ...`
-- removes it at the end of the block, as torch's handle used as a context manager). A module with hooks is always
-- called through them: the containers' fused paths (a GELU inside the next FP8Linear's cast, a LayerNorm inside
-- the projection's) are not taken for it (Module.runs_forward_of). Every conversion in fp8.convert (Linear ↔
-- FP8Linear, LayerNorm ↔ FP8LayerNorm) gives the new layer the old one's hook lists (the same lists: the handles
-- still remove them). The backward hooks follow below, built on tensor hooks.

local Handle = { __name = "RemovableHandle" }
Handle.__index = Handle
local next_hook_id = 0

-- handle:remove(): the hook is not called again (a second remove does nothing).
function Handle:remove(...)
  if getmetatable(self) ~= Handle then
    error(("RemovableHandle:remove: called without its handle (got %s): write h:remove(), with a colon"):format(
      O.got(self)), 2)
  end
  O.no_more("RemovableHandle:remove", "no arguments", ...)
  local list, entry = rawget(self, "_list"), rawget(self, "_entry")
  if list == nil then return end
  for i = #list, 1, -1 do
    if list[i] == entry then table.remove(list, i) end
  end
  rawset(self, "_list", nil)
end
Handle.__close = function(h) h:remove() end
Handle.__tostring = function(h) return ("RemovableHandle(id=%d)"):format(rawget(h, "id")) end
Module.RemovableHandle = Handle

local function callable(v)
  if type(v) == "function" then return true end
  local mt = getmetatable(v)
  return type(mt) == "table" and type(rawget(mt, "__call")) == "function"
end

local function register_hook(self, field, fname, hook, opts, valid)
  if not callable(hook) then
    error(("%s: expected a function (hook), got %s"):format(fname, O.got(hook)), 3)
  end
  opts = O.check(fname, opts, valid, 3)
  if opts.with_kwargs ~= nil and opts.with_kwargs ~= false then
    error(("%s: with_kwargs=true is not supported (a Lua forward takes positional arguments only: the hook gets "
      .. "them all in args)"):format(fname), 3)
  end
  for _, k in ipairs { "prepend", "always_call", "with_kwargs" } do
    if opts[k] ~= nil and type(opts[k]) ~= "boolean" then
      error(("%s: %s must be a boolean, got %s"):format(fname, k, O.got(opts[k])), 3)
    end
  end
  local list = rawget(self, field)
  if list == nil then list = {}; rawset(self, field, list) end
  local entry = { fn = hook, always = opts.always_call == true }
  if opts.prepend then table.insert(list, 1, entry) else list[#list + 1] = entry end
  next_hook_id = next_hook_id + 1
  return setmetatable({ id = next_hook_id, _list = list, _entry = entry }, Handle)
end

-- m:register_forward_pre_hook(hook [, {prepend=false}]) -> handle. hook(m, args) runs before forward, args the
-- call's arguments as a list (args.n of them); it returns nothing to keep them, a table of the arguments to use
-- instead, or one other value to use as the only argument (torch's rule: a single value is wrapped).
function Module:register_forward_pre_hook(hook, opts)
  return register_hook(self, "_forward_pre_hooks", "register_forward_pre_hook", hook, opts,
    { "prepend", "with_kwargs" })
end

-- m:register_forward_hook(hook [, {prepend=false, always_call=false}]) -> handle. hook(m, args, ...) runs after
-- forward with its arguments (a list) and its results; it returns nothing to keep them or the results to use
-- instead. always_call: it also runs when forward (or a pre-hook) raises, with no results, before the error goes on.
function Module:register_forward_hook(hook, opts)
  return register_hook(self, "_forward_hooks", "register_forward_hook", hook, opts,
    { "prepend", "always_call", "with_kwargs" })
end

-- m:register_full_backward_pre_hook(hook [, {prepend=false}]) -> handle. hook(m, grad_output) runs when the
-- gradient of m's output is known, before m's backward: grad_output one entry per result (the gradient at the one
-- that requires grad, nil elsewhere); it returns nothing or a table like it, whose entry there is used instead.
function Module:register_full_backward_pre_hook(hook, opts)
  return register_hook(self, "_backward_pre_hooks", "register_full_backward_pre_hook", hook, opts, { "prepend" })
end

-- m:register_full_backward_hook(hook [, {prepend=false}]) -> handle. hook(m, grad_input, grad_output) runs when
-- the gradient of m's input is known: grad_input lists one entry per forward argument (nil where it takes no
-- gradient), grad_output the output's; it returns nothing or a table like grad_input, whose entry for the input
-- that takes a gradient is used instead.
function Module:register_full_backward_hook(hook, opts)
  return register_hook(self, "_backward_hooks", "register_full_backward_hook", hook, opts, { "prepend" })
end

-- fp8.convert_model: the replacement runs the hooks of the module it replaces.
function Module._carry_hooks(from, to)
  for _, f in ipairs(HOOK_LISTS) do
    local l = rawget(from, f)
    if l ~= nil then rawset(to, f, l) end
  end
end

local function snapshot(list)   -- a hook that removes itself (or another) does not change this call's order
  local c = {}
  for i = 1, #list do c[i] = list[i] end
  return c
end

local function hook_failed(self, what, err)
  if type(err) == "string" and not err:match("^interrupted") then
    error(("%s %s: %s"):format(context_name(self), what, err), 0)
  end
  error(err, 0)
end

-- The backward hooks of one call: torch's BackwardHook. The forward's arguments that require grad go to forward
-- through one identity fp8.autograd.Function (BackwardHookFunction, as torch's), whose backward gets all their
-- gradients at once: the full backward hooks run there, with grad_input one entry per forward argument (nil where it
-- takes no gradient or none came) and the grad_output the results' hooks kept, and what they return is what the
-- arguments get. The results that require grad come back through another one, whose backward gets all their
-- gradients at once: the pre-hooks run there, and may replace them (other results, tensors without grad or not
-- tensors, pass as they are). Without an argument that requires grad, the full hooks run there too, with grad_input
-- all nil.
local function bw_fail(self, what) error(("%s backward hook: %s"):format(context_name(self), what), 0) end

-- a hook's replacement table r for the gradients at positions pos of cur: tensors, or nil (none: the argument gets
-- no gradient from this call, as torch's None). A pre-hook's table has a tensor wherever a gradient came (strict).
local function replacement(self, r, pos, cur, what, like, strict)
  local missing = {}
  if type(r) == "table" and strict then
    for _, j in ipairs(pos) do
      if cur[j] ~= nil and not is_tensor(r[j]) then missing[#missing + 1] = j end
    end
  end
  if type(r) ~= "table" or #missing > 0 then
    bw_fail(self, ("%sreturned %s; it returns nothing or a table like %s%s"):format(what,
      type(r) == "table" and "a table" or O.got(r), like,
      #missing > 0 and (" (the gradient%s at %s)"):format(#missing > 1 and "s" or "", table.concat(missing, ", "))
      or ""))
  end
  local out = { n = cur.n }
  for _, j in ipairs(pos) do
    local g = r[j]
    if g ~= nil and not is_tensor(g) then
      bw_fail(self, ("%sreturned %s as %s[%d]; it is a tensor (the gradient to use) or nil"):format(what, O.got(g),
        like, j))
    end
    out[j] = g
  end
  return out
end

local function bw_run_full(self, bw, gi)
  for _, e in ipairs(snapshot(rawget(self, "_backward_hooks") or {})) do
    local ok, r = pcall(e.fn, self, gi, bw.grad_output or { n = bw.nres or 0 })
    if not ok then hook_failed(self, "backward hook", r) end   -- named as the forward hooks' errors are
    if r ~= nil then gi = replacement(self, r, bw.idx, gi, "", "grad_input") end
  end
  return gi
end

local hook_fns
local function hook_functions()
  if hook_fns then return hook_fns end
  local Function = require("fp8.autograd_function").Function
  local function identity(ctx, bw, ...)
    ctx.bw = bw
    ctx:set_materialize_grads(false)
    return ...
  end
  hook_fns = {
    input = Function { name = "BackwardHookFunction", forward = identity, backward = function(ctx, ...)
      local bw = ctx.bw
      local gi = { n = bw.nargs }
      for k, i in ipairs(bw.idx) do gi[i] = select(k, ...) end
      gi = bw_run_full(bw.module, bw, gi)
      local out = {}
      for k, i in ipairs(bw.idx) do out[k] = gi[i] end
      return nil, table.unpack(out, 1, #bw.idx)
    end },
    output = Function { name = "BackwardHookFunction", forward = identity, backward = function(ctx, ...)
      local bw = ctx.bw
      local self = bw.module
      local go = { n = bw.nres }
      for k, j in ipairs(bw.pos) do go[j] = select(k, ...) end
      for _, e in ipairs(snapshot(rawget(self, "_backward_pre_hooks") or {})) do
        local ok, r = pcall(e.fn, self, go)
        if not ok then hook_failed(self, "backward pre-hook", r) end
        if r ~= nil then go = replacement(self, r, bw.pos, go, "pre-hook ", "grad_output", true) end
      end
      bw.grad_output = go
      if #bw.idx == 0 and #(rawget(self, "_backward_hooks") or {}) > 0 then bw_run_full(self, bw, { n = bw.nargs }) end
      local out = {}
      for k, j in ipairs(bw.pos) do out[k] = go[j] end
      return nil, table.unpack(out, 1, #bw.pos)
    end },
  }
  return hook_fns
end

local function bw_setup_input(self, args)
  local bw = { module = self, nargs = args.n, idx = {} }
  local ins = {}
  for i = 1, args.n do
    local a = args[i]
    if is_tensor(a) and a:requires_grad() then
      bw.idx[#bw.idx + 1] = i
      ins[#ins + 1] = a
    end
  end
  if #ins > 0 then
    local outs = table.pack(hook_functions().input.apply(bw, table.unpack(ins)))
    for k, i in ipairs(bw.idx) do args[i] = outs[k] end
  end
  return bw
end

local function bw_setup_output(self, bw, res)
  local pos, outs = {}, {}
  for i = 1, res.n do
    if is_tensor(res[i]) and res[i]:requires_grad() then
      pos[#pos + 1] = i
      outs[#outs + 1] = res[i]
    end
  end
  if #pos == 0 then return res end   -- no gradient will flow into this call: no backward hook runs (torch's neither)
  bw.nres, bw.pos = res.n, pos
  local linked = table.pack(hook_functions().output.apply(bw, table.unpack(outs)))
  for k, j in ipairs(pos) do res[j] = linked[k] end   -- (res is this call's own table: run_hooked packed it)
  return res
end

local function run_hooked(self, state, ...)
  local args = table.pack(...)
  for _, e in ipairs(snapshot(rawget(self, "_forward_pre_hooks") or {})) do
    local ok, r = pcall(e.fn, self, args)
    if not ok then hook_failed(self, "forward pre-hook", r) end
    if r ~= nil then
      if type(r) == "table" and not is_module(r) then
        local okp, packed = pcall(function() return table.pack(table.unpack(r, 1, r.n or #r)) end)
        if not okp then
          hook_failed(self, "forward pre-hook", "its table of arguments: " .. require("fp8.errfmt").unplaced(packed))
        end
        args = packed
      else
        args = table.pack(r)
      end
    end
  end
  state.args = args
  check_forward_arity(self, 0, table.unpack(args, 1, args.n))
  local bl, bpl = rawget(self, "_backward_hooks"), rawget(self, "_backward_pre_hooks")
  local bw = ((bl and #bl > 0) or (bpl and #bpl > 0)) and fp8.is_grad_enabled() and bw_setup_input(self, args) or nil
  local res = table.pack(self:_call_with(Module._call_hook or self.forward, table.unpack(args, 1, args.n)))
  for _, e in ipairs(snapshot(rawget(self, "_forward_hooks") or {})) do
    state.called[e] = true
    local r = table.pack(pcall(e.fn, self, args, table.unpack(res, 1, res.n)))
    if not r[1] then hook_failed(self, "forward hook", r[2]) end
    if r.n > 1 and r[2] ~= nil then res = table.pack(table.unpack(r, 2, r.n)) end
  end
  if bw then res = bw_setup_output(self, bw, res) end
  return res
end

call_hooked = function(self, ...)
  local state = { called = {} }
  local out = table.pack(pcall(run_hooked, self, state, ...))
  if out[1] then return table.unpack(out[2], 1, out[2].n) end
  -- always_call hooks not yet run see the error's call with no results (their own errors give way to it)
  for _, e in ipairs(snapshot(rawget(self, "_forward_hooks") or {})) do
    if e.always and not state.called[e] then pcall(e.fn, self, state.args or table.pack(...)) end
  end
  error(out[2], 0)
end

-- ---- registration ---------------------------------------------------------------------------

-- A container's position k (s[k], s[k] = m) as an integer: 2.0 (what s[#s / 2] gives) is 2; any other number
-- was looked up as a key that is never there (nil) or stored as a field the container never reads.
function Module._position(k, level)
  local i = math.tointeger(k)
  if i == nil then error(("index must be an integer, got %s"):format(O.got(k)), level + 1) end
  return i
end

-- A name that assignment (m.name = module or parameter) registers: as register_* and add_module take it, not empty,
-- without '.', and not the name of a method or class field (d["keys"] = m hid ModuleDict's keys method; torch's
-- add_module refuses it: "attribute 'keys' already exists").
new_name = function(self, k, what)
  if k == "" or k:find(".", 1, true) then
    error(("cannot register a %s under the name %q: a name is non-empty and without '.'"):format(what, k), 3)
  end
  if getmetatable(self)[k] ~= nil then
    error(("cannot register a %s under the name '%s': it is already an attribute of %s (a method or class field)")
      :format(what, k, self:type_name()), 3)
  end
end

-- a refused name as the message shows it: a string as it is, anything else as opts.got shows it ("a table": tostring
-- ran a table's own __tostring, and one answering no string made the refusal Lua's raw "'__tostring' must return a
-- string", the seed-119 sweep's value 91)
local function name_shown(name) return type(name) == "string" and name or O.got(name) end

local function check_name(self, name, what)
  if type(name) ~= "string" or name == "" or name:find(".", 1, true) then
    error(("register_%s: name must be a non-empty string without '.', got %s"):format(what, name_shown(name)), 3)
  end
end

-- A name registered as one kind (parameter, buffer, submodule) is refused as another, as torch's "attribute 'x'
-- already exists": both would be kept, the lookup would find one and state_dict would save both.
-- So is a plain field (it would hide the registered value: the instance's own key is found before the lookup runs)
-- and a method (the value would hide it: m:train() would call a tensor), as torch's check of hasattr.
local KINDS = { { "_parameters", "parameter" }, { "_buffers", "buffer" }, { "_modules", "submodule" } }
local function check_free(self, fname, name, what)
  local registered = false
  for _, k in ipairs(KINDS) do
    if rawget(self, k[1]).map[name] ~= nil then
      if k[2] ~= what then
        error(("%s('%s'): the name is already a %s of this module (assign nil to it first)"):format(fname, name,
          k[2]), 3)
      end
      registered = true
    end
  end
  if registered then return end
  if rawget(self, name) ~= nil then
    error(("%s('%s'): the name is already a plain field of this module (assign nil to it first)"):format(fname,
      name), 3)
  end
  if getmetatable(self)[name] ~= nil then
    error(("%s('%s'): the name is already an attribute of %s (a method or class field)"):format(fname, name,
      self:type_name()), 3)
  end
end

-- register_parameter(name, tensor|nil): the tensor becomes a leaf that requires grad.
function Module:register_parameter(name, t)
  check_name(self, name, "parameter")
  if t ~= nil then
    if not is_tensor(t) then error(("register_parameter('%s'): expected a tensor, got %s"):format(name, type(t)), 2) end
    if not t:is_leaf() then   -- as assignment refuses it: its .grad would stay nil, no optimizer could train it
      error(("register_parameter('%s'): the tensor was made by %s: it would never get a gradient (register a leaf: "
        .. "x:detach():requires_grad(true))"):format(name, t:grad_fn()), 2)
    end
    check_free(self, "register_parameter", name, "parameter")
    if t.requires_grad and not t:requires_grad() then t:requires_grad(true) end
  end
  store_set(rawget(self, "_parameters"), name, t)
  return t
end

-- A module's set of non-persistent buffer names (made on first use: a module built by another copy of this file,
-- a test harness reloading modules, has none yet).
local function non_persistent(m)
  local np = rawget(m, "_non_persistent")
  if np == nil then np = {}; rawset(m, "_non_persistent", np) end
  return np
end

-- register_buffer(name, tensor|nil [, persistent=true]): state that is not trained; saved in state_dict unless
-- persistent is false (torch's: a causal mask, a table recomputed at construction).
function Module:register_buffer(name, t, persistent)
  check_name(self, name, "buffer")
  if t ~= nil and not is_tensor(t) then
    error(("register_buffer('%s'): expected a tensor, got %s"):format(name, type(t)), 2)
  end
  if persistent == nil then persistent = true end
  if type(persistent) ~= "boolean" then
    error(("register_buffer('%s'): persistent must be a boolean, got %s"):format(name, O.got(persistent)), 2)
  end
  if t ~= nil then check_free(self, "register_buffer", name, "buffer") end
  store_set(rawget(self, "_buffers"), name, t)
  non_persistent(self)[name] = (t ~= nil and not persistent) or nil
  return t
end

-- add_module(name, m), and register_module: torch's other name for it.
local function add_module(self, fname, name, m)
  if type(name) ~= "string" or name == "" or name:find(".", 1, true) then
    error(("%s: name must be a non-empty string without '.', got %s"):format(fname, name_shown(name)), 2)
  end
  if m ~= nil and not is_module(m) then error(("%s('%s'): expected a Module, got %s"):format(fname, name, type(m)), 2) end
  if m ~= nil then check_free(self, fname, name, "submodule") end
  if m then rawset(m, "_name", name) end
  store_set(rawget(self, "_modules"), name, m)
  return m
end
-- (tail calls: the errors' levels reach the caller)
function Module:add_module(name, m) return add_module(self, "add_module", name, m) end
function Module:register_module(name, m) return add_module(self, "register_module", name, m) end

-- ---- traversal ------------------------------------------------------------------------------

-- A Module assigned over a plain field (m.proj = false, then m.proj = nn.Linear(...)) lands in the instance table, as
-- __newindex runs only for a key that is absent; torch's __setattr__ registers it. Here it is registered (in name
-- order, after the others) when the module's children are next listed, which every walk of the tree does.
-- A plain Lua table of Modules in a field (self.layers = {nn.Linear(...), ...}) registers nothing, as a Python list
-- in torch: its layers are not the model's parameters, state_dict, :to() or FP8 conversion. A notice names it once
-- (the first process only, under launch); fp8.nn.ModuleList / ModuleDict register them.
local told = setmetatable({}, { __mode = "k" })
local first_process = nil
local function holds_modules(t)
  local n = 0
  for _, v in next, t do
    if is_module(v) then return true end
    n = n + 1
    if n >= 8 then return false end   -- a look at the first few entries: a list of layers shows at once
  end
  return false
end
local function tell_plain_table(self, k)
  local seen = told[self] or {}
  told[self] = seen
  if seen[k] then return end
  seen[k] = true
  if first_process == nil then   -- the launcher's rank, as the distributed module reads it (0 without one)
    local ok, d = pcall(require, "fp8._dist")
    first_process = not (ok and type(d) == "table" and d.info().rank ~= 0)
  end
  if first_process then
    io.stderr:write(("fp8lab: notice: %s.%s is a plain Lua table holding Modules: they are not registered (not in "
      .. "parameters(), state_dict(), :to() or the FP8 conversion); use fp8.nn.ModuleList{...} or "
      .. "fp8.nn.ModuleDict{...}\n"):format(getmetatable(self).__name or "Module", k))
  end
end

local function adopt_plain_modules(self, mods)
  local found
  for k, v in next, self do
    if type(v) == "table" and type(k) == "string" and k:byte(1) ~= 95 and mods.map[k] == nil then
      if is_module(v) then
        found = found or {}
        found[#found + 1] = k
      elseif getmetatable(v) == nil and holds_modules(v) then
        tell_plain_table(self, k)
      end
    end
  end
  if not found then return end
  table.sort(found)
  for _, k in ipairs(found) do
    local m = rawget(self, k)
    rawset(self, k, nil)
    rawset(m, "_name", k)
    store_set(mods, k, m)
  end
end

-- Every {name, child} in registration order, a module registered under two names under both (model conversion
-- replaces each, load_state_dict takes each name, the printed tree shows each, as torch's).
function Module:_all_children()
  local mods, out = rawget(self, "_modules"), {}
  adopt_plain_modules(self, mods)
  for _, n in ipairs(mods.names) do out[#out + 1] = { n, mods.map[n] } end
  return out
end

-- named_children() and children() → each direct submodule once, under its first name (a module registered under
-- two names is one child, as torch's).
function Module:named_children()
  local out, seen = {}, {}
  for _, nc in ipairs(self:_all_children()) do
    if not seen[nc[2]] then seen[nc[2]] = true; out[#out + 1] = nc end
  end
  return out
end
function Module:children()
  local out = {}
  for i, nc in ipairs(self:named_children()) do out[i] = nc[2] end
  return out
end

-- m and the modules under it into out as {name, module}, depth first, each once (seen).
local function collect_modules(m, prefix, seen, out)
  if seen[m] then return out end
  seen[m] = true
  out[#out + 1] = { prefix, m }
  for _, nc in ipairs(m:named_children()) do
    collect_modules(nc[2], prefix == "" and nc[1] or prefix .. "." .. nc[1], seen, out)
  end
  return out
end

-- named_modules([prefix]) → list of {name, module}, self first (name prefix, "" by default), depth first, each
-- module once; the names below start with prefix and a dot.
function Module:named_modules(prefix)
  prefix = prefix or ""
  if type(prefix) ~= "string" then
    error(("named_modules: expected ([prefix string]), got %s"):format(type(prefix)), 2)
  end
  return collect_modules(self, prefix, {}, {})
end

function Module:modules()
  local out = {}
  for i, nm in ipairs(self:named_modules()) do out[i] = nm[2] end
  return out
end

local function named_tensors(self, storename, persistent_only)
  local out, seen = {}, {}
  for _, nm in ipairs(self:named_modules()) do
    local st = rawget(nm[2], storename)
    local skip = persistent_only and non_persistent(nm[2]) or {}
    for _, n in ipairs(st.names) do
      local t = st.map[n]
      if not seen[t] and not skip[n] then
        seen[t] = true
        out[#out + 1] = { nm[1] == "" and n or nm[1] .. "." .. n, t }
      end
    end
  end
  return out
end

-- named_parameters() → list of {"blocks.1.attn.qkv.weight", tensor} in registration order.
function Module:named_parameters() return named_tensors(self, "_parameters") end
function Module:named_buffers() return named_tensors(self, "_buffers") end
-- the buffers state_dict saves and load_state_dict loads (persistent ones), as named_buffers names them
function Module:_named_persistent_buffers() return named_tensors(self, "_buffers", true) end

-- get_submodule(target) / get_parameter(target) / get_buffer(target): torch's lookups by the dotted name
-- named_modules / named_parameters / named_buffers give ("" is the module itself); a missing part is named.
local function walk(self, fname, parts, upto)
  local m, path = self, {}
  for i = 1, upto do
    local name = parts[i]
    local sub = rawget(m, "_modules").map[name]
    if sub == nil then
      error(("%s: %s has no submodule '%s'%s"):format(fname, m:type_name(), name,
        #path > 0 and (" (at '%s')"):format(table.concat(path, ".")) or ""), 3)
    end
    path[#path + 1] = name
    m = sub
  end
  return m
end
local function split_target(fname, target)
  if type(target) ~= "string" then
    error(("%s: target must be a dotted name (a string), got %s"):format(fname, O.got(target)), 3)
  end
  local parts = {}
  if target ~= "" then for name in (target .. "."):gmatch("([^.]*)%.") do parts[#parts + 1] = name end end
  return parts
end
function Module:get_submodule(target)
  local parts = split_target("get_submodule", target)
  return walk(self, "get_submodule", parts, #parts)
end
for _, kind in ipairs { { "get_parameter", "_parameters", "parameter" }, { "get_buffer", "_buffers", "buffer" } } do
  Module[kind[1]] = function(self, target)
    local parts = split_target(kind[1], target)
    if #parts == 0 then error(("%s: target is empty; name the %s"):format(kind[1], kind[3]), 2) end
    local m = walk(self, kind[1], parts, #parts - 1)
    local t = rawget(m, kind[2]).map[parts[#parts]]
    if t == nil then
      error(("%s: %s has no %s '%s'"):format(kind[1], m:type_name(), kind[3], parts[#parts]), 2)
    end
    return t
  end
end

function Module:parameters()
  local out = {}
  for i, np in ipairs(self:named_parameters()) do out[i] = np[2] end
  return out
end

function Module:buffers()
  local out = {}
  for i, nb in ipairs(self:named_buffers()) do out[i] = nb[2] end
  return out
end

-- num_parameters([only_trainable]) → total element count (shared parameters counted once).
function Module:num_parameters(only_trainable, ...)
  O.no_more("num_parameters", "([only_trainable])", ...)
  if only_trainable ~= nil and type(only_trainable) ~= "boolean" then
    error(("num_parameters: only_trainable must be a boolean, got %s"):format(O.got(only_trainable)), 2)
  end
  local n = 0
  for _, p in ipairs(self:parameters()) do
    if not only_trainable or not p.requires_grad or p:requires_grad() then n = n + p:numel() end
  end
  return n
end

-- to(device) / cuda() / cpu(): moves every parameter and buffer (and their .grad) to "cpu" or "cuda" in
-- place, as PyTorch's Module.to does, so optimizers and other holders of the tensors follow; modules
-- holding device tensors outside their parameters and buffers move them in _move_extra(device).
-- Returns self.
-- dtype names and aliases (docs/lua-api.md's Formats): m:to("bf16") is torch's m.to(torch.bfloat16)
local DTYPE_NAMES = { fp32 = 1, float32 = 1, float = 1, f32 = 1, bf16 = 1, bfloat16 = 1, fp16 = 1, float16 = 1,
  half = 1, f16 = 1, e4m3 = 1, e5m2 = 1, double = 1, float64 = 1 }
function Module:to(device)
  if type(device) == "string" and DTYPE_NAMES[device:lower()] then
    error(("to: a module's parameters keep their dtype, got '%s' (torch's m.to(dtype), m.half() are not offered: "
      .. "lower precision comes from fp8.amp, acc:autocast or an FP8 recipe); a device is \"cpu\" or \"cuda\"")
      :format(device), 2)
  end
  if device ~= "cpu" and device ~= "cuda" then
    error(("to: device must be \"cpu\" or \"cuda\", got %s%s"):format(
      type(device) == "string" and ("'" .. device .. "'") or type(device),
      type(device) == "function" and " (the Accelerator's device is a method: m:to(acc:device()))" or ""), 2)
  end
  for _, list in ipairs { self:parameters(), self:buffers() } do
    for _, t in ipairs(list) do t:move_(device) end
  end
  for _, m in ipairs(self:modules()) do
    local extra = m._move_extra
    if extra then extra(m, device) end
  end
  return self
end
function Module:cuda() return self:to("cuda") end
function Module:cpu() return self:to("cpu") end

-- torch's m.half(), m.bfloat16(), m.double(): refused as m:to(dtype) is, by name (they were "attempt to call a nil
-- value"). m.float() is what the parameters are: self, where every parameter and buffer is fp32.
local WHY_NOT = {
  half = "lower precision comes from fp8.amp, acc:autocast or an FP8 recipe",
  bfloat16 = "lower precision comes from fp8.amp, acc:autocast or an FP8 recipe",
  double = "fp8lab has no float64 tensors",
}
for name, why in next, WHY_NOT do
  Module[name] = function(self)
    error(("%s: a module's parameters keep their dtype (torch's m.%s() is not offered: %s)"):format(name, name, why), 2)
  end
end
function Module:float()
  for _, list in ipairs { { self:named_parameters(), "parameter" }, { self:named_buffers(), "buffer" } } do
    for _, nt in ipairs(list[1]) do
      if nt[2]:dtype() ~= "fp32" then
        error(("float: %s '%s' is %s, and a module's tensors are not converted in place (torch's m.float() is "
          .. "offered where every parameter and buffer already is fp32)"):format(list[2], nt[1], nt[2]:dtype()), 2)
      end
    end
  end
  return self
end

-- device() → the device of the first parameter ("cpu" for a module without parameters).
function Module:device()
  local p = self:parameters()[1]
  return p and p:device() or "cpu"
end

-- apply(fn): fn(module) on every submodule, children before parents (as PyTorch); returns self.
function Module:apply(fn)
  if type(fn) ~= "function" then error(("apply: expected a function, got %s"):format(type(fn)), 2) end
  for _, c in ipairs(self:children()) do c:apply(fn) end
  fn(self)
  return self
end

function Module:train(mode)
  if mode == nil then mode = true end
  if type(mode) ~= "boolean" then error(("train: mode must be a boolean, got %s"):format(type(mode)), 2) end
  rawset(self, "training", mode)
  for _, c in ipairs(self:children()) do c:train(mode) end
  return self
end

function Module:eval() return self:train(false) end

-- zero_grad([set_to_none=true]): drop every parameter's gradient (PyTorch's default), or with false zero it
-- in place.
-- requires_grad_([flag=true]): every parameter's requires_grad set to flag (torch's way to freeze a model); self.
function Module:requires_grad_(flag, ...)
  require("fp8.opts").no_more("requires_grad_", "([requires_grad=true])", ...)
  if flag == nil then flag = true end
  if type(flag) ~= "boolean" then
    error(("requires_grad_: expected a boolean, got %s"):format(require("fp8.opts").got(flag)), 2)
  end
  for _, p in ipairs(self:parameters()) do p:requires_grad_(flag) end
  return self
end

function Module:zero_grad(set_to_none)
  require("fp8.optim.optimizer")._zero_grads(self:parameters(), set_to_none, "zero_grad")
  return self
end

-- ---- state ----------------------------------------------------------------------------------

local function detached_copy(t)
  if t:is_fp8() then return require("fp8._checkpoint").clone(t) end   -- bytes, scale_inv and axis as they are
  if t.detach then t = t:detach() end
  return t:clone()
end

-- state_dict() → {name → tensor}: detached copies of parameters and buffers.
function Module:state_dict()
  -- Modules holding state outside tensors (FP8 recipe state) refresh their buffers first.
  for _, m in ipairs(self:modules()) do if m._before_state_dict then m:_before_state_dict() end end
  local sd = {}
  for _, np in ipairs(self:named_parameters()) do sd[np[1]] = detached_copy(np[2]) end
  for _, nb in ipairs(self:_named_persistent_buffers()) do sd[nb[1]] = detached_copy(nb[2]) end
  return sd
end

-- state_dict_keys() → the names state_dict uses, in torch's order (state_dict itself is a hash): module by module,
-- each one's own parameters, then its own buffers, then its children's.
function Module:state_dict_keys()
  local keys, seen = {}, { _parameters = {}, _buffers = {} }
  for _, nm in ipairs(self:named_modules()) do
    for _, storename in ipairs { "_parameters", "_buffers" } do
      local st = rawget(nm[2], storename)
      local skip = storename == "_buffers" and non_persistent(nm[2]) or {}
      for _, n in ipairs(st.names) do
        local t = st.map[n]
        if not seen[storename][t] and not skip[n] then
          seen[storename][t] = true
          keys[#keys + 1] = nm[1] == "" and n or nm[1] .. "." .. n
        end
      end
    end
  end
  return keys
end

local function quoted_list(names)
  local q = {}
  for i, n in ipairs(names) do q[i] = '"' .. n .. '"' end
  return table.concat(q, ", ")
end

-- load_state_dict(sd [, strict=true]) copies values into the existing tensors (so optimizers that
-- hold them keep working). Shape mismatches are always errors; missing/unexpected keys are errors
-- when strict, else reported in the returned {missing_keys=, unexpected_keys=}.
-- What to do when a state_dict and a model differ by their FP8 recipe state (nil when they do not).
local function fp8_hint(missing, unexpected)
  local function fp8_keys(list)
    for _, k in ipairs(list) do if k:match("fp8_state$") or k:match("weight_fp8$") then return true end end
  end
  if fp8_keys(unexpected) then
    return "the state_dict comes from an FP8 model (it holds FP8 recipe state): convert this model the same way first "
      .. "(acc:prepare(model) with the same recipe, or fp8.convert_model(model, {recipe=...})), or pass strict=false "
      .. "to load only the weights and drop the recipe state"
  elseif fp8_keys(missing) then
    return "this model is an FP8 model and the state_dict has no FP8 recipe state (it comes from a plain model): "
      .. "pass strict=false to load the weights and keep the current recipe state"
  end
end
function Module:load_state_dict(sd, strict)
  if type(sd) ~= "table" then error(("load_state_dict: expected a table {name → tensor}, got %s"):format(type(sd)), 2) end
  if is_module(sd) then   -- (its fields were read as keys: strict=false loaded its weight through the lookup)
    error(("load_state_dict: expected a state_dict, got a module (%s): pass its state_dict()"):format(sd:type_name()), 2)
  end
  if type(strict) == "table" then strict = O.check("load_state_dict", strict, { "strict" }, 2).strict end
  if strict == nil then strict = true end
  if type(strict) ~= "boolean" then error(("load_state_dict: strict must be a boolean, got %s"):format(type(strict)), 2) end
  local copy_ = require("fp8._optim").copy_
  local targets, missing, unexpected, problems = {}, {}, {}, {}
  for _, list in ipairs { self:named_parameters(), self:_named_persistent_buffers() } do
    for _, nt in ipairs(list) do targets[nt[1]] = nt[2] end
  end
  -- A shared tensor's other names (torch's state_dict lists it under each): loaded when given, never missing.
  local aliases = {}
  local also = {}   -- non-persistent buffers a module still takes from an older file (FP8Linear._also_loads)
  local function walk(m, prefix, onpath)
    if onpath[m] then return end
    onpath[m] = true
    for _, storename in ipairs { "_parameters", "_buffers" } do
      local st = rawget(m, storename)
      local skip = storename == "_buffers" and non_persistent(m) or {}
      for _, n in ipairs(st.names) do
        if targets[prefix .. n] == nil and not skip[n] then aliases[#aliases + 1] = { prefix .. n, st.map[n] } end
        if skip[n] and (m._also_loads or {})[n] then also[prefix .. n] = true end
      end
    end
    for _, nc in ipairs(m:_all_children()) do walk(nc[2], prefix .. nc[1] .. ".", onpath) end
    onpath[m] = nil
  end
  walk(self, "", {})
  local alias_of = {}
  for _, a in ipairs(aliases) do alias_of[a[1]] = a[2] end
  for _, name in ipairs(self:state_dict_keys()) do
    local src, dst = sd[name], targets[name]
    if src == nil then
      missing[#missing + 1] = name
    elseif not is_tensor(src) then
      problems[#problems + 1] = ('for "%s": expected a tensor, got %s'):format(name, type(src))
    elseif shape_str(src) ~= shape_str(dst) and not name:match("fp8_state$") then
      -- (an FP8 layer's recipe state is read by its layer, which checks it: an older layout has another length)
      problems[#problems + 1] = ('size mismatch for "%s": copying a tensor of shape %s from the state_dict, the shape in the current model is %s')
        :format(name, shape_str(src), shape_str(dst))
    end
  end
  for k in next, sd do   -- raw: the caller's table as stored (a __pairs that never ends looped, sweep 115)
    if targets[k] == nil and alias_of[k] == nil and not also[k] then unexpected[#unexpected + 1] = tostring(k) end
    if alias_of[k] ~= nil and is_tensor(sd[k]) and shape_str(sd[k]) ~= shape_str(alias_of[k])
      and not tostring(k):match("fp8_state$") then
      problems[#problems + 1] = ('size mismatch for "%s": copying a tensor of shape %s from the state_dict, the shape '
        .. 'in the current model is %s'):format(k, shape_str(sd[k]), shape_str(alias_of[k]))
    elseif alias_of[k] ~= nil and not is_tensor(sd[k]) then
      problems[#problems + 1] = ('for "%s": expected a tensor, got %s'):format(k, type(sd[k]))
    end
  end
  table.sort(unexpected)
  if strict then
    if #missing > 0 then problems[#problems + 1] = "missing key(s) in state_dict: " .. quoted_list(missing) end
    if #unexpected > 0 then problems[#problems + 1] = "unexpected key(s) in state_dict: " .. quoted_list(unexpected) end
    problems[#problems + 1] = fp8_hint(missing, unexpected)
  end
  -- FP8 targets take FP8 sources of their format (bytes and scale copied as they are).
  local function check_fp8(name, dst)
    local src = sd[name]
    if is_tensor(src) and dst:is_fp8() and src:dtype() ~= dst:dtype() then
      problems[#problems + 1] = ('for "%s": the model holds an %s tensor, the state_dict a %s one'):format(name,
        dst:dtype(), src:dtype())
    end
  end
  for name, dst in next, targets do check_fp8(name, dst) end
  for _, a in ipairs(aliases) do check_fp8(a[1], a[2]) end
  -- Modules with state beyond tensors (FP8 recipe state) check theirs before anything is written.
  if #problems == 0 then
    for _, nm in ipairs(self:named_modules()) do
      if nm[2]._check_load_state then
        local why = nm[2]:_check_load_state(sd, nm[1] == "" and "" or nm[1] .. ".", strict)
        if why then problems[#problems + 1] = why end
      end
    end
  end
  if #problems > 0 then
    error(("load_state_dict for %s: %s"):format(self:type_name(), table.concat(problems, "; ")), 2)
  end
  local copy_exact = require("fp8._checkpoint").copy_exact_
  local function copy_into(name, dst)
    local src = sd[name]
    if src ~= nil then
      if dst:is_fp8() then copy_exact(dst, src)
      elseif name:match("fp8_state$") and shape_str(src) ~= shape_str(dst) then   -- the layer reads it from sd
      else
        if src:is_fp8() then src = src:dequantize() end
        copy_(dst, src)
      end
    end
  end
  for name, dst in next, targets do copy_into(name, dst) end
  for _, a in ipairs(aliases) do copy_into(a[1], a[2]) end   -- after the first names: the last one wins, as torch's
  local fitted, first = 0, nil   -- FP8 layers whose saved amax histories had another length (strict=false)
  for _, nm in ipairs(self:named_modules()) do
    if nm[2]._after_load_state_dict then
      local f = nm[2]:_after_load_state_dict(sd, nm[1] == "" and "" or nm[1] .. ".", strict)
      if f then fitted, first = fitted + 1, first or f end
    end
  end
  if fitted > 0 and require("fp8._dist").info().rank == 0 then
    io.stderr:write(("fp8lab: notice: load_state_dict: %d FP8 layer%s saved with amax histories of another length "
      .. "(%s): each keeps its most recent entries that fit (strict=false)\n"):format(fitted, fitted == 1 and "" or "s",
      first))
  end
  return { missing_keys = missing, unexpected_keys = unexpected }
end

-- ---- printing -------------------------------------------------------------------------------

-- extra_repr() → the text inside the parentheses ("in_features=784, out_features=512, bias=true").
function Module:extra_repr() return "" end

local function indent(s, n)
  local pad = (" "):rep(n)
  return (s:gsub("\n", "\n" .. pad))
end

function Module:_repr()
  local lines = {}
  local extra = self:extra_repr()
  if type(extra) ~= "string" then
    error(("%s:extra_repr() returned %s; it returns a string (\"\" for nothing)"):format(self:type_name(),
      require("fp8.opts").got(extra)), 0)
  end
  if extra ~= "" then
    for l in (extra .. "\n"):gmatch("(.-)\n") do lines[#lines + 1] = l end
  end
  local children = self:_all_children()
  for _, nc in ipairs(children) do
    lines[#lines + 1] = "(" .. nc[1] .. "): " .. indent(nc[2]:_repr(), 2)
  end
  local head = self:type_name() .. "("
  if #lines == 0 then return head .. ")" end
  if #lines == 1 and #children == 0 then return head .. lines[1] .. ")" end
  return head .. "\n  " .. table.concat(lines, "\n  ") .. "\n)"
end

Module.__is_module_class = true
Module.__index = make_index(Module)
Module.__newindex = newindex
Module.__call = function(self, ...) return self:_call(...) end
Module.__tostring = function(self) return self:_repr() end
setmetatable(Module, {
  __call = function(c, ...)
    local self = setmetatable({}, c)
    Module._setup(self)
    self:__init(...)
    return self
  end,
  __tostring = function() return "fp8.nn.Module" end,
})

-- every public method refuses arguments past its parameters (fp8.opts.strict_arity)
O.strict_arity(Module, "Module", function(self) return type(self.type_name) == "function" and self:type_name() or nil end)
return Module
