-- dist2_spec.lua — collectives under `mpirun -np 2` compared with what torch.distributed / Accelerate give
-- (docs/distributed.md); no fault injection here (dist_spec.lua has those). Pending without mpirun or an MPI build.
local bin = FP8LAB_BIN or "build/fp8lab"
local U = dofile("tests/spec/helpers/util.lua")
local q = U.q
local MPI = dofile("tests/spec/helpers/mpi.lua")
local can, why, root = MPI.can, MPI.why, MPI.root
local mpi_env = MPI.env   -- OpenMPI's own allocations are not leak-checked under make sanitize

local function mpirun(script, args)
  local p = assert(io.popen(("timeout -k 5 60 %smpirun --oversubscribe%s -np 2 -x OMP_NUM_THREADS=1 %s %s %s 2>&1")
    :format(mpi_env, root, q(bin), q(script), args or "")))
  local out = p:read("a")
  local _, _, code = p:close()
  return out, code
end

describe("fp8._dist collectives (2 processes)", function()
  it("refuse buffers that differ across ranks on every rank; FP8 bytes of one scale keep it", function()
    if not can then pending(why) return end
    local out, code = mpirun("tests/dist/lowlevel.lua")
    assert.are.equal(0, code, out)
    for r = 0, 1 do
      for _, want in ipairs {
        "ar_dtype=dist.all_reduce: rank 1 has a bf16 tensor of 2 elements where rank 0 has a fp32 tensor of 2",
        "ar_numel=dist.all_reduce: rank 1 has a fp32 tensor of 3 elements where rank 0 has a fp32 tensor of 2",
        "ag_dtype=dist.all_gather: rank 1 has a fp16 tensor [2] where rank 0 has a fp32 tensor [2]",
        "ar_scale=dist.all_reduce: rank 1's FP8 tensor has scale_inv 0.0178571",
        "ag_scale=dist.all_gather: rank 1's FP8 tensor has scale_inv",
        "ag_fp8=1.0,112.0,2.0,112.0\n",
        -- each rank's sum in E4M3 codes of scale 1/4: 3 exactly, 224 saturates at 448 (torch's sum of
        -- float8_e4m3fn tensors has no scale; here the bytes are added with the one scale they share)
        "ar_fp8=3.0,112.0\n",
      } do
        assert.truthy(out:find(("rank%d %s"):format(r, want), 1, true), out)
      end
    end
    assert.truthy(out:find("rank0 rs_fp8=3.0,112.0\n", 1, true), out)
    assert.truthy(out:find("rank1 rs_fp8=4.0,6.0\n", 1, true), out)
  end)

  it("a process in another utility (gather against reduce or gather_object) is one error on every process", function()
    if not can then pending(why) return end
    local out, code = mpirun("tests/dist/mismatch.lua")
    assert.are.equal(0, code, out)
    local same = ": every process must call the same collective utilities in the same order\n"
    for r = 0, 1 do
      for _, want in ipairs {
        "gather_reduce=reduce: rank 1 calls reduce where rank 0 calls gather" .. same,
        "gather_object=gather_object: rank 1 calls gather_object where rank 0 calls gather" .. same,
        "pad_gather=gather: rank 1 calls gather where rank 0 calls pad_across_processes" .. same,
        "metrics_gather=gather: rank 1 calls gather where rank 0 calls gather_for_metrics" .. same,
        "trigger_gather=gather: rank 1 calls gather where rank 0 calls check_trigger" .. same,
        "wait_gather=gather: rank 1 calls gather where rank 0 calls wait_for_everyone" .. same,
        "after=0.0,1.0\n",   -- and in step for the next collective
      } do
        assert.truthy(out:find(("rank%d %s"):format(r, want), 1, true), out)
      end
    end
  end)

  it("acc:broadcast fills tensors in place from one process; broadcast_object_list fills a list", function()
    if not can then pending(why) return end
    local out, code = mpirun("tests/dist/broadcast.lua")
    assert.are.equal(0, code, out)
    for r = 0, 1 do
      for _, want in ipairs {
        "tensors=bf16 10.0 2.0,3.0 true\n", "objects=3 x 1 3.5\n", "ints=integer true integer integer\n",
        "shape=broadcast: the tensors differ across processes: rank 1 has fp32[3] where rank 0 has fp32[2]\n",
        "from=broadcast: rank 1 sends from process 1 where rank 0 sends from 0: every process must name the same one\n",
        "range=broadcast_object_list: from_process must be a process index in 0..1, got 7\n",
        "hole=rank 0: broadcast_object_list: expected a list, got a list with a hole at 1",
        "fp8cache=true\n",   -- false when broadcast left the version: rank 1 kept its own cached FP8 weight
        "after=0.0,1.0\n",
      } do
        assert.truthy(out:find(("rank%d %s"):format(r, want), 1, true), out)
      end
    end
  end)

  it("even_batches=false: a gather_for_metrics per batch where the ranks' batch counts differ is refused on both", function()
    if not can then pending(why) return end
    local out, code = mpirun("tests/dist/uneven.lua")
    assert.are.equal(0, code, out)
    local refused = "gather_for_metrics: rank 1 is at the last batch of its prepared loader, rank 0 is not: the "
      .. "processes have different numbers of batches (even_batches=false)"
    for r, want in pairs { [0] = { "even=true len=2 mine=1.0,2.0|5.0,1.0 gathered=1.0,2.0,3.0,4.0,5.0 ok\n",
        "even=false len=2 mine=1.0,2.0 gathered= tests/dist/uneven.lua:17: " .. refused, "after=0.0,1.0\n" },
      [1] = { "even=true len=2 mine=3.0,4.0|2.0,3.0 gathered=1.0,2.0,3.0,4.0,5.0 ok\n",
        "even=false len=1 mine=3.0,4.0 gathered= tests/dist/uneven.lua:17: " .. refused, "after=0.0,1.0\n" } } do
      for _, w in ipairs(want) do assert.truthy(out:find(("rank%d %s"):format(r, w), 1, true), out) end
    end
  end)

  it("split_batches=true: each process a slice of every batch, one scheduler step a step, resumed mid-epoch", function()
    if not can then pending(why) return end
    local dir = U.tmpdir() .. "/split_ckpt"
    local out, code = mpirun("tests/dist/split.lua", q(dir))
    assert.are.equal(0, code, out)
    local all = "gathered=1.0,2.0,3.0,4.0,5.0,6.0,7.0,8.0,9.0,10.0"
    -- (raised at the script's own line)
    local odd = "prepare: with split_batches=true the batch size (3) must be a round multiple of the number of "
      .. "processes (2): each process takes batch_size / 2 samples of every batch"
    for r, want in pairs {
      -- the short last batch [9, 10] completed from the first batch [1, 2, 3, 4] under even_batches; gather cuts it;
      -- the scheduler stepped 3 times for 3 optimizer steps (without split_batches 4 for 2: 2 a step, as Accelerate)
      [0] = { "split=true even=true len=3 total=4 mine=1.0,2.0|5.0,6.0|9.0,10.0 " .. all .. " sched=3\n",
        "split=true even=false len=3 total=4 mine=1.0,2.0|5.0,6.0|9.0,10.0 gathered= sched=0\n",
        "split=false even=true len=2 total=8 mine=1.0,2.0,3.0,4.0|9.0,10.0,1.0,2.0 " .. all .. " sched=4\n" },
      [1] = { "split=true even=true len=3 total=4 mine=3.0,4.0|7.0,8.0|1.0,2.0 " .. all .. " sched=3\n",
        "split=true even=false len=2 total=4 mine=3.0,4.0|7.0,8.0 gathered= sched=0\n",
        "split=false even=true len=2 total=8 mine=5.0,6.0,7.0,8.0|3.0,4.0,5.0,6.0 " .. all .. " sched=4\n" } } do
      for _, w in ipairs(want) do assert.truthy(out:find(("rank%d %s"):format(r, w), 1, true), out) end
      assert.are.equal(odd, out:match(("rank%d odd: tests/dist/split%%.lua:%%d+: ([^\n]+)"):format(r)), out)
      -- the batches a checkpoint taken after the first resumes with are the ones the first run went on with
      local resumed, rest = out:match(("rank%d resumed=(%%S+) rest=(%%S+)"):format(r))
      assert.truthy(resumed, out)
      assert.are.equal(rest, resumed)
      assert.are.equal(2, select(2, resumed:gsub(",", ",")), "two batches of two samples: " .. resumed)
    end
  end)
end)
