-- local_sgd.lua — fp8.LocalSGD, Accelerate's accelerate.local_sgd.LocalSGD: each process takes its own optimizer
-- steps (its backwards communicate nothing, as inside acc:no_sync) and every local_sgd_steps calls of step() the
-- processes average their model's parameters; closing it averages them once more and ends the no_sync.
--   local local_sgd <close> = fp8.LocalSGD{accelerator = acc, model = model, local_sgd_steps = 8}
--   for x, y in loader do ...; opt:step(); opt:zero_grad(); local_sgd:step() end
-- Python's `with LocalSGD(...) as local_sgd:` is a <close> variable here (or local_sgd:close()).
local O = require "fp8.opts"
local D = require "fp8._dist"
local init = require "fp8.nn.init_fns"
local M = {}
local LocalSGD = {}
LocalSGD.__index = LocalSGD
LocalSGD.__name = "LocalSGD"

local VALID = { "accelerator", "model", "local_sgd_steps", "enabled" }
-- the distributed types Accelerate's LocalSGD takes; the rest (DeepSpeed, FSDP, XLA, Megatron-LM) it refuses
local SUPPORTED = { NO = true, MULTI_CPU = true, MULTI_GPU = true }

local function new(opts, ...)
  O.no_more("LocalSGD", "one options table {accelerator=, model=, local_sgd_steps=, enabled=true}", ...)
  if type(opts) ~= "table" then
    error(("LocalSGD: expected an options table {accelerator=, model=, local_sgd_steps=, enabled=true}, got %s")
      :format(O.got(opts)), 3)
  end
  O.check("LocalSGD", opts, VALID, 3)
  local acc, model, k, enabled = opts.accelerator, opts.model, opts.local_sgd_steps, opts.enabled
  -- by the class's name: a second copy of the module (package.loaded reset, as a test harness's insulation does)
  -- makes Accelerators whose metatable is not the one require() now returns
  if not O.is_a(acc, "Accelerator") then
    error(("LocalSGD: accelerator must be an fp8.Accelerator, got %s"):format(O.got(acc)), 3)
  end
  if not require("fp8.nn.module").is_module(model) then
    error(("LocalSGD: model must be an fp8.nn Module (the prepared model), got %s"):format(O.got(model)), 3)
  end
  if enabled == nil then enabled = true end
  if type(enabled) ~= "boolean" then
    error(("LocalSGD: enabled must be a boolean, got %s"):format(O.got(enabled)), 3)
  end
  if not SUPPORTED[acc.distributed_type] then
    error("LocalSGD: LocalSGD is supported only for CPUs and GPUs (no DeepSpeed or MegatronLM)", 3)
  end
  if acc.fp8_backend == "msamp" and acc.fp8_recipe and acc.fp8_recipe.opt_level == "O3" then
    -- (Accelerate's averages param.data and leaves MS-AMP's FP8 weight copies as they were)
    error("LocalSGD: MS-AMP opt_level O3 is not supported: the forward uses an E4M3 copy of each weight that only the "
      .. "optimizer's step re-casts, so averaged weights would not reach it; use opt_level O1 or O2", 3)
  end
  -- Accelerate takes any local_sgd_steps and fails at the first step (a modulo by None or 0): checked here
  -- (checked when given with enabled=false too: the switch scripts flip, which must not hide a bad value)
  if (enabled or k ~= nil) and (math.type(k) ~= "integer" or k < 1) then
    error(("LocalSGD: local_sgd_steps must be an integer >= 1 (or enabled=false), got %s"):format(O.got(k)), 3)
  end
  local self = setmetatable({ num_steps = 0, enabled = enabled and acc.distributed_type ~= "NO" }, LocalSGD)
  if self.enabled then
    -- one of this model still open is one never closed (Python's `with` ported as a plain local, no <close>): its
    -- no_sync stays on, so after it every backward kept each process's own gradients and the weights parted,
    -- without the average its close would have made
    for open in next, (M._open_set(acc)) do
      if open.model == model then
        error("LocalSGD: a LocalSGD of this model is still open (never closed: its no_sync keeps every backward's "
          .. "gradients local until it closes); close it first: `local local_sgd <close> = fp8.LocalSGD{...}` closes "
          .. "it at the end of its block, as Python's `with`, or call local_sgd:close()", 3)
      end
    end
    self.accelerator, self.model, self.local_sgd_steps = acc, model, k
    -- model.no_sync() entered: backwards communicate nothing while this LocalSGD is open. The accelerator keeps
    -- its open ones: closing removes this one in any order (a saved-and-restored flag stayed on when two closed out
    -- of order). One never closed stays open (not weakly kept: each process collects at its own time, so one would
    -- average while another did not, and the job hung)
    M._open_set(acc)[self] = true
  end
  return self
end

-- The accelerator's open LocalSGDs; ddp.backward reads it
function M._open_set(acc)
  local s = rawget(acc, "_local_sgds")
  if not s then s = {}; rawset(acc, "_local_sgds", s) end
  return s
end
function M._any_open(acc)
  local s = rawget(acc, "_local_sgds")
  return s ~= nil and next(s) ~= nil
end

-- the processes' parameters replaced by their mean, in place (optimizers keep holding them). The fp32 ones of a
-- device go in flat buffers of up to _bucket_elements (25 MB), one all-reduce each (the DDP reducer's 25 MB buckets;
-- Accelerate's LocalSGD makes one per parameter), so the copies it makes stay bounded; another dtype (a bf16 model,
-- FP8 bytes with their scale) is averaged as it is.
LocalSGD._bucket_elements = 25 * 1024 * 1024 // 4   -- (a test lowers it on an instance to make several buckets)
function LocalSGD:_sync_and_avg_model_params()
  local acc = self.accelerator
  acc:wait_for_everyone()
  local core = require "fp8.core"   -- (not the global fp8: a script may rebind it)
  core.no_grad(function()
    local flat, order = {}, {}
    for _, p in ipairs(self.model:parameters()) do
      if p:dtype() == "fp32" then
        local dev = p:device()
        if not flat[dev] then flat[dev] = {}; order[#order + 1] = dev end
        table.insert(flat[dev], p)
      else
        init.copy_(p, acc:reduce(p, "mean"))
      end
    end
    local function average(ps)   -- one bucket: its parameters flat, one all-reduce, the means copied back
      local parts = {}
      for i, p in ipairs(ps) do parts[i] = p:reshape({ -1 }) end
      local mean, at = #parts == 1 and parts[1]:clone() or core.cat(parts), 1
      if acc.num_processes > 1 then
        D.all_reduce(mean, "sum")
        mean = mean / acc.num_processes
      end
      for _, p in ipairs(ps) do
        local n = p:numel()
        init.copy_(p, mean:narrow(1, at, n):view(p:shape()))
        at = at + n
      end
    end
    -- one small all-reduce first: the processes' fp32 parameters must be the same count and size everywhere.
    -- fp8._dist's all_reduce checks each call's element count, but not the number of calls: a model with more
    -- buckets on one process would send its last one into the next collective there (or wait for ever).
    if acc.num_processes > 1 and #order > 0 then
      local n, k = 0, 0
      for _, dev in ipairs(order) do for _, p in ipairs(flat[dev]) do n, k = n + p:numel(), k + 1 end end
      local t = core.tensor({ n, -n, k, -k })
      D.all_reduce(t, "max")
      local v = t:totable()
      if v[1] ~= -v[2] or v[3] ~= -v[4] then
        error(("LocalSGD: the processes' models differ (fp32 parameters: %d to %d tensors, %d to %d elements): "
          .. "every process must average the same model"):format(-v[4], v[3], -v[2], v[1]), 0)
      end
    end
    for _, dev in ipairs(order) do
      local bucket, size, cap = {}, 0, self._bucket_elements
      for _, p in ipairs(flat[dev]) do
        if size > 0 and size + p:numel() > cap then average(bucket); bucket, size = {}, 0 end
        bucket[#bucket + 1] = p
        size = size + p:numel()
      end
      if #bucket > 0 then average(bucket) end
    end
  end)
end

function LocalSGD:step(...)
  O.no_more("LocalSGD:step", "no arguments", ...)
  if self._closed then error("LocalSGD:step: this LocalSGD was closed (make a new one for the next epoch)", 2) end
  self.num_steps = self.num_steps + 1
  if not self.enabled then return end
  if self.num_steps % self.local_sgd_steps == 0 then self:_sync_and_avg_model_params() end
end

-- Python's __exit__: a last average, then the no_sync ends. An error on the way out (a <close> after an error)
-- still ends the no_sync; the average is skipped then, since the other processes may not reach theirs.
function LocalSGD:close(err)
  if self._closed then return end
  self._closed = true
  if not self.enabled then return end
  local acc = self.accelerator
  local ok, e = true, nil
  if err == nil then ok, e = pcall(self._sync_and_avg_model_params, self) end
  M._open_set(acc)[self] = nil
  if not ok then error(e, 0) end
end
LocalSGD.__close = function(self, err) self:close(err) end
function LocalSGD:__tostring()
  return ("LocalSGD(enabled=%s, local_sgd_steps=%s, num_steps=%d)"):format(tostring(self.enabled),
    tostring(self.local_sgd_steps), self.num_steps)
end

local okh, help = pcall(require, "fp8.help")
if okh and help.add then
  help.add { section = "Accelerator & recipes", name = "LocalSGD",
    sig = "local local_sgd <close> = fp8.LocalSGD{accelerator=, model=, local_sgd_steps=, enabled=true}",
    doc = "Accelerate's LocalSGD: the model's backwards communicate nothing (no_sync) while it is open; every\n"
      .. "local_sgd_steps calls of local_sgd:step() the processes average the model's parameters, and closing it\n"
      .. "averages them once more. One process (distributed_type NO): disabled, step() only counts. A second one of\n"
      .. "the same model while one is still open (never closed) is refused." }
end

-- fp8.LocalSGD{...} is the constructor (its class is fp8.LocalSGD.LocalSGD, for getmetatable checks)
M.LocalSGD = LocalSGD
return setmetatable(M, { __call = function(_, ...) return new(...) end })
