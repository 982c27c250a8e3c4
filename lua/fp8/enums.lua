-- enums.lua — Accelerate's string enums (accelerate.utils.DistributedType, DDPCommunicationHookType, FP8BackendType) as
-- Lua tables:
-- a member is its value, a string, so `acc.distributed_type == fp8.DistributedType.MULTI_GPU` reads as in Python and
-- a handler takes the member or the plain string. A name that is no member raises, as Python's AttributeError does (a
-- misspelt member would otherwise be nil and every comparison with it false); calling the enum with a value checks it
-- and returns it, as `DDPCommunicationHookType("fp16")` does.
local M = {}

local function enum(name, members)   -- members: list of {NAME, value}, in Accelerate's order
  local by_name, values, order = {}, {}, {}
  for i, m in ipairs(members) do by_name[m[1]] = m[2]; values[m[2]] = true; order[i] = m[1] end
  return setmetatable({}, {
    __name = name,
    __index = function(_, k)
      if by_name[k] ~= nil then return by_name[k] end
      error(("%s has no member %s (members: %s)"):format(name, tostring(k), table.concat(order, ", ")), 2)
    end,
    __newindex = function() error(name .. " is read-only", 2) end,
    __call = function(_, v)
      if values[v] then return v end
      local vs = {}
      for i, m in ipairs(members) do vs[i] = ("%q"):format(m[2]) end
      error(("%s(%s): not a valid %s (valid: %s)"):format(name, type(v) == "string" and ("%q"):format(v) or tostring(v),
        name, table.concat(vs, ", ")), 2)
    end,
    __pairs = function() local i = 0
      return function() i = i + 1; if order[i] then return order[i], by_name[order[i]] end end
    end,
    __tostring = function() return "fp8." .. name end,
  })
end

-- What acc.distributed_type holds: NO (one process), MULTI_CPU or MULTI_GPU (several, on the CPU or on GPUs); the
-- other members are engines fp8lab does not have, there so that a script's comparison with them reads (and is false).
M.DistributedType = enum("DistributedType", {
  { "NO", "NO" }, { "MULTI_CPU", "MULTI_CPU" }, { "MULTI_GPU", "MULTI_GPU" }, { "MULTI_NPU", "MULTI_NPU" },
  { "MULTI_MLU", "MULTI_MLU" }, { "MULTI_SDAA", "MULTI_SDAA" }, { "MULTI_MUSA", "MULTI_MUSA" },
  { "MULTI_XPU", "MULTI_XPU" }, { "DEEPSPEED", "DEEPSPEED" }, { "FSDP", "FSDP" }, { "XLA", "XLA" },
  { "MEGATRON_LM", "MEGATRON_LM" }, { "MULTI_HPU", "MULTI_HPU" }, { "MULTI_NEURON", "MULTI_NEURON" } })

-- DistributedDataParallelKwargs' comm_hook and comm_wrapper values (the PowerSGD ones are refused by prepare)
M.DDPCommunicationHookType = enum("DDPCommunicationHookType", {
  { "NO", "no" }, { "FP16", "fp16" }, { "BF16", "bf16" }, { "POWER_SGD", "power_sgd" },
  { "BATCHED_POWER_SGD", "batched_power_sgd" } })

-- What acc.fp8_backend holds under mixed_precision="fp8" (nil otherwise): fp8lab's lower-case names, so that
-- `acc.fp8_backend == fp8.FP8BackendType.TE` reads as in Accelerate
M.FP8BackendType = enum("FP8BackendType", { { "TE", "te" }, { "MSAMP", "msamp" }, { "AO", "ao" } })

return M
