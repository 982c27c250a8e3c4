-- autograd_function.lua — fp8.autograd.Function, torch.autograd.Function: an operation whose forward and backward
-- the user writes (a straight-through estimator, a cast with a gradient of one's choosing, a fused op), and the link
-- it is built on, which fp8.utils.checkpoint shares.
--
--   local Square = fp8.autograd.Function{
--     name = "Square",                                    -- optional: named in its errors
--     forward = function(ctx, x) ctx:save_for_backward(x); return x * x end,
--     backward = function(ctx, g) local x = ctx.saved_tensors[1]; return g * 2 * x end,
--   }
--   local y = Square.apply(x)   -- or Square(x)
--
-- torch's rules: forward(ctx, ...) runs without gradients and returns tensors (and anything else); backward(ctx,
-- ...) runs without gradients, gets one gradient per forward result (the result's dtype; zeros where none came, nil
-- with ctx:set_materialize_grads(false) and for results that are not tensors) and returns one per forward argument:
-- nil, or a tensor of that argument's shape (or one that broadcasts to it, summed down). ctx:save_for_backward(...)
-- keeps tensors for backward as ctx.saved_tensors, refused there if one was written in place since (t._version);
-- ctx.needs_input_grad, ctx:mark_non_differentiable(...), setup_context(ctx, inputs, output) with a forward that
-- takes no ctx (torch 2's form). Refused by name: ctx:mark_dirty (in-place Functions), jvp, vmap.
--
-- How (the link, core/autograd.h's fl_autograd_link: a tensor's data under a new header whose history leads to
-- another tensor, which gets zeros from it): s, a scalar -0.0, is linked to a view z_k of every argument that
-- requires grad; each float result comes back as r_j's data linked to s (no copy: the forward's bits, -0.0 and NaN
-- payloads too), seen through a view. A gradient hook on each linked result (behind the view, so hooks the caller
-- puts on the result run first) collects its gradient; the hook on s, which runs once all of them came, runs the
-- user's backward; the hook on each z_k hands its argument the gradient backward gave, in place of the link's zeros.
-- The links keep shapes, not data: an argument nothing saved is not kept alive by the result's graph.
local core = require "fp8.core"
local O = require "fp8.opts"

local M = {}

local FLOAT = { fp32 = true, bf16 = true, fp16 = true }
local function is_float_tensor(v) return core.is_tensor(v) and FLOAT[v:dtype()] == true end

-- link(args, outs, wanted, on_backward, stand_in) -> the results, the linked ones replaced; internal (checkpoint).
-- args, outs: packed lists (the call's arguments, the forward's results); wanted(j): whether result j (a float
-- tensor) carries a gradient. on_backward(got) runs once all gradients of the linked results came (got[j]: result
-- j's, fp32; nil where none came) and returns a list by position among the arguments that require grad (k-th such
-- argument: a fp32 tensor of its shape and device, or nil: zeros). stand_in: with no argument that requires grad,
-- link to a stand-in leaf all the same (checkpoint: the parameters its function uses still need the backward);
-- without it, nothing is linked and the results come back as they are. Returns also the argument positions linked.
function M._link(args, outs, wanted, on_backward, stand_in)
  -- (args.n and outs.n are table.pack's counts, so at most Lua's stack, 1,000,000 values: an n of 2^62 looped over
  -- nils for ever, sweep 111)
  for _, w in ipairs { { "args", args }, { "outs", outs } } do
    local what, t = w[1], w[2]
    local n = type(t) == "table" and rawget(t, "n")
    if math.type(n) ~= "integer" or n < 0 or n > 1000000 then
      error(("_link: %s must be a packed list (table.pack), its n an integer in 0..1000000, got %s"):format(what,
        type(t) == "table" and ("n = " .. tostring(n)) or type(t)), 2)
    end
  end
  local grad_args, links = {}, {}
  for i = 1, args.n do
    local a = args[i]
    if core.is_tensor(a) and a:requires_grad() then
      grad_args[#grad_args + 1] = i
      links[#links + 1] = a:view(a:shape())
    end
  end
  if #links == 0 then
    if not stand_in then return outs, grad_args end
    links[1] = core.zeros({}):requires_grad(true)
  end
  -- s: a scalar tied to each link (core._link keeps the link's shape, not its data, and never reads it)
  local s
  for _, z in ipairs(links) do
    local part = core._link(core.tensor(-0.0), z)
    s = s and s + part or part
  end
  local got, results = {}, nil
  local res = table.pack(table.unpack(outs, 1, outs.n))
  local n_linked = 0
  for j = 1, outs.n do
    local o = outs[j]
    if is_float_tensor(o) and wanted(j) then
      n_linked = n_linked + 1
      -- (a new header on o's data: a result that is an argument itself, returned as it is, would otherwise pass
      -- its gradient twice)
      local t = core._link(o, s)
      t:register_hook(function(g) got[j] = g end)
      res[j] = t:view(t:shape())
    end
  end
  if n_linked == 0 then return outs, grad_args, 0 end
  s:register_hook(function()
    local g = got
    got = {}
    local ok, r = pcall(on_backward, g)
    -- the user's backward (or recompute) failed: its own message, not as a hook's (lua/l_autograd.c's RAW_MARK)
    if not ok then error(type(r) == "string" and core._RAW_BACKWARD_ERROR .. r or r, 0) end
    results = r
  end)
  for k, z in ipairs(links) do
    if grad_args[k] ~= nil then
      z:register_hook(function(g)
        local r = results and results[k]
        if results then results[k] = nil end
        return r   -- (nil: the link's zeros go on)
      end)
    end
  end
  return res, grad_args, n_linked
end

-- ---- the ctx --------------------------------------------------------------------------------

local Ctx = {}
Ctx.__name = "FunctionCtx"
local CTX_FIELDS = { saved_tensors = true, needs_input_grad = true }

local function ctx_name(ctx) return rawget(ctx, "_fname") end

local function check_ctx(ctx, method)
  if getmetatable(ctx) ~= Ctx then
    error(("FunctionCtx:%s: call it as ctx:%s(...) on the ctx forward gets, got %s as self"):format(method, method,
      O.got(ctx)), 3)
  end
end

local function in_forward(ctx, method)
  if rawget(ctx, "_phase") ~= "forward" then
    error(("%s: ctx:%s is for forward (or setup_context), not after it"):format(ctx_name(ctx), method), 3)
  end
end

-- ctx:save_for_backward(...): tensors (or nil) for backward, as ctx.saved_tensors
function Ctx.save_for_backward(ctx, ...)
  check_ctx(ctx, "save_for_backward")
  in_forward(ctx, "save_for_backward")
  local saved, versions = { n = select("#", ...) }, {}
  for i = 1, saved.n do
    local t = select(i, ...)
    if t ~= nil and not core.is_tensor(t) then
      error(("%s: save_for_backward: argument %d is %s; it saves tensors (or nil; keep other values as ctx "
        .. "fields: ctx.k = 2)"):format(ctx_name(ctx), i, O.got(t)), 2)
    end
    if t ~= nil and t:is_released() then
      error(("%s: save_for_backward: argument %d has been released (freed or closed)"):format(ctx_name(ctx), i), 2)
    end
    saved[i], versions[i] = t, t and t._version
  end
  rawset(ctx, "_saved", saved)
  rawset(ctx, "_versions", versions)
end

-- ctx:mark_non_differentiable(...): these results of forward carry no gradient (an index, a mask)
function Ctx.mark_non_differentiable(ctx, ...)
  check_ctx(ctx, "mark_non_differentiable")
  in_forward(ctx, "mark_non_differentiable")
  local set = rawget(ctx, "_nondiff")
  for i = 1, select("#", ...) do
    local t = select(i, ...)
    if not core.is_tensor(t) then
      error(("%s: mark_non_differentiable: argument %d is %s; it takes the tensors forward returns"):format(
        ctx_name(ctx), i, O.got(t)), 2)
    end
    set[t] = true
  end
end

-- ctx:set_materialize_grads(on): false passes nil to backward for results no gradient reached (true: zeros)
function Ctx.set_materialize_grads(ctx, on, ...)
  check_ctx(ctx, "set_materialize_grads")
  O.no_more("set_materialize_grads", "(value)", ...)
  if type(on) ~= "boolean" then
    error(("%s: set_materialize_grads: expected a boolean, got %s"):format(ctx_name(ctx), O.got(on)), 2)
  end
  rawset(ctx, "_materialize", on)
end

function Ctx.mark_dirty(ctx)
  check_ctx(ctx, "mark_dirty")
  error(("%s: ctx:mark_dirty is not supported: a Function here does not write its arguments in place; return a new "
    .. "tensor"):format(ctx_name(ctx)), 2)
end

-- ctx.saved_tensors: what save_for_backward kept, checked unchanged (torch's version check at unpacking)
local function saved_tensors(ctx)
  local saved = rawget(ctx, "_saved")
  if saved == nil then return { n = 0 } end
  local versions = rawget(ctx, "_versions")
  local out = { n = saved.n }
  for i = 1, saved.n do
    local t = saved[i]
    if t ~= nil then
      if t:is_released() then
        error(("%s: saved tensor %d has been released (freed or closed) since forward saved it"):format(
          ctx_name(ctx), i), 0)
      end
      if t._version ~= versions[i] then
        error(("%s: saved tensor %d (%s) has been modified by an in-place operation since forward saved it: it is "
          .. "at version %d; expected version %d (save a copy, or write the tensor after the backward)"):format(
          ctx_name(ctx), i, t:shape_str(), t._version, versions[i]), 0)
      end
    end
    out[i] = t
  end
  return out
end

Ctx.__index = function(ctx, k)
  if k == "saved_tensors" then return saved_tensors(ctx) end
  if k == "needs_input_grad" then   -- a copy: the engine reads its own (a write to it changed what was linked)
    local n = rawget(ctx, "_needs")
    return n and table.move(n, 1, n.n, 1, { n = n.n }) or nil
  end
  return rawget(Ctx, k)
end
Ctx.__newindex = function(ctx, k, v)
  if k == "needs_input_grad" then
    error(("%s: ctx.needs_input_grad is read-only (which arguments take a gradient is the call's)"):format(
      ctx_name(ctx)), 2)
  end
  if CTX_FIELDS[k] or rawget(Ctx, k) ~= nil then
    error(("%s: ctx.%s is the ctx's own (save tensors with ctx:save_for_backward)"):format(ctx_name(ctx),
      tostring(k)), 2)
  end
  rawset(ctx, k, v)
end

-- ---- the Function ---------------------------------------------------------------------------

local Function = {}
Function.__name = "fp8.autograd.Function"
Function.__index = Function
local DEF_KEYS = { "forward", "backward", "setup_context", "name" }
local REFUSED = {
  jvp = "forward-mode AD (jvp) is not supported: there are no dual tensors",
  vmap = "vmap is not supported", generate_vmap_rule = "vmap is not supported",
  vjp = "give the gradient function as backward (vjp is torch's other name for it)",
}

-- g summed down to shape (torch's sum_to: g's shape must be shape broadcast); nil when shape does not broadcast to it
local function sum_to(g, shape)
  local gs = g:shape()
  if #gs < #shape then return nil end
  local lead = #gs - #shape
  for d = 1, #shape do
    if shape[d] ~= gs[lead + d] and shape[d] ~= 1 then return nil end
  end
  for _ = 1, lead do g = g:sum(1) end
  for d = 1, #shape do
    if shape[d] == 1 and g:shape()[d] ~= 1 then g = g:sum(d, true) end
  end
  return g
end

-- backward's gradient g for forward argument i (arg: what the argument was, meta: its shape and device when it is a
-- tensor that takes a gradient) as the link hands it over: fp32, the argument's shape; nil where it takes none
local function check_grad(self, ctx, arg, i, g, meta)
  if g == nil then return nil end
  if arg ~= true then
    error(("%s: backward returned %s as gradient %d, but forward's argument %d was %s, not a tensor: return nil "
      .. "there"):format(self._label, O.got(g), i, i, arg), 0)
  end
  if not core.is_tensor(g) then   -- (also where no gradient goes: torch's "expected Variable or None")
    error(("%s: backward returned %s as gradient %d; expected a tensor (or nil)"):format(self._label, O.got(g), i), 0)
  end
  if not rawget(ctx, "_needs")[i] or meta == nil then return nil end   -- torch drops it: no gradient goes there
  if g:is_released() then
    error(("%s: backward's gradient %d has been released (freed or closed)"):format(self._label, i), 0)
  end
  if not FLOAT[g:dtype()] then
    error(("%s: backward returned a %s tensor as gradient %d; expected fp32, bf16 or fp16"):format(self._label,
      g:dtype(), i), 0)
  end
  if g:device() ~= meta.device then
    error(("%s: backward returned gradient %d on %s; argument %d is on %s"):format(self._label, i, g:device(), i,
      meta.device), 0)
  end
  g = g:to("fp32"):detach()   -- (a gradient made with gradients on comes in without its history)
  if g:shape_str() ~= meta.shape_str then
    local r = sum_to(g, meta.shape)
    if r == nil then
      error(("%s: backward returned an invalid gradient %d: got %s but expected shape compatible with %s"):format(
        self._label, i, g:shape_str(), meta.shape_str), 0)
    end
    g = r
  end
  return g
end

-- The backward of one call: the gradients of its results (got, by result) → one per argument that takes a gradient
-- (the link's order). call: what the call keeps for it (no tensor of the forward's: a result's graph must not keep
-- its arguments' or results' data alive, torch's neither, unless saved).
local function run_backward(self, ctx, call, got)
  local gouts = { n = call.nouts }
  for j = 1, call.nouts do
    local m = call.outs[j]
    if m then
      local g = got[j]
      if g ~= nil then g = g:to(m.dtype)
      elseif rawget(ctx, "_materialize") and FLOAT[m.dtype] then g = core.zeros(m.shape):to(m.dtype):to(m.device) end
      gouts[j] = g
    end
  end
  rawset(ctx, "_phase", "backward")
  local r = table.pack(core.no_grad(self._def.backward, ctx, table.unpack(gouts, 1, gouts.n)))
  local bad = r.n < call.nargs
  for i = call.nargs + 1, r.n do bad = bad or r[i] ~= nil end
  if bad then
    error(("%s: backward returned an incorrect number of gradients (expected %d, one per forward argument, got %d)")
      :format(self._label, call.nargs, r.n), 0)
  end
  local out = {}
  for k, i in ipairs(call.linked) do out[k] = check_grad(self, ctx, call.args[i], i, r[i], call.metas[k]) end
  for i = 1, call.nargs do
    if call.args[i] ~= true and r[i] ~= nil then check_grad(self, ctx, call.args[i], i, r[i], nil)
    elseif r[i] ~= nil and not core.is_tensor(r[i]) then   -- a tensor argument that takes none: still a tensor or nil
      error(("%s: backward returned %s as gradient %d; expected a tensor (or nil)"):format(self._label, O.got(r[i]), i), 0)
    end
  end
  return out
end

local function apply(self, ...)
  local args = table.pack(...)
  if args.n > 0 and rawequal(args[1], self) then
    error(("%s: call it as F.apply(x, ...) or F(x, ...), not F:apply(x, ...) (the Function would be its own first "
      .. "argument)"):format(self._label), 2)
  end
  for i = 1, args.n do
    if core.is_tensor(args[i]) and args[i]:is_released() then
      error(("%s: argument %d has been released (freed or closed)"):format(self._label, i), 2)
    end
  end
  local grad_on = core.is_grad_enabled()
  for i = 1, args.n do
    local a = args[i]
    if grad_on and core.is_tensor(a) and a:is_fp8() and a:requires_grad() then
      error(("%s: argument %d is an %s tensor that requires grad; a Function's gradients are fp32, bf16 or fp16, so "
        .. "its gradient would be lost: pass it dequantized (the dequantize carries the gradient)"):format(
        self._label, i, a:dtype()), 2)
    end
  end
  local needs = { n = args.n }
  for i = 1, args.n do
    local a = args[i]
    needs[i] = grad_on and core.is_tensor(a) and FLOAT[a:dtype()] == true and a:requires_grad()
  end
  local ctx = setmetatable({}, Ctx)
  rawset(ctx, "_needs", needs)
  rawset(ctx, "_fname", self._label)
  rawset(ctx, "_phase", "forward")
  rawset(ctx, "_materialize", true)
  rawset(ctx, "_nondiff", setmetatable({}, { __mode = "k" }))
  local def = self._def
  local outs
  if def.setup_context then
    outs = table.pack(core.no_grad(def.forward, ...))
    core.no_grad(def.setup_context, ctx, args, outs.n == 1 and outs[1] or outs)
  else
    outs = table.pack(core.no_grad(def.forward, ctx, ...))
  end
  rawset(ctx, "_phase", "done")
  local any = false
  for i = 1, args.n do any = any or needs[i] end
  -- a result that is an argument itself and takes no gradient from this call: a new view of it without history
  -- (torch's _view_as_self_with_no_grad), or a gradient would reach the argument through it
  local function unlinked(list)
    for j = 1, list.n do
      local o = list[j]
      if core.is_tensor(o) and not o:is_released() then
        for i = 1, args.n do
          if rawequal(o, args[i]) then list[j] = o:detach(); break end
        end
      end
    end
    return list
  end
  if not any then return table.unpack(unlinked(outs), 1, outs.n) end
  local call = { nargs = args.n, args = {}, metas = {}, nouts = outs.n, outs = {} }
  for i = 1, args.n do
    local a = args[i]
    call.args[i] = core.is_tensor(a) or O.got(a)
    if core.is_tensor(a) and a:requires_grad() then
      call.metas[#call.metas + 1] = { shape = a:shape(), shape_str = a:shape_str(), device = a:device() }
    end
  end
  for j = 1, outs.n do
    local o = outs[j]
    call.outs[j] = core.is_tensor(o) and { dtype = o:dtype(), shape = o:shape(), device = o:device() } or false
  end
  local nondiff = rawget(ctx, "_nondiff")
  for j = 1, outs.n do
    local o = outs[j]
    if core.is_tensor(o) and o:is_fp8() and not nondiff[o] then
      error(("%s: result %d is an %s tensor; its gradient cannot pass through the Function (gradients are fp32, bf16 "
        .. "or fp16): return it dequantized, or mark it with ctx:mark_non_differentiable"):format(self._label, j,
        o:dtype()), 2)
    end
  end
  local res, linked = M._link(args, outs, function(j) return not nondiff[outs[j]] end,
    function(got) return run_backward(self, ctx, call, got) end, false)
  call.linked = linked
  for j = 1, res.n do
    if res[j] ~= outs[j] then core._name_grad_fn(res[j], self._node_name) end
  end
  if res == outs then res = table.pack(table.unpack(outs, 1, outs.n)) end   -- (nothing linked: _link's own list)
  return table.unpack(unlinked(res), 1, res.n)
end

function M.Function(def, ...)
  O.no_more("fp8.autograd.Function", "({forward=, backward= [, setup_context=] [, name=]})", ...)
  if type(def) ~= "table" or getmetatable(def) ~= nil then
    error(("fp8.autograd.Function: expected a table {forward=function(ctx, ...), backward=function(ctx, ...)}, got %s")
      :format(O.got(def)), 2)
  end
  for k in next, def do
    if REFUSED[k] then error(("fp8.autograd.Function: %s: %s"):format(tostring(k), REFUSED[k]), 2) end
  end
  O.check("fp8.autograd.Function", def, DEF_KEYS, 2)
  for _, k in ipairs { "forward", "backward" } do
    if type(def[k]) ~= "function" then
      error(("fp8.autograd.Function: %s must be a function, got %s"):format(k, O.got(def[k])), 2)
    end
  end
  if def.setup_context ~= nil and type(def.setup_context) ~= "function" then
    error(("fp8.autograd.Function: setup_context must be a function, got %s"):format(O.got(def.setup_context)), 2)
  end
  if def.name ~= nil and (type(def.name) ~= "string" or def.name == "") then
    error(("fp8.autograd.Function: name must be a non-empty string, got %s"):format(O.got(def.name)), 2)
  end
  local self = setmetatable({ _def = { forward = def.forward, backward = def.backward,
    setup_context = def.setup_context }, name = def.name or "Function" }, Function)
  self._label = ("fp8.autograd.Function '%s'"):format(self.name)
  self._node_name = self.name .. "Backward"
  self.apply = function(...) return apply(self, ...) end
  return self
end

Function.__call = function(self, ...) return apply(self, ...) end
Function.__tostring = function(self) return ("fp8.autograd.Function '%s'"):format(self.name) end

return M
