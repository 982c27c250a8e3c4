-- Found on 2026-12-06 (stop 95): stop 94's Lua and binding changes read line by line (the out-of-descriptors retry,
-- the layer state's roles box, cat's left-out tensors, the schedulers' wrapper, fp8.stats' rows, the docs checks).
-- docs/robustness.md, "Stop 94's Lua and binding changes read again (stop 95)". No timings: results and messages only.

-- Runs a script in a child fp8lab under `ulimit -n 64` (so that it runs out of descriptors quickly) and returns what
-- it printed.
local function child(src)
  local dir = os.tmpname(); os.remove(dir); os.execute("mkdir -p " .. dir)
  local script = dir .. "/child.lua"
  local f = assert(io.open(script, "w"))
  f:write(("local d = %q\n"):format(dir), src)
  f:close()
  local p = io.popen(("sh -c 'ulimit -n 64 && exec %q %q' 2>&1"):format(FP8LAB_BIN, script))
  local out = p:read("a")
  p:close()
  os.execute("rm -rf " .. dir)
  return out
end

describe("the out-of-descriptors retry (FL_LCALL, fl_error_out_of_fds)", function()
  -- The core recorded errno with every message, and errno is stale at most sites: after an io.open that ran out of
  -- descriptors, an error that has nothing to do with descriptors ("is a directory", a config that is a directory)
  -- read as EMFILE, and the binding collected (running any finalizer) and called the function a second time.
  it("collects and calls again only when the open itself ran out, not for an errno left by an earlier call", function()
    local out = child([[
local fs = {}
while true do local f = io.open("/dev/null"); if not f then break end; fs[#fs + 1] = f end
assert(#fs > 10, "the child did not run out of descriptors")
for _, f in ipairs(fs) do f:close() end
fs = nil
collectgarbage(); collectgarbage("stop")   -- errno is EMFILE now, from the io.open that failed
local cases = {
  {"read_regular", function() return require("fp8._fileio").read_regular(d) end},
  {"config.load", function() return fp8.config.load(d) end},
  {"safe_open", function() return fp8.safe_open(d) end},
}
for _, c in ipairs(cases) do
  local finalized = false
  setmetatable({}, {__gc = function() finalized = true end})
  local ok, err = pcall(c[2])
  print(c[1], ok and "ok" or tostring(err):match("is a directory") and "directory"
          or tostring(err):match("not a regular file") and "directory" or tostring(err),
        finalized and "collected" or "not collected")
end
]])
    assert.matches("read_regular\tdirectory\tnot collected\n", out, 1, true)
    assert.matches("config.load\tdirectory\tnot collected\n", out, 1, true)
    assert.matches("safe_open\tdirectory\tnot collected\n", out, 1, true)
  end)

  -- config.write took the second descriptor of its temporary file (a FILE * for fprintf) with fdopen(dup(fd)),
  -- unchecked: with one descriptor left dup failed and fdopen(-1) gave "Bad file descriptor", never collected.
  it("config.write with one descriptor left collects and goes on (it failed with 'Bad file descriptor')", function()
    local out = child([[
fp8.config.write(d .. "/c.yaml", {})
collectgarbage(); collectgarbage("stop")
local keep
do
  local list = {}   -- every descriptor but one held by files nothing refers to once `list` goes
  while true do local f = io.open("/dev/null"); if not f then break end; list[#list + 1] = f end
  assert(#list > 10, "the child did not run out of descriptors")
  keep = table.remove(list)
end
keep:close()
local ok, err = pcall(fp8.config.write, d .. "/c.yaml", {num_processes = 1})
print("config.write", ok and "ok" or tostring(err))
collectgarbage()
print("read back", fp8.config.load(d .. "/c.yaml").num_processes)
]])
    assert.matches("config.write\tok\n", out, 1, true)
    assert.matches("read back\t1\n", out, 1, true)
  end)
end)

describe("fp8 functions that open a user's file with io.open", function()
  -- stop 94 gave every binding that opens a file the collection and second try (docs/checkpoints.md says every fp8
  -- function does), and checkpointing.lua's own io.open; load_checkpoint_in_model's read of a sharded checkpoint's
  -- index and log_fp8_stats' CSV still failed with "Too many open files" while dropped handles held every descriptor.
  it("load_checkpoint_in_model of an index and log_fp8_stats collect and go on", function()
    local out = child([[
local acc = fp8.Accelerator{mixed_precision = "fp8", kwargs_handlers = {fp8.TERecipeKwargs{}}}
local model = acc:prepare(fp8.nn.Sequential(fp8.nn.Linear(16, 16), fp8.nn.Linear(16, 16)))
acc:save_model(model, d .. "/sharded", {max_shard_size = 1200})
assert(require("fp8._checkpoint").exists(d .. "/sharded/model.safetensors.index.json"), "not sharded")
collectgarbage("stop")
local function fill()   -- every descriptor taken by files nothing refers to once `list` goes
  collectgarbage()
  local list = {}
  while true do local f = io.open("/dev/null"); if not f then break end; list[#list + 1] = f end
  assert(#list > 10, "the child did not run out of descriptors")
end
local cases = {
  {"load_checkpoint_in_model", function()
    fp8.load_checkpoint_in_model(model, d .. "/sharded/model.safetensors.index.json") end},
  {"log_fp8_stats", function() acc:log_fp8_stats{every = 1, path = d .. "/stats.csv"} end},
}
for _, c in ipairs(cases) do
  fill()
  local ok, err = pcall(c[2])
  print(c[1], ok and "ok" or tostring(err))
end
]])
    assert.matches("load_checkpoint_in_model\tok\n", out, 1, true)
    assert.matches("log_fp8_stats\tok\n", out, 1, true)
    assert.not_matches("Too many open files", out, 1, true)
  end)
end)

describe("fp8.stats' rows as one line", function()
  -- the rows of a model trained by several processes under MS-AMP end with the FP8 all-reduce's row (layer
  -- "(all-reduce)", lua/fp8/ddp.lua's counts), which the line counted as a layer: "7 rows of 3 layers" for two
  it("counts the layers, not the all-reduce's row", function()
    local nn = fp8.nn
    local model = nn.Sequential(nn.Linear(16, 16), nn.Linear(16, 16))
    fp8.convert_model(model, { recipe = { backend = "te" } })
    -- the counts ddp.lua gives after a step (one process cannot run the all-reduce itself)
    rawset(model, "_ddp_stats", function() return { fp8_n = 10, fp8_underflow = 1, fp8_saturated = 0, steps = 1 } end)
    local rows = fp8.stats(model, { quiet = true })
    assert.are.equal(7, #rows)
    assert.are.equal("(all-reduce)", rows[7].layer)
    assert.are.equal("fp8.stats: 7 rows of 2 layers and the all-reduce (rows[i].layer, .role, .scale, ...: "
      .. "help(\"stats\"))", tostring(rows))
    rawset(model, "_ddp_stats", nil)
    assert.are.equal("fp8.stats: 6 rows of 2 layers (rows[i].layer, .role, .scale, ...: help(\"stats\"))",
      tostring(fp8.stats(model, { quiet = true })))
  end)
end)
