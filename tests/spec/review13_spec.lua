-- Found on 2026-12-06 (stop 96): stop 95's speed code and test runner read again line by line (opspeed2's
-- fl_sum_squares, fl_logsumexp and FL_OP_RSQRT, the 16-lane sum, the exp/log plain blocks, run-tests.sh's C tests
-- beside the specs, FL_TEST_QUICK). docs/robustness.md, "Stop 95's speed code and test runner read again (stop 96)".
-- (The C side: tests/c/test_fused_reduce.c, and test_format.c's quick sample.)

describe("review13: logsumexp's private form takes one dim", function()
  -- x:_logsumexp(nil) passed luaL_checkany and reached core/ops.c as FL_ALL_DIMS (-1000), whose shape it read out of
  -- bounds: [2, 3] came back unreduced with values of no meaning (keepdim), or 'shape [2] is invalid for a tensor of
  -- 6 elements', or 'dim -999 of tensor [5] is empty'
  it("refuses nil as a dim, with or without keepdim, naming the problem", function()
    local msg = "logsumexp: expected one dim to reduce, got none (all dims)"
    for _, shape in ipairs({ { 2, 3 }, { 5 }, { 2, 3, 4 } }) do
      local x = fp8.randn(shape)
      assert.has_error(function() x:_logsumexp(nil) end, msg)
      assert.has_error(function() x:_logsumexp(nil, true) end, msg)
      assert.has_error(function() x:_logsumexp(nil, false) end, msg)
    end
  end)

  it("keeps its public form's answers: dim required, one dim through the core, a list of dims", function()
    local x = fp8.tensor({ { 1, 2, 3 }, { -math.huge, 0, math.huge } })
    assert.has_error(function() x:logsumexp() end, "logsumexp: dim is required (torch's: the dim to reduce), got nil")
    local r = x:logsumexp(2):tolist()
    assert.are.equal(math.huge, r[2])
    assert.is_true(math.abs(r[1] - 3.40760596444438) < 1e-6)
    assert.are.same({ 2, 1 }, x:logsumexp(2, true):shape())
  end)
end)

-- scripts/run-tests.sh runs test_core beside the specs, its report kept in a file until the specs end. A run stopped
-- early (a TERM from a CI timeout, Ctrl-C) deleted that report unseen, so which C tests had passed, and which one
-- hung, was lost; and a TERM left test_core running after the script had gone. Stand-in binaries: test_core prints a
-- line and hangs, fp8lab waits for it and stops the script (the TERM of a timeout).
describe("review13: run-tests.sh stopped while the C tests run", function()
  local U = dofile("tests/spec/helpers/util.lua")
  local q, sh = U.q, U.sh
  local b = U.tmpdir()
  U.write(b .. "/test_core", "#!/bin/sh\necho 'ok   c_test_that_passed  1.0 ms'\necho $$ > " .. q(b .. "/tc.pid")
    .. "\nexec sleep 20\n")
  U.write(b .. "/fp8lab", "#!/bin/sh\ni=0\nwhile [ ! -s " .. q(b .. "/tc.pid") .. " ] && [ $i -lt 400 ]; do sleep 0.05; "
    .. "i=$((i + 1)); done\n"
    .. "echo '1 success / 0 failures / 0 errors / 0 pending'\n"
    .. "kill -TERM $(awk '{ print $4 }' /proc/$PPID/stat)\n")   -- the script (the parent is the specs' timeout)
  assert(os.execute("chmod +x " .. q(b .. "/test_core") .. " " .. q(b .. "/fp8lab")))
  teardown(function() os.execute("rm -rf " .. q(b)) end)

  it("prints what the C tests had printed, stops test_core and fails", function()
    local out, ok = sh("bash scripts/run-tests.sh " .. q(b))
    local pid = U.must_read(b .. "/tc.pid"):match("%d+")
    local alive = os.execute("kill -0 " .. pid .. " 2>/dev/null")
    if alive then os.execute("kill " .. pid) end
    assert.is_false(ok, out)
    assert.truthy(out:find("ok   c_test_that_passed", 1, true), out)
    assert.truthy(out:find("(the run was stopped before the C core tests ended; what they printed:)", 1, true), out)
    assert.is_falsy(alive, "test_core left running")
  end)
end)
