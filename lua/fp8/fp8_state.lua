-- fp8.fp8_state — an FP8 layer's recipe state as one fp32 tensor, the buffer `fp8_state` that
-- state_dict()/load_state_dict() and every checkpoint carry (docs/checkpoints.md): pack(state) and
-- unpack(tensor), with the layout's version and role order.
local core = require "fp8.core"

local M = {}

-- Recipe state as a buffer, so state_dict()/load_state_dict() (and every checkpoint made from them)
-- carry it in full: [version, roles, then per role: scale, updates, warm, history length, history...].
-- Layout 1 (before MS-AMP's warm-up count `warm` existed) had no warm; it still reads (warm-up over).
local STATE_VERSION = 2
local STATE_ROLES = { "input", "weight", "grad" }
M.ROLES = STATE_ROLES
function M.pack(st)
  local flat = { STATE_VERSION, #STATE_ROLES }
  for _, r in ipairs(STATE_ROLES) do
    local s = st[r]
    flat[#flat + 1] = s.scale; flat[#flat + 1] = s.updates; flat[#flat + 1] = s.warm or 0; flat[#flat + 1] = #s.history
    for _, h in ipairs(s.history) do flat[#flat + 1] = h end
  end
  return core.tensor(flat)
end

function M.unpack(t)
  if not core.is_tensor(t) or t:dim() ~= 1 then
    error("FP8 recipe state: expected a 1-d tensor, got " .. (core.is_tensor(t) and ("%d-d"):format(t:dim()) or type(t)), 3)
  end
  local flat = t:totable()
  local version = flat[1]
  if (version ~= 1 and version ~= STATE_VERSION) or flat[2] ~= #STATE_ROLES then
    error(("FP8 recipe state: unknown layout (version %s, %s roles; this build reads versions 1 and %d)"):format(
      tostring(flat[1]), tostring(flat[2]), STATE_VERSION), 3)
  end
  local head = version == 1 and 2 or 3   -- values before the history length
  local st, i = {}, 3
  for _, r in ipairs(STATE_ROLES) do
    local n = math.tointeger(flat[i + head])
    if type(flat[i]) ~= "number" or not n or n < 0 or i + head + n > #flat then
      error(("FP8 recipe state: truncated or corrupt at the %s role (%d values)"):format(r, #flat), 3)
    end
    -- the counts as integers where they are whole numbers, else as they are (NaN, 1.5), for the layer's check to name
    local s = { scale = flat[i], updates = math.tointeger(flat[i + 1]) or flat[i + 1], history = {} }
    if version >= 2 then s.warm = math.tointeger(flat[i + 2]) or flat[i + 2] end
    for k = 1, n do s.history[k] = flat[i + head + k] end
    st[r], i = s, i + head + 1 + n
  end
  if i - 1 ~= #flat then error(("FP8 recipe state: %d values, the layout needs %d"):format(#flat, i - 1), 3) end
  return st
end

return M
