-- activations.lua — parameter-free activation modules: fp8.nn.ReLU(), fp8.nn.GELU([approximate]), fp8.nn.SiLU(),
-- fp8.nn.Sigmoid(), fp8.nn.Tanh(), fp8.nn.Softmax([dim=-1]) (torch's; torch's Softmax() without dim picks one by
-- the input's rank and warns, so here it is the last dim, as its modern default).
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

M.SiLU = Module.class("SiLU")
function M.SiLU:forward(x) return F.silu(x) end
M.Sigmoid = Module.class("Sigmoid")
function M.Sigmoid:forward(x) return F.sigmoid(x) end
M.Tanh = Module.class("Tanh")
function M.Tanh:forward(x) return F.tanh(x) end

M.Softmax = Module.class("Softmax")
-- Softmax([dim=-1]) (or {dim=})
function M.Softmax:__init(dim)
  if type(dim) == "table" then dim = O.check("Softmax", dim, { "dim" }, 3).dim end
  dim = dim or -1
  if math.type(dim) ~= "integer" or dim == 0 then
    error(("Softmax: dim must be a nonzero integer (1-based, negative from the end), got %s"):format(O.got(dim)), 3)
  end
  self.dim = dim
end
function M.Softmax:forward(x) return F.softmax(x, self.dim) end
function M.Softmax:extra_repr() return ("dim=%d"):format(self.dim) end

return M
