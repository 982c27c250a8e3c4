-- flop_rows.lua — the profiler FLOP specs' tally (profflops_spec, profcost_spec): torch's counted rows from a fixture
-- and fp8lab's from a profile, per op name, shown as one sorted line to compare. Loaded with
-- `local R = dofile("tests/spec/helpers/flop_rows.lua")`; not a spec itself.
local R = {}

local function add(out, name, calls, flops)
  local o = out[name] or { calls = 0, flops = 0 }
  o.calls, o.flops = o.calls + calls, o.flops + flops
  out[name] = o
end

-- torch's rows ({name, calls, flops} each, a fixture's case.rows) as fp8lab's: per fp8lab name (rename(torch's
-- name)), the FLOPs and the calls that carry them
function R.expected(case, rename)
  local out = {}
  for _, row in ipairs(case.rows) do add(out, rename(row[1]), row[2], row[3]) end
  return out
end

-- a profile's events that carry FLOPs, per name
function R.got(prof)
  local out = {}
  for _, e in ipairs(prof:events()) do
    if e.flops then add(out, e.name, 1, math.tointeger(e.flops)) end
  end
  return out
end

-- rows as one line, sorted by name: "name: N calls, F FLOPs; ..."
function R.show(rows)
  local keys = {}
  for k in pairs(rows) do keys[#keys + 1] = k end
  table.sort(keys)
  for i, k in ipairs(keys) do keys[i] = ("%s: %d calls, %d FLOPs"):format(k, rows[k].calls, rows[k].flops) end
  return table.concat(keys, "; ")
end

return R
