-- Stop 97 (2026-12-06): make test's time. scripts/run-tests.sh runs the spec files in two lanes (test_core, then
-- spec files, beside spec files from the start), each file its own busted run, the slowest first
-- (scripts/spec-times.txt). docs/performance.md, "make test's time (stop 97)". Stand-in binaries: test_core prints
-- a report, fp8lab logs the file it was given and prints a busted summary.
local U = dofile("tests/spec/helpers/util.lua")
local q, sh = U.q, U.sh

local function spec_files()
  local list = {}
  local p = assert(io.popen("for f in tests/spec/*_spec.lua; do echo \"$f\"; done"))
  for l in p:lines() do list[#list + 1] = l end
  p:close()
  return list
end

-- A build directory of stand-ins; `fp8lab_body` is the stand-in fp8lab's shell code ($2 is the spec file).
local function standins(fp8lab_body)
  local b = U.tmpdir()
  U.write(b .. "/test_core", "#!/bin/sh\necho 'ok   c_test_stand_in  1.0 ms'\necho '3 passed, 0 failed'\n")
  U.write(b .. "/fp8lab", "#!/bin/sh\n" .. fp8lab_body)
  assert(os.execute("chmod +x " .. q(b .. "/test_core") .. " " .. q(b .. "/fp8lab")))
  return b
end

-- the stand-in fp8lab's line that logs the spec file it was given into BUILD/ran.log
local log_line = 'echo "$2" >> "$(dirname "$0")/ran.log"\n'

describe("buildtime: run-tests.sh's two lanes", function()
  local files = spec_files()

  it("runs every spec file once, on its own, and adds up every report", function()
    local b = standins(log_line
      .. "echo '2 successes / 0 failures / 0 errors / 0 pending'\n")
    finally(function() os.execute("rm -rf " .. q(b)) end)
    local out, ok = sh("bash scripts/run-tests.sh " .. q(b))
    assert.is_true(ok, out)
    -- the C tests' 3 and 2 for each spec file
    assert.truthy(out:find("\n" .. (3 + 2 * #files) .. " passed, 0 failed\n", 1, true), out)
    assert.truthy(out:find("ok   c_test_stand_in", 1, true), out)
    local ran, seen = {}, {}
    for l in U.must_read(b .. "/ran.log"):gmatch("[^\n]+") do ran[#ran + 1] = l; seen[l] = (seen[l] or 0) + 1 end
    assert.are.equal(#files, #ran, U.must_read(b .. "/ran.log"))
    for _, f in ipairs(files) do assert.are.equal(1, seen[f], f) end
    -- this run's times, one line "SECONDS FILE" for each file (scripts/spec-times.txt's form)
    local timed = {}
    for s, f in U.must_read(b .. "/spec-times.txt"):gmatch("([%d.]+) (%S+)\n") do timed[f] = tonumber(s) end
    for _, f in ipairs(files) do assert.is_number(timed[f], f) end
  end)

  it("takes the files scripts/spec-times.txt lacks first, then the slowest listed", function()
    -- the run's order: files the list lacks (by name), then the listed ones slowest first; the lanes claim files in
    -- that order, so the first to start is one of its first two
    local time_of = {}
    for s, f in U.must_read("scripts/spec-times.txt"):gmatch("\n?([%d.]+) (%S+)") do time_of[f] = tonumber(s) end
    local order = {}
    for _, f in ipairs(files) do order[#order + 1] = { time_of[f] or 999999, f } end
    table.sort(order, function(x, y) return x[1] > y[1] or (x[1] == y[1] and x[2] < y[2]) end)
    local b = standins(log_line
      .. "echo '1 success / 0 failures / 0 errors / 0 pending'\n")
    finally(function() os.execute("rm -rf " .. q(b)) end)
    local out, ok = sh("bash scripts/run-tests.sh " .. q(b))
    assert.is_true(ok, out)
    local first = U.must_read(b .. "/ran.log"):match("^([^\n]+)")
    assert.truthy(first == order[1][2] or first == order[2][2], first)
  end)

  it("fails when a spec run dies without a report (a crash counts nothing)", function()
    local b = standins("case \"$2\" in *tensor_spec.lua) kill -KILL $$ ;; esac\n"
      .. "echo '1 success / 0 failures / 0 errors / 0 pending'\n")
    finally(function() os.execute("rm -rf " .. q(b)) end)
    local out, ok = sh("bash scripts/run-tests.sh " .. q(b))
    assert.is_false(ok, out)
    assert.truthy(out:find("tests/spec/tensor_spec.lua (exit status 137)", 1, true), out)
    assert.truthy(out:find("\n" .. (3 + #files - 1) .. " passed, 0 failed\n", 1, true), out)
  end)
end)
