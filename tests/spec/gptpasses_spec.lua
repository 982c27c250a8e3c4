-- Changed on 2026-12-07 (stop 101): the te GPT step outside its GEMMs (docs/performance.md, "The te step outside its
-- GEMMs (stop 101)"; docs/robustness.md, "The te step outside its GEMMs (stop 101)"). LayerNorm's backward adds its
-- input's gradient into the sum the engine already holds for that input (a residual stream: the block's other branch
-- ran first) in its own pass (core/nn.c's ln_bwd, the device's layernorm_bwd_add, fl_autograd_grad_sum) instead of
-- writing it for the engine to add. The same operations in the same order, so the same bits: these cases compare
-- the summed gradient with the unfused path's (LayerNorm's gradient alone, then the add; fl_autograd_grad's walk,
-- which never adds into a sum), on 1 and 2 threads, AVX-512 and FP8LAB_CPU_ISA=avx2 alike.
local U = dofile("tests/spec/helpers/util.lua")
local BIN = FP8LAB_BIN or "build/fp8lab"

local CODE = [[
local F = fp8.nn.F
fp8.manual_seed(3)
local bad = {}
local function eq(name, a, b)
  if not (a:ne(b):sum():item() == 0) then bad[#bad + 1] = name end
end
-- h = x·1.5 feeds LayerNorm and h·0.75; LayerNorm's backward runs with h·0.75's gradient already summed for h (or
-- before it, the other order). Unfused: LayerNorm's gradient of a leaf (written, never added), then the add.
for _, C in ipairs { 37, 256, 1000 } do   -- tails of 5 and 8 lanes; C 1000's 140 rows: three chunks of 64 on 2 threads
  local R = C == 37 and 40 or 140
  local x0, w, b, G = fp8.randn { R, C }, fp8.randn { C }, fp8.randn { C }, fp8.randn { R, C }
  local h2, w2, b2 = (x0 * 1.5):requires_grad_(), w:clone():requires_grad_(), b:clone():requires_grad_()
  F.layer_norm(h2, { C }, w2, b2, 1e-5):backward(G)
  local want_h = G * 0.75 + h2.grad
  -- ln(h) + h: the add hands one gradient to both, which LayerNorm reads as its dy: never a sum to add into
  local xs, ws, bs = x0:clone():requires_grad_(), w:clone():requires_grad_(), b:clone():requires_grad_()
  local hs = xs * 1.5
  hs:retain_grad()
  ;(F.layer_norm(hs, { C }, ws, bs, 1e-5) + hs):backward(G)
  eq(C .. " shared h.grad", hs.grad, G + h2.grad)
  eq(C .. " shared w.grad", ws.grad, w2.grad)
  eq(C .. " shared b.grad", bs.grad, b2.grad)
  for _, ln_first in ipairs { true, false } do
    for _, affine in ipairs { true, false } do
      local name = ("C=%d ln_first=%s affine=%s"):format(C, ln_first, affine)
      local xl = x0:clone():requires_grad_()
      local wl, bl = w:clone():requires_grad_(), b:clone():requires_grad_()
      local h = xl * 1.5
      h:retain_grad()
      local function ln() return affine and F.layer_norm(h, { C }, wl, bl, 1e-5) or F.layer_norm(h, { C }) end
      local out
      if ln_first then out = ln() + h * 0.75 else out = h * 0.75 + ln() end
      out:backward(G)
      if affine then
        eq(name .. " h.grad", h.grad, want_h)
        eq(name .. " x.grad", xl.grad, want_h * 1.5)
        eq(name .. " w.grad", wl.grad, w2.grad)
        eq(name .. " b.grad", bl.grad, b2.grad)
      else
        local h3 = (x0 * 1.5):requires_grad_()
        F.layer_norm(h3, { C }):backward(G)
        eq(name .. " h.grad", h.grad, G * 0.75 + h3.grad)
        eq(name .. " x.grad", xl.grad, (G * 0.75 + h3.grad) * 1.5)
      end
    end
  end
end
-- A pre-LayerNorm block (both residuals): backward against fp8.autograd.grad's walk, which adds nothing in place
fp8.manual_seed(4)
local blk = fp8.nn.TransformerBlock { n_embd = 64, n_head = 4 }
local x = (fp8.randn { 2, 16, 64 } * 2):requires_grad_()
local y = blk(x * 1)
local g = fp8.randn(y:shape())
local gx = fp8.autograd.grad(y, { x }, g, { retain_graph = true })
y:backward(g)
eq("block x.grad", x.grad, gx)
print(#bad .. " off" .. (#bad > 0 and ": " .. table.concat(bad, "; ") or ""))
]]

describe("LayerNorm's backward adds into its input's gradient sum (stop 101)", function()
  it("gives the unfused path's bits, on 1 and 2 threads, AVX-512 and avx2", function()
    assert.are.equal("0 off\n", U.same_on_threads(BIN, CODE))
    assert.are.equal("0 off\n", U.same_on_threads("FP8LAB_CPU_ISA=avx2 " .. BIN, CODE))
  end)
end)
