-- oom_child.lua — the out-of-memory specs' child (oomdnn_spec, oom2_spec, oom3_spec): a script run in a child process under
-- `ulimit -v`, after a prelude that warms the process and can fill its address space with tensors. Loaded with
-- `local O = dofile("tests/spec/helpers/oom_child.lua")`; not a spec itself.
local U = dofile("tests/spec/helpers/util.lua")
local BIN = arg and arg[-1] or "build/fp8lab"

local O = {}

-- The child's first lines: warm (the modules loaded, oneDNN's engine made by a tiny conv and matmul), then fill(k)
-- takes the address space by 1 MiB tensors until one fails (fill(k, true): then 16 KiB ones) but for a hole of k MiB
-- (a tensor made first, freed last), where an op's tensors fit and oneDNN's JIT code, which needs fresh address
-- space, does not (fill(k, fine, true): the hole made of 256 KiB tensors, in malloc's heap, what Lua's own
-- allocations can use); give() returns them all and collects (give(true): the collector restarted first).
O.PRELUDE = [[
local F = fp8.nn.functional
F.conv2d(fp8.randn{1, 8, 6, 6}, fp8.randn{8, 8, 3, 3})
fp8.randn{3, 5}:matmul(fp8.randn{5, 7})
collectgarbage("stop")
local keep, n, bits = {}, 0, {}
local function fill(hole, fine, heap)
  local pad = {}
  for i = 1, heap and hole * 4 or 0 do pad[i] = fp8.empty{65536} end
  if not heap and hole > 0 then pad[1] = fp8.empty{hole * 262144} end
  while true do
    local ok, t = pcall(fp8.empty, {262144})
    if not ok then break end
    n = n + 1; keep[n] = t
  end
  while fine do   -- then 16 KiB ones
    local ok, t = pcall(fp8.empty, {4096})
    if not ok then break end
    bits[#bits + 1] = t
  end
  for i = 1, #pad do pad[i]:free() end
end
local function give(restart)   -- (and what the ops left to the collector)
  for i = 1, n do keep[i]:free() end
  for i = 1, #bits do bits[i]:free() end
  keep, n, bits = {}, 0, {}
  if restart then collectgarbage("restart") end
  collectgarbage()
end
local function say(...) io.write(table.concat({...}, " "), "\n") end
]]

-- Child code that saves a checkpoint of a trained model in dir: an Accelerator that prepared two Linear(512, 512)
-- layers and AdamW and took one step on a [rows, 512] batch (acc, model, opt are the child's locals after it)
function O.saved(dir, rows)
  return ([[
local dir = %q
local acc = fp8.Accelerator{}
local model = fp8.nn.Sequential(fp8.nn.Linear(512, 512), fp8.nn.Linear(512, 512))
local opt = fp8.optim.AdamW(model:parameters(), {lr = 1e-3})
model, opt = acc:prepare(model, opt)
model(fp8.randn{%d, 512}):sum():backward() opt:step()
acc:save_state(dir)
]]):format(dir, rows)
end

-- runs PRELUDE .. code (code alone: bare) in a child under `ulimit -v` limit KB (400000 unless given) on threads
-- OpenMP threads (2 unless given), killed after secs seconds (60 unless given), with env (more VAR=value words, e.g.
-- "OMP_THREAD_LIMIT=1") in its environment: its output, stderr and exit status
function O.child(code, limit, bare, threads, secs, env)
  local out, err = os.tmpname(), os.tmpname()
  local _, _, rc = os.execute(("ulimit -v %d; OMP_NUM_THREADS=%d %s timeout -s KILL %d %s -e %s </dev/null >%s 2>%s")
    :format(limit or 400000, threads or 2, env or "", secs or 60, U.q(BIN), U.q(bare and code or O.PRELUDE .. code),
      out, err))
  return U.take(out), U.take(err), rc
end

return O
