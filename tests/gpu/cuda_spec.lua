-- cuda_spec.lua — fp8.cuda: the availability questions always answer, and without a GPU (or
-- without CUDA built in) the other functions behave as documented instead of crashing.
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

  if not cuda.is_built() then
    it("raises 'built without CUDA' for everything but the questions", function()
      for _, f in ipairs { "synchronize", "memory_allocated", "max_memory_allocated", "empty_cache" } do
        local okf, err = pcall(cuda[f])
        assert.is_false(okf, f)
        assert.matches("fp8lab was built without CUDA", err, 1, true)
      end
      assert.equals("fp8lab was built without CUDA", cuda.unavailable_reason())
    end)
  elseif not cuda.is_available() then
    it("reports no GPU: zero memory, synchronize fails with the reason", function()
      assert.equals(0, cuda.memory_allocated())
      assert.equals(0, cuda.max_memory_allocated())
      local okf, err = pcall(cuda.synchronize)
      assert.is_false(okf)
      assert.matches("no CUDA GPU available", err, 1, true)
      assert.is_string(cuda.unavailable_reason())
    end)
  else
    it("synchronizes and reports memory as integers", function()
      cuda.synchronize()
      local a, m = cuda.memory_allocated(), cuda.max_memory_allocated()
      assert.equals("integer", math.type(a))
      assert.is_true(m >= a)
      assert.is_nil(cuda.unavailable_reason())
      cuda.reset_peak_memory_stats()
      assert.equals(cuda.memory_allocated(), cuda.max_memory_allocated())
    end)
  end
end)
