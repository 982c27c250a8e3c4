-- tooling_spec.lua — the scripts around the build (scripts/*.sh, the bench scripts' options): a bench script writes
-- no docs/performance.md section from a failed run, write_section keeps the document's mode and the body's
-- backslashes, gpu_check.sh refuses unknown stages and fails when a stage fails, gpu_bundle.sh packs a build that
-- runs with its own libraries and Lua modules, analyze.sh fails on a missing file,
-- install-deps.sh says so without apt-get, and every bench script option is honoured or refused.
-- The shell scripts run from a copy of scripts/ and docs/performance.md in a temporary directory (they write
-- docs/ beside their own directory), with fake binaries that fail.
local bin = FP8LAB_BIN or "build/fp8lab"
local U = dofile("tests/spec/helpers/util.lua")
local q, sh, read = U.q, U.sh, U.read
local tmpdir = U.tmpdir()
local abs_bin = bin:sub(1, 1) == "/" and bin or (os.getenv("PWD") .. "/" .. bin)

local rep, fake = tmpdir .. "/rep", tmpdir .. "/fakeB"
assert(os.execute(("mkdir -p %s/docs %s && cp -r scripts %s/ && cp docs/performance.md %s/docs/"):format(
  q(rep), q(fake), q(rep), q(rep))))
-- a build whose fp8lab answers -e (the MPI check) with the real one and fails at everything else
U.write(fake .. "/fp8lab", ("#!/bin/sh\nif [ \"$1\" = -e ]; then exec %s \"$@\"; fi\n"
  .. "echo 'fp8lab: simulated failure' >&2; exit 1\n"):format(q(abs_bin)))
assert(os.execute("chmod +x " .. q(fake .. "/fp8lab")))
local doc = rep .. "/docs/performance.md"
local doc0 = U.must_read(doc)

describe("bench scripts", function()
  it("bench_gpu.sh without bench_gpu exits 1 and leaves the GPU section alone", function()
    local out, ok = sh(("cd %s && T_STEP=5 bash scripts/bench_gpu.sh %s"):format(q(rep), q(fake)))
    assert.is_false(ok, out)
    assert.truthy(out:find("no " .. fake .. "/bench_gpu", 1, true), out)
    assert.are.equal(doc0, read(doc))
  end)

  it("bench_gpu.sh: a failing bench_gpu, or a GPT step without GPU figures, writes nothing", function()
    U.write(fake .. "/bench_gpu", "#!/bin/sh\necho 'half a table'; exit 3\n")
    assert(os.execute("chmod +x " .. q(fake .. "/bench_gpu")))
    local out, ok = sh(("cd %s && bash scripts/bench_gpu.sh %s"):format(q(rep), q(fake)))
    assert.is_false(ok, out)
    assert.truthy(out:find("bench_gpu 20 failed (exit 3)", 1, true), out)
    U.write(fake .. "/bench_gpu", "#!/bin/sh\necho '| M×N×K | TFLOP/s |'\n")
    out, ok = sh(("cd %s && T_STEP=5 bash scripts/bench_gpu.sh %s"):format(q(rep), q(fake)))
    assert.is_false(ok, out)
    assert.truthy(out:find("fp8lab's GPT step (bf16) gave no GPU figures", 1, true), out)
    assert.truthy(out:find("simulated failure", 1, true), out)
    assert.are.equal(doc0, read(doc))
    os.remove(fake .. "/bench_gpu")
  end)

  it("bench_dist.sh fails with the run's stderr when a run fails or gives no row, and writes nothing", function()
    local mpi = sh(q(bin) .. " -e 'io.write(tostring(require(\"fp8._dist\").info().mpi_built))'")
    if mpi ~= "true" or not select(2, sh("command -v mpirun")) then
      pending("needs an MPI build and mpirun (bench_dist.sh skips without them)")
      return
    end
    local out, ok = sh(("cd %s && bash scripts/bench_dist.sh %s"):format(q(rep), q(fake)))
    assert.is_false(ok, out)
    assert.truthy(out:find("fp8lab: simulated failure", 1, true), out)
    assert.truthy(out:find("bench_dist.lua 15 no failed (exit 1); docs/performance.md left alone", 1, true), out)
    assert.are.equal(doc0, read(doc))
  end)

  it("bench_recipes.sh shows the failure and writes the CSV into the build directory given", function()
    local out, ok = sh(("cd %s && bash scripts/bench_recipes.sh %s"):format(q(rep), q(fake)))
    assert.is_false(ok, out)
    assert.truthy(out:find("simulated failure", 1, true), out)
    assert.truthy(out:find("compare_recipes.lua --epochs 3 failed (exit 1)", 1, true), out)
    local args = tmpdir .. "/args"
    U.write(fake .. "/fp8lab", ("#!/bin/sh\necho \"$*\" > %s\nexit 1\n"):format(q(args)))
    sh(("cd %s && bash scripts/bench_recipes.sh %s"):format(q(rep), q(fake)))
    assert.matches("%-%-out " .. fake:gsub("%p", "%%%0") .. "/compare_recipes%.csv", read(args))
    assert.are.equal(doc0, read(doc))
    U.write(fake .. "/fp8lab", ("#!/bin/sh\nif [ \"$1\" = -e ]; then exec %s \"$@\"; fi\n"
      .. "echo 'fp8lab: simulated failure' >&2; exit 1\n"):format(q(abs_bin)))
  end)

  it("bench_checkpoint.sh and bench_profiler.sh stop on a failed run", function()
    for _, s in ipairs { "bench_checkpoint", "bench_profiler" } do
      local out, ok = sh(("cd %s && PARAMS=1000 bash scripts/%s.sh %s"):format(q(rep), s, q(fake)))
      assert.is_false(ok, out)
      assert.truthy(out:find("failed (exit 1); docs/performance.md left alone", 1, true), out)
    end
    assert.are.equal(doc0, read(doc))
  end)

  it("write_section keeps the document's mode and the body's backslashes", function()
    local d = tmpdir .. "/ws"
    assert(os.execute(("mkdir -p %s/docs"):format(q(d))))
    U.write(d .. "/docs/performance.md", "# p\n\n## A\nold\n\n## B\nkept\n")
    assert(os.execute("chmod 644 " .. q(d .. "/docs/performance.md")))
    local out, ok = sh(("cd %s && bash -c %s"):format(q(d), q(". " .. os.getenv("PWD")
      .. "/scripts/perfdoc.sh; write_section '## A' \"$(printf '## A\\n\\na\\\\b \\\\n c')\"")))
    assert.is_true(ok, out)
    assert.are.equal("# p\n\n## A\n\na\\b \\n c\n\n## B\nkept\n", read(d .. "/docs/performance.md"))
    assert.are.equal("644", (sh("stat -c %a " .. q(d .. "/docs/performance.md")):gsub("%s", "")))
  end)
end)

describe("bench scripts' options", function()
  local function refused(args, needle)
    local out, ok = sh("timeout 60 " .. q(bin) .. " " .. args)
    assert.is_false(ok, args .. ": " .. out)
    assert.truthy(out:find(needle, 1, true), args .. ": " .. out)
  end
  it("are honoured or refused", function()
    refused("scripts/bench_train.lua --model bogus", "--model must be one of mlp, gpt, all; got 'bogus'")
    refused("scripts/bench_train.lua --mixed-precision fp8 --fp8-backend ao --fp8-format E4M3",
      "--fp8-format belongs to --fp8-backend te, not ao")
    refused("scripts/bench_train.lua --fp8-recipe rowwise --mixed-precision no",
      "--fp8-recipe needs --mixed-precision fp8 (got no)")
    refused("scripts/bench_train.lua --fp8-backend xx", "--fp8-backend must be one of te, ao, msamp; got 'xx'")
    refused("scripts/bench_train.lua --gradient-checkpointing", "--gradient-checkpointing is a GPT option: give --model gpt")
    refused("scripts/bench_step_ab.lua --precisions ''", "--precisions: no precision given")
    refused("scripts/bench_step_ab.lua --clock user", "--clock must be wall or cpu; got 'user'")
    refused("scripts/bench_elementwise.lua abc", "ROUNDS must be an integer >= 1, got 'abc'")
    refused("scripts/bench_elementwise.lua 1 2", "one argument at most, got 2")
    refused("scripts/bench_ops.lua 0", "ROUNDS must be an integer >= 1, got '0'")
    refused("scripts/bench_ops.lua 1 conv", "GROUP must be resample, embedding_bag, transformer, transpose, sweep or all, got 'conv'")
    refused("scripts/bench_ops.lua 1 all x", "FILTER picks rows of the sweep group only, got GROUP 'all'")
    refused("scripts/bench_ops.lua 1 sweep x y", "three arguments at most, got 4")
    refused("scripts/bench_dist.lua 0", "STEPS must be an integer >= 1, got '0'")
    refused("scripts/bench_dist.lua 2 bogus", "PRECISION must be no, te, ao or msamp, got 'bogus'")
    -- options that were taken and changed nothing (2026-12-04): GPT sizes with the MLP, a backend without fp8, the
    -- GPU's peak on the CPU
    refused("scripts/bench_train.lua --model mlp --layers 3", "--layers is a GPT option: give --model gpt or all")
    refused("scripts/bench_train.lua --model mlp --fp8-backend ao", "--fp8-backend needs --mixed-precision fp8 (got no)")
    refused("scripts/bench_train.lua --model gpt --cpu --peak-tflops 5", "--peak-tflops is the GPU's peak")
    refused("scripts/bench_checkpoint.lua 0 /tmp", 'PARAMS must be an integer >= 1, got "0"')
    refused("scripts/bench_checkpoint.lua 10 ''", 'DIR must be an existing directory, got ""')
    refused("scripts/bench_checkpoint.lua 10 /tmp extra", "got 3 arguments")
    refused("scripts/allreduce_prescale.lua 2 1 x", "takes [N] [seed]; got 3 arguments")
    refused("scripts/bench_profiler_windows.lua 8 x", "takes [N]; got 2 arguments")
    refused("scripts/gen_man.lua /tmp", "/tmp is not a readable file")
    for _, s in ipairs { "bench_elementwise", "bench_dist", "bench_ops", "bench_ln_residual" } do
      local out, ok = sh(q(bin) .. " scripts/" .. s .. ".lua --help")
      assert.is_true(ok, out)
      assert.matches("^usage: fp8lab scripts/" .. s .. "%.lua", out)
    end
    local tout, tok = sh("python3 scripts/bench_ops_torch.py 0")   -- refused before it imports torch
    assert.is_false(tok, tout)
    assert.truthy(tout:find("ROUNDS must be an integer >= 1", 1, true), tout)
    tout, tok = sh("python3 scripts/bench_ops_torch.py 1 conv")
    assert.is_false(tok, tout)
    assert.truthy(tout:find("GROUP must be resample, embedding_bag, transformer, transpose, sweep or all, got 'conv'", 1,
      true), tout)
    tout, tok = sh("python3 scripts/bench_ops_torch.py 1 all x")
    assert.is_false(tok, tout)
    assert.truthy(tout:find("FILTER picks rows of the sweep group only, got GROUP 'all'", 1, true), tout)
    refused("scripts/bench_ln_residual.lua 0", "bench_ln_residual.lua: ROUNDS must be an integer >= 1, got '0'")
    refused("scripts/bench_ln_residual.lua 1 2", "bench_ln_residual.lua: one argument at most, got 2")
    tout, tok = sh("python3 scripts/bench_ln_residual_torch.py x")   -- refused before it imports torch
    assert.is_false(tok, tout)
    assert.truthy(tout:find("ROUNDS must be an integer >= 1 (and one argument at most), got 'x'", 1, true), tout)
    -- the GPU peer's mode and argument count, checked before it imports torch
    local out, ok = sh("python3 scripts/bench_gpt_torch_gpu.py bf16-eager 1 64 2 16 2 96 1 1 1")
    assert.is_false(ok, out)
    assert.truthy(out:find("mode 'bf16-eager': expected bf16, fp8, bf16-compile or fp8-compile", 1, true), out)
    out, ok = sh("python3 scripts/bench_gpt_torch_gpu.py bf16 1 64")
    assert.is_false(ok, out)
    assert.truthy(out:find("(got 3 arguments)", 1, true), out)
    -- --profile: the table before the result line
    out, ok = sh("timeout 120 " .. q(bin) .. " scripts/bench_train.lua --model mlp --steps 1 --warmup 0 --profile 1")
    assert.is_true(ok, out)
    assert.matches("^profile steps=1 device=cpu\n.*\nmatmul .*\nmodel=mlp ms_per_step=[%d.]+ steps=1 ", out)
    -- --gradient-checkpointing: far less activation memory kept after the forward
    local function act(flag)
      local o, good = sh("timeout 120 " .. q(bin) .. " scripts/bench_train.lua --model gpt --steps 1 --warmup 0 "
        .. "--layers 2 --d-model 64 --seq 64 --batch 4 " .. flag)
      assert.is_true(good, o)
      return tonumber(o:match("act_mib=([%d.]+)"))
    end
    assert.is_true(act("--gradient-checkpointing") < act("") / 2)
    -- the sub-option of the backend given is used
    out, ok = sh("timeout 120 " .. q(bin) .. " scripts/bench_train.lua --model mlp --steps 1 --warmup 0 "
      .. "--mixed-precision fp8 --fp8-backend ao --fp8-recipe rowwise")
    assert.is_true(ok, out)
    assert.matches("^model=mlp ms_per_step=[%d.]+ steps=1 ", out)
  end)
end)

describe("Makefile", function()
  local build = bin:match("^(.*)/fp8lab$") or "build"
  local function make(args)
    local margs = (read(build .. "/make.args") or ""):gsub("\n$", "")
    return sh("env -u MAKELEVEL -u MFLAGS MAKEFLAGS=" .. q("-- " .. margs) .. " timeout 120 make --no-print-directory BUILD="
      .. q(build) .. " " .. args)
  end

  it("rebuilds when the flags change: the objects depend on the flags stamp; -q reports it without writing it", function()
    local stamp = U.must_read(build .. "/flags.stamp")
    local _, ok = make("-q " .. q(bin))
    assert.is_true(ok, "the build is not up to date with its own settings")
    local out
    out, ok = make("-q OPT=-O0 " .. q(bin))
    assert.is_false(ok, "make -q OPT=-O0 says the binary is up to date")
    out = make("-n OPT=-O0 " .. q(bin))
    assert.matches(" %-O0 .* %-c core/", out)
    assert.are.equal(stamp, read(build .. "/flags.stamp"))
    assert.is_true(select(2, make("-q " .. q(bin))))
  end)

  it("keeps the nvcc probes' results, and probes again when nvcc changes", function()
    -- a fake nvcc that logs each call; make probes into a BUILD of its own (probes builds nothing)
    local fake_nvcc, log, pb = tmpdir .. "/fakecuda/bin/nvcc", tmpdir .. "/nvcc.log", tmpdir .. "/pb"
    U.sh("mkdir -p " .. q(tmpdir .. "/fakecuda/bin"))
    local function nvcc_body(body)
      U.write(fake_nvcc, "#!/bin/sh\necho \"$*\" >> " .. q(log) .. "\n" .. body .. "\n")
      U.sh("chmod +x " .. q(fake_nvcc))
    end
    local function calls() return select(2, (read(log) or ""):gsub("\n", "")) end
    local function probes()
      return sh("env -u MAKELEVEL -u MFLAGS -u MAKEFLAGS timeout 120 make --no-print-directory BUILD=" .. q(pb)
        .. " NVCC=" .. q(fake_nvcc) .. " probes")
    end
    nvcc_body("exit 0")
    local out = probes()
    assert.matches("✓ CUDA", out)
    assert.matches("✓ cuBLASLt", out)
    assert.are.equal(2, calls(), out)
    out = probes()
    assert.matches("✓ CUDA", out)
    assert.matches("✓ cuBLASLt", out)
    assert.are.equal(2, calls(), "the second make ran nvcc again")
    nvcc_body("exit 1 # a broken nvcc")
    out = probes()
    assert.matches("✗ CUDA", out)
    assert.are.equal(3, calls(), out)
  end)

  it("says why MPI is off, lists every target, and cleans the BUILD given", function()
    local out = make("MPI=0 probes")
    assert.matches("✗ MPI %(MPI=0; single process only%)", out)
    assert.is_nil(out:find("install libopenmpi-dev", 1, true))
    out = sh("make --no-print-directory help")
    for _, t in ipairs { "test-c", "test-lua", "bench-gpu", "fuzz", "man", "deps", "tour", "sanitize", "uninstall" } do
      assert.truthy(out:find(" " .. t .. " ", 1, true) or out:find(" " .. t .. "\n", 1, true), t .. " missing from: " .. out)
    end
    out = sh("make -n --no-print-directory BUILD=" .. q(tmpdir .. "/b") .. " clean")
    assert.truthy(out:find("rm -rf '" .. tmpdir .. "/b' build-san", 1, true), out)
  end)
end)

describe("gpu_check.sh", function()
  it("refuses an unknown stage and exits 1 when a stage fails", function()
    local out, ok = sh(("bash scripts/gpu_check.sh %s %s bogus"):format(q(fake), q(tmpdir .. "/gc")))
    assert.is_false(ok)
    assert.truthy(out:find("unknown stage 'bogus' (known: env tests sanitize step demo bench)", 1, true), out)
    out, ok = sh(("T_BENCH=10 bash scripts/gpu_check.sh %s %s step"):format(q(fake), q(tmpdir .. "/gc")))
    assert.is_false(ok, out)
    assert.matches("gpu_check%.sh: failed: step\n$", out)
  end)

  it("gives each test process its share of the cores, not all of them", function()
    -- a stand-in build: test_core lists two tests and records the OpenMP threads each ran with; fp8lab passes
    local b = tmpdir .. "/threadsB"
    assert(os.execute("mkdir -p " .. q(b)))
    local function script(name, body)
      local f = assert(io.open(b .. "/" .. name, "w")); f:write("#!/bin/sh\n", body, "\n"); f:close()
      assert(os.execute("chmod +x " .. q(b .. "/" .. name)))
    end
    script("test_core", 'if [ "$1" = --list ]; then echo gpu_a; echo gpu_b; exit 0; fi\n' ..
      'echo "$OMP_NUM_THREADS" >> ' .. q(b .. "/threads") .. '; echo "ok $1"; echo "1 passed, 0 failed"')
    script("fp8lab", 'echo "ok 1 - stand-in"')
    local function threads()
      local f = assert(io.open(b .. "/threads")); local t = f:read("a"); f:close(); return t
    end
    local out, ok = sh(("PAR=2 bash scripts/gpu_check.sh %s %s tests"):format(q(b), q(tmpdir .. "/gt")))
    assert.is_true(ok, out)
    assert.truthy(out:find("C tests: 2 ok of 2", 1, true), out)
    local cpus = tonumber(sh("nproc"):match("%d+"))
    local want = tostring(math.max(1, cpus // 2))
    assert.are.equal(want .. "\n" .. want .. "\n", threads())
    -- OMP_NUM_THREADS set by the caller wins
    os.remove(b .. "/threads")
    out, ok = sh(("OMP_NUM_THREADS=3 PAR=2 bash scripts/gpu_check.sh %s %s tests"):format(q(b), q(tmpdir .. "/gt2")))
    assert.is_true(ok, out)
    assert.are.equal("3\n3\n", threads())
  end)
end)

describe("gpu_bundle.sh", function()
  local script = os.getenv("PWD") .. "/scripts/gpu_bundle.sh"
  it("refuses an unknown option and a build without its binaries", function()
    local out, ok = sh(("bash %s %s %s --bogus"):format(q(script), q(fake), q(tmpdir .. "/gb0")))
    assert.is_false(ok)
    assert.truthy(out:find("unknown option '--bogus' (known: --data)", 1, true), out)
    out, ok = sh(("bash %s %s %s"):format(q(script), q(tmpdir .. "/nobuild"), q(tmpdir .. "/gb0")))
    assert.is_false(ok)
    assert.truthy(out:find("no " .. tmpdir .. "/nobuild/fp8lab", 1, true), out)
  end)
  it("packs the build, its libraries, busted and (--data) the dataset; run.sh puts the binaries in place and runs with them", function()
    -- the build: this fp8lab and test_core, under the relative name a repository uses
    local src, dst, b = tmpdir .. "/gbsrc", tmpdir .. "/gbdst", abs_bin:match("^(.*)/[^/]+$")
    assert(os.execute(("mkdir -p %s/build %s && cp %s %s/test_core %s/build/"):format(q(src), q(dst), q(abs_bin), q(b),
      q(src))))
    -- (xz's fastest level: the default -6 took 90 CPU-s of make test's time for the same contents, -0 26 s)
    local out, ok = sh(("cd %s && XZ_OPT='-0 -T0' bash %s build %s --data"):format(q(src), q(script), q(tmpdir .. "/gb")))
    assert.is_true(ok, out)
    out, ok = sh(("tar tJf %s"):format(q(tmpdir .. "/gb/bundle.txz")))
    assert.is_true(ok, out)
    assert.truthy(out:find("root/fashion-mnist/train-images-idx3-ubyte.gz", 1, true), out)
    -- the packed binaries keep their symbols but not their debug sections (the bundle must fit the device tool's
    -- 64 MiB with the working tree)
    out, ok = sh(("mkdir -p %s && tar xJf %s -C %s bin/fp8lab && readelf -S %s/bin/fp8lab"):format(q(tmpdir .. "/gbx"),
      q(tmpdir .. "/gb/bundle.txz"), q(tmpdir .. "/gbx"), q(tmpdir .. "/gbx")))
    assert.is_true(ok, out)
    assert.falsy(out:find(".debug_info", 1, true), out)
    assert.truthy(out:find(".symtab", 1, true), out)
    local lua = "print(package.searchpath('busted.runner', package.path)); print(package.searchpath('lfs', package.cpath))"
    out, ok = sh(("cd %s && %s/gb/run.sh build/fp8lab -e %s && %s/gb/run.sh ldd build/fp8lab"):format(q(dst), q(tmpdir),
      q(lua), q(tmpdir)))
    assert.is_true(ok, out)
    assert.truthy(out:find(tmpdir .. "/gb/root/lua/share-lua/5.4/busted/runner.lua", 1, true), out)
    assert.truthy(out:find(tmpdir .. "/gb/root/lua/x86_64-linux-gnu-lua/5.4/lfs.so", 1, true), out)
    assert.truthy(out:find("liblua5.4.so.0 => " .. tmpdir .. "/gb/root/lib/liblua5.4.so.0", 1, true), out)
    assert.truthy(U.read(dst .. "/build/test_core"), "run.sh did not put test_core in place")
  end)
end)

describe("analyze.sh and install-deps.sh", function()
  it("analyze.sh fails on a file that does not exist", function()
    local out, ok = sh("bash scripts/analyze.sh core/no_such_file.c")
    assert.is_false(ok)
    assert.truthy(out:find("analyze.sh: no such file: core/no_such_file.c", 1, true), out)
  end)

  it("install-deps.sh without apt-get or dpkg says so and lists the packages", function()
    local p = tmpdir .. "/nopath"
    assert(os.execute("mkdir -p " .. q(p)))
    for _, c in ipairs { "bash", "id", "grep" } do
      assert(os.execute(("ln -sf \"$(command -v %s)\" %s"):format(c, q(p .. "/" .. c))))
    end
    local out, ok = sh(("PATH=%s bash scripts/install-deps.sh"):format(q(p)))
    assert.is_false(ok)
    assert.truthy(out:find("install-deps: no apt-get/dpkg here", 1, true), out)
    assert.truthy(out:find("libdnnl-dev", 1, true), out)
  end)
end)

teardown(function() os.execute("rm -rf " .. q(tmpdir)) end)

-- refused(args, needle): a training script run with args fails with a message holding needle before it trains
local function refused(args, needle)
  local out, ok = sh("timeout 60 " .. q(bin) .. " " .. args)
  assert.is_false(ok, args .. ": " .. out)
  assert.truthy(out:find(needle, 1, true), args .. ": " .. out)
  assert.is_nil(out:find("step 1/", 1, true), args .. ": trained before refusing\n" .. out)
end

describe("the training scripts' output paths", function()
  -- a path that cannot be written is a usage error before the run, not a failure at its first write (after
  -- training: compare_recipes' every recipe, a lesson's whole run)
  it("are checked before anything trains", function()
    local d = os.tmpname()
    os.remove(d)
    assert.is_true(os.execute("mkdir " .. q(d) .. " && touch " .. q(d .. "/afile")))
    refused("scripts/train_char_gpt.lua --steps 2 --csv " .. q(d), "--csv " .. d .. ": is a directory, not a file")
    refused("scripts/train_char_gpt.lua --steps 2 --csv " .. q(d .. "/afile/x.csv"), "cannot create the directory")
    refused("scripts/train_char_gpt.lua --steps 2 --csv " .. q(d .. "/c.csv") .. " --save-every 1 --checkpoint-dir "
      .. q(d .. "/afile"), "--checkpoint-dir " .. d .. "/afile: cannot create the directory")
    refused("scripts/train_fashion_mnist.lua --save-every 1 --checkpoint-dir " .. q(d .. "/afile"),
      "--checkpoint-dir " .. d .. "/afile: cannot create the directory")
    refused("scripts/compare_recipes.lua --epochs 1 --limit 120 --only fp32 --out " .. q(d), "is a directory, not a file")
    refused("scripts/compare_recipes.lua --model gpt --only fp32 --out " .. q(d), "is a directory, not a file")
    refused("scripts/compare_recipes.lua --lr 0", "--lr must be > 0, got 0")
    refused("scripts/compare_recipes.lua --model gpt --only fp32,bf16 --fp8-stats", "--only chose none")
    refused("scripts/lessons/04_tensorwise_vs_rowwise.lua --quick --out ''", '--out must be a directory path, got ""')
    refused("scripts/lessons/04_tensorwise_vs_rowwise.lua --quick --out " .. q(d .. "/afile"),
      "cannot create the directory")
    refused("scripts/lessons/02_why_hybrid.lua --quick --steps 1", "--quick sets --steps to 10: give --quick or --steps")
    refused("scripts/fidelity_report.lua --doc " .. q(d), "--doc " .. d .. ": not a file")
    os.execute("rm -rf " .. q(d))
  end)
end)

describe("train_char_gpt.lua's options", function()
  it("refuse a sampling option without a sample (--temperature with --sample-len 0 was taken and ignored)", function()
    refused("scripts/train_char_gpt.lua --steps 1 --sample-len 0 --temperature 0.5",
      "--temperature sets the sample's temperature, and --sample-len 0 draws no sample")
    refused("scripts/train_char_gpt.lua --steps 1 --temperature=0.8 --sample-len=0", "--sample-len 0 draws no sample")
    -- the other checks of the options, before the run too
    refused("scripts/train_char_gpt.lua --d-model 30 --heads 4", "--d-model (30) must be divisible by --heads (4)")
    refused("scripts/train_char_gpt.lua --sample-len 17000000", "--sample-len must be at most 16777215")
    refused("scripts/train_char_gpt.lua --temperature -1", "option --temperature expects a finite number >= 0, got '-1'")
    refused("scripts/train_char_gpt.lua --recipe te-hybrid --fp8-backend te", "--recipe names the precision and the recipe")
    -- --temperature with a sample, and --sample-len 0 alone, pass the checks: the run goes on to read the text
    for _, args in ipairs { "--sample-len 0", "--sample-len 3 --temperature 0" } do
      local out, ok = sh(q(bin) .. " scripts/train_char_gpt.lua --text /nonexistent/t.txt " .. args)
      assert.is_false(ok, out)
      assert.truthy(out:find("TextDataset: /nonexistent/t.txt: cannot open", 1, true), args .. ": " .. out)
    end
  end)
end)
