-- trackers_spec.lua — fp8.SummaryWriter (lua/fp8/tensorboard.lua) against the event files PyTorch 2.x's
-- SummaryWriter writes for the same calls (tests/data/tensorboard, scripts/gen_tensorboard_fixture.py), byte for
-- byte; and the Accelerator's trackers (lua/fp8/trackers.lua): log_with, init_trackers, log, get_tracker, end_training.
local fp8 = fp8 or require "fp8"
local U = dofile("tests/spec/helpers/util.lua")
local TB = require "fp8.tensorboard"

-- the records of an event file: their data strings, each record's two CRCs checked with TB._crc32c
local function masked(c) return ((((c >> 15) | (c << 17)) & 0xFFFFFFFF) + 0xA282EAD8) & 0xFFFFFFFF end
local function records(path)
  local b = U.must_read(path)
  local out, i = {}, 1
  while i <= #b do
    local n, lcrc = string.unpack("<I8I4", b, i)
    assert.are.equal(masked(TB._crc32c(b:sub(i, i + 7))), lcrc, path .. ": the length's CRC")
    local data = b:sub(i + 12, i + 11 + n)
    assert.are.equal(masked(TB._crc32c(data)), string.unpack("<I4", b, i + 12 + n), path .. ": the data's CRC")
    out[#out + 1] = data
    i = i + 16 + n
  end
  return out
end

-- protocol buffer fields of a message: {{field, wire, payload}, ...} (payload: a string for bytes, else a number)
local function fields(s)
  local out, i = {}, 1
  local function varint()
    local v, shift = 0, 0
    repeat
      local b = s:byte(i)
      i = i + 1
      v = v | ((b & 0x7F) << shift)
      shift = shift + 7
    until b < 0x80
    return v
  end
  while i <= #s do
    local k = varint()
    local f, w = k >> 3, k & 7
    local p
    if w == 0 then p = varint()
    elseif w == 1 then p = s:sub(i, i + 7); i = i + 8
    elseif w == 5 then p = s:sub(i, i + 3); i = i + 4
    elseif w == 2 then local n = varint(); p = s:sub(i, i + n - 1); i = i + n
    else error("wire type " .. w) end
    out[#out + 1] = { f, w, p }
  end
  return out
end
local function field(s, f)
  for _, x in ipairs(fields(s)) do if x[1] == f then return x[3] end end
end

local function only_file(dir)
  local names = {}
  for n in io.popen("ls " .. U.q(dir)):lines() do
    if n:match("^events%.") then names[#names + 1] = n end
  end
  assert.are.equal(1, #names, dir)
  return dir .. "/" .. names[1]
end

describe("fp8.SummaryWriter", function()
  it("computes CRC-32C as TFRecord files need it (RFC 3720's vectors)", function()
    assert.are.equal(0xE3069283, TB._crc32c("123456789"))
    assert.are.equal(0, TB._crc32c(""))
    assert.are.equal(0x8A9136AA, TB._crc32c(("\0"):rep(32)))
    assert.are.equal(0x62A8AB43, TB._crc32c(("\255"):rep(32)))
  end)

  it("writes the records torch's SummaryWriter writes for the same calls", function()
    local d = U.tmpdir()
    local w = fp8.SummaryWriter(d .. "/run", { filename_suffix = ".fixture" })
    local T = 1700000000.25
    for i, v in ipairs { 2.5, 1.25, 0.0, -0.0, 1e-30, 3.4e38, math.huge } do w:add_scalar("train/loss", v, i - 1, T + i - 1) end
    w:add_scalar("no_step", 0.5, nil, T)
    w:add_scalar("big_step", 7.0, 2 ^ 40, T)
    w:add_scalar("neg_step", 7.0, -3, T)
    w:add_text("sample", "héllo\nworld", 5, T + 10)
    w:add_scalars("lr", { a = 0.1, b = 0.25 }, 3, T + 20)
    w:add_histogram("h/default", fp8.tensor { -1.5, -0.25, 0.0, 0.0, 0.125, 0.5, 0.5, 2.0, 3.75, 1e-13 }, 1, nil, T + 30)
    w:add_histogram("h/count", fp8.arange(10), 2, 4, T + 31)
    w:add_histogram("h/edges", fp8.tensor { -1.0, 0.0, 0.5, 1.0, 3.0, 8.0, 9.0 }, 3, { 0, 1, 2, 4, 8 }, T + 32)
    w:add_histogram("h/max_bins", fp8.tensor { 1e-6, 1e-3, -1.0, 1.0, 1e3, 0.0 }, 4, "tensorflow", T + 33, 50)
    w:add_histogram("h/single", { 2.5 }, 5, nil, T + 34)   -- (a plain list of numbers too)
    w:add_histogram("h/neg", fp8.tensor { -3.0, -0.0, -2.0 }, 6, 3, T + 35)
    w:add_histogram_raw("h/raw", 0, 3, 4, 6, 14, { 1, 2, 3 }, { 1, 1, 2 }, 7, T + 36)
    assert.are.equal(d .. "/run/hp", w:add_hparams({ fp8 = true, layers = 4, lr = 0.001, opt = "adamw" },
      { ["hparam/loss"] = 1.5 }, { run_name = "hp" }))
    w:close()
    for _, sub in ipairs { "", "/lr_a", "/lr_b", "/hp" } do
      local want = records("tests/data/tensorboard/run" .. sub .. "/events.fixture")
      local got = records(only_file(d .. "/run" .. sub))
      assert.are.equal(#want, #got, sub)
      -- the first record: the file_version event (its wall_time is the clock's; torch names its writer, we ours)
      assert.are.equal("brain.Event:2", field(got[1], 3))
      for k = 2, #want do
        local a, b = want[k], got[k]
        if sub == "/hp" then a, b = a:sub(10), b:sub(10) end   -- torch takes add_hparams' wall_time from the clock
        if sub == "/hp" and k == 3 then
          -- session_start_info's map: its entries in the order of Python's map, here sorted
          local function entries(rec)
            local v = field(field(rec, 5), 1)
            local content = field(field(field(v, 9), 1), 2)
            local list = {}
            for _, x in ipairs(fields(field(content, 3))) do list[#list + 1] = x[3] end
            table.sort(list)
            return list, field(v, 1)
          end
          local ea, ta = entries(want[k])
          local eb, tb = entries(got[k])
          assert.are.same(ea, eb)
          assert.are.equal(ta, tb)
        else
          assert.are.equal(a, b, ("%s record %d"):format(sub, k))
        end
      end
    end
    os.execute("rm -rf " .. U.q(d))
  end)

  it("checks its arguments, refuses adds once closed, and works as a <close> variable", function()
    local d = U.tmpdir()
    do
      local w <close> = fp8.SummaryWriter(d .. "/a")
      w:add_scalar("x", 1, 1)
      for _, c in ipairs {
        { function() w:add_scalar("", 1) end, "SummaryWriter:add_scalar: tag must be a non-empty string, got \"\"" },
        { function() w:add_scalar("x", "1") end, "SummaryWriter:add_scalar: value must be a number (or a one-element tensor), got \"1\"" },
        { function() w:add_scalar("x", 1, 1.5) end, "SummaryWriter:add_scalar: global_step must be an integer, got 1.5" },
        { function() w:add_scalar("x", 1, 1, 0 / 0) end, "SummaryWriter:add_scalar: walltime must be a finite number" },
        { function() w:add_scalar("x", 1, 1, 1, 1) end, "SummaryWriter:add_scalar: takes (tag, value [, global_step [, walltime]])" },
        { function() w.add_scalar("x", 1) end, "SummaryWriter:add_scalar: called without its writer" },
        { function() w:add_text("t", 3) end, "SummaryWriter:add_text: text must be a string, got 3" },
        { function() w:add_scalars("m", { a = "x" }) end, 'SummaryWriter:add_scalars: values["a"] must be a number' },
        { function() w:add_scalars("m", { 1, 2 }) end, "SummaryWriter:add_scalars: the values's keys must be non-empty strings" },
        { function() w:add_hparams({ a = {} }, {}) end, 'SummaryWriter:add_hparams: hparam_dict["a"] must be a number, a string or a boolean' },
        { function() w:add_hparams({}, {}, { run_name = "a/b" }) end, "SummaryWriter:add_hparams: run_name must be a directory name" },
        { function() w:add_histogram("h", {}) end, "SummaryWriter:add_histogram: the values have no element" },
        { function() w:add_histogram("h", { 1, "2" }) end, 'SummaryWriter:add_histogram: values[2] must be a number, got "2"' },
        { function() w:add_histogram("h", "x") end, "SummaryWriter:add_histogram: values must be a tensor or a list" },
        { function() w:add_histogram("h", { 1 }, 1, "auto") end, 'bins must be "tensorflow", a count or a list of edges, got "auto"' },
        { function() w:add_histogram("h", { 1 }, 1, { 0, 2, 1 }) end, "SummaryWriter:add_histogram: bins must be increasing numbers, got 1 at 3" },
        { function() w:add_histogram("h", { 1 }, 1, 0) end, "SummaryWriter:add_histogram: bins must be at least 1" },
        { function() w:add_histogram("h", { 5 }, 1, { 0, 1 }) end, "SummaryWriter:add_histogram: no value falls inside the bins" },
        { function() w:add_histogram("h", { 1, math.huge }, 1, 4) end, "bins=4 spans the values' range, which is not finite" },
        { function() w:add_histogram("h", { 1 }, 1, nil, nil, 0) end, "SummaryWriter:add_histogram: max_bins must be an integer >= 1" },
        { function() w:add_histogram_raw("h", 0, 1, 1, 1, 1, { 1, 2 }, { 1 }) end, "bucket_limits has 2 entries, bucket_counts 1" },
        { function() fp8.SummaryWriter(d .. "/b", { max_queue = 1 }) end, "SummaryWriter: unknown option 'max_queue'" },
        { function() fp8.SummaryWriter(d .. "/b", { comment = "x" }) end, "SummaryWriter: comment is appended to the default log_dir only" },
        { function() fp8.SummaryWriter(d .. "/b", { filename_suffix = "a/b" }) end, "SummaryWriter: filename_suffix must not hold a /" },
      } do
        U.fails_with({ c[2] }, c[1])
      end
      w:add_scalar("t", fp8.tensor { 2.5 }, 2)   -- a one-element tensor, as torch's
    end
    -- closed at the block's end: the adds are in the file, and a later add is refused
    local rec = records(only_file(d .. "/a"))
    assert.are.equal(3, #rec)
    assert.are.equal(2.5, string.unpack("<f", field(field(field(rec[3], 5), 1), 2)))
    -- a path that is a directory cannot be appended to
    U.fails_with({ "cannot open to append: Is a directory" }, function() require("fp8._fileio").append(d .. "/a", "x") end)
    os.execute("rm -rf " .. U.q(d))
  end)
end)

describe("fp8.SummaryWriter's and the tracker's options", function()
  it("filename_suffix names the files, comment the default directory, log_dir= the directory, walltime the time", function()
    local d = U.tmpdir()
    local w = fp8.SummaryWriter { log_dir = d .. "/a", filename_suffix = ".run1" }
    w:add_scalars("m", { x = 1 }, 1)
    w:close()
    assert.matches("^" .. d:gsub("%p", "%%%0") .. "/a/events%.out%.tfevents%.%d+%.[^/]+%.%d+%.%d+%.run1$", only_file(d .. "/a"))
    assert.matches("%.run1$", only_file(d .. "/a/m_x"))
    -- comment: appended to the default runs/<date>_<host> (made in the current directory: run from d)
    local cwd = io.popen("pwd"):read("l")
    local bin = FP8LAB_BIN or "build/fp8lab"   -- (the binary running the specs: the sanitizer's under make sanitize)
    if bin:sub(1, 1) ~= "/" then bin = cwd .. "/" .. bin end
    local ok = os.execute("cd " .. U.q(d) .. " && " .. U.q(bin) .. " -e " ..
      U.q('local w = fp8.SummaryWriter{comment = "_lr0.1"}; io.write(w:get_logdir()); w:close()') .. " > out.txt")
    assert.is_true(ok == true or ok == 0)
    local dir = U.must_read(d .. "/out.txt")
    assert.matches("^runs/%a%a%a%d%d_%d%d%-%d%d%-%d%d_.+_lr0%.1$", dir)
    only_file(d .. "/" .. dir)
    -- the tracker: init_kwargs' filename_suffix and log_kwargs' walltime reach the writer
    local acc = fp8.Accelerator { log_with = "tensorboard", project_dir = d .. "/p", config = false, env = {} }
    acc:init_trackers("r", nil, { tensorboard = { filename_suffix = ".mine" } })
    acc:log({ loss = 2 }, 3, { tensorboard = { walltime = 1700000000.5 } })
    acc:end_training()
    local f = only_file(d .. "/p/r")
    assert.matches("%.mine$", f)
    local rec = records(f)
    assert.are.equal(1700000000.5, string.unpack("<d", field(rec[2], 1)))
    os.execute("rm -rf " .. U.q(d))
  end)
end)

describe("the Accelerator's trackers (Accelerate's log_with, init_trackers, log, get_tracker)", function()
  local function new_acc(o)
    o.config, o.env = false, {}
    return fp8.Accelerator(o)
  end

  it("tensorboard: a run under logging_dir/project_name with scalars, text, grouped scalars and the config", function()
    local d = U.tmpdir()
    local acc = new_acc { log_with = "tensorboard", project_dir = d }
    assert.are.equal(d, acc.logging_dir)
    assert.are.same({ "tensorboard" }, acc.log_with)
    assert.are.same({}, acc.trackers)
    acc:init_trackers("exp", { lr = 0.01, model = "gpt", fp8 = true, ["odd key"] = 1 })
    for s = 1, 3 do acc:log({ loss = 1 / s, note = "step " .. s, parts = { a = s } }, s) end
    local tb = acc:get_tracker("tensorboard")
    assert.are.equal("tensorboard", tb.name)
    assert.is_true(TB.is_writer(acc:get_tracker("tensorboard", true)))
    acc:end_training()
    assert.are.same({}, acc.trackers)
    U.fails_with({ "SummaryWriter:add_scalar: the writer is closed" }, function() tb.writer:add_scalar("x", 1) end)
    -- the scalars and the text in the run's file, in order; the grouped ones in parts_a
    local rec = records(only_file(d .. "/exp"))
    local tags = {}
    for k = 2, #rec do tags[#tags + 1] = field(field(field(rec[k], 5), 1), 1) .. "@" .. field(rec[k], 2) end
    assert.are.same({ "loss@1", "note/text_summary@1", "loss@2", "note/text_summary@2", "loss@3",
      "note/text_summary@3" }, tags)
    local parts = records(only_file(d .. "/exp/parts_a"))
    assert.are.equal(4, #parts)   -- file_version, then steps 1..3 under the tag "parts"
    assert.are.equal("parts", field(field(field(parts[4], 5), 1), 1))
    assert.are.equal(3.0, string.unpack("<f", field(field(field(parts[4], 5), 1), 2)))
    -- the config: a run of its own with the hparams and hparams.yml
    local runs = {}
    for n in io.popen("ls " .. U.q(d .. "/exp")):lines() do if n:match("^%d") then runs[#runs + 1] = n end end
    assert.are.equal(1, #runs)
    assert.are.equal('fp8: true\nlr: 0.01\nmodel: "gpt"\n"odd key": 1\n', U.must_read(d .. "/exp/" .. runs[1] .. "/hparams.yml"))
    os.execute("rm -rf " .. U.q(d))
  end)

  it("takes a tracker object of the script's own (Accelerate's GeneralTracker protocol)", function()
    local seen = {}
    local mine = { name = "mine", requires_logging_directory = false, tracker = "the client" }
    function mine:log(values, step, kw) seen[#seen + 1] = { values.loss, step, kw and kw.tag } end
    function mine:store_init_configuration(c) seen.config = c.lr end
    function mine:finish() seen.finished = true end
    local acc = new_acc { log_with = { mine } }
    acc:init_trackers("p", { lr = 0.5 })
    acc:log({ loss = 2 }, 7, { mine = { tag = "x" } })
    assert.are.equal(mine, acc:get_tracker("mine"))
    assert.are.equal("the client", acc:get_tracker("mine", true))
    acc:end_training()
    assert.are.same({ { 2, 7, "x" }, config = 0.5, finished = true }, seen)
  end)

  it("writes on the main process only; the others get a tracker that does nothing", function()
    local d = U.tmpdir()
    local acc = new_acc { log_with = "all", project_dir = d }
    acc.process_index = 1   -- as the second process of a launch sees itself
    acc:init_trackers("exp", { a = 1 })
    acc:log({ loss = 1 }, 1)
    local blank = acc:get_tracker("tensorboard")
    assert.has_no.errors(function() blank:log({ x = 1 }, 1); blank:finish() end)
    acc:end_training()
    assert.is_nil(io.open(d .. "/exp", "r"))
    os.execute("rm -rf " .. U.q(d))
  end)

  it("refuses what it cannot honour, by name", function()
    local d = U.tmpdir()
    for _, c in ipairs {
      { { log_with = "wandb", project_dir = d }, 'log_with="wandb" is not available in fp8lab: it is a service or Python package' },
      { { log_with = "tensorbord", project_dir = d }, 'log_with="tensorbord" is not a tracker' },
      { { log_with = 3, project_dir = d }, "log_with must be a tracker name" },
      { { log_with = "tensorboard" }, "logging with tensorboard needs a logging directory: give project_dir=" },
    } do
      U.fails_with({ "Accelerator: " .. c[2] }, new_acc, c[1])
    end
    local acc = new_acc { log_with = "tensorboard", project_config = fp8.ProjectConfiguration { logging_dir = d .. "/logs" } }
    assert.are.equal(d .. "/logs", acc.logging_dir)
    for _, c in ipairs {
      { function() acc:init_trackers("a/b") end, "init_trackers: project_name must be a non-empty name without /" },
      { function() acc:init_trackers("p", { a = {} }) end, 'init_trackers: config["a"] must be a number, a string or a boolean' },
      { function() acc:init_trackers("p", nil, { wandb = {} }) end, "init_trackers: unknown option 'wandb'" },
      { function() acc:init_trackers("p", nil, { tensorboard = { flush_secs = 1 } }) end,
        "init_trackers: TensorBoardTracker: unknown option 'flush_secs'" },
      { function() acc:log({ 1 }) end, "log: values' keys must be non-empty strings" },
      { function() acc:log({ a = 1 }, 1.5) end, "log: step must be an integer, got 1.5" },
      { function() acc:get_tracker(3) end, "get_tracker: name must be a string, got 3" },
    } do
      U.fails_with({ c[2] }, c[1])
    end
    acc:init_trackers("p")
    U.fails_with({ "init_trackers: the trackers are running already" }, function() acc:init_trackers("p") end)
    -- every value is checked before any is written: "a" was written before "f" failed, and twice after a retry
    U.fails_with({ 'log: TensorBoardTracker:log: values["f"] must be a number, a boolean, a one-element tensor, a '
      .. "string or a table {name = number}, got a function (nothing was written)" },
      function() acc:log({ a = 1, f = print }, 1) end)
    acc:log({ a = 2 }, 2)
    acc:end_training()
    local rec = records(only_file(d .. "/logs/p"))
    local tags = {}
    for k = 2, #rec do tags[#tags + 1] = field(field(field(rec[k], 5), 1), 1) .. "@" .. field(rec[k], 2) end
    assert.are.same({ "a@2" }, tags)
    -- init_kwargs for a tracker object of the script's own: nothing would read it
    local mine = { name = "mine", log = function() end }
    local acc2 = new_acc { log_with = { mine }, project_dir = d }
    U.fails_with({ 'init_trackers: init_kwargs["mine"]: "mine" is a tracker object of the script\'s own, made already' },
      function() acc2:init_trackers("r", nil, { mine = { project = "x" } }) end)
    os.execute("rm -rf " .. U.q(d))
  end)
end)

describe("acc:log_fp8_stats{trackers=true}", function()
  it("logs each FP8 layer's scale, amax, underflow and saturation to the trackers; refuses it without trackers", function()
    local d = U.tmpdir()
    local acc = fp8.Accelerator { mixed_precision = "fp8", kwargs_handlers = { fp8.TERecipeKwargs {} },
      log_with = "tensorboard", project_dir = d, config = false, env = {} }
    local model = fp8.nn.Sequential(fp8.nn.Linear(16, 16), fp8.nn.GELU(), fp8.nn.Linear(16, 16))
    local opt = fp8.optim.SGD(model:parameters(), { lr = 0.01 })
    model, opt = acc:prepare(model, opt)
    acc:init_trackers("fp8")
    acc:log_fp8_stats { every = 2, trackers = true }
    for _ = 1, 4 do
      local loss = model(fp8.randn { 8, 16 }):pow(2):mean()
      acc:backward(loss); opt:step(); opt:zero_grad()
    end
    acc:end_training()
    local rec = records(only_file(d .. "/fp8"))
    local seen = {}
    for k = 2, #rec do
      local v = field(field(rec[k], 5), 1)
      seen[field(v, 1) .. "@" .. field(rec[k], 2)] = string.unpack("<f", field(v, 2))
    end
    for _, step in ipairs { 2, 4 } do
      for _, t in ipairs { "fp8/0/input/scale", "fp8/0/weight/amax", "fp8/2/grad/underflow", "fp8/2/input/saturated" } do
        assert.is_not_nil(seen[t .. "@" .. step], t .. " at step " .. step)
      end
    end
    assert.is_nil(seen["fp8/0/input/scale@1"])
    assert.is_true(seen["fp8/0/weight/amax@2"] > 0)
    local plain = fp8.Accelerator { config = false, env = {} }
    for _, c in ipairs {
      { function() plain:log_fp8_stats { trackers = true } end, "log_fp8_stats: trackers=true needs the accelerator's trackers" },
      { function() plain:log_fp8_stats { every = 2 } end, "log_fp8_stats: give path= (a CSV file) or trackers=true" },
      { function() plain:log_fp8_stats { trackers = 1 } end, "log_fp8_stats: trackers must be a boolean, got 1" },
    } do
      U.fails_with({ c[2] }, c[1])
    end
    os.execute("rm -rf " .. U.q(d))
  end)
end)
