-- init_fns.lua — parameter initialisers (fp8.nn.init): new fp32 tensors drawn from the seeded
-- generator (fp8.manual_seed), in-place fills of existing ones. Each returns the tensor.
local fp8 = require "fp8.core"   -- the C half only, so loading never recurses into fp8/init.lua

local M = {}

-- uniform(shape, a, b) → U[a, b)
function M.uniform(shape, a, b)
  local t = fp8.rand(shape)
  if a == 0 and b == 1 then return t end
  return t * (b - a) + a
end

-- normal(shape, mean, std) → N(mean, std²)
function M.normal(shape, mean, std)
  local t = fp8.randn(shape)
  if (std or 1) ~= 1 then t = t * std end
  if (mean or 0) ~= 0 then t = t + mean end
  return t
end

function M.ones(shape) return fp8.ones(shape) end
function M.zeros(shape) return fp8.zeros(shape) end

-- Replace the values of an existing tensor (a parameter) in place, keeping its identity.
function M.copy_(dst, src) return require("fp8._optim").copy_(dst, src) end
function M.normal_(t, mean, std) return M.copy_(t, M.normal(t:shape(), mean or 0, std or 1)) end
function M.uniform_(t, a, b) return M.copy_(t, M.uniform(t:shape(), a or 0, b or 1)) end
function M.zeros_(t) return M.copy_(t, fp8.zeros(t:shape())) end
function M.ones_(t) return M.copy_(t, fp8.ones(t:shape())) end

return M
