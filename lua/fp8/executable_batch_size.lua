-- fp8.find_executable_batch_size — Accelerate's utility of that name (accelerate.utils.memory): run a training
-- function with a batch size, and on an out-of-memory error free what can be freed and run it again with a smaller
-- one (x 0.9 by default, as Accelerate 1.15), until it runs or the size reaches 0. The size found is kept for the
-- next call, as Accelerate's closure keeps it.
local O = require "fp8.opts"

local M = {}

-- What Accelerate's should_reduce_batch_size recognises, in fp8lab's words: every allocation failure of the core
-- (host or GPU: FL_ENOMEM, "... out of memory ...") and Lua's own ("not enough memory").
function M.is_out_of_memory(err)
  local s = tostring(err)
  return s:find("out of memory", 1, true) ~= nil or s:find("not enough memory", 1, true) ~= nil
end

local VALID = { "starting_batch_size", "reduce_batch_size_fn" }

-- find_executable_batch_size(fn [, {starting_batch_size=128, reduce_batch_size_fn=}]) -> a function that calls
-- fn(batch_size, ...) with its own arguments after the size.
function M.find_executable_batch_size(fn, opts, ...)
  O.no_more("find_executable_batch_size", "(fn [, {starting_batch_size=, reduce_batch_size_fn=}])", ...)
  if type(fn) ~= "function" then
    error(("find_executable_batch_size: expected the function to run, fn(batch_size, ...), got %s"):format(
      O.got(fn)), 2)
  end
  if opts ~= nil and type(opts) ~= "table" then
    error(("find_executable_batch_size: options must be a table {starting_batch_size=, reduce_batch_size_fn=}, "
      .. "got %s"):format(O.got(opts)), 2)
  end
  opts = O.check("find_executable_batch_size", opts or {}, VALID, 2)
  local batch_size = opts.starting_batch_size == nil and 128 or opts.starting_batch_size
  if math.type(batch_size) ~= "integer" or batch_size < 1 then
    error(("find_executable_batch_size: starting_batch_size must be an integer >= 1, got %s"):format(
      O.got(batch_size)), 2)
  end
  local reduce = opts.reduce_batch_size_fn
  if reduce ~= nil and type(reduce) ~= "function" then
    error(("find_executable_batch_size: reduce_batch_size_fn must be a function returning the next batch size, "
      .. "got %s"):format(O.got(reduce)), 2)
  end
  reduce = reduce or function() return math.floor(batch_size * 0.9) end
  local nparams, vararg = debug.getinfo(fn, "u").nparams, debug.getinfo(fn, "u").isvararg
  return function(...)
    -- Accelerate's guard: the size is the function's first parameter, given here, not by the caller
    if nparams == 0 and not vararg then
      error("find_executable_batch_size: the function takes no parameters; it must take the batch size first", 2)
    elseif not vararg and select("#", ...) + 1 > nparams then
      error(("find_executable_batch_size: the function takes %d parameter%s (the batch size first, which is "
        .. "passed for you), got %d more argument%s: leave the batch size out of the call"):format(nparams,
        nparams == 1 and "" or "s", select("#", ...), select("#", ...) == 1 and "" or "s"), 2)
    end
    require("fp8").release_memory()   -- (not the global fp8: a script may rebind it)
    while true do
      if batch_size == 0 then error("find_executable_batch_size: no executable batch size found, reached zero", 2) end
      local res = table.pack(pcall(fn, batch_size, ...))
      if res[1] then return table.unpack(res, 2, res.n) end
      if not M.is_out_of_memory(res[2]) then error(res[2], 0) end
      require("fp8").release_memory()
      local nb = reduce()
      if math.type(nb) ~= "integer" or nb < 0 or nb >= batch_size then
        error(("find_executable_batch_size: reduce_batch_size_fn must return an integer in 0..%d (smaller than "
          .. "the batch size that ran out of memory), got %s"):format(batch_size - 1, O.got(nb)), 2)
      end
      batch_size = nb
    end
  end
end

local okh, help = pcall(require, "fp8.help")
if okh and help.add then
  help.add { section = "Accelerator & recipes", name = "find_executable_batch_size",
    sig = "f = fp8.find_executable_batch_size(function(batch_size, ...) ... end [, {starting_batch_size=128, "
      .. "reduce_batch_size_fn=}])",
    doc = "Accelerate's: f(...) runs the function with a batch size; on an out-of-memory error it frees memory and\n"
      .. "runs it again with batch_size x 0.9 (or what reduce_batch_size_fn() returns), until it runs; an error of\n"
      .. "another kind is raised as it is, and reaching 0 is an error. The size found is kept for the next call." }
end

return M
