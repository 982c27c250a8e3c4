-- fp8.data — datasets and batching: FashionMNIST (IDX .gz files of Debian's dataset-fashion-mnist),
-- TextDataset (character level, any text file) and DataLoader (seeded shuffling, fast C gather).
local O = require "fp8.opts"
require "fp8.core"                 -- the tensor class must exist before we make tensors
local C = require "fp8._data"
local core_is_tensor = require("fp8.core").is_tensor

local M = {}

M.FASHION_MNIST_ROOT = "/usr/share/datasets/fashion-mnist"
-- Mean and std of the Fashion-MNIST training pixels (x/255), the usual normalisation constants.
M.FASHION_MNIST_MEAN = 0.2860
M.FASHION_MNIST_STD = 0.3530

M.clock = C.clock                  -- wall seconds, monotonic (scripts time their runs with it)
M.isatty = C.isatty

-- ---- option checking ----------------------------------------------------------------------

-- opts must be a table whose keys are all in `valid` (a list); errors name the unknown key and the valid ones.
local function check_keys(fname, opts, valid, level, positional)
  if type(opts) ~= "table" then
    error(("%s: expected an options table {%s=...}, got %s"):format(fname, valid[1], type(opts)), level + 1)
  end
  O.check_plain(fname, opts, level + 1)   -- (stop 102) before the copy below: a proxy's keys are not read
  if positional and rawget(opts, 1) ~= nil then   -- the dataset may come first, unnamed
    local named = {}
    for k, v in next, opts do if k ~= 1 then named[k] = v end end
    opts = named
  end
  O.check(fname, opts, valid, level + 1)
end

local function opt_type(fname, opts, key, want, default, level)
  local v = opts[key]
  if v == nil then return default end
  if type(v) ~= want then
    error(("%s: %s must be a %s, got %s"):format(fname, key, want, type(v)), level + 1)
  end
  return v
end

local function opt_int(fname, opts, key, default, min, level)
  local v = opts[key]
  if v == nil then return default end
  if math.type(v) ~= "integer" and not (type(v) == "number" and v == math.floor(v) and v == v) then
    error(("%s: %s must be an integer, got %s"):format(fname, key, v ~= v and "nan" or type(v) == "number" and tostring(v)
      or type(v)), level + 1)
  end
  local i = math.tointeger(v)
  if i == nil then   -- a whole float past 2^63 (or ±inf), which no integer holds
    error(("%s: %s must be an integer in %d..%d, got %s"):format(fname, key, min, math.maxinteger, tostring(v)),
      level + 1)
  end
  if i < min then error(("%s: %s must be >= %d, got %d"):format(fname, key, min, i), level + 1) end
  return i
end

-- (stat, never open: opening a named pipe blocks until a writer comes; the reader says what is wrong with it)
local function file_exists(path) return require("fp8._checkpoint").exists(path) end

local function check_index(fname, i, n)
  if math.type(i) ~= "integer" then
    local int = type(i) == "number" and math.tointeger(i)   -- nil for 1.5, NaN, ±inf, 2^63
    if not int then error(("%s: index must be an integer, got %s"):format(fname, type(i) == "number" and tostring(i) or type(i)), 3) end
    i = int
  end
  if i < 1 or i > n then
    error(("%s: index %d out of range 1..%d%s"):format(fname, i, n, i == 0 and " (indices are 1-based)" or ""), 3)
  end
  return i
end

-- Datasets share this metatable shape: #ds, ds[i] -> {x, y}, ds:get(i) -> x, y.
local function dataset_class(name)
  local cls = {}
  cls.__name = name
  cls.__len = function(self) return self.n end
  -- ds[i] out of 1..#ds is nil, as a Lua sequence's (ipairs(ds) stops there; ds:get(i) raises)
  cls.__index = function(self, k)
    if type(k) == "number" then
      local i = math.tointeger(k)
      if i == nil then error(("%s: index must be an integer, got %s"):format(name, tostring(k)), 2) end
      if i < 1 or i > self.n then return nil end
      return { cls.get(self, i) }
    end
    return cls[k]
  end
  cls.__tostring = function(self) return self:_describe() end
  return cls
end

-- ---- FashionMNIST -------------------------------------------------------------------------

local FashionMNIST = dataset_class("FashionMNIST")
M.FashionMNIST = FashionMNIST
FashionMNIST.classes = { "T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
                         "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot" }

-- The file for `stem` under root: the .gz Debian ships, or an unpacked copy.
local function idx_file(root, stem)
  local gz = root .. "/" .. stem .. ".gz"
  if file_exists(gz) then return gz end
  if file_exists(root .. "/" .. stem) then return root .. "/" .. stem end
  return gz
end

local function load_fashion(opts, level)
  local fname = "FashionMNIST"
  check_keys(fname, opts, { "root", "train", "normalize", "limit" }, level + 1)
  local root = opt_type(fname, opts, "root", "string", M.FASHION_MNIST_ROOT, level + 1)
  local train = opt_type(fname, opts, "train", "boolean", true, level + 1)
  local limit = opt_int(fname, opts, "limit", nil, 1, level + 1)
  local mean, std = 0, 0
  local norm = opts.normalize
  if type(norm) == "table" then   -- {mean, std} or {mean=, std=}: another key, or both forms, would be ignored
    for k in next, norm do
      if k ~= 1 and k ~= 2 and k ~= "mean" and k ~= "std" then
        error(("%s: normalize: unknown key %s (give {mean, std} or {mean=, std=})"):format(fname, tostring(k)), level + 1)
      end
    end
    if (norm[1] ~= nil or norm[2] ~= nil) and (norm.mean ~= nil or norm.std ~= nil) then
      error(("%s: normalize: give {mean, std} or {mean=, std=}, not both"):format(fname), level + 1)
    end
  end
  if norm == nil or norm == false then
    mean, std = 0, 0
  elseif norm == true then
    mean, std = M.FASHION_MNIST_MEAN, M.FASHION_MNIST_STD
  elseif type(norm) == "table" and type(norm[1] or norm.mean) == "number" and type(norm[2] or norm.std) == "number" then
    mean, std = norm[1] or norm.mean, norm[2] or norm.std
    if std <= 0 then error(("%s: normalize std must be > 0, got %g"):format(fname, std), level + 1) end
  elseif type(norm) == "table" then   -- the form is right: say which number is missing
    local what = type(norm[1] or norm.mean) ~= "number" and "mean" or "std"
    error(("%s: normalize {mean, std}: %s must be a number, got %s"):format(fname, what,
      O.got((what == "mean") and (norm[1] or norm.mean) or (norm[2] or norm.std))), level + 1)
  else
    error(("%s: normalize must be a boolean or {mean, std}, got %s"):format(fname, type(norm)), level + 1)
  end
  local split = train and "train" or "t10k"
  local ipath = idx_file(root, split .. "-images-idx3-ubyte")
  local lpath = idx_file(root, split .. "-labels-idx1-ubyte")
  for _, p in ipairs { ipath, lpath } do
    if not file_exists(p) then
      error(("%s: %s: No such file or directory — install Debian's dataset-fashion-mnist package "
             .. "(apt-get install dataset-fashion-mnist) or pass root=..."):format(fname, p), level + 1)
    end
  end
  local ok, images, rows, cols = pcall(C.load_images, ipath, mean, std)
  if not ok then error(fname .. ": " .. tostring(images), level + 1) end
  local ok2, labels = pcall(C.load_labels, lpath)
  if not ok2 then error(fname .. ": " .. tostring(labels), level + 1) end
  local n = images:size(1)
  if labels:size(1) ~= n then
    error(("%s: %s has %d images but %s has %d labels"):format(fname, ipath, n, lpath, labels:size(1)), level + 1)
  end
  -- ten classes: a label past 9 would reach the loss as a class the model does not have
  local top = n > 0 and labels:max():item() or 0
  if top > 9 then
    local at = math.tointeger(labels:argmax():item())
    error(("%s: %s: label %d at item %d is not one of the 10 classes (0..9)"):format(fname, lpath,
      math.tointeger(top), at + 1), level + 1)
  end
  if limit and limit < n then
    -- contiguous copies, so the full arrays can be freed
    images = images:narrow(1, 1, limit):contiguous()
    labels = labels:narrow(1, 1, limit):contiguous()
    n = limit
  end
  return setmetatable({ images = images, labels = labels, n = n, rows = rows, cols = cols,
                        train = train, root = root, mean = mean, std = std }, FashionMNIST)
end

-- FashionMNIST{root=, train=true, normalize=false|true|{mean, std}, limit=N}
setmetatable(FashionMNIST, { __call = function(_, opts, ...)
  O.no_more("FashionMNIST", "({root=, train=, normalize=, limit=})", ...)
  local ds = load_fashion(opts or {}, 2)   -- not a tail call: level 2 is this function's caller
  return ds
end })

function FashionMNIST:get(i)
  i = check_index("FashionMNIST:get", i, self.n)
  return self.images[i], math.tointeger(self.labels[i])
end

-- The DataLoader's fast path: a whole batch by C gather (indices 1-based).
function FashionMNIST:_batch(idx)
  return C.gather(self.images, idx), C.gather(self.labels, idx)
end

function FashionMNIST:_describe()
  return ("FashionMNIST(%s, %d images %dx%d%s)"):format(self.train and "train" or "test", self.n, self.rows,
    self.cols, self.std > 0 and (", normalised mean=%.4f std=%.4f"):format(self.mean, self.std) or "")
end

-- ---- TextDataset --------------------------------------------------------------------------

local TextDataset = dataset_class("TextDataset")
M.TextDataset = TextDataset
-- The largest text file TextDataset reads (the tokens take 4 bytes per character).
M.TEXT_MAX_BYTES = 1 << 30

-- TextDataset{path=, block_size=, text=, split="all"|"train"|"val", val_fraction=0.1}
-- Vocabulary: the distinct bytes of the whole text, sorted (so train and val splits agree).
-- path= may name a directory (Debian's /usr/share/games/fortunes): its text files, read as one corpus.
M.FORTUNES_DIR = "/usr/share/games/fortunes"

-- read_text_dir(dir, vf, fname) -> train text, val text, {{name=, bytes=}...}, the whole text (the files in
-- order: split='all'): every regular file of the
-- directory (not its subdirectories or hidden files) in name order, except binary ones (a NUL byte: the
-- strfile indexes *.dat) and copies of a file already read (Debian's *.u8 links). Each file is split on
-- its own, at the first line break after (1 - vf) of its length, so the validation text samples every
-- file rather than being the last files of the alphabet.
local function read_text_dir(dir, vf, fname, level)
  local cp = require "fp8._checkpoint"
  local read = require("fp8._fileio").read_regular
  local names, err = cp.listdir(dir)
  if not names then error(("%s: %s"):format(fname, err), level + 1) end
  local heads, tails, files, seen, total, whole = {}, {}, {}, {}, 0, {}
  for _, name in ipairs(names) do
    local p = dir:gsub("/+$", "") .. "/" .. name
    if name:sub(1, 1) ~= "." and not cp.is_dir(p) then
      local ok, s = pcall(read, p, "text file", M.TEXT_MAX_BYTES)
      if not ok then error(("%s: %s"):format(fname, tostring(s)), level + 1) end
      if #s > 0 and not s:find("\0", 1, true) and not seen[s] then
        seen[s] = true
        total = total + #s
        if total > M.TEXT_MAX_BYTES then
          error(("%s: the text files of %s exceed %d bytes (fp8.data.TEXT_MAX_BYTES)"):format(fname, dir,
            M.TEXT_MAX_BYTES), level + 1)
        end
        local cut = s:find("\n", math.floor(#s * (1 - vf)), true) or #s
        heads[#heads + 1], tails[#tails + 1] = s:sub(1, cut), s:sub(cut + 1)
        files[#files + 1] = { name = name, bytes = #s }
        whole[#whole + 1] = s
      end
    end
  end
  if #files == 0 then error(("%s: %s holds no text files"):format(fname, dir), level + 1) end
  return table.concat(heads), table.concat(tails), files, table.concat(whole)
end
local function load_text(opts, level)
  local fname = "TextDataset"
  check_keys(fname, opts, { "path", "block_size", "text", "split", "val_fraction" }, level + 1)
  local path = opt_type(fname, opts, "path", "string", nil, level + 1)
  local text = opt_type(fname, opts, "text", "string", nil, level + 1)
  if (path == nil) == (text == nil) then
    error(fname .. ": give exactly one of path= (a text file) or text= (a string)", level + 1)
  end
  if opts.block_size == nil then error(fname .. ": block_size is required (an integer >= 1)", level + 1) end
  local block = opt_int(fname, opts, "block_size", nil, 1, level + 1)
  local split = opt_type(fname, opts, "split", "string", "all", level + 1)
  if split ~= "all" and split ~= "train" and split ~= "val" then
    error(("%s: split must be one of all, train, val; got '%s'"):format(fname, split), level + 1)
  end
  if split == "all" and opts.val_fraction ~= nil then   -- it would be taken and do nothing
    error(("%s: val_fraction divides the text into the train and val splits; split='all' (the default) takes the "
      .. "whole text: pass split='train' or 'val' with it"):format(fname), level + 1)
  end
  local vf = opt_type(fname, opts, "val_fraction", "number", 0.1, level + 1)
  if not (vf > 0 and vf < 1) then error(("%s: val_fraction must be in (0, 1), got %g"):format(fname, vf), level + 1) end
  local ntrain, files
  if path and require("fp8._checkpoint").is_dir(path) then
    local head, tail, whole
    head, tail, files, whole = read_text_dir(path, vf, fname, level + 1)
    if split == "all" then text = whole else text, ntrain = head .. tail, #head end
  elseif path then
    -- a regular file of at most M.TEXT_MAX_BYTES (a named pipe would block, /dev/zero never end)
    local ok, res = pcall(require("fp8._fileio").read_regular, path, "text file", M.TEXT_MAX_BYTES)
    if not ok then error(("%s: %s"):format(fname, tostring(res)), level + 1) end
    text = res
  end
  local tokens, vocab = C.encode_bytes(text)
  local total = tokens:size(1)
  if split ~= "all" then
    ntrain = ntrain or math.floor(total * (1 - vf))
    local nsplit = split == "train" and math.max(ntrain, 1) or total - ntrain
    if nsplit > total or block >= nsplit then   -- before narrow: an empty split would fail inside it
      error(("%s: %s has %d characters in its %s split, need at least block_size + 1 = %d"):format(fname,
        path or "the text", math.min(nsplit, total), split, block + 1), level + 1)
    end
    if split == "train" then tokens = tokens:narrow(1, 1, math.max(ntrain, 1))
    else tokens = tokens:narrow(1, ntrain + 1, total - ntrain) end
    tokens = tokens:contiguous()
  end
  local ntok = tokens:size(1)
  if block >= ntok then   -- not ntok < block + 1: block + 1 wraps for math.maxinteger
    error(("%s: %s has %d characters%s, need at least block_size + 1 = %d"):format(fname,
      path or "the text", ntok, split ~= "all" and (" in its %s split"):format(split) or "", block + 1), level + 1)
  end
  local stoi, itos = {}, {}
  for i = 1, #vocab do
    local ch = vocab:sub(i, i)
    stoi[ch] = i - 1
    itos[i - 1] = ch
  end
  return setmetatable({ tokens = tokens, vocab = vocab, vocab_size = #vocab, block_size = block,
                        stoi = stoi, itos = itos, n = ntok - block, path = path, split = split, files = files },
                      TextDataset)
end

setmetatable(TextDataset, { __call = function(_, opts, ...)
  O.no_more("TextDataset", "({path= | text= | dir=, block_size=, ...})", ...)
  local ds = load_text(opts or {}, 2)   -- not a tail call: level 2 is this function's caller
  return ds
end })

-- ds:get(i) -> x [T], y [T]: tokens i..i+T-1 and the next ones (ids 0-based).
function TextDataset:get(i)
  i = check_index("TextDataset:get", i, self.n)
  local x, y = C.windows(self.tokens, { i }, self.block_size)
  return x:view(self.block_size), y:view(self.block_size)
end

function TextDataset:_batch(idx)
  return C.windows(self.tokens, idx, self.block_size)
end

-- ds:blocks([max]) -> a dataset of the text's non-overlapping windows (one every block_size characters),
-- evenly thinned to at most max of them: a fixed evaluation set that covers the whole split, the same
-- for every run (a DataLoader over it without shuffle gives the same batches each time).
local Blocks = dataset_class("TextBlocks")
function TextDataset:blocks(max)
  if max ~= nil and (math.type(max) ~= "integer" or max < 1) then
    error(("TextDataset:blocks: max must be an integer >= 1, got %s"):format(O.got(max)), 2)
  end
  local all = (self.n - 1) // self.block_size + 1      -- windows starting at 1, 1+T, 1+2T, ... <= n
  local k = math.min(all, max or all)
  local starts = {}
  for j = 0, k - 1 do starts[j + 1] = (j * all) // k * self.block_size + 1 end
  return setmetatable({ ds = self, starts = starts, n = k, block_size = self.block_size }, Blocks)
end
function Blocks:get(i)
  i = check_index("TextBlocks:get", i, self.n)
  return self.ds:get(self.starts[i])
end
function Blocks:_batch(idx)
  local s = {}
  for k, i in ipairs(idx) do s[k] = self.starts[i] end
  return self.ds:_batch(s)
end
function Blocks:_describe()
  return ("TextBlocks(%d windows of %d characters)"):format(self.n, self.block_size)
end

-- ds:encode("text") -> 1-D tensor of ids; a character outside the vocabulary is an error naming it.
function TextDataset:encode(s)
  if type(s) ~= "string" then error(("encode: expected a string, got %s"):format(type(s)), 2) end
  local ids = {}
  for i = 1, #s do
    local ch = s:sub(i, i)
    local id = self.stoi[ch]
    if not id then error(("encode: character %q (byte %d) is not in the vocabulary of %d characters"):format(ch, ch:byte(), self.vocab_size), 2) end
    ids[i] = id
  end
  local fp8 = require "fp8"
  if #ids == 0 then return fp8.zeros(0) end
  return fp8.tensor(ids)
end

-- ds:decode(ids) with ids a tensor (any shape, read row-major) or a list of numbers -> string.
function TextDataset:decode(ids)
  local list
  if type(ids) == "table" then list = ids
  elseif type(ids) == "userdata" and ids._values then list = ids:_values()
  else error(("decode: expected a tensor or a list of token ids, got %s"):format(type(ids)), 2) end
  local out = {}
  for i = 1, rawlen(list) do   -- raw: a table whose __len/__index lie must not loop for ever
    local id = rawget(list, i)
    local ch = self.itos[math.tointeger(id) or -1]
    if not ch then error(("decode: token id %s at position %d is not in 0..%d"):format(tostring(id), i, self.vocab_size - 1), 2) end
    out[i] = ch
  end
  return table.concat(out)
end

-- The device batches come out on; a bad one is blamed `level` levels up.
local function set_device(self, device, level)
  if device ~= "cpu" and device ~= "cuda" then
    error(("DataLoader:to: device must be \"cpu\" or \"cuda\", got %s"):format(type(device) == "function"
      and "a function (the Accelerator's device is a method: loader:to(acc:device()))" or tostring(device)), level)
  end
  if device == "cuda" then   -- here, as a module's :to refuses it, not at the first batch
    local okc, cuda = pcall(require, "fp8.cuda")
    if not (okc and cuda.is_available()) then
      error("DataLoader: device cuda is not available here (fp8.cuda.is_available() is false)", level)
    end
  end
  local f = rawget(self, "_fixed")
  if f then f.device = device else self.device = device end
  return self
end

function TextDataset:_describe()
  return ("TextDataset(%s, %d tokens, vocab %d, block %d)"):format(self.path or "<string>", self.tokens:size(1),
    self.vocab_size, self.block_size)
end

-- ---- DataLoader ---------------------------------------------------------------------------

-- splitmix64: a tiny seeded generator of our own, so shuffling neither reads nor disturbs
-- math.random or the tensor RNG (same seed + epoch → same order, whatever else the script does).
local function splitmix(state)
  local z = state[1] + 0x9E3779B97F4A7C15
  state[1] = z
  z = (z ~ (z >> 30)) * -4658895280553007687   -- 0xBF58476D1CE4E5B9
  z = (z ~ (z >> 27)) * -7723592293110705685   -- 0x94D049BB133111EB
  return z ~ (z >> 31)
end

local MAX_SHUFFLE = 1 << 28   -- the items a shuffled loader orders (permutation's list: 4 GiB)
local function permutation(n, seed, epoch)
  local state = { seed * 1000003 + epoch * 0x632BE59BD9B4E019 }
  local p = {}
  for i = 1, n do p[i] = i end
  for i = n, 2, -1 do
    local j = (splitmix(state) >> 11) % i + 1      -- 53 high bits: non-negative, ample range
    p[i], p[j] = p[j], p[i]
  end
  return p
end

local DataLoader = {}
DataLoader.__name = "DataLoader"
-- total_batch_size: Accelerate's prepared loader's (the samples a step takes across the processes): here, in one
-- process, the batch size; a loader sharded across processes answers its own (lua/fp8/distributed.lua)
-- The settings a loader is made with (and its dataset, its length, its device) are read-only fields: a write was
-- taken without the constructor's checks (batch_size = 0 divided by zero, 2.5 failed inside a format; shuffle =
-- true skipped the seed's check; under launch, one process's write cut other shards than the others'). torch
-- refuses them too ("batch_size attribute should not be set after DataLoader is initialized").
local FIXED = { dataset = true, n = true, batch_size = true, shuffle = true, drop_last = true, seed = true,
                device = true }
function DataLoader.__index(t, k)
  local f = rawget(t, "_fixed")
  if k == "total_batch_size" then return f.batch_size end
  if FIXED[k] then return f[k] end
  return DataLoader[k]
end
function DataLoader.__newindex(t, k, v)
  if FIXED[k] then
    error(("DataLoader: %s should not be set after the DataLoader is made (make a new one%s)"):format(tostring(k),
      k == "device" and ", or call loader:to(device)" or ""), 2)
  end
  rawset(t, k, v)
end
-- Accelerate's data_seed (prepare): the seed of a shuffling loader
function DataLoader:_set_seed(seed) rawget(self, "_fixed").seed = seed end
M.DataLoader = DataLoader

local function dataset_len(ds)
  local n
  local mt = getmetatable(ds)
  if (mt and mt.__len) or type(ds) == "table" then n = #ds end
  -- a length that is not a whole number (inf, NaN, 3.5, "3" from __len) would loop for ever or index by floats
  if n ~= nil and (type(n) ~= "number" or not math.tointeger(n)) then
    error(("DataLoader: the dataset's length must be an integer, got %s %s"):format(type(n), tostring(n)), 3)
  end
  if n ~= nil and n < 0 then   -- torch: "__len__() should return >= 0"
    error(("DataLoader: the dataset's length must be >= 0, got %d"):format(n), 3)
  end
  return n and math.tointeger(n)
end

-- The length is read when the loader is made (#loader, the shuffled order, the shards are cut from it); torch reads
-- it at every epoch. A dataset that grew or shrank since would lose items, or index past its end: refused.
function DataLoader:_check_len()
  local ok, now = pcall(dataset_len, self.dataset)
  if ok and now == self.n then return end
  error(("DataLoader: the dataset's length changed from %d to %s since the loader was made: make a new DataLoader")
    :format(self.n, ok and tostring(now) or "an error (" .. tostring(now) .. ")"), 0)
end

-- DataLoader{dataset, batch_size=1, shuffle=false, drop_last=false, seed=0, device="cpu"}
setmetatable(DataLoader, { __call = function(_, opts, ...)
  local fname = "DataLoader"
  -- torch's DataLoader(ds, batch_size=...) written as DataLoader(ds, {...}) or DataLoader(items): the options are one
  -- table that holds the dataset (its options were dropped, or the items read as options)
  local takes = "DataLoader takes one options table holding the dataset: DataLoader{ds, batch_size=..., ...}"
  if type(opts) == "table" and (getmetatable(opts) ~= nil or (type(opts[1]) == "table" and opts[2] ~= nil)) then
    error(("%s, got %s"):format(takes, getmetatable(opts) ~= nil and "a dataset" or "a list of items"), 2)
  end
  if select("#", ...) > 0 then error(("%s; got %d more argument%s"):format(takes, select("#", ...),
    select("#", ...) == 1 and "" or "s"), 2) end
  check_keys(fname, opts, { "dataset", "batch_size", "shuffle", "drop_last", "seed", "device" }, 2, true)
  if opts.dataset ~= nil and opts[1] ~= nil then   -- one of the two would be dropped
    error(fname .. ": the dataset is given twice (first and as dataset=): give it once", 2)
  end
  local ds = opts.dataset or opts[1]
  if type(ds) ~= "table" then
    error(("%s: dataset must be a dataset (FashionMNIST, TextDataset or a table of items), got %s"):format(fname, type(ds)), 2)
  end
  local n = dataset_len(ds)
  if not n or n < 1 then error(fname .. ": dataset is empty (or has no length)", 2) end
  local self = setmetatable({
    _fixed = { dataset = ds, n = n,
      batch_size = opt_int(fname, opts, "batch_size", 1, 1, 2),
      shuffle = opt_type(fname, opts, "shuffle", "boolean", false, 2),
      drop_last = opt_type(fname, opts, "drop_last", "boolean", false, 2),
      seed = opt_int(fname, opts, "seed", 0, -math.maxinteger, 2) },
    epoch = 0,          -- epochs started so far; the next one is epoch + 1
  }, DataLoader)
  if opts.seed ~= nil and not self.shuffle then   -- it orders the shuffle only: not kept for nothing
    error(("%s: seed orders the shuffle, and takes effect only with shuffle=true (got seed=%s)"):format(fname,
      tostring(opts.seed)), 2)
  end
  -- the shuffled order is a list of every index, made each epoch (16 bytes an entry): past 2^28 items (4 GiB) it
  -- would take the machine's memory until the system killed the process
  if self.shuffle and n > MAX_SHUFFLE then
    error(("%s: shuffle=true orders all %s items in memory, 16 bytes each; at most %d (2^28) here: shuffle a "
      .. "smaller dataset, or shuffle within the dataset and load it unshuffled"):format(fname, O.got(n), MAX_SHUFFLE), 2)
  end
  set_device(self, opts.device or "cpu", 3)
  if self.drop_last and n < self.batch_size then
    error(("%s: drop_last with batch_size %d leaves no batch from %d items"):format(fname, self.batch_size, n), 2)
  end
  return self
end })

function DataLoader:__len()
  if self.drop_last then return self.n // self.batch_size end
  return self.n // self.batch_size + (self.n % self.batch_size > 0 and 1 or 0)   -- n + bs - 1 overflows for a huge bs
end

function DataLoader:__tostring()
  return ("DataLoader(%d items, batch_size=%d, %d batches%s%s)"):format(self.n, self.batch_size, #self,
    self.shuffle and (", shuffle seed=%d"):format(self.seed) or "", self.drop_last and ", drop_last" or "")
end

-- to(device): batches come out on "cpu" (the default) or "cuda" (what Accelerator:prepare sets).
function DataLoader:to(device) return set_device(self, device, 2) end

-- Fix the epoch number of the next iteration (the shuffle order depends on seed and epoch).
function DataLoader:set_epoch(e)
  if math.type(e) ~= "integer" or e < 1 then error("set_epoch: expected an integer >= 1, got " .. tostring(e), 2) end
  self.epoch = e - 1
end

-- Generic datasets: stack items (tensors of one shape, or numbers) into batch tensors; tensors keep their dtype.
local function stack(items)
  local fp8 = require "fp8"
  local first = items[1]
  if type(first) == "number" then return fp8.tensor(items) end
  if core_is_tensor(first) then return fp8.stack(items, 1) end
  return items   -- anything else: the list itself
end

-- stack, with an error that names the loader and the dataset items (not a line of this file)
local function collate(what, vals, idx)
  local ok, r = pcall(stack, vals)
  if ok then return r end
  if M._is_oom(r) then error(r, 0) end   -- named by the loader's batch (M._oom_named), not as items that do not fit
  local shown = table.concat(idx, ", ", 1, math.min(#idx, 8)) .. (#idx > 8 and ", ..." or "")
  error(("DataLoader: the %ss of dataset items %s do not make one batch: %s"):format(what, shown,
    require("fp8.errfmt").unplaced(r)), 0)
end

local function slow_batch(ds, idx)
  local xs, ys = {}, {}
  for b, i in ipairs(idx) do
    local x, y
    if ds.get then
      local r = table.pack(ds:get(i))
      for k = 3, r.n do   -- a third value (a mask, say) would be dropped silently, as a third field of {x, y}
        if r[k] ~= nil then
          error(("DataLoader: the dataset's get(%d) returned %d values; a batch holds x and y (two at most)")
            :format(i, r.n), 0)
        end
      end
      x, y = r[1], r[2]
    else
      local item = ds[i]
      if item == nil then error(("DataLoader: the dataset has no item %d (its length says %d)"):format(i, #ds), 0) end
      if type(item) == "table" and getmetatable(item) == nil then
        -- {x, y} or {x}: anything else (a record, a third field) would be dropped silently
        for k in next, item do
          if k ~= 1 and k ~= 2 then
            error(("DataLoader: item %d must be {x, y} (or {x}), got a table with the key %s"):format(i, tostring(k)), 0)
          end
        end
        x, y = item[1], item[2]
      else
        x = item
      end
    end
    if x == nil then error(("DataLoader: item %d has no x (nil)"):format(i), 0) end
    -- a y on some items only would stack fewer ys than xs (or none), pairing each x with another's label
    if b > 1 and (y == nil) ~= (ys[1] == nil) then
      local with, without = y ~= nil and i or idx[1], y ~= nil and idx[1] or i
      error(("DataLoader: item %d has a y but item %d has none, in one batch: give every item a y, or none")
        :format(with, without), 0)
    end
    xs[b], ys[b] = x, y
  end
  return collate("x", xs, idx), ys[1] ~= nil and collate("y", ys, idx) or nil
end

-- ---- the gradient state's active loaders ------------------------------------------------------------
-- Accelerate's GradientState keeps the loaders being looped over; end_of_dataloader (what ends an accumulation
-- window) and remainder (what gather_for_metrics cuts) are the active one's, and a finished loop drops its loader so
-- the one around it is active again (an eval loop inside a training step leaves the training loop's flag as it was).
-- Here the active one is the loader that served the last batch; a loop restarted, or finished, drops its old entry.
local function active_list(gs)   -- created on first use (acc:free_memory() inside a loop starts it afresh)
  local l = gs._active
  if not l then l = {}; gs._active = l end
  return l
end

local function active_drop(l, st)
  for i = #l, 1, -1 do if l[i] == st or l[i].owner == st then table.remove(l, i) end end
end

-- A loop of `owner` starts: its entry (remainder: the real samples of a short last round, which gather_for_metrics
-- keeps; 0 if none).
function M._active_begin(gs, owner, remainder)
  local l = active_list(gs)
  active_drop(l, owner)
  local st = { owner = owner, end_of_dataloader = false, remainder = remainder or 0 }
  l[#l + 1] = st
  return st
end

-- The loop asks for batch b of n: it becomes the active one, its last batch out when b == n; past n it is over and
-- its entry goes. end_of_dataloader follows the active entry (false outside every loop).
function M._active_step(gs, st, b, n)
  local l = active_list(gs)
  active_drop(l, st)
  if b <= n then
    st.end_of_dataloader = b == n
    l[#l + 1] = st
  end
  local top = l[#l]
  gs.end_of_dataloader = top ~= nil and top.end_of_dataloader or false
end

-- The active loop's entry, or nil outside every prepared loop.
function M._active(gs) return gs and gs._active and gs._active[#gs._active] or nil end

-- ---- out of memory in a loader's own work ------------------------------------------------------------
-- A loader that ran short of memory raised Lua's bare 'not enough memory' (its shuffle's permutation, a batch's
-- index list and collation are Lua tables) or the core's 'out of memory allocating N bytes on cpu' without a name
-- (stop 102's sweep). Its own steps run protected now, and a memory error comes out as
-- '<Loader>: out of memory <what it was doing> (<the message>)'; any other error passes unchanged.
function M._is_oom(e)
  return type(e) == "string" and (e:find("not enough memory", 1, true) ~= nil or e:find("out of memory", 1, true) ~= nil)
end

-- the results of pcall(f, ...) as f's, or its memory error named by name and what() (made only then)
local function named(name, what, ok, ...)
  if ok then return ... end
  local e = ...
  if not M._is_oom(e) or e:find(name .. ": out of memory ", 1, true) == 1 then error(e, 0) end
  error(("%s: out of memory %s (%s)"):format(name, what(), require("fp8.errfmt").unplaced(e)), 0)
end

-- f(...) with its memory error named: name (the loader's class), what() (what it was doing, for the message)
function M._oom_named(name, what, f, ...) return named(name, what, pcall(f, ...)) end
local oom_named = M._oom_named

-- the shuffled order of an epoch, named where it does not fit
function M._order_of(name, n, seed, epoch)
  return oom_named(name, function()
    return ("ordering the %d items of epoch %d (shuffle=true: a list of every index, 16 bytes each)"):format(n, epoch)
  end, permutation, n, seed, epoch)
end

-- make(...): the batch of nidx dataset indices (b: its number in the epoch, nb: the epoch's count), named where it does
-- not fit: the dataset's fast gather, or its items' collation (a dataset's own code may raise its own errors there,
-- which pass unchanged)
function M._batch_named(name, b, nb, nidx, make, ...)
  return oom_named(name, function()
    return ("making batch %d of %d (%d dataset items: their gathering or collation)"):format(b, nb, nidx)
  end, make, ...)
end

-- loader:iter() -> an iterator over one epoch: for x, y in loader:iter() do ... end
function DataLoader:iter()
  self:_check_len()
  self.epoch = self.epoch + 1
  local order
  if self.shuffle then order = M._order_of("DataLoader", self.n, self.seed, self.epoch) end
  local nb, bs, n, ds = #self, self.batch_size, self.n, self.dataset
  local fast = ds._batch
  -- A checkpoint restored mid-epoch (lua/fp8/checkpointing.lua) resumes after the batches already served.
  local b = self._resume_at or 0
  self._resume_at = nil
  self.batches_served = b     -- of the current epoch
  local gs = rawget(self, "_gradient_state")   -- set by Accelerator:prepare (end of an accumulation window)
  -- Accelerate's remainder: the samples of a short last batch, which gather_for_metrics cuts its result to there
  local st = gs and M._active_begin(gs, self, not self.drop_last and n % bs or 0)
  return function()
    b = b + 1
    -- true while the last batch is out; once the loop ends the loader is dropped, as Accelerate's gradient state
    -- forgets a finished loader (accumulate calls after it count micro-steps again, or follow an enclosing loop)
    if gs then M._active_step(gs, st, b, nb) end
    if b > nb then return nil end
    self.batches_served = b
    return M._batch_named("DataLoader", b, nb, math.min(b * bs, n) - (b - 1) * bs, function()
      local lo = (b - 1) * bs + 1
      local hi = math.min(lo + bs - 1, n)
      local idx = {}
      for k = lo, hi do idx[k - lo + 1] = order and order[k] or k end
      local x, y
      if fast then x, y = fast(ds, idx) else x, y = slow_batch(ds, idx) end
      local dev = self.device
      if dev ~= "cpu" then
        if core_is_tensor(x) then x = x:to(dev) end
        if core_is_tensor(y) then y = y:to(dev) end
      end
      return x, y
    end)
  end
end

-- The batch of the given 1-based dataset indices, on the loader's device (used by the sharded loader of
-- Accelerator:prepare under several processes, lua/fp8/distributed.lua, with its seeded permutation).
DataLoader._permutation = permutation
function DataLoader:_batch_of(idx)
  local ds = self.dataset
  local x, y
  if ds._batch then x, y = ds._batch(ds, idx) else x, y = slow_batch(ds, idx) end
  if self.device ~= "cpu" then
    if core_is_tensor(x) then x = x:to(self.device) end
    if core_is_tensor(y) then y = y:to(self.device) end
  end
  return x, y
end

-- `for x, y in loader do`: the generic for calls the loader with control value nil first, which
-- starts a new epoch; later calls get the previous x and continue the loop that made it. Each loop has its own
-- iterator, found by the batch it returned last (a weak table: a loop left by `break` leaves nothing behind), so a
-- loop over the same loader inside another (an evaluation pass inside training) does not restart the outer one,
-- as torch's iter() per loop. The same for every loader kind (DataLoader, SkipDataLoader, the DataLoaderShard of
-- lua/fp8/distributed.lua); the iterators are kept raw.
local function loop_call(self, _, control)
  local by = rawget(self, "_by_batch")
  local it = control ~= nil and by and by[control] or nil
  if not it and control ~= nil and type(control) ~= "table" and type(control) ~= "userdata" then
    it = rawget(self, "_it")   -- a batch that cannot key the table (a number): the last loop's iterator
  end
  if not it then it = self:iter() end
  local x, y = it()
  if by and control ~= nil then by[control] = nil end
  if x == nil then
    if rawget(self, "_it") == it then rawset(self, "_it", nil) end
    return nil
  end
  if type(x) == "table" or type(x) == "userdata" then
    if not by then by = setmetatable({}, { __mode = "k" }); rawset(self, "_by_batch", by) end
    by[x] = it
  end
  rawset(self, "_it", it)
  return x, y
end
M._loop_call = loop_call
DataLoader.__call = loop_call

-- ---- skip_first_batches -------------------------------------------------------------------
-- Accelerate's skip_first_batches(dataloader, num_batches): a loader over the same loader whose every
-- iteration leaves out the first num_batches batches of its epoch, the way to resume in the middle of an
-- epoch. It reads its batches from the loader it wraps (a DataLoader or a prepared DataLoaderShard), so
-- the epoch count, the shuffled order, the position a checkpoint saves and the end of an accumulation
-- window are that loader's.
local SkipDataLoader = { __name = "SkipDataLoader" }
M.SkipDataLoader = SkipDataLoader

function SkipDataLoader.__index(t, k)
  local v = rawget(SkipDataLoader, k)
  if v ~= nil then return v end
  return rawget(t, "loader")[k]   -- dataset, batch_size, epoch, ... of the wrapped loader
end

-- is_loader(v): a DataLoader, or a DataLoaderShard (a loader prepared under several processes,
-- lua/fp8/distributed.lua): what skip_first_batches wraps and what save_state records a position of.
function M.is_loader(v)
  if type(v) ~= "table" then return false end
  return getmetatable(v) == DataLoader
    or (package.loaded["fp8.distributed"] ~= nil and require("fp8.distributed").is_sharded(v))
end

-- _skip(fname, loader, num_batches, level): the checks and the wrapper, for fp8.data.skip_first_batches,
-- fp8.skip_first_batches and Accelerator:skip_first_batches; level is error()'s level as the calling
-- function sees it (2: its caller).
function M._skip(fname, loader, num_batches, level)
  level = level + 1
  if getmetatable(loader) == SkipDataLoader then
    error(("%s: the loader already skips %d batches; call it on the loader it wraps (loader.loader)")
      :format(fname, rawget(loader, "skip_batches")), level)
  end
  if not M.is_loader(loader) then
    error(("%s: expected a DataLoader as argument #1, got %s"):format(fname,
      type(loader) == "table" and (tostring((getmetatable(loader) or {}).__name or "a table")) or type(loader)), level)
  end
  local nb = #loader
  if num_batches == nil then num_batches = 0 end   -- Accelerate's default
  if math.type(num_batches) ~= "integer" or num_batches < 0 or num_batches > nb then
    error(("%s: num_batches must be an integer from 0 to the loader's %d batches, got %s")
      :format(fname, nb, tostring(num_batches)), level)
  end
  return setmetatable({ loader = loader, skip_batches = num_batches }, SkipDataLoader)
end

function M.skip_first_batches(loader, num_batches, ...)
  require("fp8.opts").no_more("skip_first_batches", "(loader [, num_batches=0])", ...)
  local s = M._skip("skip_first_batches", loader, num_batches, 2)   -- not a tail call: level 2 is this function's caller
  return s
end

local function base_loader(l)
  return getmetatable(l) == DataLoader and l or rawget(l, "_loader")   -- a DataLoaderShard keeps its DataLoader
end

-- One epoch of the wrapped loader from batch skip_batches + 1. A position that acc:load_state restored
-- (the next loop finishes an interrupted epoch) gives way to skip_batches: the same epoch, from that batch.
function SkipDataLoader:iter()
  local l, n = rawget(self, "loader"), rawget(self, "skip_batches")
  local base = base_loader(l)
  local restored = rawget(base, "_resume_at")
  if restored and restored ~= n and not rawget(self, "_told") then
    rawset(self, "_told", true)
    local ok, D = pcall(require, "fp8._dist")
    if not ok or D.info().rank == 0 then   -- one notice per job, as the Accelerator's
      io.stderr:write(("fp8lab: notice: skip_first_batches: acc:load_state had this loader resume epoch %d after batch %d; "
        .. "it resumes after batch %d, as asked\n"):format(base.epoch + 1, restored, n))
    end
  end
  rawset(base, "_resume_at", n > 0 and n or nil)
  return l:iter()
end

function SkipDataLoader:__len() return math.max(0, #rawget(self, "loader") - rawget(self, "skip_batches")) end

function SkipDataLoader:__tostring()
  return ("SkipDataLoader(skips %d of the %d batches of %s)"):format(rawget(self, "skip_batches"),
    #rawget(self, "loader"), tostring(rawget(self, "loader")))
end

SkipDataLoader.__call = loop_call

function SkipDataLoader:set_epoch(e) return rawget(self, "loader"):set_epoch(e) end
function SkipDataLoader:to(device)
  set_device(rawget(self, "loader"), device, 3)
  return self
end

-- ---- help ---------------------------------------------------------------------------------

local ok, help = pcall(require, "fp8.help")
if ok and help.add then
  local sec = "Training"
  help.add { section = sec, name = "data.FashionMNIST", sig = "fp8.data.FashionMNIST{root=, train=true, normalize=false, limit=}",
    doc = "Fashion-MNIST from the IDX .gz files of Debian's dataset-fashion-mnist package\n"
       .. "(/usr/share/datasets/fashion-mnist). ds.images [N,784] fp32 in [0,1] (or (x-mean)/std with\n"
       .. "normalize=true or {mean, std}), ds.labels [N] (0..9), ds.classes, #ds, ds:get(i) -> x, y, ds[i] -> {x, y}.\n"
       .. "fp8.data.FASHION_MNIST_ROOT is the default root; FASHION_MNIST_MEAN (0.2860) and FASHION_MNIST_STD (0.3530),\n"
       .. "the training pixels' mean and std, are what normalize=true uses." }
  for _, n in ipairs { "data.FASHION_MNIST_ROOT", "data.FASHION_MNIST_MEAN", "data.FASHION_MNIST_STD" } do
    help.ALIASES[n] = "data.FashionMNIST"
  end
  help.add { section = sec, name = "data.TextDataset",
    sig = "fp8.data.TextDataset{path=|text=, block_size=, split='all'|'train'|'val', val_fraction=0.1}",
    doc = "Character-level text: vocabulary = the file's distinct bytes, sorted. ds:get(i) -> x[T], y[T] (y shifted by one),\n"
       .. "ds.vocab_size, ds:encode(str) -> ids tensor, ds:decode(tensor or list) -> string.\n"
       .. "path= must name a regular file of at most fp8.data.TEXT_MAX_BYTES bytes (1 GiB; a named pipe or a device is refused),\n"
       .. "or a directory (fp8.data.FORTUNES_DIR): its text files as one corpus, each split train/val on its own.\n"
       .. "split='train' is the first 1 - val_fraction of the text, 'val' the rest (val_fraction with split='all':\n"
       .. "refused).\n"
       .. "ds:blocks([max]) -> the non-overlapping windows (at most max, evenly spaced): a fixed evaluation set.\n"
       .. "Fields: tokens (the split's ids, a 1-d tensor), vocab (the vocabulary as one string), vocab_size,\n"
       .. "stoi (character -> id) and itos (id -> character), ids 0-based; block_size; n (#ds, the windows);\n"
       .. "path, split, files (a directory's files read)." }
  for _, n in ipairs { "data.TEXT_MAX_BYTES", "data.FORTUNES_DIR" } do help.ALIASES[n] = "data.TextDataset" end
  help.add { section = sec, name = "data.DataLoader", sig = "fp8.data.DataLoader{dataset, batch_size=1, shuffle=false, drop_last=false, seed=0, device=\"cpu\"}",
    doc = "for x, y in loader do ... end  — one epoch per loop; shuffling depends only on seed and epoch number.\n"
       .. "#loader is the number of batches; loader:set_epoch(e) picks the epoch; loader:iter() gives an explicit iterator;\n"
       .. "loader:to(\"cuda\") hands out batches on the GPU (Accelerator:prepare does this).\n"
       .. "loader.total_batch_size: the samples one step takes across the processes (Accelerate's prepared\n"
       .. "loader's; batch_size in one process)." }
  help.add { section = sec, name = "skip_first_batches", sig = "fp8.skip_first_batches(loader [, num_batches=0]) (also "
      .. "fp8.data.skip_first_batches)  or  acc:skip_first_batches(loader [, num_batches=0]) -> a SkipDataLoader",
    doc = "Accelerate's skip_first_batches: a loader whose every loop leaves out the first num_batches batches of its epoch\n"
       .. "(0 to #loader); #skipper = #loader - num_batches. It reads the loader it wraps (a DataLoader or a prepared one), so\n"
       .. "the shuffled order, the epoch count and the position save_state records are that loader's. After acc:load_state of\n"
       .. "a loader saved mid-epoch its next loop runs that epoch again, and the skip of the done batches resumes it in\n"
       .. "place (Accelerate's recipe); under use_stateful_dataloader=true load_state restores the position itself and a\n"
       .. "skip resumes after num_batches (a notice says so where that differs from the restored position).\n"
       .. "The result is of class fp8.data.SkipDataLoader: loops and iter() as a loader's, #, set_epoch(e) and to(device)\n"
       .. "passed to the loader it wraps (skipper.loader; skipper.skip_batches the count), acc:prepare takes it." }
  help.ALIASES["data.skip_first_batches"] = "skip_first_batches"
  help.ALIASES["data.SkipDataLoader"] = "skip_first_batches"
  if help.class then
    help.class { class = SkipDataLoader, prefix = "SkipDataLoader", entry = "skip_first_batches",
                 names = { "data.SkipDataLoader" } }
  end
end

-- every public method refuses arguments past its parameters (fp8.opts.strict_arity)
O.strict_arity(DataLoader, "DataLoader")
O.strict_arity(SkipDataLoader, "SkipDataLoader")
O.strict_arity(FashionMNIST, "FashionMNIST")
O.strict_arity(TextDataset, "TextDataset")
O.strict_arity(Blocks, "TextBlocks")
-- each public function refuses arguments past its parameters (fp8.opts.strict_functions)
require("fp8.opts").strict_functions(M, "data")
return M
