-- Found or changed on 2026-12-06 (stop 92): the Lua layers pick a fused kernel by asking the device's op table
-- (fp8.core._device_has, core/device.c fl_device_has_entry) rather than by the device's name.
local F = fp8.nn.F
local core = require "fp8.core"   -- the C half, where the layers ask

-- runs f with core._device_has answering false for the entries in `off`
local function without(off, f)
  local real = core._device_has
  core._device_has = function(dev, entry)
    if off[entry] then return false end
    return real(dev, entry)
  end
  local ok, err = pcall(f)
  core._device_has = real
  assert(ok, err)
end

describe("fused paths chosen by the device's entries", function()
  it("answers from the op table and refuses what is not an entry", function()
    assert.is_true(core._device_has("cpu", "chnorm_fwd"))
    assert.is_true(core._device_has("cpu", "rmsprop"))
    assert.is_true(core._device_has("cpu", "matmul"))
    if not fp8.cuda.is_available() then
      assert.is_false(core._device_has("cuda", "matmul"))   -- no GPU: nothing to run it on
    end
    local ok, err = pcall(core._device_has, "cpu", "chnorm_forward")
    assert.is_false(ok)
    assert.matches("no device entry is called 'chnorm_forward'", err, 1, true)
    ok, err = pcall(core._device_has, "tpu", "matmul")
    assert.is_false(ok)
    assert.matches("unknown device 'tpu'", err, 1, true)
    ok, err = pcall(core._device_has, "cpu")
    assert.is_false(ok)
  end)

  it("group_norm takes the fused kernel only where the device has it", function()
    fp8.manual_seed(3)
    local x = fp8.randn { 4, 6, 5 }
    local w, b = fp8.randn { 6 }, fp8.randn { 6 }
    local xa = x:clone():requires_grad_()
    local ya = F.group_norm(xa, 3, w, b)
    local fused_fn = ya:grad_fn()
    local yb, xb
    without({ chnorm_fwd = true }, function()
      xb = x:clone():requires_grad_()
      yb = F.group_norm(xb, 3, w, b)
    end)
    assert.are_not.equal(fused_fn, yb:grad_fn())   -- the composite's last node
    ya:sum():backward(); yb:sum():backward()
    assert.is_true(((ya - yb):abs():max():item()) < 1e-5)
    assert.is_true(((xa.grad - xb.grad):abs():max():item()) < 1e-5)
  end)

  it("RMSprop and Adagrad call their kernels only where the device has them, with the same bits", function()
    local C = require "fp8._optim"
    for _, case in ipairs { { "RMSprop", "rmsprop", "rmsprop_step", { lr = 0.01, momentum = 0.9, centered = true } },
                            { "Adagrad", "adagrad", "adagrad_step", { lr = 0.1, lr_decay = 0.01 } } } do
      local name, entry, fn, opts = case[1], case[2], case[3], case[4]
      local function run()
        fp8.manual_seed(5)
        local p = fp8.randn { 40 }:requires_grad_()
        local opt = fp8.optim[name]({ p }, opts)
        for _ = 1, 3 do
          opt:zero_grad();
          (p * p):sum():backward()
          opt:step()
        end
        return p:detach()
      end
      local real, calls = C[fn], 0
      C[fn] = function(...) calls = calls + 1; return real(...) end
      local pa = run()
      local fused_calls = calls
      calls = 0
      local pb
      without({ [entry] = true }, function() pb = run() end)
      C[fn] = real
      assert.are.equal(3, fused_calls, name)
      assert.are.equal(0, calls, name)
      assert.are.same(pa:totable(), pb:totable())   -- the composite's bits
    end
  end)
end)
