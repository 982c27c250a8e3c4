-- tour.lua — a guided tour of FP8 at the fp8lab prompt (`make tour` runs it).
-- Every step prints the code it runs, then its result, so you can retype it at the prompt. The code has no `local`:
-- the prompt runs each line on its own, so a local of one line is gone on the next (a retyped step failed there).

require("fp8.args").parse(arg or {}, {}, { usage = "usage: fp8lab scripts/tour.lua",
  about = "A guided tour of the FP8 formats, rounding, scaling and training casts (make tour). No options." })

local function step(title, code)
  print(("\n── %s " .. string.rep("─", math.max(0, 66 - #title))):format(title))
  for line in code:gmatch("[^\n]+") do print("fp8> " .. line) end
  local chunk = assert(load(code, "=tour", "t", setmetatable({}, { __index = _G })))
  chunk()
end

print("fp8lab tour: the two FP8 formats, rounding, scaling, and what training casts do.")

step("1. The formats side by side", [[
fp8.formats()]])

step("2. Encoding rounds to the nearest value, ties to even", [[
print(fp8.encode(464, "e4m3"), fp8.decode(126, "e4m3"))   -- 464 is halfway between 448 and 480
print(fp8.encode(465, "e4m3", {saturate=false}))          -- IEEE policy: overflow becomes NaN (0x7F)
print(fp8.encode(1e6, "e4m3"), fp8.decode(fp8.encode(1e6, "e4m3"), "e4m3"))  -- saturate: clamp to 448]])

step("3. Looking inside one value", [[
fp8.explain(0.1, "e4m3")]])

step("4. E5M2 trades precision for range", [[
fp8.explain(0.1, "e5m2")
fp8.explain(1e-5, "e4m3")   -- below E4M3's smallest subnormal (2^-9): underflows to zero]])

step("5. Why scaling matters: small activations", [[
fp8.manual_seed(0)
x = fp8.randn{4, 256} * 1e-3
raw = x:quantize("e4m3", {scale = 1})
print("scale 1:   underflowed", raw:underflow(), "of", x:numel())
q = x:quantize("e4m3")            -- scale = 448 / amax
print(q)
print("error with amax scaling:", (q:dequantize() - x):abs():max():item())]])

step("6. Per-row scaling follows each row's range", [[
rows = fp8.tensor{{1, 2, 3, 4}, {1000, 2000, 3000, 4000}}
qt = rows:quantize("e4m3")                 -- one scale for the whole tensor
qr = rows:quantize("e4m3", {axis = 1})     -- one scale per row
print(qt:dequantize()) ; print(qr:dequantize())
print(qr:scale())]])

step("7. An FP8 GEMM is exact products + fp32 accumulation", [[
a, b = fp8.randn{64, 128}, fp8.randn{128, 32}
qa, qb = a:quantize("e4m3"), b:quantize("e4m3")
exact = a:matmul(b)
viafp8 = qa:dequantize():matmul(qb:dequantize())
print("relative error of the FP8 GEMM:", ((viafp8 - exact):abs():max() / exact:abs():max()):item())]])

print("\nNext: run `build/fp8lab` for the prompt, type help() — and see docs/concepts.md.")
