-- Found on 2026-12-07 (stop 104): DDP's collectives that fail twice or partway. Made to fail on one process by
-- FP8LAB_FAULT_DIST (core/fault.h, a test hook) in tests/dist/ddp_fault.lua under `mpirun -np 2` (its watchdog at
-- 30 s): a blocking all-reduce of the step (the failure flags, MS-AMP O1's amax, TE's amaxes) or a bucket's wait that
-- failed on rank 1 was its error alone: rank 0 waited in the collective until the watchdog ended the job, or took
-- the step as averaged while rank 1 did not (their parameters apart); a write-back that ran out of memory after the
-- flags failed rank 1's step while rank 0's ran. docs/robustness.md, "DDP failures that repeat or stop partway
-- (stop 104)".
local U = dofile("tests/spec/helpers/util.lua")
local MPI = dofile("tests/spec/helpers/mpi.lua")
local BIN = FP8LAB_BIN or "build/fp8lab"
local q = U.q

-- ddp_fault.lua MODE under two processes with FP8LAB_FAULT_DIST=fault: its output and exit status
local function job(mode, fault)
  local out = os.tmpname()
  local _, _, rc = os.execute(("%stimeout -s KILL 90 mpirun --oversubscribe%s -np 2 -x OMP_NUM_THREADS=1 -x "
    .. "FP8LAB_FAULT_DIST=%s %s tests/dist/ddp_fault.lua %s </dev/null >%s 2>&1"):format(MPI.env, MPI.root, q(fault),
    q(BIN), mode, out))
  return U.take(out), rc
end

-- the job ended by rank 1's named error, at once: not by the watchdog, and no rank went on to a step after it
local function ends(mode, fault, msg)
  local text, rc = job(mode, fault)
  assert.are_not.equal(0, rc, text)
  assert.matches("rank 1: " .. msg, text)
  assert.is_nil(text:find("past the process group timeout", 1, true), text)
  assert.is_nil(text:find("rank %d next:"), text)
  return text
end

-- the step failed on both ranks (rank 1 with msg), the next ran on both, and their parameters are the same
local function both_fail(mode, fault, msg)
  local text, rc = job(mode, fault)
  assert.are.equal(0, rc, text)
  assert.matches("rank 1 step: [^\n]*" .. msg, text)
  assert.matches("rank 0 step: [^\n]*DDP: another process's backward failed", text)
  for r = 0, 1 do assert.matches(("rank %d next: ran"):format(r), text) end
  local s0, s1 = text:match("rank 0 sum: (%S+)"), text:match("rank 1 sum: (%S+)")
  assert.is_not_nil(s0, text)
  assert.are.equal(s0, s1, text)
end

describe("DDP collectives that fail on one process", function()
  local it_mpi = MPI.can and it or pending
  it_mpi("a hook entry that cannot fire (an unknown site) is said and not used", function()
    local text, rc = job("plain", "allreduc:1@1")
    assert.are.equal(0, rc, text)
    assert.truthy(text:find("FP8LAB_FAULT_DIST: cannot read the entry 'allreduc:1@1'", 1, true), text)
  end)
  -- (stop 105) strtol read '@' with no rank as rank 0, '@-1' as every process and '+1' as 1: each fired on a first
  -- all-reduce, and the job ended there
  it_mpi("an entry whose count or rank is not digits is said and not used", function()
    local text, rc = job("plain", "allreduce:1@,allreduce:1@-1,allreduce:+1,allreduce: 1")
    assert.are.equal(0, rc, text)
    for _, e in ipairs { "allreduce:1@", "allreduce:1@-1", "allreduce:+1", "allreduce: 1" } do
      assert.truthy(text:find("FP8LAB_FAULT_DIST: cannot read the entry '" .. e .. "'", 1, true), text)
    end
  end)

  -- control: a bucket's MPI_Iallreduce refused once in the backward is issued again in its finish (stop 102): the step
  -- fails on both (the backward failed on rank 1), the next runs, and the parameters stay alike
  it_mpi("a bucket's start refused once: issued again, the step fails on both alike, the next runs", function()
    both_fail("plain", "iallreduce:2@1", "[^\n]*MPI_Iallreduce failed on rank 1")
  end)

  -- refused in the backward and at both tries in its finish (the second with DDP_RESERVE given back): the job ends
  -- naming the item (stop 103's abort, untested until now: no run could make the retries fail)
  it_mpi("a bucket's start refused at every try: the job ends naming it", function()
    ends("plain", "iallreduce:2-4@1", "DDP could not issue the all%-reduce of its gradient item 1 of 1")
  end)

  -- the flags' all-reduce (blocking) failed on rank 1: rank 1 raised and went on, rank 0 waited in it until the
  -- watchdog (30 s) ended the job
  it_mpi("the flags' all-reduce fails on one process: the job ends naming it", function()
    ends("plain", "allreduce:6@1", "DDP's all%-reduce of the step's failure flags failed")
  end)

  -- the backward's first collective, the call agreement check (lua/fp8/distributed.lua's _rank0_difference), failed on
  -- rank 1: rank 1 raised, rank 0's check met rank 1's flags and took the step as run, then waited until the watchdog
  it_mpi("the backward's call agreement check fails on one process: the job ends naming it", function()
    ends("plain", "allreduce:5@1", "the call agreement check's all%-reduce failed")
  end)

  -- a bucket's wait failed on rank 1 after the flags: rank 1's step failed, rank 0's ran (the sums differed)
  it_mpi("a bucket's wait fails on one process: the job ends naming it", function()
    ends("plain", "wait:2@1", "DDP's wait for a gradient all%-reduce failed")
  end)

  -- MS-AMP O1: an FP8 gradient's amax all-reduce (blocking) failed on rank 1: issued again in the finish, where
  -- rank 0 was in the item's sum
  it_mpi("MS-AMP O1's amax all-reduce fails on one process: the job ends naming it", function()
    ends("o1", "allreduce:9@1", "DDP's MAX all%-reduce of an FP8 gradient's amax %(MS%-AMP%) failed")
  end)

  -- TransformerEngine's delayed scaling: the step's amax all-reduce failed on rank 1: its error, while rank 0 waited
  it_mpi("TE's amax all-reduce fails on one process: the job ends naming it", function()
    ends("te", "allreduce:8@1", "the MAX all%-reduce of the delayed%-scaling amaxes failed")
  end)

  -- find_unused_parameters with the last Linear used on rank 0 only: rank 1's write-back makes that Linear's .grad,
  -- which ran out of memory after the flags: rank 1's step failed, rank 0's ran
  it_mpi("a write-back that runs out of memory: the step fails on both, the next runs, the parameters alike", function()
    both_fail("unused", "ddp_grad:3@1", "ddp: out of memory making the gradient of")
  end)

  -- (stop 105) comm_hook="fp16": a bucket's fp32 copy that cannot be had on rank 1 (oom4_spec's memory-limit case
  -- reaches it only where the hole is not met by MPI's own buffer first): the bucket goes out as zeros, rank 1's step
  -- fails and the flags make it rank 0's too; the next runs
  it_mpi("a bucket's packing that runs out of memory: the step fails on both, the next runs, the parameters alike",
    function()
      both_fail("fp16", "ddp_pack:2@1", "ddp: out of memory packing a bucket")
    end)
end)
