-- fp8.progress — a progress bar for long loops: count/total, rate, ETA and live values (loss) set with
-- bar:set_postfix{...}. Redraws one line on a terminal; prints plain lines every N steps otherwise.
local O = require "fp8.opts"
local C = require "fp8._data"

local M = {}
local Bar = {}
Bar.__index = Bar
Bar.__name = "ProgressBar"
M.Bar = Bar

local VALID = { "desc", "total", "every", "tty", "out", "width", "min_interval" }

local function fmt_time(s)
  if s ~= s or s == math.huge or s < 0 then return "?" end
  s = math.floor(s + 0.5)
  local h, m = s // 3600, (s // 60) % 60
  if h > 0 then return ("%d:%02d:%02d"):format(h, m, s % 60) end
  return ("%d:%02d"):format(m, s % 60)
end

local function fmt_value(v)
  if math.type(v) == "integer" then return tostring(v) end
  if type(v) == "number" then
    if v ~= 0 and (math.abs(v) < 1e-3 or math.abs(v) >= 1e5) then return ("%.3e"):format(v) end
    return ("%.4f"):format(v)
  end
  return tostring(v)
end

-- progress(iterable, opts): iterable is a number n (yields 1..n), a loader with :iter() and #
-- (yields what the loader yields), a list (yields i, v) or an iterator function (give total=).
local function new(iterable, opts)
  opts = opts or {}
  if type(opts) ~= "table" then error(("progress: expected an options table {desc=...}, got %s"):format(type(opts)), 2) end
  O.check("progress", opts, VALID, 2)
  local self = setmetatable({ n = 0, postfix = {}, postfix_order = {} }, Bar)
  local t = type(iterable)
  if t == "number" then
    if iterable ~= math.floor(iterable) or iterable < 0 then
      error(("progress: a count must be a non-negative integer, got %s"):format(O.got(iterable)), 2)
    end
    local n, i = math.tointeger(iterable), 0
    self.total = n
    self._make = function() i = 0; return function() i = i + 1; if i <= n then return i end end end
  elseif (t == "table" or t == "userdata") and type(iterable.iter) == "function" then
    self.total = #iterable
    self._make = function() return iterable:iter() end
  elseif t == "table" then
    self.total = #iterable
    self._make = function()
      local i = 0
      return function() i = i + 1; if iterable[i] ~= nil then return i, iterable[i] end end
    end
  elseif t == "function" then
    self._make = function() return iterable end
  else
    error(("progress: expected a number, a loader, a list or an iterator function, got %s"):format(t), 2)
  end
  if opts.total ~= nil then
    if type(opts.total) ~= "number" or opts.total < 0 then
      error(("progress: total must be a non-negative number, got %s"):format(O.got(opts.total)), 2)
    end
    self.total = math.tointeger(opts.total) or opts.total
  end
  if opts.desc ~= nil and type(opts.desc) ~= "string" then
    error(("progress: desc must be a string, got %s"):format(type(opts.desc)), 2)
  end
  self.desc = opts.desc
  self.out = opts.out or io.stdout
  local env = os.getenv("FP8LAB_PROGRESS")   -- "plain": lines even on a terminal; unset or "": the terminal decides
  if env ~= nil and env ~= "" and env ~= "plain" then   -- checked on every rank, with tty= given or not
    error(("progress: FP8LAB_PROGRESS: expected \"plain\" (or unset), got '%s'"):format(env), 2)
  end
  -- several processes: only each machine's main one draws (Accelerate's tqdm(main_process_only=True), its local main
  -- process; docs/distributed.md); the others count silently
  local okd, D = pcall(require, "fp8._dist")
  local silent = okd and D.info().local_rank ~= 0
  if silent then self.out = { write = function() end, flush = function() end } end
  if silent then
    self.tty = false
  elseif opts.tty ~= nil then
    if type(opts.tty) ~= "boolean" then error(("progress: tty must be a boolean, got %s"):format(type(opts.tty)), 2) end
    self.tty = opts.tty
  else
    self.tty = self.out == io.stdout and C.isatty(1) and env ~= "plain"
  end
  if opts.every ~= nil then
    if math.type(opts.every) ~= "integer" or opts.every < 1 then
      error(("progress: every must be an integer >= 1, got %s"):format(O.got(opts.every)), 2)
    end
    self.every = opts.every
  else
    -- plain mode: about ten lines per loop
    self.every = self.total and math.max(1, (self.total + 9) // 10) or 100
  end
  self.width = opts.width or 24
  self.min_interval = opts.min_interval or 0.1
  return self
end

setmetatable(M, { __call = function(_, iterable, opts) return new(iterable, opts) end })
M.new = function(iterable, opts) return new(iterable, opts) end

-- A method called with another value as its self (fp8.progress.Bar.update(t), t not a bar): named, where Lua's own
-- "attempt to call a number value (method '_draw')" at this file's line was the message (sweep 113). Level 3.
local function check_bar(self, fname)
  if getmetatable(self) ~= Bar then
    error(("Bar:%s: expected a progress bar (bar:%s(...)), got %s"):format(fname, fname, O.got(self)), 3)
  end
end

-- bar:set_postfix{loss=0.31, acc=0.9} (keys shown in the order first seen; sorted within one call).
function Bar:set_postfix(t, v)
  check_bar(self, "set_postfix")
  if type(t) == "string" then t = { [t] = v } end
  if type(t) ~= "table" then error(("set_postfix: expected a table {name=value}, got %s"):format(type(t)), 2) end
  local keys = {}
  for k in next, t do keys[#keys + 1] = tostring(k) end
  table.sort(keys)
  for _, k in ipairs(keys) do
    if self.postfix[k] == nil then self.postfix_order[#self.postfix_order + 1] = k end
    self.postfix[k] = t[k]
  end
  return self
end

-- A count as text: an integer as one, a fractional count (update(0.5)) with its fraction, inf, NaN and a float past
-- 1e15 as %g (total = math.huge, or 1e300: '%d' raised "bad argument #2 to 'format' (number has no integer
-- representation)" from line() until stop 101)
local function count(n)
  local i = math.tointeger(n)
  if i then return ("%d"):format(i) end
  if n ~= n or math.abs(n) >= 1e15 then return ("%g"):format(n) end
  return ("%.2f"):format(n)
end

function Bar:line()
  check_bar(self, "line")
  local now = C.clock()
  local elapsed = now - (self.t0 or now)
  local rate = elapsed > 0 and self.n / elapsed or 0
  local parts = {}
  if self.desc then parts[#parts + 1] = self.desc .. ":" end
  if self.total and self.total > 0 then
    local frac = math.max(0, math.min(1, self.n / self.total))
    if self.tty then
      local fill = math.floor(frac * self.width + 0.5)
      parts[#parts + 1] = ("%3.0f%%|%s%s|"):format(frac * 100, ("#"):rep(fill), (" "):rep(self.width - fill))
      parts[#parts + 1] = ("%s/%s"):format(count(self.n), count(self.total))
    else
      -- tqdm's {percentage:3.0f}: rounded to the nearest (2/3 is 67%, not 66%), as printf rounds
      parts[#parts + 1] = ("%s/%s (%.0f%%)"):format(count(self.n), count(self.total), frac * 100)
    end
  else
    parts[#parts + 1] = count(self.n)
  end
  local eta = (self.total and rate > 0) and (self.total - self.n) / rate or nil
  local timing = ("[%s<%s, %s it/s]"):format(fmt_time(elapsed), eta and fmt_time(eta) or "?",
    rate >= 100 and ("%.0f"):format(rate) or ("%.2f"):format(rate))
  parts[#parts + 1] = timing
  local order = type(self.postfix_order) == "table" and self.postfix_order or {}
  for i = 1, rawlen(order) do   -- raw: a replaced postfix_order whose __index lies must not loop for ever
    local k = rawget(order, i)
    parts[#parts + 1] = tostring(k) .. "=" .. fmt_value(type(self.postfix) == "table" and self.postfix[k] or nil)
  end
  return table.concat(parts, " ")
end

function Bar:_draw(final)
  if self.tty then
    local now = C.clock()
    if not final and self._last_draw and now - self._last_draw < self.min_interval then return end
    self._last_draw = now
    self.out:write("\r", self:line(), "\27[K", final and "\n" or "")
    self.out:flush()
  elseif final or self.n % self.every == 0 then
    if final and self._last_printed == self.n then return end
    self._last_printed = self.n
    self.out:write(self:line(), "\n")
    self.out:flush()
  end
end

-- bar:update([k=1]) advances the count by k (for manual loops).
function Bar:update(k)
  check_bar(self, "update")
  if k ~= nil and (type(k) ~= "number" or k ~= k or math.abs(k) == math.huge) then
    error(("update: k must be a finite number, got %s"):format(O.got(k)), 2)
  end
  -- in floats: integer addition would wrap (math.mininteger + 0 passed an integer check once)
  if math.abs((self.n + 0.0) + ((k or 1) + 0.0)) > 2 ^ 53 then   -- the count is printed as an integer
    error(("update: the count would leave -2^53..2^53 (at %s, k = %s)"):format(tostring(self.n), tostring(k)), 2)
  end
  if not self.t0 then self.t0 = C.clock() end
  self.n = self.n + (k or 1)
  self:_draw(false)
end

function Bar:close()
  check_bar(self, "close")
  if self.closed then return end
  self.closed = true
  if not self.t0 then self.t0 = C.clock() end
  self:_draw(true)
end

-- Elapsed wall seconds since the first step.
function Bar:elapsed()
  check_bar(self, "elapsed")
  return self.t0 and C.clock() - self.t0 or 0
end

-- bar:iter() -> iterator that counts each step (the count is taken when the NEXT item is asked
-- for, so the rate includes the loop body's work) and closes the bar at the end.
function Bar:iter()
  check_bar(self, "iter")
  local it = self._make()
  self.t0 = C.clock()
  self.n, self.closed = 0, false
  local started = false
  return function()
    if started then
      self.n = self.n + 1
      self:_draw(false)
    end
    started = true
    local a, b, c = it()
    if a == nil then self:close() end
    return a, b, c
  end
end

-- `for x, y in bar do`: a nil control value (first call) starts the loop.
function Bar:__call(_, control)
  if control == nil or not self._it then self._it = self:iter() end
  local a, b, c = self._it()
  if a == nil then self._it = nil end
  return a, b, c
end

function Bar:__tostring() return self:line() end

local ok, help = pcall(require, "fp8.help")
if ok and help.add then
  help.add { section = "Training", name = "progress", sig = "fp8.progress(n | loader | list | iterator\n"
    .. "  [, {desc=, total=, every=, tty=, out=, width=24, min_interval=0.1}]) -> bar  (also fp8.progress.new(...))",
    doc = "local bar = fp8.progress(loader, {desc=\"epoch 1\"})\n"
       .. "for x, y in bar do ...; bar:set_postfix{loss=l} end\n"
       .. "Shows count/total (percent rounded to the nearest, as tqdm), elapsed<ETA, it/s and the postfix values;\n"
       .. "one redrawn line on a terminal, plain lines every `every` steps otherwise (FP8LAB_PROGRESS=plain forces\n"
       .. "plain lines). fp8.progress.new is the same function as calling fp8.progress; the bar's methods:\n"
       .. "help(\"progress.Bar\")." }
  help.add { section = "Training", name = "progress.Bar",
    sig = "bar:update([k=1]) / bar:set_postfix{name=value} | (name, value) / bar:close() / bar:iter() / "
       .. "bar:elapsed() / bar:line() / fields bar.n, bar.total",
    doc = "The bar fp8.progress returns (class fp8.progress.Bar). update([k=1]) adds k to the count and redraws (a\n"
       .. "manual loop); set_postfix shows values after the timing (numbers as %.4f, or %.3e below 1e-3 and from 1e5;\n"
       .. "first-seen order); close() prints the last line (once); iter() an explicit iterator that counts each item\n"
       .. "when the next is asked for and closes the bar at the end (`for x in bar do` calls it); elapsed() the wall\n"
       .. "seconds since the first step; line() (and tostring(bar)) the text of the line; n the count, total the\n"
       .. "total (nil for an iterator without total=)." }
  if help.class then help.class { class = Bar, prefix = "progress.Bar", entry = "progress.Bar", names = { "ProgressBar" } } end
end

-- every public method refuses arguments past its parameters (fp8.opts.strict_arity)
O.strict_arity(Bar, "ProgressBar")
-- each public function refuses arguments past its parameters (fp8.opts.strict_functions)
require("fp8.opts").strict_functions(M, "progress")
return M
