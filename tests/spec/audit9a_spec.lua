-- Found on 2026-12-06 (stop 93) porting an Accelerate multi-process training script: launch, config.yaml, gradient
-- accumulation, the collective utilities, save_state/load_state and resume, the DDP kwargs, a process on another path
-- (docs/robustness.md, "Porting an Accelerate multi-process script (stop 93)"). The two-process cases run
-- tests/dist/audit9a.lua under `mpirun -np 2`, each bounded by `timeout`; pending without mpirun or an MPI build.
local bin = FP8LAB_BIN or "build/fp8lab"
local U = dofile("tests/spec/helpers/util.lua")
local q = U.q
local MPI = dofile("tests/spec/helpers/mpi.lua")
local can, why, root = MPI.can, MPI.why, MPI.root
local SCRIPT = "tests/dist/audit9a.lua"

local function mpirun(args)
  local p = assert(io.popen(("timeout -k 5 90 %smpirun --oversubscribe%s -np 2 -x OMP_NUM_THREADS=1 %s %s %s 2>&1")
    :format(MPI.env, root, q(bin), q(SCRIPT), args)))
  local out = p:read("a")
  local _, _, code = p:close()
  return out, code
end

local function tmpdir()
  local d = os.tmpname()
  os.remove(d)
  return d
end

describe("a process on another path than the others (2 processes)", function()
  it("save_state, load_state or gather on the main process alone is one error on both at once, not a wait for the "
    .. "timeout", function()
    if not can then pending(why) return end
    local dir = tmpdir()
    local out, code = mpirun("mainonly " .. q(dir))
    os.execute("rm -rf " .. q(dir))
    assert.are.equal(0, code, out)   -- (before: both waited in each other's collectives until the 20 s timeout)
    local hint = ": every process must call the same collective utilities in the same order (acc:backward, save_state "
      .. "and load_state are collectives too: call them on every process, not under `if acc:is_main_process()`)\n"
    for r = 0, 1 do
      for _, call in ipairs { "save_state", "load_state", "gather" } do
        local want = ("rank%d %s=backward: rank 1 calls backward where rank 0 calls %s%s"):format(r, call, call, hint)
        assert.truthy(out:find(want, 1, true), out)
      end
      assert.truthy(out:find(("rank%d after=0.0,1.0\n"):format(r), 1, true), out)   -- and in step after it
    end
  end)

  it("a process that ended its script while another is in save_state says so when the watchdog ends the job", function()
    if not can then pending(why) return end
    local dir = tmpdir()
    local out, code = mpirun("mainonly_end " .. q(dir))
    os.execute("rm -rf " .. q(dir) .. " " .. q(dir .. ".tmp"))
    assert.are_not.equal(0, code, out)
    assert.are_not.equal(124, code, "a hang: " .. out)
    -- (before: "rank 1: MPI_Finalize waited 3 s, past the process group timeout of 3 s (another rank is stuck or gone)")
    assert.truthy(out:find("rank 1 ended its script and waited %d+ s in MPI_Finalize for the other ranks, past the "
      .. "process group timeout of 3 s %(one is stuck, gone, or in a collective call this rank did not make: a "
      .. "save_state, gather or wait_for_everyone called on some processes only, e%.g%. under `if "
      .. "acc:is_main_process%(%)`%)"), out)
  end)

  it("a LocalSGD made while one of the same model was never closed is refused (its no_sync stayed on for good)",
    function()
    if not can then pending(why) return end
    local out, code = mpirun("localsgd")
    assert.are.equal(0, code, out)
    for r = 0, 1 do
      -- (before: made, and every later backward kept each process's own gradients)
      assert.truthy(out:find(("rank%d second=LocalSGD: a LocalSGD of this model is still open (never closed: its "
        .. "no_sync keeps every backward's gradients local until it closes); close it first"):format(r), 1, true), out)
      assert.truthy(out:find(("rank%d grads_agree=true\n"):format(r), 1, true), out)
    end
  end)

  it("save_state on the main process alone against a training-mode forward of a model with buffers: one error", function()
    if not can then pending(why) return end
    local dir = tmpdir()
    local out, code = mpirun("mainonly_bn " .. q(dir))
    os.execute("rm -rf " .. q(dir))
    assert.are.equal(0, code, out)   -- (before: a wait until the timeout)
    for r = 0, 1 do
      assert.truthy(out:find(("rank%d save_state=forward: rank 1 calls forward where rank 0 calls save_state: every "
        .. "process must call the same collective utilities in the same order (acc:backward, save_state and load_state "
        .. "are collectives too: call them on every process, not under `if acc:is_main_process()`); so is a "
        .. "training-mode forward of a prepared model with buffers (broadcast_buffers sends rank 0's before it): run "
        .. "one on a single process in eval mode\n"):format(r), 1, true), out)
    end
    -- both hold rank 0's running statistics (rank 1's forward never ran)
    local a = out:match("rank0 after=([^\n]+)")
    assert.truthy(a, out)
    assert.truthy(out:find("rank1 after=" .. a, 1, true), out)
  end)
end)

describe("the comparison every collective call starts with", function()
  it("is one all-reduce without the dtype and count exchange, and takes fp32 tensors only", function()
    local D = require "fp8._dist"
    local t = fp8.tensor { 3, -3 }
    assert.are.equal(t, D._all_reduce_unchecked(t, "max"))   -- one process: the values as they are
    assert.are.same({ 3, -3 }, t:totable())
    local ok, err = pcall(D._all_reduce_unchecked, fp8.ones { 2 }:to("bf16"), "max")
    assert.is_false(ok)
    assert.matches("dist._all_reduce_unchecked: expected an fp32 tensor, got bf16", err, 1, true)
    ok, err = pcall(D._all_reduce_unchecked, fp8.ones { 2 }, "min")
    assert.is_false(ok)
    assert.matches('op must be "sum" or "max", got "min"', err, 1, true)
  end)
end)
