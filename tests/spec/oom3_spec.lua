-- Found on 2026-12-07 (stop 102): out of memory, what stop 101 left: cdist's backward built the whole [n, m, d]
-- differences; load_state's message lacked its name, a Linear's init carried init_fns.lua's position, fp8.hist read
-- every byte into one Lua table and raised Lua's bare 'not enough memory'; the cached conv primitives were not given
-- back before a refusal; a DDP process whose backward ran out of memory left the other waiting in its bucket's
-- all-reduce. docs/robustness.md, "Out of memory, stop 101's leftovers (stop 102)".
local U = dofile("tests/spec/helpers/util.lua")
local BIN = arg and arg[-1] or "build/fp8lab"
local q = U.q

-- the child's prelude (tests/spec/helpers/oom_child.lua): fill(hole, fine, heap), give(restart), say(...); 90 s
local O = dofile("tests/spec/helpers/oom_child.lua")
local function child(code, limit) return O.child(code, limit, false, 2, 90) end

-- ASan reserves terabytes of address space: `ulimit -v` cannot apply to its build
local it_mem = os.getenv("ASAN_OPTIONS") and pending or it

describe("cdist by chunks of x1's rows", function()
  -- the float64 distance of two rows and its gradient with respect to the first (torch's cdist backward: sign(d)·
  -- |d|^(p-1) / dist^(p-1); inf: g·sign(d) at the coordinates where |d| is the largest; a zero distance: 0)
  local function ref(x, y, p)
    local m, d = #x, {}
    for k = 1, m do d[k] = x[k] - y[k] end
    local dist = 0
    if p == math.huge then
      for k = 1, m do dist = math.max(dist, math.abs(d[k])) end
    else
      for k = 1, m do dist = dist + math.abs(d[k]) ^ p end
      dist = dist ^ (1 / p)
    end
    local g = {}
    for k = 1, m do
      local s = d[k] > 0 and 1 or d[k] < 0 and -1 or 0
      if dist == 0 then g[k] = 0
      elseif p == math.huge then g[k] = math.abs(d[k]) == dist and s or 0
      elseif p == 1 then g[k] = s
      else g[k] = s * math.abs(d[k]) ^ (p - 1) / dist ^ (p - 1) end
    end
    return dist, g
  end

  -- The same values whole and by chunks (fp8._cdist_chunk makes chunks of 11 differences' elements, so 2 of x1's
  -- 7 rows of 5 features a chunk): the distances and x1's gradient bit for bit (each row by the same operations), x2's
  -- gradient (summed over the chunks, a different rounding) within 2^-20·(1 + |g|) of the whole tensor's; both
  -- against float64.
  for _, p in ipairs { 1, 2, math.huge, 0.5, 3 } do
    it(("gives the whole tensor's values for p = %s"):format(p), function()
      fp8.manual_seed(7)
      local a0, b0 = fp8.randn { 7, 5 }, fp8.randn { 6, 5 }
      local w = fp8.randn { 7, 6 }
      local function run(chunk)
        local a, b = a0:clone():requires_grad(true), b0:clone():requires_grad(true)
        local d = fp8._cdist_chunk(chunk, function()
          local d = fp8.cdist(a, b, p)
          ;(d * w):sum():backward()
          return d
        end)
        return d:tolist(), a.grad:tolist(), b.grad:tolist()
      end
      local d1, ga1, gb1 = run(1 << 30)
      local d2, ga2, gb2 = run(11)
      assert.are.same(d1, d2)
      assert.are.same(ga1, ga2)
      local A, B, W = a0:tolist(), b0:tolist(), w:tolist()
      local gb = {}
      for j = 1, 6 do gb[j] = { 0, 0, 0, 0, 0 } end
      for i = 1, 7 do
        for j = 1, 6 do
          local dist, g = ref(A[i], B[j], p)
          assert.is_true(math.abs(d2[i][j] - dist) <= 1e-5 * (1 + dist), ("d[%d][%d]"):format(i, j))
          for k = 1, 5 do gb[j][k] = gb[j][k] - W[i][j] * g[k] end
        end
      end
      for j = 1, 6 do
        for k = 1, 5 do
          local x, y = gb1[j][k], gb2[j][k]
          assert.is_true(math.abs(x - y) <= 2 ^ -20 * (1 + math.abs(x)), ("x2.grad[%d][%d]"):format(j, k))
          assert.is_true(math.abs(y - gb[j][k]) <= 1e-4 * (1 + math.abs(gb[j][k])), ("x2.grad[%d][%d] vs float64"):format(j, k))
        end
      end
    end)
  end

  it("refuses a chunk size that is not a positive integer, and keeps none after its function", function()
    assert.has_error(function() fp8._cdist_chunk(0, print) end,
      "_cdist_chunk: expected an integer >= 1 (elements of a chunk's differences), got 0")
    assert.has_error(function() fp8._cdist_chunk(1, function() error("boom", 0) end) end, "boom")
    -- after it, a cdist under the default chunk is one chunk again: its backward's graph is the whole one's
    local a = fp8.randn{3, 2}:requires_grad(true)
    local d = fp8.cdist(a, fp8.randn{4, 2})
    assert.are_not.equal("Cdist", tostring(d.grad_fn):match("Cdist"))
  end)

  -- [1024, 64] and [512, 64]: 128 MiB a copy of the differences, of which the whole graph held several (VmPeak 1.11
  -- GB without a limit, 0.56 GB by chunks, from 0.34 GB at the start); by chunks the forward and backward fit an
  -- 800 MB address space (refused there by name before)
  it_mem("runs a backward whose differences do not fit the address space", function()
    local out, err, rc = child([[
collectgarbage("restart")
fp8.manual_seed(1)
local a = fp8.randn{1024, 64}:requires_grad(true)
local b = fp8.randn{512, 64}:requires_grad(true)
local ok, e = pcall(function() fp8.cdist(a, b):sum():backward() end)
say(tostring(ok), ok and "" or tostring(e))
if ok then
  -- row 3 of x1's gradient, against its own float64 sum over x2's rows
  local A, B, G = a:tolist(), b:tolist(), a.grad:tolist()
  local worst = 0
  for k = 1, 64 do
    local s = 0
    for j = 1, 512 do
      local d2 = 0
      for t = 1, 64 do d2 = d2 + (A[3][t] - B[j][t]) ^ 2 end
      s = s + (A[3][k] - B[j][k]) / math.sqrt(d2)
    end
    worst = math.max(worst, math.abs(G[3][k] - s) / (1 + math.abs(s)))
  end
  say("close", tostring(worst < 1e-4))
end
]], 800000)
    assert.are.equal(0, rc, err)
    assert.are.equal("true \nclose true\n", out)
  end)
end)

describe("out-of-memory messages that name their call", function()
  -- load_state raised 'out of memory allocating 1048576 bytes on cpu' without its name (save_state has it)
  it_mem("load_state's", function()
    local dir = os.tmpname()
    os.remove(dir)
    local out, err, rc = child(O.saved(dir, 4) .. [[
fill(0, true)
local ok, e = pcall(acc.load_state, acc, dir)
give(true)
os.execute("rm -rf " .. dir)
say(tostring(ok), tostring(e))
]], 450000)
    assert.are.equal(0, rc, err)
    assert.matches("^false load_state: [^\n]*out of memory[^\n]*\n$", out)
  end)

  -- A Linear's init said 'lua/fp8/nn/init_fns.lua:118: out of memory allocating 4194304 bytes on cpu'
  it_mem("a Linear's init", function()
    local out, err, rc = child([[
fill(0, true)
local ok, e = pcall(fp8.nn.Linear, 1024, 1024)
give(true)
say(tostring(ok), tostring(e))
]], 400000)
    assert.are.equal(0, rc, err)
    assert.matches("^false [^\n]*Linear: out of memory drawing its weight %[1024, 1024%] %(1048576 fp32 values%): "
      .. "[^\n]*memory[^\n]*\n$", out)
    assert.is_nil(out:find("init_fns", 1, true))
  end)

  -- fp8.hist read every byte into one Lua table (16 bytes a value: 64 MiB for 2048 × 2048) and raised Lua's bare
  -- 'not enough memory' where it did not fit; it reads 4 Ki bytes at a time now: with a 24 MiB hole it runs and
  -- counts as a plain count of the bytes does, and with none it names itself
  it_mem("fp8.hist's (and it runs where its count fits)", function()
    local out, err, rc = child([[
fp8.manual_seed(3)
local qt = fp8.randn{2048, 2048}:quantize("e4m3")
-- the reference: the magnitude codes' counts, from the bytes, before the fill
local zero, sub, top = 0, 0, 0
local bytes = qt:bytes()
for i = 1, #bytes do
  local b = bytes[i] & 0x7F
  if b == 0 then zero = zero + 1 elseif b < 8 then sub = sub + 1 elseif b >> 3 == 15 then top = top + 1 end
end
bytes = nil
collectgarbage("restart") collectgarbage() collectgarbage("stop")
fill(24, true, true)
local ok, h = pcall(fp8.hist, qt, nil, {quiet = true})
give(true)
say(tostring(ok), ok and tostring(h.zero + h.underflow == zero and h.subnormal == sub
  and (h.bins[8] or 0) + h.saturated == top and h.n == 2048 * 2048) or tostring(h))
collectgarbage("stop")
fill(0, true)
ok, h = pcall(fp8.hist, qt, nil, {quiet = true})
give(true)
say(tostring(ok), tostring(h))
]], 500000)
    assert.are.equal(0, rc, err)
    assert.matches("^true true\nfalse [^\n]*hist: out of memory reading the 4194304 codes of the e4m3 tensor "
      .. "%[2048, 2048%][^\n]*\n$", out)
  end)
end)

describe("the cached conv primitives", function()
  -- Sixteen conv geometries' forward and backward fill the conv's primitive cache (~31 MiB of JIT code on AVX2);
  -- with the address space taken but for an 8 MiB hole, a matmul of a new shape needs 32 MiB of room: the hole, the
  -- matmul primitives and oneDNN's cache alone did not give it, the conv's cached ones were kept and the matmul was
  -- refused (with holes of 4-12 MiB; a 16 MiB one was enough there)
  it_mem("are given back before a refusal", function()
    local out, err, rc = child([[
collectgarbage("restart")
for i = 1, 16 do
  local x = fp8.randn{1, 16 + i, 12, 12}:requires_grad(true)
  local w = fp8.randn{16, 16 + i, 3, 3}:requires_grad(true)
  F.conv2d(x, w, nil, {padding = 1}):sum():backward()
end
local a, b = fp8.ones{64, 96}, fp8.ones{96, 80}
collectgarbage()
collectgarbage("stop")
local pad = fp8.empty{8 * 262144}   -- 8 MiB of it given back (a kept block, unmapped before a refusal)
fill(0, true)
pad:free()
for _ = 1, 8 do keep[n]:free(); keep[n] = nil; n = n - 1 end   -- 128 KiB of heap for the result
local ok, e = pcall(a.matmul, a, b)
give(true)
say(tostring(ok), ok and e[1][1] or tostring(e))
local y = F.conv2d(fp8.ones{1, 17, 12, 12}, fp8.ones{16, 17, 3, 3}, nil, {padding = 1})   -- a dropped one again
say(y[1][1][2][2])
]], 500000)
    assert.are.equal(0, rc, err)
    assert.are.equal("true 96.0\n153.0\n", out)
  end)
end)

describe("a DDP backward that runs out of memory on one process", function()
  local MPI = dofile("tests/spec/helpers/mpi.lua")
  -- The process whose backward ran short still runs the buckets' all-reduces and the failure flag's, with 16 MiB of
  -- address space held since the backward began given back first (ddp.c's DDP_RESERVE), and a bucket whose
  -- MPI_Iallreduce failed (MPI_ERR_INTERN: Open MPI's allocations) is issued again there: until stop 102 the other
  -- process waited in its bucket's all-reduce until the process group's timeout (the watchdog ended the job), or
  -- Open MPI's libnbc crashed in its progress. Holes of 0 and 4 MiB: the backward's own allocation fails, or the
  -- all-reduce's inside MPI (MPI_Iallreduce answers MPI_ERR_INTERN, named as that).
  for _, hole in ipairs { 0, 4 } do
    it_mem(("is an error on both processes, and the next step runs (a %d MiB hole)"):format(hole), function()
      if not MPI.can then pending(MPI.why) return end
      local out = os.tmpname()
      local _, _, rc = os.execute(("ulimit -v 1500000; %stimeout -s KILL 120 mpirun --oversubscribe%s -np 2 "
        .. "-x OMP_NUM_THREADS=1 %s tests/dist/oom_ddp.lua 1 %d </dev/null >%s 2>&1"):format(MPI.env, MPI.root,
        q(BIN), hole, out))
      local text = U.take(out)
      assert.are.equal(0, rc, text)
      local r1 = text:match("rank 1: ([^\n]*)") or ""
      assert.is_true(r1:find("out of memory", 1, true) ~= nil or r1:find("MPI_Iallreduce failed", 1, true) ~= nil, text)
      assert.matches("rank 0: DDP: another process's backward failed", text)
      assert.matches("rank 0 next: ran", text)
      assert.matches("rank 1 next: ran", text)
    end)
  end
end)
