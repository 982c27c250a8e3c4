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

-- t's elements in order, as one flat Lua list (any number of dims)
function U.flat(t)
  local out = {}
  local function walk(x) if type(x) == "table" then for _, v in ipairs(x) do walk(v) end else out[#out + 1] = x end end
  walk(t:totable())
  return out
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

return U
