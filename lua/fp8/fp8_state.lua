-- fp8.fp8_state — an FP8 layer's recipe state as one fp32 tensor, the buffer `fp8_state` that
-- state_dict()/load_state_dict() and every checkpoint carry (docs/checkpoints.md): pack(state) and
-- unpack(tensor), with the layout's version and role order.
local core = require "fp8.core"

local M = {}

-- Recipe state as a buffer, so state_dict()/load_state_dict() (and every checkpoint made from them)
-- carry it in full: [version, roles, then per role: format, scale, updates, warm, history length, history...].
-- format is the FP8 format the role's scale is for (1 e4m3, 2 e5m2; 0 not recorded): a HYBRID grad scale is for
-- E5M2's range, 128 times an E4M3 one, so a layer of another format refuses it. Older layouts still read: layout 2
-- (before 2026-12-01) had no format, layout 1 (before MS-AMP's warm-up count `warm` existed) no warm either
-- (warm-up over).
local STATE_VERSION = 3
local STATE_ROLES = { "input", "weight", "grad" }
local FORMATS = { "e4m3", "e5m2" }
local FORMAT_CODE = { e4m3 = 1, e5m2 = 2 }
M.ROLES = STATE_ROLES
function M.pack(st)
  local flat = { STATE_VERSION, #STATE_ROLES }
  for _, r in ipairs(STATE_ROLES) do
    local s = st[r]
    flat[#flat + 1] = FORMAT_CODE[s.format] or 0
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
  if (version ~= 1 and version ~= 2 and version ~= STATE_VERSION) or flat[2] ~= #STATE_ROLES then
    error(("FP8 recipe state: unknown layout (version %s, %s roles; this build reads versions 1 to %d)"):format(
      tostring(flat[1]), tostring(flat[2]), STATE_VERSION), 3)
  end
  local fmt = version >= 3 and 1 or 0          -- values before the scale
  local head = fmt + (version == 1 and 2 or 3) -- values before the history length
  local st, i = {}, 3
  for _, r in ipairs(STATE_ROLES) do
    local n = math.tointeger(flat[i + head])
    if type(flat[i]) ~= "number" or not n or n < 0 or i + head + n > #flat then
      error(("FP8 recipe state: truncated or corrupt at the %s role (%d values)"):format(r, #flat), 3)
    end
    local code = fmt == 1 and math.tointeger(flat[i]) or 0
    if code == nil or (code ~= 0 and not FORMATS[code]) then
      error(("FP8 recipe state: the %s role's format code is %s (1 e4m3, 2 e5m2, 0 not recorded)"):format(r,
        tostring(math.tointeger(flat[i]) or flat[i])), 3)
    end
    -- the counts as integers where they are whole numbers, else as they are (NaN, 1.5), for the layer's check to name
    local j = i + fmt
    local s = { format = FORMATS[code], scale = flat[j], updates = math.tointeger(flat[j + 1]) or flat[j + 1],
                history = {} }
    if version >= 2 then s.warm = math.tointeger(flat[j + 2]) or flat[j + 2] end
    for k = 1, n do s.history[k] = flat[i + head + k] end
    st[r], i = s, i + head + 1 + n
  end
  if i - 1 ~= #flat then error(("FP8 recipe state: %d values, the layout needs %d"):format(#flat, i - 1), 3) end
  return st
end

-- called from a user's code, these name themselves in their errors (fp8.opts.internal_functions; stop 101)
require("fp8.opts").internal_functions(M, "fp8.fp8_state")
return M
