-- model_files_spec.lua — acc:save_model's files (one model.safetensors, or Accelerate's shards and index past
-- max_shard_size) and fp8.load_checkpoint_in_model, which reads either back.
local nn = fp8.nn
local C = require "fp8._checkpoint"
local MF = require "fp8.model_files"
local U = dofile("tests/spec/helpers/util.lua")

-- Linear(16,32), ReLU, Linear(32,64), Linear(64,8): 2048+128, 8192+256, 2048+32 bytes
local function model(seed)
  fp8.manual_seed(seed or 0)
  return nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 64), nn.Linear(64, 8))
end

local function accelerator() return fp8.Accelerator { config = false, env = {} } end

local function same_weights(a, b)
  local sa, sb = a:state_dict(), b:state_dict()
  for k, v in pairs(sa) do
    assert.truthy(sb[k], k)
    assert.are.equal(0, (v - sb[k]):abs():max():item(), k)
  end
end

local function index_of(dir) return C.json_decode(U.must_read(dir .. "/model.safetensors.index.json"), "index") end

describe("acc:save_model past max_shard_size", function()
  it("a save that fails part way leaves the earlier shards as they were (none renamed over them)", function()
    local d = U.tmpdir()
    local script = d .. "/save.lua"
    -- Linears of 40 KB, 40 KB and 1 MB: three shards at 60000 bytes; v fills every weight
    U.write(script, [[
local nn, v = fp8.nn, tonumber(arg[1])
local m = nn.Sequential(nn.Linear(100, 100, false), nn.Linear(100, 100, false), nn.Linear(512, 512, false))
for _, p in ipairs(m:parameters()) do p.data:fill_(v) end
fp8.Accelerator { config = false, env = {} }:save_model(m, arg[2], { max_shard_size = 60000 })
]])
    local dir = d .. "/m"
    local function save(v, limit)   -- limit: a file size limit (KiB) that the 1 MB shard passes, as a full disk
      return os.execute(("%s(trap '' XFSZ; %s %s %s %d %s) 2>%s"):format(limit and ("ulimit -f " .. limit .. "; ") or "",
        "", U.q(FP8LAB_BIN), U.q(script), v, U.q(dir), U.q(d .. "/err")))
    end
    assert.is_truthy(save(1))
    assert.is_falsy(save(2, 200))
    assert.truthy(U.must_read(d .. "/err"):find("File too large", 1, true), U.must_read(d .. "/err"))
    local m = nn.Sequential(nn.Linear(100, 100, false), nn.Linear(100, 100, false), nn.Linear(512, 512, false))
    fp8.load_checkpoint_in_model(m, dir, { strict = true })
    for _, np in ipairs(m:named_parameters()) do   -- the old save's, every one (the first shard was the new one's)
      assert.are.equal(1, np[2]:min():item(), np[1]); assert.are.equal(1, np[2]:max():item(), np[1])
    end
    local names = C.listdir(dir)
    table.sort(names)
    assert.are.same({ "model-00001-of-00003.safetensors", "model-00002-of-00003.safetensors",
      "model-00003-of-00003.safetensors", "model.safetensors.index.json" }, names)
    assert.is_truthy(save(3))
    fp8.load_checkpoint_in_model(m, dir, { strict = true })
    assert.are.equal(3, m[3].weight:min():item())
    os.execute("rm -rf " .. U.q(d))
  end)

  it("splits as huggingface_hub does: state dict order, a tensor past the limit alone where it is met", function()
    local d = U.tmpdir()
    local acc, m = accelerator(), model()
    assert.are.equal(d .. "/m/model.safetensors.index.json", acc:save_model(m, d .. "/m", { max_shard_size = 4000 }))
    -- huggingface_hub 2.4's split_torch_state_dict_into_shards of torch's Sequential with these shapes, 4000 bytes
    assert.same({
      metadata = { total_size = 12704 },
      weight_map = {
        ["2.weight"] = "model-00001-of-00003.safetensors",
        ["0.weight"] = "model-00002-of-00003.safetensors", ["0.bias"] = "model-00002-of-00003.safetensors",
        ["2.bias"] = "model-00002-of-00003.safetensors",
        ["3.weight"] = "model-00003-of-00003.safetensors", ["3.bias"] = "model-00003-of-00003.safetensors",
      },
    }, index_of(d .. "/m"))
    assert.same({ "model-00001-of-00003.safetensors", "model-00002-of-00003.safetensors",
      "model-00003-of-00003.safetensors", "model.safetensors.index.json" }, C.listdir(d .. "/m"))
    -- each shard holds what the index says, and nothing else
    local held = {}
    for i = 1, 3 do
      for _, k in ipairs(fp8.safe_open(("%s/m/model-%05d-of-00003.safetensors"):format(d, i)):keys()) do
        held[k] = ("model-%05d-of-00003.safetensors"):format(i)
      end
    end
    assert.same(index_of(d .. "/m").weight_map, held)
    -- and load back bit for bit
    local m2 = model(7)
    local report = fp8.load_checkpoint_in_model(m2, d .. "/m", { strict = true })
    assert.same({ missing_keys = {}, unexpected_keys = {} }, report)
    same_weights(m, m2)
  end)

  it("writes one model.safetensors when the split makes one shard (a single tensor past the limit too)", function()
    local d = U.tmpdir()
    local acc = accelerator()
    local m = nn.Linear(64, 64, false)   -- 16384 bytes, one tensor
    assert.are.equal(d .. "/a/model.safetensors", acc:save_model(m, d .. "/a", { max_shard_size = "1KB" }))
    assert.same({ "model.safetensors" }, C.listdir(d .. "/a"))
  end)

  it("removes the files of an earlier save the new one does not use, and nothing else", function()
    local d = U.tmpdir()
    local acc, m = accelerator(), model()
    local out = d .. "/m"
    acc:save_model(m, out)
    U.write(out .. "/notes.txt", "mine")
    U.write(out .. "/model-00001-of-00002.bin", "a torch shard of the user's")
    acc:save_model(m, out, { max_shard_size = 4000 })
    -- the old model.safetensors would be read before the index by any loader: gone
    assert.same({ "model-00001-of-00002.bin", "model-00001-of-00003.safetensors", "model-00002-of-00003.safetensors",
      "model-00003-of-00003.safetensors", "model.safetensors.index.json", "notes.txt" }, C.listdir(out))
    acc:save_model(m, out, { max_shard_size = 12000 })   -- two shards now: the third goes
    assert.same({ "model-00001-of-00002.bin", "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors",
      "model.safetensors.index.json", "notes.txt" }, C.listdir(out))
    local m2 = model(3)
    fp8.load_checkpoint_in_model(m2, out, { strict = true })
    same_weights(m, m2)
    acc:save_model(m, out)   -- back to one file: the shards and the index go
    assert.same({ "model-00001-of-00002.bin", "model.safetensors", "notes.txt" }, C.listdir(out))
  end)

  it("takes a stale file removed since the listing (by another save into the folder) as removed", function()
    -- (the save, its files all in place, failed: "cannot remove the earlier save's ...: No such file or directory")
    local d = U.tmpdir()
    local acc, m = accelerator(), model()
    local listdir = C.listdir
    C.listdir = function(dir)
      local names = listdir(dir)
      if names then names[#names + 1] = "model-00002-of-00009.safetensors" end   -- listed, gone when removed
      return names
    end
    local ok, err = pcall(acc.save_model, acc, m, d .. "/m", { max_shard_size = 4000 })
    C.listdir = listdir
    assert(ok, err)
    fp8.load_checkpoint_in_model(model(2), d .. "/m", { strict = true })
  end)

  it("keeps an FP8 tensor and its _scale_inv in one shard, both named in the index (raw)", function()
    local d = U.tmpdir()
    local acc, m = accelerator(), nn.Linear(32, 32)
    m:register_buffer("q", fp8.randn { 32, 32 }:quantize("e4m3"))
    acc:save_model(m, d .. "/r", { fp8 = "raw", max_shard_size = 1100 })
    local map = index_of(d .. "/r").weight_map
    assert.are.equal(map.q, map.q_scale_inv)
    assert.are_not.equal(map.q, map.weight)
    local m2 = nn.Linear(32, 32)
    m2:register_buffer("q", fp8.zeros { 32, 32 }:quantize("e4m3"))
    fp8.load_checkpoint_in_model(m2, d .. "/r", { strict = true })
    assert.are.equal(0, (m.q:dequantize() - m2.q:dequantize()):abs():max():item())
  end)
end)

describe("fp8.load_checkpoint_in_model", function()
  it("reads a weights file, an index, or a folder; strict=false by default, as Accelerate", function()
    local d = U.tmpdir()
    local acc, m = accelerator(), model()
    acc:save_model(m, d .. "/one")
    acc:save_model(m, d .. "/sh", { max_shard_size = 4000 })
    for _, path in ipairs { d .. "/one", d .. "/one/model.safetensors", d .. "/sh/model.safetensors.index.json" } do
      local m2 = model(5)
      fp8.load_checkpoint_in_model(m2, path)
      same_weights(m, m2)
    end
    -- a model with a layer more: its keys are missing, reported (strict=false), refused with strict=true
    local bigger = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 64), nn.Linear(64, 8), nn.Linear(8, 8))
    local r = fp8.load_checkpoint_in_model(bigger, d .. "/sh")
    table.sort(r.missing_keys)
    assert.same({ "4.bias", "4.weight" }, r.missing_keys)
    U.fails_with({ "load_checkpoint_in_model: ", "4.weight" }, fp8.load_checkpoint_in_model, bigger, d .. "/sh",
      { strict = true })
  end)

  it("refuses what it cannot read, naming the problem", function()
    local d = U.tmpdir()
    local acc, m = accelerator(), model()
    acc:save_model(m, d .. "/sh", { max_shard_size = 4000 })
    local L = fp8.load_checkpoint_in_model
    U.fails_with("no such file or directory", L, m, d .. "/nope")
    assert(C.mkdir(d .. "/empty"))
    U.fails_with("is not a folder holding a model.safetensors file or a sharded checkpoint's .index.json", L, m,
      d .. "/empty")
    U.fails_with("expected a Module, got a table", L, {}, d .. "/sh")
    U.fails_with("expected the checkpoint's path", L, m, 5)
    U.fails_with("unknown option 'device_map'", L, m, d .. "/sh", { device_map = "auto" })
    U.fails_with("strict must be a boolean", L, m, d .. "/sh", { strict = 1 })
    U.fails_with("takes (model, checkpoint [, opts]); got 1 more argument", L, m, d .. "/sh", {}, true)
    U.fails_with("NUL byte", L, m, d .. "/sh\0x")
    -- a stale index (it names a shard for a tensor the shard does not hold) is refused, not half loaded
    local idx = U.must_read(d .. "/sh/model.safetensors.index.json")
    local stale = idx:gsub('"0%.weight":%s*"model%-00002', '"0.weight": "model-00003')
    U.write(d .. "/sh/model.safetensors.index.json", stale)
    local before = m[1].weight:clone()
    U.fails_with({ 'the index lists "0.weight" in model-00003-of-00003.safetensors, which does not hold it',
      "it is in " }, L, model(9), d .. "/sh")
    assert.are.equal(0, (m[1].weight - before):abs():max():item())
    -- a file name that leaves the folder
    U.write(d .. "/sh/model.safetensors.index.json", '{"weight_map": {"0.weight": "../x.safetensors"}}')
    U.fails_with('expected a file name in the index\'s folder', L, m, d .. "/sh")
    -- a list where the names should be ("attempt to index a number value (local 'name')")
    local shard = '["model-00001-of-00003.safetensors"]'
    for _, list in ipairs { shard, '{"weight_map": ' .. shard .. '}' } do
      U.write(d .. "/sh/model.safetensors.index.json", list)
      U.fails_with("expected a weight_map of tensor names to files, got a list", L, m, d .. "/sh")
    end
    U.write(d .. "/sh/model.safetensors.index.json", "{not json")
    U.fails_with("load_checkpoint_in_model: ", L, m, d .. "/sh")
    U.write(d .. "/sh/other.index.json", "{}")
    U.fails_with("holds more than one .index.json", L, m, d .. "/sh")
  end)

  it("splits tensors as huggingface_hub does (the split alone)", function()
    local shards, total = MF.split({ "a", "b", "c", "d", "e", "f" }, { a = 6, b = 6, c = 2, d = 6, e = 2, f = 2 }, 10)
    -- huggingface_hub's docstring: [6, 6, 2, 6, 2, 2] at 10 → [6], [6+2], [6+2+2]
    assert.same({ { "a" }, { "b", "c" }, { "d", "e", "f" } }, shards)
    assert.are.equal(24, total)
    shards = MF.split({ "a", "b", "c" }, { a = 3, b = 20, c = 3 }, 10)
    assert.same({ { "b" }, { "a", "c" } }, shards)
  end)
end)
