-- ddp.lua — PyTorch DistributedDataParallel for the Accelerator (docs/distributed.md): the
-- DistributedDataParallelKwargs checks, the start-of-training agreement (same parameter names and
-- shapes everywhere, rank 0's values broadcast), the bucketed gradient reducer (core/ddp.h through
-- fp8._dist) armed around backward on synchronising steps, buffer broadcasts before each forward.
local D = require "fp8._dist"
local core = require "fp8.core"

local M = {}

local POWER_SGD = { power_sgd = true, batched_power_sgd = true }

-- The reducer's options from the DistributedDataParallelKwargs settings; refuses what is not implemented.
function M.options(k)
  k = k or {}
  local function refuse(what) error("Accelerator: DistributedDataParallelKwargs " .. what, 5) end
  if POWER_SGD[k.comm_hook] then
    refuse(("comm_hook=%q is not supported (PowerSGD is not implemented); use \"no\", \"fp16\" or \"bf16\""):format(k.comm_hook))
  end
  if k.gradient_as_bucket_view then
    refuse("gradient_as_bucket_view=true is not supported: gradients are copied out of the buckets after each reduction")
  end
  if k.static_graph then
    refuse("static_graph=true is not supported (it is an optimisation hint for PyTorch's reducer, which this one does not "
      .. "implement); leave it false")
  end
  if k.check_reduction then
    refuse("check_reduction=true is not supported (deprecated in PyTorch, where it has no effect)")
  end
  if (k.dim or 0) ~= 0 then
    refuse(("dim=%s is not supported: batches are split along the first dimension (dim=0)"):format(tostring(k.dim)))
  end
  return { bucket_cap_mb = k.bucket_cap_mb or 25, find_unused = k.find_unused_parameters == true,
    wire = (k.comm_hook == "fp16" or k.comm_hook == "bf16") and k.comm_hook or "fp32",
    broadcast_buffers = k.broadcast_buffers ~= false }
end

local function shape_str(t)
  local s = t:shape()
  for i = 1, #s do s[i] = tostring(s[i]) end
  return "[" .. table.concat(s, ", ") .. "]"
end

-- A recipe field as text: a table (override_linear_precision) by its keys and values in one order, a function
-- (module_filter_func) by its kind only (two processes' functions cannot be compared).
local function field_str(v)
  if type(v) == "table" then
    local t = {}
    for k, x in next, v do t[#t + 1] = tostring(k) .. "=" .. field_str(x) end
    table.sort(t)
    return "{" .. table.concat(t, ", ") .. "}"
  end
  return type(v) == "function" and "a function" or tostring(v)
end

local function describe(model, acc)
  local lines, opts = {}, acc._ddp_opts
  -- the reducer's options decide which collectives run (buckets, wire dtype, the used-map all-reduce): a rank
  -- with other options would pair its collectives with the wrong ones
  for _, k in ipairs { "bucket_cap_mb", "find_unused", "wire", "broadcast_buffers" } do
    if opts and opts[k] ~= nil then lines[#lines + 1] = ("DistributedDataParallelKwargs %s=%s"):format(k, tostring(opts[k])) end
  end
  -- so do the precision settings (te's amax all-reduce, MS-AMP's FP8 gradient items, the accumulation windows), and
  -- they decide the numbers: fp16 on one rank only would average its loss-scaled gradients with unscaled ones. Each
  -- process reads them from its own environment and config file, which may differ from node to node.
  lines[#lines + 1] = "mixed_precision=" .. tostring(acc.mixed_precision)
  if acc.mixed_precision == "fp8" and type(acc.fp8_recipe) == "table" then
    lines[#lines + 1] = "FP8 backend=" .. tostring(acc.fp8_backend)   -- first: the recipe fields depend on it
    local keys = {}
    for k in next, acc.fp8_recipe do if k ~= "backend" then keys[#keys + 1] = tostring(k) end end
    table.sort(keys)
    for _, k in ipairs(keys) do lines[#lines + 1] = ("FP8 recipe %s=%s"):format(k, field_str(acc.fp8_recipe[k])) end
  end
  lines[#lines + 1] = "gradient_accumulation_steps=" .. tostring(acc.gradient_accumulation_steps)
  lines[#lines + 1] = "sync_each_batch=" .. tostring(acc.gradient_state.sync_each_batch == true)
  for _, kind in ipairs { "parameter", "buffer" } do
    local list = kind == "parameter" and model:named_parameters() or model:named_buffers()
    for _, nt in ipairs(list) do
      -- a parameter trained on one rank and frozen on another would pair the ranks' buckets wrongly
      local frozen = kind == "parameter"
        and (nt[2]:requires_grad() and " trainable" or " frozen (requires_grad false)") or ""
      lines[#lines + 1] = ("%s %s %s %s%s"):format(kind, nt[1], nt[2]:dtype(), shape_str(nt[2]), frozen)
    end
  end
  return lines
end

-- agree(acc, model): every rank has rank 0's parameter and buffer names, dtypes and shapes (else one
-- error on every rank naming the first difference), then takes rank 0's values.
function M.agree(acc, model)
  local dist = require "fp8.distributed"
  dist._require_same(acc, describe(model, acc), "prepare: the model or its training settings differ across processes")
  for _, t in ipairs(model:parameters()) do D.broadcast(t, 0) end
  for _, t in ipairs(model:buffers()) do D.broadcast(t, 0) end
end

-- attach(acc, model): the reducer over every prepared model's trainable parameters (one reducer per
-- accelerator, rebuilt when a model is added), and buffer broadcasts before each forward.
function M.attach(acc, model)
  local o = acc._ddp_opts
  acc._ddp_models = acc._ddp_models or {}
  acc._ddp_models[#acc._ddp_models + 1] = model
  local params, names = {}, {}
  for mi, m in ipairs(acc._ddp_models) do
    for _, nt in ipairs(m:named_parameters()) do
      if nt[2]:requires_grad() then
        params[#params + 1] = nt[2]
        names[#names + 1] = (#acc._ddp_models > 1 and ("model%d."):format(mi) or "") .. nt[1]
      end
    end
  end
  local set = {}
  for _, p in ipairs(params) do set[p] = true end
  acc._ddp_params, acc._ddp_names, acc._ddp_param_set = params, names, set
  acc._ddp_reducer = D.ddp(params, names, { bucket_cap_mb = o.bucket_cap_mb, wire = o.wire, find_unused = o.find_unused })
  rawset(model, "_ddp_stats", function()   -- fp8.stats' all-reduce row (none after acc:free_memory())
    local r = acc._ddp_reducer
    return r and r:stats()
  end)
  -- The buffers a forward reads (running statistics, say). An FP8 layer's fp8_state is not one: it is the snapshot
  -- of its recipe state that state_dict writes (the live state is the layer's own, kept equal across processes by
  -- the amax all-reduce after each step), so broadcasting it would only make every training-mode forward a
  -- collective: a model run on the main process alone (an evaluation, a sample) would wait for the others forever.
  -- Nor is MS-AMP O3's weight_fp8: the optimizer step re-casts it from the master weight, the same on every process
  -- (broadcast, it made rank 1 compute with the step before's weights once rank 0 ran one forward more).
  local function forward_buffers(m)
    local out = {}
    for _, nt in ipairs(m:named_buffers()) do
      if not (nt[1]:match("fp8_state$") or nt[1]:match("weight_fp8$")) then out[#out + 1] = nt[2] end
    end
    return out
  end
  if o.broadcast_buffers and #forward_buffers(model) > 0 then
    local fwd = model.forward
    rawset(model, "forward", function(m, ...)
      if m.training ~= false then
        -- announced first, as backward: a process in another call (save_state under `if acc:is_main_process()`)
        -- is one error on every process, where these broadcasts paired with that call's own (its first one is 8
        -- bytes, as a buffer of two fp32 values: received as this buffer's values) and ended in a wait
        if acc.num_processes > 1 then require("fp8.distributed")._announce(acc, "forward") end
        for _, b in ipairs(forward_buffers(m)) do D.broadcast(b, 0) end
      end
      return fwd(m, ...)
    end)
  end
end

-- backward(acc, loss, opts): on a synchronising step, the reducer is armed around the backward and has
-- averaged every gradient when this returns; otherwise (no_sync, accumulation) no communication, except
-- on accumulation steps with GradientAccumulationPlugin{sync_each_batch=true}.
function M.backward(acc, loss, opts)
  local r = acc._ddp_reducer
  -- GradientAccumulationPlugin{sync_each_batch=true}: the micro-steps of a window communicate too (not inside no_sync)
  local in_no_sync = rawget(acc, "_in_no_sync") or
    (rawget(acc, "_local_sgds") ~= nil and require("fp8.local_sgd")._any_open(acc))   -- an open fp8.LocalSGD
  local each = acc.gradient_state.sync_each_batch
  if not r or in_no_sync or (acc.sync_gradients == false and not each) then return loss:backward(opts) end
  -- The reducer holds the parameters that were trainable at prepare. One unfrozen since (gradual unfreezing) would
  -- keep each process's own gradient and the weights would part without a word: refused on every process (each
  -- runs the same script, so each finds it here, before any collective).
  local set = acc._ddp_param_set
  for mi, m in ipairs(acc._ddp_models or {}) do
    for _, p in ipairs(m:parameters()) do
      if not set[p] and p:requires_grad() then
        local name = "?"
        for _, nt in ipairs(m:named_parameters()) do if nt[2] == p then name = nt[1] break end end
        if #acc._ddp_models > 1 then name = ("model%d.%s"):format(mi, name) end
        error(("DDP: parameter '%s' was frozen (requires_grad false) when its model was prepared and is trainable now: "
          .. "its gradients would not be averaged and the processes' weights would part; to unfreeze it during "
          .. "training, prepare it trainable with DistributedDataParallelKwargs{find_unused_parameters=true} and "
          .. "freeze it after acc:prepare"):format(name), 0)
      end
    end
  end
  -- the first collective of a synchronising backward says what it is, as the collective utilities do: a process in
  -- another call (save_state or gather under `if acc:is_main_process()`) is one error on every process, where the
  -- bucket all-reduces met that call's collectives and both waited until the process group's timeout
  require("fp8.distributed")._announce(acc, "backward")
  r:begin()
  local ok, err = pcall(loss.backward, loss, opts)
  if not ok then
    pcall(r.finish, r, true)   -- the other processes learn of it in the same collectives, and raise too
    error(err, 0)
  end
  local fok, ferr = pcall(r.finish, r)
  if not fok then error((tostring(ferr):gsub("^lua/fp8/[^:]*:%d+: ", "")), 0) end
end

-- no_sync(acc, model, fn, ...): fn runs with gradient synchronisation off: a backward inside communicates nothing.
-- As Accelerate's (DDP's model.no_sync()), it leaves acc.sync_gradients alone, so a prepared optimizer's step
-- inside still steps (with this process's gradients).
function M.no_sync(acc, model, fn, ...)
  if type(fn) ~= "function" then error(("no_sync: expected (model, function), got a %s"):format(type(fn)), 3) end
  -- the model says whose synchronisation stops: one this accelerator prepared (Accelerate's no_sync of anything
  -- else, even a module it never wrapped, is a null context there: that model's gradients are still averaged)
  local prepared = false
  for _, m in ipairs(acc._models or {}) do prepared = prepared or m == model end
  if not prepared then
    error(("no_sync: model must be a model this accelerator prepared (acc:prepare(model)), got %s"):format(
      type(model) == "table" and getmetatable(model) and getmetatable(model).__name or type(model)), 3)
  end
  -- one reducer averages every prepared model's gradients together, so the block keeps all of them local, where
  -- Accelerate's no_sync(model) keeps only that model's
  local n = #(acc._ddp_models or {})
  if n > 1 then
    error(("no_sync: not supported with %d models under DDP: fp8lab averages their gradients together, so it would "
      .. "keep the other models' gradients local too, where Accelerate's no_sync(model) keeps only this one's; "
      .. "acc:accumulate(model1, model2, ...) skips the averaging of every model's micro-steps"):format(n), 3)
  end
  local prev_in = rawget(acc, "_in_no_sync")
  rawset(acc, "_in_no_sync", true)
  local res = table.pack(core._pcall_scoped("no_sync", fn, ...))
  rawset(acc, "_in_no_sync", prev_in)
  if not res[1] then error(res[2], 0) end
  return table.unpack(res, 2, res.n)
end

-- called from a user's code, these name themselves in their errors (fp8.opts.internal_functions; stop 101)
require("fp8.opts").internal_functions(M, "fp8.ddp")
return M
