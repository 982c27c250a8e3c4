-- crash_spec.lua — crash safety of save_state: a writer saving checkpoints in a loop is killed with
-- -9 at many moments; after each kill every checkpoint_N directory is complete, the latest one loads
-- in a new process and holds exactly the state the writer had when it started saving it (same eval
-- loss, bit for bit), and no temporary directory is ever taken for a checkpoint. Bounded: 8 rounds, each under a 60 s timeout (about 15 s in all on a busy 2-core machine).
local BIN = FP8LAB_BIN or "build/fp8lab"
local HELPER = "tests/spec/helpers/crash_writer.lua"
local C = require "fp8._checkpoint"

local U = dofile("tests/spec/helpers/util.lua")
local function read(path) return U.read(path) or "" end   -- "" while the file does not exist

local function sleep(s) os.execute(("sleep %.3f"):format(s)) end

describe("save_state survives kill -9", function()
  it("at every moment the latest complete checkpoint loads with the state it was saved with", function()
    local dir = os.tmpname()
    os.remove(dir)
    assert(C.mkdir(dir))
    local log = dir .. "/writer.log"
    local kills, checked = 0, 0
    local function count(pat) return select(2, read(log):gsub(pat, "")) end
    -- Kill points: after the writer has announced 2 or 3 more checkpoints (so one save completed
    -- before), then a delay spread over the next save (they take ~10-100 ms here).
    for round, delay in ipairs { 0, 0.004, 0.01, 0.02, 0.035, 0.05, 0.08, 0.12 } do
      -- $! is the writer itself (no timeout wrapper, which kill -9 would hit instead); it stops by itself after 60 s
      local pres = count("pre %d")
      os.execute(("%s %s %s >> %s 2>&1 & echo $! > %s/pid"):format(BIN, HELPER, dir, log, dir))
      local pid = read(dir .. "/pid"):match("%d+")
      local t = 0
      while count("pre %d") < pres + 2 + round % 2 and t < 600 do sleep(0.02); t = t + 1 end
      assert.is_true(t < 600, "the writer did not get going:\n" .. read(log))
      sleep(delay)
      os.execute("kill -9 " .. pid .. " 2>/dev/null")
      local w = 0   -- until it is gone (a zombie counts as gone; bounded)
      while os.execute("ps -o stat= -p " .. pid .. " | grep -qv Z") and w < 100 do sleep(0.02); w = w + 1 end
      assert.is_true(w < 100, "the writer survived kill -9")
      kills = kills + 1
      -- every checkpoint_N present is complete
      local names = C.listdir(dir .. "/checkpoints") or {}
      for _, n in ipairs(names) do
        if n:match("^checkpoint_%d+$") then
          for _, f in ipairs { "fp8lab_state.json", "model.safetensors", "optimizer.safetensors", "random_states_0.json" } do
            assert.is_true(C.is_dir(dir .. "/checkpoints/" .. n) and io.open(dir .. "/checkpoints/" .. n .. "/" .. f) ~= nil,
              n .. " lacks " .. f)
          end
        end
      end
      local p = io.popen(("timeout 60 %s %s %s verify 2>&1"):format(BIN, HELPER, dir))
      local out = p:read("a")
      p:close()
      local n, loss = out:match("loaded (%d+) (%S+)")
      if n then
        local want = read(log):match("pre " .. n .. " (%S+)")
        assert.are.equal(want, loss, "checkpoint " .. n)
        checked = checked + 1
      else
        assert.matches("no checkpoint yet", out)   -- killed before the first save completed
      end
    end
    assert.are.equal(8, kills)
    assert.are.equal(8, checked)
    os.execute("rm -rf " .. dir)
  end)
end)
