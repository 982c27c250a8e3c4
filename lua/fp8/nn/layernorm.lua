-- layernorm.lua — fp8.nn.LayerNorm(normalized_shape [, {eps=1e-5, elementwise_affine=true, bias=true}])
-- over the last dimension; weight starts at ones, bias at zeros (PyTorch's defaults).
local O = require "fp8.opts"
local fp8 = require "fp8.core"   -- the C half only, so loading never recurses into fp8/init.lua
local Module = require "fp8.nn.module"
local F = require "fp8.nn.functional"

local LayerNorm = Module.class("LayerNorm")

function LayerNorm:__init(n, opts)
  local name = getmetatable(self).__name   -- the class being built: LayerNorm or FP8LayerNorm
  if type(n) == "table" and #n == 1 then n = n[1] end
  local len = type(n) == "table" and #n or 0
  if math.type(len) ~= "integer" then len = 0 end   -- a __len that gives no count
  if len > 8 then   -- more than any tensor's dims (and no loop over a length that lies)
    error(("%s: normalized_shape has %s entries; fp8lab normalizes over the last dimension only"):format(
      name, tostring(len)), 3)
  end
  if type(n) == "table" and len > 1 then
    local dims, prod = {}, 1
    for i = 1, len do dims[i] = tostring(n[i]); prod = math.type(n[i]) == "integer" and prod * n[i] or 0 / 0 end
    error(("%s: normalized_shape {%s} spans %d dimensions; fp8lab normalizes over the last one only (pass "
      .. "their product%s and reshape the input so its last dimension holds them)"):format(name,
      table.concat(dims, ", "), len, prod == prod and (", " .. math.tointeger(prod) .. ",") or ""), 3)
  end
  if math.type(n) ~= "integer" or n <= 0 then
    error(("%s: normalized_shape must be a positive integer (the last dimension), got %s"):format(name,
      type(n) == "table" and "an empty table" or type(n) == "number" and tostring(n) or type(n)), 3)
  end
  Module._check_size(name, 3, "normalized_shape", n)
  opts = opts or {}
  if type(opts) ~= "table" then error(("%s: options must be a table, got %s"):format(name, type(opts)), 3) end
  O.check(name, opts, { "bias", "elementwise_affine", "eps" }, 3)
  for _, k in ipairs { "bias", "elementwise_affine" } do
    if opts[k] ~= nil and type(opts[k]) ~= "boolean" then
      error(("%s: %s must be a boolean, got %s"):format(name, k, type(opts[k])), 3)
    end
  end
  if opts.eps ~= nil and (type(opts.eps) ~= "number" or not (opts.eps >= 0 and opts.eps < math.huge)) then
    error(("%s: eps must be a finite number >= 0, got %s"):format(name, O.got(opts.eps)), 3)
  end
  self.normalized_shape = n
  self.eps = opts.eps or 1e-5
  self.elementwise_affine = opts.elementwise_affine ~= false
  if self.elementwise_affine then
    self:register_parameter("weight", fp8.ones { n })
    if opts.bias ~= false then self:register_parameter("bias", fp8.zeros { n }) end
  end
end

function LayerNorm:forward(x)
  Module._check_features(self, x, self.normalized_shape)
  return F.layer_norm(x, self.weight, self.bias, self.eps)
end

-- Whether a container may run this LayerNorm and then nxt as nxt:forward_layernorm(x, ln), LayerNorm's output
-- cast to FP8 in its own pass (FP8Linear:forward_layernorm): ln runs LayerNorm's forward and nxt FP8Linear's (not
-- replaced by a subclass or on the instance), and the profiler does not time modules (it would lose the LayerNorm's
-- range).
function LayerNorm.fuses_into(ln, nxt)
  return Module.is_module(ln) and Module.is_module(nxt) and Module._call_hook == nil
    and Module.runs_forward_of(ln, "LayerNorm") and type(nxt.forward_layernorm) == "function"
    and Module.runs_forward_of(nxt, "FP8Linear")
end

function LayerNorm:extra_repr()
  -- bias= says whether there is one (torch's: bias=False without elementwise_affine too), so a printed model shows it
  return ("(%d,), eps=%g, elementwise_affine=%s, bias=%s"):format(self.normalized_shape, self.eps,
    tostring(self.elementwise_affine), tostring(self.bias ~= nil))
end

-- every public method refuses arguments past its parameters (fp8.opts.strict_arity)
O.strict_arity(LayerNorm, "LayerNorm")
return LayerNorm
