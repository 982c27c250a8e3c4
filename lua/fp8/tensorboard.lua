-- tensorboard.lua — fp8.SummaryWriter(log_dir [, {filename_suffix=, comment=}]): torch.utils.tensorboard's writer of
-- TensorBoard event files, for the Accelerator's "tensorboard" tracker (lua/fp8/trackers.lua) and for scripts.
-- add_scalar, add_scalars, add_text, add_histogram(_raw) and add_hparams write the records torch's writer writes
-- (docs/lua-api.md, "Experiment trackers"): a file events.out.tfevents.<time>.<host>.<pid>.<n><suffix> of TFRecords
-- (length, masked CRC-32C of the length, an Event protocol buffer, its masked CRC-32C) that starts with the
-- file_version event. Every add is appended to the file at once (fp8._fileio.append: earlier bytes are never
-- rewritten, so a reader may follow the file while it grows, and a crash loses at most the record being written);
-- close() fsyncs.
local O = require "fp8.opts"
local fileio = require "fp8._fileio"

local M = {}

-- ---- CRC-32C (Castagnoli, reflected 0x82F63B78) and TFRecord framing -------------------------------------------
local CRC = {}
for i = 0, 255 do
  local c = i
  for _ = 1, 8 do c = (c & 1 == 1) and ((c >> 1) ~ 0x82F63B78) or (c >> 1) end
  CRC[i] = c
end

function M._crc32c(s)
  local c = 0xFFFFFFFF
  for i = 1, #s, 64 do
    local bytes = { s:byte(i, math.min(i + 63, #s)) }
    for j = 1, #bytes do c = CRC[(c ~ bytes[j]) & 0xFF] ~ (c >> 8) end
  end
  return c ~ 0xFFFFFFFF
end

local function masked_crc(s)
  local c = M._crc32c(s)
  return ((((c >> 15) | (c << 17)) & 0xFFFFFFFF) + 0xA282EAD8) & 0xFFFFFFFF
end

function M._record(data)
  local len = string.pack("<I8", #data)
  return len .. string.pack("<I4", masked_crc(len)) .. data .. string.pack("<I4", masked_crc(data))
end

-- ---- protocol buffers: the few fields TensorBoard's records use --------------------------------------------------
local function varint(n)   -- n a Lua integer; a negative one as its 64-bit two's complement (10 bytes), as int64
  local out = {}
  repeat
    local b = n & 0x7F
    n = n >> 7   -- logical: a negative n ends after 10 bytes
    out[#out + 1] = string.char(n ~= 0 and (b | 0x80) or b)
  until n == 0
  return table.concat(out)
end
local function key(field, wire) return varint(field << 3 | wire) end
local function bytes_field(field, s) return key(field, 2) .. varint(#s) .. s end
local function double_field(field, v) return key(field, 1) .. string.pack("<d", v) end
local function float_field(field, v) return key(field, 5) .. string.pack("<f", v) end
local function int_field(field, v) return key(field, 0) .. varint(v) end
-- proto3 leaves a field at its default out (0, +0.0, ""); -0.0 is not the default's bits, so it is written
local function is_default_float(v) return v == 0 and 1 / v > 0 end
M._pb = { varint = varint, bytes = bytes_field, double = double_field, float = float_field, int = int_field }

-- Event{wall_time=1, step=2, file_version=3, summary=5}
local function event(wall_time, step, field, payload)
  local parts = {}
  if not is_default_float(wall_time) then parts[#parts + 1] = double_field(1, wall_time) end
  if step ~= 0 then parts[#parts + 1] = int_field(2, step) end
  parts[#parts + 1] = bytes_field(field, payload)
  return table.concat(parts)
end

-- Summary.Value{tag=1, simple_value=2, tensor=8, metadata=9}; SummaryMetadata{plugin_data=1{plugin_name=1, content=2}}
local function plugin_metadata(name, content)
  local pd = bytes_field(1, name) .. (content ~= "" and bytes_field(2, content) or "")
  return bytes_field(1, pd)
end
-- simple_value is in Summary.Value's oneof, so it is written even when 0 (a oneof's field has presence)
local function scalar_summary(tag, v) return bytes_field(1, bytes_field(1, tag) .. float_field(2, v)) end
local function text_summary(tag, text)
  -- TensorProto{dtype=1: DT_STRING (7), tensor_shape=2: {dim=2: {size=1: 1}}, string_val=8}
  local tensor = int_field(1, 7) .. bytes_field(2, bytes_field(2, int_field(1, 1))) .. bytes_field(8, text)
  local value = bytes_field(1, tag .. "/text_summary") .. bytes_field(8, tensor)
    .. bytes_field(9, plugin_metadata("text", ""))   -- TextPluginData{version=0}: no bytes
  return bytes_field(1, value)
end

-- The hparams plugin's three summaries (torch's summary.hparams): the experiment (every hparam's name and type, the
-- metrics' tags), the session's start (the values) and its end (success). HParamsPluginData{version=1 (0: left out),
-- experiment=2, session_start_info=3, session_end_info=4}.
local function hparams_summaries(names, values, metrics)
  local infos, ssi = {}, {}
  for _, k in ipairs(names) do
    local v = values[k]
    local val, dtype
    if type(v) == "string" then
      val, dtype = bytes_field(3, v), 1                           -- Value.string_value; DATA_TYPE_STRING
    else
      local x = type(v) == "boolean" and (v and 1.0 or 0.0) or v + 0.0   -- torch: a bool is an int, a number
      val, dtype = double_field(2, x), 3   -- Value.number_value (a oneof's: written when 0); DATA_TYPE_FLOAT64
    end
    -- HParamInfo{name=1, type=4}; SessionStartInfo.hparams=1: map entries {key=1, value=2}
    infos[#infos + 1] = bytes_field(4, bytes_field(1, k) .. int_field(4, dtype))
    ssi[#ssi + 1] = bytes_field(1, bytes_field(1, k) .. bytes_field(2, val))
  end
  for _, m in ipairs(metrics) do
    infos[#infos + 1] = bytes_field(5, bytes_field(1, bytes_field(2, m)))   -- MetricInfo{name=1: MetricName{tag=2}}
  end
  local function summary(tag, content) return bytes_field(1, bytes_field(1, tag) .. bytes_field(9, plugin_metadata(
    "hparams", content))) end
  return summary("_hparams_/experiment", bytes_field(2, table.concat(infos))),
    summary("_hparams_/session_start_info", bytes_field(3, table.concat(ssi))),
    summary("_hparams_/session_end_info", bytes_field(4, int_field(1, 1)))   -- SessionEndInfo{status=1: SUCCESS}
end

-- ---- the writer ----------------------------------------------------------------------------------------------------
local now = require("fp8._data").wall_time   -- seconds since the epoch, sub-second (Python's time.time())

local function hostname()
  local f = io.open("/proc/sys/kernel/hostname", "r")
  local h = f and f:read("l")
  if f then f:close() end
  return (h and h ~= "") and h or (os.getenv("HOSTNAME") or "localhost")
end

local function pid()
  local ok, P = pcall(require, "fp8._profiler")
  return ok and P.getpid and P.getpid() or 0
end

local uid = 0   -- torch's _global_uid: the files one process opens are numbered

local Writer = {}
Writer.__index = Writer
Writer.__name = "SummaryWriter"

local function mkdir_p(dir)
  local ok, err = require("fp8._checkpoint").mkdir_p(dir)
  if not ok and err then error(("SummaryWriter: cannot create the log directory %s: %s"):format(dir, err), 0) end
end

-- one event file in dir: its path, created with the file_version event
local function open_file(dir, suffix)
  mkdir_p(dir)
  local t = now()
  local path = ("%s/events.out.tfevents.%010d.%s.%d.%d%s"):format(dir, math.floor(t), hostname(), pid(), uid, suffix)
  uid = uid + 1
  local name = path:match("[^/]*$")
  if #name > 255 then   -- NAME_MAX: the open below would say only 'File name too long' of a path it cuts short
    error(("SummaryWriter: the event file's name would be %d bytes, past the 255 a file name may have "
      .. "(filename_suffix is %d bytes)"):format(#name, #suffix), 0)
  end
  -- Event.file_version=3, and source_metadata=10: SourceMetadata{writer=1}, the program that wrote the file
  local ok, err = pcall(fileio.append, path,
    M._record(event(t, 0, 3, "brain.Event:2") .. bytes_field(10, bytes_field(1, "fp8lab"))))
  if not ok then
    -- named, where it was fileio's '<path>: cannot open to append: ...' at this line (a long filename_suffix, sweep
    -- 113's --messages, is refused above), the path cut short where it is long
    local shown = #path > 200 and ("%s... (%d bytes)"):format(path:sub(1, 160), #path) or path
    err = tostring(err):gsub("^[^\n]-:%d+: ", "", 1)
    if err:sub(1, math.min(#path, 100)) == path:sub(1, 100) then   -- fileio's "<path, maybe cut>: cannot ...: why"
      err = err:match(".*: (cannot [^:]+: .*)$") or err
    end
    if #err > 200 then err = err:sub(1, 160) .. "..." end
    error(("SummaryWriter: cannot create the event file %s: %s"):format(shown, err), 0)
  end
  return path
end

local function check_live(self, fname)
  if getmetatable(self) ~= Writer then
    error(("SummaryWriter:%s: called without its writer (got %s): write w:%s(...), with a colon"):format(fname,
      O.got(self), fname), 3)
  end
  if self._closed then error(("SummaryWriter:%s: the writer is closed"):format(fname), 3) end
end

local function check_tag(fname, what, tag)
  if type(tag) ~= "string" or tag == "" then
    error(("SummaryWriter:%s: %s must be a non-empty string, got %s"):format(fname, what, O.got(tag)), 3)
  end
end

local function check_step(fname, step, walltime)
  if step ~= nil and math.type(step) ~= "integer" then
    if not (type(step) == "number" and step == math.floor(step) and math.abs(step) < 2 ^ 63) then
      error(("SummaryWriter:%s: global_step must be an integer, got %s"):format(fname, O.got(step)), 3)
    end
    step = math.tointeger(step)
  end
  if walltime ~= nil and (type(walltime) ~= "number" or walltime ~= walltime or math.abs(walltime) == math.huge) then
    error(("SummaryWriter:%s: walltime must be a finite number (seconds since the epoch), got %s"):format(fname,
      O.got(walltime)), 3)
  end
  return step or 0, walltime and walltime + 0.0 or now()
end

local function check_number(fname, what, v)
  if type(v) == "boolean" then return v and 1.0 or 0.0 end   -- torch: a bool is an int
  if type(v) ~= "number" then
    -- a one-element tensor, as torch's add_scalar takes it
    if require("fp8.core").is_tensor(v) and v:numel() == 1 then return v:item() end
    error(("SummaryWriter:%s: %s must be a number (or a one-element tensor), got %s"):format(fname, what, O.got(v)), 3)
  end
  return v * 1.0   -- (a float, -0.0 kept: v + 0.0 would make it +0.0)
end

function Writer:_append(path, data) fileio.append(path, M._record(data)) end

-- w:add_scalar(tag, value [, global_step [, walltime]]): a scalar summary (torch's simple_value, a float32)
function Writer:add_scalar(tag, value, step, walltime, ...)
  check_live(self, "add_scalar")
  O.no_more("SummaryWriter:add_scalar", "(tag, value [, global_step [, walltime]])", ...)
  check_tag("add_scalar", "tag", tag)
  value = check_number("add_scalar", "value", value)
  step, walltime = check_step("add_scalar", step, walltime)
  self:_append(self._path, event(walltime, step, 5, scalar_summary(tag, value)))
end

-- w:add_text(tag, text [, global_step [, walltime]]): the text plugin's summary, under tag .. "/text_summary"
function Writer:add_text(tag, text, step, walltime, ...)
  check_live(self, "add_text")
  O.no_more("SummaryWriter:add_text", "(tag, text [, global_step [, walltime]])", ...)
  check_tag("add_text", "tag", tag)
  if type(text) ~= "string" then
    error(("SummaryWriter:add_text: text must be a string, got %s"):format(O.got(text)), 2)
  end
  step, walltime = check_step("add_text", step, walltime)
  self:_append(self._path, event(walltime, step, 5, text_summary(tag, text)))
end

-- Summary.Value{tag=1, histo=5} of HistogramProto{min=1, max=2, num=3, sum=4, sum_squares=5 (doubles; proto3 leaves
-- +0.0 out), bucket_limit=6, bucket=7 (packed doubles)}
local function histogram_summary(tag, h)
  local parts = {}
  for i, k in ipairs { "min", "max", "num", "sum", "sum_squares" } do
    local v = h[k] * 1.0   -- (a float, -0.0 kept: + 0.0 would make it +0.0)
    if not is_default_float(v) then parts[#parts + 1] = double_field(i, v) end
  end
  for f = 6, 7 do
    local list, packed = f == 6 and h.limits or h.counts, {}
    for i, v in ipairs(list) do packed[i] = string.pack("<d", v) end
    parts[#parts + 1] = bytes_field(f, table.concat(packed))
  end
  return bytes_field(1, bytes_field(1, tag) .. bytes_field(5, table.concat(parts)))
end

-- a tensor's (an FP8 one's real values, dequantized) or a plain list's numbers, as a list of floats
local function values_of(fname, v)
  local core = require "fp8.core"
  if core.is_tensor(v) then
    local ok, t = pcall(function()
      local d = v:detach()
      if d:is_fp8() then d = d:dequantize() end
      return d:to("fp32"):reshape({ -1 }):totable()
    end)
    if not ok then
      error(("SummaryWriter:%s: values: %s"):format(fname, (tostring(t):gsub("^[^\n:]*%.lua:%d+: ", ""))), 3)
    end
    return t
  end
  if type(v) ~= "table" or getmetatable(v) ~= nil then
    error(("SummaryWriter:%s: values must be a tensor or a list of numbers, got %s"):format(fname, O.got(v)), 3)
  end
  local out = {}
  for i = 1, rawlen(v) do
    local x = rawget(v, i)
    if type(x) ~= "number" then
      error(("SummaryWriter:%s: values[%d] must be a number, got %s"):format(fname, i, O.got(x)), 3)
    end
    out[i] = x * 1.0
  end
  return out
end

-- sorted string keys of a plain table, each checked by check(k, v)
local function sorted_keys(fname, what, t, check)
  if type(t) ~= "table" or require("fp8.core").is_tensor(t) then
    error(("SummaryWriter:%s: %s must be a table {name = value, ...}, got %s"):format(fname, what, O.got(t)), 4)
  end
  local names = {}
  for k, v in next, t do
    if type(k) ~= "string" or k == "" then
      error(("SummaryWriter:%s: %s's keys must be non-empty strings, got %s"):format(fname, what, O.got(k)), 4)
    end
    check(k, v)
    names[#names + 1] = k
  end
  table.sort(names)
  return names
end

-- w:add_scalars(main_tag, {tag = value, ...} [, global_step [, walltime]]): torch's: each value in a run of its own,
-- the subdirectory <log_dir>/<main_tag with / as _>_<tag>, under the tag main_tag, so TensorBoard draws them in one
-- chart
function Writer:add_scalars(main_tag, values, step, walltime, ...)
  check_live(self, "add_scalars")
  O.no_more("SummaryWriter:add_scalars", "(main_tag, {tag = value, ...} [, global_step [, walltime]])", ...)
  check_tag("add_scalars", "main_tag", main_tag)
  local nums = {}
  local names = sorted_keys("add_scalars", "the values", values, function(k, v)
    nums[k] = check_number("add_scalars", ("values[%q]"):format(k), v)
  end)
  step, walltime = check_step("add_scalars", step, walltime)
  for _, k in ipairs(names) do
    local sub = self.log_dir .. "/" .. main_tag:gsub("/", "_") .. "_" .. k
    local path = self._sub[sub]
    if path == nil then
      path = open_file(sub, self._suffix)
      self._sub[sub] = path
    end
    self:_append(path, event(walltime, step, 5, scalar_summary(main_tag, nums[k])))
  end
end

-- w:add_histogram(tag, values [, global_step [, bins="tensorflow" [, walltime [, max_bins]]]]): torch's, the
-- histogram of a tensor's values (lua/fp8/tensorboard_histogram.lua): bins "tensorflow" (the default exponential
-- buckets), a count of equal bins over [min, max], or a list of increasing edges; max_bins merges bins down
function Writer:add_histogram(tag, values, step, bins, walltime, max_bins, ...)
  check_live(self, "add_histogram")
  O.no_more("SummaryWriter:add_histogram", "(tag, values [, global_step [, bins [, walltime [, max_bins]]]])", ...)
  check_tag("add_histogram", "tag", tag)
  -- a tensor's values here; a list, the bins and max_bins are checked where the histogram is made
  local list = values
  if require("fp8.core").is_tensor(values) then
    list = values_of("add_histogram", values)
  elseif type(values) ~= "table" then
    error(("SummaryWriter:add_histogram: values must be a tensor or a list of numbers, got %s"):format(O.got(values)), 2)
  end
  step, walltime = check_step("add_histogram", step, walltime)
  local ok, h = pcall(require("fp8.tensorboard_histogram").make, list, bins, max_bins)
  if not ok then error("SummaryWriter:add_histogram: " .. tostring(h), 2) end
  self:_append(self._path, event(walltime, step, 5, histogram_summary(tag, h)))
end

-- w:add_histogram_raw(tag, min, max, num, sum, sum_squares, bucket_limits, bucket_counts [, global_step [, walltime]]):
-- torch's: a histogram made elsewhere (each bucket by its right limit)
function Writer:add_histogram_raw(tag, mn, mx, num, sum, sq, limits, counts, step, walltime, ...)
  check_live(self, "add_histogram_raw")
  O.no_more("SummaryWriter:add_histogram_raw", "(tag, min, max, num, sum, sum_squares, bucket_limits, bucket_counts "
    .. "[, global_step [, walltime]])", ...)
  check_tag("add_histogram_raw", "tag", tag)
  local h = {}
  for _, f in ipairs { { "min", mn }, { "max", mx }, { "num", num }, { "sum", sum }, { "sum_squares", sq } } do
    h[f[1]] = check_number("add_histogram_raw", f[1], f[2])
  end
  h.limits = values_of("add_histogram_raw", limits)
  h.counts = values_of("add_histogram_raw", counts)
  if #h.limits ~= #h.counts then
    error(("SummaryWriter:add_histogram_raw: bucket_limits has %d entries, bucket_counts %d: they must be as many"
      .. " (torch's)"):format(#h.limits, #h.counts), 2)
  end
  step, walltime = check_step("add_histogram_raw", step, walltime)
  self:_append(self._path, event(walltime, step, 5, histogram_summary(tag, h)))
end

-- w:add_hparams(hparam_dict, metric_dict [, {run_name=, global_step=}]): the hparams plugin's experiment, session
-- start (the values: numbers, booleans as 1/0, strings) and end, in the run <log_dir>/<run_name> (the time by
-- default), then each metric as a scalar there, as torch's
function Writer:add_hparams(hparams, metrics, opts, ...)
  check_live(self, "add_hparams")
  O.no_more("SummaryWriter:add_hparams", "(hparam_dict, metric_dict [, {run_name=, global_step=}])", ...)
  local names = sorted_keys("add_hparams", "hparam_dict", hparams, function(k, v)
    if type(v) ~= "number" and type(v) ~= "string" and type(v) ~= "boolean" then
      error(("SummaryWriter:add_hparams: hparam_dict[%q] must be a number, a string or a boolean, got %s"):format(k,
        O.got(v)), 5)
    end
  end)
  local mnums = {}
  local mnames = sorted_keys("add_hparams", "metric_dict", metrics or {}, function(k, v)
    mnums[k] = check_number("add_hparams", ("metric_dict[%q]"):format(k), v)
  end)
  opts = O.check("SummaryWriter:add_hparams", opts, { "run_name", "global_step" }, 2)
  if opts.run_name ~= nil and (type(opts.run_name) ~= "string" or opts.run_name == "" or opts.run_name:find("/")) then
    error(("SummaryWriter:add_hparams: run_name must be a directory name (no /), got %s"):format(
      O.got(opts.run_name)), 2)
  end
  local run = self.log_dir .. "/" .. (opts.run_name or ("%.6f"):format(now()))
  local path = open_file(run, self._suffix)
  local step, walltime = check_step("add_hparams", opts.global_step, nil)
  for _, s in ipairs { hparams_summaries(names, hparams, mnames) } do
    self:_append(path, event(walltime, step, 5, s))
  end
  for _, k in ipairs(mnames) do self:_append(path, event(walltime, step, 5, scalar_summary(k, mnums[k]))) end
  fileio.append(path, "", true)
  return run
end

-- w:flush(): every add is already in its file (appended at once); flush makes them durable (fsync), as close does
function Writer:flush(...)
  check_live(self, "flush")
  O.no_more("SummaryWriter:flush", "no arguments", ...)
  fileio.append(self._path, "", true)
  for _, p in next, self._sub do fileio.append(p, "", true) end
end

-- w:close(): flush, then later adds are refused (a second close does nothing); also a <close> variable's end
function Writer:close(...)
  if getmetatable(self) ~= Writer then check_live(self, "close") end
  O.no_more("SummaryWriter:close", "no arguments", ...)
  if self._closed then return end
  self:flush()
  self._closed = true
end
Writer.__close = function(self) self:close() end

function Writer:get_logdir(...)
  check_live(self, "get_logdir")
  O.no_more("SummaryWriter:get_logdir", "no arguments", ...)   -- (took any until stop 99)
  return self.log_dir
end

function Writer:__tostring()
  return ("SummaryWriter(log_dir=%q%s)"):format(self.log_dir, self._closed and ", closed" or "")
end

-- fp8.SummaryWriter([log_dir [, {filename_suffix="", comment=""}]]): torch's; log_dir defaults to
-- runs/<month><day>_<HH-MM-SS>_<host><comment>
function M.SummaryWriter(log_dir, opts, ...)
  O.no_more("SummaryWriter", "([log_dir [, {filename_suffix=, comment=}]])", ...)
  if type(log_dir) == "table" and opts == nil then log_dir, opts = nil, log_dir end
  opts = O.check("SummaryWriter", opts, { "filename_suffix", "comment", "log_dir" }, 2)
  if opts.log_dir ~= nil then
    if log_dir ~= nil then error("SummaryWriter: give log_dir once (as the first argument or as log_dir=)", 2) end
    log_dir = opts.log_dir
  end
  for _, k in ipairs { "filename_suffix", "comment" } do
    if opts[k] ~= nil and type(opts[k]) ~= "string" then
      error(("SummaryWriter: %s must be a string, got %s"):format(k, O.got(opts[k])), 2)
    end
  end
  if opts.filename_suffix and opts.filename_suffix:find("/") then
    error(("SummaryWriter: filename_suffix must not hold a /, got %q"):format(opts.filename_suffix), 2)
  end
  if log_dir == nil then
    log_dir = "runs/" .. os.date("%b%d_%H-%M-%S") .. "_" .. hostname() .. (opts.comment or "")
  elseif opts.comment ~= nil then
    error("SummaryWriter: comment is appended to the default log_dir only; with a log_dir of your own, name it there",
      2)
  end
  if type(log_dir) ~= "string" or log_dir == "" then
    error(("SummaryWriter: log_dir must be a directory name, got %s"):format(O.got(log_dir)), 2)
  end
  local w = setmetatable({ log_dir = log_dir, _suffix = opts.filename_suffix or "", _sub = {} }, Writer)
  local ok, path = pcall(open_file, log_dir, w._suffix)
  if not ok then error(path, 2) end
  w._path = path
  return w
end

function M.is_writer(w) return getmetatable(w) == Writer end

-- help(w.add_scalar), help(w): the SummaryWriter entry (lua/fp8/trackers.lua) names each method
local okh, help = pcall(require, "fp8.help")
if okh and type(help) == "table" and help.class then
  help.class { class = Writer, prefix = "SummaryWriter", entry = "SummaryWriter" }
end

-- every public method refuses arguments past its parameters
return M
