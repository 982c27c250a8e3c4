-- mpi.lua — what the specs that run scripts under `mpirun -np 2` share (dist_spec, dist2_spec): whether they can
-- (mpirun installed and fp8lab built with MPI), why not, and the flag a root user needs. Loaded with
-- `local MPI = dofile("tests/spec/helpers/mpi.lua")`; not a spec itself.
local D = require "fp8._dist"
local sys = require("fp8.config").sys

local M = {}
local has_mpirun = os.execute("command -v mpirun >/dev/null 2>&1") == true
M.can = has_mpirun and D.info().mpi_built
M.why = not has_mpirun and "mpirun not installed (apt-get install openmpi-bin)"
  or "fp8lab built without MPI (libopenmpi-dev; MPI=auto)"
M.root = sys.geteuid() == 0 and " --allow-run-as-root" or ""
-- put before mpirun: under make sanitize (ASAN_OPTIONS set) OpenMPI's own allocations are not leak-checked, or
-- every rank would exit non-zero at its end
local asan = os.getenv("ASAN_OPTIONS")
M.env = asan and ("env ASAN_OPTIONS='" .. asan:gsub("'", "") .. ":detect_leaks=0' ") or ""
return M
