-- Found on 2026-12-07 (stop 105): a script's own collective that MPI failed on one process, and
-- find_executable_batch_size's retry on one process only. Made to fail on one process by FP8LAB_FAULT_DIST
-- (core/fault.h, a test hook) under `mpirun -np 2`, watchdog at 20 s: the failing rank got MPI's error back (a Lua
-- error its script could catch and go on from) while the other waited in the collective until the watchdog; a batch
-- size lowered on one rank met the other's DDP step. docs/robustness.md, "A script's collectives and the batch size
-- finder on one failing process (stop 105)".
local U = dofile("tests/spec/helpers/util.lua")
local MPI = dofile("tests/spec/helpers/mpi.lua")
local BIN = FP8LAB_BIN or "build/fp8lab"
local q = U.q

-- SCRIPT MODE under two processes with FP8LAB_FAULT_DIST=fault (none: unset): its output and exit status
local function job(script, mode, fault)
  local out = os.tmpname()
  local _, _, rc = os.execute(("%stimeout -s KILL 90 mpirun --oversubscribe%s -np 2 -x OMP_NUM_THREADS=1 %s %s "
    .. "tests/dist/%s.lua %s </dev/null >%s 2>&1"):format(MPI.env, MPI.root, fault and ("-x FP8LAB_FAULT_DIST="
    .. q(fault)) or "", q(BIN), script, mode, out))
  return U.take(out), rc
end

-- the job ended by rank 1's named error at once: not by the watchdog, and no rank went on past the collective
local function ends(mode, fault, msg)
  local text, rc = job("user_fault", mode, fault)
  assert.are_not.equal(0, rc, text)
  assert.truthy(text:find("rank 1: " .. msg .. " failed (dist: ", 1, true), text)
  assert.is_nil(text:find("past the process group timeout", 1, true), text)
  assert.is_nil(text:find("rank %d after:"), text)
end

describe("a script's collective that fails on one process", function()
  local it_mpi = MPI.can and it or pending
  local cases = {
    { "all_reduce", "allreduce:1@1", "dist.all_reduce" },
    { "all_reduce", "allgather:1@1", "dist.all_reduce's comparison of the processes' tensors (an all_gather)" },
    { "all_reduce_async", "wait:1@1", "dist.all_reduce_async's wait" },
    { "all_reduce_async", "iallreduce:1@1", "dist.all_reduce_async" },
    { "broadcast", "broadcast:1@1", "dist.broadcast" },
    { "broadcast_string", "broadcast:2@1", "dist.broadcast_string" },
    { "all_gather", "allgather:2@1", "dist.all_gather" },
    { "reduce_scatter", "reduce_scatter:1@1", "dist.reduce_scatter" },
    { "barrier", "barrier:1@1", "dist.barrier" },
    { "gather", "allgather:3@1", "dist.all_gather" },
    { "reduce", "allreduce:3@1", "dist.all_reduce" },
  }
  for _, c in ipairs(cases) do
    it_mpi(("%s (%s): the job ends naming it"):format(c[1], c[2]), function() ends(c[1], c[2], c[3]) end)
  end

  -- control: a refusal before anything is sent is a Lua error on every process, and both go on
  it_mpi("a refused argument (a root out of range) stays a Lua error on both, which go on", function()
    local text, rc = job("user_fault", "bad_root")
    assert.are.equal(0, rc, text)
    for r = 0, 1 do
      assert.matches(("rank %d bad_root: [^\n]*root must be a rank in 0..1, got 5"):format(r), text)
      assert.matches(("rank %d after: 2"):format(r), text)
    end
  end)
end)

describe("find_executable_batch_size on two processes", function()
  -- both processes ran at 4 after trying 8, and their parameters' sums are the same
  local function retried_alike(text)
    for r = 0, 1 do assert.matches(("rank %d: ran at 4; tried 8,4\n"):format(r), text) end
    local s0, s1 = text:match("rank 0 sum: (%S+)"), text:match("rank 1 sum: (%S+)")
    assert.is_not_nil(s0, text)
    assert.are.equal(s0, s1, text)
  end

  local it_mpi = MPI.can and it or pending
  -- both run out of memory at 8: both retry at 4, their DDP steps pair, their parameters stay alike
  it_mpi("out of memory on both: both retry at the smaller size", function()
    local text, rc = job("batch_fault", "both")
    assert.are.equal(0, rc, text)
    retried_alike(text)
  end)

  -- rank 1 only: before, rank 1 retried at 4 while rank 0's step at 8 went on (its backward's call check met rank
  -- 1's next one); now one error on both, naming the out of memory
  it_mpi("out of memory on one process only: both end with one error naming it", function()
    local text, rc = job("batch_fault", "one")
    assert.are.equal(0, rc, text)   -- (the script catches the error and ends)
    assert.is_nil(text:find("ran at", 1, true), text)
    for r = 0, 1 do
      assert.matches(("rank %d: [^\n]*find_executable_batch_size: rank 1 ran out of memory at batch size 8"):format(r),
        text)
    end
  end)

  -- rank 1's DDP write-back ran out of memory: the step failed on both (DDP's flags), rank 0 with DDP's error for
  -- another's failure; before, rank 1 alone retried and rank 0 raised
  it_mpi("an out of memory inside DDP's step on one process: both retry at the smaller size", function()
    local text, rc = job("batch_fault", "step", "ddp_grad:1@1")
    assert.are.equal(0, rc, text)
    retried_alike(text)
  end)
end)
