-- device_spec.lua — the device API as far as it runs without a GPU: tensor moves to the device a tensor
-- is already on, Module:to / device(), DataLoader and Accelerator placement on the CPU, and clean errors
-- when CUDA is asked for but absent (never a crash). tests/gpu/*_spec.lua cover the GPU itself.
local fp8 = fp8 or require "fp8"
local nn = fp8.nn

local has_gpu = fp8.cuda.is_available()

describe("tensor devices", function()
  it("to('cpu') / cpu() on a CPU tensor is the tensor itself; values survive", function()
    local x = fp8.randn { 3, 4 }
    assert.equals("cpu", x:device())
    assert.equals(x, x:to("cpu"))
    assert.equals(x, x:cpu())
    assert.same(x:totable(), x:to("cpu"):totable())
  end)

  it("factories take {dtype=, device=}", function()
    local z = fp8.zeros({ 2, 3 }, { dtype = "bf16", device = "cpu" })
    assert.equals("bf16", z:dtype())
    assert.equals("cpu", z:device())
    assert.equals("cpu", fp8.full({ 2 }, 3, { device = "cpu" }):device())
    assert.equals("cpu", fp8.randn({ 2 }, { device = "cpu" }):device())
    assert.equals("cpu", fp8.arange(4, { device = "cpu" }):device())
  end)

  it("move_ to the same device keeps data and grad", function()
    local w = fp8.randn { 4 }
    w:requires_grad(true)
    local before = w:totable();
    (w * 2):sum():backward()
    assert.equals(w, w:move_("cpu"))
    assert.same(before, w:totable())
    assert.same({ 2, 2, 2, 2 }, w.grad:totable())
  end)

  it("rejects unknown devices, naming the valid ones", function()
    local x = fp8.randn { 2 }
    local ok, err = pcall(x.to, x, "gpu")
    assert.is_false(ok)
    assert.matches("unknown dtype 'gpu'", err, 1, true)
    assert.matches("cpu, cuda", err, 1, true)
    ok, err = pcall(x.move_, x, "tpu")
    assert.is_false(ok)
    assert.matches("unknown device 'tpu' (valid: cpu, cuda)", err, 1, true)
    ok, err = pcall(x.move_, x, 3)
    assert.matches('device must be "cpu" or "cuda", got number', err, 1, true)
  end)

  if not has_gpu then
    it("asking for cuda without a GPU is an error, not a crash, and the tensor stays usable", function()
      local x = fp8.randn { 2, 2 }
      for _, f in ipairs { function() return x:cuda() end, function() return x:to("cuda") end,
                           function() return x:move_("cuda") end,
                           function() return fp8.zeros({ 2 }, { device = "cuda" }) end } do
        local ok, err = pcall(f)
        assert.is_false(ok)
        assert.matches("device cuda is not available", err, 1, true)
      end
      assert.equals("cpu", x:device())
      assert.equals(4, #x:totable() * 2)
    end)

    it("fp8.cuda's memory counters read 0 and empty_cache does nothing, as torch's without a GPU", function()
      -- a training script that prints its peak GPU memory at the end ran into 'fp8lab was built without CUDA'
      -- on the CPU build; synchronize, which needs the GPU, still raises (torch's does too)
      local c = fp8.cuda
      c.reset_peak_memory_stats()
      c.empty_cache()
      assert.same({ 0, 0, 0, 0 },
        { c.memory_allocated(), c.max_memory_allocated(), c.memory_reserved(), c.max_memory_reserved() })
      assert.is_false((pcall(c.synchronize)))
    end)
  end
end)

describe("Module devices", function()
  it("to('cpu') / cpu() return the module; device() reports the parameters' device", function()
    local m = nn.Sequential(nn.Linear(4, 3), nn.ReLU(), nn.Linear(3, 2))
    assert.equals("cpu", m:device())
    assert.equals(m, m:to("cpu"))
    assert.equals(m, m:cpu())
    assert.equals("cpu", nn.ReLU():device())
  end)

  it("rejects a bad device", function()
    local m = nn.Linear(2, 2)
    local ok, err = pcall(m.to, m, "gpu")
    assert.is_false(ok)
    assert.matches([[to: device must be "cpu" or "cuda", got 'gpu']], err, 1, true)
  end)

  if not has_gpu then
    it("cuda() without a GPU fails cleanly and leaves the model on the CPU, still working", function()
      local m = nn.Linear(3, 2)
      local ok, err = pcall(m.cuda, m)
      assert.is_false(ok)
      assert.matches("device cuda is not available", err, 1, true)
      assert.equals("cpu", m:device())
      assert.same({ 5, 2 }, m(fp8.randn { 5, 3 }):shape())
    end)
  end
end)

describe("placement by the Accelerator", function()
  it("picks cuda only when a GPU is usable, and cpu=true forces the CPU", function()
    local acc = fp8.Accelerator {}
    assert.equals(has_gpu and "cuda" or "cpu", acc:device())
    assert.equals("cpu", fp8.Accelerator { cpu = true }:device())
    local ok, err = pcall(fp8.Accelerator, { cpu = "yes" })
    assert.is_false(ok)
    assert.matches("cpu must be a boolean, got string", err, 1, true)
  end)

  it("prepare puts model and data loader on its device; batches come out there", function()
    local acc = fp8.Accelerator { cpu = true }
    local ds = {}
    for i = 1, 8 do ds[i] = { fp8.randn { 4 }, i % 2 } end
    local loader = fp8.data.DataLoader { ds, batch_size = 4 }
    local model = nn.Linear(4, 2)
    local m2, l2 = acc:prepare(model, loader)
    assert.equals(model, m2)
    assert.equals(loader, l2)
    assert.equals("cpu", loader.device)
    for x, y in l2 do
      assert.equals("cpu", x:device())
      assert.equals("cpu", y:device())
    end
  end)
end)
