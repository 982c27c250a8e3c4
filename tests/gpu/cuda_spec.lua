-- cuda_spec.lua — fp8.cuda: the availability questions always answer, and without a GPU (or
-- without CUDA built in) the other functions behave as torch's do instead of crashing.
local ok, cuda = pcall(require, "fp8.cuda")
if not ok then cuda = require("fp8").cuda end

describe("fp8.cuda", function()
  it("is hooked into fp8", function()
    assert.is_table(cuda)
  end)

  it("answers is_built and is_available with booleans", function()
    assert.is_boolean(cuda.is_built())
    assert.is_boolean(cuda.is_available())
  end)

  it("counts devices consistently with is_available", function()
    local n = cuda.device_count()
    assert.equals("integer", math.type(n))
    assert.is_true(n >= 0)
    assert.equals(n > 0, cuda.is_available())
    if not cuda.is_built() then assert.equals(0, n) end
  end)

  if not cuda.is_available() then
    -- as torch without a GPU (a CUDA build or not): the counters read 0 and empty_cache does nothing, so a script
    -- that prints its peak GPU memory runs on the CPU; synchronize, which needs the GPU, raises why (the CPU build's
    -- counters raised 'fp8lab was built without CUDA')
    it("reports no GPU: zero memory, empty_cache does nothing, synchronize fails with the reason", function()
      for _, f in ipairs { "memory_allocated", "max_memory_allocated", "memory_reserved", "max_memory_reserved" } do
        local v = cuda[f]()
        assert.equals("integer", math.type(v), f)
        assert.equals(0, v, f)
      end
      assert.equals(0, select("#", cuda.empty_cache()))
      assert.equals(0, select("#", cuda.reset_peak_memory_stats()))   -- torch raises here; a peak of 0 is reset
      assert.equals(0, cuda.max_memory_allocated())
      local okf, err = pcall(cuda.synchronize)
      assert.is_false(okf)
      local why = cuda.is_built() and "no CUDA GPU available" or "synchronize: fp8lab was built without CUDA"
      assert.matches(why, err, 1, true)
      assert.is_string(cuda.unavailable_reason())
      if not cuda.is_built() then assert.equals("fp8lab was built without CUDA", cuda.unavailable_reason()) end
    end)
  else
    it("synchronizes and reports memory as integers", function()
      cuda.synchronize()
      local a, m = cuda.memory_allocated(), cuda.max_memory_allocated()
      assert.equals("integer", math.type(a))
      assert.is_true(m >= a)
      assert.is_nil(cuda.unavailable_reason())
      assert.is_true(cuda.max_memory_reserved() >= cuda.memory_reserved())
      cuda.reset_peak_memory_stats()
      assert.equals(cuda.memory_allocated(), cuda.max_memory_allocated())
      assert.equals(cuda.memory_reserved(), cuda.max_memory_reserved())   -- both peaks, as torch's
    end)

    it("the profiler records device time with activities \"cuda\"", function()
      local fp8 = require "fp8"
      local prof = fp8.profiler.profile{ activities = { "cpu", "cuda" }, with_flops = true }
      assert.is_true(prof.device)
      local a, b = fp8.randn({ 1024, 1024 }):cuda(), fp8.randn({ 1024, 1024 }):cuda()
      prof:run(function() for _ = 1, 5 do a = a:matmul(b) * 1e-3 end end)
      local mm
      for _, r in ipairs(prof:key_averages()) do if r.key == "matmul" then mm = r end end
      assert.equals(5, mm.count)
      -- 5 GEMMs of 2.1 GFLOP each take device time; a bound no GPU reaches (10 PFLOP/s) and a sane upper one
      assert.is_true(mm.device_time_total_ns > 5 * 2.1e9 / 1e16 * 1e9, tostring(mm.device_time_total_ns))
      assert.is_true(mm.device_time_total_ns < 5e9)
      local s = tostring(prof:key_averages())
      assert.truthy(s:find("Device Total (ms)", 1, true))
      local path = os.tmpname()
      prof:export_chrome_trace(path)
      local f = io.open(path)
      local text = f:read("a")
      f:close()
      os.remove(path)
      assert.truthy(text:find('"cat": "device"', 1, true))
    end)
  end
end)
