-- Found on 2026-12-06 (stop 94): leaks and resources in long-lived processes — bindings that allocate and then raise,
-- and what many failing (pcall'd) or repeated calls leave behind (memory, descriptors, temporary files).
-- docs/robustness.md, "Leaks and resources in a long session (stop 94)". No timings: sizes and counts only.

-- This process's virtual size in bytes (/proc/self/statm's first field): memory a call loses grows it, resident or
-- not (a large calloc is fresh mmap'd pages, which RSS does not count until touched).
local function vm_bytes()
  local f = assert(io.open("/proc/self/statm"))
  local pages = tonumber(f:read("l"):match("^(%d+)"))
  f:close()
  return pages * 4096
end

-- The open descriptors of this process.
local function fd_count()
  local pid = io.open("/proc/self/stat"):read("l"):match("^(%d+)")
  local p = io.popen("ls /proc/" .. pid .. "/fd | wc -l")
  local n = tonumber(p:read("l"))
  p:close()
  return n
end

describe("FP8 layer state made from a bad role table", function()
  -- layer_new's three roles, each with an amax history of 2^20 entries (4 MiB); the grad role's warmup is out of
  -- range, which the binding raised after it had made the three roles' histories
  local function roles(warmup)
    local function role(fmt)
      return { format = fmt, rule = "delayed", pow2 = false, margin = 0, algo = "max", amax_history_len = 1 << 20,
               interval = 1 }
    end
    local r = { input = role("e4m3"), weight = role("e4m3"), grad = role("e5m2") }
    r.grad.warmup = warmup
    return r
  end

  it("keeps no memory of the roles made before the error (12 MiB a call leaked before)", function()
    local FL = require("fp8._fp8_layer")
    assert.is_true(pcall(FL.layer_new, roles(0)))   -- the table is right but for the warmup below
    local bad = roles(-1)
    local ok, err = pcall(FL.layer_new, bad)
    assert.is_false(ok)
    assert.matches("FP8 layer role grad: warmup must be in 0..1048576, got %-1", err)
    collectgarbage(); collectgarbage()
    local before = vm_bytes()
    for _ = 1, 40 do pcall(FL.layer_new, bad) end
    collectgarbage(); collectgarbage()
    -- 40 calls lost 480 MiB before the fix (all three histories: the grad role's is made before its warmup is read);
    -- what is left is the allocator's own slack
    assert.is_true(vm_bytes() - before < 64 * 1024 * 1024,
      ("virtual size grew by %d MiB over 40 failed calls"):format((vm_bytes() - before) >> 20))
  end)
end)
