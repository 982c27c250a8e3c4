-- fp8.stats — what the FP8 layers' scaling state shows: per layer and role (input, weight, grad) the
-- format, scale, amax of the last cast and over the history, underflow and saturation; of a live model,
-- or of the recipe state a state dict or checkpoint holds. The Accelerator's log_fp8_stats writes the
-- same rows to CSV.
local unplaced = require("fp8.errfmt").unplaced   -- an error's text without its "file:line: "
local O = require "fp8.opts"
local core = require "fp8.core"
local Module = require "fp8.nn.module"
local convert = require "fp8.convert"
local state = require "fp8.fp8_state"

local M = {}

-- The rows come back as a list whose metatable gives it a one-line text, as fp8.explain's and fp8.hist's
-- results: at the prompt the table printed above is followed by that line, not by every field of every row
-- (a checkpoint's rows echoed their whole amax histories, 1024 numbers a role).
local Rows = { __name = "fp8.StatsRows" }
function Rows.__tostring(rows)
  -- the FP8 all-reduce's row (several processes under MS-AMP) is no layer: it was counted as one until stop 95
  local layers, seen, reduce = 0, {}, false
  for _, r in ipairs(rows) do
    if r.rule == "allreduce" then reduce = true
    elseif not seen[r.layer] then seen[r.layer], layers = true, layers + 1 end
  end
  if #rows == 0 then return "fp8.stats: no rows" end
  return ("fp8.stats: %d rows of %d layer%s%s (rows[i].layer, .role, .scale, ...: help(\"stats\"))"):format(#rows,
    layers, layers == 1 and "" or "s", reduce and " and the all-reduce" or "")
end

-- stats(model [, {quiet=true}]) → list of rows {layer, role, format, scale, amax, amax_history,
-- underflow, saturated, nan, numel} (fractions of the last cast), printed as a table unless quiet.
-- stats(state_dict) (a table from model:state_dict() or fp8.load_file of a checkpoint's model file):
-- the recipe state saved in each "<layer>.fp8_state" — per role the scale, the largest amax in the
-- history, the update count and the history length (docs/checkpoints.md).
local function saved_stats(sd, opts)
  local names = {}
  for k, v in next, sd do
    if type(k) == "string" and k:match("fp8_state$") and core.is_tensor(v) then names[#names + 1] = k end
  end
  table.sort(names)
  local rows = {}
  for _, k in ipairs(names) do
    local ok, st = pcall(state.unpack, sd[k])
    if not ok then error(("fp8.stats: %s: %s"):format(k, unplaced(st)), 3) end
    for _, r in ipairs(state.ROLES) do
      local s, amax = st[r], 0
      -- a NaN in the history shows as NaN, as a live model's row shows it (it kept the old scale)
      for _, h in ipairs(s.history) do if h > amax or h ~= h then amax = h end end
      rows[#rows + 1] = { layer = k:gsub("%.?fp8_state$", ""), role = r, scale = s.scale,
                          amax_history = amax, updates = s.updates, history = s.history }
    end
  end
  if not (type(opts) == "table" and opts.quiet) then
    if #rows == 0 then print("fp8.stats: no fp8_state entries in this table (not a state dict of an FP8 model)")
    else
      print(("%-28s %-11s %12s %11s %8s %7s"):format("layer", "role", "scale", "amax(hist)", "updates", "history"))
      for _, r in ipairs(rows) do
        -- (a corrupt count, NaN or 1.5, is shown as it is: load_state_dict refuses it)
        local upd = math.tointeger(r.updates) and ("%d"):format(r.updates) or r.updates ~= r.updates and "nan"
          or tostring(r.updates)
        print(("%-28s %-11s %12.5g %11.4g %8s %7d"):format(r.layer, r.role, r.scale, r.amax_history, upd, #r.history))
      end
    end
  end
  return setmetatable(rows, Rows)
end

function M.stats(model, opts, ...)
  O.no_more("fp8.stats", "(model or state dict [, {quiet=}])", ...)
  O.check("fp8.stats", opts, { "quiet" }, 2)
  if type(opts) == "table" and opts.quiet ~= nil and type(opts.quiet) ~= "boolean" then
    error(("fp8.stats: quiet must be a boolean, got %s"):format(O.got(opts.quiet)), 2)
  end
  if type(model) == "table" and not Module.is_module(model) then return saved_stats(model, opts) end
  if not Module.is_module(model) then error(("fp8.stats: expected a Module or a state dict, got %s"):format(type(model)), 2) end
  local rows = {}
  for _, nm in ipairs(convert.fp8_layers(model)) do
    local st = nm[2].fp8_meta:state()
    -- torchao's rowwise recipes scale per row (and per column for wgrad), a fresh scale at each cast: the role's
    -- one scale stays 1 and means nothing, so the row says per_row and its scale is NaN
    local per_row = st.granularity ~= "tensor"
    for _, r in ipairs(state.ROLES) do
      local s = st[r]
      local n = s.numel > 0 and s.numel or 1
      rows[#rows + 1] = { layer = nm[1], role = r, format = s.format, scale = per_row and 0 / 0 or s.scale,
                          per_row = per_row,
                          amax = s.amax, amax_history = s.amax_history_max, rule = s.rule, updates = s.updates,
                          underflow = s.underflow / n, saturated = s.saturated / n, nan = s.nan / n, numel = s.numel,
                          high_precision = (r == "input" and st.hp[1]) or false }
    end
  end
  -- several processes, MS-AMP: the FP8 weight-gradient all-reduce of the last step (lua/fp8/ddp.lua)
  local dstats = rawget(model, "_ddp_stats")
  if dstats then
    local d = dstats()
    if d and d.fp8_n > 0 then
      rows[#rows + 1] = { layer = "(all-reduce)", role = "weight_grad", format = "e4m3", scale = 0 / 0, amax = 0 / 0,
                          nan = 0, amax_history = 0 / 0, rule = "allreduce", updates = d.steps, numel = d.fp8_n,
                          underflow = d.fp8_underflow / d.fp8_n, saturated = d.fp8_saturated / d.fp8_n,
                          high_precision = false }
    end
  end
  if not (type(opts) == "table" and opts.quiet) then
    if #rows == 0 then print("fp8.stats: the model has no FP8 layers (convert it, or prepare it with an fp8 Accelerator)")
    else
      print(("%-28s %-11s %-5s %12s %11s %11s %9s %9s"):format("layer", "role", "fmt", "scale", "amax", "amax(hist)",
        "underflow", "saturated"))
      for _, r in ipairs(rows) do
        local scale = r.per_row and "per row" or ("%12.5g"):format(r.scale)
        print(("%-28s %-11s %-5s %12s %11.4g %11.4g %8.3f%% %8.3f%%"):format(r.layer, r.role, r.format, scale, r.amax,
          r.amax_history, 100 * r.underflow, 100 * r.saturated))
      end
    end
  end
  return setmetatable(rows, Rows)
end

local add = require("fp8.help").adder("Accelerator & recipes")
add("stats", "fp8.stats(model [, {quiet=true}]) -> rows",
  "Per FP8 layer and tensor role (input, weight, grad: the output gradient): format, current scale (\"per row\"\n"
  .. "under ao's rowwise recipes, which make a scale per row at each cast: per_row=true, scale NaN), amax of the last\n"
  .. "cast (NaN when the cast met a NaN) and over the history, fraction of values that underflowed to zero and that\n"
  .. "saturated (rows also hold nan, the fraction of NaNs).\n"
  .. "Printed as a table; call it after each step at the prompt to watch the scales adapt. The rows it returns\n"
  .. "(a list of tables) echo at the prompt as one line: fp8.stats(m)[1].scale reads one.\n"
  .. "fp8.stats(fp8.load_file(\"ckpt/model.safetensors\")) shows the recipe state a checkpoint holds.")

return M
