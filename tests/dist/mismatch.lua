-- mismatch.lua — two processes in different collective utilities (tests/spec/dist2_spec.lua): one error on every
-- process naming both calls, no hang, and the processes stay in step for the next collective.
local acc = fp8.Accelerator { cpu = true, kwargs_handlers = { fp8.InitProcessGroupKwargs { timeout = 20 } } }
local r = acc.process_index
local function try(what, f, ...)
  local ok, e = pcall(f, acc, ...)
  print(("rank%d %s=%s"):format(r, what, ok and "ok" or tostring(e)))
end
local t = fp8.tensor { 1, 2 }
try("gather_reduce", r == 0 and acc.gather or acc.reduce, t)
try("gather_object", r == 0 and acc.gather or acc.gather_object, r == 0 and t or { "x" })
try("pad_gather", r == 0 and acc.pad_across_processes or acc.gather, t)
-- utilities whose own first collective is not agree's (an all_gather, an all_reduce, a barrier)
try("metrics_gather", r == 0 and acc.gather_for_metrics or acc.gather, t)
local function gather_t(a) return a:gather(t) end
try("trigger_gather", r == 0 and acc.check_trigger or gather_t)
try("wait_gather", r == 0 and acc.wait_for_everyone or gather_t)
-- in step afterwards
local g = acc:gather(fp8.tensor { r })
print(("rank%d after=%s"):format(r, table.concat(g:totable(), ",")))
