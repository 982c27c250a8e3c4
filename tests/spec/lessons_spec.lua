-- lessons_spec.lua — every lesson of scripts/lessons/ (docs/concepts.md, "Lessons") runs in its --quick
-- mode and shows what it claims, read from the RESULT line it prints; its CSV (and, with gnuplot, its
-- PNG) is written. The text the GPT lessons train on is made here, not read from the system.
local bin = FP8LAB_BIN or "build/fp8lab"

local U = dofile("tests/spec/helpers/util.lua")
local tmpdir = U.tmpdir()

local sh_quote = U.q

-- ~30 kB of text with an alphabet like English prose (a seeded generator of random words, capitals,
-- punctuation and numbers), so the GPT's gradients look like those on Debian's fortunes.
local text = tmpdir .. "/text.txt"
do
  local state = 12345
  local function rnd(n) state = (state * 1103515245 + 12345) % 2147483648; return (state >> 16) % n end
  local words = {}
  for i = 1, 400 do
    local w = {}
    for j = 1, 1 + rnd(9) do w[j] = string.char(97 + rnd(26)) end
    words[i] = table.concat(w)
  end
  local punct = { ".", ",", "!", "?", ";", ":", " --", "'s" }
  local out = {}
  for line = 1, 900 do
    local ws = {}
    for j = 1, 3 + rnd(7) do ws[j] = words[rnd(#words) + 1] end
    if line % 4 == 1 then ws[1] = ws[1]:sub(1, 1):upper() .. ws[1]:sub(2) end
    out[line] = table.concat(ws, " ") .. punct[rnd(#punct) + 1] .. (line % 7 == 1 and (" " .. rnd(100)) or "")
  end
  local f = assert(io.open(text, "w"))
  f:write(table.concat(out, "\n"), "\n")
  f:close()
end

local function lesson(name, extra)
  local out_dir = tmpdir .. "/" .. name
  local cmd = "timeout 120 " .. sh_quote(bin) .. " " .. sh_quote("scripts/lessons/" .. name .. ".lua")
    .. " --quick --out " .. sh_quote(out_dir) .. " " .. (extra or "")
  local p = assert(io.popen(cmd .. " 2>&1"))
  local out = p:read("a")
  local ok = p:close()
  assert(ok, name .. " failed:\n" .. out)
  local line = out:match("RESULT ([^\n]*)")
  assert(line, name .. " printed no RESULT line:\n" .. out)
  local r = {}
  for k, v in line:gmatch("(%S+)=(%S+)") do r[k] = tonumber(v) or v end
  r.out, r.dir = out, out_dir
  return r
end

local function exists(path) local f = io.open(path, "rb"); if f then f:close() end; return f ~= nil end
local has_gnuplot = require("fp8.plot").available()
-- the CSV: a header of `cols` names and `rows` rows of as many numbers (one per step, k, or matrix row), no NaN
local function check_files(r, stem, rows, cols)
  assert.is_true(exists(r.dir .. "/" .. stem .. ".csv"), stem .. ".csv missing")
  local lines = {}
  for l in U.must_read(r.dir .. "/" .. stem .. ".csv"):gmatch("[^\n]+") do lines[#lines + 1] = l end
  assert.are.equal(rows + 1, #lines, stem .. ".csv: header and one row each")
  for i, l in ipairs(lines) do
    local n = 0
    for cell in (l .. ","):gmatch("([^,]*),") do
      n = n + 1
      if i > 1 then
        local v = tonumber(cell)
        assert.is_true(v ~= nil and v == v, ("%s.csv line %d: '%s' is not a number"):format(stem, i, cell))
      end
    end
    assert.are.equal(cols, n, ("%s.csv line %d has %d cells, not %d"):format(stem, i, n, cols))
  end
  if has_gnuplot then assert.is_true(exists(r.dir .. "/" .. stem .. ".png"), stem .. ".png missing") end
  assert.matches("Look at:", r.out)
end

describe("the lessons' and scripts' options", function()
  local function refused(script, args, needle)
    local out, ok = U.sh("timeout 60 " .. sh_quote(bin) .. " " .. sh_quote(script) .. " " .. args)
    assert.is_false(ok, script .. " " .. args .. " ran:\n" .. out)
    assert.truthy(out:find(needle, 1, true), out)
  end
  it("are refused where they would be ignored or leave a result undefined", function()
    local L = "scripts/lessons/"
    refused(L .. "04_tensorwise_vs_rowwise.lua", "--quick=no", "option --quick is a flag and takes no value")
    refused(L .. "03_delayed_vs_current.lua", "--text x", "unknown option '--text'")     -- no GPT in lessons 3, 4
    refused(L .. "04_tensorwise_vs_rowwise.lua", "--steps 4", "unknown option '--steps'")   -- its size is --rows
    refused(L .. "03_delayed_vs_current.lua", "--steps 2", "option --steps expects an integer >= 3, got '2'")
    refused(L .. "04_tensorwise_vs_rowwise.lua", "--rows 1", "option --rows expects an integer >= 2, got '1'")
    refused(L .. "04_tensorwise_vs_rowwise.lua", "--outlier 0", "option --outlier expects a number in [1e-30, 1e30]")
    -- 1e40 times N(0, 1) is past fp32's range: the run ended with NaN errors before
    refused(L .. "04_tensorwise_vs_rowwise.lua", "--outlier 1e40", "option --outlier expects a number in [1e-30, 1e30]")
    refused(L .. "03_delayed_vs_current.lua", "--growth 0", "option --growth expects a finite number > 0, got 0")
    -- inputs past fp32's range (inf at the spike, or after 31 steps of x10) cast inf, not the scaling rules
    refused(L .. "03_delayed_vs_current.lua", "--spike 1e40", "must stay in [1e-30, 1e30] (fp32 holds the inputs")
    refused(L .. "03_delayed_vs_current.lua", "--growth 10", "got 1e+31 at step 31")
    refused(L .. "03_delayed_vs_current.lua", "--steps 4000", "must stay in [1e-30, 1e30]")
    refused("scripts/compare_recipes.lua", "--only ,", "--only: expected a comma-separated list of recipes")
    refused("scripts/compare_recipes.lua", "--lr 1e999", "option --lr expects a finite number >= 0, got '1e999'")
    refused("scripts/compare_recipes_gpt.lua", "--steps 3", "fp8lab scripts/compare_recipes.lua --model gpt")
    refused("scripts/tour.lua", "--steps 3", "unknown option '--steps' (valid: --help)")
  end)
end)

describe("lessons (--quick)", function()
  it("1: unscaled E4M3 gradients mostly underflow, in training too; scaled ones do not", function()
    local r = lesson("01_why_scale", "--text " .. sh_quote(text))
    assert.is_true(r.underflow_e4m3 > 0.5, "unscaled E4M3 underflow " .. r.underflow_e4m3)
    assert.is_true(r.underflow_e5m2 < r.underflow_e4m3)
    assert.is_true(r.underflow_e4m3_scaled < 0.01, "scaled E4M3 underflow " .. r.underflow_e4m3_scaled)
    assert.is_true(r.underflow_e5m2_scaled < 0.01)
    assert.is_true(r.zeroed_e4m3_noscale > 0.5, "unscaled E4M3 zeroes most gradient values while training")
    assert.is_true(r.zeroed_e4m3_scaled < 0.01)
    assert.is_true(r.frozen_e4m3_noscale > 0.01 and r.frozen_e4m3_noscale > 5 * r.frozen_e4m3_scaled,
      ("weights that never moved: unscaled %g, scaled %g"):format(r.frozen_e4m3_noscale, r.frozen_e4m3_scaled))
    assert.are.equal(0, r.frozen_fp32)
    assert.is_true(math.abs(r.drop_e4m3_scaled - r.drop_fp32) < 0.1 * r.drop_fp32, "scaled E4M3 follows fp32")
    check_files(r, "01_why_scale", 30, 4)   -- --quick: 30 steps of 3 runs
  end)

  it("2: E4M3 is the finer grid, E5M2 the wider range on real GPT gradients", function()
    local r = lesson("02_why_hybrid", "--text " .. sh_quote(text))
    assert.is_true(r.err_e4m3 < 0.7 * r.err_e5m2, ("err e4m3 %g vs e5m2 %g"):format(r.err_e4m3, r.err_e5m2))
    assert.is_true(r.underflow_e4m3_k8 > 10 * r.underflow_e5m2_k8 and r.underflow_e4m3_k8 > 1e-3,
      ("underflow at k=8: e4m3 %g, e5m2 %g"):format(r.underflow_e4m3_k8, r.underflow_e5m2_k8))
    check_files(r, "02_why_hybrid", 9, 5)   -- k = 0, 2, ..., 16
  end)

  it("3: a spike saturates delayed scaling, `max` keeps the scale down, `margin` stops growth saturating", function()
    local r = lesson("03_delayed_vs_current")
    assert.is_true(r.max_sat_spike > 0.5 and r.recent_sat_spike > 0.5, "the spike is cast with the old scale")
    assert.are.equal(0, r.current_sat_spike)
    assert.are.equal("never", r.max_back)
    assert.are.equal(1, r.recent_back)
    assert.is_true(r.max_unf_after > 0.1, "max history: ordinary inputs underflow after the spike")
    assert.is_true(r.recent_unf_after < r.max_unf_after / 5)
    assert.are.equal(0, r.current_unf_after)
    assert.is_true(r.recent_sat_other > 0, "growing inputs saturate a little under most_recent, margin 0")
    assert.are.equal(0, r.margin_sat_other)
    check_files(r, "03_delayed_vs_current", 30, 13)   -- 30 steps, 3 x 4 recipes
  end)

  it("4: with outlier rows, rowwise scales keep the normal rows' error low", function()
    local r = lesson("04_tensorwise_vs_rowwise")
    assert.is_true(r.rw_normal < r.tw_normal / 3, ("rowwise %g vs tensorwise %g"):format(r.rw_normal, r.tw_normal))
    assert.is_true(math.abs(r.rw_outlier - r.tw_outlier) < 0.01, "the outlier rows set the tensor's scale")
    assert.is_true(r.tw_underflow > 0.05)
    assert.are.equal(0, r.rw_underflow)
    check_files(r, "04_tensorwise_vs_rowwise", 16, 3)   -- --quick: 16 rows
  end)

  it("runs from its own directory too (common.lua found beside the lesson)", function()
    local abs = bin:sub(1, 1) == "/" and bin or (os.getenv("PWD") .. "/" .. bin)
    local out, ok = U.sh("cd scripts/lessons && timeout 120 " .. sh_quote(abs) .. " 04_tensorwise_vs_rowwise.lua --quick --out "
      .. sh_quote(tmpdir .. "/own_dir"))
    assert.is_true(ok, out)
    assert.matches("RESULT tw_normal=", out)
  end)

  it("5: MS-AMP levels hold fewer bytes per parameter and train alike", function()
    local r = lesson("05_msamp_memory", "--text " .. sh_quote(text))
    assert.is_true(r.bpp_fp32 > 15.5 and r.bpp_fp32 < 17, "fp32 AdamW: about 16 B/param, got " .. r.bpp_fp32)
    assert.is_true(r.bpp_O1 < 0.85 * r.bpp_fp32)
    assert.is_true(r.bpp_O2 < 0.7 * r.bpp_O1)
    assert.is_true(r.bpp_O3 > r.bpp_O2 and r.bpp_O3 < r.bpp_O1)
    for _, lv in ipairs { "O1", "O2", "O3" } do
      local l = r["loss_" .. lv]
      assert.is_true(math.abs(l - r.loss_fp32) < 0.1 * r.loss_fp32, ("loss %s %g vs fp32 %g"):format(lv, l, r.loss_fp32))
    end
    -- docs/concepts.md: O3's stored E4M3 weight is the cast of the fp16 master that O2's forward makes
    assert.are.equal(r.loss_O2, r.loss_O3, "O2 and O3 train identically")
    check_files(r, "05_msamp_memory", 20, 6)   -- --quick: 20 steps of 5 levels
  end)
end)

describe("scripts/allreduce_prescale.lua (docs/recipes.md: why the FP8 all-reduce divides by N)", function()
  it("1/N never passes 448 on identical gradients; 1/sqrt(N) saturates there", function()
    local out, ok = U.sh("timeout 60 " .. sh_quote(bin) .. " scripts/allreduce_prescale.lua 8")
    assert.is_true(ok, out)
    local function row(case, pre)
      local line = out:match("\n" .. case:gsub("%p", "%%%0") .. " +" .. pre:gsub("%p", "%%%0") .. " +([^\n]+)")
      assert.truthy(line, out)
      local nmse, worst, sat = line:match("^(%S+) +(%S+)%% +(%d+) of")
      return tonumber(nmse), tonumber(worst), tonumber(sat)
    end
    local n1, w1 = row("identical", "1/N")
    local n2, w2, s2 = row("identical", "1/sqrt(N)")
    assert.is_true(s2 > 100 and n2 > 10 * n1 and w2 > 3 * w1, out)
    local i1 = row("independent", "1/N")
    local i2 = row("independent", "1/sqrt(N)")
    assert.is_true(i1 < 5e-3 and i2 < 5e-3, out)
    local _, ok2 = U.sh(sh_quote(bin) .. " scripts/allreduce_prescale.lua 1")
    assert.is_false(ok2)
  end)
end)

describe("scripts/tour.lua and the README's session at the prompt", function()
  it("the tour runs to its end and shows what its comments say", function()
    local out, ok = U.sh("timeout 60 " .. sh_quote(bin) .. " scripts/tour.lua")
    assert.is_true(ok, out)
    assert.truthy(out:find("\n126\t448.0\n127\n126\t448.0\n", 1, true), out)   -- tie to even, NaN, saturation
    assert.truthy(out:find("result     underflowed: a nonzero input became zero", 1, true), out)
    assert.matches("scale 1:   underflowed\t%d+\tof\t1024", out)
    assert.matches("\nNext: run `build/fp8lab`", out)
  end)

  it("README.md's session prints what the README shows", function()
    local readme = U.must_read("README.md")
    local block = assert(readme:match("```\n%$ build/fp8lab\n(.-)```"), "the README's session block")
    local inputs, expected = {}, {}
    for line in block:gmatch("[^\n]+") do
      local code = line:match("^fp8> (.*)$")
      if code then inputs[#inputs + 1] = code else expected[#expected + 1] = line end
    end
    local script = tmpdir .. "/readme_session.txt"
    U.write(script, table.concat(inputs, "\n") .. "\n")
    local out, ok = U.sh(sh_quote(bin) .. " -i < " .. sh_quote(script))
    assert.is_true(ok, out)
    local got = {}
    for line in out:gmatch("[^\n]+") do got[#got + 1] = line end
    assert.are.same(expected, got)
  end)
end)
