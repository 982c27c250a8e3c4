-- Writes that fail part-way (a full disk, a file-size limit): found by hand on 2026-12-05 (stop 88), filling a small
-- tmpfs and running under `ulimit -f`. Under a file-size limit a write past it raised SIGXFSZ, whose default killed
-- fp8lab in the middle of a save (exit 153, a stale "<dir>.tmp" left behind): fp8lab ignores the signal, so the write
-- fails with EFBIG and the writer says so. An append that failed part-way (TensorBoard's event files,
-- log_fp8_stats's CSV) left a torn record or row in the file, after which TensorBoard read none of the later events
-- and the next CSV row ran into the torn one: the append is cut back to the file's old size.
-- Each case runs a child fp8lab under `ulimit -f` (POSIX sh: 512- or 1024-byte blocks, either way far below the
-- 260 KiB file written) and without `trap '' XFSZ`, as a user's shell runs it.
local U = dofile("tests/spec/helpers/util.lua")
local BIN = FP8LAB_BIN or "build/fp8lab"

-- The head of a child script that saves: arg[1] the directory, arg[2] the value of a Linear(n, n)'s weight.
local SAVER_HEAD = [[
local dir, v = arg[1], tonumber(arg[2])
local acc = fp8.Accelerator { config = false, env = {} }
local m = fp8.nn.Linear(%d, %d)
local o = fp8.optim.AdamW(m:parameters(), { lr = 1e-3 })
m, o = acc:prepare(m, o)
m.weight.data:fill_(v)
]]

local function run_limited(blocks, script, ...)
  local args = {}
  for i, a in ipairs { ... } do args[i] = U.q(a) end
  return U.sh(("ulimit -f %d; %s %s %s"):format(blocks, U.q(BIN), U.q(script), table.concat(args, " ")))
end

describe("a file-size limit", function()
  it("save_state past it is an error naming the file, the checkpoint saved before stays whole, no .tmp is left",
    function()
      local d = U.tmpdir()
      U.write(d .. "/save.lua", SAVER_HEAD:format(256, 256) .. [[
acc:save_state(dir)
print("saved " .. v)
]])
      local ck = d .. "/ck"
      local out, ok = U.sh(("%s %s %s 1"):format(U.q(BIN), U.q(d .. "/save.lua"), U.q(ck)))
      assert.is_true(ok, out)
      out, ok = run_limited(200, d .. "/save.lua", ck, 2)
      assert.is_false(ok, out)
      -- (the old code: "File size limit exceeded", exit 153, before any message of its own)
      assert.truthy(out:find("save_state: " .. ck .. ".tmp/model.safetensors: write failed: File too large", 1, true),
        out)
      assert.is_nil(out:find("limit exceeded", 1, true), out)
      assert.is_false(require("fp8._checkpoint").exists(ck .. ".tmp"))
      local acc = fp8.Accelerator { config = false, env = {} }
      local m = fp8.nn.Linear(256, 256)
      local o = fp8.optim.AdamW(m:parameters(), { lr = 1e-3 })
      m, o = acc:prepare(m, o)
      acc:load_state(ck)
      assert.are.equal(1, m.weight:min():item())
      assert.are.equal(1, m.weight:max():item())
      os.execute("rm -rf " .. U.q(d))
    end)

  it("a SummaryWriter's event that does not fit is cut back: the file ends at its last whole record", function()
    local d = U.tmpdir()
    U.write(d .. "/tb.lua", [[
local w = fp8.SummaryWriter(arg[1])
local path = w._path
local function size() local f = assert(io.open(path, "rb")); local n = f:seek("end"); f:close(); return n end
for i = 1, 100000 do
  local before = size()
  local ok, err = pcall(w.add_text, w, "t", string.rep("x", 300), i)
  if not ok then print(("failed at %d: %s; size %d before, %d after"):format(i, err, before, size())); break end
end
]])
    local out = run_limited(64, d .. "/tb.lua", d .. "/tb")
    local i, before, after = out:match("failed at (%d+): .-write failed: File too large; size (%d+) before, (%d+) after")
    assert.truthy(i, out)
    assert.is_true(tonumber(i) > 1, out)
    assert.are.equal(before, after, out)   -- the old code: the file at the limit, a torn record at its end
    os.execute("rm -rf " .. U.q(d))
  end)

  it("log_fp8_stats's rows that do not fit are cut back: the CSV holds whole rows", function()
    local d = U.tmpdir()
    U.write(d .. "/stats.lua", [[
local acc = fp8.Accelerator { mixed_precision = "fp8", kwargs_handlers = { fp8.TERecipeKwargs {} }, config = false,
                             env = {} }
local m = fp8.nn.Sequential(fp8.nn.Linear(32, 32), fp8.nn.Linear(32, 32))
local o = fp8.optim.SGD(m:parameters(), { lr = 1e-3 })
m, o = acc:prepare(m, o)
acc:log_fp8_stats { every = 1, path = arg[1] }
for i = 1, 100000 do
  local ok, err = pcall(function()
    acc:backward(m(fp8.randn { 16, 32 }):pow(2):mean()); o:step(); o:zero_grad()
  end)
  if not ok then print("failed at " .. i .. ": " .. tostring(err)); break end
end
]])
    local csv = d .. "/stats.csv"
    local out = run_limited(64, d .. "/stats.lua", csv)
    assert.truthy(out:find("log_fp8_stats: cannot append step %d+'s rows to " .. csv:gsub("%p", "%%%0")
      .. ": write failed: File too large"), out)
    local text = U.must_read(csv)
    assert.are.equal("\n", text:sub(-1))   -- the old code: a torn row at the end
    local rows = 0
    for line in text:gmatch("[^\n]+") do
      rows = rows + 1
      if rows > 1 then assert.truthy(line:match("^%d+,[^,]+,%a+,%w+,[^,]*,[^,]+,[^,]+,[^,]+,[^,]+$"), line) end
    end
    assert.are.equal(0, (rows - 1) % 6)   -- the header, then 2 layers × 3 roles a step, whole
    os.execute("rm -rf " .. U.q(d))
  end)

  it("plot.fp8_history whose data file does not fit plots nothing and says why (it plotted the part written)",
    function()
      if not require("fp8.plot").available() then
        pending("gnuplot is not installed (scripts/install-deps.sh installs gnuplot-nox)")
        return
      end
      local d = U.tmpdir()
      local rows = { "step,layer,role,format,scale,amax,amax_history,underflow_frac,saturated_frac" }
      for step = 1, 10000 do
        for _, role in ipairs { "input", "weight", "grad" } do
          rows[#rows + 1] = ("%d,fc,%s,e4m3,%.9g,%.9g,%.9g,0,0"):format(step, role, 448 / step, step * 1.5, step * 2.5)
        end
      end
      U.write(d .. "/stats.csv", table.concat(rows, "\n") .. "\n")   -- ~1.5 MB; the data file ~1 MB
      U.write(d .. "/plot.lua", [[
local png, why = fp8.plot.fp8_history { csv = arg[1], png = arg[2] }
print(("returned %s, %s"):format(tostring(png), tostring(why)))
]])
      local out, ok = run_limited(200, d .. "/plot.lua", d .. "/stats.csv", d .. "/h.png")
      assert.is_true(ok, out)
      assert.truthy(out:find("returned nil, its data: cannot write " .. d .. "/h.png.dat: File too large", 1, true), out)
      assert.truthy(out:find("notice: " .. d .. "/h.png not plotted: its data", 1, true), out)
      assert.is_nil(U.read(d .. "/h.png"))
      assert.is_nil(U.read(d .. "/h.png.dat"))
      os.execute("rm -rf " .. U.q(d))
    end)
end)

-- Two processes saving into one directory (two runs given one project_dir, a job requeued while the old one still
-- ran): each removed the other's working directory (<dir>.tmp) as a leftover, failed, and what one left there
-- refused every later save of both ("exists and is not the leftover of an fp8lab save"). The main process now holds
-- a lock on the checkpoint's parent for the save (C.lock_dir): the saves take turns.
describe("two processes saving into one directory", function()
  it("take turns: every save succeeds, the last one holds the name whole, nothing is left behind", function()
    local d = U.tmpdir()
    U.write(d .. "/save.lua", SAVER_HEAD:format(128, 128) .. [[
acc:register_for_checkpointing({ state_dict = function() return { v = v } end, load_state_dict = function() end })
local failed = 0
for _ = 1, 25 do
  local ok, err = pcall(acc.save_state, acc, dir)
  if not ok then failed = failed + 1; io.stderr:write(tostring(err), "\n") end
end
print(("process %d: %d failed"):format(v, failed))
]])
    local ck = d .. "/ck"
    local cmd = ("%s %s %s"):format(U.q(BIN), U.q(d .. "/save.lua"), U.q(ck))
    local out = U.sh(("(%s 1 & %s 2 & wait)"):format(cmd, cmd))
    assert.truthy(out:find("process 1: 0 failed", 1, true), out)
    assert.truthy(out:find("process 2: 0 failed", 1, true), out)
    local names = require("fp8._checkpoint").listdir(d)
    table.sort(names)
    assert.same({ "ck", "save.lua" }, names)
    local acc = fp8.Accelerator { config = false, env = {} }
    local m = fp8.nn.Linear(128, 128)
    local o = fp8.optim.AdamW(m:parameters(), { lr = 1e-3 })
    m, o = acc:prepare(m, o)
    local got
    acc:register_for_checkpointing({ state_dict = function() return {} end,
                                     load_state_dict = function(_, s) got = s.v end })
    acc:load_state(ck)
    assert.are.equal(got, m.weight:min():item())   -- the weights and the object of one save, one process's
    assert.are.equal(got, m.weight:max():item())
    os.execute("rm -rf " .. U.q(d))
  end)

  it("save_model into one folder too: every save succeeds, the shards are one save's", function()
    local d = U.tmpdir()
    U.write(d .. "/save.lua", [[
local dir, v = arg[1], tonumber(arg[2])
local nn = fp8.nn
local m = nn.Sequential(nn.Linear(256, 256, false), nn.Linear(256, 256, false), nn.Linear(256, 256, false))
for _, p in ipairs(m:parameters()) do p.data:fill_(v) end
local acc, failed = fp8.Accelerator { config = false, env = {} }, 0
for _ = 1, 25 do   -- three shards a save (the old code: about half the saves failed moving a shard into place)
  local ok, err = pcall(acc.save_model, acc, m, dir, { max_shard_size = 300000 })
  if not ok then failed = failed + 1; io.stderr:write(tostring(err), "\n") end
end
print(("process %d: %d failed"):format(v, failed))
]])
    local out = U.sh(("(%s %s %s 1 & %s %s %s 2 & wait)"):format(U.q(BIN), U.q(d .. "/save.lua"), U.q(d .. "/m"),
      U.q(BIN), U.q(d .. "/save.lua"), U.q(d .. "/m")))
    assert.truthy(out:find("process 1: 0 failed", 1, true), out)
    assert.truthy(out:find("process 2: 0 failed", 1, true), out)
    local nn = fp8.nn
    local m = nn.Sequential(nn.Linear(256, 256, false), nn.Linear(256, 256, false), nn.Linear(256, 256, false))
    fp8.load_checkpoint_in_model(m, d .. "/m", { strict = true })
    local v = m[1].weight:min():item()
    for _, p in ipairs(m:parameters()) do
      assert.are.equal(v, p:min():item()); assert.are.equal(v, p:max():item())
    end
    os.execute("rm -rf " .. U.q(d))
  end)

  it("a Ctrl-C while a save waits for its turn ends the wait at once (it was swallowed until the other finished)",
    function()
      local d = U.tmpdir()
      U.write(d .. "/hold.lua", [[
local C = require("fp8._checkpoint")
local lock = assert(C.lock_dir(arg[1], true))
local f = assert(io.open(arg[1] .. "/held", "w")); f:close()
for _ = 1, 600 do   -- until the spec lets go (at most a minute)
  if C.exists(arg[1] .. "/release") then break end
  os.execute("sleep 0.1")
end
]])
      U.write(d .. "/wait.lua", [[
local acc = fp8.Accelerator { config = false, env = {} }
local m = acc:prepare(fp8.nn.Linear(8, 8))
acc:save_state(arg[1])
print("saved")
]])
      -- each step waits for the one before it by a file, not a time: the sanitizer build starts in seconds
      local script = ([[
%s %s %s & h=$!
while [ ! -e %s/held ]; do sleep 0.1; done
%s %s %s/ck 2>%s/err & w=$!
while ! grep -q "waiting for it to finish" %s/err 2>/dev/null; do sleep 0.1; done
kill -INT $w
wait $w; echo "waiter rc=$?"
if kill -0 $h 2>/dev/null; then echo "the holder still holds"; fi
touch %s/release; wait $h
cat %s/err
]]):format(U.q(BIN), U.q(d .. "/hold.lua"), U.q(d), U.q(d), U.q(BIN), U.q(d .. "/wait.lua"), U.q(d), U.q(d),
        U.q(d), U.q(d), U.q(d))
      local out = U.sh(script)
      assert.truthy(out:find("waiter rc=1", 1, true), out)
      assert.truthy(out:find("the holder still holds", 1, true), out)
      assert.truthy(out:find("save_state: interrupted!", 1, true), out)
      assert.is_nil(out:find("saved", 1, true), out)
      os.execute("rm -rf " .. U.q(d))
    end)

  it("fp8._checkpoint.lock_dir refuses a directory this process holds (it would wait for itself), any spelling",
    function()
      local C = require "fp8._checkpoint"
      local d = U.tmpdir()
      local a = assert(C.lock_dir(d, true))
      local b, why = C.lock_dir(d .. "/./", true)
      assert.is_nil(b)
      assert.truthy(why:find("this process holds its lock already", 1, true), why)
      a:release()
      a:release()   -- twice is nothing
      local c = assert(C.lock_dir(d, false))
      c:release()
      assert.are.equal(C.dir_id(d), C.dir_id(d .. "/."))
      os.execute("rm -rf " .. U.q(d))
    end)
end)

-- A cron job or a service often runs without HOME: fp8.Accelerator{} failed there ("cannot find the config
-- directory: set HOME or XDG_CACHE_HOME", with an internal source location), where Accelerate's default config path
-- goes through Python's expanduser, which falls back to the password database.
describe("without HOME", function()
  it("the Accelerator is made; the default config path is the password database's home", function()
    local home = U.sh("getent passwd \"$(id -u)\" | cut -d: -f6"):gsub("%s+$", "")
    local out, ok = U.sh(("env -u HOME -u XDG_CACHE_HOME -u FP8LAB_CONFIG_FILE %s -e %s"):format(U.q(BIN),
      U.q('print(fp8.Accelerator{}.mixed_precision, require("fp8.config").default_path())')))
    assert.is_true(ok, out)
    if home ~= "" then
      assert.are.equal("no\t" .. home .. "/.cache/fp8lab/default_config.yaml\n", out)
    else
      assert.truthy(out:match("^no\t"), out)
    end
  end)
end)


-- Accelerate's ProjectConfiguration sets logging_dir to project_dir when not given (__post_init__), and has
-- set_directories(project_dir); acc.logging_dir is a property over it. Here pc.logging_dir was nil (its tostring
-- showed project_dir's), set_directories was missing, and acc.logging_dir a copy made once.
describe("ProjectConfiguration's logging_dir", function()
  it("reads as project_dir's unless given; set_directories sets both; acc.logging_dir follows", function()
    local pc = fp8.ProjectConfiguration { project_dir = "/tmp/fp8lab-a" }
    assert.are.equal("/tmp/fp8lab-a", pc.logging_dir)
    assert.are.equal("/tmp/fp8lab-b", fp8.ProjectConfiguration { project_dir = "/tmp/fp8lab-a",
      logging_dir = "/tmp/fp8lab-b" }.logging_dir)
    assert.is_nil(fp8.ProjectConfiguration {}.logging_dir)
    -- given without log_with it is refused (it would change nothing); project_dir's own reading is not "given"
    U.fails_with("logging_dir takes effect only with log_with=", fp8.Accelerator,
      { project_config = fp8.ProjectConfiguration { project_dir = "/tmp/fp8lab-a", logging_dir = "/tmp/fp8lab-b",
                                                    automatic_checkpoint_naming = true } })
    local acc = fp8.Accelerator { project_config = fp8.ProjectConfiguration { project_dir = "/tmp/fp8lab-a",
                                                                             automatic_checkpoint_naming = true } }
    assert.are.equal("/tmp/fp8lab-a", acc.logging_dir)
    acc.project_configuration:set_directories("/tmp/fp8lab-c")
    assert.are.equal("/tmp/fp8lab-c", acc.project_dir)
    assert.are.equal("/tmp/fp8lab-c", acc.logging_dir)
    U.fails_with("set_directories: project_dir must be a directory name, got 3", pc.set_directories, pc, 3)
  end)
end)
