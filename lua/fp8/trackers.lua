-- trackers.lua — Accelerate's experiment trackers on the Accelerator: log_with=, acc:init_trackers, acc:log,
-- acc:get_tracker, and the trackers' finish in acc:end_training. The one built-in tracker is TensorBoard's
-- (Accelerate's TensorBoardTracker, writing with fp8.SummaryWriter, lua/fp8/tensorboard.lua); a tracker object of the
-- script's own
-- (Accelerate's GeneralTracker protocol: a name and a log method) is taken too. The others Accelerate knows (wandb,
-- comet_ml, ...) are services or Python packages fp8lab does not have, and are refused by name.
local O = require "fp8.opts"
local TB = require "fp8.tensorboard"

local M = {}

local BUILT_IN = { "tensorboard" }
local ELSEWHERE = { "wandb", "comet_ml", "aim", "mlflow", "clearml", "dvclive", "swanlab", "trackio" }

-- ---- Accelerate's TensorBoardTracker ---------------------------------------------------------------------------
local TensorBoardTracker = { name = "tensorboard", requires_logging_directory = true, main_process_only = true }
TensorBoardTracker.__index = TensorBoardTracker
TensorBoardTracker.__name = "TensorBoardTracker"
M.TensorBoardTracker = TensorBoardTracker

local INIT_KWARGS = { "filename_suffix" }   -- SummaryWriter's options a tracker passes on

-- TensorBoardTracker(run_name, logging_dir [, {filename_suffix=}]): a writer for logging_dir/run_name, as Accelerate's
function TensorBoardTracker.new(run_name, logging_dir, kw, ...)
  O.no_more("TensorBoardTracker.new", "(run_name, logging_dir [, {filename_suffix=}])", ...)
  for i = 1, 2 do   -- (not ipairs: it stops at a nil)
    local v = select(i, run_name, logging_dir)
    if type(v) ~= "string" or v == "" then
      error(("TensorBoardTracker: %s must be a non-empty string, got %s"):format(i == 1 and "run_name" or "logging_dir",
        O.got(v)), 2)
    end
  end
  kw = O.check("TensorBoardTracker", kw, INIT_KWARGS, 2)
  local dir = logging_dir .. "/" .. run_name
  local self = setmetatable({ run_name = run_name, logging_dir = dir }, TensorBoardTracker)
  self.writer = TB.SummaryWriter(dir, kw)
  self.tracker = self.writer   -- Accelerate's tracker property: the writer itself (get_tracker(name, true))
  return self
end

-- YAML for hparams.yml: the values, one key a line, sorted (as PyYAML's dump); a key that reads as a plain word
-- stays plain, other strings are double-quoted
local YAML_WORDS = { ["true"] = 1, ["false"] = 1, yes = 1, no = 1, on = 1, off = 1, null = 1, y = 1, n = 1 }
local function yaml_key(k)
  if k:match("^[%a_][%w_%-%.]*$") and not YAML_WORDS[k:lower()] then return k end
  return nil
end
local function yaml_scalar(v)
  if type(v) == "string" then
    return '"' .. v:gsub('[\\"]', "\\%0"):gsub("\n", "\\n"):gsub("\t", "\\t"):gsub("%c", function(c)
      return ("\\x%02X"):format(c:byte()) end) .. '"'
  end
  if type(v) == "boolean" then return tostring(v) end
  if math.type(v) == "integer" then return ("%d"):format(v) end
  if v ~= v then return ".nan" end
  if v == math.huge then return ".inf" end
  if v == -math.huge then return "-.inf" end
  local short = ("%.15g"):format(v)   -- the shortest of the two that reads back as v
  local s = tonumber(short) == v and short or ("%.17g"):format(v)
  -- a YAML 1.1 float has a '.' (PyYAML, which Accelerate writes hparams.yml with, read 1e-05 as a string and 2 or
  -- -0 as integers): 1.0e-05, 2.0, -0.0
  if not s:find(".", 1, true) then s = s:find("e", 1, true) and s:gsub("e", ".0e", 1) or s .. ".0" end
  return s
end

-- store_init_configuration(values): the hparams (TensorBoard's HPARAMS tab) in a run of their own under the tracker's
-- directory, and hparams.yml in that run, as Accelerate's (which puts the two in two runs, each named by the clock)
local function check_call(self, fname, values)
  if getmetatable(self) ~= TensorBoardTracker then
    error(("TensorBoardTracker:%s: called without its tracker (got %s): write t:%s(...), with a colon"):format(fname,
      O.got(self), fname), 3)
  end
  if type(values) ~= "table" or require("fp8.core").is_tensor(values) then
    error(("TensorBoardTracker:%s: values must be a table {name = value, ...}, got %s"):format(fname, O.got(values)), 3)
  end
end

function TensorBoardTracker:store_init_configuration(values)
  check_call(self, "store_init_configuration", values)
  local run = self.writer:add_hparams(values, {})
  local keys = {}
  for k in next, values do keys[#keys + 1] = k end
  table.sort(keys)
  local lines = {}
  for _, k in ipairs(keys) do
    lines[#lines + 1] = (yaml_key(k) or yaml_scalar(k)) .. ": " .. yaml_scalar(values[k]) .. "\n"
  end
  require("fp8._fileio").write_atomic(run .. "/hparams.yml", table.concat(lines))
  return run
end

-- log(values, step [, {walltime=}]): each value by its type, as Accelerate's: a number (or a boolean, or a one-element
-- tensor) as a scalar, a string as text, a table {name = number} as add_scalars' runs; anything else is refused
-- (Accelerate's drops it without a word)
function TensorBoardTracker:log(values, step, kw)
  check_call(self, "log", values)
  kw = O.check("TensorBoardTracker:log", kw, { "walltime" }, 3)
  local keys = {}
  for k in next, values do keys[#keys + 1] = k end
  table.sort(keys)
  -- every value checked before any is written: a bad one part way left the ones before it in the event file, and
  -- the call retried after the fix wrote them twice
  local is_tensor = require("fp8.core").is_tensor
  for _, k in ipairs(keys) do
    local v, ok = values[k], nil
    if type(v) == "string" or type(v) == "number" or type(v) == "boolean" then ok = true
    elseif is_tensor(v) then ok = v:numel() == 1
    elseif type(v) == "table" then
      ok = true
      for kk, x in next, v do ok = ok and type(kk) == "string" and (type(x) == "number" or type(x) == "boolean") end
    end
    if not ok then
      error(("TensorBoardTracker:log: values[%q] must be a number, a boolean, a one-element tensor, a string or a "
        .. "table {name = number}, got %s (nothing was written)"):format(tostring(k), O.got(v)), 3)
    end
  end
  for _, k in ipairs(keys) do
    local v = values[k]
    if type(v) == "string" then
      self.writer:add_text(k, v, step, kw.walltime)
    elseif type(v) == "table" and not require("fp8.core").is_tensor(v) then
      self.writer:add_scalars(k, v, step, kw.walltime)
    else
      self.writer:add_scalar(k, v, step, kw.walltime)
    end
  end
end

function TensorBoardTracker:finish()
  if getmetatable(self) ~= TensorBoardTracker then
    error(("TensorBoardTracker:finish: called without its tracker (got %s): write t:finish()"):format(O.got(self)), 2)
  end
  self.writer:close()
end

-- ---- the Accelerator's part -------------------------------------------------------------------------------------
local function list_of(v)
  if type(v) == "table" and rawget(v, 1) ~= nil then
    local out = {}
    for i = 1, rawlen(v) do out[i] = rawget(v, i) end
    return out
  end
  return { v }
end

local function is_tracker_object(t)
  return type(t) == "table" and type(t.name) == "string" and type(t.log) == "function"
end

-- log_with (a name, "all", a tracker object, or a list of these) → the list of names and objects, checked, at the
-- accelerator's construction as Accelerate's filter_trackers: a tracker that needs a logging directory without one is
-- refused there.
function M._resolve(log_with, logging_dir, level)
  level = level + 1
  if log_with == nil then return {} end
  local out, seen = {}, {}
  for _, t in ipairs(list_of(log_with)) do
    if t == "all" then
      for _, n in ipairs(BUILT_IN) do if not seen[n] then out[#out + 1] = n; seen[n] = true end end
    elseif type(t) == "string" then
      local name = t:lower()
      local known = false
      for _, n in ipairs(BUILT_IN) do if n == name then known = true end end
      if not known then
        local elsewhere = false
        for _, n in ipairs(ELSEWHERE) do if n == name then elsewhere = true end end
        error(("Accelerator: log_with=%q %s (fp8lab's tracker: \"tensorboard\", or \"all\"; or a tracker object of "
          .. "your own with a name and a log(values, step) method)"):format(t, elsewhere
            and "is not available in fp8lab: it is a service or Python package it does not have"
            or "is not a tracker"), level)
      end
      if not seen[name] then out[#out + 1] = name; seen[name] = true end
    elseif is_tracker_object(t) then
      out[#out + 1] = t
    else
      error(("Accelerator: log_with must be a tracker name (\"tensorboard\", \"all\"), a tracker object with a name "
        .. "and a log method, or a list of these, got %s"):format(O.got(t)), level)
    end
  end
  for _, t in ipairs(out) do
    local needs = type(t) == "string" or t.requires_logging_directory
    if needs and logging_dir == nil then
      error(("Accelerator: logging with %s needs a logging directory: give project_dir= (or "
        .. "fp8.ProjectConfiguration{logging_dir=})"):format(type(t) == "string" and t or t.name), level)
    end
  end
  return out
end

-- the names of an accelerator's log_with (a built-in's name, or a tracker object's): the keys of init_kwargs and
-- log_kwargs
local function tracker_names(acc)
  local names = {}
  for _, t in ipairs(acc.log_with) do names[#names + 1] = type(t) == "string" and t or t.name end
  return names
end

-- A tracker whose methods do nothing: what get_tracker gives on a process that keeps no trackers (Accelerate's
-- GeneralTracker(_blank=True)), so code written for the main process runs on the others too.
local Blank = { name = "blank", requires_logging_directory = false, main_process_only = true }
Blank.__index = Blank
Blank.__name = "GeneralTracker"
function Blank.log() end
function Blank.store_init_configuration() end
function Blank.finish() end

function M._install(Accelerator)
  -- acc:init_trackers(project_name [, config [, init_kwargs]]): on the main process, each tracker of log_with for the
  -- run project_name (TensorBoard: logging_dir/project_name), then config (a table of numbers, strings and booleans)
  -- stored by each (TensorBoard: hparams and hparams.yml); init_kwargs = {tensorboard = {filename_suffix=}}
  function Accelerator:init_trackers(project_name, config, init_kwargs, ...)
    O.no_more("init_trackers", "(project_name [, config [, init_kwargs]])", ...)
    if type(project_name) ~= "string" or project_name == "" or project_name:find("/", 1, true) then
      error(("init_trackers: project_name must be a non-empty name without /, got %s"):format(O.got(project_name)), 2)
    end
    if config ~= nil and type(config) ~= "table" then
      error(("init_trackers: config must be a table {name = value, ...}, got %s"):format(O.got(config)), 2)
    end
    if config ~= nil then
      for k, v in next, config do
        if type(k) ~= "string" then
          error(("init_trackers: config's keys must be strings, got %s"):format(O.got(k)), 2)
        end
        if type(v) ~= "number" and type(v) ~= "string" and type(v) ~= "boolean" then
          error(("init_trackers: config[%q] must be a number, a string or a boolean, got %s"):format(k, O.got(v)), 2)
        end
      end
    end
    init_kwargs = O.check("init_trackers", init_kwargs, tracker_names(self), 2)
    for _, t in ipairs(self.log_with) do   -- a tracker object is the script's, made already: nothing would read it
      if type(t) ~= "string" and init_kwargs[t.name] ~= nil then
        error(("init_trackers: init_kwargs[%q]: %q is a tracker object of the script's own, made already; init_kwargs "
          .. "reach the built-in trackers only (tensorboard)"):format(t.name, t.name), 2)
      end
    end
    if #self.trackers > 0 then
      error("init_trackers: the trackers are running already (end_training() finishes them)", 2)
    end
    rawset(self, "_trackers_finished", nil)
    rawset(self, "_trackers_started", true)   -- (on every process: end_training then finishes them on all)
    if self.process_index ~= 0 then return end   -- Accelerate's @on_main_process
    for _, t in ipairs(self.log_with) do
      local tracker = t
      if type(t) == "string" then   -- (the one built-in: tensorboard)
        local ok, made = pcall(TensorBoardTracker.new, project_name, self.logging_dir, init_kwargs[t])
        if not ok then error(("init_trackers: %s"):format(tostring(made):gsub("^[^:\n]*%.lua:%d+: ", "")), 2) end
        tracker = made
      end
      self.trackers[#self.trackers + 1] = tracker
      if config ~= nil and tracker.store_init_configuration then
        local ok, err = pcall(tracker.store_init_configuration, tracker, config)
        if not ok then error(("init_trackers: %s"):format(tostring(err):gsub("^[^:\n]*%.lua:%d+: ", "")), 2) end
      end
    end
  end

  -- acc:log(values [, step [, log_kwargs]]): on the main process, values to every tracker (log_kwargs per tracker name:
  -- {tensorboard = {walltime=}})
  function Accelerator:log(values, step, log_kwargs, ...)
    O.no_more("log", "(values [, step [, log_kwargs]])", ...)
    if type(values) ~= "table" or require("fp8.core").is_tensor(values) then
      error(("log: values must be a table {name = value, ...}, got %s"):format(O.got(values)), 2)
    end
    for k in next, values do
      if type(k) ~= "string" or k == "" then
        error(("log: values' keys must be non-empty strings, got %s"):format(O.got(k)), 2)
      end
    end
    if step ~= nil and math.type(step) ~= "integer" then
      error(("log: step must be an integer, got %s"):format(O.got(step)), 2)
    end
    log_kwargs = O.check("log", log_kwargs, tracker_names(self), 2)
    if rawget(self, "_trackers_finished") then   -- (on every process: the values would be dropped on the main one)
      error("log: end_training() finished the trackers, so these values would go nowhere; init_trackers starts "
        .. "them again", 2)
    end
    if self.process_index ~= 0 then return end
    for _, tracker in ipairs(self.trackers) do
      local ok, err = pcall(tracker.log, tracker, values, step, log_kwargs[tracker.name])
      if not ok then error(("log: %s"):format(tostring(err):gsub("^[^:\n]*%.lua:%d+: ", "")), 2) end
    end
  end

  -- acc:get_tracker(name [, unwrap=false]): the tracker of that name (unwrap: what it writes with, TensorBoard's
  -- SummaryWriter); while none runs (on a process that keeps none, before init_trackers, after end_training), a
  -- tracker that does nothing, as Accelerate's; a name other than the running ones' is an error
  function Accelerator:get_tracker(name, unwrap, ...)
    O.no_more("get_tracker", "(name [, unwrap])", ...)
    if type(name) ~= "string" then error(("get_tracker: name must be a string, got %s"):format(O.got(name)), 2) end
    if unwrap ~= nil and type(unwrap) ~= "boolean" then
      error(("get_tracker: unwrap must be a boolean, got %s"):format(O.got(unwrap)), 2)
    end
    for _, t in ipairs(self.trackers) do
      if t.name == name then
        if unwrap then return t.tracker end
        return t
      end
    end
    if self.process_index ~= 0 or #self.trackers == 0 then return setmetatable({}, Blank) end
    local n = {}
    for _, t in ipairs(self.trackers) do n[#n + 1] = t.name end
    error(("get_tracker: %q is not a tracker this accelerator runs (running: %s)"):format(name, table.concat(n, ", ")),
      2)
  end

  -- the trackers' finish (end_training): each once; the list is then empty, so init_trackers may start them again
  function Accelerator:_finish_trackers()
    local list = self.trackers
    self.trackers = {}
    if rawget(self, "_trackers_started") then rawset(self, "_trackers_finished", true) end
    rawset(self, "_trackers_started", nil)
    for _, t in ipairs(list) do
      if t.finish then t:finish() end
    end
  end
end

local okh, help = pcall(require, "fp8.help")
if okh and help.add then
  local function add(name, sig, doc)
    help.add { section = "Accelerator & recipes", name = name, sig = sig, doc = doc }
  end
  add("acc:init_trackers", "fp8.Accelerator{log_with=\"tensorboard\", project_dir=DIR} ;\n"
    .. "  acc:init_trackers(project_name [, config [, init_kwargs]])",
    "Accelerate's experiment trackers. log_with: \"tensorboard\", \"all\", a tracker object of your own ({name=,\n"
    .. "log=function(self, values, step, kw) ...}, optional store_init_configuration, finish, tracker), or a list.\n"
    .. "init_trackers starts them on the main process: TensorBoard writes DIR/project_name (config: its hparams and\n"
    .. "hparams.yml; init_kwargs {tensorboard = {filename_suffix=}}). acc:log(values [, step [, log_kwargs]]):\n"
    .. "numbers as scalars, strings as text, {name = number} tables as grouped scalars;\n"
    .. "acc:get_tracker(name [, unwrap]); acc:end_training() finishes them. tensorboard --logdir DIR shows the\n"
    .. "runs. acc:log_fp8_stats{every=N, trackers=true} logs each FP8 layer's scale, amax, underflow and saturation.")
  help.ALIASES["acc:log"] = "acc:init_trackers"
  help.ALIASES["acc:get_tracker"] = "acc:init_trackers"
  help.add { section = "Training", name = "SummaryWriter",
    sig = "fp8.SummaryWriter([log_dir [, {filename_suffix=, comment=}]]) -> w",
    doc = "torch.utils.tensorboard's writer of TensorBoard event files (the records torch writes):\n"
      .. "w:add_scalar(tag, value [, step [, walltime]]), w:add_scalars(main_tag, {tag = value} [, step]),\n"
      .. "w:add_text(tag, text [, step]), w:add_hparams(hparams, metrics [, {run_name=, global_step=}]),\n"
      .. "w:add_histogram(tag, values [, step [, bins=\"tensorflow\" | count | edges [, walltime [, max_bins]]]])\n"
      .. "(a tensor's values, an FP8 one's dequantized), w:add_histogram_raw(tag, min, max, num, sum, sum_squares,\n"
      .. "limits, counts [, step]), w:flush(), w:close() (also a <close> variable), w:get_logdir(). Each add is\n"
      .. "appended to the file at once." }
end

return M
