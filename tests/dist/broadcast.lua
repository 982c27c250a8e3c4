-- broadcast.lua — acc:broadcast and acc:broadcast_object_list under 2 processes (tests/spec/dist2_spec.lua).
local acc = fp8.Accelerator { cpu = true, kwargs_handlers = { fp8.InitProcessGroupKwargs { timeout = 20 } } }
local r = acc.process_index
local function say(what, ...) print(("rank%d %s=%s"):format(r, what, table.concat({ ... }, " "))) end
local function try(what, f, ...)
  local ok, e = pcall(f, acc, ...)
  say(what, ok and "ok" or tostring(e))
end
-- tensors in place, a parameter among them, from process 1
local w = fp8.tensor({ r + 1, r + 2 }):requires_grad(true)
local t = { a = fp8.tensor({ 10 * r }, "bf16"), w = w }
assert(acc:broadcast(t, 1) == t)
say("tensors", t.a:dtype(), t.a:float():item(), table.concat(w:totable(), ","), tostring(w:requires_grad()))
-- plain values from process 0; a receiver's list takes the sender's length
local l = r == 0 and { "x", { k = 1 }, 3.5 } or { 9, 9, 9, 9 }
assert(acc:broadcast_object_list(l) == l)
say("objects", #l, l[1], l[2].k, l[3])
local ints = r == 0 and { math.mininteger, math.maxinteger, -1 } or {}   -- integers stay integers
acc:broadcast_object_list(ints)
say("ints", math.type(ints[1]), tostring(ints[1] == math.mininteger), math.type(ints[2]), math.type(ints[3]))
try("shape", acc.broadcast, fp8.ones(2 + r))
try("from", acc.broadcast, fp8.ones(2), r)
try("range", acc.broadcast_object_list, { 1 }, r == 1 and 7 or 0)
try("hole", acc.broadcast_object_list, r == 0 and { nil, 2 } or {})
-- fp8._dist.broadcast of a parameter (what prepare does with DDP) is an in-place write: an FP8Linear that ran a forward
-- before it recasts its weight (its cache is keyed on the storage's version), so every rank computes rank 0's outputs
fp8.manual_seed(100 + r)
local D = require "fp8._dist"
local lin = fp8.recipes.FP8Linear(16, 16, false, { backend = "ao" })
local function out()
  return fp8.no_grad(function() return fp8.recipes.fp8_autocast(function() return lin(fp8.ones(4, 16)) end) end)
end
out()
D.broadcast(lin.weight, 0)
local sums = D.all_gather(fp8.tensor { out():sum():item() })
say("fp8cache", tostring(sums[1] == sums[2]))
local g = acc:gather(fp8.tensor { r })   -- in step afterwards
say("after", table.concat(g:totable(), ","))
