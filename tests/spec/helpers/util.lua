-- util.lua — small helpers shared by the spec files, loaded with
-- `local U = dofile("tests/spec/helpers/util.lua")` (from the repository root, as the specs run).
-- Not a spec itself (the name does not end in _spec.lua). Its assertions are busted's own (luassert),
-- the same object the specs call `assert`, so a failure here reads as a failure of the calling test.
local assert = require "luassert"

local U = {}

-- A string (or anything tostring takes) quoted for the shell: 'it'\''s'.
function U.q(s) return "'" .. tostring(s):gsub("'", "'\\''") .. "'" end

-- The bytes of a file, or nil when it cannot be opened.
function U.read(path)
  local f = io.open(path, "rb")
  if not f then return nil end
  local s = f:read("a")
  f:close()
  return s
end

-- The bytes of a file (nil when it cannot be opened); the file is then removed.
function U.take(path)
  local s = U.read(path)
  os.remove(path)
  return s
end

-- The bytes of a file that must exist (fails with io.open's message otherwise).
function U.must_read(path)
  local f = assert(io.open(path, "rb"))
  local s = f:read("a")
  f:close()
  return s
end

-- Writes text to path (binary mode, replacing the file), failing if it cannot be opened.
function U.write(path, text)
  local f = assert(io.open(path, "wb"))
  f:write(text)
  f:close()
end

-- A fresh, empty directory under the system's temporary folder; returns its path.
function U.tmpdir()
  local d = os.tmpname()
  os.remove(d)
  assert(os.execute("mkdir -p " .. U.q(d)))
  return d
end

-- Runs a shell command with stderr joined to stdout; returns the output and whether it exited 0.
function U.sh(cmd)
  local p = assert(io.popen(cmd .. " 2>&1"))
  local out = p:read("a")
  local ok = p:close()
  return out, ok == true
end

-- The names of the ops f() records (fp8.profiler), in order, each between spaces (" add sum norm_rescue "): what a
-- call ran, e.g. whether it read a value back (a min, a max, an item).
function U.ops_of(f)
  local prof = fp8.profiler.profile {}
  prof:start()
  f()
  prof:stop()
  local names = {}
  for _, e in ipairs(prof:events()) do names[#names + 1] = e.name end
  return " " .. table.concat(names, " ") .. " "
end

-- Runs the Lua chunk `code` (which prints one number: a hash of what it computed) in a child `bin -e` on 1 and on 2
-- threads (OMP_NUM_THREADS) and asserts both print the same; returns what they printed.
function U.same_on_threads(bin, code)
  local function run(threads)
    local out, ok = U.sh(("OMP_NUM_THREADS=%d %s -e %s"):format(threads, bin, U.q(code)))
    assert(ok, out)
    return out
  end
  local one = run(1)
  assert.are.equal(one, run(2))
  assert.is_truthy(one:match("^%d"), one)
  return one
end

-- Runs `code` in a child `bin -e` under each FP8LAB_CPU_ISA cap of caps (a list) and asserts each ran and printed
-- want (the kernels a cap leaves must give the same bits).
function U.same_under_caps(bin, code, want, caps)
  for _, cap in ipairs(caps) do
    local out, ok = U.sh(("FP8LAB_CPU_ISA=%s %s -e %s"):format(cap, bin, U.q(code)))
    assert.is_true(ok, out)
    assert.are.equal(want, out, cap)
  end
end

-- Whether this CPU has AVX-512 (F and BW: what oneDNN 2.6's bf16 convolutions need, AMX's, AVX512_BF16's or its
-- emulation), from /proc/cpuinfo; false where that cannot be read.
function U.has_avx512()
  local f = io.open("/proc/cpuinfo")
  if not f then return false end
  local info = f:read("a")
  f:close()
  return info:find("avx512f", 1, true) ~= nil and info:find("avx512bw", 1, true) ~= nil
end

-- Whether the AVX-512 kernels (ours and oneDNN's) run in a child started with this process's environment: the CPU has
-- them (U.has_avx512) and FP8LAB_CPU_ISA does not cap it to avx2. Where not, oneDNN has no bf16 matmul or convolution,
-- and its callers take the CPU device's own kernels (an AVX2 host: CI may run on one).
function U.avx512_runs()
  return require("fp8.config").sys.cpu_isa() ~= "avx2" and U.has_avx512()
end

-- Runs f(...) and returns its error message, asserting it failed and that the message contains
-- every plain substring in `needles` (a string or a list of strings).
function U.fails_with(needles, f, ...)
  local ok, err = pcall(f, ...)
  assert.is_false(ok, "expected an error")
  err = tostring(err)
  if type(needles) == "string" then needles = { needles } end
  for _, n in ipairs(needles) do
    assert.truthy(err:find(n, 1, true), ("message %q lacks %q"):format(err, n))
  end
  return err
end

-- Runs f(...) and returns its error message, asserting it failed (fails_with with no needles; the sweep specs' err_of)
function U.err_of(f, ...) return U.fails_with({}, f, ...) end

-- t's elements in order, as one flat Lua list (any number of dims)
function U.flat(t)
  local out = {}
  local function walk(x) if type(x) == "table" then for _, v in ipairs(x) do walk(v) end else out[#out + 1] = x end end
  walk(t:totable())
  return out
end

-- A leaf's gradient as U.flat gives it, asserting one reached the leaf (the sweep specs' grad_of)
function U.grad_of(t)
  assert(t.grad, "no gradient reached the leaf")
  return U.flat(t.grad)
end

-- A Lua number (a double) rounded to the nearest fp32, as a tensor of dtype fp32 would hold it.
function U.f32(v) return (string.unpack("<f", string.pack("<f", v))) end

-- Two numbers the same to the bit as floats go: NaN equals NaN (payloads not compared), -0 and +0 differ.
function U.same_number(a, b)
  if a ~= a then return b ~= b end
  if a == 0 and b == 0 then return 1 / a == 1 / b end
  return a == b
end

-- The fixture generators' deterministic tensor (scripts/gen_torch_forms.py's and gen_nn_parity.py's fill()): element
-- i (0-based, row-major) is ((37·i + 11·seed) mod 23 − 11) / 8 · scale.
function U.fill(shape, seed, scale)
  local n = 1
  for _, d in ipairs(shape) do n = n * d end
  local v = {}
  for i = 0, n - 1 do v[i + 1] = ((i * 37 + seed * 11) % 23 - 11) / 8 * (scale or 1) end
  return fp8.tensor(v):reshape(shape)
end

-- A tensor against a reference's nested lists, element by element, within tol relative (absolute below 1).
function U.same_values(name, got, want, tol)
  assert.is_not_nil(want, name .. ": no reference")
  local g, w = got:reshape(-1):totable(), {}
  local function flat(t) if type(t) == "number" then w[#w + 1] = t else for _, v in ipairs(t) do flat(v) end end end
  flat(want)
  assert.are.equal(#w, #g, name)
  for i = 1, #w do
    assert.is_true(math.abs(g[i] - w[i]) <= tol * math.max(1, math.abs(w[i])),
      ("%s[%d]: %.9g vs %.9g"):format(name, i, g[i], w[i]))
  end
end

-- a and b of one shape and dtype with equal values, zeros of one sign, or NaN on both sides (a NaN's payload is not
-- compared): the check of a fused path against the composite it replaces (inference_spec, encoder_inference_spec)
function U.same_bits(name, a, b)
  assert.are.same(b:shape(), a:shape(), name .. ": shape")
  assert.are.equal(b:dtype(), a:dtype(), name .. ": dtype")
  local x, y = a:to("fp32"):reshape(-1):totable(), b:to("fp32"):reshape(-1):totable()
  for i = 1, #x do
    local ok = (x[i] == y[i] and (x[i] ~= 0 or 1 / x[i] == 1 / y[i])) or (x[i] ~= x[i] and y[i] ~= y[i])
    if not ok then assert.is_true(ok, ("%s[%d]: %.9g vs %.9g"):format(name, i, x[i], y[i])) end
  end
end

-- The loop of the specs that check a new reduction against the composite it replaced: f(what, x, xd, dim, keepdim)
-- for every tensor x of `cases` (a table name → fp32 tensor, visited in name order), every dtype of `dtypes` (xd is x
-- in it), every dim from first_dim to xd's last (dim 0 stands for "over all dims" and is passed as nil), and keepdim
-- false then true; `what` names the case for messages.
function U.each_reduction(cases, dtypes, first_dim, f)
  local names = {}
  for name in pairs(cases) do names[#names + 1] = name end
  table.sort(names)
  for _, name in ipairs(names) do
    local x = cases[name]
    for _, dt in ipairs(dtypes) do
      local xd = x:to(dt)
      for d = first_dim, xd:dim() do
        local dim = d > 0 and d or nil
        for _, keep in ipairs({ false, true }) do
          f(("%s %s dim %s keepdim %s"):format(name, dt, tostring(dim), tostring(keep)), x, xd, dim, keep)
        end
      end
    end
  end
end

-- The gradients new(x) and old(x) leave on two leaf copies of x after backward with one random gradient of their
-- output's shape (new's output is returned first, for checks of its grad_fn).
function U.grads_of_two(x, new, old)
  local l1, l2 = x:clone():requires_grad_(), x:clone():requires_grad_()
  local y1, y2 = new(l1), old(l2)
  local g = fp8.randn(y2:shape())
  y1:backward(g)
  y2:backward(g)
  return l1.grad, l2.grad, y1
end

-- A prepared Accelerator's fresh checkpoint at dir/ck (a Linear(4, 4) model): the Accelerator, its
-- random_states_0.json's path, the checkpoint's JSON module and that file's table (to edit, write back and load).
function U.fresh_random_states(dir)
  local acc = fp8.Accelerator { config = false, env = {}, cpu = true }
  acc:prepare(fp8.nn.Linear(4, 4))
  acc:save_state(dir .. "/ck")
  local p = dir .. "/ck/random_states_0.json"
  local C = require "fp8._checkpoint"
  return acc, p, C, C.json_decode(U.read(p))
end

-- The lr of each of an optimizer's param groups, in order.
function U.group_lrs(opt)
  local out = {}
  for i, g in ipairs(opt.param_groups) do out[i] = g.lr end
  return out
end

-- Rows of lrs (one row a step, one value a group) against torch's: the same lengths, each value within 1e-12 of it
-- (relative), or 1e-15 of a 0.
-- NHWC memory seen as [N, C, H, W]: torch's x.permute(0, 2, 3, 1).contiguous().permute(0, 3, 1, 2), channels_last
function U.cl(t) return t:permute(1, 3, 4, 2):contiguous():permute(1, 4, 2, 3) end

-- got (a stride list) equals torch's want, else an error naming what and both lists
function U.same_strides(what, got, want)
  local ok = #got == #want
  for i = 1, #want do ok = ok and got[i] == want[i] end
  if not ok then
    error(("%s: strides { %s }, torch's { %s }"):format(what, table.concat(got, ", "), table.concat(want, ", ")), 2)
  end
end

function U.close_lr_rows(want, got, what)
  assert.are.equal(#want, #got, what)
  for t, row in ipairs(want) do
    assert.are.equal(#row, #got[t], ("%s: step %d's groups"):format(what, t))
    for i, v in ipairs(row) do
      assert.is_true(math.abs(v - got[t][i]) <= 1e-12 * math.abs(v) + 1e-15,
        ("%s: step %d group %d: %.17g, torch's %.17g"):format(what, t, i, got[t][i], v))
    end
  end
end

-- A table whose __len lies (2^62) and whose __index answers every key (the API sweep's LYING value).
function U.lying()
  return setmetatable({}, { __len = function() return 1 << 62 end, __index = function() return 1 end })
end

-- f(...) under pcall with a budget of Lua instructions (a count hook, not a clock): pcall's results, or false and
-- "did not end within 5e7 instructions" for a loop that never ends. Past the budget the hook raises every 1000
-- instructions, so a loop inside a pcall of the library's ends too.
function U.ends(f, ...)
  local function over() error("did not end within 5e7 instructions", 2) end
  debug.sethook(function() debug.sethook(over, "", 1000); over() end, "", 50000000)
  local r = table.pack(pcall(f, ...))
  debug.sethook()
  return table.unpack(r, 1, r.n)
end

-- The taps of conv2d's definition, x [N, C, H, W], w [OC, cg, kh, kw], the output [N, OC, oh, ow] (stride s and
-- dilation d {h, w}, pads {top, bottom, left, right}, g groups): for each output in order, start(q, o) (q its flat
-- index from 1, o its channel from 0), then tap(xi, wk) for each product it sums (flat indexes of x and w from 1, in
-- the order c, p, q over the taps inside the image), then done(q, o) where given.
local function conv_taps(dims, s, d, pads, g, start, tap, done)
  local N, C, H, W, OC, cg, kh, kw, oh, ow = table.unpack(dims)
  local ocg, q0 = OC // g, 0
  for n = 0, N - 1 do
    for o = 0, OC - 1 do
      local grp = o // ocg
      for i = 0, oh - 1 do
        for j = 0, ow - 1 do
          q0 = q0 + 1
          start(q0, o)
          for c = 0, cg - 1 do
            local ci = grp * cg + c
            for p = 0, kh - 1 do
              local hi = i * s[1] - pads[1] + p * d[1]
              if hi >= 0 and hi < H then
                for q = 0, kw - 1 do
                  local wi = j * s[2] - pads[3] + q * d[2]
                  if wi >= 0 and wi < W then
                    tap(((n * C + ci) * H + hi) * W + wi + 1, ((o * cg + c) * kh + p) * kw + q + 1)
                  end
                end
              end
            end
          end
          if done then done(q0, o) end
        end
      end
    end
  end
end

local function flat(t) return t:float():contiguous():view(-1):tolist() end

-- conv2d by its definition in Lua's doubles: x [N, C, H, W], w [OC, C/g, kh, kw] (tensors), b a bias tensor or nil,
-- stride s and dilation d ({h, w}), pads {top, bottom, left, right}, g groups. Returns the result's flat list, per
-- element Σ|x·w| over its products (the bias's |b| included), and the result's shape.
function U.ref_conv2d(x, w, b, s, d, pads, g)
  local N, C, H, W = x:size(1), x:size(2), x:size(3), x:size(4)
  local OC, cg, kh, kw = w:size(1), w:size(2), w:size(3), w:size(4)
  local xv, wv, bv = flat(x), flat(w), b and flat(b) or nil
  local oh = (H + pads[1] + pads[2] - d[1] * (kh - 1) - 1) // s[1] + 1
  local ow = (W + pads[3] + pads[4] - d[2] * (kw - 1) - 1) // s[2] + 1
  local y, mag = {}, {}
  local acc, m
  conv_taps({ N, C, H, W, OC, cg, kh, kw, oh, ow }, s, d, pads, g,
    function() acc, m = 0.0, 0.0 end,
    function(xi, wk)
      local t = xv[xi] * wv[wk]
      acc, m = acc + t, m + math.abs(t)
    end,
    function(q, o)
      if bv then acc = acc + bv[o + 1]; m = m + math.abs(bv[o + 1]) end
      y[q], mag[q] = acc, m
    end)
  return y, mag, { N, OC, oh, ow }
end

-- conv2d's gradients in doubles for the output gradient gy ([N, OC, oh, ow]): the adjoint of U.ref_conv2d's sums.
-- dx[n, ci, h, w] = Σ gy·w over the outputs that read it, dw[o, c, p, q] = Σ_n,i,j gy·x, db[o] = Σ gy; each with
-- its Σ|term| (for U.conv_close) and the most terms one of its elements sums (dx, dw, db).
function U.ref_conv2d_bwd(x, w, gy, s, d, pads, g)
  local N, C, H, W = x:size(1), x:size(2), x:size(3), x:size(4)
  local OC, cg, kh, kw = w:size(1), w:size(2), w:size(3), w:size(4)
  local oh, ow = gy:size(3), gy:size(4)
  local xv, wv, gv = flat(x), flat(w), flat(gy)
  local dx, dxm, dw, dwm, db, dbm = {}, {}, {}, {}, {}, {}
  for i = 1, N * C * H * W do dx[i], dxm[i] = 0.0, 0.0 end
  for i = 1, OC * cg * kh * kw do dw[i], dwm[i] = 0.0, 0.0 end
  for i = 1, OC do db[i], dbm[i] = 0.0, 0.0 end
  local gval
  conv_taps({ N, C, H, W, OC, cg, kh, kw, oh, ow }, s, d, pads, g,
    function(q, o)
      gval = gv[q]
      db[o + 1], dbm[o + 1] = db[o + 1] + gval, dbm[o + 1] + math.abs(gval)
    end,
    function(xi, wk)
      local tx, tw = gval * wv[wk], gval * xv[xi]
      dx[xi], dxm[xi] = dx[xi] + tx, dxm[xi] + math.abs(tx)
      dw[wk], dwm[wk] = dw[wk] + tw, dwm[wk] + math.abs(tw)
    end)
  return { dx = dx, dxm = dxm, dw = dw, dwm = dwm, db = db, dbm = dbm,
           K = { OC // g * kh * kw, N * oh * ow, N * oh * ow } }
end

-- A conv's result (a tensor) against U.ref_conv2d's list want, within the fp32 sum's error bound
-- (K + 1)·2^-24·Σ|x·w| per element (mag), K the products an output sums.
function U.conv_close(what, got, want, mag, K)
  local g = got:float():contiguous():view(-1):tolist()
  assert.are.equal(#want, #g, what .. ": sizes")
  for i = 1, #want do
    local bound = (K + 1) * 2 ^ -24 * mag[i] + 1e-30
    if not (math.abs(g[i] - want[i]) <= bound) then
      error(("%s: element %d is %.9g, the double reference's %.9g (bound %.3g)"):format(what, i, g[i], want[i], bound), 2)
    end
  end
end

-- got (a number or nested lists) equals torch's want: both NaN, the same infinity, the same zero (its sign included,
-- unless unsigned_zero: a zero gradient's sign differs where torch's formula multiplies by 0 and fp8lab selects +0),
-- or within rel of want (relative). where names the value in the message ("grad[2][1]").
function U.near(want, got, rel, where, unsigned_zero)
  if type(want) == "table" then
    assert.are.equal(#want, #got, where)
    for i = 1, #want do U.near(want[i], got[i], rel, where .. "[" .. i .. "]", unsigned_zero) end
    return
  end
  if want ~= want then assert.is_true(got ~= got, ("%s: %s, want NaN"):format(where, got)); return end
  if want == 0 then
    local sign_ok = unsigned_zero or (1 / got) == (1 / want)
    assert.is_true(got == 0 and sign_ok, ("%s: %s, want %s"):format(where, got, 1 / want < 0 and "-0" or "0"))
    return
  end
  if want == math.huge or want == -math.huge then assert.are.equal(want, got, where); return end
  assert.is_true(math.abs(got - want) <= rel * math.abs(want), ("%s: %.9g, want %.9g"):format(where, got, want))
end


-- Lua source for a child's code (prepend it: U.HASH_BITS .. [[...]]): hash_bits(t), a 48-bit FNV-1a-style hash of t's
-- values' fp32 bit patterns in order, and hash_of(t), "<numel>:<hash in hex>": the bits the speed specs hold
-- (opspeed8, opspeed9, softmaxdim, convbf16) before and after a change, without the values themselves.
U.HASH_BITS = [[
local function hash_bits(t)
  local x = 0xcbf29ce484222325
  for _, e in ipairs(t:float():reshape({ -1 }):tolist()) do
    x = ((x ~ string.unpack("<I4", string.pack("<f", e))) * 0x100000001b3) & 0xffffffffffff
  end
  return x
end
local function hash_of(t) return ("%d:%x"):format(t:numel(), hash_bits(t)) end
]]
return U
