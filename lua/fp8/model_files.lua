-- fp8.model_files — a model's weights as files, as Accelerate's save_model writes them and its
-- load_checkpoint_in_model reads them (docs/checkpoints.md):
--   model.safetensors                                  the weights fit max_shard_size (or make one shard)
--   model-0000k-of-0000n.safetensors + model.safetensors.index.json    past it, split as huggingface_hub splits
-- Each file is written atomically (fp8.save_file, fp8._checkpoint's write_atomic); the shards are written under
-- staged names and renamed into place once all are written; the index goes last.
local unplaced = require("fp8.errfmt").unplaced   -- an error's text without its "file:line: "
local O = require "fp8.opts"
local core = require "fp8.core"
local C = require "fp8._checkpoint"

local M = {}
M.SINGLE = "model.safetensors"
M.INDEX = "model.safetensors.index.json"
local SHARD_PATTERN = "^model%-%d%d%d%d%d%-of%-%d%d%d%d%d%.safetensors$"
local STAGED = ".staged-"   -- a new shard's name until every shard of the save is written (M.write)

-- join(dir, name) → the path of name in dir (one "/" between them); checkpointing.lua's too
local function join(a, b) return a:sub(-1) == "/" and a .. b or a .. "/" .. b end
M.join = join

-- open_file(path, mode): io.open, once more after a full collection when the process or the system is out of
-- descriptors (EMFILE 24, ENFILE 23): safe_open handles and files left to the collector hold theirs until a cycle
-- runs (the bindings' FL_LCALL rule). Every fp8 module's own io.open of a user's file goes through it (checkpointing's
-- JSON files, a sharded checkpoint's index here, log_fp8_stats' CSV): load_checkpoint_in_model and log_fp8_stats
-- still failed with "Too many open files" after stop 94.
local function open_file(path, mode)
  local f, err, code = io.open(path, mode)
  if not f and (code == 24 or code == 23) then
    collectgarbage()
    f, err = io.open(path, mode)
  end
  return f, err
end
M.open_file = open_file

-- The bytes a tensor takes in a file: its elements, and an FP8 tensor's F32 name_scale_inv beside it.
function M.file_bytes(t)
  local bytes = t:numel() * core.format(t:dtype()).bytes
  if t:is_fp8() then
    local sc = t:scale()
    bytes = bytes + 4 * (type(sc) == "number" and 1 or sc:numel())
  end
  return bytes
end

-- huggingface_hub's split_state_dict_into_shards_factory: the tensors in the state dict's order (names), a new
-- shard when the next tensor would take the current one past max bytes; a tensor bigger than max alone in a shard
-- of its own, placed where it is met (before the shard being filled). → a list of shards (lists of names), the
-- total bytes.
function M.split(names, bytes_of, max)
  local shards, current, current_bytes, total = {}, {}, 0, 0
  for _, name in ipairs(names) do
    local b = bytes_of[name]
    total = total + b
    if b > max then
      shards[#shards + 1] = { name }
    else
      if current_bytes + b > max then
        shards[#shards + 1] = current
        current, current_bytes = {}, 0
      end
      current[#current + 1] = name
      current_bytes = current_bytes + b
    end
  end
  if #current > 0 then shards[#shards + 1] = current end
  return shards, total
end

-- write(dir, tensors, names, max, metadata) → the path written (model.safetensors, or the index when sharded).
-- tensors: name → tensor; names: their order. After the new files are in place, what an earlier save_model left
-- that the new one does not use is removed (Accelerate removes the stale shards; fp8lab also removes a stale
-- model.safetensors beside a new index and a stale index beside a new model.safetensors, since a loader that
-- finds model.safetensors reads it first and would load the old weights). Nothing else in dir is touched.
function M.write(dir, tensors, names, max, metadata)
  local bytes_of = {}
  for _, n in ipairs(names) do bytes_of[n] = M.file_bytes(tensors[n]) end
  local shards, total = M.split(names, bytes_of, max)
  local keep = {}
  local written
  if #shards <= 1 then
    written = join(dir, M.SINGLE)
    core.save_file(tensors, written, metadata)
    keep[M.SINGLE] = true
  else
    -- Every shard is written under a staged name first, and the shards take their names only when all are written:
    -- a save that fails part way (a full disk) leaves the earlier save's shards as they were, where renaming each
    -- new shard over its namesake as it was written left a mix of new and old shards that the old index loaded.
    local weight_map, staged = {}, {}
    local ok, err = pcall(function()
      for k, shard in ipairs(shards) do
        local file = ("model-%05d-of-%05d.safetensors"):format(k, #shards)
        local part = {}
        for _, n in ipairs(shard) do
          part[n] = tensors[n]
          weight_map[n] = file
          if tensors[n]:is_fp8() then weight_map[n .. "_scale_inv"] = file end   -- the file's own key for its scale
        end
        staged[#staged + 1] = { STAGED .. file, file }
        core.save_file(part, join(dir, STAGED .. file), metadata)
        keep[file] = true
      end
    end)
    if not ok then
      for _, sf in ipairs(staged) do os.remove(join(dir, sf[1])) end
      error(err, 0)
    end
    -- The earlier save's index goes first: a save killed between two renames would leave new and old shards under
    -- the names that index lists, a mix it loaded without a word; with no index the folder is refused instead
    local old_index = join(dir, M.INDEX)
    if C.is_file(old_index) then
      local okr, rerr = os.remove(old_index)
      if not okr and C.is_file(old_index) then
        for _, sf in ipairs(staged) do os.remove(join(dir, sf[1])) end
        error(("cannot remove the earlier save's %s: %s"):format(M.INDEX, rerr), 0)
      end
      C.fsync_dir(dir)
    end
    for _, sf in ipairs(staged) do
      local okr, rerr = os.rename(join(dir, sf[1]), join(dir, sf[2]))
      if not okr then error(("cannot move the new shard into place: %s"):format(rerr), 0) end
    end
    C.fsync_dir(dir)
    written = join(dir, M.INDEX)
    C.write_atomic(written, C.json_encode({ metadata = { total_size = total }, weight_map = weight_map }) .. "\n")
    keep[M.INDEX] = true
  end
  local removed = false
  for _, name in ipairs(C.listdir(dir) or {}) do
    -- (a staged shard is one a save that was killed part way left)
    local ours = name == M.SINGLE or name == M.INDEX or name:match(SHARD_PATTERN)
      or name:sub(1, #STAGED) == STAGED and name:sub(#STAGED + 1):match(SHARD_PATTERN)
    if ours and not keep[name] and not C.is_dir(join(dir, name)) then
      local ok, err = os.remove(join(dir, name))
      -- gone since the listing (another save into dir removed it): what the removal was for; the save stands
      local still = not ok and io.open(join(dir, name), "rb")
      if still then
        still:close()
        error(("cannot remove the earlier save's %s: %s"):format(name, err), 0)
      end
      removed = true
    end
  end
  if removed then C.fsync_dir(dir) end
  return written
end

-- ---- load_checkpoint_in_model ----------------------------------------------------------------

local is_file = C.is_file

local function fail(fmt, ...) error("load_checkpoint_in_model: " .. fmt:format(...), 0) end

-- The files a checkpoint path names: a weights file; an index (*.json); a folder holding model.safetensors, else
-- one *.index.json (Accelerate's order). → list of files, and the index's weight_map when there is one.
local function checkpoint_files(path)
  local index
  if C.is_dir(path) then
    if is_file(join(path, M.SINGLE)) then return { join(path, M.SINGLE) } end
    local found = {}
    for _, name in ipairs(C.listdir(path) or {}) do
      if name:match("%.index%.json$") then found[#found + 1] = name end
    end
    if #found == 0 then
      local staged
      for _, name in ipairs(C.listdir(path) or {}) do
        if name:sub(1, #STAGED) == STAGED then staged = name; break end
      end
      fail("%s is not a folder holding a %s file or a sharded checkpoint's .index.json%s", path, M.SINGLE,
        staged and (" (it holds %s: a save_model into it was interrupted before its index was written; save "
          .. "again)"):format(staged) or "")
    elseif #found > 1 then
      fail("%s holds more than one .index.json (%s): delete the ones that do not belong", path,
        table.concat(found, ", "))
    end
    index = join(path, found[1])
  elseif is_file(path) then
    if not path:match("%.json$") then return { path } end
    index = path
  else
    local why = C.exists(path) and "not a regular file or a folder" or "no such file or directory"
    fail("expected a weights file, a sharded checkpoint's index, or a folder holding either, got %q (%s)", path, why)
  end
  local f, err = open_file(index, "rb")
  if not f then fail("cannot read %s: %s", index, err) end
  local text = f:read("a")
  f:close()
  local ok, doc = pcall(C.json_decode, text, index)
  if not ok then fail("%s", unplaced(doc)) end
  local map = type(doc) == "table" and doc.weight_map or doc
  if type(map) ~= "table" or next(map) == nil then fail("%s: expected a weight_map of tensor names to files", index) end
  local folder = index:match("^(.*)/[^/]*$") or "."
  local files, seen = {}, {}
  for name, file in next, map do
    if type(name) ~= "string" then   -- a JSON list (its keys 1..n): no names
      fail("%s: expected a weight_map of tensor names to files, got a list", index)
    end
    if type(file) ~= "string" or file == "" or file:find("/", 1, true) or file == ".." then
      fail("%s: the weight_map gives %q the file %s; expected a file name in the index's folder", index,
        tostring(name), O.got(file))
    end
    if not seen[file] then
      seen[file] = true
      files[#files + 1] = join(folder, file)
    end
  end
  table.sort(files)
  return files, map, folder
end

-- load(model, checkpoint [, {strict=false}]) → load_state_dict's report {missing_keys=, unexpected_keys=}.
function M.load(model, checkpoint, opts, ...)
  O.no_more("load_checkpoint_in_model", "(model, checkpoint [, opts])", ...)
  if not require("fp8.nn.module").is_module(model) then
    error(("load_checkpoint_in_model: expected a Module, got %s"):format(O.got(model)), 2)
  end
  if type(checkpoint) ~= "string" or checkpoint == "" then
    error(("load_checkpoint_in_model: expected the checkpoint's path (a file, an index or a folder), got %s")
      :format(O.got(checkpoint)), 2)
  end
  if checkpoint:find("\0", 1, true) then
    error(("load_checkpoint_in_model: the path must not contain a NUL byte, got %q"):format(checkpoint), 2)
  end
  if opts ~= nil and type(opts) ~= "table" then
    error(("load_checkpoint_in_model: options must be a table {strict=false}, got %s"):format(O.got(opts)), 2)
  end
  opts = O.check("load_checkpoint_in_model", opts or {}, { "strict" }, 2)
  local strict = opts.strict
  if strict == nil then strict = false end   -- Accelerate's default
  if type(strict) ~= "boolean" then
    error(("load_checkpoint_in_model: strict must be a boolean, got %s"):format(O.got(strict)), 2)
  end
  local ok, res = pcall(function()
    local files, map, folder = checkpoint_files(checkpoint)
    local sd, from = {}, {}
    for _, file in ipairs(files) do
      local lok, t = pcall(core.load_file, file)
      if not lok then fail("%s", unplaced(t)) end
      for k, v in next, t do
        if from[k] then fail("%q is in both %s and %s", k, from[k], file) end
        sd[k], from[k] = v, file
      end
    end
    -- an index that does not describe its files (a stale index, a shard from another save) is refused
    for name, file in next, (map or {}) do
      local path = join(folder, file)
      local base = name:match("^(.*)_scale_inv$")
      local held = from[name] == path or (base and from[base] == path and sd[base]:is_fp8())
      if not held then
        fail("the index lists %q in %s, which does not hold it%s", name, file,
          from[name] and (" (it is in " .. from[name] .. ")") or "")
      end
    end
    return model:load_state_dict(sd, { strict = strict })
  end)
  if not ok then
    local msg = unplaced(res):gsub("^load_state_dict: ", "")
    if not msg:match("^load_checkpoint_in_model: ") then msg = "load_checkpoint_in_model: " .. msg end
    error(msg, 2)
  end
  return res
end

-- called from a user's code, these name themselves in their errors (fp8.opts.internal_functions; stop 101)
require("fp8.opts").internal_functions(M, "fp8.model_files")
return M
