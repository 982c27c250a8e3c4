-- accumulation_plugin.lua — fp8.GradientAccumulationPlugin{...}, Accelerate's GradientAccumulationPlugin: how
-- gradient accumulation runs, given to fp8.Accelerator{gradient_accumulation_plugin=...} instead of
-- gradient_accumulation_steps (docs/lua-api.md, "Gradient accumulation"):
--   num_steps             micro-steps per optimizer step (an integer >= 1; 1 when left out, as Accelerate's None)
--   sync_with_dataloader  true: a prepared loader's last batch ends the window (the default)
--   sync_each_batch       true: under several processes the gradients are averaged after every micro-step
--                         (less memory held in flight in Accelerate; the same sums), not only at the window's end
--   adjust_scheduler      true (the default) only: in Accelerate false only stops counting scheduler calls for
--                         torch's step-order warning, which fp8lab's schedulers do not give, so it is refused
local O = require "fp8.opts"

local Plugin = { __name = "GradientAccumulationPlugin" }
Plugin.__index = Plugin

local KEYS = { "num_steps", "adjust_scheduler", "sync_with_dataloader", "sync_each_batch" }

setmetatable(Plugin, { __call = function(_, opts, ...)
  O.no_more("GradientAccumulationPlugin", "one options table {num_steps=, ...}", ...)
  if type(opts) ~= "table" then
    error(("GradientAccumulationPlugin: expected an options table {num_steps=...}, got %s"):format(type(opts)), 2)
  end
  O.check("GradientAccumulationPlugin", opts, KEYS, 2)
  local n = opts.num_steps
  if n == nil then n = 1 end   -- Accelerate's default None: its GradientState reads 1
  if math.type(n) ~= "integer" or n < 1 then
    error(("GradientAccumulationPlugin: num_steps must be an integer >= 1, got %s"):format(O.got(n)), 2)
  end
  local self = setmetatable({ num_steps = n }, Plugin)
  for _, k in ipairs { "adjust_scheduler", "sync_with_dataloader", "sync_each_batch" } do
    local v = opts[k]
    if v ~= nil and type(v) ~= "boolean" then
      error(("GradientAccumulationPlugin: %s must be a boolean, got %s"):format(k, type(v)), 2)
    end
    if v == nil then v = k ~= "sync_each_batch" end   -- Accelerate's defaults: true, true, false
    if k == "adjust_scheduler" and v == false then
      error("GradientAccumulationPlugin: adjust_scheduler=false is not supported: in Accelerate it only stops counting "
        .. "the scheduler calls of accumulation steps for torch's step-order warning, which fp8lab's schedulers do not "
        .. "give; a prepared scheduler steps once per real step either way (leave it true)", 2)
    end
    self[k] = v
  end
  return self
end })

function Plugin:__tostring()
  return ("GradientAccumulationPlugin{num_steps=%d, adjust_scheduler=%s, sync_with_dataloader=%s, sync_each_batch=%s}")
    :format(self.num_steps, tostring(self.adjust_scheduler), tostring(self.sync_with_dataloader),
      tostring(self.sync_each_batch))
end

function Plugin.is_plugin(v) return require("fp8.opts").is_a(v, "GradientAccumulationPlugin") end

local okh, help = pcall(require, "fp8.help")
if okh and help.add then
  help.add { section = "Accelerator & recipes", name = "GradientAccumulationPlugin",
    sig = "fp8.GradientAccumulationPlugin{num_steps=1, sync_with_dataloader=true, sync_each_batch=false, adjust_scheduler=true}",
    doc = "Accelerate's plugin, for fp8.Accelerator{gradient_accumulation_plugin=...} (instead of gradient_accumulation_steps).\n"
       .. "sync_with_dataloader=false: the loader's last batch does not end the window. sync_each_batch=true: under several\n"
       .. "processes gradients are averaged after every micro-step. adjust_scheduler=false is refused (in Accelerate it only\n"
       .. "feeds a torch warning fp8lab's schedulers do not give). GradientAccumulationPlugin.is_plugin(v): whether v is\n"
       .. "one." }
  help.ALIASES["GradientAccumulationPlugin.is_plugin"] = "GradientAccumulationPlugin"
end

-- every public method refuses arguments past its parameters (fp8.opts.strict_arity)
O.strict_arity(Plugin, "GradientAccumulationPlugin")
return Plugin
