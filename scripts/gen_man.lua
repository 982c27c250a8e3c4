-- gen_man.lua — the man page fp8lab.1 from the docs: `fp8lab scripts/gen_man.lua docs/cli.md ... > fp8lab.1`.
-- NAME and SYNOPSIS, the interpreter's options (from `fp8lab -h`), then each Markdown file turned into
-- roff: `##` headings become sections, code blocks no-fill text, tables tagged paragraphs, lists
-- bullets; inline code and bold become bold, links their text. `make install` installs the result.
local files = { ... }
local USAGE = "usage: fp8lab scripts/gen_man.lua docs/FILE.md ... > fp8lab.1"
if files[1] == "-h" or files[1] == "--help" then print(USAGE); os.exit(0) end
if #files == 0 then io.stderr:write(USAGE, "\n"); os.exit(2) end
for _, path in ipairs(files) do   -- a directory opens, and reads as nothing
  if not require("fp8._checkpoint").is_file(path) then
    io.stderr:write(("gen_man.lua: %s is not a readable file (%s)\n"):format(path, USAGE)); os.exit(2)
  end
end

local out = {}
local function emit(s) out[#out + 1] = s end

-- roff escapes: backslashes, and a leading . or ' that would read as a request
local function esc(s)
  s = s:gsub("\\", "\\e")
  s = s:gsub("^([%.'])", "\\&%1")
  return s
end

local function inline(s)
  s = esc(s)
  s = s:gsub("%[([^%]]+)%]%(([^%)]+)%)", "%1")
  s = s:gsub("%*%*([^*]+)%*%*", "\\fB%1\\fR")
  s = s:gsub("`([^`]+)`", "\\fB%1\\fR")
  s = s:gsub("%-%-", "\\-\\-")
  return s
end

emit('.TH FP8LAB 1 "" "fp8lab" "User Commands"')
emit(".SH NAME")
emit("fp8lab \\- FP8 mixed-precision training in C with an embedded Lua 5.4 interpreter")
emit(".SH SYNOPSIS")
emit(".nf")
emit("\\fBfp8lab\\fR [options] [script.lua [args]]")
emit("\\fBfp8lab\\fR env | launch | config | test [args]")
emit(".fi")
emit(".SH DESCRIPTION")
emit("fp8lab runs Lua scripts and a REPL with the \\fBfp8\\fR module: FP8 formats and tensors, layers, optimizers,")
emit("and an Accelerator in the manner of Hugging Face Accelerate with the TransformerEngine, torchao and MS-AMP")
emit("recipes. In the REPL, \\fBhelp()\\fR lists the API. The full documentation is installed in")
emit("\\fI/usr/share/doc/fp8lab\\fR (or under the installation prefix).")

-- the interpreter's options, as `fp8lab -h` prints them
local exe = arg and arg[-1] or "fp8lab"
local p = io.popen(("'%s' -h 2>/dev/null"):format(exe:gsub("'", "'\\''")))
local usage = p and p:read("a") or ""
if p then p:close() end
local opts = usage:match("Options:\n(.-)\n%a") or ""
if opts ~= "" then
  emit(".SH OPTIONS")
  for line in opts:gmatch("[^\n]+") do
    local flag, text = line:match("^%s+(%S+.-)%s%s+(.+)$")
    if flag then emit(".TP"); emit("\\fB" .. esc(flag):gsub("%-", "\\-") .. "\\fR"); emit(esc(text)) end
  end
end
local envs = usage:match("Environment:\n(.*)$") or ""

for _, path in ipairs(files) do
  local f = assert(io.open(path, "r"))
  local text = f:read("a")
  f:close()
  local in_code = false
  -- a paragraph or list item is gathered whole before inline() runs: Markdown's code spans and bold cross the
  -- source's line breaks, and one line at a time would pair a span's closing backtick with the next one's opening
  local para, bullet = {}, false
  local function flush()
    if #para == 0 then return end
    if bullet then emit(".IP \\(bu 2") end
    emit(inline(table.concat(para, " ")))
    para, bullet = {}, false
  end
  for line in (text .. "\n"):gmatch("(.-)\n") do
    if line:match("^```") then
      flush()
      in_code = not in_code
      emit(in_code and ".PP\n.nf\n.RS 2" or ".RE\n.fi")
    elseif in_code then
      emit(esc(line))
    elseif line:match("^# ") then
      flush()
      emit(".SH " .. inline(line:sub(3)):upper())
    elseif line:match("^##+ ") then
      flush()
      emit(".SS " .. inline(line:gsub("^#+ ", "")))
    elseif line:match("^|%-") then
      -- table separator row
    elseif line:match("^|") then
      flush()
      local cells = {}
      for c in line:gmatch("|([^|]*)") do
        c = c:match("^%s*(.-)%s*$")
        if c ~= "" then cells[#cells + 1] = c end
      end
      if #cells > 0 then
        emit(".TP")
        emit(inline(cells[1]))
        emit(inline(table.concat(cells, "; ", 2)))
      end
    elseif line:match("^%s*[-*] ") then
      flush()
      bullet = true
      para[1] = line:gsub("^%s*[-*] ", "")
    elseif line:match("^%s*$") then
      flush()
      emit(".PP")
    else
      para[#para + 1] = line:gsub("^%s+", "")
    end
  end
  flush()
end

if envs ~= "" then
  emit(".SH ENVIRONMENT")
  for line in envs:gmatch("[^\n]+") do
    local name, text = line:match("^%s+(%S+)%s+(.+)$")
    if name then emit(".TP"); emit("\\fB" .. esc(name) .. "\\fR"); emit(esc(text)) end
  end
end
emit(".SH SEE ALSO")
emit("\\fBmpirun\\fR(1). In the REPL: \\fBhelp()\\fR.")

-- collapse runs of .PP
local final, prev = {}, nil
for _, l in ipairs(out) do
  if not (l == ".PP" and (prev == ".PP" or (prev or ""):match("^%.S[HS]"))) then final[#final + 1] = l end
  prev = l
end
io.write(table.concat(final, "\n"), "\n")
