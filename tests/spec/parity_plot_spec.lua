-- parity_plot_spec.lua — issue 15 point 8: evaluation metrics in the training CSV (val loss, accuracy,
-- lr, FP8 underflow/saturation per step), PNG plots through gnuplot (train/val curves with --plot, the
-- scale/amax history of an FP8 layer, compare_recipes' loss curves), and without gnuplot one notice
-- and the CSV kept.
local bin = FP8LAB_BIN or "build/fp8lab"
local plot = require "fp8.plot"

local U = dofile("tests/spec/helpers/util.lua")
local tmpdir = U.tmpdir()
assert(os.execute("mkdir -p " .. tmpdir .. "/fm"))

local sh_quote = U.q
local function run(words, env)
  local cmd = (env or "") .. " timeout 120 " .. sh_quote(bin)
  for _, a in ipairs(words) do cmd = cmd .. " " .. sh_quote(a) end
  local p = assert(io.popen(cmd .. " 2>&1"))
  local out = p:read("a")
  local ok = p:close()
  return out, ok == true
end
local read = U.read
local function is_png(path) local s = read(path); return s ~= nil and s:sub(1, 8) == "\137PNG\r\n\26\n" and #s > 2000 end

local synthetic_fmnist = dofile("tests/spec/helpers/synthetic_fmnist.lua")
local function make_dataset(dir, split, n) return synthetic_fmnist(dir, split, n, 4242) end
make_dataset(tmpdir .. "/fm", "train", 200)
make_dataset(tmpdir .. "/fm", "t10k", 50)

local function fm(out, extra)
  local a = { "scripts/train_fashion_mnist.lua", "--root", tmpdir .. "/fm", "--epochs", "2", "--batch-size", "50",
              "--quiet", "--out", out }
  for _, v in ipairs(extra or {}) do a[#a + 1] = v end
  return a
end

describe("training metrics and plots", function()
  it("the CSV has val loss, accuracy, lr and the FP8 under/overflow fractions per step", function()
    local csv = tmpdir .. "/m.csv"
    local out, ok = run(fm(csv, { "--mixed-precision", "fp8", "--fp8-backend", "te", "--eval-every", "2" }))
    assert.is_true(ok, out)
    local text = read(csv)
    local rows = {}
    for line in text:gmatch("[^\n]+") do rows[#rows + 1] = line end
    assert.equal("step,epoch,loss,lr,val_loss,val_acc,fp8_underflow,fp8_saturated", rows[1])
    assert.equal(1 + 8, #rows)   -- 200 / 50 = 4 steps per epoch, 2 epochs
    local evals = 0
    for i = 2, #rows do
      local c = {}
      for v in (rows[i] .. ","):gmatch("([^,]*),") do c[#c + 1] = v end
      assert.equal(8, #c, rows[i])
      assert.is_true(tonumber(c[4]) > 0)                       -- lr
      local u, s = tonumber(c[7]), tonumber(c[8])
      assert.is_true(u ~= nil and u >= 0 and u <= 1, rows[i])   -- FP8 fractions on every step
      assert.is_true(s ~= nil and s >= 0 and s <= 1, rows[i])
      if c[5] ~= "" then
        evals = evals + 1
        assert.is_true(tonumber(c[5]) >= 0 and tonumber(c[6]) >= 0 and tonumber(c[6]) <= 1, rows[i])
      end
    end
    assert.equal(4, evals)   -- steps 2, 4, 6, 8 (the epoch ends fall on them)
    -- without fp8, the FP8 columns stay empty
    out, ok = run(fm(tmpdir .. "/n.csv"))
    assert.is_true(ok, out)
    assert.matches("\n1,1,[%d%.]+,[%de%.%-]+,,,,\n", read(tmpdir .. "/n.csv"))
  end)

  it("--plot writes the train/val PNG and the FP8 scale/amax history PNG", function()
    if not plot.available() then
      pending("gnuplot is not installed (scripts/install-deps.sh installs gnuplot-nox)")
      return
    end
    local csv = tmpdir .. "/p.csv"
    local out, ok = run(fm(csv, { "--mixed-precision", "fp8", "--fp8-backend", "te", "--plot" }))
    assert.is_true(ok, out)
    assert.is_true(is_png(tmpdir .. "/p.png"), out)
    assert.is_true(is_png(tmpdir .. "/p_fp8.png"), out)
    assert.matches("step,layer,role,format,scale,amax", read(tmpdir .. "/p_fp8_stats.csv"))
    assert.is_nil(read(tmpdir .. "/p.png.tmp"))
    -- no --plot: no PNG
    out, ok = run(fm(tmpdir .. "/q.csv"))
    assert.is_true(ok, out)
    assert.is_nil(read(tmpdir .. "/q.png"))
  end)

  it("compare_recipes.lua draws one line per recipe", function()
    if not plot.available() then
      pending("gnuplot is not installed")
      return
    end
    local csv = tmpdir .. "/cmp.csv"
    local out, ok = run({ "scripts/compare_recipes.lua", "--root", tmpdir .. "/fm", "--epochs", "1", "--batch-size", "50",
                          "--only", "fp32,te-hybrid,msamp-O2", "--out", csv })
    assert.is_true(ok, out)
    assert.matches("^step,fp32,te%-hybrid,msamp%-O2\n", read(csv))
    assert.is_true(is_png(tmpdir .. "/cmp.png"), out)
  end)

  it("--out in a directory that does not exist yet: made before training (the FP8 stats log goes there first)", function()
    local csv = tmpdir .. "/new/dir/x.csv"
    local out, ok = run(fm(csv, { "--mixed-precision", "fp8", "--fp8-backend", "te", "--plot", "--epochs", "1" }),
      "FP8LAB_GNUPLOT=/nonexistent/gnuplot")
    assert.is_true(ok, out)
    assert.matches("^step,", read(csv))
    assert.matches("step,layer,role,format,scale,amax", read(tmpdir .. "/new/dir/x_fp8_stats.csv"))
    -- one that cannot be made fails at once, naming it
    U.write(tmpdir .. "/afile", "x")
    out, ok = run(fm(tmpdir .. "/afile/sub/y.csv"))
    assert.is_false(ok)
    assert.truthy(out:find("--out " .. tmpdir .. "/afile/sub/y.csv: cannot create the directory " .. tmpdir
      .. "/afile/sub", 1, true), out)
    assert.is_nil(out:find("epoch 1/", 1, true), out)
    out, ok = run({ "scripts/compare_recipes.lua", "--root", tmpdir .. "/fm", "--epochs", "1", "--only", "fp32",
                    "--out", tmpdir .. "/afile/c.csv" })
    assert.is_false(ok)
    assert.truthy(out:find("--out " .. tmpdir .. "/afile/c.csv: cannot create the directory " .. tmpdir .. "/afile", 1, true), out)
  end)

  it("without gnuplot: one notice, no PNG, the CSV kept", function()
    local csv = tmpdir .. "/g.csv"
    local out, ok = run(fm(csv, { "--mixed-precision", "fp8", "--fp8-backend", "te", "--plot" }),
      "FP8LAB_GNUPLOT=/nonexistent/gnuplot")
    assert.is_true(ok, out)
    local _, n = out:gsub("gnuplot not found", "")
    assert.equal(1, n, out)
    assert.truthy(read(csv))
    assert.is_nil(read(tmpdir .. "/g.png"))
    assert.is_nil(read(tmpdir .. "/g_fp8.png"))
  end)

  it("a gnuplot that writes nothing: a notice with the reason, and an earlier PNG is said to be stale", function()
    local csv, png = tmpdir .. "/stale.csv", tmpdir .. "/stale.png"
    local f = assert(io.open(csv, "w")); f:write("step,loss\n1,2\n2,1\n"); f:close()
    local o = assert(io.open(png, "w")); o:write("an earlier run's picture"); o:close()
    local out, ok = U.sh("FP8LAB_GNUPLOT=true " .. U.q(bin) .. " -e " .. U.q(("print(require('fp8.plot').lines{csv=%q, "
      .. "png=%q, series={{x=1, y=2}}})"):format(csv, png)))
    assert.is_true(ok, out)
    assert.truthy(out:find("notice: " .. png .. " not plotted: true did not write a PNG; the PNG there is an earlier run's", 1, true), out)
    assert.truthy(out:find("nil\ttrue did not write a PNG", 1, true), out)
    assert.is_nil(read(png .. ".tmp"))
  end)

  it("fp8.plot checks its arguments", function()
    assert.has_error(function() plot.lines(5) end)
    assert.has_error(function() plot.lines { csv = "a.csv", png = "a.png", series = {} } end)
    assert.has_error(function() plot.fp8_history { csv = tmpdir .. "/m.csv", png = tmpdir .. "/x.png" } end)
    local csv, png = tmpdir .. "/chk.csv", tmpdir .. "/chk.png"
    U.write(csv, "step,loss\n1,2\n2,1\n")
    -- text went into the gnuplot script as it was: a newline ended the command, and gnuplot ran the next line
    -- (`!cmd`, `system()`: a shell command)
    for _, c in ipairs {
      { { series = { { y = 2, axis = "x1y1 title 'a'\nsystem('touch " .. tmpdir .. "/pwned')" } } },
        'series[1]: axis must be "x1y1" or "x1y2"' },
      { { title = "x\n!touch " .. tmpdir .. "/pwned", series = { { y = 2 } } }, "title must not hold control characters" },
      { { series = { { y = 2, title = "a\nb" } } }, "series[1]: title must not hold control characters" },
      -- options that were taken and dropped, or fell through to Lua's own errors
      { { series = { { y = 2, style = "bogus" } } }, 'series[1]: style must be "lines" or "points"' },
      { { logy = "no", series = { { y = 2 } } }, 'logy must be a boolean, got "no"' },
      { { y2range = { 0, 1 }, series = { { y = 2 } } }, "y2range takes effect only with a series on the right axis" },
      { { y2range = { 0 / 0, 1 }, series = { { y = 2, axis = "x1y2" } } }, "y2range must be {lo, hi}" },
      { { series = { { x = 1 } } }, "series[1]: y must be a CSV column (an integer >= 1), got nil" },
      { { series = { { y = 2.5 } } }, "series[1]: y must be a CSV column (an integer >= 1), got 2.5" },
    } do
      c[1].csv, c[1].png = csv, png
      U.fails_with("plot.lines: " .. c[2], plot.lines, c[1])
    end
    assert.is_nil(U.read(tmpdir .. "/pwned"))
    -- a named pipe as the CSV: refused, not waited on for ever
    local fifo = tmpdir .. "/pipe.csv"
    assert.is_true(os.execute("mkfifo " .. U.q(fifo)))
    U.fails_with("plot.fp8_history: " .. fifo .. " is not a regular file", plot.fp8_history, { csv = fifo, png = png })
    U.fails_with("plot.lines: " .. fifo .. " is not a regular file", plot.lines, { csv = fifo, png = png,
      series = { { y = 2 } } })
    os.remove(fifo)
  end)
end)
