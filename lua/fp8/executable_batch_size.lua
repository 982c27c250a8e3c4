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
  -- (the processes' refusal of a retry on some of them names the out of memory, and is no retry's: stop 105)
  if s:find("lowered only on every process at once", 1, true) then return false end
  return s:find("out of memory", 1, true) ~= nil or s:find("not enough memory", 1, true) ~= nil
end

local VALID = { "starting_batch_size", "reduce_batch_size_fn" }

-- DDP's error on a process whose own backward ran while another's failed (core/ddp.c): every process failed that
-- step at the same point (the step's failure flags are one collective), so it may join the retry of the others
local function peer_step_failed(err)
  return tostring(err):find("another process's backward failed", 1, true) ~= nil
end

-- With several processes (stop 105): a batch size lowered on one process only would leave the others running the
-- old one (their next collectives meeting this one's retry: a hang until the process group's timeout, or a wrong
-- pairing). Accelerate's decorator retries on each process by itself; here the processes agree first. Every process
-- whose function raised an out-of-memory error (or DDP's error for another's failed step) comes here: where all of
-- them are here at one batch size and one of them ran out of memory, all retry with the smaller size (true); where a
-- process went on instead (its next checked collective, a backward or a gather, meets this comparison: one error
-- on every process naming both, fp8.distributed's call comparison) or is at another size, every process raises
-- the lowest rank's message. A process in an unchecked collective meanwhile is ended by the watchdog.
local function agree_retry(batch_size, err)
  local D = require "fp8._dist"
  local n, rank = D.size(), D.rank()
  if n <= 1 then return M.is_out_of_memory(err) end
  local dist = require "fp8.distributed"
  local oom = M.is_out_of_memory(err)
  local what = oom and "ran out of memory" or "failed in DDP's step after another's failure"
  local mine = tostring(err):gsub("\n.*", "")
  local diff, same = dist._rank0_difference(rank, { "call find_executable_batch_size", "batch size " .. batch_size })
  if not same then
    local msg = ("find_executable_batch_size: rank %d %s at batch size %d (%s), and %s: the batch size can be "
      .. "lowered only on every process at once, at the same point (their collectives must pair), so every process "
      .. "ends here"):format(rank, what, batch_size, mine, diff or "another process did not, or at another size")
    msg = dist._first_error(n, rank, msg)
    error(msg or ("find_executable_batch_size: rank %d: the processes disagreed"):format(rank), 0)
  end
  -- every process is here at this size: retry where one of them ran out of memory
  local flag = require("fp8.core").tensor { oom and 1 or 0 }
  D.all_reduce(flag, "max")
  return flag:item() == 1
end

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
      local e = res[2]
      if not M.is_out_of_memory(e) and not (peer_step_failed(e) and require("fp8._dist").size() > 1) then
        error(e, 0)
      end
      if not agree_retry(batch_size, e) then error(e, 0) end
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
      .. "another kind is raised as it is, and reaching 0 is an error. The size found is kept for the next call.\n"
      .. "With several processes they agree first: all retry together, or all raise (one ran out of memory while\n"
      .. "another went on)." }
end

return M
