-- errfmt.lua — how the host shows an error from a user's script or -e chunk: the user's line
-- first, then only the user's frames of the traceback; `fp8lab -v` (or FP8LAB_VERBOSE=1) shows the
-- full traceback instead. lua/main.c calls short(text) with the "message\nstack traceback:..." text
-- its message handler made.
local M = {}

-- A frame or location inside fp8 itself (embedded chunks are named lua/fp8/...), or in C.
local function internal(src)
  return src == "[C]" or src:match("^lua/fp8/") ~= nil or src:match("/lua/fp8/") ~= nil
    or src == "(...tail calls...)"
end

-- Whether a function's debug.getinfo(f, "S").source is fp8's own (its embedded Lua, or C): the REPL's completion
-- calls only such __index functions, and the functional ops raise a core error without a position inside them.
function M.is_own_source(source)
  return source == "=[C]" or (source:sub(1, 1) == "@" and internal(source:sub(2)))
end

-- short(text) -> the shortened text (text unchanged when it has no traceback or no user frame).
function M.short(text)
  if type(text) ~= "string" then return text end
  local msg, tb = text:match("^(.-)\nstack traceback:\n(.*)$")
  if not msg then return text end
  local frames = {}
  for line in tb:gmatch("[^\n]+") do
    local l = line:gsub("^%s+", "")
    local src, ln = l:match("^(.-):(%d+): ")
    if src and not internal(src) and src ~= "[C]" then frames[#frames + 1] = { src = src, line = ln, text = l } end
  end
  if #frames == 0 then return text end
  local first = frames[1]
  local where = first.src .. ":" .. first.line
  local head
  -- the innermost frame of the user's code leads (a message's own location may sit in fp8's Lua
  -- library, or one tail call away from the user's line)
  local msrc, mline, rest = msg:match("^([^\n]-):(%d+): (.*)$")
  if msrc and internal(msrc) then
    head = where .. ": " .. rest .. "\n  (raised in " .. msrc .. ":" .. mline .. ")"
  elseif msrc then
    head = where .. ": " .. rest
  else
    head = where .. ": " .. msg
  end
  local out = { head, "traceback (your code; fp8lab -v shows the full one):" }
  for _, f in ipairs(frames) do out[#out + 1] = "\t" .. f.text end
  return table.concat(out, "\n")
end

-- hint(msg) -> msg, and after it a pointer for a torch user who called a method fp8lab's tensors do not have
-- ("attempt to call a nil value (method 'relu')"): the op of that name in fp8.nn.functional or fp8, where there is one.
-- The message does not say what the object was, so the pointer says "if it is a tensor".
function M.hint(msg)
  if type(msg) ~= "string" then return msg end
  -- Python's way out of its prompt: exit() and quit() are no Lua functions ("attempt to call a nil value (global
  -- 'exit')" said nothing of how to leave)
  local word = msg:match("attempt to call a nil value %(global '([%a_][%w_]*)'%)")
  if (word == "exit" or word == "quit") and rawget(_G, word) == nil then
    local first, rest = msg:match("^([^\n]*)(.*)$")
    return first .. "\n  (Lua has no " .. word .. "(): os.exit() ends fp8lab; at the prompt, so does Ctrl-D)" .. rest
  end
  local name = msg:match("attempt to call a nil value %(method '([%a_][%w_]*)'%)")
  local fp8 = package.loaded.fp8
  if not name or type(fp8) ~= "table" then return msg end
  local function has(get)
    local ok, v = pcall(get)
    return ok and type(v) == "function"
  end
  local where
  if has(function() return fp8.nn.functional[name] end) then where = "fp8.nn.functional." .. name .. "(x, ...)"
  elseif has(function() return fp8[name] end) then where = "fp8." .. name .. "(x, ...)" end
  local line = ("  (if that is a tensor: fp8lab's tensors have no :%s()%s; help(\"tensors\") lists what they have)")
    :format(name, where and ("; the op is " .. where) or "")
  -- after the message's first line: before a traceback or the lines that follow it
  local first, rest = msg:match("^([^\n]*)(.*)$")
  return first .. "\n" .. line .. rest
end

-- value_text(err) -> the text of any error value: a string as it is, a value with __tostring as that gives,
-- anything else as the standalone interpreter words it ("(error object is a table value)"), never "nil" or
-- "table: 0x..."; a table's plain fields follow, a few ("(error object is a table value: {code = 2})").
function M.value_text(err)
  local t = type(err)
  if t == "string" or t == "number" then return tostring(err) end
  local mt = getmetatable(err)
  if type(mt) == "table" and mt.__tostring then
    local ok, s = pcall(tostring, err)
    if ok and type(s) == "string" then return s end
  end
  if t == "table" and next(err) ~= nil then
    -- what a raised exception's repr shows in Python: the table's plain fields (a few, short), e.g. error{code = 2}
    local keys, parts = {}, {}
    for k, v in next, err do   -- raw: no __pairs of the error's own
      local tk, tv = type(k), type(v)
      if (tk == "string" or math.type(k) == "integer") and (tv == "string" or tv == "number" or tv == "boolean") then
        keys[#keys + 1] = k
      end
    end
    table.sort(keys, function(a, b)
      if type(a) ~= type(b) then return type(a) == "number" end
      return a < b
    end)
    for i = 1, math.min(#keys, 6) do
      local k, v = keys[i], rawget(err, keys[i])
      local ks = type(k) == "string" and k:match("^[%a_][%w_]*$") and k
        or ("[" .. (type(k) == "string" and ("%q"):format(k) or tostring(k)) .. "]")
      local vs = type(v) == "string" and ("%q"):format(#v > 60 and v:sub(1, 57) .. "..." or v):gsub("\\\n", "\\n")
        or tostring(v)
      parts[#parts + 1] = ks .. " = " .. vs
    end
    if #keys > 6 then parts[#parts + 1] = "..." end
    if #parts > 0 then return ("(error object is a table value: {%s})"):format(table.concat(parts, ", ")) end
  end
  return ("(error object is a %s value)"):format(t)
end

-- unplaced(err) -> the text of an error value without the "file:line: " a raise from Lua put before it, for a
-- message that goes on in another function's name (a string or anything else, as value_text words it).
function M.unplaced(err)
  return (M.value_text(err):gsub("^[^:\n]*:%d+: ", "", 1))
end

-- public_of(file) -> public, strip for a library file (its name, "conv.lua") whose errors are raised without a
-- position: public(impl) is impl as a public function whose errors come out at its caller's line (none where the
-- caller is fp8lab's own code: a layer's forward names itself), as functional.lua's at_caller places them; strip(err)
-- takes the file's own "conv.lua:12: " off a message (what a constructor passes on at its own level).
function M.public_of(file)
  local pattern = "^[^:\n]*" .. file:gsub("%.", "%%.") .. ":%d+: "
  local function strip(err) return type(err) == "string" and (err:gsub(pattern, "")) or err end
  local function rethrow(ok, ...)
    if ok then return ... end
    local err = strip((...))
    if type(err) ~= "string" then error(err, 0) end
    local src = (debug.getinfo(3, "S") or {}).source or ""
    error(err, src ~= "=[C]" and M.is_own_source(src) and 0 or 3)
  end
  -- every result kept (max_pool2d's indices), rethrow never a tail call (its level counts the wrapper's frame)
  return function(impl)
    return function(...)
      local r = table.pack(rethrow(pcall(impl, ...)))
      return table.unpack(r, 1, r.n)
    end
  end, strip
end

-- called from a user's code, these name themselves in their errors (fp8.opts.internal_functions; stop 101)
require("fp8.opts").internal_functions(M, "fp8.errfmt", { "is_own_source", "public_of" })
return M
