-- prof_op.lua — an op that Lua composes of core ops, recorded by fp8.profiler as the one op torch records:
--   local prof_op = require "fp8.prof_op"
--   return prof_op("addmm", flops, table.pack(x, m1, m2, nil, nil), function(...) ... end, ...)
-- runs fn(...) inside an op event of that name (torch's name for the op, without "aten::"); with with_flops the ops
-- it runs inside count no FLOPs and the event carries `flops`, torch's count for the op (nil where torch counts none,
-- as for aten::conv_transpose2d or an in-place aten::add_; a function: called with fn's results, for a count that
-- needs the output's shape); with record_shapes its input shapes are those of `inputs` (a table.pack of torch's
-- inputs in its order: a tensor's shape, "[]" for anything else; nil: none). Errors pass through as raised. While
-- nothing records it costs one call into the recorder.
local P = require "fp8._profiler"
local push, pop, set_flops, set_shapes = P.push, P.pop, P.set_flops, P.set_shapes
local unpack = table.unpack

return function(name, flops, inputs, fn, ...)
  -- (the library's callers give a function; another value failed at the call below with Lua's 'attempt to call a nil
  -- value (local 'fn')', sweep 115)
  if type(fn) ~= "function" then error(("prof_op: expected the op's function, got %s"):format(type(fn)), 2) end
  local tok = push(name, "op")
  if tok == 0 then return fn(...) end
  if inputs then set_shapes(tok, inputs.n, unpack(inputs, 1, inputs.n)) end
  if type(flops) == "number" and flops > 0 then set_flops(tok, flops) end
  local res = table.pack(pcall(fn, ...))
  if res[1] and type(flops) == "function" then
    local n = flops(unpack(res, 2, res.n))
    if n > 0 then set_flops(tok, n) end
  end
  pop(tok)
  if not res[1] then error(res[2], 0) end
  return unpack(res, 2, res.n)
end
