-- Changed on 2026-12-07 (stop 99): gather of a host tensor read in place, in its own dtype and strides
-- (core/gather.c gather_cpu; docs/performance.md, "gather at torch's time (stop 99)"): a bf16 or transposed input
-- was copied whole to contiguous fp32 first and the result rounded back, and the index was copied even under
-- no_grad; the positions are now checked 8 a step (gather_positions) and, along the last dim with rows of at most
-- 256, made once a row GATHER_AHEAD rows before it is copied (the ring of positions prefetched). Gather is exact, so
-- these cases compare each element against a plain Lua reference built from the input's values (to the bit, -0 and
-- NaN included) on hostile shapes: lengths around 8 and 256 (the vector step and the chunk), size-1 dims, every dim,
-- transposed, narrowed and expanded inputs and indices, fp32/bf16/fp16 inputs and indices, a dim longer than 2^24
-- (the doubles' test), the first bad position in order named whatever row the prefetch has reached, the backward
-- reading the index as it was at the forward, and the same bits on 1 and 2 threads.
local U = dofile("tests/spec/helpers/util.lua")
local BIN = FP8LAB_BIN or "build/fp8lab"

-- an n-d tensor's shape and a flat row-major list → element at 0-based coords c
local function offset(shape, c)
  local o = 0
  for i = 1, #shape do o = o * shape[i] + c[i] end
  return o
end
-- torch's gather from the values alone: out[c] = a[c with c[dim] replaced by index[c]]
local function ref_gather(av, ashape, iv, ishape, dim)
  local out, n = {}, 1
  for i = 1, #ishape do n = n * ishape[i] end
  local c = {}
  for l = 0, n - 1 do
    local r = l
    for i = #ishape, 1, -1 do c[i] = r % ishape[i]; r = r // ishape[i] end
    local p = iv[l + 1]
    local save = c[dim]
    c[dim] = math.tointeger(p)
    out[l + 1] = av[offset(ashape, c) + 1]
    c[dim] = save
  end
  return out
end
local function check(what, a, dim, index)
  local got = a:gather(dim, index)
  assert.are.same(index:shape(), got:shape(), what .. ": shape")
  assert.are.equal(a:dtype(), got:dtype(), what .. ": dtype")
  local want = ref_gather(U.flat(a:float()), a:shape(), U.flat(index:float()), index:shape(), dim)
  local g = U.flat(got:float())
  assert.are.equal(#want, #g, what .. ": numel")
  for i = 1, #want do
    if not U.same_number(want[i], g[i]) then
      error(("%s: element %d is %.9g, want %.9g"):format(what, i, g[i], want[i]), 2)
    end
  end
end
-- values with signed zeros, NaN, infinities and subnormals among ordinary numbers, exact in bf16 and fp16
local function input(shape, seed)
  local n = 1
  for _, d in ipairs(shape) do n = n * d end
  local SPECIAL = { 0, -0.0, 1 / 0, -1 / 0, 0 / 0, 2 ^ -20 }
  local v = {}
  math.randomseed(seed)
  for i = 1, n do
    v[i] = i % 11 == 0 and SPECIAL[(i // 11) % #SPECIAL + 1] or (math.random(-512, 512) / 8)
  end
  return fp8.tensor(v):reshape(shape)
end
local function positions(shape, size, seed)
  local n = 1
  for _, d in ipairs(shape) do n = n * d end
  local v = {}
  math.randomseed(seed)
  for i = 1, n do v[i] = math.random(0, size - 1) end
  if n > 0 then v[n] = size - 1 end   -- the last position of the dim
  if n > 1 then v[1] = 0 end
  return fp8.tensor(v):reshape(shape)
end

describe("gather read in place (stop 99)", function()
  it("matches the values' reference on hostile shapes, every dim, dtype and layout", function()
    local shapes = { { 7 }, { 9, 1 }, { 1, 17 }, { 3, 257 }, { 2, 3, 300 }, { 5, 8, 9 }, { 2, 1, 3, 4 }, { 513, 2 } }
    local seed = 1
    for _, shape in ipairs(shapes) do
      for dim = 1, #shape do
        for _, k in ipairs { 1, shape[dim], shape[dim] + 7 } do
          seed = seed + 1
          local x = input(shape, seed)
          local ishape = {}
          for i = 1, #shape do ishape[i] = i == dim and k or shape[i] end
          local idx = positions(ishape, shape[dim], seed)
          for _, dt in ipairs { "fp32", "bf16", "fp16" } do
            local xd = x:to(dt)
            local what = ("%s dim %d k %d %s"):format(x:shape_str(), dim, k, dt)
            check(what, xd, dim, idx)
            if shape[dim] <= 256 then   -- (bf16 holds whole numbers to 256 exactly)
              check(what .. " bf16 index", xd, dim, idx:to("bf16"))
            end
            check(what .. " fp16 index", xd, dim, idx:to("fp16"))
            if #shape >= 2 then
              -- a transposed input (its strides reversed) and a transposed index, of the same logical shapes
              local rev = {}
              for i = #shape, 1, -1 do rev[#rev + 1] = shape[i] end
              local perm = {}
              for i = #shape, 1, -1 do perm[#perm + 1] = i end
              local xt = input(rev, seed):to(dt):permute(perm)
              check(what .. " transposed input", xt, dim, idx)
              local it = idx:permute(perm):contiguous():permute(perm)
              check(what .. " transposed index", xt, dim, it)
            end
          end
        end
      end
    end
  end)

  it("reads narrowed and expanded inputs, and a dim longer than 2^24 (the doubles' test)", function()
    local x = input({ 40, 600 }, 3)
    local xn = x:narrow(2, 5, 301):narrow(1, 3, 30)   -- an offset and a row stride larger than the row
    check("narrowed", xn, 2, positions({ 30, 280 }, 301, 4))
    check("narrowed dim 1", xn, 1, positions({ 9, 301 }, 30, 5))
    local xe = input({ 6, 1 }, 6):expand { 6, 70 }     -- a stride 0 along the gathered dim
    check("expanded", xe, 2, positions({ 6, 300 }, 70, 7))
    local big = fp8.tensor({ 5 }):expand { 16777219 }
    assert.are.same({ 5, 5, 5 }, big:gather(1, fp8.tensor { 16777218, 16777216, 0 }):tolist())
    U.fails_with("index 16777220 out of range 0..16777218 for dim 1 of size 16777219",
      function() return big:gather(1, fp8.tensor { 0, 16777220 }) end)
  end)

  it("names the first bad position in order, wherever the prefetch has reached", function()
    local x = input({ 12, 300 }, 8)
    for _, case in ipairs {
      -- { rows, row of the first bad one, its column, its value, a later bad row, its value, the message }
      { 40, 1, 1, -1, 3, 7.5, "index -1 out of range 0..299 for dim 2 of size 300" },
      { 40, 3, 39, 1.5, 4, -2, "index 1.5 is not a whole number (dim 2 of size 300 takes 0..299)" },
      { 40, 12, 40, 300, 12, 0 / 0, "index 300 out of range 0..299 for dim 2 of size 300" },
      { 300, 2, 290, 0 / 0, 5, 301, "index NaN for dim 2 of size 300 (indices are whole numbers 0..299)" },
      { 300, 7, 257, 1 / 0, 7, 1e30, "index inf out of range 0..299 for dim 2 of size 300" },
      { 8, 9, 3, -0.5, 12, 400, "index -0.5 is not a whole number" },
      { 300, 6, 299, 2.5, 9, -3, "index 2.5 is not a whole number" },   -- (in the scalar tail: 300 = 37 * 8 + 4)
    } do
      local rows, r1, c1, v1, r2, v2, msg = table.unpack(case)
      local v = positions({ 12, rows }, 300, rows):totable()
      v[r1][c1] = v1
      v[r2][rows] = v2
      if r1 == r2 then v[r1][c1], v[r2][rows] = v1, v2 end
      local idx = fp8.tensor(v)
      for _, xd in ipairs { x, x:to("bf16"), x:t():contiguous():t() } do
        U.fails_with({ "gather: ", msg }, function() return xd:gather(2, idx) end)
      end
    end
    -- along dim 1 the same rule
    local idx = positions({ 12, 300 }, 12, 9):totable()
    idx[4][260] = 12
    U.fails_with("gather: index 12 out of range 0..11 for dim 1 of size 12", function() return x:gather(1, fp8.tensor(idx)) end)
    -- a negative index is refused as torch refuses it (no wrapping)
    U.fails_with("index -1 out of range", function() return x:gather(2, fp8.tensor { { -1 } }:expand { 12, 1 }) end)
  end)

  it("the backward reads the index as the forward did", function()
    local x = input({ 4, 9 }, 10):nan_to_num(0, 0, 0):requires_grad_()
    local idx = fp8.tensor { { 0, 8, 8 }, { 1, 1, 2 }, { 3, 4, 5 }, { 8, 0, 0 } }
    local y = x:gather(2, idx)
    idx:zero_()   -- written after the forward: the node kept its own copy
    y:backward(fp8.tensor { { 1, 2, 3 }, { 4, 5, 6 }, { 7, 8, 9 }, { 10, 11, 12 } })
    local g = x.grad:tolist()
    assert.are.same({ 1, 0, 0, 0, 0, 0, 0, 0, 5 }, g[1])
    assert.are.same({ 0, 9, 6, 0, 0, 0, 0, 0, 0 }, g[2])
    assert.are.same({ 0, 0, 0, 7, 8, 9, 0, 0, 0 }, g[3])
    assert.are.same({ 23, 0, 0, 0, 0, 0, 0, 0, 10 }, g[4])
  end)

  it("gives the same bits on 1 and 2 threads", function()
    local code = [[
      fp8.manual_seed(99)
      local x = fp8.randn { 300, 1000 }
      local i2 = (fp8.rand { 300, 64 } * 1000):floor()
      local i1 = (fp8.rand { 40, 1000 } * 300):floor()
      local h = 0
      local function acc(t)
        local v = t:float():reshape(-1)
        h = (h + (v * fp8.arange(v:numel()):float():sin()):sum():item()) % 1e9
      end
      acc(x:gather(2, i2)); acc(x:to("bf16"):gather(2, i2)); acc(x:t():contiguous():t():gather(2, i2))
      acc(x:gather(1, i1)); acc(x:to("fp16"):gather(1, i1))
      print(string.format("%.17g", h))
    ]]
    U.same_on_threads(BIN, code)
  end)
end)
