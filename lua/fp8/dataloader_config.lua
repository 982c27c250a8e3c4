-- dataloader_config.lua — fp8.DataLoaderConfiguration{...}, Accelerate's dataloader_config= (docs/distributed.md,
-- "Data loaders"). split_batches, even_batches and data_seed change what prepared loaders hand out, and
-- use_stateful_dataloader whether load_state puts a loader back at its saved position in the epoch (true) or at the
-- start of that epoch (false, Accelerate's default, whose resume recipes skip the done batches themselves); the
-- other fields are taken at the values that describe fp8lab's loaders and refused, with the reason, at the others.
local O = require "fp8.opts"

local M = {}

local FIELDS = { "split_batches", "dispatch_batches", "even_batches", "use_seedable_sampler", "data_seed",
  "non_blocking", "use_stateful_dataloader" }

-- field = {the value refused, why}
local REFUSED = {
  dispatch_batches = { true, "every process reads its own share of a prepared loader (dispatch_batches=false); the "
    .. "main process does not read and send the batches" },
  use_seedable_sampler = { false, "fp8lab's loaders always shuffle by their seed and epoch, the seedable sampler's "
    .. "way (pass true, or leave it out)" },
  non_blocking = { true, "batches are copied to the device synchronously (fp8lab has no pinned host memory)" },
}

local DataLoaderConfiguration = { __name = "DataLoaderConfiguration" }
DataLoaderConfiguration.__index = DataLoaderConfiguration

-- fp8.DataLoaderConfiguration{even_batches=true, use_seedable_sampler=, data_seed=, split_batches=false,
-- dispatch_batches=false, non_blocking=false, use_stateful_dataloader=false}
function M.new(opts, ...)
  O.no_more("DataLoaderConfiguration", "({even_batches=, data_seed=, ...})", ...)
  opts = opts or {}
  if type(opts) ~= "table" then
    error(("DataLoaderConfiguration: expected an options table, got %s"):format(type(opts)), 2)
  end
  O.check("DataLoaderConfiguration", opts, FIELDS, 2)
  for _, k in ipairs(FIELDS) do
    local v = opts[k]
    if k == "data_seed" then
      if v ~= nil and math.type(v) ~= "integer" then
        error(("DataLoaderConfiguration: data_seed must be an integer, got %s"):format(O.got(v)), 2)
      end
    elseif v ~= nil and type(v) ~= "boolean" then
      error(("DataLoaderConfiguration: %s must be a boolean, got %s"):format(k, type(v)), 2)
    end
    local r = REFUSED[k]
    if r and v == r[1] then
      error(("DataLoaderConfiguration: %s=%s is not supported: %s"):format(k, tostring(v), r[2]), 2)
    end
  end
  if opts.data_seed ~= nil and opts.use_seedable_sampler ~= true then
    error("DataLoaderConfiguration: data_seed seeds the seedable sampler: pass use_seedable_sampler=true with it (in "
      .. "Accelerate it has no effect without)", 2)
  end
  return setmetatable({ split_batches = opts.split_batches == true, dispatch_batches = false,
    even_batches = opts.even_batches ~= false,
    use_seedable_sampler = true, data_seed = opts.data_seed, non_blocking = false,
    use_stateful_dataloader = opts.use_stateful_dataloader == true },
    DataLoaderConfiguration)
end

function DataLoaderConfiguration:__tostring()
  local parts = {}
  for _, k in ipairs(FIELDS) do parts[#parts + 1] = ("%s=%s"):format(k, tostring(self[k])) end
  return "DataLoaderConfiguration(" .. table.concat(parts, ", ") .. ")"
end

-- from(dlc, even_batches, level) -> the accelerator's configuration from its options dataloader_config= and the
-- older even_batches= (Accelerate took it on the Accelerator before its DataLoaderConfiguration): one of them.
function M.from(dlc, even_batches, level)
  if dlc ~= nil and not O.is_a(dlc, "DataLoaderConfiguration") then
    error(("Accelerator: dataloader_config must be an fp8.DataLoaderConfiguration{...}, got %s"):format(type(dlc)),
      level + 1)
  end
  if even_batches ~= nil and type(even_batches) ~= "boolean" then
    error(("Accelerator: even_batches must be a boolean, got %s"):format(type(even_batches)), level + 1)
  end
  if dlc and even_batches ~= nil then
    error("Accelerator: even_batches given twice: pass it in fp8.DataLoaderConfiguration{even_batches=...} only",
      level + 1)
  end
  return dlc or M.new { even_batches = even_batches }
end

local okh, help = pcall(require, "fp8.help")
if okh and help.add then
  help.add { section = "Accelerator & recipes", name = "DataLoaderConfiguration",
    sig = "fp8.DataLoaderConfiguration{even_batches=true, use_seedable_sampler=, data_seed=, ...}",
    doc = "Accelerate's data loader settings, passed as fp8.Accelerator{dataloader_config=...}. split_batches=true:\n"
      .. "under N processes each takes batch_size / N samples of every batch (batch_size is the step's total; it\n"
      .. "must divide by N), and a prepared scheduler steps once per optimizer step, not N times. even_batches=false:\n"
      .. "the last round of batches is not completed with repeats; use_seedable_sampler=true, data_seed=N: every\n"
      .. "prepared shuffling loader shuffles by N and the epoch. use_stateful_dataloader=true: acc:load_state\n"
      .. "puts each prepared loader back at its saved batch, so the next loop finishes the interrupted epoch;\n"
      .. "false (the default, Accelerate's): at the start of that epoch, in the same shuffled order, for the\n"
      .. "resume recipes that skip the done batches themselves (acc:skip_first_batches, or a loop's own count).\n"
      .. "dispatch_batches and non_blocking are taken at fp8lab's own ways and refused, with the reason, at the others." }
end

-- every public method refuses arguments past its parameters (fp8.opts.strict_arity)
O.strict_arity(DataLoaderConfiguration, "DataLoaderConfiguration")
-- called from a user's code, these name themselves in their errors (fp8.opts.internal_functions; stop 101)
require("fp8.opts").internal_functions(M, "fp8.dataloader_config")
return M
