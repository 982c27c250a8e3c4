-- parity_install_spec.lua — issue 15 point 10: `make install PREFIX=... DESTDIR=...` puts the binary,
-- the Lua library, the scripts, the docs and the man page where Debian expects them; the installed
-- binary runs scripts from anywhere; `make uninstall` removes it all.
local bin = FP8LAB_BIN or "build/fp8lab"
local build = bin:match("^(.*)/fp8lab$") or "build"

local U = dofile("tests/spec/helpers/util.lua")
local sh_quote, sh = U.q, U.sh
local function exists(p) local f = io.open(p, "r"); if f then f:close() end; return f ~= nil end

describe("make install / uninstall", function()
  it("installs into a temporary prefix, runs from there, and uninstalls", function()
    local dest = os.tmpname()
    os.remove(dest)
    assert(os.execute("mkdir -p " .. sh_quote(dest)))
    -- No rebuild: install only copies what the test run built. Every object depends on the build's flags
    -- stamp, so make runs with the settings that wrote it (BUILD/make.args, e.g. CUDA=0 or SAN=1 OPT=-O1) and
    -- nothing else of an outer make's MAKEFLAGS (its jobserver). `make -q` first: other settings would
    -- rebuild the binary running this spec.
    local args = U.read(build .. "/make.args")
    assert.is_truthy(args, "no " .. build .. "/make.args: build with this Makefile first")
    local base = "env -u MAKELEVEL -u MFLAGS MAKEFLAGS=" .. sh_quote("-- " .. args:gsub("\n$", ""))
      .. " timeout 120 make -s BUILD=" .. sh_quote(build)
    local out, ok = sh(base .. " -q " .. sh_quote(bin))
    assert.is_true(ok, "make -q " .. bin .. " with the settings of " .. build .. "/make.args (" .. args
      .. "): the binary is not up to date, install would rebuild it\n" .. out)
    local bin_before = U.sh("stat -c %y.%i " .. sh_quote(bin))
    local make = base .. " PREFIX=/opt/fp8 DESTDIR=" .. sh_quote(dest)
    out, ok = sh(make .. " install")
    assert.is_true(ok, out)
    assert.are.equal(bin_before, U.sh("stat -c %y.%i " .. sh_quote(bin)), "make install rebuilt " .. bin)
    local root = dest .. "/opt/fp8"
    for _, p in ipairs { "/bin/fp8lab", "/share/man/man1/fp8lab.1", "/share/lua/5.4/fp8/accelerator.lua",
                         "/share/lua/5.4/fp8/nn/linear.lua", "/share/fp8lab/scripts/train_char_gpt.lua",
                         "/share/doc/fp8lab/cli.md", "/share/fp8lab/scripts/lessons/common.lua",
                         "/share/fp8lab/scripts/lessons/01_why_scale.lua", "/share/doc/fp8lab/img/fidelity_gpt_val.png" } do
      assert.is_true(exists(root .. p), "missing " .. p)
    end
    local f = assert(io.open(root .. "/share/man/man1/fp8lab.1"))
    local man = f:read("a")
    f:close()
    assert.matches("^%.TH FP8LAB 1", man)
    assert.matches("%.SH OPTIONS", man)
    assert.truthy(man:find("gradient_accumulation_steps", 1, true))
    -- the installed binary runs a script from an unrelated directory, and an installed script
    local script = dest .. "/hello.lua"
    f = assert(io.open(script, "w"))
    f:write('print("sum=" .. fp8.tensor{1, 2, 3}:sum():item())\n')
    f:close()
    out, ok = sh("cd / && " .. sh_quote(root .. "/bin/fp8lab") .. " " .. sh_quote(script))
    assert.is_true(ok, out)
    assert.matches("sum=6", out)
    out, ok = sh("cd / && " .. sh_quote(root .. "/bin/fp8lab") .. " " .. sh_quote(root .. "/share/fp8lab/scripts/train_char_gpt.lua") .. " --help")
    assert.is_true(ok, out)
    assert.matches("usage: fp8lab scripts/train_char_gpt.lua", out)
    out, ok = sh("cd / && " .. sh_quote(root .. "/bin/fp8lab") .. " " .. sh_quote(root .. "/share/fp8lab/scripts/lessons/01_why_scale.lua") .. " --help")
    assert.is_true(ok, out)
    assert.matches("usage: fp8lab scripts/lessons/01_why_scale.lua", out)
    out, ok = sh(make .. " uninstall")
    assert.is_true(ok, out)
    for _, p in ipairs { "/bin/fp8lab", "/share/man/man1/fp8lab.1", "/share/lua/5.4/fp8/accelerator.lua",
                         "/share/fp8lab/scripts/train_char_gpt.lua", "/share/doc/fp8lab/cli.md",
                         "/share/fp8lab/scripts/lessons/common.lua", "/share/doc/fp8lab/img/fidelity_gpt_val.png" } do
      assert.is_false(exists(root .. p), "left behind: " .. p)
    end
    os.execute("rm -rf " .. sh_quote(dest))
  end)
end)
