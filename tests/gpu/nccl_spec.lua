-- nccl_spec.lua — NCCL in one process on one GPU: the communicator comes up without a launcher (a world of
-- one keeps its own unique id, no MPI_Init), every collective that fp8._dist sends to NCCL runs on CUDA
-- tensors of each dtype it maps (fp32, bf16, fp16, and the native FP8 types for sums), and leaves them as a
-- world of one must: all_reduce and broadcast change no byte, all_gather returns a copy. Then an Accelerator
-- with InitProcessGroupKwargs{backend="nccl"} trains a few steps on the GPU, losses equal to the run without
-- the handler. Two ranks would need two GPUs (NCCL refuses one GPU twice in a communicator). Skips without
-- a GPU or without NCCL in the build.
local fp8 = fp8 or require "fp8"
local D = require "fp8._dist"

local have = fp8.cuda.is_available() and D.info().nccl_built

local function bytes(t)   -- the bytes of an FP8 tensor, the exact values of any other
  t = t:to("cpu")
  if t:dtype() == "e4m3" or t:dtype() == "e5m2" then return t:bytes() end
  return t:to("fp32"):_values()
end

describe("NCCL, one process", function()
  if not have then
    it("skips: no GPU or no NCCL", function()
      print(("  skipped: cuda available %s, nccl built %s"):format(tostring(fp8.cuda.is_available()),
        tostring(D.info().nccl_built)))
    end)
    return
  end

  it("initialises without a launcher", function()
    D.init { backend = "nccl", timeout = 120 }
    local info = D.info()
    assert.is_true(info.nccl_ready)
    assert.equals(0, D.rank())
    assert.equals(1, D.size())
    print("# NCCL " .. tostring(info.nccl_version))
  end)

  for _, dt in ipairs { "fp32", "bf16", "fp16" } do
    it("all_reduce sum and max, broadcast, all_gather on " .. dt, function()
      local x = (fp8.randn { 33, 17 } * 3):to(dt):to("cuda")
      local before = bytes(x)
      for _, op in ipairs { "sum", "max" } do
        assert.equals(x, D.all_reduce(x, op))
        assert.same(before, bytes(x), dt .. " " .. op)
      end
      D.broadcast(x, 0)
      assert.same(before, bytes(x), dt .. " broadcast")
      local g = D.all_gather(x)
      assert.equals("cuda", g:device())
      assert.same({ 33, 17 }, g:shape())
      assert.same(before, bytes(g), dt .. " all_gather")
    end)
  end

  for _, fmt in ipairs { "e4m3", "e5m2" } do
    it("sums " .. fmt .. " in NCCL's own FP8 type and broadcasts the scale with it", function()
      local q = (fp8.randn { 64, 8 } * 5):quantize(fmt):to("cuda")
      local before = bytes(q)
      D.all_reduce(q, "sum")
      assert.same(before, bytes(q), fmt .. " sum")
      local deq = q:dequantize():to("cpu"):_values()
      D.broadcast(q, 0)
      assert.same(before, bytes(q), fmt .. " broadcast")
      assert.same(deq, q:dequantize():to("cpu"):_values())
    end)
  end

  it("refuses a root outside the world", function()
    local ok, err = pcall(D.broadcast, fp8.zeros { 2 }:to("cuda"), 1)
    assert.is_false(ok)
    assert.matches("root must be a rank in 0..0", err, 1, true)
  end)

  it("trains through an Accelerator with backend=nccl, losses equal to the run without it", function()
    local function losses(kwargs)
      fp8.manual_seed(7)
      local model = fp8.nn.Sequential(fp8.nn.Linear(16, 32), fp8.nn.GELU(), fp8.nn.Linear(32, 4))
      local acc = fp8.Accelerator { mixed_precision = "bf16", kwargs_handlers = kwargs }
      local opt = fp8.optim.AdamW(model:parameters(), { lr = 1e-2 })
      model, opt = acc:prepare(model, opt)
      assert.equals("cuda", model:parameters()[1]:device())
      local out = {}
      fp8.manual_seed(11)
      local x, y = fp8.randn { 8, 16 }:to("cuda"), fp8.randn { 8, 4 }:to("cuda")
      for s = 1, 4 do
        local loss = fp8.nn.functional.mse_loss(model(x), y)
        acc:backward(loss)
        opt:step()
        opt:zero_grad()
        out[s] = loss:item()
      end
      return out
    end
    local plain = losses {}
    local nccl = losses { fp8.InitProcessGroupKwargs { backend = "nccl" } }
    assert.same(plain, nccl)
    assert.is_true(plain[4] < plain[1])
  end)
end)
