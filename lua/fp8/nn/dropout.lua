-- dropout.lua — fp8.nn.Dropout(p=0.5): zeroes elements with probability p in training and scales
-- the rest by 1/(1-p); the identity in eval mode.
local Module = require "fp8.nn.module"
local F = require "fp8.nn.functional"

local Dropout = Module.class("Dropout")

function Dropout:__init(p)
  if type(p) == "table" then
    if p[1] ~= nil then error("Dropout: give p as Dropout(0.1) or Dropout{p=0.1}, got a list", 3) end
    p = require("fp8.opts").check("Dropout", p, { "p" }, 3).p   -- inplace is not offered (no in-place ops)
  end
  if p == nil then p = 0.5 end
  Dropout._check_p("Dropout", "p", p, 4)
  self.p = p
end

-- Refuses a dropout probability outside [0, 1] (NaN too) as `who`'s option `what`, at the given error level: the
-- GPT, TransformerBlock and CausalSelfAttention check their `dropout` before making their Dropout layers, so the
-- message names their option and the line that made them, not the line of the library that made the layer.
function Dropout._check_p(who, what, p, level)
  if type(p) ~= "number" or not (p >= 0 and p <= 1) then   -- `not (...)` also refuses NaN
    error(("%s: %s must be a probability in [0, 1], got %s"):format(who, what, require("fp8.opts").got(p)), level)
  end
end

function Dropout:forward(x)
  if not self.training or self.p == 0 then return x end
  return F.dropout(x, self.p, true)
end

function Dropout:extra_repr() return ("p=%g"):format(self.p) end

-- Whether m is a Dropout that passes its input through now (p = 0, or eval mode) with its class's forward: a
-- container may then add a residual before it rather than after it (TransformerBlock's adds in the GEMM's store).
function Dropout.is_identity(m)
  return Module.runs_forward_of(m, "Dropout") and (m.p == 0 or not m.training)
end

-- every public method refuses arguments past its parameters (fp8.opts.strict_arity)
require("fp8.opts").strict_arity(Dropout, "Dropout")
return Dropout
