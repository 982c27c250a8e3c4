-- activations.lua — parameter-free activation modules: fp8.nn.ReLU(), fp8.nn.GELU([approximate]).
local Module = require "fp8.nn.module"
local O = require "fp8.opts"
local F = require "fp8.nn.functional"

local M = {}

M.ReLU = Module.class("ReLU")
function M.ReLU:forward(x) return F.relu(x) end

M.GELU = Module.class("GELU")
-- GELU() exact (erf), GELU("tanh") or GELU{approximate="tanh"} the tanh approximation.
function M.GELU:__init(approximate)
  if type(approximate) == "table" then approximate = O.check("GELU", approximate, { "approximate" }, 3).approximate end
  approximate = approximate or "none"
  if approximate ~= "none" and approximate ~= "tanh" then
    error(("GELU: approximate must be \"none\" or \"tanh\", got %s"):format(tostring(approximate)), 3)
  end
  self.approximate = approximate
end
function M.GELU:forward(x) return F.gelu(x, self.approximate) end
function M.GELU:extra_repr() return ("approximate='%s'"):format(self.approximate) end   -- 'none' too, as torch's

return M
