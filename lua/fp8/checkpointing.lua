-- fp8.checkpointing — Accelerate's save_state / load_state / save_model for fp8.Accelerator, and
-- fp8.ProjectConfiguration (docs/checkpoints.md). A checkpoint directory holds:
--   model.safetensors (model_1, ...)          every parameter and buffer, FP8 recipe state included
--   optimizer.safetensors (optimizer_1, ...)  moments in their own dtypes; groups and steps in metadata
--   scheduler.json (scheduler_1, ...), scaler.json, custom_checkpoint_N.json   the small states
--   custom_checkpoint_N.safetensors           the tensors in a registered object's state
--   random_states_<rank>.json                 each process's generators: fp8's and Lua's math.random
--   fp8lab_state.json                         version, step, data loader positions, resolved settings
-- It is written as <dir>.tmp and renamed when complete, so a crash never leaves a partial <dir>.
local unplaced = require("fp8.errfmt").unplaced   -- an error's text without its "file:line: "
local O = require "fp8.opts"
local core = require "fp8.core"
local C = require "fp8._checkpoint"
local error_text = require("fp8.errfmt").value_text
local model_files = require "fp8.model_files"

local M = {}
M._locked = {}   -- directories whose lock this process holds: id → saves inside it (take_turn)
M.VERSION = 1
local STATE_FILE = "fp8lab_state.json"

-- ---- ProjectConfiguration --------------------------------------------------------------------

local PC_FIELDS = { "automatic_checkpoint_naming", "iteration", "logging_dir", "project_dir", "total_limit" }
local ProjectConfiguration = {}
-- logging_dir reads as project_dir's when not given (Accelerate's __post_init__ sets it so); rawget tells them apart
ProjectConfiguration.__index = function(self, k)
  if k == "logging_dir" then return rawget(self, "project_dir") end
  return ProjectConfiguration[k]
end
ProjectConfiguration.__name = "ProjectConfiguration"

-- pc:set_directories(project_dir): Accelerate's; sets project_dir and logging_dir to it
function ProjectConfiguration:set_directories(project_dir, ...)
  if getmetatable(self) ~= ProjectConfiguration then
    error("ProjectConfiguration:set_directories: call it with a colon, on an fp8.ProjectConfiguration", 2)
  end
  require("fp8.opts").no_more("ProjectConfiguration:set_directories", "(project_dir)", ...)
  if type(project_dir) ~= "string" or project_dir == "" then
    error(("ProjectConfiguration:set_directories: project_dir must be a directory name, got %s"):format(
      O.got(project_dir)), 2)
  end
  rawset(self, "project_dir", project_dir)
  rawset(self, "logging_dir", project_dir)
end

-- fp8.ProjectConfiguration{project_dir=, logging_dir=, automatic_checkpoint_naming=false, total_limit=nil, iteration=0}
-- (logging_dir: the trackers' directory, project_dir's unless given, as Accelerate's)
function M.ProjectConfiguration(opts, ...)
  require("fp8.opts").no_more("ProjectConfiguration",
    "({project_dir=, logging_dir=, automatic_checkpoint_naming=, total_limit=, iteration=})", ...)
  opts = opts or {}
  if type(opts) ~= "table" then error(("ProjectConfiguration: expected an options table, got %s"):format(type(opts)), 2) end
  require("fp8.opts").check_plain("ProjectConfiguration", opts, 2)   -- (stop 102) a proxy's keys are not read
  local named = {}   -- save_on_each_node: accepted when off, refused when set
  for k, v in next, opts do
    if k == "save_on_each_node" then
      if v ~= false then error(("ProjectConfiguration: %s is not supported in fp8lab (one node)"):format(k), 2) end
    else
      named[k] = v
    end
  end
  O.check("ProjectConfiguration", named, PC_FIELDS, 2)
  local pc = setmetatable({ project_dir = opts.project_dir, automatic_checkpoint_naming = opts.automatic_checkpoint_naming == true,
    total_limit = opts.total_limit, iteration = opts.iteration or 0, logging_dir = opts.logging_dir },
    ProjectConfiguration)
  for _, k in ipairs { "project_dir", "logging_dir" } do
    if pc[k] ~= nil and (type(pc[k]) ~= "string" or pc[k] == "") then
      error(("ProjectConfiguration: %s must be a directory name, got %s"):format(k, tostring(pc[k])), 2)
    end
  end
  if opts.automatic_checkpoint_naming ~= nil and type(opts.automatic_checkpoint_naming) ~= "boolean" then
    error("ProjectConfiguration: automatic_checkpoint_naming must be a boolean", 2)
  end
  if pc.total_limit ~= nil and (math.type(pc.total_limit) ~= "integer" or pc.total_limit < 1) then
    error(("ProjectConfiguration: total_limit must be an integer >= 1, got %s"):format(O.got(pc.total_limit)), 2)
  end
  if math.type(pc.iteration) ~= "integer" or pc.iteration < 0 then
    error(("ProjectConfiguration: iteration must be an integer >= 0, got %s"):format(O.got(pc.iteration)), 2)
  end
  return pc
end

function ProjectConfiguration:__tostring()
  return ("ProjectConfiguration(project_dir=%s, logging_dir=%s, automatic_checkpoint_naming=%s, total_limit=%s, "
    .. "iteration=%d)"):format(tostring(self.project_dir), tostring(self.logging_dir),
    tostring(self.automatic_checkpoint_naming), tostring(self.total_limit), self.iteration)
end

-- The accelerator's configuration from its options project_config= and project_dir= (Accelerate's); trackers: whether
-- log_with is given (its trackers write under the logging directory, project_dir's by default).
function M.project_config_from(pc, dir, level, trackers)
  if pc ~= nil and not O.is_a(pc, "ProjectConfiguration") then
    error(("Accelerator: project_config must be an fp8.ProjectConfiguration{...}, got %s"):format(type(pc)), level + 1)
  end
  pc = pc or M.ProjectConfiguration {}
  if dir ~= nil then
    if type(dir) ~= "string" or dir == "" then error("Accelerator: project_dir must be a directory name", level + 1) end
    -- Accelerate's `if project_dir is not None and self.project_dir is None`: it names the configuration's directory
    -- (set in the configuration, as Accelerate's set_directories does); where the configuration names another, Accelerate
    -- drops the argument unseen: refused here
    if pc.project_dir == nil then pc.project_dir = dir
    elseif pc.project_dir ~= dir then
      error(("Accelerator: project_dir %q differs from project_config's project_dir %q: give one of them"):format(dir,
        pc.project_dir), level + 1)
    end
  end
  -- Without automatic naming and without trackers these would change nothing (in Accelerate project_dir otherwise
  -- only feeds the trackers' logging_dir): refused rather than kept for nothing
  -- Each key's own condition: project_dir also feeds log_with's trackers; total_limit and iteration only number
  -- checkpoints (one message for all once said "take effect ... or with log_with=" of total_limit too)
  local set, why = {}, {}
  if not pc.automatic_checkpoint_naming then
    if pc.project_dir ~= nil and not trackers then
      set[#set + 1] = "project_dir"
      why[#why + 1] = "project_dir takes effect only with automatic_checkpoint_naming=true or with log_with= (its "
        .. "trackers write under project_dir)"
    end
    for _, k in ipairs { "total_limit", "iteration" } do
      if (k == "total_limit" and pc.total_limit ~= nil) or (k == "iteration" and pc.iteration ~= 0) then
        set[#set + 1] = k
        why[#why + 1] = k .. " takes effect only with automatic_checkpoint_naming=true"
      end
    end
  end
  if #set > 0 then
    error(("Accelerator: %s (automatic naming numbers checkpoints under project_dir/checkpoints): set "
      .. "automatic_checkpoint_naming=true in fp8.ProjectConfiguration{...}%s, or leave %s out"):format(
      table.concat(why, "; "), set[1] == "project_dir" and #set == 1 and " or give log_with=" or "",
      #set > 1 and table.concat(set, ", ") or "it"), level + 1)
  end
  if rawget(pc, "logging_dir") ~= nil and not trackers then
    error("Accelerator: logging_dir takes effect only with log_with= (the trackers write under it): leave it out, "
      .. "or give log_with=\"tensorboard\"", level + 1)
  end
  return pc
end

-- ---- files -----------------------------------------------------------------------------------

local join = model_files.join
local open_file = model_files.open_file   -- (io.open, collecting once when out of descriptors)

local function read_all(path)
  -- a named pipe or a device in a checkpoint's place would block or never end: not opened
  if C.exists(path) and not C.is_file(path) then return nil, "not a regular file" end
  local f, err = open_file(path, "rb")
  if not f then return nil, err end
  local s = f:read("a")
  f:close()
  return s
end

local function write_json(path, value) C.write_atomic(path, C.json_encode(value) .. "\n") end

local function read_json(path, what)
  local s, err = read_all(path)
  if not s then error(("load_state: cannot read %s: %s"):format(what or path, err), 0) end
  return C.json_decode(s, "load_state: " .. path)
end

-- A directory and what is in it; a symbolic link is removed itself, never followed (what it points at may be
-- anyone's).
-- Removes path and all below it; true, or false and the first failure's message (what it could remove is gone).
local function rmtree(path)
  local err
  if C.is_dir(path) and not C.is_link(path) then
    local names, lerr = C.listdir(path)
    if not names then err = "cannot list " .. tostring(lerr) end
    for _, name in ipairs(names or {}) do
      local ok, e = rmtree(join(path, name))
      if not ok then err = err or e end
    end
  end
  local ok, e = os.remove(path)
  if not ok then return false, err or e end
  return true
end

-- Accelerate's safe_serialization=True (its default) is the only format here: taken; false (pickles) is refused.
-- Level 3: the caller of save_state / save_model.
local function safetensors_only(fname, v)
  if v ~= nil and v ~= true then
    error(("%s: safe_serialization=%s is not supported: fp8lab writes safetensors (and JSON) only, no pickles")
      :format(fname, tostring(v)), 3)
  end
end

-- A directory name with a NUL byte: the C calls would see only what is before it (another directory). Level 3: the
-- caller of save_state / load_state / save_model.
local function no_nul(fname, dir)
  if type(dir) == "string" and dir:find("\0", 1, true) then
    error(("%s: the directory name must not contain a NUL byte, got %q"):format(fname, dir), 3)
  end
end

local function suffix(i) return i == 1 and "" or ("_" .. (i - 1)) end

-- save_model's max_shard_size in bytes (math.huge when not given): an integer (bytes) or a string with a unit, as
-- huggingface_hub's parse_size_to_int reads it ("10GB", "500MB", "1.5kb": TB, GB, MB, KB in powers of 10)
local SIZE_UNITS = { TB = 1e12, GB = 1e9, MB = 1e6, KB = 1e3 }
local function shard_limit(v)
  if v == nil then return math.huge end
  if math.type(v) == "integer" and v >= 1 then return v end
  if type(v) == "string" then
    local num, unit = v:match("^%s*(.-)%s*(%a%a)%s*$")
    -- (a decimal number, as Python's float() reads it: Lua's tonumber would also take hex, "0x10KB")
    local mult, x = unit and SIZE_UNITS[unit:upper()], not (num or ""):find("[xX]") and tonumber(num) or nil
    -- (at least a byte, as the integer form: "0KB" would put every tensor in a shard of its own)
    if mult and x and x < math.huge and math.floor(x * mult) >= 1 then return math.floor(x * mult) end
  end
  error(("save_model: max_shard_size must be a number of bytes (an integer >= 1) or a size such as \"10GB\" "
    .. "(units TB, GB, MB, KB) of at least a byte, got %s"):format(O.got(v)), 3)
end

-- ---- what a checkpoint owns -----------------------------------------------------------------
-- save_state replaces a directory as a whole (that is what makes a checkpoint appear complete or not at all), so
-- it must know what in a directory is its own: nothing of a user's is ever deleted.
--  * A directory holding PARTIAL is fp8lab's own throughout: a save's temporary directory from its creation, and
--    a checkpoint from the moment it is being replaced or pruned. Removal takes PARTIAL last, so a removal cut
--    short leaves a directory still marked.
--  * A checkpoint lists every path it holds in its state file ("files": "name", "dir/", "dir/name"); what is not
--    listed (a notes file, a save_model folder, a file added to a hook's folder) is the user's.
--  * A checkpoint written before that list existed (a state file without "files") owns the names OWN_NAMES match.
--  * Anything else (no state file, or one that is not a checkpoint's) is all the user's.
local PARTIAL = ".fp8lab_partial"
local OWN_NAMES = { "^random_states_%d+%.json$", "^model_?%d*%.safetensors$", "^optimizer_?%d*%.safetensors$",
  "^scheduler_?%d*%.json$", "^scaler%.json$", "^custom_checkpoint_%d+%.json$", "^fp8lab_state%.json$" }
local function own_name(name)
  for _, p in ipairs(OWN_NAMES) do if name:match(p) then return true end end
  return false
end

local function exists(path) return C.exists(path) or C.is_link(path) end   -- stat, never open: a named pipe blocks

local function marked(dir) return exists(join(dir, PARTIAL)) end
-- The names in dir; a listing that fails (out of memory, a permission) is an error, never an empty directory: read as
-- one, save_state's cleanup removed nothing and said it had (stop 101).
local function names_of(dir)
  local names, err = C.listdir(dir)
  if not names then error("cannot list " .. tostring(err), 0) end
  return names
end
-- An empty file, created in one step (a kill leaves it there or not, never half), so no temporary name of its own.
local function mark(dir)
  local f, err = open_file(join(dir, PARTIAL), "wb")
  if not f then error("save_state: " .. tostring(err), 0) end
  f:close()
end
-- Every path under dir, relative, directories with a trailing "/" (symbolic links are listed, not followed).
local function tree(dir, prefix, out)
  out = out or {}
  for _, name in ipairs(names_of(dir)) do
    local full, rel = join(dir, name), (prefix or "") .. name
    if C.is_dir(full) and not C.is_link(full) then
      out[#out + 1] = rel .. "/"
      tree(full, rel .. "/", out)
    else
      out[#out + 1] = rel
    end
  end
  return out
end

-- The state file of dir, when dir holds a checkpoint (nil otherwise).
local function checkpoint_state(dir)
  local s = read_all(join(dir, STATE_FILE))
  local ok, st = pcall(C.json_decode, s or "null", STATE_FILE)
  if ok and type(st) == "table" and st.fp8lab_checkpoint ~= nil then return st end
end

-- The entries of `dir` that no fp8lab checkpoint wrote (relative paths, a user's folder with a trailing "/").
-- `working`: dir is under one of save_state's working names (.tmp, .old, .deleting), where a marker without a
-- state file says the directory is fp8lab's own (a save's directory before its state file, or a removal past it);
-- under a checkpoint's own name the marker (a crash's leftover) never counts, the state file's list decides.
local function foreign_entries(dir, working)
  local st = checkpoint_state(dir)
  local out = {}
  if not st then
    if working and marked(dir) then return out end
    for _, name in ipairs(names_of(dir)) do out[#out + 1] = name end   -- not a checkpoint: all the user's
    return out
  end
  if type(st.files) ~= "table" then   -- an older checkpoint: its own names, at the top level
    for _, name in ipairs(names_of(dir)) do
      if not own_name(name) and name ~= PARTIAL then out[#out + 1] = name end
    end
    return out
  end
  local listed = { [STATE_FILE] = true, [PARTIAL] = true }
  for _, f in ipairs(st.files) do if type(f) == "string" then listed[f] = true end end
  local skip   -- a folder not listed: reported once, not what is in it (tree lists a folder's contents right after it)
  for _, rel in ipairs(tree(dir)) do
    if not (skip and rel:sub(1, #skip) == skip) and not listed[rel] then
      out[#out + 1] = rel
      if rel:sub(-1) == "/" then skip = rel end
    end
  end
  return out
end

local function entries_text(f)
  return ("%s (%s%s)"):format(#f == 1 and "an entry" or #f .. " entries", table.concat(f, ", ", 1, math.min(#f, 5)),
    #f > 5 and (", ... %d in all"):format(#f) or "")
end

-- Whether dir, under a working name, is fp8lab's own to remove: empty (a save killed between creating it and marking
-- it), or marked with nothing in it that no checkpoint wrote. Returns true, or false with the entries in the way
-- (all of them when the mark is missing).
local function own_leftover(dir)
  local names = names_of(dir)
  if #names == 0 then return true end
  if not marked(dir) then return false, names end
  local f = foreign_entries(dir, true)
  return #f == 0, f
end

-- Removes dir, under a working name, when own_leftover says it may (checked here, whatever the caller knows), taking
-- the state file and then the marker last, so a removal cut short leaves it recognisably fp8lab's. Returns false,
-- with the entries in the way, when it may not.
-- Removes dir when it is fp8lab's own (own_leftover). Returns true; or false and the entries that are not fp8lab's;
-- or false, nil and why a removal failed, the state file and the marker then left in place, so that what is left
-- stays recognisably fp8lab's and a later save removes it. (Raises where dir cannot be listed.)
local function remove_own(dir)
  if not C.is_dir(dir) or C.is_link(dir) then return true end
  local ok, f = own_leftover(dir)
  if not ok then return false, f end
  local last, failed = {}, nil
  for _, name in ipairs(names_of(dir)) do
    if name == PARTIAL or name == STATE_FILE then last[#last + 1] = name
    else
      local removed, e = rmtree(join(dir, name))
      if not removed then failed = failed or e end
    end
  end
  if failed then return false, nil, failed end
  table.sort(last, function(x, y) return x ~= PARTIAL and y == PARTIAL end)   -- the state file, then the marker
  for _, name in ipairs(last) do os.remove(join(dir, name)) end
  local removed, e = os.remove(dir)
  if not removed then return false, nil, e end
  return true
end

-- The previous checkpoint of `dir`, moved aside to dir.old by a save cut short between its two renames (a file
-- system without the atomic exchange): dir is gone and dir.old is fp8lab's, marked, with every file its state file
-- lists. Returns that path, or nil.
local function stranded_old(dir)
  local old = dir .. ".old"
  if exists(dir) or not C.is_dir(old) or C.is_link(old) or not marked(old) or not own_leftover(old) then return nil end
  local st = checkpoint_state(old)
  if not st or type(st.files) ~= "table" then return nil end
  for _, f in ipairs(st.files) do
    if type(f) ~= "string" or not exists(join(old, f)) then return nil end   -- a removal cut short: not whole
  end
  return old
end

-- Why save_state must not write `dir` ("" when it may): the directory it replaces must be empty or fp8lab's own,
-- and a dir.tmp / dir.old there must be the marked leftover of a save that was cut short.
local function publish_refusal(dir, automatic, iteration)
  local last = dir:match("([^/]*)$")
  if last == "." or last == ".." or last == "" then
    return ("give the directory by its name (not ending in '.' or '..'), got %s"):format(dir)
  end
  if automatic and exists(dir) then
    return ("checkpoint directory %s (iteration %d) already exists: load_state() resumes after the last checkpoint, or "
      .. "set project_configuration.iteration to the iteration to start with (Accelerate refuses it too)"):format(dir, iteration)
  end
  if automatic then
    -- a checkpoint numbered at or past this one is another run's: saving would interleave the two runs, and
    -- total_limit would prune the other run's checkpoints (Accelerate prunes them before its own refusal)
    local base = dir:match("^(.*)/[^/]*$") or "."
    local newest
    for _, e in ipairs(names_of(base)) do
      local n = math.tointeger(tonumber(e:match("^checkpoint_(%d+)$") or ""))
      if n and n >= iteration and (not newest or n > newest) then newest = n end
    end
    if newest then
      return ("%s already holds checkpoint_%d, past this run's iteration %d (another run's): load_state() resumes after "
        .. "the last checkpoint, or set project_configuration.iteration to %d; saving would mix the two runs and "
        .. "total_limit would prune the other run's checkpoints"):format(base, newest, iteration, newest + 1)
    end
  end
  if C.is_link(dir) then return ("%s is a symbolic link: save_state replaces a directory, give its real path"):format(dir) end
  if C.is_dir(dir) then
    local f = foreign_entries(dir)
    if #f > 0 then
      return ("%s holds %s that no fp8lab checkpoint wrote: save_state replaces its directory as a whole and "
        .. "deletes nothing it did not write; save into a new or empty directory"):format(dir, entries_text(f))
    end
  elseif exists(dir) then
    return ("%s exists and is not a directory"):format(dir)
  end
  for _, p in ipairs { dir .. ".tmp", dir .. ".old" } do
    local isdir = C.is_dir(p) and not C.is_link(p)
    local ok, f = true, nil
    if isdir then ok, f = own_leftover(p) end
    if exists(p) and not ok and isdir and marked(p) then
      return ("%s, the leftover of an fp8lab save, holds %s that no checkpoint wrote: save_state uses that name "
        .. "for its work; move them away"):format(p, entries_text(f))
    elseif exists(p) and (not isdir or not ok) then
      return ("%s exists and is not the leftover of an fp8lab save (no %s marker in it): save_state uses that name "
        .. "for its work; move it away"):format(p, PARTIAL)
    end
  end
  return ""
end

-- ---- what goes into the files ---------------------------------------------------------------

-- Settings that decide the numbers (anything a function or a table of functions is left out).
local function plain(v)
  if type(v) == "table" then
    local out = {}
    for k, x in next, v do
      local p = plain(x)
      if p ~= nil and (type(k) == "string" or math.type(k) == "integer") then out[k] = p end
    end
    return out
  elseif type(v) == "function" or type(v) == "userdata" then
    return nil
  end
  return v
end

-- A custom object's state (register_for_checkpointing) for its JSON file: every tensor in it, at any depth, goes to
-- custom_checkpoint_<i>.safetensors beside it (named "<n>:<key path>", n making each name unique) and is replaced by
-- {[TENSOR_KEY] = name, device = its device}, which custom_state_join puts it back for. A function or any other
-- userdata is refused naming its key path: it cannot be saved, and leaving it out would load a different state.
local TENSOR_KEY = "__fp8lab_tensor__"
local function custom_state_split(v, i)
  local tensors, n, on_path = {}, 0, {}
  local function where(path) return path == "" and "its state_dict()" or ("key '" .. path .. "'") end
  local function walk(x, path)
    if core.is_tensor(x) then
      n = n + 1
      local name = ("%d:%s"):format(n, path)
      tensors[name] = x
      return { [TENSOR_KEY] = name, device = x:device() }
    end
    local tx = type(x)
    if tx == "function" or tx == "userdata" or tx == "thread" then
      error(("save_state: custom object %d: %s is a %s; a custom state holds plain values (tables, strings, numbers, "
        .. "booleans) and fp8 tensors"):format(i, where(path), tx), 0)
    end
    if tx ~= "table" then return x end
    if on_path[x] then error(("save_state: custom object %d: %s holds a table that contains it (a cycle)"):format(i, where(path)), 0) end
    on_path[x] = true
    local out, keys = {}, {}
    for k in next, x do keys[#keys + 1] = k end
    -- in a fixed order, so the tensors' numbers (and the file) are the same every time
    table.sort(keys, function(a, b)
      if type(a) ~= type(b) then return type(a) < type(b) end
      if type(a) == "number" or type(a) == "string" then return a < b end
      return tostring(a) < tostring(b)
    end)
    for _, k in ipairs(keys) do
      local val = x[k]
      if k == TENSOR_KEY then
        error(("save_state: custom object %d: %s uses the key %s, which fp8lab keeps for the tensors it saves"):format(i,
          where(path), TENSOR_KEY), 0)
      end
      out[k] = walk(val, path == "" and tostring(k) or (path .. "." .. tostring(k)))
    end
    on_path[x] = nil
    return out
  end
  return walk(v, ""), tensors, n
end

-- The names the placeholders of a decoded custom state refer to (name -> device).
local function custom_state_names(v, out)
  out = out or {}
  if type(v) == "table" then
    if v[TENSOR_KEY] ~= nil then out[tostring(v[TENSOR_KEY])] = type(v.device) == "string" and v.device or "cpu"
    else for _, x in next, v do custom_state_names(x, out) end end
  end
  return out
end

-- The decoded state with each placeholder replaced by its tensor.
local function custom_state_join(v, tensors)
  if type(v) ~= "table" then return v end
  if v[TENSOR_KEY] ~= nil then return tensors[tostring(v[TENSOR_KEY])] end
  for k, x in next, v do v[k] = custom_state_join(x, tensors) end
  return v
end

local function resolved_settings(acc)
  return { mixed_precision = acc.mixed_precision, fp8_backend = acc.fp8_backend or "none",
           fp8_recipe = acc.mixed_precision == "fp8" and plain(acc.fp8_recipe) or {},
           gradient_accumulation_steps = acc.gradient_accumulation_steps }
end

-- The first difference between two plain values, as "path: a vs b", or nil.
local function first_difference(a, b, path)
  if type(a) ~= type(b) or type(a) ~= "table" then
    if a ~= b and not (type(a) == "number" and type(b) == "number" and a == b) then
      local function show(v)   -- a table (the whole section missing on one side) by its kind, not its address
        if type(v) ~= "table" then return tostring(v) end
        return next(v) == nil and "an empty table" or "a table"
      end
      return ("%s: the checkpoint has %s, this run %s"):format(path, a == nil and "none" or show(a),
        b == nil and "none" or show(b))
    end
    return nil
  end
  local keys = {}
  for k in next, a do keys[#keys + 1] = k end
  for k in next, b do if a[k] == nil then keys[#keys + 1] = k end end
  table.sort(keys, function(x, y) return tostring(x) < tostring(y) end)
  for _, k in ipairs(keys) do
    local d = first_difference(a[k], b[k], path .. "." .. tostring(k))
    if d then return d end
  end
  return nil
end

-- Optimizer state dict → tensors named "state.<index>.<key>" and metadata (groups, counters, JSON).
local function optimizer_to_file(inner)
  local sd = inner:state_dict()
  local tensors, scalars = {}, {}
  for idx, st in next, sd.state do
    local sc = {}
    for k, v in next, st do
      if core.is_tensor(v) then tensors[("state.%d.%s"):format(idx, k)] = v else sc[k] = v end
    end
    scalars[tostring(idx)] = sc
  end
  local meta = { format = "fp8lab-optimizer", optimizer = tostring(inner.name),
                 param_groups = C.json_encode(sd.param_groups), scalars = C.json_encode(scalars),
                 step_count = tostring(inner._step_count or 0) }
  return tensors, meta
end

local function optimizer_from_file(path)
  local f = core.safe_open(path)
  local meta = f:metadata()
  f:close()
  if meta.format ~= "fp8lab-optimizer" or not meta.param_groups or not meta.scalars then
    error(("load_state: %s is not an fp8lab optimizer file (no param_groups/scalars metadata)"):format(path), 0)
  end
  local step_count = meta.step_count and math.tointeger(tonumber(meta.step_count))
  if meta.step_count and not (step_count and step_count >= 0) then
    error(("load_state: %s: step_count is \"%s\", expected an integer >= 0"):format(path, meta.step_count), 0)
  end
  local tensors = core.load_file(path)
  local state = {}
  local scalars = C.json_decode(meta.scalars, path)
  if type(scalars) ~= "table" then
    error(("load_state: %s: scalars is %s, expected an object of per-parameter states"):format(path, type(scalars)), 0)
  end
  for idx, sc in next, scalars do
    local i = math.tointeger(tonumber(idx))
    if not i then error(("load_state: %s: bad state index %s"):format(path, tostring(idx)), 0) end
    if type(sc) ~= "table" then
      error(("load_state: %s: the state of parameter %d is %s, expected an object"):format(path, i, type(sc)), 0)
    end
    state[i] = sc
  end
  for name, t in next, tensors do
    local idx, key = name:match("^state%.(%d+)%.(.+)$")
    if not idx then error(("load_state: %s: unexpected tensor \"%s\""):format(path, name), 0) end
    idx = math.tointeger(tonumber(idx))
    state[idx] = state[idx] or {}
    state[idx][key] = t
  end
  return { state = state, param_groups = C.json_decode(meta.param_groups, path) }, step_count, meta.optimizer
end

local function is_split(l)
  return package.loaded["fp8.distributed"] ~= nil and require("fp8.distributed").is_split(l)
end

local function loader_state(l)
  -- split_batches: a position counts the loader's own batches (each process took a slice of each), the same under
  -- any process count; recorded only then, so that other checkpoints keep their fields
  return { epoch = l.epoch, batches_served = l.batches_served or 0, batches = #l, seed = l.seed, shuffle = l.shuffle,
           batch_size = l.batch_size, n = l.n, split_batches = is_split(l) or nil }
end

-- stateful (the accelerator's use_stateful_dataloader): the next loop finishes an interrupted epoch from its next
-- batch; otherwise (Accelerate's default) it runs that epoch again from its first batch, in the same shuffled order,
-- and the script skips the batches it had done (acc:skip_first_batches, or its own count), as Accelerate's examples do
local function restore_loader(l, s, i, main, stateful)
  if type(s) ~= "table" then error(("load_state: data loader %d: the checkpoint has no position for it"):format(i), 0) end
  for _, k in ipairs { "batches_served", "batches", "epoch" } do
    if math.type(s[k]) ~= "integer" or s[k] < 0 then
      error(("load_state: data loader %d: the checkpoint's %s is %s, not a count"):format(i, k, tostring(s[k])), 0)
    end
  end
  if s.batches_served > s.batches then
    error(("load_state: data loader %d: the checkpoint's batches_served (%d) is more than its batches per epoch (%d)")
      :format(i, s.batches_served, s.batches), 0)
  end
  if s.n ~= l.n or s.batch_size ~= l.batch_size or s.shuffle ~= l.shuffle or s.seed ~= l.seed then
    error(("load_state: data loader %d differs from the checkpoint's (items %s/%d, batch_size %s/%d, shuffle %s/%s, seed %s/%d)")
      :format(i, tostring(s.n), l.n, tostring(s.batch_size), l.batch_size, tostring(s.shuffle), tostring(l.shuffle),
        tostring(s.seed), l.seed), 0)
  end
  -- a position counts this process's batches of the saved sharding: under another process count (load_state with
  -- strict=false) or the other split_batches it means other samples, so the loader starts its saved epoch from the
  -- beginning (said once)
  if s.split_batches ~= nil and s.split_batches ~= true then
    error(("load_state: data loader %d: the checkpoint's split_batches is %s, not true"):format(i,
      tostring(s.split_batches)), 0)
  end
  local split_now = is_split(l)
  local other = s.batches ~= #l or (s.split_batches == true) ~= split_now
  if other and main and stateful then   -- said by the main process only: every process restarts alike
    local why = (s.split_batches == true) ~= split_now
      and ("saved %s split_batches, prepared %s it now"):format(s.split_batches and "with" or "without",
        split_now and "with" or "without")
      or ("saved with %d batches per process, it has %d now (another process count)"):format(s.batches, #l)
    io.stderr:write(("fp8lab: notice: load_state: data loader %d was %s: it restarts epoch %d from its first batch\n")
      :format(i, why, math.max(s.epoch, 1)))
  end
  return function()
    l._it = nil
    if rawget(l, "_it") ~= nil then rawset(l, "_it", nil) end   -- a DataLoaderShard keeps its own iterator
    if rawget(l, "_by_batch") ~= nil then rawset(l, "_by_batch", nil) end   -- and each loop's (data.lua, loop_call)
    if other and stateful then
      l.epoch, l._resume_at, l.batches_served = math.max(s.epoch - 1, 0), nil, 0
      return
    end
    if s.batches_served > 0 and s.batches_served < s.batches then
      if stateful then
        l.epoch, l._resume_at, l.batches_served = s.epoch - 1, s.batches_served, s.batches_served   -- finishes it
      else
        l.epoch, l._resume_at, l.batches_served = s.epoch - 1, nil, 0   -- runs it again from its first batch
      end
    else
      l.epoch, l._resume_at, l.batches_served = s.epoch, nil, s.batches_served
    end
  end
end

-- ---- Accelerator methods -----------------------------------------------------------------------

local function is_scheduler(v) return require("fp8.optim.lr_scheduler")._is_scheduler(v) end

local function is_loader(v) return require("fp8.data").is_loader(v) end

local function has_state(v)
  return type(v) == "table" and type(v.state_dict) == "function" and type(v.load_state_dict) == "function"
end

local function device_available(dev)
  if dev ~= "cuda" then return dev == "cpu" end
  local ok, cuda = pcall(require, "fp8.cuda")
  return ok and cuda.is_available() == true
end

local function checkpoint_number(name) return math.tointeger(tonumber(name:match("^checkpoint_(%d+)$"))) end

-- The checkpoint_N directories of base that hold a checkpoint (not a symbolic link, a state file in it), by N.
local function sorted_checkpoints(base)
  local out = {}
  for _, name in ipairs(C.listdir(base) or {}) do
    local n, p = checkpoint_number(name), join(base, name)
    if n and C.is_dir(p) and not C.is_link(p) and checkpoint_state(p) then out[#out + 1] = { n, p } end
  end
  table.sort(out, function(a, b) return a[1] < b[1] end)
  return out
end

function M.install(Accelerator)
  -- Objects prepare() returns that a checkpoint covers (models and optimizers are tracked by prepare).
  function Accelerator:_remember(v)
    self._dataloaders = self._dataloaders or {}
    self._schedulers = self._schedulers or {}
    local list = is_loader(v) and self._dataloaders or is_scheduler(v) and self._schedulers or nil
    if list then
      for _, x in ipairs(list) do if x == v then return end end
      list[#list + 1] = v
    end
  end

  -- register_for_checkpointing(obj, ...): objects with state_dict()/load_state_dict() whose state
  -- save_state/load_state carry as custom_checkpoint_N.json (+ .safetensors for its tensors). Every argument is
  -- checked before any is registered, as Accelerate's (one refused leaves none of them registered).
  function Accelerator:register_for_checkpointing(...)
    local args = table.pack(...)
    for i = 1, args.n do
      if not has_state(args[i]) then
        error(("register_for_checkpointing: argument %d has no state_dict()/load_state_dict() methods (got %s)"):format(i,
          type(args[i])), 2)
      end
    end
    self._custom = self._custom or {}
    for i = 1, args.n do self._custom[#self._custom + 1] = args[i] end
  end

  -- register_save_state_pre_hook(hook) / register_load_state_pre_hook(hook) → a handle with :remove():
  -- Accelerate's model-state hooks. hook(models, weights, output_dir) runs on every process in save_state
  -- before the model files are written: weights holds each model's state_dict(), and a model whose entry
  -- the hook removes (table.remove) is not written (the hook saves it its own way). output_dir is the
  -- directory being written, which becomes the checkpoint when complete, so what the hook writes there is
  -- published with it. hook(models, input_dir) runs in load_state after the checkpoint's version and
  -- settings are checked: a model the hook removes from the list is not loaded from model*.safetensors
  -- (the hook loads it; what it changes is its own to undo if a later part of the load fails).
  -- A hook's failure, named as one: its error value may be any Lua value (error({code=1}), error()).
  -- A hook and a custom object's methods run with yields refused (core._pcall_noyield): a coroutine suspended there
  -- would leave the save or load half-done, and under several processes the others waiting in its collectives.
  local function no_yield_why(what, who)
    return ("%s yielded; %s would stay half-done while the coroutine is suspended, and under several processes the "
      .. "others would wait for this one in its collectives"):format(who, what)
  end
  local function yielded(err, what)
    return type(err) == "string" and err:find(what .. ": a coroutine yielded inside it", 1, true) == 1
  end
  local function run_hook(what, hook, ...)
    local ok, err = core._pcall_noyield(what, no_yield_why(what, "a " .. what .. " pre-hook"), hook, ...)
    if not ok and yielded(err, what) then error(err, 0) end
    if not ok then error(("%s: a %s pre-hook failed: %s"):format(what, what, error_text(err)), 0) end
  end
  -- obj:method(...) of a registered custom object; its failure names the call, the object and the method, with the
  -- text of whatever it raised (a table's plain fields: error{code = 2} is not just "a table value")
  local function custom_call(what, obj, i, method, ...)
    local mt = getmetatable(obj)
    local name = type(mt) == "table" and type(rawget(mt, "__name")) == "string" and rawget(mt, "__name") or type(obj)
    local who = ("custom object %d (%s, register_for_checkpointing): its %s()"):format(i, name, method)
    local res = table.pack(core._pcall_noyield(what, no_yield_why(what, who), obj[method], obj, ...))
    if not res[1] and yielded(res[2], what) then error(res[2], 0) end
    if not res[1] then error(("%s: %s failed: %s"):format(what, who, error_text(res[2])), 0) end
    return table.unpack(res, 2, res.n)
  end
  local function add_hook(self, field, fname, hook)
    if type(hook) ~= "function" then error(("%s: expected a function, got %s"):format(fname, type(hook)), 3) end
    local list = rawget(self, field) or {}
    rawset(self, field, list)
    list[#list + 1] = hook
    return setmetatable({}, { __name = "RemovableHandle", __index = { remove = function()
      for i, h in ipairs(list) do if h == hook then table.remove(list, i); return end end
    end } })
  end
  function Accelerator:register_save_state_pre_hook(hook)
    return add_hook(self, "_save_hooks", "register_save_state_pre_hook", hook)
  end
  function Accelerator:register_load_state_pre_hook(hook)
    return add_hook(self, "_load_hooks", "register_load_state_pre_hook", hook)
  end

  -- save_state and load_state refuse to run inside one another on the same accelerator (a pre-hook or a custom
  -- object's method calling them): the inner call would write or read the directory the outer one is writing (a
  -- save into the same dir failed with "cannot create a temporary file in <dir>.tmp"), or change the state the outer
  -- one is saving. Accelerate has no such guard; the refusal is clear and leaves both directories as they were. The
  -- returned value, held in a <close> variable, ends the call's turn (also on an error).
  local function enter(self, what)
    if type(self) ~= "table" then return nil end   -- (the method's own use of self says what is wrong)
    local busy = rawget(self, "_state_io")
    if busy then
      error(("%s: called while %s runs on this accelerator (from its pre-hook or a registered object's "
        .. "state_dict/load_state_dict?); not allowed: it would %s the checkpoint being %s. Call it after %s returns")
        :format(what, busy, what == "save_state" and "write over" or "read or change",
          busy == "save_state" and "written" or "loaded", busy), 3)
    end
    rawset(self, "_state_io", what)
    return setmetatable({}, { __close = function() rawset(self, "_state_io", nil) end })
  end

  -- The directories above dir, as Accelerate's os.makedirs(output_dir, exist_ok=True): true, or nil and why.
  local function make_parents(dir)
    local parent = dir:match("^(.+)/[^/]+$")
    if not parent then return true end
    return C.mkdir_p(parent)
  end

  -- A turn at writing into directory d (an existing one) for `who`: a value to close when done. The main process's
  -- saves hold an exclusive flock on d (C.lock_dir) so that two processes writing there take turns, waiting with
  -- a notice said once. A save inside a save in this process (a hook's, another accelerator's) is inside its turn
  -- already: the lock is counted per directory (M._locked), not taken twice, which would wait for itself.
  local function take_turn(who, d)
    local id, iderr = C.dir_id(d)
    if not id then error(who .. ": " .. iderr, 0) end
    if M._locked[id] then
      M._locked[id] = M._locked[id] + 1
      return setmetatable({}, { __close = function() M._locked[id] = M._locked[id] - 1 end })
    end
    local lock, why = C.lock_dir(d, false)
    if not lock and why == "busy" then
      if not M._said_waiting then   -- once a process: two runs that share a directory would say it every save
        M._said_waiting = true
        io.stderr:write(("fp8lab: notice: %s: another process is writing into %s; waiting for it to finish (said "
          .. "once)\n"):format(who, d))
      end
      -- (a signal ends the wait with "interrupted": Ctrl-C's hook raises here, any other signal waits again)
      repeat lock, why = C.lock_dir(d, true) until lock or why ~= "interrupted"
    end
    if not lock then error(who .. ": " .. why, 0) end
    M._locked[id] = 1
    return setmetatable({}, { __close = function()
      M._locked[id] = M._locked[id] - 1
      if M._locked[id] == 0 then M._locked[id] = nil; lock:release() end
    end })
  end

  -- save_state([dir]) → the directory written.
  function Accelerator:save_state(dir, opts)
    local _ <close> = enter(self, "save_state")
    local pc = self.project_configuration
    -- Accelerate's save_state(output_dir, safe_serialization=True): safetensors is the only format here
    if opts ~= nil then
      if type(opts) ~= "table" then
        error(("save_state: options must be a table {safe_serialization=true}, got %s"):format(type(opts)), 2)
      end
      O.check("save_state", opts, { "safe_serialization" }, 2)
      safetensors_only("save_state", opts.safe_serialization)
    end
    if pc.automatic_checkpoint_naming then
      if dir ~= nil then error("save_state: automatic_checkpoint_naming is on: call save_state() without a directory", 2) end
      if not pc.project_dir then error("save_state: automatic_checkpoint_naming needs project_dir", 2) end
      local base = join(pc.project_dir, "checkpoints")
      local ok, err = make_parents(base)   -- project_dir and its parents, as Accelerate's os.makedirs
      if ok then ok, err = C.mkdir(base) end
      if not ok then error("save_state: " .. tostring(err), 2) end
      dir = join(base, ("checkpoint_%d"):format(pc.iteration))
    elseif type(dir) ~= "string" or dir == "" then
      error(("save_state: expected the output directory (a string), got %s"):format(tostring(dir)), 2)
    end
    no_nul("save_state", dir)
    -- a collective: a process elsewhere (this save called under `if acc:is_main_process()`) is one error on every one
    if (self.num_processes or 1) > 1 then require("fp8.distributed")._announce(self, "save_state") end
    dir = dir:gsub("/+$", "")
    local main = self.process_index == nil or self.process_index == 0
    local rank = self.process_index or 0
    local tmp = dir .. ".tmp"
    -- its working names (dir.tmp, dir.old) are one directory entry each, at most 255 bytes (NAME_MAX)
    local leaf = dir:match("[^/]*$")
    if #leaf + 4 > 255 then
      error(("save_state: the directory name %q is %d bytes; save_state writes it as <name>.tmp, and a name is at most "
        .. "255 bytes: use a name of at most 251"):format(leaf:sub(1, 24) .. "...", #leaf), 2)
    end
    -- Each step, then the processes agree on how it went (that is also the barrier between them): an error on one
    -- process (the main one's mkdir, a hook's, an unwritable state, a failed rename) is raised on every process,
    -- none is left waiting in a collective, and (cleanup) the temporary directory is removed.
    local function settle(cleanup, ok, err)
      -- without the internal source location a core error carries ("lua/fp8/checkpointing.lua:542: "), as load_state
      local mine = not ok and unplaced(err) or nil
      if mine and not mine:match("^save_state: ") then mine = "save_state: " .. mine end
      local msg = require("fp8.distributed")._first_error(self.num_processes or 1, rank, mine)
      if msg then
        -- the temporary directory goes, whatever ran short: a cleanup that fails (out of memory too) is tried again
        -- after a collection, and where it still fails the message says what was left, not the cleanup's error
        if main and cleanup then
          local okc, removed, _, why = pcall(remove_own, tmp)
          if not (okc and removed) then
            collectgarbage()
            okc, removed, _, why = pcall(remove_own, tmp)
          end
          if not (okc and removed) and exists(tmp) then
            msg = ("%s (and its temporary directory %s could not be removed: %s; it stays marked as fp8lab's, and the "
              .. "next save removes it)"):format(msg, tmp, okc and tostring(why or "entries no checkpoint wrote")
              or unplaced(tostring(removed)))
          end
        end
        error(msg, 0)
      end
    end
    local function on_main(fn)
      if not main then return true end
      return pcall(fn)
    end
    -- The main process holds a lock on dir's parent (take_turn) from here to its last rename and pruning: two
    -- processes saving into one directory (two runs given one project_dir) take turns. Without it each removed the
    -- other's working directory as a leftover, and what was left in its place refused every later save.
    local okl, held = true, nil
    if main then
      okl, held = pcall(function()
        local ok, err = make_parents(dir)
        if not ok then error("save_state: " .. err, 0) end
        local parent = dir:match("^(.*)/[^/]*$") or "."
        return take_turn("save_state", parent == "" and "/" or parent)
      end)
    end
    local _lock <close> = okl and held or nil   -- (before settle: an error on another process raises there)
    settle(false, okl, held)
    settle(false, on_main(function()
      -- the previous checkpoint back under its name first: the leftovers' removal below would delete it
      local old = stranded_old(dir)
      if old then
        local ok, err = os.rename(old, dir)
        if not ok then error("save_state: " .. tostring(err), 0) end
        os.remove(join(dir, PARTIAL))
        io.stderr:write(("fp8lab: notice: save_state: %s was missing and %s held its checkpoint (a save cut short "
          .. "between its renames); it is back under its name before this save replaces it\n"):format(dir, old))
      end
      local why = publish_refusal(dir, pc.automatic_checkpoint_naming, pc.iteration)
      if why ~= "" then error("save_state: " .. why, 0) end
    end))
    settle(true, on_main(function()
      -- the marked leftovers of a save that was cut short (publish_refusal checked them)
      for _, p in ipairs { tmp, dir .. ".old" } do remove_own(p) end
      local ok, err = make_parents(dir)
      if not ok then error("save_state: " .. err, 0) end
      ok, err = C.mkdir(tmp)
      if not ok then error("save_state: " .. err, 0) end
      mark(tmp)
    end))
    local gas = self.gradient_accumulation_steps or 1
    if main and gas > 1 and self.gradient_state.step % gas ~= 0 and not rawget(self, "_mid_window_noticed") then
      rawset(self, "_mid_window_noticed", true)
      io.stderr:write(("fp8lab: notice: save_state: saved at micro-step %d of an accumulation window of %d: the gradients "
        .. "accumulated so far are not saved (Accelerate does not save them either), so a resumed run starts this window's "
        .. "next micro-step without them; save when acc.sync_gradients is true to resume exactly\n"):format(
        self.gradient_state.step % gas, gas))
    end
    local weights = {}
    settle(true, pcall(function()
      -- fp8's generator and Lua's math.random (Accelerate's random_states_<i> keeps torch's and Python's random)
      C.write_atomic(join(tmp, ("random_states_%d.json"):format(rank)),
        C.json_encode({ fp8 = { C.rng_state() }, math_random = require("fp8._luarng").state() }))
      -- the state dicts the model files are written from: on the main process, and on every process when hooks run
      local hooks = rawget(self, "_save_hooks") or {}
      if main or #hooks > 0 then
        for i, m in ipairs(self._models) do weights[i] = m:state_dict() end
      end
      for _, hook in ipairs(hooks) do
        local models = table.move(self._models, 1, #self._models, 1, {})   -- the hook sees a copy: it may only drop weights
        run_hook("save_state", hook, models, weights, tmp)
      end
    end))
    -- every process's random state and hook files are in tmp before it is listed
    settle(true, on_main(function()
      for i, sd in ipairs(weights) do
        core.save_file(sd, join(tmp, "model" .. suffix(i) .. ".safetensors"), { format = "pt", producer = "fp8lab" })
      end
      for i, o in ipairs(self._optimizers) do
        local tensors, meta = optimizer_to_file(rawget(o, "optimizer"))
        core.save_file(tensors, join(tmp, "optimizer" .. suffix(i) .. ".safetensors"), meta)
      end
      for i, s in ipairs(self._schedulers or {}) do write_json(join(tmp, "scheduler" .. suffix(i) .. ".json"), s:state_dict()) end
      if self.scaler then write_json(join(tmp, "scaler.json"), self.scaler:state_dict()) end
      for i, obj in ipairs(self._custom or {}) do
        local st, tensors, n = custom_state_split(custom_call("save_state", obj, i, "state_dict"), i)
        local base = join(tmp, ("custom_checkpoint_%d"):format(i - 1))
        if n > 0 then core.save_file(tensors, base .. ".safetensors", { format = "fp8lab-custom" }) end
        local ok, err = pcall(C.json_encode, st)
        if not ok then
          error(("save_state: custom object %d: %s"):format(i, unplaced(err)), 0)
        end
        C.write_atomic(base .. ".json", err .. "\n")
      end
      local loaders = {}
      for i, l in ipairs(self._dataloaders or {}) do loaders[i] = loader_state(l) end
      local files = {}   -- every path in it, ours and the hooks' (folders and what is in them), every process's
      for _, rel in ipairs(tree(tmp)) do if rel ~= PARTIAL then files[#files + 1] = rel end end
      -- micro_step: gradient_state.step, the micro-step count acc:accumulate ends windows by (Accelerate's step)
      write_json(join(tmp, STATE_FILE), { fp8lab_checkpoint = M.VERSION, step = self.step,
        micro_step = self.gradient_state.step, settings = resolved_settings(self),
        files = files, dataloaders = loaders, models = #weights, optimizers = #self._optimizers,
        schedulers = #(self._schedulers or {}), custom = #(self._custom or {}), num_processes = self.num_processes or 1 })
      C.fsync_dir(tmp)
    end))
    settle(true, on_main(function()
      -- Publish: the name holds the old checkpoint, then the new one, complete, with no moment in between where it
      -- holds nothing (the two directories swap in one step; where the file system cannot, the old one is renamed
      -- aside first). An old checkpoint is marked before it moves, so what is left of it after a crash is
      -- recognisably fp8lab's under its working name (an empty directory is not: what appears in it meanwhile is
      -- someone else's); the new one loses its mark once it holds the name.
      local parent = dir:match("^(.*)/[^/]*$") or "."
      local gone
      if C.is_dir(dir) then
        local f = foreign_entries(dir)   -- again: something may have been put there while the save ran
        if #f > 0 then
          error(("save_state: %s holds %s that no fp8lab checkpoint wrote (put there during the save); nothing was "
            .. "replaced"):format(dir, entries_text(f)), 0)
        end
        local okm, merr = C.copy_mode(dir, tmp)   -- the permissions of the directory it replaces
        if not okm then error("save_state: " .. merr, 0) end
        if checkpoint_state(dir) then mark(dir) end
        if C.exchange(tmp, dir) then
          gone = tmp
        else
          gone = dir .. ".old"
          local ok, err = os.rename(dir, gone)
          if not ok then os.remove(join(dir, PARTIAL)); error("save_state: " .. tostring(err), 0) end
        end
      end
      if gone ~= tmp then
        local ok, err = os.rename(tmp, dir)
        if not ok then
          if gone then os.rename(gone, dir); os.remove(join(dir, PARTIAL)) end   -- the previous checkpoint back
          error("save_state: " .. tostring(err), 0)
        end
      end
      os.remove(join(dir, PARTIAL))
      C.fsync_dir(dir)
      C.fsync_dir(parent)
      if gone then
        local removed, f, why = remove_own(gone)
        if not removed and f then
          io.stderr:write(("fp8lab: notice: save_state: the previous %s, now %s, kept: it holds %s that no checkpoint "
            .. "wrote\n"):format(dir, gone, entries_text(f)))
        elseif not removed then
          io.stderr:write(("fp8lab: notice: save_state: the previous %s, now %s, could not be removed (%s); it stays "
            .. "marked as fp8lab's, and the next save removes it\n"):format(dir, gone, tostring(why)))
        end
      end
      if pc.automatic_checkpoint_naming and pc.total_limit then
        -- the oldest (lowest N) go, never the one just written (a run started at iteration 0 beside checkpoint_3
        -- and checkpoint_4 keeps checkpoint_0 and checkpoint_4, as Accelerate's pruning before the write does)
        local base = join(pc.project_dir, "checkpoints")
        for _, name in ipairs(C.listdir(base) or {}) do   -- a pruning cut short: its remains, if all fp8lab's
          if name:match("^checkpoint_%d+%.deleting$") then remove_own(join(base, name)) end
        end
        local all = sorted_checkpoints(base)
        local extra = #all - pc.total_limit
        for _, c in ipairs(all) do
          if extra <= 0 then break end
          if c[2] ~= dir then
            local gone_c = c[2] .. ".deleting"
            local f = foreign_entries(c[2])
            local why = #f > 0 and ("it holds " .. entries_text(f) .. " that no checkpoint wrote")
              or exists(gone_c) and (gone_c .. " is in the way") or nil
            local moved = false
            if not why then
              -- marked, then renamed, so a crash during the deletion never leaves a partial checkpoint_N behind,
              -- and what it leaves is recognisably fp8lab's under the working name
              mark(c[2])
              moved = os.rename(c[2], gone_c) ~= nil
              if not moved then os.remove(join(c[2], PARTIAL)) end
            end
            if moved then
              local removed, _, rwhy = remove_own(gone_c)
              if not removed then
                io.stderr:write(("fp8lab: notice: total_limit: %s could not be removed (%s); it stays marked as "
                  .. "fp8lab's, and the next save removes it\n"):format(gone_c, tostring(rwhy)))
              end
              extra = extra - 1
            else   -- kept, with the reason, and not counted: the next oldest goes in its place
              io.stderr:write(("fp8lab: notice: total_limit: %s kept: %s\n"):format(c[2], why or "it could not be renamed"))
            end
          end
        end
      end
    end))
    pc.iteration = pc.iteration + 1   -- Accelerate's save_iteration counts every save, named automatically or not
    self:wait_for_everyone()
    return dir
  end

  -- load_state([dir [, {strict=true}]]): every object prepared (and registered) gets its state back;
  -- on any error nothing is changed. strict=false loads despite a different recipe or model keys.
  function Accelerator:load_state(dir, opts)
    local _ <close> = enter(self, "load_state")
    local pc = self.project_configuration
    if type(dir) == "table" and opts == nil then dir, opts = nil, dir end
    opts = opts or {}
    if type(opts) ~= "table" then error(("load_state: options must be a table {strict=}, got %s"):format(type(opts)), 2) end
    O.check("load_state", opts, { "strict" }, 2)
    if opts.strict ~= nil and type(opts.strict) ~= "boolean" then
      error(("load_state: strict must be true or false, got %s"):format((type(opts.strict) == "string" and opts.strict or O.got(opts.strict))), 2)
    end
    local strict = opts.strict ~= false
    if dir == nil and not (pc.automatic_checkpoint_naming and pc.project_dir) then
      error("load_state: expected the checkpoint directory (or automatic_checkpoint_naming with project_dir)", 2)
    end
    if dir ~= nil and type(dir) ~= "string" then error(("load_state: expected a directory name, got %s"):format(type(dir)), 2) end
    no_nul("load_state", dir)
    if (self.num_processes or 1) > 1 then require("fp8.distributed")._announce(self, "load_state") end   -- a collective, as save_state
    -- Every process reads and checks, then they agree; only then does each apply, and they agree again (a process
    -- whose apply failed has undone it; the others undo theirs), so all hold the checkpoint or none does.
    local n_proc, rank = self.num_processes or 1, self.process_index or 0
    local function agreed(ok, err)
      local msg = require("fp8.distributed")._first_error(n_proc, rank, not ok and error_text(err) or nil)
      return msg == nil, msg
    end
    local past_agreement = false   -- from the first agreement on, every process takes the same path
    local ok, err = pcall(function()
      -- what this process sees of the file system (a node-local disk may differ): checked before the agreement
      if dir == nil then
        local all = sorted_checkpoints(join(pc.project_dir, "checkpoints"))
        if #all == 0 then error(("load_state: no checkpoint_N directory in %s"):format(join(pc.project_dir, "checkpoints")), 0) end
        dir = all[#all][2]
      end
      dir = dir:gsub("/+$", "")
      if not C.is_dir(dir) and stranded_old(dir) then
        error(("load_state: %s is not a directory; %s.old holds its checkpoint, moved aside by a save that was cut "
          .. "short: rename it back to %s (the next save_state into %s does that itself)"):format(dir, dir, dir, dir),
          0)
      end
      if not C.is_dir(dir) then
        error(("load_state: %s %s"):format(dir, exists(dir) and "is not a directory" or "does not exist"), 0)
      end
      local st = read_json(join(dir, STATE_FILE), join(dir, STATE_FILE) .. " (is this an fp8lab checkpoint?)")
      if type(st) ~= "table" or st.fp8lab_checkpoint ~= M.VERSION then
        error(("load_state: %s: checkpoint version %s, this build reads %d"):format(dir, tostring(type(st) == "table" and st.fp8lab_checkpoint), M.VERSION), 0)
      end
      for _, k in ipairs { "step", "micro_step" } do   -- micro_step: absent from checkpoints written before it
        if (k == "step" or st[k] ~= nil) and (math.type(st[k]) ~= "integer" or st[k] < 0) then
          error(("load_state: %s: %s is %s, expected an integer >= 0"):format(join(dir, STATE_FILE), k, tostring(st[k])), 0)
        end
      end
      if type(st.dataloaders) ~= "table" then
        error(("load_state: %s: dataloaders is %s, expected a list"):format(join(dir, STATE_FILE), type(st.dataloaders)), 0)
      end
      if st.num_processes ~= nil and not (math.tointeger(st.num_processes) and st.num_processes >= 1) then
        error(("load_state: %s: num_processes is %s, not a count of processes >= 1"):format(join(dir, STATE_FILE),
          type(st.num_processes) == "string" and ('"' .. st.num_processes .. '"') or tostring(st.num_processes)), 0)
      end
      local saved_n = math.tointeger(st.num_processes) or 1
      if saved_n ~= n_proc and strict then
        error(("load_state: %s was saved by %d process%s, this run has %d (each process's random state and the loaders' "
          .. "sharding are per process); pass {strict=false} to load anyway: a process without a saved random state "
          .. "keeps its own"):format(dir, saved_n, saved_n == 1 and "" or "es", n_proc), 0)
      end
      local d = first_difference(st.settings, resolved_settings(self), "settings")
      if d and strict then error(("load_state: %s was saved with other settings: %s (pass {strict=false} to load anyway)"):format(dir, d), 0) end
      local models = table.move(self._models, 1, #self._models, 1, {})
      for _, hook in ipairs(rawget(self, "_load_hooks") or {}) do run_hook("load_state", hook, models, dir) end   -- may take models off the list
      for _, what in ipairs { { "models", #models }, { "optimizers", #self._optimizers },
                              { "schedulers", #(self._schedulers or {}) }, { "custom", #(self._custom or {}) },
                              { "dataloaders", #(self._dataloaders or {}) } } do
        local saved = what[1] == "dataloaders" and #st.dataloaders or st[what[1]]
        if math.type(saved) ~= "integer" or saved < 0 then   -- "1" would read as "holds 1 models, this ... has 1"
          error(("load_state: %s: %s is %s, expected a count >= 0"):format(join(dir, STATE_FILE), what[1],
            type(saved) == "string" and ('"' .. saved .. '"') or tostring(saved)), 0)
        end
        if saved ~= what[2] then
          error(("load_state: %s holds %s %s, this accelerator has %d prepared"):format(dir, tostring(saved), what[1], what[2]), 0)
        end
      end
      -- Read and check everything, keeping what is needed to undo, then apply.
      local undo, apply = {}, {}
      for i, m in ipairs(models) do
        local sd = core.load_file(join(dir, "model" .. suffix(i) .. ".safetensors"))
        undo[#undo + 1] = (function(saved) return function() m:load_state_dict(saved, false) end end)(m:state_dict())
        apply[#apply + 1] = function() m:load_state_dict(sd, strict) end
      end
      for i, o in ipairs(self._optimizers) do
        local inner = rawget(o, "optimizer")
        local sd, step_count, saved_name = optimizer_from_file(join(dir, "optimizer" .. suffix(i) .. ".safetensors"))
        -- another optimizer's state (AdamW's into Adam loaded, its decoupled decay turned into an L2 one): refused by
        -- the class the file records, whatever the groups' options would let through
        if saved_name ~= nil and saved_name ~= tostring(inner.name) then
          error(("load_state: optimizer %d of %s holds %s's state, this run's optimizer is %s"):format(i, dir,
            saved_name, tostring(inner.name)), 0)
        end
        local saved, saved_count = inner:state_dict(), inner._step_count
        undo[#undo + 1] = function() inner:load_state_dict(saved); inner._step_count = saved_count end
        apply[#apply + 1] = function() inner:load_state_dict(sd); inner._step_count = step_count or inner._step_count end
      end
      for i, s in ipairs(self._schedulers or {}) do
        local sd = read_json(join(dir, "scheduler" .. suffix(i) .. ".json"))
        -- another class, or settings that give another schedule: refused before anything changes (the saved lr was
        -- overwritten by this run's schedule without a word)
        local why = strict and require("fp8.optim.lr_scheduler")._other_schedule(rawget(s, "scheduler") or s, sd)
        if why then
          error(("load_state: scheduler %d of %s: %s (make the scheduler as it was saved, or pass {strict=false} to "
            .. "keep this run's schedule from the saved step)"):format(i, dir, why), 0)
        end
        local saved = s:state_dict()
        -- (checked above; a ReduceLROnPlateau's load_state_dict takes strict too since stop 95's review: until
        -- 2026-12-06 it took the state alone and refused the false, and every load_state of a run with one failed)
        undo[#undo + 1] = function() s:load_state_dict(saved, false) end
        apply[#apply + 1] = function() s:load_state_dict(sd, false) end
      end
      local scaler_file = join(dir, "scaler.json")
      local has_scaler = C.exists(scaler_file)
      if self.scaler and not has_scaler and not strict then
        -- saved without fp16 (its settings differ, so only strict=false reaches here): the scaler keeps its own
        if self.process_index == 0 then
          io.stderr:write(("fp8lab: notice: load_state: %s has no scaler.json (saved without fp16's loss scaler): "
            .. "the GradScaler keeps its own state\n"):format(dir))
        end
      elseif self.scaler then
        local sd = read_json(scaler_file)
        local saved = self.scaler:state_dict()
        undo[#undo + 1] = function() self.scaler:load_state_dict(saved) end
        apply[#apply + 1] = function() self.scaler:load_state_dict(sd) end
      end
      for i, obj in ipairs(self._custom or {}) do
        local base = join(dir, ("custom_checkpoint_%d"):format(i - 1))
        local sd = read_json(base .. ".json")
        local names = custom_state_names(sd)
        if next(names) ~= nil then   -- its tensors, each back on the device it was saved from (the CPU without one)
          local okf, f = pcall(core.safe_open, base .. ".safetensors")
          if not okf then error(("load_state: custom object %d: %s"):format(i, unplaced(f)), 0) end
          local tensors, have = {}, {}
          for _, k in ipairs(f:keys()) do have[k] = true end
          for name, dev in next, names do
            if not have[name] then
              f:close()
              error(("load_state: %s.json names the tensor \"%s\", which %s.safetensors does not hold"):format(base, name, base), 0)
            end
            if dev ~= "cpu" and not device_available(dev) then
              if rank == 0 then   -- every process does the same: said once
                io.stderr:write(("fp8lab: notice: load_state: custom object %d: tensor \"%s\" was saved on %s, which "
                  .. "this run does not have: it comes back on the cpu\n"):format(i, name, dev))
              end
              dev = "cpu"
            end
            tensors[name] = f:get_tensor(name, { device = dev })
          end
          f:close()
          sd = custom_state_join(sd, tensors)
        end
        local saved = custom_call("load_state", obj, i, "state_dict")
        undo[#undo + 1] = function() custom_call("load_state", obj, i, "load_state_dict", saved) end
        apply[#apply + 1] = function() custom_call("load_state", obj, i, "load_state_dict", sd) end
      end
      local loaders = {}
      for i, l in ipairs(self._dataloaders or {}) do loaders[i] = restore_loader(l, st.dataloaders[i], i, rank == 0,
        self.use_stateful_dataloader == true) end
      local rs
      if rank < saved_n then
        local rs_path = join(dir, ("random_states_%d.json"):format(rank))
        rs = read_json(rs_path)
        if type(rs) ~= "table" or type(rs.fp8) ~= "table" then error(("load_state: %s has no fp8 generator"):format(rs_path), 0) end
        local shown = O.shown   -- a value of the file as a refusal shows it (a long string cut)
        for j, what in ipairs { "seed", "counter" } do
          local v = rs.fp8[j]
          if type(v) ~= "string" or #v ~= 16 or not v:match("^%x+$") then
            error(("load_state: %s: the fp8 generator's %s is %s, expected 16 hex digits"):format(rs_path, what,
              shown(v)), 0)
          end
        end
        -- Lua's math.random (since stop 96; a checkpoint saved before has none, and math.random goes on from where it
        -- is, as before). Its hex digits in either case, as fp8.set_math_random_state takes them (save_state writes
        -- lower case; upper case was refused here as not "the 64 hex digits")
        local m = rs.math_random
        if m ~= nil and not require("fp8._luarng").is_state(m) then   -- (set_math_random_state's test)
          error(("load_state: %s: math_random is %s, expected the 64 hex digits of Lua's math.random state (not all "
            .. "zero)"):format(rs_path, shown(m)), 0)
        end
        if m ~= nil then require("fp8._luarng").state() end   -- the layout check: refused here, before anything moved
      end
      past_agreement = true
      local rok, rerr = agreed(true)   -- every process has read and checked everything
      if not rok then error(rerr, 0) end
      local done = 0
      local aok, aerr = pcall(function()
        for k, f in ipairs(apply) do f(); done = k end
      end)
      local all_ok, all_err = agreed(aok, aerr)
      if not all_ok then
        -- the entry that failed may have changed something before it raised: undone too
        for k = math.min(done + (aok and 0 or 1), #undo), 1, -1 do pcall(undo[k]) end
        error(all_err, 0)
      end
      for _, f in ipairs(loaders) do f() end
      if rs then
        C.set_rng_state(rs.fp8[1], rs.fp8[2])
        if rs.math_random then require("fp8._luarng").set_state(rs.math_random) end
      end
      self.step = st.step
      if st.micro_step then self.gradient_state.step = st.micro_step end
      local n = checkpoint_number(dir:match("([^/]+)$") or "")
      if pc.automatic_checkpoint_naming and n then pc.iteration = n + 1 end
    end)
    if not ok then
      -- a process that failed before the first agreement tells the others, which wait in it
      local msg = tostring(err)
      if not past_agreement then
        local _, aerr = agreed(false, msg)
        msg = aerr or msg
      end
      -- named as save_state's are (an out of memory in a file's read said 'out of memory allocating N bytes on cpu'
      -- alone until stop 102)
      msg = unplaced(msg)
      if not msg:match("^load_state: ") then msg = "load_state: " .. msg end
      error(msg, 2)
    end
  end

  -- get_state_dict(model [, unwrap=true]): Accelerate's; the model's state_dict() (name → tensor, FP8 recipe
  -- state included). A prepared model carries no DDP wrapper here, so the names are always the unwrapped ones;
  -- unwrap=false (Accelerate's "module."-prefixed names of the wrapper) is refused.
  function Accelerator:get_state_dict(model, unwrap)
    if not require("fp8.nn.module").is_module(model) then
      error(("get_state_dict: expected a Module, got %s"):format(type(model)), 2)
    end
    if unwrap ~= nil and type(unwrap) ~= "boolean" then
      error(("get_state_dict: unwrap must be a boolean, got %s"):format(type(unwrap)), 2)
    end
    if unwrap == false then
      error("get_state_dict: unwrap=false is not supported: a prepared model has no DDP wrapper in fp8lab, so there "
        .. "are no wrapped (\"module.\") names to give; leave it true", 2)
    end
    local sd = model:state_dict()
    -- torchao's dynamically scaled layers carry no state (torchao's Float8Linear has no buffers): the weights load
    -- into a plain model as Accelerate's get_state_dict of an ao model does; te's recipe state stays (TE's _extra_state)
    if self.fp8_backend == "ao" then
      for k in next, sd do if k:match("fp8_state$") then sd[k] = nil end end
    end
    return sd
  end

  -- save(tensors, path [, metadata]): Accelerate's save (torch.save's stand-in, once per job): the main process
  -- writes the tensors as safetensors (fp8.save_file: atomically); the others write nothing.
  function Accelerator:save(tensors, path, metadata)
    if type(tensors) ~= "table" then
      error(("save: expected a table of tensors {name = tensor} (fp8.save_file's), got %s"):format(type(tensors)), 2)
    end
    if require("fp8.nn.module").is_module(tensors) then
      error("save: got a Module; pass its tensors (acc:get_state_dict(model)), or save it with acc:save_model", 2)
    end
    if type(path) ~= "string" or path == "" then error(("save: expected a file name, got %s"):format(tostring(path)), 2) end
    if self.process_index ~= nil and self.process_index ~= 0 then return end
    local ok, err = pcall(core.save_file, tensors, path, metadata)
    if not ok then error("save: " .. (unplaced(err):gsub("^save_file: ", "")), 2) end
  end

  -- save_model(model, dir [, {fp8="dequantize"|"raw"}]): the weights only (parameters and buffers, no
  -- FP8 recipe state, no O3 weight_fp8 copy) as dir/model.safetensors. FP8 tensors: fp32 values (dequantize, the default) or
  -- their bytes plus name_scale_inv (raw).
  function Accelerator:save_model(model, dir, opts)
    if not require("fp8.nn.module").is_module(model) then
      error(("save_model: expected a Module, got %s"):format(type(model)), 2)
    end
    if type(dir) ~= "string" or dir == "" then error(("save_model: expected the output directory, got %s"):format(tostring(dir)), 2) end
    no_nul("save_model", dir)
    opts = opts or {}
    if type(opts) ~= "table" then error("save_model: options must be a table {fp8=\"dequantize\"|\"raw\"}", 2) end
    O.check("save_model", opts, { "fp8", "safe_serialization", "max_shard_size" }, 2)
    -- Accelerate's save_model(model, dir, max_shard_size="10GB", safe_serialization=True)
    safetensors_only("save_model", opts.safe_serialization)
    local max_shard = shard_limit(opts.max_shard_size)
    local mode = opts.fp8 or "dequantize"
    if mode ~= "dequantize" and mode ~= "raw" then
      error(("save_model: fp8 must be \"dequantize\" or \"raw\", got %s"):format(tostring(mode)), 2)
    end
    if self.process_index ~= nil and self.process_index ~= 0 then return nil end
    local sd, out = model:state_dict(), {}
    for k, t in next, sd do
      -- derived state left out (as module.lua's fp8_hint classifies it): the FP8 recipe state, and MS-AMP O3's E4M3
      -- weight copy (made again from the fp16 master), so the file loads into a plain model
      if not (k:match("fp8_state$") or k:match("weight_fp8$")) then out[k] = (mode == "dequantize" and t:is_fp8()) and t:dequantize() or t end
    end
    -- a save_state checkpoint's directory: its model.safetensors (with the FP8 recipe state) is the checkpoint's,
    -- and a sharded save removed it as stale (load_state then failed); Accelerate's save_model into its own
    -- checkpoint loses nothing (the same weights-only file), here it would
    if C.is_dir(dir) and checkpoint_state(dir) then
      error(("save_model: %s holds a save_state checkpoint (%s); its model files are the checkpoint's own: save the "
        .. "model into another directory"):format(dir, STATE_FILE), 2)
    end
    local ok, err = make_parents((dir:gsub("/+$", "")))
    if ok then ok, err = C.mkdir(dir) end
    if not ok then error("save_model: " .. err, 2) end
    -- two processes writing one folder's shards take turns (they failed half their saves moving shards the other
    -- had moved), as save_state's do
    local tok, turn = pcall(take_turn, "save_model", dir)
    if not tok then error(turn, 2) end
    local _turn <close> = turn
    -- model.safetensors, or Accelerate's shards and index past max_shard_size (lua/fp8/model_files.lua)
    local names = {}
    local listed = {}
    for _, k in ipairs(model:state_dict_keys()) do
      if out[k] ~= nil and not listed[k] then names[#names + 1], listed[k] = k, true end
    end
    local rest = {}   -- (state_dict_keys lists every name; this keeps the file whole if one ever were missed)
    for k in next, out do if not listed[k] then rest[#rest + 1] = k end end
    table.sort(rest)
    table.move(rest, 1, #rest, #names + 1, names)
    local wok, path = pcall(model_files.write, dir, out, names, max_shard, { format = "pt", producer = "fp8lab" })
    -- a write's failure (a full disk) names the function, not this file's line
    if not wok then error("save_model: " .. (unplaced(path):gsub("^save_file: ", "")), 2) end
    return path
  end
end

local okh, help = pcall(require, "fp8.help")
if okh and help.add then
  local function add(name, sig, doc) help.add { section = "Checkpoints", name = name, sig = sig, doc = doc } end
  add("acc:register_save_state_pre_hook", "h = acc:register_save_state_pre_hook(function(models, weights, dir) ... end)",
    "Runs in save_state before the model files are written; a state dict it removes from weights is not written\n"
    .. "(the hook saves that model itself, into dir, which is published with the checkpoint). h:remove() drops it.\n"
    .. "acc:register_load_state_pre_hook(function(models, dir) ... end): a model it removes from models is not loaded.\n"
    .. "Inside a hook, save_state/load_state of the same accelerator and coroutine yields are refused.")
  add("save_file", "fp8.save_file({name = tensor, ...}, path [, {key = \"value\"}])",
    "Writes a safetensors file atomically (temp file, fsync, rename, fsync dir). FP8 tensors: their bytes as\n"
    .. "F8_E4M3/F8_E5M2 plus name..\"_scale_inv\" (F32, [1] or per row). docs/checkpoints.md.")
  add("load_file", "fp8.load_file(path [, {device=\"cpu\"|\"cuda\"}]) -> {name = tensor}",
    "Reads and validates a safetensors file; FP8 tensors come back with their scales. I64/I32/U8/BOOL load\n"
    .. "as fp32 when every value is exact there, else an error names the tensor.")
  add("safe_open", "fp8.safe_open(path [, {device=\"cpu\"|\"cuda\"}]) -> f",
    "Lazy reader: f:keys() the tensor names, sorted (an FP8 tensor's _scale_inv companion folded into it),\n"
    .. "f:metadata() the file's {key = \"value\"} metadata, f:get_tensor(name [, {device=}]) reads only that tensor\n"
    .. "(device: the one safe_open was given, by default); f:close() (also a <close> variable's end; later calls\n"
    .. "are refused).")
  -- help(f.keys), help(f): this entry (the handle's C class, lua/l_checkpoint.c's fp8.SafeOpen)
  if help.class then help.class { registry = "fp8.SafeOpen", prefix = "SafeOpen", entry = "safe_open" } end
  add("acc:save_state", "acc:save_state([dir]) -> dir",
    "Model(s), optimizer(s) (FP8 moments in their dtypes), schedulers, GradScaler, RNG, data loader positions,\n"
    .. "step and settings into dir (written as dir.tmp, renamed when complete). With\n"
    .. "project_config=fp8.ProjectConfiguration{project_dir=, automatic_checkpoint_naming=true, total_limit=N}:\n"
    .. "project_dir/checkpoints/checkpoint_<i>, keeping the last N.")
  add("acc:load_state", "acc:load_state([dir] [, {strict=true}])",
    "Restores everything save_state wrote (the latest checkpoint_<i> when dir is omitted with automatic naming).\n"
    .. "A different recipe or model is refused naming the first difference unless strict=false; a failed load\n"
    .. "changes nothing. Mid-epoch, a data loader's next loop runs the interrupted epoch again from its first batch\n"
    .. "(same order; skip the done batches: acc:skip_first_batches(loader, acc.step % #loader)), or, under\n"
    .. "DataLoaderConfiguration{use_stateful_dataloader=true}, finishes it from the next batch.")
  add("acc:save_model", "acc:save_model(model, dir [, {fp8=\"dequantize\"|\"raw\", max_shard_size=}]) -> path",
    "Weights only (no FP8 recipe state, no O3 weight_fp8 copy) as dir/model.safetensors; FP8 tensors as fp32\n"
    .. "values or raw bytes + scale. Past max_shard_size (\"10GB\", bytes): model-0000k-of-0000n.safetensors and\n"
    .. "model.safetensors.index.json, as Accelerate. fp8.load_checkpoint_in_model(model, dir) reads either back.")
  add("load_checkpoint_in_model", "fp8.load_checkpoint_in_model(model, path [, {strict=false}]) -> report",
    "Accelerate's: loads a weights file, a sharded checkpoint's index, or a folder holding model.safetensors or\n"
    .. "one *.index.json into model (load_state_dict; strict=false by default, as Accelerate). Returns\n"
    .. "{missing_keys=, unexpected_keys=}. An index that does not describe its files is refused.")
  add("ProjectConfiguration", "fp8.ProjectConfiguration{project_dir=, logging_dir=, automatic_checkpoint_naming=false, "
    .. "total_limit=, iteration=0}",
    "Accelerate's project configuration, passed as fp8.Accelerator{project_config=...}. logging_dir reads as\n"
    .. "project_dir's unless given; pc:set_directories(dir) sets both (Accelerate's).")
  if help.class then
    help.class { class = ProjectConfiguration, prefix = "ProjectConfiguration", entry = "ProjectConfiguration" }
  end
  add("acc:register_for_checkpointing", "acc:register_for_checkpointing(obj, ...)",
    "Objects with state_dict()/load_state_dict() saved as custom_checkpoint_<i>.json: plain Lua values, and fp8\n"
    .. "tensors (any depth) in custom_checkpoint_<i>.safetensors beside it; a function or other userdata is refused.")
end

-- every public method refuses arguments past its parameters (fp8.opts.strict_arity)
O.strict_arity(ProjectConfiguration, "ProjectConfiguration")
-- called from a user's code, these name themselves in their errors (fp8.opts.internal_functions; stop 101)
require("fp8.opts").internal_functions(M, "fp8.checkpointing", { "install", "project_config_from" })
return M
