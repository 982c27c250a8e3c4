-- oom_sweep.lua — out of memory never crashes: each heavy op run in a child under `ulimit -v`, from its working size
-- down, where every failure must be a Lua error that names the problem (out of memory) and the process must go on (a
-- second, small call succeeds), never a signal, an abort or another message. Two ways to run short: --mode ulimit
-- (the limit bisected: the lowest that runs the op, then --points limits evenly below it) and --mode fill (under a
-- fixed limit, the address space taken by tensors but for a hole of 0 to 128 MiB in malloc's heap, where the op's
-- tensors fit or not; a primitive's JIT code, which needs fresh address space, never does). docs/robustness.md, "Out of
-- memory under a narrow address space (stop 100)" and "Out of memory, the rest (stop 101)". The small call runs once
-- first, so its primitives are made before the limit is reached (blocks under 1 MiB freed stay in malloc's heap,
-- which keeps their address space for later tensors: core/cpu/cpu_device.c).
-- Run: build/fp8lab scripts/oom_sweep.lua [--only conv_fwd,matmul_f32] [--points 12] [--mode ulimit|fill|both]
local fail = require("fp8.args").fail
local OPTIONS = {
  { "only", "str", nil, "comma-separated subset of the ops (default: all; --list names them)" },
  { "points", "int", 12, "limits below the working one (ulimit); fill: the first points + 2 of 0, 1, 2, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128 MiB left in the heap", 1 },
  { "mode", "str", "both", "ulimit | fill | both" },
  { "list", "flag", nil, "print the ops and exit" },
  { "bin", "str", nil, "the fp8lab binary the children run (default: this one, or build/fp8lab)" },
}
local opts = require("fp8.args").parse(arg or {}, OPTIONS, {
  usage = "usage: fp8lab scripts/oom_sweep.lua [options]",
  about = "Runs each heavy op under a narrow address space and checks that it fails by a Lua error. Options:",
  default_text = false })
if opts.mode ~= "ulimit" and opts.mode ~= "fill" and opts.mode ~= "both" then
  fail(("--mode must be ulimit, fill or both, got '%s'"):format(opts.mode))
end

-- { name, setup (Lua code: locals the op reads), big (the op at its working size), small (a second call that must
-- then run) }
local F = ""   -- (F is the child's global fp8.nn.functional)
local OPS = {
  { "conv_fwd_f32", F .. "local x, w = fp8.randn{8, 64, 64, 64}, fp8.randn{64, 64, 3, 3}",
    "F.conv2d(x, w, nil, {padding = 1})", "F.conv2d(fp8.randn{1, 16, 8, 8}, fp8.randn{16, 16, 3, 3}, nil, {padding = 1})" },
  { "conv_bwd_f32", F .. "local x = fp8.randn{8, 64, 64, 64}:requires_grad_() local w = fp8.randn{64, 64, 3, 3}:requires_grad_()",
    "F.conv2d(x, w, nil, {padding = 1}):sum():backward()",
    "local a = fp8.randn{1, 16, 8, 8}:requires_grad_() F.conv2d(a, fp8.randn{16, 16, 3, 3}, nil, {padding = 1}):sum():backward()" },
  { "conv_fwd_bf16", F .. "local x, w = fp8.randn{8, 64, 64, 64}:to('bf16'), fp8.randn{64, 64, 3, 3}:to('bf16')",
    "F.conv2d(x, w, nil, {padding = 1})",
    "F.conv2d(fp8.randn{1, 16, 8, 8}:to('bf16'), fp8.randn{16, 16, 3, 3}:to('bf16'), nil, {padding = 1})" },
  { "conv_bwd_bf16", F .. "local x = fp8.randn{8, 64, 64, 64}:to('bf16'):requires_grad_() "
      .. "local w = fp8.randn{64, 64, 3, 3}:to('bf16'):requires_grad_()",
    "F.conv2d(x, w, nil, {padding = 1}):sum():backward()",
    "local a = fp8.randn{1, 16, 8, 8}:to('bf16'):requires_grad_() "
      .. "F.conv2d(a, fp8.randn{16, 16, 3, 3}:to('bf16'), nil, {padding = 1}):sum():backward()" },
  { "matmul_f32", "local a, b = fp8.randn{2048, 2048}, fp8.randn{2048, 2048}", "a:matmul(b)",
    "fp8.randn{8, 8}:matmul(fp8.randn{8, 8})" },
  { "matmul_bf16", "local a, b = fp8.randn{2048, 2048}:to('bf16'), fp8.randn{2048, 2048}:to('bf16')", "a:matmul(b)",
    "fp8.randn{8, 8}:to('bf16'):matmul(fp8.randn{8, 8}:to('bf16'))" },
  { "linear_fp8", "local acc = fp8.Accelerator{mixed_precision = 'fp8', kwargs_handlers = {fp8.TERecipeKwargs{fp8_format = 'HYBRID'}}} "
      .. "local m = acc:prepare(fp8.nn.Sequential(fp8.nn.Linear(2048, 2048))) local x = fp8.randn{2048, 2048}:requires_grad_()",
    "m(x):sum():backward()",
    "local acc = fp8.Accelerator{mixed_precision = 'fp8', kwargs_handlers = {fp8.TERecipeKwargs{fp8_format = 'HYBRID'}}} "
      .. "acc:prepare(fp8.nn.Sequential(fp8.nn.Linear(16, 16)))(fp8.randn{16, 16}):sum()" },
  { "sdpa", F .. "local q = fp8.randn{4, 8, 512, 64}:requires_grad_() local k = fp8.randn{4, 8, 512, 64}:requires_grad_() "
      .. "local v = fp8.randn{4, 8, 512, 64}:requires_grad_()",
    "F.scaled_dot_product_attention(q, k, v, {is_causal = true}):sum():backward()",
    "local s = fp8.randn{1, 1, 4, 8} F.scaled_dot_product_attention(s, s, s)" },
  { "gpt_te_step", "local acc = fp8.Accelerator{mixed_precision = 'fp8', kwargs_handlers = {fp8.TERecipeKwargs{fp8_format = 'HYBRID'}}} "
      .. "local model = fp8.nn.GPT{vocab_size = 96, block_size = 64, n_layer = 2, n_head = 4, n_embd = 128} "
      .. "local opt = fp8.optim.AdamW(model:parameters(), {lr = 1e-3}) model, opt = acc:prepare(model, opt) "
      .. "local x = fp8.randint(0, 96, {16, 64}) local y = fp8.randint(0, 96, {16, 64})",
    "for i = 1, 2 do local _, loss = model(x, y) opt:zero_grad() acc:backward(loss) opt:step() end",
    "fp8.randn{4, 4}:matmul(fp8.randn{4, 4})" },
  { "adamw_step", "local ps = {} for i = 1, 8 do ps[i] = fp8.randn{1024, 1024}:requires_grad_() ps[i].grad = fp8.randn{1024, 1024} end "
      .. "local opt = fp8.optim.AdamW(ps, {lr = 1e-3})",
    "opt:step()",
    "local p = fp8.randn{4}:requires_grad_() p.grad = fp8.randn{4} fp8.optim.AdamW({p}, {lr = 1e-3}):step()" },
  { "save_load_state", "local dir = os.tmpname() os.remove(dir) "
      .. "local acc = fp8.Accelerator{} local model = fp8.nn.Sequential(fp8.nn.Linear(1024, 1024), fp8.nn.Linear(1024, 1024)) "
      .. "local opt = fp8.optim.AdamW(model:parameters(), {lr = 1e-3}) model, opt = acc:prepare(model, opt) "
      .. "model(fp8.randn{8, 1024}):sum():backward() opt:step()",
    "acc:save_state(dir) acc:load_state(dir) os.execute('rm -rf ' .. dir)",
    "local p = os.tmpname() fp8.save_file({a = fp8.randn{4}}, p) fp8.load_file(p) os.remove(p)" },
  { "safetensors", "local p = os.tmpname() local t = {} for i = 1, 8 do t['w' .. i] = fp8.randn{1024, 1024} end "
      .. "t.q = fp8.randn{1024, 1024}:quantize('e4m3')",
    "fp8.save_file(t, p) local back = fp8.load_file(p) os.remove(p)",
    "local p = os.tmpname() fp8.save_file({a = fp8.randn{4}}, p) fp8.load_file(p) os.remove(p)" },
  { "dataloader", "local ds = fp8.data.TextDataset{text = string.rep('the quick brown fox jumps over the lazy dog. ', 50000), "
      .. "block_size = 256} local dl = fp8.data.DataLoader{ds, batch_size = 512, shuffle = true}",
    "local n = 0 for x, y in dl:iter() do n = n + 1 if n == 16 then break end end",
    "for x in fp8.data.DataLoader{fp8.data.TextDataset{text = 'abcdefgh', block_size = 2}, batch_size = 2}:iter() do end" },
  -- stop 101: the rest of the heavy entries
  { "fp8_cast", "local x = fp8.randn{2048, 2048}",
    "local q = x:quantize('e4m3') local d = q:dequantize() local q2 = x:quantize('e5m2') q2:dequantize():sum()",
    "fp8.randn{8}:quantize('e4m3'):dequantize()" },
  { "msamp_o2", "local acc = fp8.Accelerator{mixed_precision = 'fp8', kwargs_handlers = {fp8.MSAMPRecipeKwargs{opt_level = 'O2'}}} "
      .. "local m = fp8.nn.Sequential(fp8.nn.Linear(1024, 1024), fp8.nn.Linear(1024, 1024)) "
      .. "local opt = fp8.optim.AdamW(m:parameters(), {lr = 1e-3}) m, opt = acc:prepare(m, opt) local x = fp8.randn{256, 1024}",
    "for i = 1, 2 do opt:zero_grad() acc:backward(m(x):sum()) opt:step() end",
    "local p = fp8.randn{4}:requires_grad_() p.grad = fp8.randn{4} fp8.optim.AdamW({p}, {lr = 1e-3}):step()" },
  { "gpt_generate", "local g = fp8.nn.GPT{vocab_size = 96, block_size = 64, n_layer = 2, n_head = 4, n_embd = 128} "
      .. "local idx = fp8.randint(0, 96, {32, 16})",
    "g:generate(idx, 32)", "fp8.randn{4, 4}:matmul(fp8.randn{4, 4})" },
  { "hist", "local x = fp8.randn{1 << 22}", "fp8.hist(x, 'e4m3', {quiet = true})",
    "fp8.hist(fp8.randn{16}, 'e4m3', {quiet = true})" },
  { "autocast_bf16", "local a, b = fp8.randn{2048, 2048}, fp8.randn{2048, 2048}",
    "fp8.amp.autocast('bf16', function() return a:matmul(b):sum() end)",
    "fp8.amp.autocast('bf16', function() return fp8.randn{8, 8}:matmul(fp8.randn{8, 8}) end)" },
  { "conv_transpose", F .. "local x, w = fp8.randn{8, 64, 32, 32}:requires_grad_(), fp8.randn{64, 32, 3, 3}:requires_grad_()",
    "F.conv_transpose2d(x, w, nil, {stride = 2}):sum():backward()",
    "F.conv_transpose2d(fp8.randn{1, 4, 5, 5}, fp8.randn{4, 4, 3, 3})" },
  { "cdist", "local a, b = fp8.randn{4096, 64}:requires_grad_(), fp8.randn{2048, 64}:requires_grad_()",
    "fp8.cdist(a, b):sum():backward()", "fp8.cdist(fp8.randn{4, 3}, fp8.randn{5, 3})" },
  { "profiler_export", "local p = os.tmpname() local a = fp8.randn{256, 256} local prof = fp8.profiler.profile{} prof:start() "
      .. "for i = 1, 2000 do a:matmul(a) end prof:stop()",
    "prof:export_chrome_trace(p) os.remove(p)",
    "local p = os.tmpname() local pr = fp8.profiler.profile{} pr:start() fp8.randn{4}:sum() pr:stop() pr:export_chrome_trace(p) os.remove(p)" },
}
if opts.list then
  for _, op in ipairs(OPS) do print(op[1]) end
  return
end
local chosen = {}
if opts.only then
  local known = {}
  for _, op in ipairs(OPS) do known[op[1]] = op end
  for name in opts.only:gmatch("[^,]+") do
    if not known[name] then fail(("--only: no op '%s' (--list names them)"):format(name)) end
    chosen[#chosen + 1] = known[name]
  end
else
  chosen = OPS
end

local function q(s) return "'" .. s:gsub("'", "'\\''") .. "'" end
local BIN = opts.bin or (arg[-1] and arg[-1]:match("fp8lab$") and arg[-1]) or "build/fp8lab"
local bf = io.open(BIN, "rb")
if not bf then fail(("--bin: %s is not a readable file"):format(BIN)) end
bf:close()
local tmp = os.tmpname()

-- the child's script: setup and the op under pcall (the error kept), the peak address space, then the small call
local function child_source(op, fill_mib)
  local fill = ""
  if fill_mib then
    -- a hole of fill_mib MiB in malloc's heap (a tensor made first and freed last), the rest of the address space
    -- taken by 1 MiB tensors, then 16 KiB ones, until an allocation fails: the op's tensors have the hole; what
    -- needs fresh address space (oneDNN's JIT code, a thread's stack) has none
    fill = ("collectgarbage('stop') local pad = %d > 0 and fp8.empty{%d * 262144} local keep, n = {}, 0 "
      .. "for _, sz in ipairs{262144, 4096} do while true do local ok, t = pcall(fp8.empty, {sz}) "
      .. "if not ok then break end n = n + 1 keep[n] = t end end "
      .. "if pad then pad:free() end FILL_KEEP = keep"):format(fill_mib, fill_mib)
  end
  return ([[
local function peak() for l in io.lines('/proc/self/status') do local v = l:match('^VmPeak:%%s*(%%d+)') if v then return v end end end
F = fp8.nn.functional
local small = function() %s end
-- its primitives made while there is room (a new one needs fresh address space: see the header); a limit too low for
-- it ends the child here, by a Lua error
local okW, eW = pcall(small)
if not okW then io.stdout:write('WARM ERR ', tostring(eW):gsub('\n', ' '), '\n') return end
local okS, eS = pcall(function()
  %s
  %s
  return (function() %s end)()
end)
io.stdout:write('BIG ', okS and 'ok' or ('ERR ' .. tostring(eS):gsub('\n', ' ')), '\n')
if FILL_KEEP then for i = 1, #FILL_KEEP do FILL_KEEP[i]:free() end FILL_KEEP = nil end
collectgarbage() collectgarbage()
io.stdout:write('PEAK ', peak(), '\n')
local ok2, e2 = pcall(small)
io.stdout:write('SMALL ', ok2 and 'ok' or ('ERR ' .. tostring(e2):gsub('\n', ' ')), '\n')
]]):format(op[4], op[2], fill, op[3])
end

-- runs op in a child under limit (KB; nil: none) -> { rc, big = "ok" | message, small = ..., peak = KB }
local function run(op, limit, fill_mib)
  local f = assert(io.open(tmp, "w"))
  f:write(child_source(op, fill_mib))
  f:close()
  local cmd = ("bash -c %s 2>&1"):format(q(("%sOMP_NUM_THREADS=2 exec %s %s </dev/null"):format(
    limit and ("ulimit -v %d; "):format(limit) or "", BIN, tmp)))
  local p = assert(io.popen(cmd))
  local out = p:read("a")
  local _, _, rc = p:close()
  local r = { rc = rc, out = out }
  r.big = out:match("BIG ([^\n]*)")
  r.small = out:match("SMALL ([^\n]*)")
  r.peak = tonumber(out:match("PEAK (%d+)"))
  return r
end

-- a run is right when the child exited 0, the op either ran or raised an out-of-memory error, and the small call ran
local function verdict(r)
  local warm = r.out:match("WARM ERR ([^\n]*)")
  if r.rc == 0 and warm and (warm:find("out of memory", 1, true) or warm:find("not enough memory", 1, true)) then
    return true, "too low to start: " .. warm
  end
  if r.rc ~= 0 or not r.big or not r.small then return false, ("exit %s: %s"):format(r.rc, r.out:sub(-300)) end
  if r.big ~= "ok" and not (r.big:find("out of memory", 1, true) or r.big:find("not enough memory", 1, true)) then
    return false, "the op's error does not name the memory: " .. r.big
  end
  if r.small ~= "ok" then return false, "the small call after it failed: " .. r.small end
  return true, r.big == "ok" and "ran" or r.big
end

local findings = 0
local function report(op, what, r)
  local ok, why = verdict(r)
  if not ok then findings = findings + 1 end
  print(("%-16s %-22s %s %s"):format(op[1], what, ok and "ok  " or "FAIL", why:sub(1, 160)))
end

local base = run({ "base", "", "", "" }, nil)
for _, op in ipairs(chosen) do
  local free = run(op, nil)
  if free.big ~= "ok" then
    print(("%-16s does not run without a limit: %s"):format(op[1], free.big or free.out:sub(-300)))
    findings = findings + 1
  else
    local lo, hi = base.peak or 100000, free.peak + 65536   -- KB: lo fails (the bare process), hi runs
    if opts.mode ~= "fill" then
      while hi - lo > 2048 do   -- the lowest limit that runs the op, within 2 MB
        local mid = (lo + hi) // 2
        local r = run(op, mid)
        if r.big == "ok" then hi = mid else lo = mid report(op, ("ulimit -v %d"):format(mid), r) end
      end
      print(("%-16s runs from ulimit -v %d KB (peak %d KB without a limit)"):format(op[1], hi, free.peak))
      for i = 1, opts.points do
        local lim = base.peak + (hi - base.peak) * i // (opts.points + 1)
        report(op, ("ulimit -v %d"):format(lim), run(op, lim))
      end
    end
    if opts.mode ~= "ulimit" then
      local lim = free.peak + 262144   -- room for the op, then filled
      local LADDER = { 0, 1, 2, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128 }
      for i = 1, math.min(opts.points + 2, #LADDER) do
        report(op, ("fill, %d MiB hole"):format(LADDER[i]), run(op, lim, LADDER[i]))
      end
    end
  end
end
os.remove(tmp)
print(("%d finding(s)"):format(findings))
os.exit(findings == 0 and 0 or 1)
