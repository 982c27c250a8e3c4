-- Changed on 2026-12-07 (stop 99): the memory-bound ops stop 98 left over 1.1× PyTorch 2.15 at one thread
-- (docs/performance.md, "The memory-bound rows stop 98 left slow (stop 99)"): clamp between two numbers as one compare
-- and one select per bound (core/cpu/cpu_elementwise.c clamp_sel), and bf16 + - * / of contiguous tensors widened
-- and rounded in registers (bf16_binop_run) where three scratch passes a tile did it, and the sums' loads prefetched
-- 2 KiB ahead (core/cpu/cpu_reduce.c lanes_add: x:norm(2, 2), x:sum(2)). Each keeps its bits: these cases compare
-- against the definitions (clamp's maximum then minimum with -0 < +0 and NaN in, NaN out; fp32 arithmetic in doubles
-- rounded once to fp32 and once to bf16, nearest even; a row's sum in doubles rounded once), on the fast routes and
-- the tiles' routes beside them (strided views), with signed zeros, infinities, NaN, subnormals and odd lengths, and
-- on 1 and 2 threads.
local U = dofile("tests/spec/helpers/util.lua")
local BIN = FP8LAB_BIN or "build/fp8lab"
local inf, nan = math.huge, 0 / 0

local function bits(v) return (string.unpack("<I4", string.pack("<f", v))) end
local function fb(u) return (string.unpack("<f", string.pack("<I4", u))) end
local f32 = U.f32
-- fp32 → bf16 as the core rounds (half_cvt.h): nearest even on the bits, a NaN stays NaN
local function bf16(v)
  if v ~= v then return v end
  local u = bits(v)
  u = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16) << 16
  return fb(u & 0xFFFFFFFF)
end
local function neg0(v) return v == 0 and 1 / v < 0 end
local function assert_bits(what, want, got)
  assert.are.equal(#want, #got, what .. ": sizes")
  for i = 1, #want do
    if not U.same_number(want[i], got[i]) then
      error(("%s: element %d is %.9g, want %.9g"):format(what, i, got[i], want[i]), 2)
    end
  end
end
local function flat(t) return t:float():contiguous():view(-1):tolist() end

-- values that reach every branch: signed zeros, infinities, NaN, subnormals, the bounds themselves, ordinary numbers
local SPECIAL = { 0, -0.0, inf, -inf, nan, 1, -1, 0.5, -0.5, 2, -2, 1e-40, -1e-40, 2 ^ -149, 3e38, -3e38, 0.25, -3.75 }
local function values(n, seed)
  local v = {}
  math.randomseed(seed)
  for i = 1, n do
    v[i] = f32(i <= #SPECIAL * 3 and SPECIAL[(i * 7 + seed) % #SPECIAL + 1] or (math.random() - 0.5) * 8)
  end
  return v
end

describe("clamp between two numbers (stop 99)", function()
  -- torch's clamp: maximum(x, lo) then minimum(., hi), -0 below +0, a NaN x or bound NaN
  local function maximum(x, y)
    if x ~= x or y ~= y then return nan end
    if x > y or (x == y and not neg0(x)) then return x end
    return y
  end
  local function minimum(x, y)
    if x ~= x or y ~= y then return nan end
    if x < y or (x == y and neg0(x)) then return x end
    return y
  end
  local BOUNDS = { { -1, 1 }, { 0, 1 }, { -0.0, 1 }, { -1, 0 }, { -1, -0.0 }, { 0, 0 }, { -0.0, -0.0 }, { 0, -0.0 },
    { -0.0, 0 }, { 1, -1 }, { 0.5, 0.5 }, { -inf, 0.25 }, { -0.5, inf }, { f32(1e-40), 2 }, { nan, 1 }, { -1, nan },
    { f32(-3e38), f32(3e38) } }
  it("is maximum then minimum, to the bit, on the contiguous route and the tiles', with ±0 and NaN bounds", function()
    local v = values(32 * 5 + 13, 99)   -- vector groups and a tail
    local x = fp8.tensor(v)
    local wide = fp8.zeros { #v, 3 }
    wide:select(2, 2):copy_(x)
    local strided = wide:select(2, 2)   -- stride 3: the tiles' route
    for _, b in ipairs(BOUNDS) do
      local lo, hi = b[1], b[2]
      local want = {}
      for i = 1, #v do want[i] = minimum(maximum(v[i], lo), hi) end
      local what = ("clamp(%s, %s)"):format(tostring(lo), tostring(hi))
      assert_bits(what, want, flat(x:clamp(lo, hi)))
      assert_bits(what .. " of a strided view", want, flat(strided:clamp(lo, hi)))
      local xg = x:clone():requires_grad_()
      assert_bits(what .. " with a gradient", want, flat(xg:clamp(lo, hi)))
    end
  end)
  it("rounds to bf16 and fp16 as before: the fp32 clamp of the widened values, rounded once", function()
    local x = fp8.tensor(values(101, 7))
    for _, dt in ipairs { "bf16", "fp16" } do
      local xd = x:to(dt)
      for _, b in ipairs { { -1, 1 }, { 0, 0.5 }, { -0.0, 2 } } do
        assert_bits(("%s clamp(%s, %s)"):format(dt, b[1], b[2]), flat(xd:float():clamp(b[1], b[2]):to(dt)),
          flat(xd:clamp(b[1], b[2])))
      end
    end
  end)
end)

describe("bf16 + - * / of contiguous tensors, in registers (stop 99)", function()
  local OPS = {
    { "+", function(a, b) return a + b end }, { "-", function(a, b) return a - b end },
    { "*", function(a, b) return a * b end }, { "/", function(a, b) return a / b end },
  }
  local function bf16_list(n, seed)   -- bf16 values (exact in fp32), specials among them, big and small magnitudes
    local v = values(n, seed)
    for i = 1, #v do v[i] = bf16(f32(v[i] * (i % 5 == 0 and 1e-36 or i % 7 == 0 and 1e36 or 1))) end
    return v
  end
  it("gives fp32's result in doubles rounded to fp32, then to bf16, at every length to two groups and more", function()
    for _, n in ipairs { 1, 15, 16, 31, 32, 33, 64, 95, 32 * 40 + 7 } do
      local av, bv = bf16_list(n, n), bf16_list(n, n + 1000)
      local a, b = fp8.tensor(av):to("bf16"), fp8.tensor(bv):to("bf16")
      for _, op in ipairs(OPS) do
        local want = {}
        for i = 1, n do want[i] = bf16(f32(op[2](av[i], bv[i]))) end
        assert_bits(("bf16 %s, %d elements"):format(op[1], n), want, flat(op[2](a, b)))
      end
    end
  end)
  it("gives the tiles' route its bits (strided views), in place on either operand, and under autocast", function()
    local n = 32 * 64 + 19
    local a, b = fp8.tensor(bf16_list(n, 5)):to("bf16"), fp8.tensor(bf16_list(n, 6)):to("bf16")
    local wa, wb = fp8.zeros({ n, 2 }):to("bf16"), fp8.zeros({ n, 2 }):to("bf16")
    wa:select(2, 1):copy_(a); wb:select(2, 2):copy_(b)
    local sa, sb = wa:select(2, 1), wb:select(2, 2)
    for _, op in ipairs(OPS) do
      local want = flat(op[2](sa, sb))   -- stride 2: the tiles' route
      assert_bits("bf16 " .. op[1] .. " against the strided route", want, flat(op[2](a, b)))
    end
    local want = flat(a + b)
    local c = a:clone(); c:add_(b)
    assert_bits("bf16 add_ in place", want, flat(c))
    c = b:clone(); c:add_(a)
    assert_bits("bf16 add_ in place on the other operand", want, flat(c))
    want = flat(a * b)
    c = a:clone(); c:mul_(c)
    assert_bits("bf16 x * x in place", flat(a * a), flat(c))
    local x, y = a:float(), b:float()
    local r = fp8.amp.autocast("bf16", function() return x:to("bf16") * y:to("bf16") end)
    assert_bits("bf16 * under autocast", want, flat(r))
  end)
end)

describe("row sums and x:norm(2, dim) with the loads prefetched 2 KiB ahead (stop 99)", function()
  it("are the sums in doubles rounded once, within an ulp, at row lengths around the 16 lanes and a page", function()
    math.randomseed(991)
    for _, cols in ipairs { 1, 15, 16, 17, 511, 512, 513, 1024, 1029 } do
      local rows = 7
      local v = {}
      for i = 1, rows * cols do v[i] = f32((math.random() - 0.5) * 10) end
      local x = fp8.tensor(v):reshape { rows, cols }
      local s, n = flat(x:sum(2)), flat(x:norm(2, 2))
      for r = 1, rows do
        local sum, sq = 0, 0
        for j = 1, cols do
          local e = v[(r - 1) * cols + j]
          sum = sum + e; sq = sq + f32(e * e)   -- (each square rounded to fp32 first, as the core's)
        end
        for _, c in ipairs { { "sum", s[r], f32(sum) }, { "norm", n[r], f32(math.sqrt(f32(sq))) } } do
          local ulp = 2.0 ^ (math.floor(math.log(math.max(math.abs(c[3]), 2 ^ -126), 2)) - 23)
          assert(math.abs(c[2] - c[3]) <= ulp, ("%s of row %d of [%d, %d]: %.9g, want %.9g"):format(c[1], r, rows,
            cols, c[2], c[3]))
        end
      end
    end
  end)
end)

describe("the changed routes on 1 and 2 threads (stop 99)", function()
  it("give the same bits", function()
    local code = [[
      fp8.manual_seed(99)
      local x = fp8.randn { 300, 1000 } * 3
      local y = fp8.randn { 300, 1000 }
      local xb, yb = x:to("bf16"), y:to("bf16")
      local h = 0
      local function acc(t)
        local v = t:float():reshape(-1)
        h = (h + (v:nan_to_num(7, 1, -1) * fp8.arange(v:numel()):float():sin()):sum():item()) % 1e9
      end
      acc(x:clamp(-1, 0.5)); acc(x:clamp(0, 1)); acc(xb + yb); acc(xb * yb); acc(xb / yb); acc(xb - yb)
      acc(x:norm(2, 2)); acc(x:sum(2)); acc(x:sum(1)); acc(x:sum():reshape { 1 })
      print(string.format("%.17g", h))
    ]]
    U.same_on_threads(BIN, code)
  end)
end)
