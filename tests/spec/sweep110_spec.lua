-- Found on 2026-12-07 (stop 98): the hostile API sweep (tests/fuzz/api_sweep.lua, seeds 110 and 108, ASan + UBSan)
-- over what stop 98 merged (conv2d's fp32 forward by oneDNN's direct convolution, core/cpu/cpu_conv.c; the norms'
-- rescue in the core and its _dims_mask; F.normalize with every p; x:pow; dist; the hooks' removal), with the sweep's
-- new receivers (Conv2d and Conv1d, their geometry fields read back by a forward), and hand-written hostile convs
-- compared with a float64 reference. docs/robustness.md, "The hostile sweep over stop 98's additions (stop 98)".
local F = fp8.nn.functional

local U = dofile("tests/spec/helpers/util.lua")
local ends, lying = U.ends, U.lying   -- a call under a budget of instructions; the sweep's lying table

local BIN = arg and arg[-1] or "build/fp8lab"
local q = U.q
local function slurp(p)
  local f = io.open(p, "rb")
  local s = f and f:read("a") or ""
  if f then f:close() end
  os.remove(p)
  return s
end

describe("conv2d with a padding wider than the image", function()
  -- oneDNN's direct kernels work over the padded plane: a 3×3 image padded by 2^28 with a stride of 2^28 (three
  -- windows a row) ran out of memory and died of SIGSEGV under ulimit -v 2000000 after 35 s (without the limit: 2^22
  -- took 7.5 s and 540 MB, 2^26 more than 30 s and 2 GB, not interruptible; the same with a dilation of 2^26). A
  -- padding wider than the image goes to the columns now, which make only the windows. ASan reserves terabytes of
  -- address space, so ulimit -v cannot apply to its build.
  local it_mem = os.getenv("ASAN_OPTIONS") and pending or it
  it_mem("runs in the columns' memory, with the windows' values", function()
    local code = "local F = fp8.nn.functional; local x = fp8.arange(9):float():view{1, 1, 3, 3}\n"
      .. "local w = fp8.ones{2, 1, 3, 3}\n"
      .. "for _, e in ipairs{28, 30} do\n"
      .. "  local y = F.conv2d(x, w, nil, {padding = {0, 1 << e}, stride = {1, 1 << e}})\n"
      .. "  io.write(table.concat(y:flatten():tolist(), ' '), '\\n')\n"
      .. "  y = F.conv2d(x, w, fp8.ones{2}, {padding = {1 << e, 1}, stride = {1 << e, 1}})\n"
      .. "  io.write(table.concat(y:flatten():tolist(), ' '), '\\n')\n"
      .. "  y = F.conv2d(x, fp8.ones{2, 1, 2, 2}, nil,\n"
      .. "    {padding = {0, 1 << e}, stride = {1, 1 << e}, dilation = {1, 1 << e}})\n"
      .. "  io.write(table.concat(y:flatten():tolist(), ' '), '\\n')\n"
      .. "end"
    local out, err = os.tmpname(), os.tmpname()
    local _, _, rc = os.execute(("ulimit -v 2000000; timeout -s KILL 120 %s -e %s </dev/null >%s 2>%s"):format(q(BIN),
      q(code), out, err))
    out, err = slurp(out), slurp(err)
    assert.are.equal(0, rc, err)
    -- the middle window holds the image (0 + ... + 8 = 36); the second: the columns' sums 21, 36, 27 and the bias
    -- 1, the bias alone in the padding; the third: a 2×2 kernel dilated by 2^e along the row, two windows, each with
    -- one tap in the image, on its first column (rows 1-2: 0 + 3, rows 2-3: 3 + 6)
    local a = "0.0 36.0 0.0 0.0 36.0 0.0"
    local b = "1.0 1.0 1.0 22.0 37.0 28.0 1.0 1.0 1.0 1.0 1.0 1.0 22.0 37.0 28.0 1.0 1.0 1.0"
    local c = "3.0 3.0 9.0 9.0 3.0 3.0 9.0 9.0"
    assert.are.equal(table.concat({ a, b, c, a, b, c }, "\n") .. "\n", out)
  end)
end)

describe("a conv's or pool's repr with a field written by hand", function()
  -- extra_repr joined a list field with table.concat: a table whose __len lies (2^62) ran for ever in tostring(m),
  -- and a string in_channels or groups was string.format's raw error. It shows the raw elements now, as torch's repr
  -- shows what the attribute holds.
  it("ends, and shows what the field holds", function()
    for _, k in ipairs { "kernel_size", "stride", "padding", "dilation" } do
      for _, m in ipairs { fp8.nn.Conv2d(4, 6, 3, { groups = 2 }), fp8.nn.Conv1d(4, 6, 3) } do
        m[k] = lying()
        local ok, s = ends(tostring, m)
        assert.is_true(ok, s)
        assert.truthy(s:find("Conv%dd%(4, 6"), s)
      end
    end
    local m = fp8.nn.Conv2d(4, 6, 3)
    m.in_channels, m.groups = "four", "2"
    assert.are.equal("Conv2d(four, 6, kernel_size=(3, 3), stride=1, padding=0, groups=2)", tostring(m))
    local p = fp8.nn.MaxPool2d(3)
    p.opts.stride = lying()
    local ok, s = ends(tostring, p)
    assert.is_true(ok, s)
    assert.are.equal("MaxPool2d(kernel_size=3, stride=())", s)
    m = fp8.nn.Conv2d(4, 6, { 3, 2 }, { padding = 1, groups = 2, bias = false, padding_mode = "reflect" })
    assert.are.equal(
      "Conv2d(4, 6, kernel_size=(3, 2), stride=1, padding=1, groups=2, bias=false, padding_mode=reflect)", tostring(m))
  end)
end)

describe("the norms' dims mask", function()
  -- T._dims_mask (the norms' rescue, stop 98) walked its list with ipairs: a table whose __index answers every key
  -- ran for ever. It reads the list raw and refuses a dim out of range.
  it("ends on a lying list and refuses a dim out of range", function()
    local T = require("fp8.tensor")
    local ok, m = ends(T._dims_mask, fp8.ones{2, 3}, lying())
    assert.is_true(ok, m)
    assert.are.equal(0, m)
    assert.are.equal(2, T._dims_mask(fp8.ones{2, 3}, { -1 }))
    assert.are.equal(3, T._dims_mask(fp8.ones{2, 3}, { 1, 2 }))
    assert.are.equal(3, T._dims_mask(fp8.ones{2, 3}))
    local ok2, e = pcall(T._dims_mask, fp8.ones{2, 3}, { 3 })
    assert.is_false(ok2)
    assert.truthy(tostring(e):find("dim must be an integer in [-2, -1] or [1, 2], got 3", 1, true), e)
  end)
end)
