-- Found on 2026-12-07 (stop 103): out of memory, what stop 102 left: Open MPI's MPI_ERR_INTERN (its answer where an
-- allocation of its own fails) was not named as an out of memory; MS-AMP O1's FP8 gradient all-reduce issued again
-- after its MPI_Iallreduce failed ran its amax all-reduce again, which met the other process's sum (a step that
-- process took as averaged, then MPI_ERR_TRUNCATE); under find_unused_parameters a bucket's MPI_Iallreduce that
-- failed after the flags' all-reduce was never issued again (the other process waited until the watchdog ended the
-- job), and one whose packing failed there was the failing process's error only (the other took the step as
-- averaged); a prepared DataLoader that ran out of memory raised Lua's bare 'not enough memory' (its shuffle's
-- order) or said its items 'do not make one batch' (their collation).
-- docs/robustness.md, "Out of memory, stop 102's leftovers (stop 103)".
local U = dofile("tests/spec/helpers/util.lua")
local BIN = arg and arg[-1] or "build/fp8lab"
local q = U.q

-- ASan reserves terabytes of address space: `ulimit -v` cannot apply to its build
local it_mem = os.getenv("ASAN_OPTIONS") and pending or it

describe("out of memory under two processes", function()
  local MPI = dofile("tests/spec/helpers/mpi.lua")
  -- script under `mpirun -np 2` with the whole job under `ulimit -v 1500000`: its output and exit status
  local function job(script, args)
    local out = os.tmpname()
    local _, _, rc = os.execute(("ulimit -v 1500000; %stimeout -s KILL 120 mpirun --oversubscribe%s -np 2 "
      .. "-x OMP_NUM_THREADS=1 %s %s %s </dev/null >%s 2>&1"):format(MPI.env, MPI.root, q(BIN), script, args or "",
      out))
    return U.take(out), rc
  end

  -- every rank's address space taken: Open MPI's collectives answer MPI_ERR_INTERN before sending anything (its
  -- temporary buffer, libnbc's schedule), which said 'MPI_ERR_INTERN: internal error' only. The blocking call here is
  -- the call check's (_all_reduce_unchecked: its caller decides); a script's non-blocking one ends the job by name
  -- since stop 105 (MPI failed it on this process: on another it may have started, and wait there), distfault_spec
  it_mem("names MPI's out of memory as one, blocking and not, and the collectives run after the blocking", function()
    if not MPI.can then pending(MPI.why) return end
    local text, rc = job("tests/dist/oom_mpi.lua")
    assert.are.equal(0, rc, text)
    for r = 0, 1 do
      assert.matches(("rank %d blocking: [^\n]*failed on rank %d: out of memory inside MPI %%(MPI_ERR_INTERN"):format(r,
        r), text)
      assert.matches(("rank %d then: 4.0\n"):format(r), text)
    end
    text, rc = job("tests/dist/oom_mpi.lua", "async")
    assert.are_not.equal(0, rc, text)
    assert.matches("rank %d: dist%.all_reduce_async failed %(dist: MPI_Iallreduce failed on rank %d: out of memory "
      .. "inside MPI %(MPI_ERR_INTERN", text)
    assert.is_nil(text:find("then:", 1, true), text)
  end)

  -- tests/dist/oom_ddp.lua with args (the short rank, its hole in MiB, the mode) under launch: the short rank's step
  -- raises msg, the other's names the failed backward, and the next step runs on both
  -- (msg: a pattern, or a list of patterns one of which the short rank's error matches)
  local function both_fail(args, rank, msg)
    local text, rc = job("tests/dist/oom_ddp.lua", args)
    assert.are.equal(0, rc, text)
    local any = false
    for _, m in ipairs(type(msg) == "table" and msg or { msg }) do
      any = any or text:find(("rank %d: %s"):format(rank, m)) ~= nil
    end
    assert.is_true(any, text)
    assert.matches(("rank %d: DDP: another process's backward failed"):format(1 - rank), text)
    assert.matches("rank 0 next: ran", text)
    assert.matches("rank 1 next: ran", text)
  end

  -- MS-AMP O1: an FP8 weight gradient is all-reduced after its amax's MAX all-reduce. With a 4 MiB hole on rank 1
  -- its MPI_Iallreduce failed (out of memory inside MPI) and the item was issued again in the backward's finish,
  -- amax all-reduce and all: that met rank 0's flags all-reduce, rank 0 took the step as averaged ('ran') and the
  -- next step failed on both with MPI_ERR_TRUNCATE
  it_mem("MS-AMP O1's FP8 all-reduce: the step fails on both processes, and the next runs", function()
    if not MPI.can then pending(MPI.why) return end
    both_fail("1 4 o1", 1, "[^\n]*out of memory")
  end)

  -- find_unused_parameters: every bucket starts after the backward. With an 8 MiB hole on rank 0 a bucket's
  -- MPI_Iallreduce failed there after the flags' all-reduce had told rank 1 all was well; it was never issued
  -- again, and rank 1 waited in it until the watchdog ended the job (exit 1)
  it_mem("find_unused_parameters: the step fails on both processes, and the next runs", function()
    if not MPI.can then pending(MPI.why) return end
    both_fail("0 8 unused", 0, "[^\n]*out of memory")
  end)

  -- find_unused_parameters with comm_hook="fp16": with a 10 MiB hole on rank 0 the backward ran and a bucket's
  -- packing (its fp32 copy) failed after the flags' all-reduce: the bucket went out as zeros and rank 1 took the
  -- step as averaged ('ran', its gradients half of what they should be), rank 0 raised. The flags go after the
  -- buckets now. Where the hole is met by MPI's own buffer for the bucket's MPI_Iallreduce first (the CI rehearsal of
  -- stop 105, and a branch's suite under load), that is rank 0's error: the same failure on both either way. The
  -- packing's own failure, on demand: ddpfault_spec's ddp_pack case
  it_mem("find_unused_parameters: a bucket's packing that fails is an error on both processes", function()
    if not MPI.can then pending(MPI.why) return end
    both_fail("0 10 unused16", 0, { "ddp: out of memory packing a bucket", "[^\n]*MPI_Iallreduce failed on rank 0: "
      .. "out of memory inside MPI" })
  end)
end)

describe("a prepared DataLoader that runs out of memory", function()
  -- the child's prelude (tests/spec/helpers/oom_child.lua): fill(hole, fine, heap), give(restart), say(...)
  local O = dofile("tests/spec/helpers/oom_child.lua")
  -- (two OpenMP threads: with one, libgomp allocates a team for every parallel region and ends the process where
  -- that fails; docs/robustness.md, stop 103's Left)
  local function child(code) return O.child(code, 400000, false, 2, 60) end
  -- a prepared loader over n items of d values (and a label), batches of 16, shuffled; one epoch run
  local function setup(n, d)
    return ([[
local acc = fp8.Accelerator{cpu = true}
local ds = {}
for i = 1, %d do ds[i] = {fp8.randn{%d}, i %% 10} end
local loader = acc:prepare(fp8.data.DataLoader{ds, batch_size = 16, shuffle = true})
local m = 0
for x in loader do m = m + 1 end
]]):format(n, d)
  end

  -- its shuffle's order (a Lua list of every index) raised Lua's bare 'not enough memory'
  it_mem("names itself and its shuffle, and the next epoch runs", function()
    local out, err, rc = child(setup(5000, 16) .. [[
fill(0, true, true)
local ok, e = pcall(function() for x, y in loader do m = m + 1 end end)
give(true)
say(tostring(ok), tostring(e))
local k = 0
for x in loader do k = k + 1 end
say(m, k)
]])
    assert.are.equal(0, rc, err)
    assert.matches("^false DataLoader: out of memory ordering the 5000 items of epoch 2 %(shuffle=true[^\n]*memory%)\n"
      .. "313 313\n$", out)
  end)

  -- a batch's gathering and collation (fp8.stack of 16 items of 64 KiB) said 'DataLoader: the xs of dataset items
  -- ... do not make one batch: out of memory allocating 1048576 bytes on cpu'
  it_mem("names the batch it was making, and the loop goes on after it", function()
    local out, err, rc = child(setup(64, 16384) .. [[
local it = loader:iter()
it()
fill(0, true, true)
local ok, e = pcall(it)
give(true)
say(tostring(ok), tostring(e))
local x = it()
say(tostring(x ~= nil and x:shape()[1]))
]])
    assert.are.equal(0, rc, err)
    assert.matches("^false DataLoader: out of memory making batch 2 of 4 %(16 dataset items: their gathering or "
      .. "collation%) %([^\n]*memory[^\n]*%)\n16\n$", out)
  end)
end)
