-- Found on 2026-12-06 (stop 94): a review of the session's numeric C changes (fc828bc..fff6574: exp and log in
-- cpu_vmath.h and their CUDA ports, remainder's floor division, hypot's gradient, cat's dtype rule for a left-out
-- empty tensor). docs/robustness.md, "The session's numeric changes read again (stop 94)".
-- The expected values are torch's, from the python lines quoted beside each case (/opt/torch2/bin/python, torch 2.15).

local function fails_with(msg, fn)
  local ok, err = pcall(fn)
  assert.is_false(ok)
  assert.truthy(tostring(err):find(msg, 1, true), tostring(err))
end

describe("cat: a left-out empty FP8 tensor is refused as any FP8 tensor is", function()
  -- torch.cat([torch.ones(2, 2, dtype=torch.bfloat16), torch.tensor([]).to(torch.float8_e4m3fn)])
  -- RuntimeError: Promotion for Float8 Types is not supported, attempted to promote BFloat16 and Float8_e4m3fn
  -- (and the same the other way round). Before: bf16 then the empty e4m3 gave bf16, the other order fp32.
  local e8 = fp8.tensor({}):quantize("e4m3")
  local b = fp8.ones { 2, 2 }:to("bf16")
  it("in either order", function()
    fails_with("cat: tensor 2 is e4m3: call :dequantize() first", function() return fp8.cat { b, e8 } end)
    fails_with("cat: tensor 1 is e4m3: call :dequantize() first", function() return fp8.cat { e8, b } end)
    fails_with("cat: tensor 3 is e5m2: call :dequantize() first",
      function() return fp8.cat { fp8.tensor {}, b, fp8.tensor({}):quantize("e5m2") } end)
  end)
  it("the float dtypes still count as torch's promotion has them", function()
    -- torch.cat([torch.ones(2, 2, dtype=torch.bfloat16), torch.tensor([]).half()]).dtype  # float32
    -- torch.cat([torch.ones(2, 2).half(), torch.tensor([]).half()]).dtype  # float16
    -- torch.cat([torch.tensor([]).bfloat16(), torch.tensor([]).half(), torch.ones(2, 2).bfloat16()]).dtype  # float32
    assert.are.equal("fp32", fp8.cat({ b, fp8.tensor({}):to("fp16") }):dtype())
    assert.are.equal("fp16", fp8.cat({ fp8.ones({ 2, 2 }):to("fp16"), fp8.tensor({}):to("fp16") }):dtype())
    assert.are.equal("fp32", fp8.cat({ fp8.tensor({}):to("bf16"), fp8.tensor({}):to("fp16"), b }):dtype())
    assert.are.same({ 2, 2 }, fp8.cat({ b, fp8.tensor({}):to("fp16") }):shape())
  end)
end)
