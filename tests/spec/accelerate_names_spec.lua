-- accelerate_names_spec.lua — names Accelerate's example scripts (examples/by_feature) use, under the same names and
-- meanings: DistributedType and DDPCommunicationHookType, end_training, LocalSGD (one process here, two under mpirun).
local bin = FP8LAB_BIN or "build/fp8lab"
local U = dofile("tests/spec/helpers/util.lua")
local MPI = dofile("tests/spec/helpers/mpi.lua")

local function acc1() return fp8.Accelerator{ cpu = true, config = false, env = {} } end
-- a one-process accelerator with a prepared Linear(nin, nout) and SGD: acc, model, opt
local function prepared(nin, nout)
  local acc = acc1()
  local m = fp8.nn.Linear(nin, nout)
  local opt = fp8.optim.SGD(m:parameters(), { lr = 0.1 })
  m, opt = acc:prepare(m, opt)
  return acc, m, opt
end

describe("Accelerate's enums", function()
  it("DistributedType members are their names; acc.distributed_type is one", function()
    local DT = fp8.DistributedType
    assert.equal("NO", DT.NO)
    assert.equal("MULTI_GPU", DT.MULTI_GPU)
    assert.equal("XLA", DT.XLA)
    assert.equal(DT.NO, acc1().distributed_type)
    -- a misspelt member raises (it would be nil, and every comparison with it false)
    U.fails_with("DistributedType has no member TPU (members: NO, MULTI_CPU, MULTI_GPU", function() return DT.TPU end)
  end)

  it("DDPCommunicationHookType(value) checks a value, and its members are DistributedDataParallelKwargs' strings", function()
    local H = fp8.DDPCommunicationHookType
    assert.equal("fp16", H("fp16"))
    assert.equal("bf16", H.BF16)
    U.fails_with('DDPCommunicationHookType("fp8"): not a valid DDPCommunicationHookType (valid: "no", "fp16"',
      function() H("fp8") end)
    local k = fp8.DistributedDataParallelKwargs{ comm_hook = H.FP16 }
    assert.equal("fp16", k.comm_hook)
  end)
end)

describe("Accelerator:end_training", function()
  it("runs without trackers, so a script that ends with it ends; arguments are refused", function()
    local acc = acc1()
    assert.has_no.errors(function() acc:end_training() end)
    U.fails_with("end_training: takes no arguments", function() acc:end_training(1) end)
    -- without log_with, log has no tracker to write to, and get_tracker gives one that does nothing (as
    -- Accelerate's GeneralTracker(_blank=True) while no tracker runs: tracking.md's get_tracker before init_trackers)
    assert.has_no.errors(function() acc:log({ a = 1 }) end)
    local blank = acc:get_tracker("tensorboard")
    assert.has_no.errors(function() blank:log({ a = 1 }, 1) end)
  end)
end)

describe("acc.gradient_accumulation_steps assigned by a script", function()
  it("takes effect (automatic_gradient_accumulation.py sets it per trial), and a bad value is refused by name", function()
    local acc, m = prepared(2, 2)
    acc.gradient_accumulation_steps = 2
    local syncs = {}
    for i = 1, 4 do acc:accumulate(m, function() syncs[i] = acc.sync_gradients end) end
    assert.same({ false, true, false, true }, syncs)
    acc.gradient_accumulation_steps = 0
    U.fails_with("accumulate: acc.gradient_accumulation_steps must be an integer >= 1, got 0", function()
      acc:accumulate(m, function() end) end)
    acc.gradient_accumulation_steps = 1.5
    U.fails_with("backward: acc.gradient_accumulation_steps must be an integer >= 1, got 1.5", function()
      acc:backward(m(fp8.ones(1, 2)):sum()) end)
  end)
end)

describe("fp8.LocalSGD", function()
  it("under one process is disabled: step() counts, the weights and gradient sync are untouched", function()
    local acc, model = prepared(3, 2)
    local before = model.weight:clone()
    do
      local l <close> = fp8.LocalSGD{ accelerator = acc, model = model, local_sgd_steps = 1 }
      assert.is_false(l.enabled)
      l:step(); l:step()
      assert.equal(2, l.num_steps)
    end
    assert.equal(0, (model.weight - before):abs():max():item())
    assert.is_false(require("fp8.local_sgd")._any_open(acc))
  end)

  it("refuses what it cannot use, naming it", function()
    local acc = acc1()
    local m = fp8.nn.Linear(3, 2)
    U.fails_with("LocalSGD: accelerator must be an fp8.Accelerator", function() fp8.LocalSGD{ accelerator = {}, model = m,
      local_sgd_steps = 2 } end)
    U.fails_with("LocalSGD: model must be an fp8.nn Module", function() fp8.LocalSGD{ accelerator = acc, model = {},
      local_sgd_steps = 2 } end)
    U.fails_with("LocalSGD: local_sgd_steps must be an integer >= 1", function() fp8.LocalSGD{ accelerator = acc,
      model = m, local_sgd_steps = 0 } end)
    U.fails_with("LocalSGD: unknown option 'steps'", function() fp8.LocalSGD{ accelerator = acc, model = m, steps = 2 } end)
    -- enabled=false takes no local_sgd_steps (Accelerate's example passes None then)
    assert.has_no.errors(function() fp8.LocalSGD{ accelerator = acc, model = m, enabled = false }:close() end)
    local closed = fp8.LocalSGD{ accelerator = acc, model = m, local_sgd_steps = 2 }
    closed:close()
    U.fails_with("LocalSGD:step: this LocalSGD was closed", function() closed:step() end)
  end)

  it("under 2 processes: the weights part between averages; each average is the ranks' mean; agree after close",
    function()
    if not MPI.can then pending(MPI.why) return end
    local p = assert(io.popen(("timeout -k 5 60 %smpirun --oversubscribe%s -np 2 -x OMP_NUM_THREADS=1 %s %s 2>&1")
      :format(MPI.env, MPI.root, U.q(bin), "tests/dist/local_sgd.lua")))
    local out = p:read("a")
    local _, _, code = p:close()
    assert.equal(0, code, out)
    for r = 0, 1 do
      local want = "rank%d type=MULTI_CPU 1:apart 2:mean 3:apart 4:mean closed:same ddp:same odd:refused order:same "
        .. "closed_co:same"
      assert.truthy(out:find(want:format(r), 1, true), out)
    end
  end)
end)
