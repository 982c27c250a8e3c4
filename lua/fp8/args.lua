-- args.lua — command-line options for fp8lab scripts: `--name value` or `--name=value`, typed
-- (int, num, str, flag), with defaults, an optional lower bound, a generated --help text, and errors
-- that name the valid options. Used by scripts/train_*.lua.
--   local opts = require("fp8.args").parse(arg, OPTIONS, {usage = "usage: ...", about = "..."})
-- OPTIONS is a list of {name, type, default, help [, min]}; a nil default shows as `default_text` (false: not
-- at all, the help text says it).
local O = require "fp8.opts"
local M = {}

-- A usage error: the message alone, without a traceback (the host's message handler shows an error object by its
-- __tostring and adds no frames); a pcall still reads it with tostring(err).
local UsageError = { __tostring = function(e) return e.message end, __name = "fp8.args.UsageError" }

-- fail(msg): raises msg as a usage error (a bad option or argument of a script), shown without a traceback.
function M.fail(msg)
  if type(msg) ~= "string" then error(("fail: expected a message string, got %s"):format(type(msg)), 2) end
  error(setmetatable({ message = msg }, UsageError), 0)
end

local function check_spec(fname, options, cfg)
  if type(options) ~= "table" then error(("%s: options must be a list of {name, type, default, help}, got %s"):format(fname, type(options)), 3) end
  if type(cfg) ~= "table" then error(("%s: cfg must be a table {usage=, about=}, got %s"):format(fname, type(cfg)), 3) end
  for i, o in ipairs(options) do   -- a name the command line cannot spell would be an option no one can give
    if type(o) ~= "table" or type(o[1]) ~= "string" or not o[1]:match("^[%w_][%w_%-]*$") then
      error(("%s: option %d's name must be letters, digits, '_' or '-' (not starting with '-'), got %s")
        :format(fname, i, type(o) == "table" and ("'" .. tostring(o[1]) .. "'") or type(o)), 3)
    end
  end
end

function M.usage(options, cfg)
  check_spec("usage", options, cfg)
  local lines = { cfg.usage, "", cfg.about }
  for _, o in ipairs(options) do
    local left = "  --" .. o[1] .. (o[2] == "flag" and "" or (" " .. (o[2] == "str" and "S" or "N")))
    -- default_text = false: an option without a default says its default in its own help text
    local default = tostring(o[3])
    if o[3] == nil then
      default = cfg.default_text
      if default == nil then default = "none" end
    end
    lines[#lines + 1] = ("%-28s %s%s"):format(left, o[4], (o[2] == "flag" or default == false) and ""
      or (" (default " .. default .. ")"))
  end
  lines[#lines + 1] = ("%-28s %s"):format("  --help", "this text")
  return table.concat(lines, "\n")
end

local function convert(o, val)
  local name, kind, min = o[1], o[2], o[5]
  if kind == "int" or kind == "num" then
    local v = tonumber(val)
    if kind == "int" then v = v and math.tointeger(v) end
    local what = kind == "int" and "an integer" or "a finite number"
    if min then what = what .. " >= " .. tostring(min) end
    -- tonumber reads "1e999" as inf: no option of a script means an infinite value
    if not v or v ~= v or v == math.huge or v == -math.huge or (min and v < min) then
      M.fail(("option --%s expects %s, got '%s'"):format(name, what, val))
    end
    return v
  end
  return val
end

function M.parse(argv, options, cfg)
  if type(argv) ~= "table" then error(("parse: argv must be a list of strings, got %s"):format(type(argv)), 2) end
  check_spec("parse", options, cfg)
  local spec, opts, names = {}, {}, {}
  for _, o in ipairs(options) do spec[o[1]] = o; opts[o[1]] = o[3]; names[#names + 1] = "--" .. o[1] end
  names[#names + 1] = "--help"
  local i = 1
  while i <= #argv do
    local a = argv[i]
    -- option names take letters, digits, '-' and '_' (Accelerate's scripts spell --mixed_precision)
    local name, val = a:match("^%-%-([%w_%-]+)=(.*)$")
    if not name then name = a:match("^%-%-([%w_%-]+)$") end
    if not name then
      M.fail(("unexpected argument '%s' (options start with --; valid: %s)"):format(a, table.concat(names, " ")))
    end
    if name == "help" then
      print(M.usage(options, cfg))
      -- at the REPL (or a script run from it) exiting would end the session: raise instead
      if debug.getregistry()["fp8lab.repl"] or cfg.no_exit then
        M.fail("--help: usage printed above (the script stops here; the session goes on)")
      end
      os.exit(0)
    end
    local o = spec[name]
    if not o then M.fail(("unknown option '--%s' (valid: %s)"):format(name, table.concat(names, " "))) end
    if o[2] == "flag" then
      if val ~= nil then
        M.fail(("option --%s is a flag and takes no value (got '--%s=%s')"):format(name, name, val))
      end
      opts[name] = true
    else
      if val == nil then
        i = i + 1
        val = argv[i]
        if val == nil then M.fail(("option --%s needs a value"):format(name)) end
      end
      opts[name] = convert(o, val)
    end
    i = i + 1
  end
  return opts
end

-- device(value) -> "cpu" or "cuda": the scripts' --device option (auto | cpu | cuda; auto picks the GPU when
-- one is usable). Errors name the valid values, or why the GPU cannot be used.
function M.device(value)
  if value ~= "auto" and value ~= "cpu" and value ~= "cuda" then
    M.fail(("--device must be one of auto, cpu, cuda; got '%s'"):format(tostring(value)))
  end
  local ok, cuda = pcall(require, "fp8.cuda")
  local usable = ok and cuda.is_available()
  if value == "cuda" and not usable then
    M.fail("--device cuda: no usable GPU (" .. tostring(ok and cuda.unavailable_reason()
      or "fp8lab was built without CUDA") .. ")")
  end
  if value == "auto" then return usable and "cuda" or "cpu" end
  return value
end

-- out_dir(path): the directory of a script's --out, made right after the options are read (files go there
-- during training, such as the FP8 stats log; a --out that cannot be made fails now, not after the training).
-- out_dir(path [, flag="--out"]): an output file's path checked before the run, not at its first write: not empty,
-- not a directory (nor anything but a regular file), its directory made now.
function M.out_dir(p, flag)
  flag = flag or "--out"
  if type(p) ~= "string" or p == "" then M.fail(("%s must be a file path, got %q"):format(flag, tostring(p))) end
  local C = require "fp8._checkpoint"
  if C.exists(p) and not C.is_file(p) then
    M.fail(("%s %s: %s, not a file"):format(flag, p, C.is_dir(p) and "is a directory" or "is there"))
  end
  local dir = p:match("^(.*)/[^/]*$")
  if dir and dir ~= "" then
    local ok, err = C.mkdir_p(dir)
    if not ok then M.fail(("%s %s: cannot create the directory %s (%s)"):format(flag, p, dir, err)) end
  end
end

-- out_folder(path [, flag="--out"]): an output directory, made now (a file there, or an empty path, refused before
-- the run rather than at its first write).
function M.out_folder(p, flag)
  flag = flag or "--out"
  if type(p) ~= "string" or p == "" then M.fail(("%s must be a directory path, got %q"):format(flag, tostring(p))) end
  local ok, err = require("fp8._checkpoint").mkdir_p(p)
  if not ok then M.fail(("%s %s: cannot create the directory (%s)"):format(flag, p, err)) end
end

-- after_resume(acc): a script's run resumed (--resume) from a checkpoint older than the newest in its project_dir
-- numbers its own checkpoints after the newest, with a notice: load_state continues the numbering after the one
-- it loaded, and a save under a name taken is refused (Accelerate's rule), which --save-every met only at the
-- end of the training.
function M.after_resume(acc)
  -- by the class's name, as LocalSGD checks it (a reloaded module makes a second Accelerator class)
  if not O.is_a(acc, "Accelerator") then
    error(("after_resume: expected the script's fp8.Accelerator, got %s"):format(O.got(acc)), 2)
  end
  local pc = acc.project_configuration
  if not (pc and pc.automatic_checkpoint_naming and pc.project_dir) then return end
  local newest
  for _, name in ipairs(require("fp8._checkpoint").listdir(pc.project_dir .. "/checkpoints") or {}) do
    local n = tonumber(name:match("^checkpoint_(%d+)$"))
    if n and (not newest or n > newest) then newest = n end
  end
  if newest and newest >= pc.iteration then
    acc:print(("notice: %s/checkpoints holds checkpoints up to checkpoint_%d, after the one resumed from: this "
      .. "run's are numbered from checkpoint_%d"):format(pc.project_dir, newest, newest + 1))
    pc.iteration = newest + 1
  end
end

return M
