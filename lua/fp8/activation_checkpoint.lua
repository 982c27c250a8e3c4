-- activation_checkpoint.lua — torch.utils.checkpoint as fp8.utils.checkpoint: checkpoint(fn, ...) runs fn without
-- keeping its activations and runs it again in the backward to get its gradients, trading a second forward for the
-- memory of everything fn makes inside; checkpoint_sequential(functions, segments, input) does so for the segments of
-- a Sequential (or a list of modules or functions), the last one excepted.
--
-- How (torch's use_reentrant=True way): the forward runs fn under fp8.no_grad, so no graph and no activation is
-- kept, and returns its outputs tied to the tensor arguments (and, where none requires grad, to a stand-in leaf) by
-- the link fp8.autograd.Function is built on (lua/fp8/autograd_function.lua: the outputs keep their bits), so that
-- the backward reaches it. Gradient hooks on the outputs collect their gradients;
-- the hook on the link, which runs after all of them, runs fn again with gradients on, with the random generator,
-- the autocast dtype and the FP8 autocast as they were in the forward (dropout draws the same masks), runs a backward
-- of it from the collected gradients, which fills the .grad of the parameters fn used as any backward does, and
-- hands each argument's gradient to the outer backward through the link. The generator is put back as the backward
-- found it. FP8 layers record their amaxes only where gradients are on (lua/fp8/nn/fp8_linear.lua), so they record
-- in the recomputation only, once, with the same scales: the recipe state is what one plain step makes.
-- Not offered (refused by name): torch's use_reentrant=False, context_fn, determinism_check other than the shapes,
-- debug. The backward of a checkpointed call can run once (no retain_graph through it).
local core = require "fp8.core"
local O = require "fp8.opts"
local CK = require "fp8._checkpoint"

local M = {}

local function autocast() return require("fp8.fp8_autocast") end
local function link() return require("fp8.autograd_function") end

local function callable(v)
  if type(v) == "function" then return true end
  local mt = getmetatable(v)
  return mt ~= nil and type(mt) == "table" and mt.__call ~= nil
end

-- fn(...) as the forward ran it: the generator at seed/counter, the autocast dtype, FP8 autocast on or off
local function replay(st, fn, args)
  CK.set_rng_state(st.seed, st.counter)
  local prev = core.set_autocast_dtype(st.autocast)
  local function run() return table.pack(fn(table.unpack(args, 1, args.n))) end
  local ok, r
  if st.fp8 then ok, r = pcall(autocast().fp8_autocast, run)
  else ok, r = pcall(autocast()._fp8_autocast_off, run) end
  core.set_autocast_dtype(prev)
  if not ok then error(r, 0) end
  return r
end

-- checkpoint(fn, ...) -> fn's results: fn a function or a module; its tensor results come back tied to the
-- recomputation, the others as they are
-- torch's keyword options, as a last argument {use_reentrant=, preserve_rng_state=, determinism_check=, debug=,
-- context_fn=}: those that name what this checkpoint does are taken (use_reentrant=true, preserve_rng_state=true,
-- determinism_check="default", debug=false), the others refused by name. A last table holding none of these names
-- is one of fn's arguments, as before; one holding them is not passed on (it used to reach fn).
local TORCH_OPTS = { use_reentrant = true, preserve_rng_state = true, determinism_check = true, debug = true,
                     context_fn = true }
local function torch_opts(fname, args)
  local o = args.n > 0 and args[args.n] or nil
  if type(o) ~= "table" or getmetatable(o) ~= nil then return end
  local any = false
  for k in next, o do if TORCH_OPTS[k] then any = true end end
  if not any then return end
  for k in next, o do
    if not TORCH_OPTS[k] then
      error(("%s: unknown option '%s' beside torch's checkpoint options (use_reentrant, preserve_rng_state, "
        .. "determinism_check, debug, context_fn)"):format(fname, tostring(k)), 3)
    end
  end
  local function want(k, ok, what)
    if o[k] ~= nil and not ok(o[k]) then
      error(("%s: %s=%s is not supported: %s"):format(fname, k, O.got(o[k]), what), 4)
    end
  end
  want("use_reentrant", function(v) return v == true end,
    "the recomputation runs torch's use_reentrant=True way (the only one offered; true or nothing)")
  want("preserve_rng_state", function(v) return v == true end,
    "the generator is always put back as the forward found it, so dropout draws the same masks (true or nothing)")
  want("determinism_check", function(v) return v == "default" end,
    "the recomputed outputs' shapes are always checked (\"default\" or nothing)")
  want("debug", function(v) return v == false end, "there is no debug trace of the recomputation (false or nothing)")
  if o.context_fn ~= nil then
    error(("%s: context_fn is not supported: the forward and the recomputation run in no context but the "
      .. "autocast and FP8 autocast of the call"):format(fname), 3)
  end
  args.n = args.n - 1
end

function M.checkpoint(fn, ...)
  if not callable(fn) then
    error(("checkpoint: expected a function or a module to run, got %s"):format(O.got(fn)), 2)
  end
  local args = table.pack(...)
  torch_opts("checkpoint", args)
  -- without gradients there is nothing to recompute: torch's checkpoint runs the function as it is
  if not core.is_grad_enabled() then return fn(table.unpack(args, 1, args.n)) end
  for i = 1, args.n do
    local a = args[i]
    if core.is_tensor(a) and a:is_released() then
      error(("checkpoint: argument %d has been released (freed or closed)"):format(i), 2)
    end
  end
  local st = { autocast = core.autocast_dtype(), fp8 = autocast().enabled() }
  st.seed, st.counter = CK.rng_state()
  local outs = table.pack(core.no_grad(function(...) return fn(...) end, table.unpack(args, 1, args.n)))
  local grad_args, done = {}, false
  -- the outputs' shapes, not the outputs: the link returns new tensors, and the backward must not keep these alive
  local shapes = {}
  for j = 1, outs.n do shapes[j] = core.is_tensor(outs[j]) and outs[j]:shape_str() or O.got(outs[j]) end
  for i = 1, args.n do
    if core.is_tensor(args[i]) and args[i]:requires_grad() then grad_args[#grad_args + 1] = i end
  end
  -- the recomputation and its backward, once, when every output's gradient has come (the link's hook); each
  -- argument's gradient from it goes back through the link (lua/fp8/autograd_function.lua)
  local function recompute(got)
    if done then error("checkpoint: this call's backward has run already (no retain_graph through a checkpoint)", 0) end
    if core._restricted_walks() > 0 then
      error("checkpoint: not with fp8.autograd.grad or backward's inputs= (its recomputation's backward fills the "
        .. "parameters' .grad, as torch's reentrant checkpoint, which refuses them too): use loss:backward()", 0)
    end
    done = true
    local here_seed, here_counter = CK.rng_state()
    local results
    local ok, err = pcall(core.enable_grad, function()
      local again = {}
      for i = 1, args.n do again[i] = args[i] end
      local leaves = {}
      for k, i in ipairs(grad_args) do
        leaves[k] = args[i]:detach():requires_grad(true)
        again[i] = leaves[k]
      end
      local r = replay(st, fn, table.pack(table.unpack(again, 1, args.n)))
      local from, seeds = {}, {}
      for j = 1, outs.n do
        local g = got[j]
        if g ~= nil then
          local y = r[j]
          if not core.is_tensor(y) or y:shape_str() ~= shapes[j] then
            error(("checkpoint: the recomputation's result %d is %s where the forward's was %s: the function must "
              .. "compute the same shapes again"):format(j, core.is_tensor(y) and y:shape_str() or O.got(y),
              shapes[j]), 0)
          end
          if y:requires_grad() then
            from[#from + 1] = y
            seeds[#seeds + 1] = g:to(y:dtype())
          end
        end
      end
      if #from > 0 then require("fp8.autograd").backward(from, seeds) end
      results = {}
      for k, leaf in ipairs(leaves) do results[k] = leaf.grad end
    end)
    CK.set_rng_state(here_seed, here_counter)
    if not ok then error(err, 0) end
    return results
  end
  local result_args, _, n_linked = link()._link(args, outs, function() return true end, recompute, true)
  if n_linked == 0 then
    error("checkpoint: the function returned no float tensor, so nothing would carry a gradient back to it", 2)
  end
  return table.unpack(result_args, 1, result_args.n)
end

-- checkpoint_sequential(functions, segments, input) -> output: functions a Sequential or a list of modules or
-- functions, cut into `segments` runs of about equal length; each run but the last goes through checkpoint, as
-- torch's
function M.checkpoint_sequential(functions, segments, input, ...)
  local rest = table.pack(...)
  torch_opts("checkpoint_sequential", rest)   -- torch's use_reentrant= ..., as checkpoint's
  O.no_more("checkpoint_sequential", "(functions, segments, input [, {use_reentrant=true, ...}])",
    table.unpack(rest, 1, rest.n))
  local list = {}
  if type(functions) == "table" and rawget(functions, "_modules") ~= nil and functions.children then
    for _, m in ipairs(functions:children()) do list[#list + 1] = m end
  elseif type(functions) == "table" and getmetatable(functions) == nil then
    for i = 1, rawlen(functions) do
      local f = rawget(functions, i)
      if not callable(f) then
        error(("checkpoint_sequential: functions[%d] is %s, not a function or a module"):format(i, O.got(f)), 2)
      end
      list[i] = f
    end
  else
    error(("checkpoint_sequential: functions must be a Sequential or a list of modules or functions, got %s"):format(
      O.got(functions)), 2)
  end
  if math.type(segments) ~= "integer" or segments < 1 then
    error(("checkpoint_sequential: segments must be an integer >= 1, got %s"):format(O.got(segments)), 2)
  end
  if #list == 0 then error("checkpoint_sequential: there are no functions to run", 2) end
  local size = #list // segments
  if size < 1 then size = 1 end
  local function run(from, to)
    return function(x)
      for i = from, to do x = list[i](x) end
      return x
    end
  end
  local start = 1
  for _ = 1, segments - 1 do
    if start + size - 1 >= #list then break end
    input = M.checkpoint(run(start, start + size - 1), input)
    start = start + size
  end
  return run(start, #list)(input)
end

local okh, help = pcall(require, "fp8.help")
if okh and help.add then
  help.add { section = "Training", name = "utils.checkpoint.checkpoint",
    sig = "fp8.utils.checkpoint.checkpoint(fn, ... [, {use_reentrant=true, ...}]) / checkpoint_sequential(functions, "
      .. "segments, input [, {...}])",
    doc = "torch.utils.checkpoint: fn (a function or a module) runs without keeping its activations, and again in the\n"
      .. "backward to get its gradients: memory for a second forward. The recomputation sees the random generator\n"
      .. "(dropout's masks), the autocast dtype and the FP8 autocast of the forward; FP8 layers record their amaxes\n"
      .. "once, there. Parameters get their .grad as in any backward. checkpoint_sequential cuts a Sequential (or a\n"
      .. "list) into `segments` runs and checkpoints all but the last. nn.GPT{..., gradient_checkpointing=true}\n"
      .. "checkpoints each block (transformers' gradient_checkpointing_enable). torch's options as a last table:\n"
      .. "use_reentrant=true, preserve_rng_state=true, determinism_check=\"default\", debug=false are what it does;\n"
      .. "use_reentrant=false, context_fn and the other values are refused by name." }
  -- (help(fp8.utils.checkpoint.checkpoint) finds a function three tables down as "utils.checkpoint:checkpoint")
  for _, k in ipairs { "utils.checkpoint.checkpoint_sequential", "utils.checkpoint:checkpoint",
                       "utils.checkpoint:checkpoint_sequential", "utils.checkpoint", "utils" } do
    help.ALIASES[k] = "utils.checkpoint.checkpoint"
  end
end

return M
