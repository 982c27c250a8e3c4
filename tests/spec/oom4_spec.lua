-- Found on 2026-12-07 (stop 103): out of memory, what stop 102 left: Open MPI's MPI_ERR_INTERN (its answer where an
-- allocation of its own fails) was not named as an out of memory.
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
  -- temporary buffer, libnbc's schedule), which said 'MPI_ERR_INTERN: internal error' only
  it_mem("names MPI's out of memory as one, blocking and not, and the collectives run after it", function()
    if not MPI.can then pending(MPI.why) return end
    local text, rc = job("tests/dist/oom_mpi.lua")
    assert.are.equal(0, rc, text)
    for r = 0, 1 do
      for _, kind in ipairs { "blocking", "non%-blocking" } do
        assert.matches(("rank %d %s: [^\n]*failed on rank %d: out of memory inside MPI %%(MPI_ERR_INTERN"):format(r,
          kind, r), text)
      end
      assert.matches(("rank %d then: 4.0\n"):format(r), text)
    end
  end)
end)
