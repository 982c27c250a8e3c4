-- repl.lua — the Lua half of the fp8lab REPL: the value printer and tab completion.
-- lua/main.c reads lines and calls print_results/complete; both are pure so busted tests them.
local M = {}

-- Limits of the printer: nesting depth, entries shown per table, width before going multi-line.
M.max_depth = 4
M.max_items = 40
M.width = 78

-- %q's form, with a newline as \n and a tab as \t: %q writes a tab as \9, and the 9 after an escaped backslash
-- ("C:\\9x", a backslash and a 9) is not one (an odd run of backslashes before the 9 ends with the tab's)
local function quote(s)
  local q = string.format("%q", s)
  return (q:gsub("\\\n", "\\n"):gsub("(\\+)9", function(run)
    if #run % 2 == 1 then return run:sub(1, -2) .. "\\t" end
  end))
end

local function is_ident(k)
  return type(k) == "string" and k:match("^[%a_][%w_]*$") ~= nil
end

local function has_tostring(v)
  local mt = getmetatable(v)
  return type(mt) == "table" and rawget(mt, "__tostring") ~= nil
end

-- Key order: array part first (done by the caller), then numbers, strings, other types; keys of one other type by
-- their text, made once per key (text[k]) under pcall: a key whose __tostring fails or gives no string sorts as "",
-- where it made the printer itself fail.
local type_rank = { number = 1, string = 2, boolean = 3 }
local function key_text(k, text)
  local s = text[k]
  if s == nil then
    local ok, r = pcall(tostring, k)
    s = ok and type(r) == "string" and r or ""
    text[k] = s
  end
  return s
end
local function key_less(a, b, text)
  local ta, tb = type(a), type(b)
  if ta ~= tb then return (type_rank[ta] or 9) < (type_rank[tb] or 9) end
  if ta == "number" or ta == "string" then return a < b end
  return key_text(a, text) < key_text(b, text)
end

local format

-- The n least of keys in key order, without sorting them all: a table of a million keys took seconds (table keys,
-- compared by their text: half a minute) to print its first 40.
local function least_keys(keys, n)
  if n <= 0 then return {} end
  local text = {}
  local function less(a, b) return key_less(a, b, text) end
  if #keys <= 4 * n then
    table.sort(keys, less)
    for i = #keys, n + 1, -1 do keys[i] = nil end
    return keys
  end
  local best = {}
  for _, k in ipairs(keys) do
    if #best < n or less(k, best[#best]) then
      local lo, hi = 1, #best + 1
      while lo < hi do
        local mid = (lo + hi) // 2
        if less(k, best[mid]) then hi = mid else lo = mid + 1 end
      end
      table.insert(best, lo, k)
      best[n + 1] = nil
    end
  end
  return best
end

local function format_key(k, opts, seen, depth)
  if is_ident(k) then return k end
  return "[" .. format(k, opts, seen, depth + 1) .. "]"
end

local function format_table(t, opts, seen, depth, indent)
  if seen[t] then return "<cycle " .. tostring(t) .. ">" end
  if depth >= opts.max_depth then return "{...}" end
  seen[t] = true
  local items, shown = {}, 0
  local len = rawlen(t)
  for i = 1, math.min(len, opts.max_items) do
    items[#items + 1] = format(rawget(t, i), opts, seen, depth + 1, indent .. "  ")
    shown = shown + 1
  end
  local truncated = len - shown
  local keys = {}
  for k in next, t do
    if not (math.type(k) == "integer" and k >= 1 and k <= len) then keys[#keys + 1] = k end
  end
  local nkeys = #keys
  local first = least_keys(keys, opts.max_items - shown)
  for _, k in ipairs(first) do
    items[#items + 1] = format_key(k, opts, seen, depth) .. " = "
      .. format(rawget(t, k), opts, seen, depth + 1, indent .. "  ")
    shown = shown + 1
  end
  truncated = truncated + nkeys - #first
  seen[t] = nil  -- only ancestors count as cycles; shared subtables print twice
  if truncated > 0 then items[#items + 1] = "... (" .. truncated .. " more)" end
  if #items == 0 then return "{}" end
  local one = "{" .. table.concat(items, ", ") .. "}"
  if #one + #indent <= opts.width and not one:find("\n") then return one end
  local inner = indent .. "  "
  return "{\n" .. inner .. table.concat(items, ",\n" .. inner) .. "\n" .. indent .. "}"
end

-- format(v [, opts]) -> string as the REPL shows it. opts: max_depth, max_items, width.
function format(v, opts, seen, depth, indent)
  opts = opts or M
  seen, depth, indent = seen or {}, depth or 0, indent or ""
  local tv = type(v)
  if tv == "string" then return quote(v) end
  if tv == "table" then
    if has_tostring(v) then
      local ok, s = pcall(tostring, v)
      if ok then return s end
      local ok2, why = pcall(tostring, s)   -- the error may be an object whose own __tostring fails
      return "<__tostring failed: " .. (ok2 and why or "(error object is a " .. type(s) .. " value)") .. ">"
    end
    return format_table(v, opts, seen, depth, indent)
  end
  if tv == "number" and math.type(v) == "float" and v == math.floor(v) and v > -1e16 and v < 1e16 then
    return string.format("%.1f", v)   -- keep 2.0 distinguishable from 2
  end
  local ok, s = pcall(tostring, v)
  return ok and s or ("<" .. tv .. ": __tostring failed>")
end
M.format = format

-- print_results(...): what the REPL does with the values of an expression.
function M.print_results(...)
  local n = select("#", ...)
  -- `help` typed without its parentheses (Python's prompt answers that too): how to call it, not "function: 0x..."
  if n == 1 and type(...) == "function" and rawequal(..., rawget(_G, "help")) then
    io.stdout:write('help is a function: help() lists the sections, help("name") or help(fp8.fn) shows one entry\n')
    io.stdout:flush()
    return
  end
  local out = {}
  for i = 1, n do out[i] = format((select(i, ...))) end
  io.stdout:write(table.concat(out, "\t"), "\n")
  io.stdout:flush()
end

------------------------------------------------------------------------------------------
-- Completion

local keywords = {
  "and", "break", "do", "else", "elseif", "end", "false", "for", "function", "goto", "if",
  "in", "local", "nil", "not", "or", "repeat", "return", "then", "true", "until", "while",
}

-- Adds the identifier keys of t that start with prefix, then of its metatables' __index tables (inheritance chains).
-- The prefix is tested first: a table of a million keys is walked once, not copied (Tab on big.k99 took 3 s).
local function collect(obj, out, want_methods, prefix)
  local visited = {}
  local n, b1 = #prefix, prefix:byte(1)
  local function add_keys(t)
    if type(t) ~= "table" or visited[t] then return end
    visited[t] = true
    for k, v in next, t do
      if type(k) == "string" and (n == 0 or (k:byte(1) == b1 and k:sub(1, n) == prefix)) and is_ident(k)
        and (not want_methods or type(v) == "function" or type(v) == "table") then
        out[k] = true
      end
    end
  end
  if type(obj) == "table" then add_keys(obj) end
  local cur, guard = obj, 0
  while guard < 8 do
    guard = guard + 1
    local idx = M.index_tables(cur)
    if #idx == 0 then break end
    for _, t in ipairs(idx) do add_keys(t) end
    cur = idx[1]
  end
end

-- index_tables(v) -> the tables behind v's metatable __index: the table itself, or, when
-- __index is a function (fp8.Tensor's resolves methods and x[i]), the tables among its upvalues but NOT_HERE.
function M.index_tables(v)
  return M.metatable_index_tables(getmetatable(v))
end

function M.metatable_index_tables(mt)
  if type(mt) ~= "table" then return {} end
  local idx = rawget(mt, "__index")
  if type(idx) == "table" then return { idx } end
  local out = {}
  if type(idx) == "function" then
    for i = 1, 16 do
      local name, up = debug.getupvalue(idx, i)
      if name == nil then break end
      -- (a table named NOT_HERE holds the names an __index refuses with a reason: fp8's and the Accelerator's
      -- Accelerate names fp8lab has not got; offering them would complete to an error)
      if type(up) == "table" and up ~= _G and name ~= "NOT_HERE" then out[#out + 1] = up end
    end
  end
  return out
end

-- fp8lab's own __index functions (its Lua sources', the C ones of its binary): completion may call them. A user's
-- __index (a proxy that logs, counts or fetches) is not run by a Tab.
local function own(f)
  return require("fp8.errfmt").is_own_source(debug.getinfo(f, "S").source)
end

-- peek(obj, name) -> obj[name] without running a user's __index: raw fields, __index tables, and only fp8lab's own
-- __index functions (the lazy fp8.nn, a tensor's methods), each under pcall; nil when unknown.
local function peek(obj, name)
  for _ = 1, 16 do   -- a bounded walk: an __index chain may loop
    if type(obj) == "table" then
      local v = rawget(obj, name)
      if v ~= nil then return v end
    end
    local mt = getmetatable(obj)
    local idx = type(mt) == "table" and rawget(mt, "__index") or nil
    if type(idx) == "function" then
      if not own(idx) then return nil end
      local ok, v = pcall(idx, obj, name)
      return ok and v or nil
    end
    if type(idx) ~= "table" then return nil end
    obj = idx
  end
  return nil
end

-- complete(line [, env]) -> sorted list of candidates for the expression ending the line,
-- each the whole expression (e.g. "fp8.tensor", "x:shape"). env defaults to _G.
function M.complete(line, env)
  env = env or _G
  local word = line:match("[%w_%.:]*$") or ""
  local head, sep, part = word:match("^(.*)([%.:])([%w_]*)$")
  local names = {}
  if not head then
    part = word
    if part:match("^%d") then return {} end
    collect(env, names, false, part)
    for _, k in ipairs(keywords) do names[k] = true end
  else
    -- only plain a.b.c chains are walked: evaluating calls could have side effects
    if not head:match("^[%a_][%w_]*$") and not head:match("^[%a_][%w_]*[%w_%.]*[%w_]$") then return {} end
    if head:find("%.%.") then return {} end
    local obj = env
    for name in head:gmatch("[^%.]+") do
      obj = peek(obj, name)
      if obj == nil then return {} end
    end
    collect(obj, names, sep == ":", part)
  end
  local out = {}
  for k in pairs(names) do
    if k:sub(1, #part) == part then out[#out + 1] = (head and head .. sep or "") .. k end
  end
  table.sort(out)
  return out
end

return M
