-- module_list.lua — fp8.nn.ModuleList{m1, m2, ...}: torch's ModuleList, a list of layers that are registered as
-- submodules (their parameters are the model's, state_dict keys "0.weight", ...; :to, the FP8 conversion and DDP
-- see them) without running them: the model's own forward does, in its order (for _, m in ipairs(list) do ... end).
-- A plain Lua table of layers registers nothing (Module lists its children: a notice says so). Its positions and
-- list methods are Sequential's (l[i] 1-based and negative from the end, #l, l[i] = m, append, extend, insert, pop),
-- and calling it is refused, as torch's ModuleList has no forward.
local Module = require "fp8.nn.module"
local Sequential = require "fp8.nn.sequential"
local O = require "fp8.opts"

local ModuleList = Module.class("ModuleList", Sequential)

-- ModuleList([{m1, m2, ...} | another ModuleList or Sequential]): torch's ModuleList(modules=None).
function ModuleList:__init(modules)
  if modules == nil then return end
  if Module.is_module(modules) and modules.__getitem == nil then
    error(("ModuleList: expected a list of Modules ({m1, m2, ...}), got a %s (wrap it: ModuleList{m})")
      :format(modules:type_name()), 3)
  end
  if type(modules) ~= "table" then
    error(("ModuleList: expected a list of Modules ({m1, m2, ...}), got %s"):format(O.got(modules)), 3)
  end
  local ok, err = pcall(self.extend, self, modules)
  if not ok then error((tostring(err):gsub("^ModuleList:extend: ", "ModuleList: ")), 3) end
end

function ModuleList:forward(...)
  error("ModuleList has no forward: it holds layers for the model's own forward to run (for _, m in "
    .. "ipairs(list) do x = m(x) end), as torch's; fp8.nn.Sequential runs its layers in order", 0)
end

O.strict_arity(ModuleList, "ModuleList")
return ModuleList
