-- fp8.plot — PNG plots through gnuplot (Debian's gnuplot-nox) for the training scripts: line plots of
-- CSV columns (loss curves, train/val), and the scale/amax history of an FP8 layer from the CSV that
-- acc:log_fp8_stats writes. Without gnuplot nothing is drawn: one notice per process says so, and the
-- CSV stays. FP8LAB_GNUPLOT names another gnuplot command. gnuplot writes a temporary file beside the PNG, which is
-- then fsynced and renamed over it (and the directory fsynced): a PNG is there only when complete.
local O = require "fp8.opts"
-- a value in a refusal: a string as it is, anything else as fp8.opts.got shows it (tostring of a table whose
-- __tostring answers no string raised Lua's own "'__tostring' must return a string", the sweep of stop 104)
local function named(v) return type(v) == "string" and v or O.got(v) end
local M = {}

local function q(s) return "'" .. tostring(s):gsub("'", "'\\''") .. "'" end
-- gnuplot strings in single quotes: a quote is doubled
local function gq(s) return "'" .. tostring(s):gsub("'", "''") .. "'" end

function M.command() return os.getenv("FP8LAB_GNUPLOT") or "gnuplot" end

local checked, present
-- available() -> whether gnuplot runs (checked once).
function M.available()
  if not checked then
    checked = true
    local ok = os.execute(q(M.command()) .. " --version >/dev/null 2>&1")
    present = ok == true
  end
  return present
end

local told = false
-- The one notice per process when gnuplot is missing.
local function missing(csv)
  if not told then
    told = true
    io.stderr:write(("fp8lab: notice: gnuplot not found (%s; apt-get install gnuplot-nox): no PNG plots, "
      .. "the CSV data stays in %s\n"):format(M.command(), tostring(csv)))
  end
  return nil, "gnuplot not available"
end

-- Writes text to path whole; true, or nil and the reason (a full disk or a file-size limit shows in the write or the
-- close: a data file cut short would have been plotted as if whole).
local function write_whole(path, text)
  local f, err = io.open(path, "w")
  if not f then return nil, ("cannot write %s: %s"):format(path, err) end
  local ok, werr = f:write(text)
  local cok, cerr = f:close()
  if not (ok and cok) then
    os.remove(path)
    return nil, ("cannot write %s: %s"):format(path, tostring(werr or cerr))
  end
  return true
end

-- Says that png was not plotted and why (a caller that prints "plot: <png>" on success would otherwise say
-- nothing, and a PNG of an earlier run at that path would pass for this one's); returns nil and the reason.
local function not_plotted(png, why)
  local old = io.open(png, "rb")
  if old then old:close() end
  io.stderr:write(("fp8lab: notice: %s not plotted: %s%s\n"):format(png, why,
    old and "; the PNG there is an earlier run's" or ""))
  return nil, why
end

-- Runs a gnuplot script that writes `png`; returns png, or nil and the reason.
local function run(script, png)
  local tmp = png .. ".tmp"
  script = ("set terminal pngcairo size 1000,560 font ',10' noenhanced\nset output %s\nset format y '%%g'\n"):format(gq(tmp)) .. script
  -- the script goes through a file, not a pipe: a gnuplot that exits before reading it would otherwise end this
  -- process with SIGPIPE (silently) when the script is written
  local sfile = png .. ".gp"
  local sok, serr = write_whole(sfile, script)
  if not sok then return not_plotted(png, "the gnuplot script: " .. serr) end
  local ok = os.execute(q(M.command()) .. " " .. q(sfile) .. " 2>&1")
  os.remove(sfile)
  local f = io.open(tmp, "rb")
  local head = f and f:read(8)
  if f then f:close() end
  local why
  if not ok or head ~= "\137PNG\r\n\26\n" then
    why = ("%s did not write a PNG%s"):format(M.command(), ok and "" or " (it failed; its messages are above)")
  else
    -- gnuplot's finished file: fsync, rename over png, fsync the directory; a crash leaves the old PNG or the new
    -- one, never half of one
    local wok, werr = pcall(require("fp8._fileio").fsync_rename, tmp, png)
    if wok then return png end
    why = tostring(werr)
  end
  os.remove(tmp)
  return not_plotted(png, why)
end

-- A string that goes into the gnuplot script: text without control characters (a newline would end the command
-- and gnuplot would run the next line as one of its own: `!cmd` or `system()` run a shell command).
local function check_text(name, key, v, level)
  if v == nil then return end
  if type(v) ~= "string" then error(("%s: %s must be a string, got %s"):format(name, key, O.got(v)), level + 1) end
  if v:find("%c") then
    error(("%s: %s must not hold control characters (a newline would end the gnuplot command), got %q"):format(name,
      key, v), level + 1)
  end
end

local function check_opts(name, o, required, valid)
  if type(o) ~= "table" then error(("%s: expected an options table, got %s"):format(name, type(o)), 3) end
  O.check(name, o, valid, 3)
  for _, k in ipairs(required) do
    if type(o[k]) ~= "string" or o[k] == "" then
      error(("%s: %s must be a file name, got %s"):format(name, k, named(o[k])), 3)
    end
  end
  for _, k in ipairs(valid) do
    if k ~= "series" and k ~= "y2range" and k ~= "logy" then check_text(name, k, o[k], 3) end
  end
  local C = require "fp8._checkpoint"   -- the CSV is read: a named pipe would block, a device never end
  if C.exists(o.csv) and not C.is_file(o.csv) then error(("%s: %s is not a regular file"):format(name, o.csv), 3) end
end

-- The range of CSV column `col` (1-based, header skipped) and whether every value in it is an integer.
local function integer_range(csv, col)
  local f = io.open(csv, "r")
  if not f then return 0, 0, false end
  local lo, hi, integral, first = math.huge, -math.huge, true, true
  for line in f:lines() do
    if first then first = false
    else
      local i, v = 0, nil
      for cell in (line .. ","):gmatch("([^,]*),") do
        i = i + 1
        if i == col then v = tonumber(cell); break end
      end
      if v then
        if v < lo then lo = v end
        if v > hi then hi = v end
        if v ~= math.floor(v) then integral = false end
      end
    end
  end
  f:close()
  return lo, hi, integral and hi >= lo
end

-- lines{csv=, png=, title=, xlabel=, ylabel=, y2label=, y2range={lo, hi}, logy=false, series={{x=1, y=3, title=, style="lines"|"points", axis="x1y2"}}}
-- -> png | nil, reason. Columns are 1-based CSV columns; empty cells are skipped.
function M.lines(o)
  check_opts("plot.lines", o, { "csv", "png" },
    { "csv", "png", "title", "xlabel", "ylabel", "y2label", "y2range", "logy", "series" })
  if type(o.series) ~= "table" or #o.series == 0 then
    error("plot.lines: series must be a non-empty list of {x=, y=, title=}", 2)
  end
  local y2 = false
  for i, sr in ipairs(o.series) do
    local who = ("plot.lines: series[%d]"):format(i)
    if type(sr) ~= "table" then error(("%s must be a table {x=, y=, title=}, got %s"):format(who, type(sr)), 2) end
    O.check(who, sr, { "x", "y", "title", "style", "axis" }, 2)
    for _, k in ipairs { "x", "y" } do
      local v = sr[k]
      if (v ~= nil or k == "y") and (math.type(v) ~= "integer" or v < 1) then
        error(("%s: %s must be a CSV column (an integer >= 1)%s, got %s"):format(who, k, k == "x" and ", 1 by default"
          or "", O.got(v)), 2)
      end
    end
    for k, choices in pairs { style = { lines = true, points = true }, axis = { x1y1 = true, x1y2 = true } } do
      if sr[k] ~= nil and not choices[sr[k]] then
        error(("%s: %s must be %s, got %s"):format(who, k, k == "style" and '"lines" or "points"' or
          '"x1y1" or "x1y2"', O.got(sr[k])), 2)
      end
    end
    check_text(who, "title", sr.title, 2)
    y2 = y2 or sr.axis == "x1y2"
  end
  if o.logy ~= nil and type(o.logy) ~= "boolean" then
    error(("plot.lines: logy must be a boolean, got %s"):format(O.got(o.logy)), 2)
  end
  local r = o.y2range
  if r ~= nil and not (type(r) == "table" and type(r[1]) == "number" and type(r[2]) == "number" and r[1] < r[2]
      and r[1] > -math.huge and r[2] < math.huge) then
    error(("plot.lines: y2range must be {lo, hi}, two finite numbers with lo < hi, got %s"):format(O.got(r)), 2)
  end
  if not y2 and (o.y2range ~= nil or o.y2label ~= nil) then   -- (they were dropped: no series on the right axis)
    error(("plot.lines: %s takes effect only with a series on the right axis (axis=\"x1y2\")"):format(
      o.y2range ~= nil and "y2range" or "y2label"), 2)
  end
  if not M.available() then return missing(o.csv) end
  local s = { "set datafile separator ','", "set datafile missing ''", "set grid", "set key outside right top",
              ("set title %s"):format(gq(o.title or "")), ("set xlabel %s"):format(gq(o.xlabel or "")),
              ("set ylabel %s"):format(gq(o.ylabel or "")) }
  if o.logy then s[#s + 1] = "set logscale y" end
  -- a short run over integer steps: one tic per step (gnuplot's own choice puts tics at 1.5, 2.5, ...)
  local lo, hi, integral = integer_range(o.csv, o.series[1].x or 1)
  if integral and hi > lo and hi - lo <= 12 then s[#s + 1] = "set xtics 1" end
  local plots = {}
  for i, sr in ipairs(o.series) do
    -- gnuplot cycles 8 colours: from the 9th series on, dashes tell the lines apart
    local style = sr.style == "points" and "linespoints pt 7 ps 1.2" or ("lines lw 2 dt %d"):format((i - 1) // 8 + 1)
    plots[#plots + 1] = ("%s using %d:%d every ::1 with %s axes %s title %s"):format(gq(o.csv), sr.x or 1, sr.y, style,
      sr.axis or "x1y1", gq(sr.title or ("column " .. sr.y)))
  end
  if y2 then
    s[#s + 1] = "set y2tics"; s[#s + 1] = "set ytics nomirror"; s[#s + 1] = "set format y2 '%g'"
    if o.y2range then s[#s + 1] = ("set y2range [%g:%g]"):format(o.y2range[1], o.y2range[2]) end
    s[#s + 1] = ("set y2label %s"):format(gq(o.y2label or ""))
  end
  s[#s + 1] = "plot " .. table.concat(plots, ", \\\n  ")
  return run(table.concat(s, "\n") .. "\n", o.png)
end

-- The fields of one CSV line as RFC 4180 writes them (acc:log_fp8_stats quotes a layer name that holds a comma or
-- a quote, doubling its quotes): a quoted field runs to the quote that is not doubled, whatever it holds.
local function csv_fields(line)
  -- (stop 103's sweep) a table whose every key answers a function passed for line looped for ever: its sub and find
  -- answer 1, so i never moved
  if type(line) ~= "string" then
    error(("plot._csv_fields: expected a line of text, got %s"):format(require("fp8.opts").got(line)), 2)
  end
  local cells, i, n = {}, 1, #line
  while i <= n + 1 do
    if line:sub(i, i) == '"' then
      local parts, j = {}, i + 1
      while true do
        local k = line:find('"', j, true)
        if not k then parts[#parts + 1] = line:sub(j); i = n + 2; break end   -- unclosed: the rest of the line
        parts[#parts + 1] = line:sub(j, k - 1)
        if line:sub(k + 1, k + 1) == '"' then parts[#parts + 1] = '"'; j = k + 2
        else i = k + 1; break end
      end
      cells[#cells + 1] = table.concat(parts)
      if line:sub(i, i) == "," then i = i + 1 elseif i <= n then i = n + 2 end   -- junk after the quote: row dropped
      if i == n + 1 and line:sub(n, n) == "," then cells[#cells + 1] = ""; break end
    else
      local k = line:find(",", i, true)
      cells[#cells + 1] = line:sub(i, (k or n + 1) - 1)
      if not k then break end
      i = k + 1
      if i == n + 1 then cells[#cells + 1] = ""; break end
    end
  end
  return cells
end
M._csv_fields = csv_fields   -- (for the tests)

-- fp8_history{csv= (from acc:log_fp8_stats), png=, layer=nil (the first in the file)} -> png | nil, reason.
-- Two panels over the optimizer steps: the scale of each tensor role (input, weight, grad: the output gradient), and
-- its amax (of the last cast and over the history window), log scale.
function M.fp8_history(o)
  check_opts("plot.fp8_history", o, { "csv", "png" }, { "csv", "png", "layer" })
  local f, err = io.open(o.csv, "r")
  if not f then error("plot.fp8_history: cannot read " .. tostring(err), 2) end
  local header = f:read("l")
  if not header or not header:match("^step,layer,role,format,scale,amax") then
    f:close()
    error(("plot.fp8_history: %s is not an acc:log_fp8_stats CSV"):format(o.csv), 2)
  end
  local layer = o.layer
  local rows, steps, seen = {}, {}, {}
  for line in f:lines() do
    local cells = csv_fields(line)
    local step, lname, role, scale, amax, hist = cells[1], cells[2], cells[3], cells[5], cells[6], cells[7]
    step = step and step:match("^%d+$")
    if step and hist then
      layer = layer or lname
      if lname == layer then
        step = tonumber(step)
        if not seen[step] then seen[step] = true; steps[#steps + 1] = step; rows[step] = {} end
        rows[step][role] = { scale, amax, hist }
      end
    end
  end
  f:close()
  if #steps == 0 then error(("plot.fp8_history: no rows for layer %s in %s"):format(named(layer), o.csv), 2) end
  if not M.available() then return missing(o.csv) end
  local dat = o.png .. ".dat"
  local lines = {}
  local roles = { "input", "weight", "grad" }
  local scaled = false   -- a role with one scale per cast (ao rowwise logs none: its scales are per row)
  for _, st in ipairs(steps) do
    local cols = { tostring(st) }
    for _, r in ipairs(roles) do
      local v = rows[st][r] or { "", "", "" }
      scaled = scaled or v[1] ~= ""
      for k = 1, 3 do cols[#cols + 1] = v[k] ~= "" and v[k] or "NaN" end   -- an empty cell: no point, not a shift
    end
    lines[#lines + 1] = table.concat(cols, " ") .. "\n"
  end
  local dok, derr = write_whole(dat, table.concat(lines))
  if not dok then return not_plotted(o.png, "its data: " .. derr) end
  local title = scaled and ("FP8 layer '%s': scale and amax per tensor role over training"):format(layer)
    or ("FP8 layer '%s': amax per tensor role over training (scales per row, not logged)"):format(layer)
  local s = { ("set multiplot layout %d,1 title "):format(scaled and 2 or 1) .. gq(title),
              "set grid", "set logscale y", "set key outside right top", "set xlabel 'optimizer step'",
              -- the same plot area in both panels, whatever the width of each panel's key
              "set lmargin at screen 0.09", "set rmargin at screen 0.72", "set ylabel 'scale'" }
  if #steps > 1 and steps[#steps] - steps[1] <= 12 then s[#s + 1] = "set xtics 1" end
  local p1, p2 = {}, {}
  local colour = { "#1f77b4", "#2ca02c", "#d62728" }   -- one colour per role in both panels
  for i, r in ipairs(roles) do
    local c = 2 + (i - 1) * 3
    p1[#p1 + 1] = ("%s using 1:%d with lines lw 2 lc rgb '%s' title %s"):format(gq(dat), c, colour[i], gq(r))
    p2[#p2 + 1] = ("%s using 1:%d with lines lw 2 lc rgb '%s' title %s"):format(gq(dat), c + 1, colour[i],
      gq(r .. " (last cast)"))
    p2[#p2 + 1] = ("%s using 1:%d with lines lw 1 dt 2 lc rgb '%s' title %s"):format(gq(dat), c + 2, colour[i],
      gq(r .. " (history max)"))
  end
  if scaled then s[#s + 1] = "plot " .. table.concat(p1, ", ") end
  s[#s + 1] = "set ylabel 'amax'"
  s[#s + 1] = "plot " .. table.concat(p2, ", ")
  s[#s + 1] = "unset multiplot"
  local res, why = run(table.concat(s, "\n") .. "\n", o.png)
  os.remove(dat)
  return res, why
end

local okh, help = pcall(require, "fp8.help")
if okh and help.add then
  help.add { section = "Training", name = "plot.lines",
    sig = "fp8.plot.lines{csv=, png=, series={{y= [, x=1, title=, style=, axis=]}, ...} [, title=, xlabel=,\n"
       .. "  ylabel=, y2label=, y2range={lo, hi}, logy=false]} -> png | nil, reason",
    doc = "PNG line plot of CSV columns through gnuplot (gnuplot-nox). csv, png and series (a non-empty list; each\n"
       .. "series' y a 1-based CSV column) are required. Without gnuplot: one notice, no PNG, nil and the reason,\n"
       .. "the CSV stays. fp8.plot.fp8_history{csv=, png=, layer=} plots the scale/amax history of an FP8\n"
       .. "layer from acc:log_fp8_stats' CSV. fp8.plot.command() is the gnuplot run ($FP8LAB_GNUPLOT, else\n"
       .. "\"gnuplot\"); fp8.plot.available() whether it runs (checked once per process)." }
  for _, n in ipairs { "plot.fp8_history", "plot.command", "plot.available" } do help.ALIASES[n] = "plot.lines" end
end

-- each public function refuses arguments past its parameters (fp8.opts.strict_functions)
require("fp8.opts").strict_functions(M, "plot")
return M
