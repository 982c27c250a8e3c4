-- api_sweep_spec.lua — the short, seeded mode of the API sweep (tests/fuzz/api_sweep.lua): every entry of
-- the live API at least once and a random sample of the rest of entry x hostile value, in child
-- processes; no call may crash, hang or trip a sanitizer. `make fuzz` runs the full sweep.
local BIN = assert(FP8LAB_BIN, "run through tests/busted.lua, which sets FP8LAB_BIN")

describe("api sweep (short, seeded)", function()
  it("no call crashes, hangs or trips a sanitizer", function()
    local calls = os.getenv("FP8LAB_SWEEP_CALLS") or "50000"
    local log = os.tmpname()
    local cmd = ("FP8LAB_EXE=%q timeout -s KILL 600 %q tests/fuzz/api_sweep.lua --quick --seed 1 --calls %s >%s 2>&1")
      :format(BIN, BIN, calls, log)
    local _, _, rc = os.execute(cmd)
    local f = io.open(log, "rb"); local out = f and f:read("a") or ""; if f then f:close() end
    os.remove(log)
    assert.are.equal(0, rc, out)
    assert.truthy(out:find("0 crashes/hangs/sanitizer reports", 1, true), out)
  end)
end)
