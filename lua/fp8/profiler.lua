-- fp8.profiler — torch.profiler for fp8lab, over the core recorder (require "fp8._profiler"):
--   local prof = fp8.profiler.profile{schedule_option={wait=1, warmup=1, active=3}, record_shapes=true,
--                                     with_flops=true, with_modules=true, output_trace_dir="traces"}
--   prof:start(); for i = 1, 6 do train_step(); prof:step() end; prof:stop()
--   print(prof:key_averages()); prof:export_chrome_trace("trace.json")
-- Options are fp8.ProfileKwargs' (a handler is accepted too). The schedule (PyTorch's): skip_first
-- steps, then cycles of wait → warmup → active steps, `repeat` cycles (0: until stop); skip_first_wait ~= 0: the
-- first cycle without its wait. Only active
-- steps are kept, each inside a "ProfilerStep#N" range; warmup steps are recorded and thrown away.
-- At the end of each active window its trace is written to <output_trace_dir>/profile_<R>.json for the first
-- window (Accelerate's name), profile_<R>_window<N>.json for window N >= 2, and on_trace_ready(prof) is
-- called. events() and key_averages() hold the last finished window only (torch.profiler keeps the current
-- cycle's results), so memory and the work per window stay bounded however many windows run. Without a
-- schedule everything from start to stop is one window.
local O = require "fp8.opts"
local P = require "fp8._profiler"
local mkdir_p = require("fp8._checkpoint").mkdir_p   -- the file helpers' mkdir -p (lua/l_checkpoint.c)
local kwargs = require "fp8.kwargs"

local M = {}
-- M.current, the running profiler, is held weakly: one the program dropped while it ran (an error between start()
-- and stop(), say) is collected, and its __gc stops the recording; held strongly, it recorded until the event cap
-- and refused every later profiler ("another profiler is running")
local running = setmetatable({}, { __mode = "v" })
-- The running profiler's session token (a table, not the profiler, which must stay collectable). The collector
-- clears the weak reference above some steps before it runs the dropped profiler's __gc: a profiler started in
-- between owns the recorder, and that late __gc must leave it alone (it cleared the new one's events)
local owner
setmetatable(M, {
  __index = function(_, k) if k == "current" then return running[1] end end,
  __newindex = function(t, k, v) if k == "current" then running[1] = v else rawset(t, k, v) end end,
})
local Profiler = {}
-- A method called with another value as its self (Profiler.start(t), t not a profiler): named, where Lua's own
-- "attempt to call a number value" was the message (sweep 112). Raises at level 3.
local function check_prof(self, fname)
  if getmetatable(self) ~= Profiler then
    error(("profiler:%s: expected a profiler (prof:%s(...)), got %s"):format(fname, fname, O.got(self)), 3)
  end
end

Profiler.__index = Profiler
Profiler.__name = "fp8.profiler.profile"
-- a profiler collected while running (nothing refers to it: no trace can be asked of it) stops recording
Profiler.__gc = function(self)
  if rawget(self, "_state") == "running" and owner ~= nil and owner == rawget(self, "_owner") then
    owner = nil
    self._state = "stopped"
    if self._on then pcall(self._turn_off, self) end
    pcall(P.clear)
  end
end

local function is_rec(a) return a == "record" or a == "record_and_save" end

-- ---- module ranges (with_modules) -------------------------------------------------------------

-- Each module call runs in a range "<name> (<Class>)" whose note is the module's dotted path from
-- the outermost called module ("blocks.1.attn (Attention)"; the outermost one: its class name).
local paths = {}
local function call_hook(m, ...)
  local name, cls = rawget(m, "_name"), m:type_name()
  local parent = paths[#paths]
  local path = parent == nil and "" or (parent == "" and tostring(name or "?") or parent .. "." .. tostring(name or "?"))
  local label = name ~= nil and ("%s (%s)"):format(tostring(name), cls) or cls
  paths[#paths + 1] = path
  local tok = P.push(label, "module", path == "" and cls or ("%s (%s)"):format(path, cls))
  local res = table.pack(pcall(m.forward, m, ...))
  P.pop(tok)
  paths[#paths] = nil
  if res[1] then return table.unpack(res, 2, res.n) end
  error(res[2], 0)
end

-- ---- construction -----------------------------------------------------------------------------

-- the process's rank from whatever started it (mpirun, srun, PMI), as the communicator reads it
local function env_rank()
  return require("fp8._dist").info().rank
end

-- profile(opts [, {rank=}]): opts is a ProfileKwargs handler, a table of its keys, or nil.
function M.profile(opts, extra)
  local h = opts
  if h == nil then
    h = kwargs.ProfileKwargs {}
  elseif kwargs.is_handler(h) then
    if h.handler_type ~= "ProfileKwargs" then
      error(("fp8.profiler.profile: expected ProfileKwargs or an options table, got a %s"):format(h.handler_type), 2)
    end
  elseif type(h) ~= "table" then
    error(("fp8.profiler.profile: expected an options table (the keys of fp8.ProfileKwargs), got %s"):format(type(h)), 2)
  else
    local ok, res = pcall(kwargs.ProfileKwargs, h)
    if not ok then error(tostring(res):gsub("^ProfileKwargs:", "fp8.profiler.profile:"), 2) end
    h = res
  end
  extra = O.check("fp8.profiler.profile", extra, { "rank" }, 2)
  if extra.rank ~= nil and (math.type(extra.rank) ~= "integer" or extra.rank < 0) then
    error(("fp8.profiler.profile: rank must be an integer >= 0, got %s"):format(O.got(extra.rank)), 2)
  end
  local o = h:to_table()
  local device = false
  for _, a in ipairs(o.activities or {}) do device = device or a == "cuda" end
  if device and not P.has_device_clock() then
    -- the GPU comes up on first use; asking for it here gives the profiler its clock
    local okc, cuda = pcall(require, "fp8.cuda")
    if okc and cuda.is_available() then pcall(cuda.synchronize) end
    if not P.has_device_clock() then
      device = false
      if not M._cuda_noticed then
        M._cuda_noticed = true
        io.stderr:write("fp8lab: notice: profiler: activities \"cuda\" without a GPU in use; ops get CPU wall time only\n")
      end
    end
  end
  return setmetatable({
    options = o, device = device, schedule = o.schedule_option, rank = extra.rank or env_rank(),
    step_num = 0, windows = 0, dropped = 0, _events = {}, _state = "idle", _on = false,
  }, Profiler)
end

-- PyTorch's torch.profiler.schedule: the action for step number n.
function Profiler:_action(n)
  local s = self.schedule
  if not s then return "record" end
  if n < s.skip_first then return "none" end
  n = n - s.skip_first
  -- skip_first_wait: the first cycle starts at its warmup (torch shifts every later step by wait as well)
  if s.skip_first_wait ~= 0 then n = n + s.wait end
  local cycle = s.wait + s.warmup + s.active
  if s["repeat"] > 0 and n // cycle >= s["repeat"] then return "none" end
  local m = n % cycle
  if m < s.wait then return "none" end
  if m < s.wait + s.warmup then return "warmup" end
  return m < cycle - 1 and "record" or "record_and_save"
end

function Profiler:_turn_on()
  local o = self.options
  -- through pcall: the recorder's message without a position inside this file (the public method adds the user's)
  local ok, err = pcall(P.start, { record_shapes = o.record_shapes, profile_memory = o.profile_memory,
                                   with_flops = o.with_flops, device = self.device })
  if not ok then error(err, 0) end
  self._on = true
  if o.with_modules then
    paths = {}
    self._module = require "fp8.nn.module"   -- looked up now: the Module class of the models being run
    self._module._call_hook = call_hook
  end
end

function Profiler:_turn_off()
  P.end_all()
  P.stop()
  self._on = false
  local mod = self._module
  if mod and mod._call_hook == call_hook then mod._call_hook = nil end
end

-- Events of the finished window → self._events (replacing the previous window's): times relative to start,
-- each op's enclosing module path (module) and step number (step), and with device time the span the
-- device took for the event (device_ts_ns, device_dur_ns; device_ts/device_dur in µs).
function Profiler:_collect(drop)
  if self.device then P.resolve_device() end
  local raw, out = P.events(), {}
  self._events = out
  -- events past the recorder's cap (or lost to memory) since the window began: said here, in the trace and the table
  self.dropped, self.max_events = P.dropped(), P.max_events()
  P.clear()
  local pos, module, step = {}, {}, {}
  for i, e in ipairs(raw) do
    if e.end_ns >= 0 and i ~= drop then
      local par = e.parent and pos[e.parent]
      local rel = e.start_ns - self.t0
      local n = #out + 1
      out[n] = { name = e.name, kind = e.kind, tid = e.tid, depth = e.depth, parent = par,
                 ts_ns = rel, dur_ns = e.end_ns - e.start_ns, ts = rel / 1000, dur = (e.end_ns - e.start_ns) / 1000,
                 flops = e.flops, bytes = e.bytes, shapes = e.shapes }
      if e.dev_start_ns then
        local o = out[n]
        o.device_ts_ns, o.device_dur_ns = e.dev_start_ns - self.t0, e.dev_end_ns - e.dev_start_ns
        o.device_ts, o.device_dur = o.device_ts_ns / 1000, o.device_dur_ns / 1000
      end
      pos[i] = n
      module[i] = e.kind == "module" and e.note or (e.parent and module[e.parent])
      step[i] = e.name:match("^ProfilerStep#(%d+)$") and tonumber(e.name:match("%d+$")) or (e.parent and step[e.parent])
      out[n].module, out[n].step = module[i], step[i]
    end
  end
  return #out
end

-- trace_path([n]) → the file window n's trace goes to (default: the last window finished, else the first):
-- <output_trace_dir>/profile_<R>.json for window 1, profile_<R>_window<n>.json after; nil without a directory.
function Profiler:trace_path(n)
  check_prof(self, "trace_path")
  if n ~= nil and (math.type(n) ~= "integer" or n < 1) then
    -- (opts.got: tostring ran the value's own __tostring, and one answering a table raised Lua's message, sweep 115)
    error(("trace_path: expected a window number >= 1, got %s"):format(require("fp8.opts").got(n)), 2)
  end
  local dir = self.options.output_trace_dir
  if not dir then return nil end
  n = n or math.max(self.windows, 1)
  dir = dir:gsub("/+$", "")
  if n == 1 then return ("%s/profile_%d.json"):format(dir, self.rank) end
  return ("%s/profile_%d_window%d.json"):format(dir, self.rank, n)
end

function Profiler:_finish_window(drop)
  if self._step_tok then P.pop(self._step_tok); self._step_tok = nil end
  self:_turn_off()
  self:_collect(drop)
  self.windows = self.windows + 1
  if self.dropped > 0 then
    io.stderr:write(("fp8lab: notice: profiler: window %d dropped %d events: the recorder holds at most %d events "
      .. "per window (shorten the active window or profile fewer ops per step)\n"):format(self.windows, self.dropped,
      self.max_events))
  end
  local path = self:trace_path(self.windows)
  if path then
    local ok, err = mkdir_p(self.options.output_trace_dir)
    if not ok then error("profiler: " .. err, 0) end
    ok, err = self:_write_trace(path)
    if not ok then error("profiler: " .. err, 0) end
  end
  if self.options.on_trace_ready then
    -- an error in the callback is raised once the schedule has moved on (see raise_pending); the callback
    -- may call prof:stop() (see stop)
    self._in_cb = true
    local ok, err = pcall(self.options.on_trace_ready, self)
    self._in_cb = false
    if not ok and self._cb_err == nil then self._cb_err = err end
  end
end

local function raise_pending(self)
  local err = self._cb_err
  if err ~= nil then
    self._cb_err = nil
    error(type(err) == "string" and "on_trace_ready: " .. err or err, 0)
  end
end

-- Move the recorder from the action of the previous step to `cur` (the current step's).
function Profiler:_transition(prev, cur)
  if is_rec(prev) then
    local run = self._owner
    if prev == "record_and_save" or not is_rec(cur) then self:_finish_window()
    elseif self._step_tok then P.pop(self._step_tok); self._step_tok = nil end
    if self._state ~= "running" then return end   -- on_trace_ready called stop(): the recorder stays off
    -- on_trace_ready called stop() then start(): that start made this step's transition (its ProfilerStep range
    -- open); a second one here opened ProfilerStep#N twice, nested, and lost the first's token (sweep 112)
    if self._owner ~= run then return end
  end
  if cur == "none" then
    if self._on then self:_turn_off(); P.clear() end
  elseif cur == "warmup" then
    if not self._on then self:_turn_on() end
  else
    if prev == "warmup" then P.end_all(); P.clear() end   -- warmup events are thrown away
    if not self._on then self:_turn_on() end
    self._step_tok = P.push("ProfilerStep#" .. self.step_num)
  end
end

-- ---- the user API -----------------------------------------------------------------------------

-- Errors of the internal steps are raised without a position (level 0); the public methods re-raise a
-- string at level 2, so the message blames the user's call, not a line of this file.
local function blame_caller(err) error(err, type(err) == "string" and 3 or 0) end

function Profiler:_start()
  if self._state == "running" then error("profiler: start() called twice (call stop() first)", 0) end
  if M.current then
    error("profiler: another profiler is running (stop it first: fp8.profiler.current:stop())", 0)
  end
  -- one the program dropped while it ran, collected but not yet finalized: its __gc stops the recorder now
  if owner ~= nil then collectgarbage() end
  P.clear()
  -- a start() after stop() goes on from the step the profiler stopped at, as torch's (its step_num is never reset):
  -- the schedule goes on (a finished repeat records nothing more; skip_first and wait are not run again), the
  -- ProfilerStep#N numbers go on, and so do the windows, whose trace files the next ones do not overwrite; the last
  -- finished window stays readable until the next one ends
  self._state, self._cb_stopped = "running", false
  self.t0 = P.now()
  M.current, self._owner = self, {}
  owner = self._owner
  self._step_tok = nil
  local ok, err = pcall(self._transition, self, nil, self:_action(self.step_num))
  if not ok then self._state = "idle"; M.current, owner = nil, nil; error(err, 0) end
  raise_pending(self)
  return self
end

function Profiler:start()
  check_prof(self, "start")
  local ok, err = pcall(self._start, self)
  if not ok then blame_caller(err) end
  return self
end

-- step(): the current step is done; the schedule moves on (call once per training step). After on_trace_ready
-- stopped the profiler, the training loop's further step() calls do nothing.
function Profiler:step()
  check_prof(self, "step")
  -- under acc:profile the first to step decides who steps: each opt:step() of a prepared optimizer, or the user's
  -- prof:step() calls (a loop without an optimizer, say); both would count each iteration twice
  local acc = rawget(self, "_acc")
  if acc and self._state == "running" then
    if acc.mode == "optimizer" then
      error("profiler: under acc:profile each opt:step() of a prepared optimizer is one profiler step already: "
        .. "remove this prof:step() (or call only prof:step(), from the start, in a loop without one)", 2)
    end
    acc.mode = "manual"
  end
  return self:_step_now()
end

-- the schedule's move to the next step (step(), and acc:profile's optimizer steps)
function Profiler:_step_now()
  if self._state ~= "running" then
    if self._cb_stopped then return end
    error(self._state == "stopped" and "profiler: step() after stop() (start() again first)" or "profiler: step() before start()", 2)
  end
  local prev = self:_action(self.step_num)
  self.step_num = self.step_num + 1
  self:_transition(prev, self:_action(self.step_num))
  raise_pending(self)
end

-- stop(): also from on_trace_ready (torch's prof.stop() in a handler): the profiler stops after the callback,
-- and a stop() there while the profiler is already stopping is a no-op.
function Profiler:stop()
  if self._state ~= "running" then
    if self._in_cb then return self end
    error("profiler: stop() without start()", 2)
  end
  self._state = "stopped"
  self._cb_stopped = self._in_cb == true
  M.current, owner = nil, nil
  local cur = self:_action(self.step_num)
  if is_rec(cur) then
    -- a step range opened by the last step() with nothing in it is not a step
    local idx = self._step_tok and P.index(self._step_tok)
    local drop = idx and idx == P.count() and idx or nil
    if drop and self._step_tok then P.pop(self._step_tok); self._step_tok = nil end
    if P.count() > (drop and 1 or 0) or self.windows == 0 then self:_finish_window(drop)
    else self:_turn_off(); P.clear() end
  elseif self._on then
    self:_turn_off()
    P.clear()
  end
  raise_pending(self)
  return self
end

Profiler.__close = function(self) if self._state == "running" then self:stop() end end

-- run(fn, ...): fn(prof, ...) under start/stop (stopped on error too); returns the profiler.
function Profiler:run(fn, ...)
  if type(fn) ~= "function" then error(("profiler:run: expected a function, got %s"):format(type(fn)), 2) end
  local ok, err = pcall(self._start, self)
  if not ok then blame_caller(err) end
  return self:_run_started(fn, ...)
end

-- fn(self, ...) with the profiler started; stopped after it (on error too). Errors pass through as raised.
function Profiler:_run_started(fn, ...)
  local res = table.pack(pcall(fn, self, ...))
  if self._state == "running" then
    local ok, err = pcall(self.stop, self)
    if res[1] and not ok then error(err, 0) end
  end
  if not res[1] then error(res[2], 0) end
  return self
end

-- events() → the events of the last finished window (read-only): {name, kind ("op"|"range"|"module"), ts, dur
-- (µs from start), ts_ns, dur_ns, tid, parent (position), depth, step, module, shapes, flops, bytes,
-- device_ts, device_dur, device_ts_ns, device_dur_ns (activities "cuda" on a GPU)}.
function Profiler:events() return self._events end

-- ---- key_averages -----------------------------------------------------------------------------

local SORT_KEYS = { "cpu_time_total", "self_cpu_time_total", "cpu_time", "device_time_total",
                    "self_device_time_total", "device_time", "count", "flops", "cpu_memory_usage",
                    "self_cpu_memory_usage", "name" }
-- PyTorch's older names for the device columns
local SORT_ALIASES = { cuda_time_total = "device_time_total", self_cuda_time_total = "self_device_time_total",
                       cuda_time = "device_time" }

local Averages = {}
Averages.__index = Averages
Averages.__name = "fp8.profiler.KeyAverages"

-- key_averages([{group_by_input_shape=false}]) → a list of rows, one per event name ("ProfilerStep*"
-- for the steps), sorted by total time: key, count, cpu_time_total, self_cpu_time_total, cpu_time
-- (average), in µs (and *_ns integers), flops, cpu_memory_usage, self_cpu_memory_usage (bytes); with
-- device time also device_time_total, self_device_time_total, device_time (µs, *_ns).
function Profiler:key_averages(opts)
  check_prof(self, "key_averages")
  opts = opts or {}
  if type(opts) ~= "table" then error(("key_averages: expected an options table, got %s"):format(type(opts)), 2) end
  O.check("key_averages", opts, { "group_by_input_shape" }, 2)
  if opts.group_by_input_shape ~= nil and type(opts.group_by_input_shape) ~= "boolean" then
    error(("key_averages: group_by_input_shape must be a boolean, got %s"):format(O.got(opts.group_by_input_shape)), 2)
  end
  local ev = self._events
  local child_ns, child_bytes, child_dev = {}, {}, {}
  local has_dev = false
  for _, e in ipairs(ev) do
    has_dev = has_dev or e.device_dur_ns ~= nil
    if e.parent then
      child_ns[e.parent] = (child_ns[e.parent] or 0) + e.dur_ns
      child_bytes[e.parent] = (child_bytes[e.parent] or 0) + (e.bytes or 0)
      child_dev[e.parent] = (child_dev[e.parent] or 0) + (e.device_dur_ns or 0)
    end
  end
  local rows, by = {}, {}
  for i, e in ipairs(ev) do
    local name = e.name:match("^ProfilerStep#") and "ProfilerStep*" or e.name
    local key = opts.group_by_input_shape and (name .. "\0" .. (e.shapes or "")) or name
    local r = by[key]
    if not r then
      r = { key = name, input_shapes = opts.group_by_input_shape and e.shapes or nil, count = 0,
            cpu_time_total_ns = 0, self_cpu_time_total_ns = 0, flops = 0, cpu_memory_usage = 0, self_cpu_memory_usage = 0,
            device_time_total_ns = 0, self_device_time_total_ns = 0 }
      by[key] = r
      rows[#rows + 1] = r
    end
    r.count = r.count + 1
    r.cpu_time_total_ns = r.cpu_time_total_ns + e.dur_ns
    r.self_cpu_time_total_ns = r.self_cpu_time_total_ns + e.dur_ns - (child_ns[i] or 0)
    r.flops = r.flops + (e.flops or 0)
    r.cpu_memory_usage = r.cpu_memory_usage + (e.bytes or 0)
    r.self_cpu_memory_usage = r.self_cpu_memory_usage + (e.bytes or 0) - (child_bytes[i] or 0)
    if e.device_dur_ns then
      r.device_time_total_ns = r.device_time_total_ns + e.device_dur_ns
      -- children's device spans can overlap the parent's edges by the mark granularity: never below 0
      r.self_device_time_total_ns = r.self_device_time_total_ns + math.max(0, e.device_dur_ns - (child_dev[i] or 0))
    end
  end
  for _, r in ipairs(rows) do
    r.cpu_time_total = r.cpu_time_total_ns / 1000
    r.self_cpu_time_total = r.self_cpu_time_total_ns / 1000
    r.cpu_time = r.cpu_time_total / r.count
    r.device_time_total = r.device_time_total_ns / 1000
    r.self_device_time_total = r.self_device_time_total_ns / 1000
    r.device_time = r.device_time_total / r.count
  end
  table.sort(rows, function(a, b)
    if a.cpu_time_total_ns ~= b.cpu_time_total_ns then return a.cpu_time_total_ns > b.cpu_time_total_ns end
    return a.key < b.key
  end)
  rows.with_flops, rows.profile_memory, rows.with_device = self.options.with_flops, self.options.profile_memory, has_dev
  rows.dropped, rows.max_events = self.dropped or 0, self.max_events
  return setmetatable(rows, Averages)
end

local function fmt_bytes(b)
  local a = math.abs(b)
  if a >= 2 ^ 30 then return ("%.2f GiB"):format(b / 2 ^ 30) end
  if a >= 2 ^ 20 then return ("%.2f MiB"):format(b / 2 ^ 20) end
  if a >= 2 ^ 10 then return ("%.2f KiB"):format(b / 2 ^ 10) end
  return ("%d B"):format(b)
end

local function fmt_rate(f, us)
  if f <= 0 or us <= 0 then return "" end
  local r = f / (us * 1e-6)
  if r >= 1e12 then return ("%.2f T"):format(r / 1e12) end
  if r >= 1e9 then return ("%.2f G"):format(r / 1e9) end
  if r >= 1e6 then return ("%.2f M"):format(r / 1e6) end
  return ("%.0f"):format(r)
end

-- torch's "Total <unit>FLOPs" column (torch/autograd/profiler_util.py, _build_table's auto_scale_flops): the unit
-- from the smallest positive count among all the rows (not only those shown): FLOPs, KFLOPs, ... PFLOPs by its
-- thousands; nil when no row has one (torch leaves the column out then)
local FLOP_UNITS = { "FLOPs", "KFLOPs", "MFLOPs", "GFLOPs", "TFLOPs", "PFLOPs" }
local function flops_unit(rows)
  local min
  for _, r in ipairs(rows) do
    if r.flops > 0 and (min == nil or r.flops < min) then min = r.flops end
  end
  if not min then return nil end
  local k = math.floor(math.max(0, math.min(math.log(min, 10) / 3, #FLOP_UNITS - 1)))
  return "Total " .. FLOP_UNITS[k + 1], 10.0 ^ (-3 * k)
end

-- table{sort_by="cpu_time_total", row_limit=100, max_name_column_width=55} → the text table.
function Averages:table(opts)
  opts = opts or {}
  if type(opts) ~= "table" then error(("table: expected an options table, got %s"):format(type(opts)), 2) end
  O.check("table", opts, { "sort_by", "row_limit", "max_name_column_width" }, 2)
  local sort_by = opts.sort_by or "cpu_time_total"
  sort_by = SORT_ALIASES[sort_by] or sort_by
  local valid = false
  for _, k in ipairs(SORT_KEYS) do valid = valid or k == sort_by end
  if not valid then
    error(("table: sort_by must be one of %s, got %s"):format(table.concat(SORT_KEYS, ", "), tostring(sort_by)), 2)
  end
  local limit = opts.row_limit or 100
  if math.type(limit) ~= "integer" then
    error(("table: row_limit must be an integer (0 or less: every row, as torch's -1), got %s"):format(O.got(limit)), 2)
  end
  if limit < 1 then limit = math.maxinteger end   -- torch's table takes rows[:row_limit] only when row_limit > 0
  local namew = opts.max_name_column_width or 55
  if math.type(namew) ~= "integer" or namew < 8 then
    error(("table: max_name_column_width must be an integer >= 8, got %s"):format(O.got(namew)), 2)
  end
  local rows = {}
  for i, r in ipairs(self) do rows[i] = r end
  table.sort(rows, function(a, b)
    if sort_by == "name" then return a.key < b.key end
    local x, y = a[sort_by], b[sort_by]
    if x ~= y then return x > y end
    return a.key < b.key
  end)
  local self_total = 0
  for _, r in ipairs(rows) do self_total = self_total + r.self_cpu_time_total_ns end
  local heads = { "Name", "# Calls", "Total (ms)", "Self (ms)", "Self %", "Avg (ms)" }
  local dev_total = 0
  if self.with_device then
    for _, r in ipairs(rows) do dev_total = dev_total + r.self_device_time_total_ns end
    heads[#heads + 1] = "Device Total (ms)"; heads[#heads + 1] = "Device Self (ms)"; heads[#heads + 1] = "Device Self %"
  end
  local flops_head, flops_scale = nil, 1
  if self.with_flops then flops_head, flops_scale = flops_unit(rows) end
  if flops_head then heads[#heads + 1] = flops_head end
  if self.with_flops then heads[#heads + 1] = "FLOP/s" end
  if self.profile_memory then heads[#heads + 1] = "CPU Mem"; heads[#heads + 1] = "Self CPU Mem" end
  local shapes = false
  for _, r in ipairs(rows) do shapes = shapes or r.input_shapes ~= nil end
  if shapes then heads[#heads + 1] = "Input Shapes" end
  local cells = { heads }
  for i = 1, math.min(limit, #rows) do
    local r = rows[i]
    local name = r.key
    if #name > namew then name = name:sub(1, namew - 3) .. "..." end
    local c = { name, tostring(r.count), ("%.3f"):format(r.cpu_time_total / 1000), ("%.3f"):format(r.self_cpu_time_total / 1000),
                ("%.2f%%"):format(self_total > 0 and 100 * r.self_cpu_time_total_ns / self_total or 0),
                ("%.3f"):format(r.cpu_time / 1000) }
    if self.with_device then
      c[#c + 1] = ("%.3f"):format(r.device_time_total / 1000)
      c[#c + 1] = ("%.3f"):format(r.self_device_time_total / 1000)
      c[#c + 1] = ("%.2f%%"):format(dev_total > 0 and 100 * r.self_device_time_total_ns / dev_total or 0)
    end
    -- torch's count ("--" for none, as torch's), then FLOP/s over device time where the work ran on the device
    if flops_head then c[#c + 1] = r.flops > 0 and ("%.3f"):format(r.flops * flops_scale) or "--" end
    if self.with_flops then c[#c + 1] = fmt_rate(r.flops, self.with_device and r.device_time_total > 0 and r.device_time_total or r.cpu_time_total) end
    if self.profile_memory then c[#c + 1] = fmt_bytes(r.cpu_memory_usage); c[#c + 1] = fmt_bytes(r.self_cpu_memory_usage) end
    if shapes then c[#c + 1] = r.input_shapes or "" end
    cells[#cells + 1] = c
  end
  local w = {}
  for _, c in ipairs(cells) do for j, s in ipairs(c) do w[j] = math.max(w[j] or 0, #s) end end
  local lines, rule = {}, {}
  for j = 1, #heads do rule[j] = ("-"):rep(w[j]) end
  local function line(c)
    local out = {}
    for j, s in ipairs(c) do
      out[j] = (j == 1 or j == #heads and shapes) and s .. (" "):rep(w[j] - #s) or (" "):rep(w[j] - #s) .. s
    end
    return (table.concat(out, "  "):gsub("%s+$", ""))
  end
  lines[1] = table.concat(rule, "  ")
  lines[2] = line(cells[1])
  lines[3] = lines[1]
  for i = 2, #cells do lines[#lines + 1] = line(cells[i]) end
  lines[#lines + 1] = lines[1]
  lines[#lines + 1] = ("Self CPU time total: %.3f ms"):format(self_total / 1e6)
  if self.with_device then lines[#lines + 1] = ("Self device time total: %.3f ms"):format(dev_total / 1e6) end
  if self.dropped > 0 then
    lines[#lines + 1] = ("Events dropped: %d (the recorder holds at most %d events per window)"):format(self.dropped,
      self.max_events)
  end
  return table.concat(lines, "\n")
end

Averages.__tostring = function(self) return self:table() end

-- ---- Chrome trace -----------------------------------------------------------------------------

local ESC = { ['"'] = '\\"', ["\\"] = "\\\\", ["\n"] = "\\n", ["\r"] = "\\r", ["\t"] = "\\t" }
local function jesc(s)
  return (s:gsub('[%c"\\]', function(c) return ESC[c] or ("\\u%04x"):format(c:byte()) end))
end
-- A JSON string of s. Names come from users (ranges, modules) and need not be UTF-8: each byte that is not part
-- of a valid sequence is written as \u00XX (its Latin-1 reading), so the file always parses.
local function jstr(s)
  s = tostring(s)
  if utf8.len(s) then return '"' .. jesc(s) .. '"' end
  local parts, i = { '"' }, 1
  while i <= #s do
    local ok, bad = utf8.len(s, i)
    if ok then parts[#parts + 1] = jesc(s:sub(i)); break end
    parts[#parts + 1] = jesc(s:sub(i, bad - 1))
    parts[#parts + 1] = ("\\u%04x"):format(s:byte(bad))
    i = bad + 1
  end
  parts[#parts + 1] = '"'
  return table.concat(parts)
end
-- Integer nanoseconds as exact decimal microseconds ("12.345").
local function us(ns) return ("%d.%03d"):format(ns // 1000, ns % 1000) end

local CAT = { op = "cpu_op", range = "user_annotation", module = "module" }

-- export_chrome_trace(path): Chrome trace JSON (complete "X" events; ts/dur in µs from start), written
-- to a temporary file and renamed over path. Opens in chrome://tracing and ui.perfetto.dev.
function Profiler:export_chrome_trace(path)
  if type(path) ~= "string" or path == "" then
    error(("export_chrome_trace: expected a file name, got %s"):format(type(path) == "string" and '""' or type(path)), 2)
  end
  -- (Lua's own "not enough memory", raised while the trace's text is built, named as the call's: stop 101's sweep)
  local okc, ok, err = pcall(self._write_trace, self, path)
  if not okc then
    if ok ~= "not enough memory" then error(ok, 0) end
    ok, err = nil, ("not enough memory to build the trace of %d events"):format(#self._events)
  end
  if not ok then error("export_chrome_trace: " .. err, 2) end
  return path
end

-- The trace of self._events to path → true, or nil and "cannot write PATH: why".
function Profiler:_write_trace(path)
  local pid = P.getpid and P.getpid() or 0
  local parts = { '{"traceEvents": [\n' }
  local function add(s) parts[#parts + 1] = s end
  add(('{"ph": "M", "name": "process_name", "pid": %d, "tid": 0, "args": {"name": %s}}'):format(pid,
    jstr(("fp8lab rank %d"):format(self.rank))))
  local tids, GPU_TID = {}, 0x7ffffff0
  for _, e in ipairs(self._events) do
    if e.device_ts_ns and not tids[GPU_TID] then
      tids[GPU_TID] = true
      add((',\n{"ph": "M", "name": "thread_name", "pid": %d, "tid": %d, "args": {"name": "cuda stream (device time)"}}'):format(
        pid, GPU_TID))
    end
    if not tids[e.tid] then
      tids[e.tid] = true
      add((',\n{"ph": "M", "name": "thread_name", "pid": %d, "tid": %d, "args": {"name": %s}}'):format(pid, e.tid,
        jstr(e.tid == pid and "main" or ("thread %d"):format(e.tid))))
    end
  end
  for _, e in ipairs(self._events) do
    local args = {}
    if e.shapes then args[#args + 1] = '"shapes": ' .. jstr(e.shapes) end
    if e.flops then args[#args + 1] = ('"flops": %.0f'):format(e.flops) end
    if e.bytes then args[#args + 1] = ('"bytes": %d'):format(e.bytes) end
    if e.module then args[#args + 1] = '"module": ' .. jstr(e.module) end
    if e.step then args[#args + 1] = ('"step": %d'):format(e.step) end
    add((',\n{"ph": "X", "cat": "%s", "name": %s, "pid": %d, "tid": %d, "ts": %s, "dur": %s, "args": {%s}}'):format(
      CAT[e.kind] or "cpu_op", jstr(e.name), pid, e.tid, us(e.ts_ns), us(e.dur_ns), table.concat(args, ", ")))
    if e.device_ts_ns and e.device_ts_ns >= 0 then   -- the same event as the device saw it
      add((',\n{"ph": "X", "cat": "device", "name": %s, "pid": %d, "tid": %d, "ts": %s, "dur": %s, "args": {%s}}'):format(
        jstr(e.name), pid, GPU_TID, us(e.device_ts_ns), us(e.device_dur_ns), table.concat(args, ", ")))
    end
  end
  add(('\n], "displayTimeUnit": "ms", "otherData": {"producer": "fp8lab", "rank": %d, "window": %d, '
    .. '"dropped_events": %d, "max_events": %d}}\n'):format(self.rank, self.windows, self.dropped or 0,
    self.max_events or P.max_events()))
  -- atomically: an unnamed temporary file, fsync, rename, fsync the directory (a killed writer leaves nothing)
  local ok, err = pcall(require("fp8._fileio").write_atomic, path, table.concat(parts))
  if not ok then return nil, ("cannot write %s: %s"):format(path, tostring(err)) end
  return true
end

function Profiler:__tostring()
  return ("fp8.profiler.profile(%s, step %d, %d window(s), %d events)"):format(self._state, self.step_num,
    self.windows, #self._events)
end

-- ---- ranges of your own -----------------------------------------------------------------------

-- push(name) → token (0 while nothing records); pop(token) closes it. record_function(name, fn, ...)
-- runs fn inside the range and returns its results (torch.profiler.record_function).
function M.push(name)
  if type(name) ~= "string" then error(("profiler.push: expected a name, got %s"):format(type(name)), 2) end
  return P.push(name)
end
function M.pop(tok)
  if math.type(tok) ~= "integer" then
    error(("profiler.pop: expected a token from profiler.push, got %s"):format(O.got(tok)), 2)
  end
  P.pop(tok)
end
function M.record_function(name, fn, ...)
  if type(name) ~= "string" then error(("record_function: expected a name, got %s"):format(type(name)), 2) end
  if type(fn) ~= "function" then error(("record_function: expected a function, got %s"):format(type(fn)), 2) end
  local tok = M.push(name)
  local res = table.pack(pcall(fn, ...))
  P.pop(tok)
  if not res[1] then error(res[2], 0) end
  return table.unpack(res, 2, res.n)
end

M.Profiler = Profiler

local okh, help = pcall(require, "fp8.help")
if okh and help.add then
  local function add(name, sig, doc) help.add { section = "Accelerator & recipes", name = name, sig = sig, doc = doc } end
  add("profiler.profile", "fp8.profiler.profile{schedule_option={wait=,warmup=,active=[,repeat=,skip_first=,\n"
    .. "  skip_first_wait=]}, record_shapes=, profile_memory=, with_flops=, with_modules=, activities=,\n"
    .. "  on_trace_ready=fn, output_trace_dir=} -> prof",
    "torch.profiler for fp8lab (the keys of fp8.ProfileKwargs, or a handler). prof:start(), prof:step() once per\n"
    .. "training step, prof:stop(); or prof:run(function(prof) ... end). Only active steps are kept, each in a\n"
    .. "\"ProfilerStep#N\" range; every op records wall time, nesting, and with the options its input shapes,\n"
    .. "FLOPs, net CPU bytes, module path, and with activities={\"cpu\",\"cuda\"} on a GPU its device time.\n"
    .. "At the end of each active window its trace goes to <output_trace_dir>/profile_<R>.json (the first window;\n"
    .. "Accelerate's name) or profile_<R>_window<N>.json (window N >= 2) and on_trace_ready(prof) runs; events()\n"
    .. "and key_averages() hold that window only, as in torch; prof:trace_path([N]) names window N's file.\n"
    .. "Your own ranges: fp8.profiler.record_function(name, fn, ...). prof's class is fp8.profiler.Profiler; its\n"
    .. "methods and fields: help(\"prof:start\"), help(\"prof:events\").")
  add("prof:key_averages", "prof:key_averages([{group_by_input_shape=true}]) -> rows; rows:table{sort_by=, row_limit=}",
    "One row per op name, sorted by total time: calls, total and self time (self = total minus children),\n"
    .. "average, FLOPs (with_flops: torch's counts, a \"Total MFLOPs\" column named by magnitude as torch's, and\n"
    .. "FLOP/s), CPU memory (profile_memory), device total/self time (activities \"cuda\").\n"
    .. "tostring() prints the table; sort_by is cpu_time_total, self_cpu_time_total, cpu_time,\n"
    .. "device_time_total, self_device_time_total, device_time, count, flops, cpu_memory_usage,\n"
    .. "self_cpu_memory_usage or name.")
  add("prof:start", "prof:start() -> prof / prof:step() / prof:stop() -> prof / prof:run(fn, ...) -> prof",
    "start() begins recording (refused while another profiler runs: fp8.profiler.current; or twice; after stop() it\n"
    .. "goes on from the step it stopped at, as torch's: the schedule, step numbers and windows). step(), once per\n"
    .. "training step, moves the schedule on: wait, warmup and active steps; each active window that ends writes its\n"
    .. "trace and calls on_trace_ready (under acc:profile every prepared optimizer's step is one: calling prof:step()\n"
    .. "as well is refused). stop() ends recording: an active window in progress ends there (its trace and\n"
    .. "on_trace_ready), a warmup's events are dropped. run(fn, ...) calls\n"
    .. "fn(prof, ...) between start() and stop() (stopped on an error too). A <close> variable stops it at its end.")
  add("prof:events", "prof:events() -> list / prof:trace_path([n]) -> path / fields prof.step_num, windows, rank, "
    .. "options, device, dropped",
    "events(): the last finished window's events, each {name, kind (\"op\"|\"range\"|\"module\"), ts, dur (µs from\n"
    .. "start), ts_ns, dur_ns, tid, parent (its position), depth, step, module, shapes, flops, bytes} and, with device\n"
    .. "time, device_ts, device_dur (µs), device_ts_ns, device_dur_ns. trace_path([n]): the file window n's trace\n"
    .. "goes to (default the last window finished, else the first): <output_trace_dir>/profile_<rank>.json for\n"
    .. "window 1, profile_<rank>_window<n>.json after; nil without output_trace_dir. Fields (read them): step_num\n"
    .. "(step() calls since the first start(): a start() after stop() goes on counting, as torch's), windows (active\n"
    .. "windows finished, counted on as well), rank (profile's {rank=} or the launcher's),\n"
    .. "options (the ProfileKwargs' values), device (whether device time is recorded: activities \"cuda\" with a\n"
    .. "GPU in use), dropped and max_events (events past the recorder's cap in the last window).")
  add("prof:export_chrome_trace", "prof:export_chrome_trace(path)",
    "Writes the recorded events as Chrome trace JSON (complete events, µs) atomically; open it in\n"
    .. "chrome://tracing or https://ui.perfetto.dev. Args per event: shapes, flops, bytes, module, step.")
  for _, n in ipairs { "prof:step", "prof:stop", "prof:run" } do help.ALIASES[n] = "prof:start" end
  for _, n in ipairs { "prof:trace_path", "prof:step_num", "prof:windows", "prof:rank", "prof:options", "prof:device",
                       "prof:dropped", "prof:max_events" } do help.ALIASES[n] = "prof:events" end
  help.ALIASES["KeyAverages:table"] = "prof:key_averages"
  -- a profiler's methods and key_averages()'s rows: help(prof.start), help(prof:key_averages().table), help(prof)
  if help.class then
    help.class { class = Profiler, prefix = "prof", entry = "profiler.profile", names = { "profiler.Profiler" } }
    help.class { class = Averages, prefix = "KeyAverages", entry = "prof:key_averages",
                 names = { "profiler.KeyAverages" } }
  end
end

-- every public method refuses arguments past its parameters (fp8.opts.strict_arity)
O.strict_arity(Profiler, "profile")
O.strict_arity(Averages, "KeyAverages")
-- each public function refuses arguments past its parameters (fp8.opts.strict_functions)
require("fp8.opts").strict_functions(M, "profiler")
return M
