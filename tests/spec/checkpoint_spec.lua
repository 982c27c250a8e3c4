-- checkpoint_spec.lua — safetensors from Lua (save_file / load_file / safe_open), the FP8
-- naming convention, integer dtypes, hostile files (each with its message), and save_state's
-- directory features: automatic naming, total_limit, refusal of another recipe or model,
-- non-strict loading, save_model, and no partial checkpoint directory.
local nn, F = fp8.nn, fp8.nn.functional
local C = require "fp8._checkpoint"

local function tmpdir()
  local d = os.tmpname()
  os.remove(d)
  assert(C.mkdir(d))
  return d
end

local U = dofile("tests/spec/helpers/util.lua")
local write = U.write
local read = U.must_read

-- A file image: header length (or `claimed`), header text, then `data` (a string or a byte count).
local function image(hdr, data, claimed)
  if type(data) == "number" then data = ("\0"):rep(data) end
  return string.pack("<I8", claimed or #hdr) .. hdr .. (data or "")
end

local function entry(name, dtype, shape, b, e)
  return ('"%s":{"dtype":"%s","shape":[%s],"data_offsets":[%s,%s]}'):format(name, dtype, shape, b, e)
end

describe("fp8.save_file / load_file / safe_open", function()
  it("an FP8 tensor read from a file says its cast's counters are unknown (they read 0: an underflow was a zero)",
    function()
    local d = tmpdir()
    local q = fp8.tensor { 1e-5, 1, 60 }:quantize("e4m3")
    assert.are.equal(1, q:underflow())
    fp8.save_file({ q = q }, d .. "/q.safetensors")
    local path = d .. "/q.safetensors"
    for _, l in ipairs { fp8.load_file(path).q, fp8.safe_open(path):get_tensor("q") } do
      assert.is_true(l:qstats().unknown)
      assert.same(q:bytes(), l:bytes())
      for _, m in ipairs { "amax", "underflow", "saturated" } do
        U.fails_with(m .. ": this FP8 tensor was read from a file", l[m], l)
      end
      U.fails_with("hist: this FP8 tensor was read from a file", fp8.hist, l, "e4m3")
      assert.is_true(l:narrow(1, 1, 2):qstats().unknown and l:clone():qstats().unknown)
      assert.truthy(tostring(l):find("read from a file", 1, true))
    end
    assert.is_nil(q:qstats().unknown)   -- a cast knows its counters
    os.execute("rm -rf " .. d)
  end)

  it("round-trips fp32, bf16, fp16 and FP8 (per tensor and per row) exactly, with metadata", function()
    local d = tmpdir()
    fp8.manual_seed(3)
    local x = fp8.randn { 4, 8 }
    local t = { a = x, b = x:to("bf16"), c = x:to("fp16"), q = x:quantize("e4m3"), r = x:quantize("e5m2"),
                row = x:quantize("e4m3", { axis = 1 }), s = fp8.tensor(2.5) }
    fp8.save_file(t, d .. "/t.safetensors", { note = "hi" })
    local back = fp8.load_file(d .. "/t.safetensors")
    for k, v in pairs(t) do
      assert.are.equal(v:dtype(), back[k]:dtype(), k)
      assert.same(v:shape(), back[k]:shape(), k)
      local a = v:is_fp8() and v:dequantize() or v:to("fp32")
      local b = back[k]:is_fp8() and back[k]:dequantize() or back[k]:to("fp32")
      assert.same(a:totable(), b:totable(), k)
    end
    local f = fp8.safe_open(d .. "/t.safetensors")
    assert.same({ "a", "b", "c", "q", "r", "row", "s" }, f:keys())   -- companions folded into their tensor
    assert.same({ note = "hi" }, f:metadata())
    assert.same(t.q:dequantize():totable(), f:get_tensor("q"):dequantize():totable())
    f:close()
    assert.has_error(function() f:keys() end, "safe_open: the file was closed")
    os.execute("rm -rf " .. d)
  end)

  it("a file it replaces keeps its permissions (a private checkpoint is not made world-readable)", function()
    local d = tmpdir()
    local path = d .. "/t.safetensors"
    local function mode()
      local p = io.popen("stat -c %a " .. path)
      local m = p:read("l")
      p:close()
      return m
    end
    fp8.save_file({ a = fp8.zeros { 2 } }, path)
    assert(os.execute("chmod 600 " .. path))
    fp8.save_file({ a = fp8.ones { 3 } }, path)
    assert.are.equal("600", mode())
    assert.same({ 1, 1, 1 }, fp8.load_file(path).a:totable())
    assert(os.execute("chmod 640 " .. path))
    require("fp8._fileio").write_atomic(path, "text")
    assert.are.equal("640", mode())
    os.execute("rm -rf " .. d)
  end)

  it("keeps its sorted name list alive while the collector runs (use-after-free found by make sanitize)", function()
    -- save_file used to pop the userdata holding the sorted names before the writing loop; a
    -- collection inside the loop freed the list. Long names (not interned: each lookup and each
    -- scale name allocates) and a collector in generational mode make collections inside the loop.
    local d = tmpdir()
    local x = fp8.randn { 2, 3 }
    local t = {}
    for i = 1, 2000 do t[("w%04d"):format(i) .. ("x"):rep(100)] = x:quantize("e4m3") end
    collectgarbage("generational", 1, 1)   -- a minor collection every 1% of growth
    collectgarbage()
    local ok, err = true, nil
    for _ = 1, 5 do
      if ok then ok, err = pcall(fp8.save_file, t, d .. "/gc.safetensors", { k = "v" }) end
    end
    collectgarbage("incremental", 200, 100)
    assert.is_true(ok, err)
    local back = fp8.load_file(d .. "/gc.safetensors")
    for k, v in pairs(t) do assert.same(v:dequantize():totable(), back[k]:dequantize():totable(), k) end
    os.execute("rm -rf " .. d)
  end)

  it("round-trips tensors large enough for the chunked, multi-threaded read and write-behind paths", function()
    local d = tmpdir()
    fp8.manual_seed(11)
    -- 5M + 3 elements: 20 MB, an uneven last chunk; a bf16 one of 9M elements; values all differ
    local a, b = fp8.randn { 5 * 1024 * 1024 + 3 }, fp8.randn { 3, 3 * 1024 * 1024 }:to("bf16")
    fp8.save_file({ a = a, b = b }, d .. "/big.safetensors")
    local back = fp8.load_file(d .. "/big.safetensors")
    assert.are.equal(0, (back.a - a):abs():max():item())
    assert.are.equal(0, (back.b:to("fp32") - b:to("fp32")):abs():max():item())
    local lazy = fp8.safe_open(d .. "/big.safetensors")
    assert.are.equal(0, (lazy:get_tensor("a") - a):abs():max():item())
    os.execute("rm -rf '" .. d .. "'")
  end)

  it("writes the same bytes whatever the table's order, and refuses clashes and bad arguments", function()
    local d = tmpdir()
    local x = fp8.tensor { 1, 2, 3 }
    fp8.save_file({ a = x, b = x, c = x }, d .. "/1.safetensors", { k = "v", j = "w" })
    fp8.save_file({ c = x, b = x, a = x }, d .. "/2.safetensors", { j = "w", k = "v" })
    assert.is_true(read(d .. "/1.safetensors") == read(d .. "/2.safetensors"))
    U.fails_with("save_file: \"q\" is FP8, so its scale inverse is saved as \"q_scale_inv\", which the table also names", function() fp8.save_file({ q = x:quantize("e4m3"), q_scale_inv = x }, d .. "/3.safetensors") end)
    U.fails_with("save_file: tensor names must be strings, got a number key", function() fp8.save_file({ [1] = x }, d .. "/3.safetensors") end)
    U.fails_with("save_file: \"a\" must be a tensor, got number", function() fp8.save_file({ a = 1 }, d .. "/3.safetensors") end)
    U.fails_with("save_file: metadata must map strings to strings, got string = number", function() fp8.save_file({ a = x }, d .. "/3.safetensors", { k = 1 }) end)
    U.fails_with("cannot create a temporary file in", function() fp8.save_file({ a = x }, d .. "/no/such/dir/x.safetensors") end)
    U.fails_with("load_file: unknown option 'devcie' (did you mean 'device'?) (valid: device)", function() fp8.load_file(d .. "/1.safetensors", { devcie = "cpu" }) end)
    assert.is_nil(io.open(d .. "/3.safetensors"))
    os.execute("rm -rf " .. d)
  end)

  it("loads I64/I32/U8/BOOL as fp32 when every value is exact, and says so otherwise", function()
    local d = tmpdir()
    local hdr = "{" .. table.concat({ entry("i64", "I64", "2", 0, 16), entry("i32", "I32", "2", 16, 24),
      entry("u8", "U8", "2", 24, 26), entry("b", "BOOL", "2", 26, 28) }, ",") .. "}"
    local data = string.pack("<i8i8i4i4BBBB", -5, 16777216, 7, -2147483647 - 1, 255, 0, 1, 0)
    write(d .. "/i.safetensors", image(hdr, data))
    local t = fp8.load_file(d .. "/i.safetensors")
    assert.same({ -5, 16777216 }, t.i64:totable())
    assert.same({ 7, -2147483648 }, t.i32:totable())
    assert.same({ 255, 0 }, t.u8:totable())
    assert.same({ 1, 0 }, t.b:totable())
    assert.are.equal("fp32", t.i64:dtype())
    write(d .. "/j.safetensors", image("{" .. entry("big", "I64", "1", 0, 8) .. "}", string.pack("<i8", 16777217)))
    local ok, err = pcall(fp8.load_file, d .. "/j.safetensors")
    assert.is_false(ok)
    assert.matches('"big" %(I64%) holds 16777217, which fp32 cannot hold exactly', err)
    os.execute("rm -rf " .. d)
  end)

  it("safe_open handles left to the collector do not run the process out of file descriptors", function()
    -- a handle holds its descriptor until collected, and nothing started a collection when descriptors ran out
    local d = tmpdir()
    local script = d .. "/fd.lua"
    local st = d .. "/s.safetensors"
    write(script, ('fp8.save_file({w = fp8.randn(8, 8)}, %q)\n'):format(st)
      .. ('for i = 1, 600 do local f = fp8.safe_open(%q); f:get_tensor("w") end\nprint("done")\n'):format(st))
    local out, ok = U.sh("ulimit -n 128; " .. U.q(FP8LAB_BIN or "build/fp8lab") .. " " .. U.q(script))
    os.execute("rm -rf " .. U.q(d))
    assert.is_true(ok, out)
    assert.truthy(out:find("done", 1, true), out)
  end)

  it("reads only the tensor asked for (safe_open on a file whose other tensors are unusable)", function()
    local d = tmpdir()
    local hdr = "{" .. entry("ok", "F32", "1", 0, 4) .. "," .. entry("nine", "U8", "1,1,1,1,1,1,1,1,1", 4, 5) .. "}"
    write(d .. "/lazy.safetensors", image(hdr, string.pack("<fB", 1.5, 1)))
    local f = fp8.safe_open(d .. "/lazy.safetensors")
    assert.same({ 1.5 }, f:get_tensor("ok"):totable())
    U.fails_with("\"nine\" has 9 dimensions; fp8lab tensors have at most 8", function() f:get_tensor("nine") end)
    U.fails_with("get_tensor: no tensor \"missing\" in", function() f:get_tensor("missing") end)
    os.execute("rm -rf " .. d)
  end)
end)

describe("hostile safetensors files", function()
  local d
  setup(function() d = tmpdir() end)
  teardown(function() os.execute("rm -rf " .. d) end)
  local e1 = entry("a", "F32", "1", 0, 4)
  local cases = {
    { "empty file", "", "too short" },
    { "7 bytes", "\1\0\0\0\0\0\0", "too short" },
    { "header length past the end", image("{}", 0, 100), "runs past the end" },
    { "header length 200 MB", image("{}", 0, 200000000), "exceeds the limit" },
    { "header length 2^64-1", string.pack("<i8", -1) .. "{}", "exceeds the limit" },
    { "header length 0", image("", 0), "not a JSON object" },
    { "header is an array", image("[]"), "not a JSON object" },
    { "header is null", image("null"), "not a JSON object" },
    { "header is a string", image('"x"'), "not a JSON object" },
    { "header starts with a space", image(" {}"), "must start with '{'" },
    { "unterminated JSON", image('{"a":'), "not valid JSON" },
    { "binary header", image("{\255\254\0"), "not valid UTF-8" },
    { "bytes after the JSON", image("{}xx"), "bytes after the header" },
    { "tensor is a number", image('{"a":1}'), "expected an object" },
    { "tensor without dtype", image('{"a":{"shape":[1],"data_offsets":[0,4]}}', 4), "needs exactly dtype" },
    { "tensor with an extra field", image('{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4],"x":1}}', 4), "unknown field \"x\"" },
    { "dtype is a number", image('{"a":{"dtype":3,"shape":[1],"data_offsets":[0,4]}}', 4), "dtype must be a string" },
    { "dtype F64 (unsupported)", image("{" .. entry("a", "F64", "1", 0, 8) .. "}", 8), "unknown or unsupported dtype \"F64\"" },
    { "dtype in lower case", image("{" .. entry("a", "f32", "1", 0, 4) .. "}", 4), "unknown or unsupported dtype" },
    { "made-up dtype", image("{" .. entry("a", "Q4", "1", 0, 4) .. "}", 4), "unknown or unsupported dtype" },
    { "shape is a number", image('{"a":{"dtype":"F32","shape":4,"data_offsets":[0,4]}}', 4), "shape must be an array" },
    { "negative shape", image("{" .. entry("a", "F32", "-1", 0, 4) .. "}", 4), "shape[0] must be a non-negative integer" },
    { "fractional shape", image("{" .. entry("a", "F32", "1.5", 0, 4) .. "}", 4), "non-negative integer" },
    { "string in shape", image("{" .. entry("a", "F32", '"1"', 0, 4) .. "}", 4), "non-negative integer" },
    { "nested shape", image("{" .. entry("a", "F32", "[1]", 0, 4) .. "}", 4), "non-negative integer" },
    { "17 dimensions", image("{" .. entry("a", "U8", ("1,"):rep(16) .. "1", 0, 1) .. "}", 1), "17 dimensions" },
    { "element count overflows", image("{" .. entry("a", "F32", "4294967296,4294967296", 0, 4) .. "}", 4), "overflows" },
    { "huge shape, small data", image("{" .. entry("a", "F32", "1000000000000000", 0, 4) .. "}", 4), "need 4000000000000000" },
    { "offsets not an array", image('{"a":{"dtype":"F32","shape":[1],"data_offsets":4}}', 4), "data_offsets must be [begin, end]" },
    { "three offsets", image("{" .. entry("a", "F32", "1", 0, "4,8") .. "}", 8), "data_offsets must be" },
    { "negative offset", image("{" .. entry("a", "F32", "1", -4, 0) .. "}", 4), "data_offsets must be" },
    { "fractional offset", image("{" .. entry("a", "F32", "1", 0.5, 4.5) .. "}", 4), "data_offsets must be" },
    { "offset above 2^53", image("{" .. entry("a", "F32", "1", "18014398509481984", "18014398509481988") .. "}", 4), "data_offsets must be" },
    -- what cJSON's double cannot tell from an integer: the number's text is checked too
    { "shape written 1.0", image("{" .. entry("a", "F32", "1.0", 0, 4) .. "}", 4), "writes the number 1.0" },
    { "offset written 4e0", image("{" .. entry("a", "F32", "1", 0, "4e0") .. "}", 4), "writes the number 4e0" },
    { "shape written -0", image("{" .. entry("a", "U8", "-0", 0, 0) .. "}", 0), "writes the number -0" },
    { "shape 2^53 + 1 (read as 2^53)", image("{" .. entry("a", "U8", "0,9007199254740993", 0, 0) .. "}", 0),
      "writes the number 9007199254740993" },
    -- JSON has no leading zeros: the reference refuses them; cJSON read 01 as 1 and 00 as 0
    { "shape written 01", image("{" .. entry("a", "F32", "01", 0, 4) .. "}", 4), "writes the number 01" },
    { "offset written 00", image("{" .. entry("a", "F32", "1", "00", 4) .. "}", 4), "writes the number 00" },
    { "end before begin", image("{" .. entry("a", "F32", "0", 4, 0) .. "}", 4), "end before they begin" },
    { "byte count differs from the shape", image("{" .. entry("a", "F32", "2", 0, 4) .. "}", 4), "span 4 bytes, its shape and dtype F32 need 8" },
    { "data beyond the end", image("{" .. entry("a", "F32", "2", 0, 8) .. "}", 4), "beyond the end of the data" },
    { "truncated data", image("{" .. entry("a", "F32", "1", 0, 4) .. "," .. entry("b", "F32", "1", 4, 8) .. "}", 6), "beyond the end" },
    { "overlapping tensors", image("{" .. e1 .. "," .. entry("b", "F32", "1", 0, 4) .. "}", 4), "overlap" },
    { "partly overlapping tensors", image("{" .. entry("a", "F32", "2", 0, 8) .. "," .. entry("b", "F32", "1", 4, 8) .. "}", 8), "overlap" },
    { "gap between tensors", image("{" .. entry("a", "F32", "1", 4, 8) .. "}", 8), "a gap of 4 bytes" },
    { "data not covered", image("{" .. e1 .. "}", 12), "cover 4 bytes of data, the file has 12" },
    { "duplicate names", image("{" .. e1 .. "," .. entry("a", "F32", "1", 4, 8) .. "}", 8), "\"a\" appears twice" },
    { "empty name", image("{" .. entry("", "F32", "1", 0, 4) .. "}", 4), "empty name" },
    { "metadata not an object", image('{"__metadata__":[1]}'), "__metadata__ must be an object" },
    { "metadata value a number", image('{"__metadata__":{"k":1}}'), "values must be strings" },
    { "metadata twice", image('{"__metadata__":{},"__metadata__":{}}'), "__metadata__ appears twice" },
    { "metadata key twice", image('{"__metadata__":{"k":"a","k":"b"}}'), "the key \"k\" twice" },
    { "FP8 with a scale of the wrong shape", image("{" .. entry("w", "F8_E4M3", "2,2", 0, 4) .. "," ..
        entry("w_scale_inv", "F32", "3", 4, 16) .. "}", 16), "is not a scale inverse for \"w\"" },
    { "FP8 with an F16 scale", image("{" .. entry("w", "F8_E5M2", "2", 0, 2) .. "," ..
        entry("w_scale_inv", "F16", "1", 2, 4) .. "}", 4), "is not a scale inverse" },
    -- scale inverses no cast makes: every byte would decode to 0, a flipped sign, inf or NaN
    { "FP8 with a zero scale inverse", image("{" .. entry("w", "F8_E4M3", "2", 0, 2) .. "," ..
        entry("w_scale_inv", "F32", "1", 2, 6) .. "}", ("\56\56") .. string.pack("<f", 0)),
      "holds 0.0 at 1: a scale inverse must be finite and > 0" },
    { "FP8 with a negative row scale inverse", image("{" .. entry("w", "F8_E4M3", "2,2", 0, 4) .. "," ..
        entry("w_scale_inv", "F32", "2,1", 4, 12) .. "}", ("\56"):rep(4) .. string.pack("<ff", 1, -2)),
      "holds -2.0 at 2: a scale inverse must be finite and > 0" },
    { "FP8 with a NaN scale inverse", image("{" .. entry("w", "F8_E5M2", "1", 0, 1) .. "," ..
        entry("w_scale_inv", "F32", "1", 1, 5) .. "}", "\56" .. string.pack("<f", 0 / 0)),
      "a scale inverse must be finite and > 0" },
    { "FP8 with an infinite scale inverse", image("{" .. entry("w", "F8_E5M2", "1", 0, 1) .. "," ..
        entry("w_scale_inv", "F32", "1", 1, 5) .. "}", "\56" .. string.pack("<f", math.huge)),
      "holds inf at 1: a scale inverse must be finite and > 0" },
    -- strings cJSON's C strings cut or JSON forbids: read as "a", F32 and "pt" they were (the reference refuses or
    -- keeps the NUL)
    { "a name with \\u0000", image("{" .. entry("a\\u0000b", "F32", "1", 0, 4) .. "}", 4), "holds a NUL byte" },
    { "a dtype with \\u0000", image("{" .. entry("a", "F32\\u0000x", "1", 0, 4) .. "}", 4), "holds a NUL byte" },
    { "metadata with \\u0000", image('{"__metadata__":{"format":"pt\\u0000x"}}'), "holds a NUL byte" },
    { "a raw NUL in a name", image("{" .. entry("a\0b", "F32", "1", 0, 4) .. "}", 4), "control character 0x00" },
    { "a raw newline in metadata", image('{"__metadata__":{"k":"x\ny"}}'), "control character 0x0A" },
    { "9 dimensions", image("{" .. entry("a", "U8", ("1,"):rep(8) .. "1", 0, 1) .. "}", 1), "at most 8" },
  }
  for i, c in ipairs(cases) do
    it(("%d: %s"):format(i, c[1]), function()
      local path = ("%s/bad%d.safetensors"):format(d, i)
      write(path, c[2])
      local ok, err = pcall(fp8.load_file, path)
      assert.is_false(ok, "accepted")
      assert.matches(c[3], err, 1, true)
      assert.matches(path, err, 1, true)   -- names the file
    end)
  end
  it("a directory and a missing file", function()
    U.fails_with("not a regular file", function() fp8.load_file(d) end)
    local ok, err = pcall(fp8.safe_open, d .. "/nope.safetensors")
    assert.is_false(ok)
    assert.matches("cannot open", err)
  end)
  it("has at least 40 cases", function() assert.is_true(#cases >= 40) end)
  it("an escaped backslash before u0000 and other escapes read as the reference reads them", function()
    local path = d .. "/escapes.safetensors"
    local hdr = "{" .. entry("a\\\\u0000", "F32", "1", 0, 4) .. "," .. entry("b\\u0001\\t", "F32", "1", 4, 8) .. "}"
    write(path, image(hdr, string.pack("<ff", 1, 2)))
    local t = fp8.load_file(path)
    assert.are.equal(1, t["a\\u0000"]:item())
    assert.are.equal(2, t["b\1\t"]:item())
  end)
end)

-- ---- save_state directory features ------------------------------------------------------------

local function mlp() return nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 16)) end

local function setup(handler, extra)
  fp8.manual_seed(0)
  local model = mlp()
  local opt = fp8.optim.AdamW(model:parameters(), { lr = 3e-3 })
  local o = { mixed_precision = handler and "fp8" or "no", kwargs_handlers = handler and { handler } or nil, config = false, env = {} }
  for k, v in pairs(extra or {}) do o[k] = v end
  local acc = fp8.Accelerator(o)
  model, opt = acc:prepare(model, opt)
  return acc, model, opt
end

local function step(acc, model, opt)
  fp8.manual_seed(1)
  local x, y = fp8.randn { 8, 32 }, fp8.tensor { 1, 2, 3, 4, 5, 6, 7, 8 }
  local loss = F.cross_entropy(model(x), y)
  acc:backward(loss); opt:step(); opt:zero_grad()
  return loss:item()
end

-- saved() -> d, acc, model, opt: a fresh directory d holding d/c, the checkpoint of a plain model after one step
local function saved()
  local d = tmpdir()
  local acc, model, opt = setup(nil)
  step(acc, model, opt)
  acc:save_state(d .. "/c")
  return d, acc, model, opt
end

describe("fp8._checkpoint.is_file", function()
  it("says true for a regular file (through a link) only: not a folder, a FIFO or a missing path", function()
    local d = tmpdir()
    write(d .. "/f", "x")
    assert(C.mkdir(d .. "/sub"))
    os.execute("mkfifo " .. U.q(d .. "/fifo") .. " && ln -s f " .. U.q(d .. "/link"))
    assert.is_true(C.is_file(d .. "/f"))
    assert.is_true(C.is_file(d .. "/link"))
    assert.is_false(C.is_file(d .. "/sub"))
    assert.is_false(C.is_file(d .. "/fifo"))   -- opening it to test would block until a writer came
    assert.is_false(C.is_file(d .. "/none"))
    assert.is_true(C.exists(d .. "/fifo"))
    assert.is_false(C.exists(d .. "/none"))
    -- load_checkpoint_in_model on a FIFO says what it is (it used to open it, waiting for a writer)
    local m = fp8.nn.Linear(2, 2)
    local ok, err = pcall(fp8.load_checkpoint_in_model, m, d .. "/fifo")
    assert.is_false(ok)
    assert.matches("(not a regular file or a folder)", err, 1, true)
    ok, err = pcall(fp8.load_checkpoint_in_model, m, d .. "/none")
    assert.matches("(no such file or directory)", err, 1, true)
    os.execute("rm -rf " .. U.q(d))
  end)
end)

describe("fp8._checkpoint.mkdir_p (the one mkdir -p: checkpoints, profiler traces, --out)", function()
  it("creates a nested path and its parents with mode 0777 & ~umask", function()
    local d = tmpdir()
    assert.is_true(C.mkdir_p(d .. "/a/b/c"))
    assert.is_true(C.is_dir(d .. "/a/b/c"))
    assert.is_true(C.mkdir_p(d .. "/x//y/"))   -- doubled and trailing slashes, as mkdir -p takes them
    assert.is_true(C.is_dir(d .. "/x/y"))
    local p = io.popen("umask; stat -c %a " .. U.q(d .. "/a") .. " " .. U.q(d .. "/a/b/c"))
    local mask, m1, m2 = tonumber(p:read("l"), 8), p:read("l"), p:read("l")
    p:close()
    local want = ("%o"):format(511 & ~mask)
    assert.are.equal(want, m1)
    assert.are.equal(want, m2)
    os.execute("rm -rf " .. U.q(d))
  end)

  it("accepts a path that exists already", function()
    local d = tmpdir()
    assert.is_true(C.mkdir_p(d))
    assert(C.mkdir(d .. "/e"))
    assert.is_true(C.mkdir_p(d .. "/e"))
    assert.is_true(C.mkdir_p("/"))
    os.execute("rm -rf " .. U.q(d))
  end)

  it("refuses a path under a regular file, naming the file", function()
    local d = tmpdir()
    write(d .. "/file", "x")
    local ok, err = C.mkdir_p(d .. "/file/sub/deeper")
    assert.is_nil(ok)
    assert.are.equal(d .. "/file: cannot create the directory: File exists", err)
    ok, err = C.mkdir_p(d .. "/file")
    assert.is_nil(ok)
    assert.are.equal(d .. "/file: cannot create the directory: File exists", err)
    assert.is_false(C.is_dir(d .. "/file/sub"))
    os.execute("rm -rf " .. U.q(d))
  end)

  it("refuses an empty path", function()
    local ok, err = C.mkdir_p("")
    assert.is_nil(ok)
    assert.are.equal("mkdir_p: cannot create a directory with an empty name", err)
  end)

  it("refuses a path with a NUL byte (it would create the part before it)", function()
    local d = os.tmpname()
    os.remove(d)
    local ok, err = C.mkdir_p(d .. "\0/x")
    assert.is_nil(ok)
    assert.are.equal("mkdir_p: a directory name cannot contain a NUL byte", err)
    assert.is_nil(io.open(d, "r"))
  end)
end)

describe("acc:save_state / load_state", function()
  it("automatic naming: creates project_dir's parents, and refuses to save into another run's numbering", function()
    local d = tmpdir()
    local function run(saves)
      local pc = fp8.ProjectConfiguration { project_dir = d .. "/runs/a", automatic_checkpoint_naming = true, total_limit = 2 }
      local acc, model, opt = setup(nil, { project_config = pc })
      local out = {}
      for i = 1, saves do
        step(acc, model, opt)
        local ok, err = pcall(acc.save_state, acc)
        out[i] = ok and "ok" or err
      end
      return out, acc, pc
    end
    assert.same({ "ok", "ok", "ok", "ok" }, run(4))   -- runs/ did not exist
    assert.same({ "checkpoint_2", "checkpoint_3" }, C.listdir(d .. "/runs/a/checkpoints"))
    local second = run(1)
    -- it wrote checkpoint_0 and total_limit pruned the first run's checkpoint_2
    assert.matches("already holds checkpoint_3, past this run's iteration 0", second[1], 1, true)
    assert.same({ "checkpoint_2", "checkpoint_3" }, C.listdir(d .. "/runs/a/checkpoints"))
    -- load_state() numbers on from the latest: then it saves
    local pc = fp8.ProjectConfiguration { project_dir = d .. "/runs/a", automatic_checkpoint_naming = true, total_limit = 2 }
    local acc, model, opt = setup(nil, { project_config = pc })
    acc:load_state()
    step(acc, model, opt)
    acc:save_state()
    assert.same({ "checkpoint_3", "checkpoint_4" }, C.listdir(d .. "/runs/a/checkpoints"))
  end)

  it("creates the directories above the checkpoint, as Accelerate's os.makedirs(output_dir, exist_ok=True)", function()
    local d = tmpdir()
    local acc, model, opt = setup(nil)
    step(acc, model, opt)
    local out = d .. "/runs/a/b/ckpt"
    assert.are.equal(out, acc:save_state(out))   -- refused before: "cannot create the directory"
    assert.are.equal(1, acc.save_iteration)       -- every save counts, named automatically or not (Accelerate's)
    -- Accelerate's safe_serialization=true is what fp8lab does; false (pickles) is refused
    assert.are.equal(out, acc:save_state(out, { safe_serialization = true }))
    local ok0, err0 = pcall(acc.save_state, acc, out, { safe_serialization = false })
    assert.is_false(ok0); assert.matches("safe_serialization=false is not supported", err0, 1, true)
    -- max_shard_size (huggingface_hub's sizes): the one file Accelerate writes when the weights fit it, as they do at
    -- its default "10GB"; past it, Accelerate's shards and index (tests/spec/model_files_spec.lua)
    assert.are.equal(d .. "/m2/model.safetensors", acc:save_model(model, d .. "/m2", { max_shard_size = "10GB" }))
    local bytes = 0
    for _, t in pairs(fp8.load_file(d .. "/m2/model.safetensors")) do bytes = bytes + t:numel() * 4 end
    assert.are.equal(d .. "/m3/model.safetensors", acc:save_model(model, d .. "/m3", { max_shard_size = bytes }))
    assert.are.equal(d .. "/m4/model.safetensors.index.json",
      acc:save_model(model, d .. "/m4", { max_shard_size = bytes - 1 }))
    -- huggingface_hub reads the number with Python's float(): hex is no size there
    U.fails_with('max_shard_size must be a number of bytes', acc.save_model, acc, model, d .. "/m5",
      { max_shard_size = "0x10KB" })
    ok0, err0 = pcall(acc.save_model, acc, model, d .. "/m4", { max_shard_size = "5GiB" })
    assert.matches('max_shard_size must be a number of bytes (an integer >= 1) or a size such as "10GB"', err0, 1, true)
    acc:load_state(out)
    acc:save_model(model, d .. "/export/x/model")
    assert.truthy(C.is_dir(d .. "/export/x/model"))
    write(d .. "/file", "x")
    local ok, err = pcall(acc.save_state, acc, d .. "/file/ckpt")   -- a file in the way: an error naming it
    assert.is_false(ok)
    assert.matches("save_state: ", err, 1, true)
    -- a name of 251 bytes is the longest whose working name (<name>.tmp) is a legal entry; 252 is refused by its length
    local long = d .. "/" .. string.rep("c", 251)
    assert.are.equal(long, acc:save_state(long))
    assert.are.equal(long, acc:save_state(long))   -- again: the previous one goes through <name>.old
    acc:load_state(long)
    ok, err = pcall(acc.save_state, acc, d .. "/" .. string.rep("c", 252))
    assert.is_false(ok)
    assert.matches("is 252 bytes; save_state writes it as <name>.tmp", err, 1, true)
  end)

  it("automatic_checkpoint_naming numbers checkpoints and total_limit keeps the last N", function()
    local d = tmpdir()
    local pc = fp8.ProjectConfiguration { project_dir = d, automatic_checkpoint_naming = true, total_limit = 2 }
    local acc, model, opt = setup(fp8.TERecipeKwargs {}, { project_config = pc })
    for _ = 1, 4 do step(acc, model, opt); acc:save_state() end
    assert.same({ "checkpoint_2", "checkpoint_3" }, C.listdir(d .. "/checkpoints"))
    assert.are.equal(4, pc.iteration)
    U.fails_with("save_state: automatic_checkpoint_naming is on: call save_state() without a directory",
      function() acc:save_state(d .. "/x") end)
    -- iteration= starts the numbering
    local d2 = tmpdir()
    local pc2 = fp8.ProjectConfiguration { project_dir = d2, automatic_checkpoint_naming = true, iteration = 7 }
    local acc3, model3, opt3 = setup(fp8.TERecipeKwargs {}, { project_config = pc2 })
    step(acc3, model3, opt3); acc3:save_state()
    assert.same({ "checkpoint_7" }, C.listdir(d2 .. "/checkpoints"))
    assert.are.equal(8, pc2.iteration)
    os.execute("rm -rf " .. d2)
    local acc2, model2, opt2 = setup(fp8.TERecipeKwargs {}, { project_config = fp8.ProjectConfiguration {
      project_dir = d, automatic_checkpoint_naming = true } })
    acc2:load_state()                                             -- the latest
    assert.are.equal(4, acc2.step)
    assert.are.equal(4, acc2.project_configuration.iteration)
    assert.are.equal(step(acc, model, opt), step(acc2, model2, opt2))
    os.execute("rm -rf " .. d)
  end)

  it("save_state deletes nothing it did not write: a directory of the user's, or one a checkpoint shares, is refused", function()
    local d = tmpdir()
    local acc, model, opt = setup(nil)
    step(acc, model, opt)
    assert(C.mkdir(d .. "/out"))
    write(d .. "/out/notes.txt", "mine")
    U.fails_with("save_state: " .. d .. "/out holds an entry (notes.txt) that no fp8lab checkpoint wrote: save_state replaces "
      .. "its directory as a whole and deletes nothing it did not write; save into a new or empty directory",
      function() acc:save_state(d .. "/out") end)
    assert.are.equal("mine", read(d .. "/out/notes.txt"))
    -- a checkpoint is replaced as a whole, hook files included (listed in its state file) ...
    local h = acc:register_save_state_pre_hook(function(_, _, out) write(out .. "/extra.bin", "x") end)
    acc:save_state(d .. "/ck")
    h:remove()
    acc:save_state(d .. "/ck")
    assert.is_nil(io.open(d .. "/ck/extra.bin"))
    -- ... unless something else was put in it since
    acc:save_model(model, d .. "/ck/final")
    U.fails_with("save_state: " .. d .. "/ck holds an entry (final/) that no fp8lab checkpoint wrote", function() acc:save_state(d .. "/ck") end)
    assert.is_true(C.is_dir(d .. "/ck/final"))
    -- a file named like a checkpoint's own but not in its list is the user's too
    write(d .. "/ck/final/../model_1.safetensors", "mine")
    os.execute("rm -rf " .. d .. "/ck/final")
    U.fails_with("holds an entry (model_1.safetensors) that no fp8lab checkpoint wrote", function() acc:save_state(d .. "/ck") end)
    os.remove(d .. "/ck/model_1.safetensors")
    -- a symbolic link a hook put in a checkpoint is removed with it, never followed
    assert(C.mkdir(d .. "/shared")); write(d .. "/shared/tokenizer.json", "keep")
    local h3 = acc:register_save_state_pre_hook(function(_, _, out) os.execute(("ln -s %s/shared %s/assets"):format(d, out)) end)
    acc:save_state(d .. "/ck")
    h3:remove()
    acc:save_state(d .. "/ck")
    assert.are.equal("keep", read(d .. "/shared/tokenizer.json"))
    -- a save cut short (its temporary directory still marked) is its own: removed by the next save
    assert(C.mkdir(d .. "/ck2.tmp")); write(d .. "/ck2.tmp/.fp8lab_partial", ""); write(d .. "/ck2.tmp/hook-file", "x")
    acc:save_state(d .. "/ck2")
    assert.is_nil(io.open(d .. "/ck2/hook-file"))
    -- a save that fails on the way leaves nothing behind (its temporary directory included), so the next one works
    local h2 = acc:register_save_state_pre_hook(function(_, _, out) write(out .. "/extra.bin", "x"); error("hook failed") end)
    U.fails_with("hook failed", function() acc:save_state(d .. "/later") end)
    h2:remove()
    assert.is_false(C.is_dir(d .. "/later.tmp"))
    acc:save_state(d .. "/later")
    -- the leftovers of a cut-short save are checked too, and a file in the way is named
    write(d .. "/f", "a file")
    U.fails_with("save_state: " .. d .. "/f exists and is not a directory", function() acc:save_state(d .. "/f") end)
    assert(C.mkdir(d .. "/new.tmp")); write(d .. "/new.tmp/keep.txt", "mine")
    U.fails_with("save_state: " .. d .. "/new.tmp exists and is not the leftover of an fp8lab save", function() acc:save_state(d .. "/new") end)
    assert.are.equal("mine", read(d .. "/new.tmp/keep.txt"))
    -- a user's files named like a checkpoint's, in a directory that holds no checkpoint, are the user's
    assert(C.mkdir(d .. "/pre")); write(d .. "/pre/model.safetensors", "USER")
    U.fails_with("save_state: " .. d .. "/pre holds an entry (model.safetensors) that no fp8lab checkpoint wrote", function() acc:save_state(d .. "/pre") end)
    assert.are.equal("USER", read(d .. "/pre/model.safetensors"))
    -- a backup copy of a checkpoint beside it (cp -r ck ck.old) is not a leftover of a save: kept, the save refused
    os.execute(("cp -r %s/ck %s/ck.old"):format(d, d))
    U.fails_with("save_state: " .. d .. "/ck.old exists and is not the leftover of an fp8lab save", function() acc:save_state(d .. "/ck") end)
    assert.is_true(C.is_dir(d .. "/ck.old"))
    os.execute("rm -rf " .. d .. "/ck.old")
    -- what a user adds inside a folder a hook wrote is the user's: the tree is listed, not only its top
    local h4 = acc:register_save_state_pre_hook(function(_, _, out) assert(C.mkdir(out .. "/unet")); write(out .. "/unet/cfg.json", "{}") end)
    acc:save_state(d .. "/ck3")
    h4:remove()
    write(d .. "/ck3/unet/my_notes.txt", "mine")
    U.fails_with("save_state: " .. d .. "/ck3 holds an entry (unet/my_notes.txt)", function() acc:save_state(d .. "/ck3") end)
    os.remove(d .. "/ck3/unet/my_notes.txt")
    acc:save_state(d .. "/ck3")   -- its own tree: replaced
    assert.is_nil(io.open(d .. "/ck3/unet/cfg.json"))
    -- a removal cut short (a marked ck3.old with the state file gone) is finished by the next save
    assert(C.mkdir(d .. "/ck3.old")); write(d .. "/ck3.old/.fp8lab_partial", ""); write(d .. "/ck3.old/tok_1.json", "x")
    acc:save_state(d .. "/ck3")
    assert.is_false(C.is_dir(d .. "/ck3.old"))
    -- a marker a crash left in a published checkpoint does not make a user's later files fp8lab's
    write(d .. "/ck3/.fp8lab_partial", "")
    write(d .. "/ck3/notes.txt", "mine")
    U.fails_with("save_state: " .. d .. "/ck3 holds an entry (notes.txt)", function() acc:save_state(d .. "/ck3") end)
    assert.are.equal("mine", read(d .. "/ck3/notes.txt"))
    os.remove(d .. "/ck3/notes.txt")
    acc:save_state(d .. "/ck3")   -- its own (and the stale marker) replaced
    assert.is_nil(io.open(d .. "/ck3/.fp8lab_partial"))
    -- a file put into the (empty) target directory while the save runs is kept: nothing is replaced
    assert(C.mkdir(d .. "/ck4"))
    local h5 = acc:register_save_state_pre_hook(function() write(d .. "/ck4/user.txt", "mine") end)
    U.fails_with("save_state: " .. d .. "/ck4 holds an entry (user.txt)", function() acc:save_state(d .. "/ck4") end)
    h5:remove()
    assert.are.equal("mine", read(d .. "/ck4/user.txt"))
    -- a load that fails is undone, also the object whose load raised after changing itself
    local obj = { v = 2 }
    function obj:state_dict() return { v = self.v } end
    function obj:load_state_dict(sd) self.v = sd.v; if self.fail then error("object failed") end end
    local acc5, model5, opt5 = setup(nil)
    acc5:register_for_checkpointing(obj)
    obj.v = 1
    acc5:save_state(d .. "/ck5")
    obj.v, obj.fail = 2, true
    U.fails_with("object failed", function() acc5:load_state(d .. "/ck5") end)
    assert.are.equal(2, obj.v)
    obj.fail = nil
    -- a loader position the checkpoint lacks is named, before anything changes
    local acc6, model6 = setup(nil)
    local ld = acc6:prepare(fp8.data.DataLoader { { 1, 2, 3, 4 }, batch_size = 2 })
    acc6:save_state(d .. "/ck6")
    local sf = d .. "/ck6/fp8lab_state.json"
    write(sf, (read(sf):gsub('"batches_served":%s*%d+,?', "")))
    local before = model6:state_dict()["0.weight"]:totable()
    U.fails_with("load_state: data loader 1: the checkpoint's batches_served is nil, not a count", function() acc6:load_state(d .. "/ck6") end)
    assert.same(before, model6:state_dict()["0.weight"]:totable())
    -- a process count that is not one is named, with strict=false too (it was taken as saved by 0 processes)
    acc6:save_state(d .. "/ck6")
    for _, bad in ipairs { "0", "-3", "1.5", '"x"' } do
      write(sf, (read(sf):gsub('"num_processes":%s*[^,}]+', '"num_processes":' .. bad)))
      for _, o in ipairs { {}, { strict = false } } do
        U.fails_with("fp8lab_state.json: num_processes is " .. bad .. ", not a count of processes >= 1",
          function() acc6:load_state(d .. "/ck6", o) end)
      end
    end
    -- a state file without its settings says so (it showed "this run table: 0x...")
    acc6:save_state(d .. "/ck6")
    write(sf, (read(sf):gsub('"settings":', '"settingz":')))
    U.fails_with("load_state: " .. d .. "/ck6 was saved with other settings: settings: the checkpoint has none, "
      .. "this run a table", function() acc6:load_state(d .. "/ck6") end)
    -- a name ending in . or .. is refused (its temporary directory would land inside it)
    U.fails_with("save_state: give the directory by its name (not ending in '.' or '..')", function() acc:save_state(d .. "/ck3/.") end)
    os.execute("rm -rf " .. d)
  end)

  it("automatic naming refuses an existing checkpoint_N (Accelerate's rule) or a later one, and total_limit keeps users' files", function()
    local d = tmpdir()
    local pc = fp8.ProjectConfiguration { project_dir = d, automatic_checkpoint_naming = true, total_limit = 2 }
    local acc, model, opt = setup(nil, { project_config = pc })
    step(acc, model, opt); acc:save_state()
    local pc2 = fp8.ProjectConfiguration { project_dir = d, automatic_checkpoint_naming = true, total_limit = 2 }
    local acc2, model2, opt2 = setup(nil, { project_config = pc2 })
    step(acc2, model2, opt2)
    U.fails_with("save_state: checkpoint directory " .. d .. "/checkpoints/checkpoint_0 (iteration 0) already exists: "
      .. "load_state() resumes after the last checkpoint, or set project_configuration.iteration to the iteration to start with",
      function() acc2:save_state() end)
    -- a run numbered from 0 beside checkpoint_3 and checkpoint_4 (another run's numbering): refused before anything
    -- is pruned (it wrote checkpoint_0, and total_limit took the other run's checkpoint_3)
    os.execute(("rm -rf %s/checkpoints/*"):format(d))
    for _, n in ipairs { 3, 4 } do pc2.iteration = n; acc2:save_state() end
    pc2.iteration = 0
    U.fails_with("already holds checkpoint_4, past this run's iteration 0", function() acc2:save_state() end)
    assert.same({ "checkpoint_3", "checkpoint_4" }, C.listdir(d .. "/checkpoints"))
    -- only directories that hold a checkpoint count: a symbolic link named checkpoint_9 and an empty checkpoint_1 are
    -- neither loaded nor pruned
    assert(C.mkdir(d .. "/elsewhere")); write(d .. "/elsewhere/keep.txt", "mine")
    os.execute(("ln -s %s/elsewhere %s/checkpoints/checkpoint_9"):format(d, d))
    assert(C.mkdir(d .. "/checkpoints/checkpoint_1"))
    local acc3, model3, opt3 = setup(nil, { project_config = fp8.ProjectConfiguration { project_dir = d,
      automatic_checkpoint_naming = true } })
    acc3:load_state()
    assert.are.equal(5, acc3.project_configuration.iteration)   -- from checkpoint_4, not the link
    os.remove(d .. "/checkpoints/checkpoint_9"); os.execute("rm -rf " .. d .. "/checkpoints/checkpoint_1")
    assert.are.equal("mine", read(d .. "/elsewhere/keep.txt"))
    -- total_limit never deletes a checkpoint holding a user's file: it is kept, with a notice, and the next oldest goes
    write(d .. "/checkpoints/checkpoint_3/notes.txt", "mine")
    pc2.iteration = 5
    acc2:save_state()
    assert.same({ "checkpoint_3", "checkpoint_5" }, C.listdir(d .. "/checkpoints"))
    assert.are.equal("mine", read(d .. "/checkpoints/checkpoint_3/notes.txt"))
    os.execute("rm -rf " .. d)
  end)

  it("ProjectConfiguration and Accelerator options are checked", function()
    U.fails_with("ProjectConfiguration: total_limit must be an integer >= 1, got 0", function() fp8.ProjectConfiguration { total_limit = 0 } end)
    assert.has_error(function() fp8.ProjectConfiguration { save_on_each_node = true } end, "ProjectConfiguration: save_on_each_node is not supported in fp8lab (one node)")
    U.fails_with("ProjectConfiguration: logging_dir must be a directory name, got 3", function() fp8.ProjectConfiguration { logging_dir = 3 } end)
    -- logging_dir feeds the trackers only: without log_with it is refused
    U.fails_with("Accelerator: logging_dir takes effect only with log_with=", function()
      return fp8.Accelerator { config = false, env = {}, project_config = fp8.ProjectConfiguration { logging_dir = "/tmp/l" } } end)
    U.fails_with("ProjectConfiguration: unknown option 'projectdir' (did you mean 'project_dir'?)", function() fp8.ProjectConfiguration { projectdir = "x" } end)
    U.fails_with("Accelerator: project_config must be an fp8.ProjectConfiguration{...}, got table", function() fp8.Accelerator { project_config = {} } end)
    local acc = fp8.Accelerator { project_dir = "/tmp/somewhere", config = false, env = {},
      project_config = fp8.ProjectConfiguration { automatic_checkpoint_naming = true } }
    assert.are.equal("/tmp/somewhere", acc.project_configuration.project_dir)
    -- without automatic naming they would change nothing: refused
    U.fails_with("Accelerator: project_dir takes effect only with automatic_checkpoint_naming=true", function()
      return fp8.Accelerator { project_dir = "/tmp/somewhere", config = false, env = {} } end)
    U.fails_with({ "Accelerator: project_dir takes effect only with automatic_checkpoint_naming=true or with log_with=",
                   "; total_limit takes effect only with automatic_checkpoint_naming=true (" }, function()
      return fp8.Accelerator { config = false, env = {},
        project_config = fp8.ProjectConfiguration { project_dir = "/tmp/x", total_limit = 2 } } end)
  end)

  it("project_dir= names the directory where project_config has none, and is refused where it names another", function()
    local pc = fp8.ProjectConfiguration { project_dir = "/tmp/a", automatic_checkpoint_naming = true }
    -- Accelerate drops the argument unseen here; fp8lab refuses it
    U.fails_with('Accelerator: project_dir "/tmp/b" differs from project_config\'s project_dir "/tmp/a": give one of them',
      function() return fp8.Accelerator { config = false, env = {}, project_config = pc, project_dir = "/tmp/b" } end)
    local acc = fp8.Accelerator { config = false, env = {}, project_config = pc, project_dir = "/tmp/a" }
    assert.are.equal("/tmp/a", acc.project_dir)
    local pc2 = fp8.ProjectConfiguration { automatic_checkpoint_naming = true }
    local acc2 = fp8.Accelerator { config = false, env = {}, project_config = pc2, project_dir = "/tmp/b" }
    assert.are.equal("/tmp/b", acc2.project_dir)
    assert.are.equal("/tmp/b", pc2.project_dir)   -- set in the configuration, as Accelerate's set_directories does
    -- so a second Accelerator sharing pc2 with another directory is refused, not sent to /tmp/b
    U.fails_with('Accelerator: project_dir "/tmp/c" differs from project_config\'s project_dir "/tmp/b"', function()
      return fp8.Accelerator { config = false, env = {}, project_config = pc2, project_dir = "/tmp/c" } end)
  end)

  it("refuses another recipe naming the setting, unless strict=false; a failed load changes nothing", function()
    local d = tmpdir()
    local acc, model, opt = setup(fp8.TERecipeKwargs { margin = 0 })
    step(acc, model, opt)
    acc:save_state(d .. "/c")
    local acc2, model2, opt2 = setup(fp8.TERecipeKwargs { margin = 1 })
    step(acc2, model2, opt2)
    local before = model2:state_dict()["0.weight"]:totable()
    local ok, err = pcall(acc2.load_state, acc2, d .. "/c")
    assert.is_false(ok)
    assert.matches("settings.fp8_recipe.margin: the checkpoint has 0, this run 1", err, 1, true)
    assert.same(before, model2:state_dict()["0.weight"]:totable())
    acc2:load_state(d .. "/c", { strict = false })
    assert.same(model:state_dict()["0.weight"]:totable(), model2:state_dict()["0.weight"]:totable())
    os.execute("rm -rf " .. d)
  end)

  it("with strict=false, a checkpoint saved without fp16 loads into an fp16 run, whose loss scaler keeps its own state",
    function()
    local d = tmpdir()
    local function mk(mp)
      local acc = fp8.Accelerator { cpu = true, mixed_precision = mp, config = false, env = {} }
      fp8.manual_seed(1)
      local m = fp8.nn.Linear(4, 4)
      local o = fp8.optim.SGD(m:parameters(), { lr = 0.1 })
      m, o = acc:prepare(m, o)
      return acc, m
    end
    local acc, m = mk("bf16")
    acc:save_state(d .. "/c")
    local acc2, m2 = mk("fp16")
    acc2.scaler:update(1024.0)
    local ok, err = pcall(acc2.load_state, acc2, d .. "/c")
    assert.is_false(ok)
    assert.matches("settings.mixed_precision: the checkpoint has bf16, this run fp16", err, 1, true)
    acc2:load_state(d .. "/c", { strict = false })   -- was: cannot read .../scaler.json
    assert.are.equal(1024.0, acc2.scaler:get_scale())
    assert.same(m:state_dict().weight:totable(), m2:state_dict().weight:totable())
    os.execute("rm -rf " .. d)
  end)

  it("with strict=false, a recipe state saved with another amax_history_len keeps its most recent entries", function()
    local d = tmpdir()
    local acc, model, opt = setup(fp8.TERecipeKwargs { amax_history_len = 4 })
    for _ = 1, 3 do step(acc, model, opt) end
    acc:save_state(d .. "/c")
    local saved = model[1].fp8_meta:state().input
    for _, c in ipairs { { 1024, "te E4M3" }, { 2, "te, a shorter window" } } do
      local acc2, model2 = setup(fp8.TERecipeKwargs { amax_history_len = c[1] })
      local ok, err = pcall(acc2.load_state, acc2, d .. "/c")
      assert.is_false(ok, c[2])
      assert.matches("settings.fp8_recipe.amax_history_len: the checkpoint has 4, this run " .. c[1], err, 1, true)
      acc2:load_state(d .. "/c", { strict = false })
      local got = model2[1].fp8_meta:state().input
      assert.are.equal(c[1], #got.history, c[2])
      for k = 1, c[1] do assert.are.equal(saved.history[k] or 0, got.history[k], c[2] .. " entry " .. k) end
      assert.are.equal(saved.scale, got.scale, c[2])
      -- Module:load_state_dict alone: strict refuses, naming the fix
      local sd = model:state_dict()
      ok, err = pcall(model2.load_state_dict, model2, sd)
      assert.is_false(ok)
      assert.matches("has an amax history of 4, this layer " .. c[1] .. " (a different amax_history_len or recipe; "
        .. "strict=false keeps its most recent entries that fit)", err, 1, true)
    end
    os.execute("rm -rf " .. d)
  end)

  it("refuses a changed model, naming the tensor, and undoes what was loaded before the failure", function()
    local d, acc, model, opt = saved()
    fp8.manual_seed(0)
    local other = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 8))
    local acc2 = fp8.Accelerator { config = false, env = {} }
    local o2 = fp8.optim.AdamW(other:parameters(), { lr = 1e-3 })
    other, o2 = acc2:prepare(other, o2)
    local ok, err = pcall(acc2.load_state, acc2, d .. "/c")
    assert.is_false(ok)
    assert.matches('size mismatch for "4.weight"', err, 1, true)
    -- a broken optimizer file: the model was loaded first and must be restored
    local acc3, model3, opt3 = setup(nil)
    local before = model3:state_dict()["0.weight"]:totable()
    write(d .. "/c/optimizer.safetensors", image("{}"))
    ok, err = pcall(acc3.load_state, acc3, d .. "/c")
    assert.is_false(ok)
    assert.matches("not an fp8lab optimizer file", err, 1, true)
    assert.same(before, model3:state_dict()["0.weight"]:totable())
    os.execute("rm -rf " .. d)
  end)

  it("refuses a state file whose object counts are not counts, naming the field", function()
    local d, acc, model, opt = saved()
    local text = read(d .. "/c/fp8lab_state.json")
    for _, c in ipairs { { "models", '"1"', '"1"' }, { "optimizers", "1.0", "1.0" }, { "custom", "null", "nil" } } do
      local t = text:gsub('"' .. c[1] .. '":%s*%d+', '"' .. c[1] .. '": ' .. c[2])
      write(d .. "/c/fp8lab_state.json", t)
      local acc2 = setup(nil)
      local ok, err = pcall(acc2.load_state, acc2, d .. "/c")
      assert.is_false(ok, c[1])
      assert.matches(d .. "/c/fp8lab_state.json: " .. c[1] .. " is " .. c[3] .. ", expected a count >= 0", err, 1, true)
    end
    os.execute("rm -rf " .. d)
  end)

  it("refuses an optimizer file whose scalars or step_count are not what it writes, naming the file", function()
    local d, acc, model, opt = saved()
    local path = d .. "/c/optimizer.safetensors"
    local tensors, meta = fp8.load_file(path), fp8.safe_open(path):metadata()
    for _, c in ipairs { { "scalars", '{"1": 5}', "the state of parameter 1 is number, expected an object" },
                         { "scalars", "7", "scalars is number, expected an object" },
                         { "step_count", "-5", 'step_count is "-5", expected an integer >= 0' },
                         { "step_count", "abc", 'step_count is "abc", expected an integer >= 0' } } do
      local m = {}
      for k, v in pairs(meta) do m[k] = v end
      m[c[1]] = c[2]
      fp8.save_file(tensors, path, m)
      local acc2, model2, opt2 = setup(nil)
      local before = model2:state_dict()["0.weight"]:totable()
      local ok, err = pcall(acc2.load_state, acc2, d .. "/c")
      assert.is_false(ok, c[2])
      assert.matches("load_state: " .. path .. ": " .. c[3], err, 1, true)
      assert.same(before, model2:state_dict()["0.weight"]:totable())
    end
    os.execute("rm -rf " .. d)
  end)

  it("a previous checkpoint that cannot be removed after the swap stays marked, and the next save removes it", function()
    local d, acc, model, opt = saved()
    -- an immutable file (chattr +i stops root too); where the file system has no such flag there is nothing to test
    if not os.execute("chattr +i " .. d .. "/c/model.safetensors 2>/dev/null") then
      os.execute("rm -rf " .. d)
      pending("chattr +i is not available here")
      return
    end
    step(acc, model, opt)
    acc:save_state(d .. "/c")   -- the new checkpoint is in place; the old one, now c.tmp, could not all go
    os.execute("chattr -i " .. d .. "/c.tmp/model.safetensors")
    assert.are.equal(2, C.json_decode(read(d .. "/c/fp8lab_state.json")).step)
    assert.is_true(C.is_dir(d .. "/c.tmp"))
    assert.truthy(io.open(d .. "/c.tmp/.fp8lab_partial"), "the leftover lost its marker")
    -- still recognisably fp8lab's: the next save takes it away instead of refusing
    step(acc, model, opt)
    acc:save_state(d .. "/c")
    assert.same({ "c" }, C.listdir(d))
    os.execute("rm -rf " .. d)
  end)

  it("a save cut short between its two renames (no atomic exchange) loses nothing: the previous checkpoint is back",
    function()
    local d, acc, model, opt = saved()
    -- what such a save leaves: c moved aside to c.old (marked first), the new one still c.tmp, no c
    write(d .. "/c/.fp8lab_partial", "")
    assert(os.rename(d .. "/c", d .. "/c.old"))
    assert(C.mkdir(d .. "/c.tmp")); write(d .. "/c.tmp/.fp8lab_partial", "")
    U.fails_with("load_state: " .. d .. "/c is not a directory; " .. d .. "/c.old holds its checkpoint, moved aside by "
      .. "a save that was cut short: rename it back", acc.load_state, acc, d .. "/c")
    -- the next save puts c.old back before it clears the leftovers; one that then fails leaves it under its name
    -- (the removal of the leftovers deleted it, and a failed save left no checkpoint at all)
    local bad = { state_dict = function() error("no state today") end, load_state_dict = function() end }
    acc:register_for_checkpointing(bad)
    step(acc, model, opt)
    assert.has_error(function() acc:save_state(d .. "/c") end)
    assert.are.equal(1, C.json_decode(read(d .. "/c/fp8lab_state.json")).step)
    assert.is_nil(io.open(d .. "/c/.fp8lab_partial"), "the restored checkpoint kept its working mark")
    local acc2 = setup(nil)
    acc2:load_state(d .. "/c")
    -- a c.old that a removal cut short left incomplete is not taken for a checkpoint
    write(d .. "/c/.fp8lab_partial", "")
    assert(os.rename(d .. "/c", d .. "/c.old"))
    os.remove(d .. "/c.old/model.safetensors")
    local ok, err = pcall(acc2.load_state, acc2, d .. "/c")
    assert.are.same({ false, "load_state: " .. d .. "/c does not exist" }, { ok, err })
    acc2:save_state(d .. "/c")
    assert.same({ "c" }, C.listdir(d))
    os.execute("rm -rf " .. d)
  end)

  it("a second save_state to the same directory replaces it; no .tmp or .old is left", function()
    local d, acc, model, opt = saved()
    step(acc, model, opt)
    acc:save_state(d .. "/c/")
    assert.same({ "c" }, C.listdir(d))
    assert.are.equal(2, C.json_decode(read(d .. "/c/fp8lab_state.json")).step)
    os.execute("rm -rf " .. d)
  end)

  it("a path with a NUL byte is refused by readers and writers (the C call would use the part before it)", function()
    local d, acc, model = saved()
    write(d .. "/a.safetensors", "keep")
    local t = { x = fp8.ones { 2 } }
    -- before: save_file wrote d/a.safetensors, load_file read it, save_model made d/m and wrote into it
    U.fails_with("save_file: path must not contain a NUL byte", fp8.save_file, t, d .. "/a.safetensors\0.bak")
    U.fails_with("load_file: path must not contain a NUL byte", fp8.load_file, d .. "/c/model.safetensors\0x")
    U.fails_with("safe_open: path must not contain a NUL byte", fp8.safe_open, d .. "/c/model.safetensors\0x")
    U.fails_with("save_state: the directory name must not contain a NUL byte", acc.save_state, acc, d .. "/c\0x")
    U.fails_with("load_state: the directory name must not contain a NUL byte", acc.load_state, acc, d .. "/c\0x")
    U.fails_with("save_model: the directory name must not contain a NUL byte", acc.save_model, acc, model, d .. "/m\0x")
    U.fails_with("write_atomic: path must not contain a NUL byte", require("fp8._fileio").write_atomic,
      d .. "/a.safetensors\0x", "data")
    U.fails_with("read_regular: path must not contain a NUL byte", require("fp8._fileio").read_regular,
      d .. "/a.safetensors\0x")
    U.fails_with("config.write: path must not contain a NUL byte", fp8.config.write, d .. "/a.safetensors\0x", {})
    assert.are.equal("keep", read(d .. "/a.safetensors"))
    assert.same({ "a.safetensors", "c" }, C.listdir(d))
    os.execute("rm -rf " .. d)
  end)

  it("a checkpoint directory that replaces one keeps its permissions (chmod 700 stays private)", function()
    local d, acc, model, opt = saved()
    assert(os.execute("chmod 700 " .. d .. "/c"))
    step(acc, model, opt)
    acc:save_state(d .. "/c")
    local p = io.popen("stat -c %a " .. d .. "/c")
    local m = p:read("l")
    p:close()
    assert.are.equal("700", m)
    assert.are.equal(2, C.json_decode(read(d .. "/c/fp8lab_state.json")).step)
    os.execute("rm -rf " .. d)
  end)

  it("save_model writes weights only, dequantized or raw FP8", function()
    local d = tmpdir()
    local acc, model, opt = setup(fp8.MSAMPRecipeKwargs { opt_level = "O3" })
    step(acc, model, opt)
    local p = acc:save_model(model, d .. "/deq")
    local t = fp8.load_file(p)
    assert.is_nil(t["0.fp8_state"])
    -- O3's E4M3 weight copy is derived state (made again from the fp16 master): left out, so the file loads into a
    -- plain model as it is
    assert.is_nil(t["0.weight_fp8"])
    assert.are.equal("fp16", t["0.weight"]:dtype())
    local plain = mlp()
    plain:load_state_dict(t)
    assert.same(t["0.weight"]:to("fp32"):totable(), plain:state_dict()["0.weight"]:totable())
    assert.is_nil(fp8.load_file(acc:save_model(model, d .. "/raw", { fp8 = "raw" }))["0.weight_fp8"])
    -- an FP8 tensor of the model's own (a buffer): fp32 values by default, its bytes and scale with fp8="raw"
    local m = nn.Linear(4, 2)
    m:register_buffer("codebook", fp8.randn { 2, 4 }:quantize("e4m3"))
    local deq = fp8.load_file(acc:save_model(m, d .. "/deq2"))
    assert.are.equal("fp32", deq.codebook:dtype())
    local raw = fp8.load_file(acc:save_model(m, d .. "/raw2", { fp8 = "raw" }))
    assert.are.equal("e4m3", raw.codebook:dtype())
    assert.same(deq.codebook:totable(), raw.codebook:dequantize():totable())
    U.fails_with("save_model: fp8 must be \"dequantize\" or \"raw\", got bytes", function() acc:save_model(model, d, { fp8 = "bytes" }) end)
    U.fails_with("save_model: unknown option 'dtype' (valid: fp8, safe_serialization, max_shard_size)",
      function() acc:save_model(model, d, { dtype = "x" }) end)
    os.execute("rm -rf " .. d)
  end)

  it("save_model and save name themselves when the write fails (a full disk, a directory in the way)", function()
    local d = tmpdir()
    local acc, model = setup(nil)
    assert(C.mkdir(d .. "/m")); assert(C.mkdir(d .. "/m/model.safetensors"))
    -- before: "lua/fp8/checkpointing.lua:1075: <path>: cannot write: Is a directory", and save's had no "save:"
    local err = U.fails_with("save_model: " .. d .. "/m/model.safetensors: cannot write: Is a directory",
      acc.save_model, acc, model, d .. "/m")
    assert.is_nil(err:find("checkpointing.lua", 1, true), err)
    U.fails_with("save: " .. d .. "/m/model.safetensors: cannot write: Is a directory",
      acc.save, acc, { w = fp8.ones { 2 } }, d .. "/m/model.safetensors")
    os.execute("rm -rf " .. d)
  end)

  it("fp8.stats reads the recipe state out of a checkpoint's model file", function()
    local d = tmpdir()
    local acc, model, opt = setup(fp8.TERecipeKwargs { amax_history_len = 4 })
    step(acc, model, opt); step(acc, model, opt)
    acc:save_state(d .. "/c")
    local saved = fp8.stats(fp8.load_file(d .. "/c/model.safetensors"), { quiet = true })
    local live = fp8.stats(model, { quiet = true })
    assert.are.equal(#live, #saved)
    for i, r in ipairs(live) do
      assert.are.equal(r.layer, saved[i].layer)
      assert.are.equal(r.role, saved[i].role)
      assert.are.equal(r.scale, saved[i].scale)
      assert.are.equal(r.amax_history, saved[i].amax_history)
      assert.are.equal(2, saved[i].updates)
    end
    -- a NaN in a history (MS-AMP's in-time casts record one) shows as NaN there too (the largest finite entry did)
    local S0 = require "fp8.fp8_state"
    local sd0 = model:state_dict()
    local st0 = S0.unpack(sd0["0.fp8_state"])
    st0.grad.history[2] = 0 / 0
    sd0["0.fp8_state"] = S0.pack(st0)
    model:load_state_dict(sd0)
    local nan_saved, nan_live = fp8.stats(sd0, { quiet = true })[3], fp8.stats(model, { quiet = true })[3]
    assert.are.equal("grad", nan_saved.role)
    assert.is_true(nan_saved.amax_history ~= nan_saved.amax_history, tostring(nan_saved.amax_history))
    assert.is_true(nan_live.amax_history ~= nan_live.amax_history, tostring(nan_live.amax_history))
    U.fails_with("fp8.stats: 0.fp8_state: FP8 recipe state: unknown layout", function() fp8.stats({ ["0.fp8_state"] = fp8.tensor { 7 } }, { quiet = true }) end)
    -- counts that are not counts are refused by the layer, naming them (a negative one was kept, a NaN became 0)
    local S = require "fp8.fp8_state"
    for _, c in ipairs { { "input", "updates", -7, "-7" }, { "input", "updates", 0 / 0, "nan" },
                         { "grad", "warm", -5, "-5" }, { "weight", "updates", 1.5, "1.5" } } do
      local sd = model:state_dict()
      local st = S.unpack(sd["0.fp8_state"])
      st[c[1]][c[2]] = c[3]
      sd["0.fp8_state"] = S.pack(st)
      U.fails_with(('for "0.fp8_state": the %s role\'s %s count is %s (must be an integer >= 0)'):format(c[1], c[2],
        c[4]), model.load_state_dict, model, sd)
      local lines, old_print = {}, _G.print
      _G.print = function(s) lines[#lines + 1] = s end
      local ok, err = pcall(fp8.stats, sd)   -- printed as it is, not raised on
      _G.print = old_print
      assert.is_true(ok, err)
      if c[2] == "updates" then   -- (the warm-up count is not a column)
        assert.truthy(table.concat(lines, "\n"):find(" " .. c[4] .. " ", 1, true), table.concat(lines, "\n"))
      end
    end
    os.execute("rm -rf " .. d)
  end)

  it("register_for_checkpointing carries custom objects", function()
    local d = tmpdir()
    local counter = { n = 3 }
    function counter:state_dict() return { n = self.n } end
    function counter:load_state_dict(s) self.n = s.n end
    local acc = fp8.Accelerator { config = false, env = {} }
    acc:register_for_checkpointing(counter)
    acc:save_state(d .. "/c")
    counter.n = 9
    acc:load_state(d .. "/c")
    assert.are.equal(3, counter.n)
    U.fails_with("register_for_checkpointing: argument 1 has no state_dict()/load_state_dict() methods (got table)", function() acc:register_for_checkpointing({}) end)
    os.execute("rm -rf " .. d)
  end)

  it("register_for_checkpointing registers none of its arguments when one is refused, as Accelerate's", function()
    local d = tmpdir()
    local good = { n = 1 }
    function good:state_dict() return { n = self.n } end
    function good:load_state_dict(s) self.n = s.n end
    local acc = fp8.Accelerator { config = false, env = {} }
    U.fails_with("register_for_checkpointing: argument 2 has no state_dict()/load_state_dict() methods (got number)",
      acc.register_for_checkpointing, acc, good, 5)
    acc:save_state(d .. "/c")   -- no custom_checkpoint_0.json: good was not registered
    assert.is_nil(U.read(d .. "/c/custom_checkpoint_0.json"))
    assert.are.equal(0, C.json_decode(read(d .. "/c/fp8lab_state.json")).custom)
    os.execute("rm -rf " .. d)
  end)

  it("save and load pre-hooks: a model the hooks take over is saved and loaded their way, in the checkpoint", function()
    local d = tmpdir()
    local nn = fp8.nn
    local function make()
      local acc = fp8.Accelerator { config = false, env = {} }
      local a, b = acc:prepare(nn.Linear(4, 4), nn.Linear(4, 2))
      return acc, a, b
    end
    local acc, a, b = make()
    local calls = 0
    acc:register_save_state_pre_hook(function(models, weights, out)
      calls = calls + 1
      assert.are.equal(2, #models); assert.are.equal(2, #weights)
      assert.are.equal(b, models[2])
      fp8.save_file(table.remove(weights, 2), out .. "/head.safetensors")   -- the second model: saved here, not as model_1
    end)
    local h = acc:register_save_state_pre_hook(function() calls = calls + 100 end)
    h:remove()
    acc:save_state(d .. "/c")
    assert.are.equal(1, calls)
    local files = C.listdir(d .. "/c")
    table.sort(files)
    assert.truthy(table.concat(files, " "):find("head.safetensors model.safetensors", 1, true), table.concat(files, " "))
    assert.is_nil(U.read(d .. "/c/model_1.safetensors"))
    -- a new run: without the load hook the checkpoint holds one model for two
    local acc2, a2, b2 = make()
    U.fails_with("holds 1 models, this accelerator has 2 prepared", acc2.load_state, acc2, d .. "/c")
    acc2:register_load_state_pre_hook(function(models, dir)
      local head = table.remove(models, 2)
      head:load_state_dict(fp8.load_file(dir .. "/head.safetensors"))
    end)
    acc2:load_state(d .. "/c")
    assert.are.equal(0, (a2.weight - a.weight):abs():max():item())
    assert.are.equal(0, (b2.weight - b.weight):abs():max():item())
    U.fails_with("register_save_state_pre_hook: expected a function, got number", acc2.register_save_state_pre_hook, acc2, 1)
    -- a hook's failure is named as one, whatever value it raised (not "nil" or "table: 0x...")
    for _, case in ipairs { { {}, "(error object is a table value)" }, { false, "(error object is a boolean value)" },
                            { setmetatable({}, { __tostring = function() return "own text" end }), "own text" } } do
      local hs = acc2:register_save_state_pre_hook(function() error(case[1]) end)
      U.fails_with("save_state: a save_state pre-hook failed: " .. case[2], acc2.save_state, acc2, d .. "/e")
      hs:remove()
    end
    local hl = acc2:register_load_state_pre_hook(function() error() end)
    U.fails_with("load_state: a load_state pre-hook failed: (error object is a nil value)", acc2.load_state, acc2, d .. "/c")
    hl:remove()
    os.execute("rm -rf " .. d)
  end)
end)

describe("what a checkpoint carries exactly", function()
  -- stderr lines written while f runs (the notices), with f's results
  local function notices(f, ...)
    local real, lines = io.stderr, {}
    io.stderr = { write = function(_, ...) lines[#lines + 1] = table.concat({ ... }) end }
    local r = table.pack(pcall(f, ...))
    io.stderr = real
    if not r[1] then error(r[2], 0) end
    return table.concat(lines), table.unpack(r, 2, r.n)
  end

  it("tensors in a custom object's state, at any depth, come back exactly; functions and userdata are refused by key path", function()
    local d = tmpdir()
    fp8.manual_seed(5)
    local q = fp8.randn { 3, 4 }:quantize("e4m3", { axis = 1 })
    local state = { shadow = fp8.tensor { 1, 2, 3 }, decay = 0.99,
                    extra = { t = fp8.tensor { 5 }, list = { fp8.randn { 2 }:to("bf16"), 2, q } } }
    local obj = { got = nil }
    function obj:state_dict() return state end
    function obj:load_state_dict(s) self.got = s end
    local acc = fp8.Accelerator { config = false, env = {} }
    acc:register_for_checkpointing(obj)
    acc:save_state(d .. "/c")
    assert.truthy(U.read(d .. "/c/custom_checkpoint_0.safetensors"))
    local files = C.json_decode(read(d .. "/c/fp8lab_state.json")).files
    assert.truthy(table.concat(files, " "):find("custom_checkpoint_0.safetensors", 1, true))
    acc:load_state(d .. "/c")
    local g = obj.got
    assert.are.equal(0.99, g.decay)
    assert.are.equal(2, g.extra.list[2])
    for _, pair in ipairs { { state.shadow, g.shadow }, { state.extra.t, g.extra.t }, { state.extra.list[1], g.extra.list[1] } } do
      assert.is_true(fp8.is_tensor(pair[2]))
      assert.are.equal(pair[1]:dtype(), pair[2]:dtype())
      assert.same(pair[1]:to("fp32"):totable(), pair[2]:to("fp32"):totable())
    end
    assert.are.equal("e4m3", g.extra.list[3]:dtype())
    assert.same(q:dequantize():totable(), g.extra.list[3]:dequantize():totable())
    -- what cannot be saved is refused, naming where it is, and nothing is published
    state = { extra = { f = print } }
    U.fails_with("save_state: custom object 1: key 'extra.f' is a function", acc.save_state, acc, d .. "/e")
    state = { io.stdout }
    U.fails_with("save_state: custom object 1: key '1' is a userdata", acc.save_state, acc, d .. "/e")
    state = { __fp8lab_tensor__ = "x" }
    U.fails_with("uses the key __fp8lab_tensor__", acc.save_state, acc, d .. "/e")
    local cyc = {}; cyc.me = cyc
    state = { a = cyc }
    U.fails_with("key 'a.me' holds a table that contains it (a cycle)", acc.save_state, acc, d .. "/e")
    assert.is_nil(U.read(d .. "/e/fp8lab_state.json"))
    -- a custom JSON naming a tensor its safetensors file lacks
    U.write(d .. "/c/custom_checkpoint_0.json", '{"t": {"__fp8lab_tensor__": "9:t", "device": "cpu"}}')
    U.fails_with("names the tensor \"9:t\", which", acc.load_state, acc, d .. "/c")
    os.execute("rm -rf " .. d)
  end)

  it("JSON keeps integers past 2^53, floats as floats; a NUL in a string or inf is refused naming the key", function()
    local v = C.json_decode(C.json_encode { big = 9007199254740993, min = math.mininteger, one = 1.0, tenth = 0.1,
                                             neg0 = -0.0, e = 1e300, list = { 3, 3.0 } })
    assert.are.equal(9007199254740993, v.big); assert.are.equal("integer", math.type(v.big))
    assert.are.equal(math.mininteger, v.min)
    assert.are.equal("float", math.type(v.one)); assert.are.equal(1.0, v.one)
    assert.are.equal(0.1, v.tenth)
    assert.are.equal(-math.huge, 1 / v.neg0)
    assert.are.equal(1e300, v.e)
    assert.are.equal("integer", math.type(v.list[1])); assert.are.equal("float", math.type(v.list[2]))
    assert.truthy(C.json_encode { x = 0.99 }:find('"x":%s*0.99\n'))   -- the shortest text that reads back the same
    U.fails_with("json_encode: key 'a.b': the string holds a NUL byte", C.json_encode, { a = { b = "a\0b" } })
    U.fails_with("json_encode: key 'a.b.3': inf cannot be stored in JSON", C.json_encode, { a = { b = { 1, 2, math.huge } } })
    U.fails_with("json_encode: key 'a': object keys must be strings", C.json_encode, { a = { [true] = 1 } })
    -- through a checkpoint: a custom state comes back the same, types included
    local d = tmpdir()
    local state = { big = 9007199254740993, one = 1.0, s = "x" }
    local obj = {}
    function obj:state_dict() return state end
    function obj:load_state_dict(s) self.got = s end
    local acc = fp8.Accelerator { config = false, env = {} }
    acc:register_for_checkpointing(obj)
    acc:save_state(d .. "/c")
    acc:load_state(d .. "/c")
    assert.are.equal(9007199254740993, obj.got.big)
    assert.are.equal("float", math.type(obj.got.one))
    state = { name = "a\0b" }
    U.fails_with("save_state: custom object 1: json_encode: key 'name': the string holds a NUL byte", acc.save_state, acc, d .. "/e")
    state = { ema = { loss = 0 / 0 } }
    U.fails_with("save_state: custom object 1: json_encode: key 'ema.loss': nan cannot be stored in JSON", acc.save_state, acc, d .. "/e")
    os.execute("rm -rf " .. d)
  end)

  it("JSON read back refuses what cJSON would lose: text after the value, a \\u0000 escape", function()
    assert.are.equal(1, C.json_decode('{"a": 1}\n \t\r').a)   -- whitespace after it is fine
    assert.are.equal("x\\u0000", C.json_decode('{"a": "x\\\\u0000"}').a)   -- an escaped backslash, then text
    -- both read as {"a": 1} and "x": the second document and the rest of the string were dropped
    U.fails_with("t: not valid here: bytes after the JSON value", C.json_decode, '{"a": 1}{"a": 2}', "t")
    U.fails_with("t: not valid here: bytes after the JSON value", C.json_decode, '{"a": 1}\0', "t")
    U.fails_with("t: not valid here: a string holds \\u0000", C.json_decode, '{"a": "x\\u0000y"}', "t")
    -- through a checkpoint: a state file with a second document appended is refused, naming it
    local d = tmpdir()
    local acc = fp8.Accelerator { config = false, env = {} }
    acc:save_state(d .. "/c")
    local f = d .. "/c/fp8lab_state.json"
    U.write(f, read(f) .. '{"step": 5}')
    U.fails_with("fp8lab_state.json: not valid here: bytes after the JSON value", acc.load_state, acc, d .. "/c")
    os.execute("rm -rf " .. d)
  end)

  it("resuming in the middle of an accumulation window keeps the sync pattern (micro-step saved), with a notice", function()
    local d = tmpdir()
    local function new_acc()
      local acc = fp8.Accelerator { gradient_accumulation_steps = 4, config = false, env = {} }
      return acc, acc:prepare(nn.Linear(4, 2))
    end
    local function micro(acc, model, n, out)
      for _ = 1, n do acc:accumulate(model, function() end); out[#out + 1] = acc.sync_gradients end
      return out
    end
    local acc, model = new_acc()
    local straight = micro(acc, model, 8, {})
    acc, model = new_acc()
    local resumed = micro(acc, model, 6, {})
    local text = notices(acc.save_state, acc, d .. "/c")
    assert.truthy(text:find("fp8lab: notice: save_state: saved at micro-step 2 of an accumulation window of 4", 1, true), text)
    assert.are.equal("", (notices(acc.save_state, acc, d .. "/c")))   -- once
    local acc2, model2 = new_acc()
    acc2:load_state(d .. "/c")
    micro(acc2, model2, 2, resumed)
    assert.same(straight, resumed)
    assert.are.equal(6, C.json_decode(read(d .. "/c/fp8lab_state.json")).micro_step)
    -- at a window's end: no notice
    local acc3, model3 = new_acc()
    micro(acc3, model3, 4, {})
    assert.are.equal("", (notices(acc3.save_state, acc3, d .. "/c")))
    os.execute("rm -rf " .. d)
  end)

  it("a corrupted state file is refused naming the file and the value", function()
    local d = tmpdir()
    local acc = fp8.Accelerator { config = false, env = {} }
    local loader = acc:prepare(fp8.data.DataLoader { { 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12 }, batch_size = 1 })
    acc:save_state(d .. "/c")
    local good = read(d .. "/c/fp8lab_state.json")
    local function with(pattern, repl, needle)
      local text, n = good:gsub(pattern, repl, 1)
      assert.are.equal(1, n, pattern)
      U.write(d .. "/c/fp8lab_state.json", text)
      U.fails_with(needle, acc.load_state, acc, d .. "/c")
    end
    with('"step":%s*%d+', '"step": -3', "fp8lab_state.json: step is -3, expected an integer >= 0")
    with('"step":%s*%d+', '"step": 1.5', "fp8lab_state.json: step is 1.5, expected an integer >= 0")
    with('"micro_step":%s*%d+', '"micro_step": -1', "fp8lab_state.json: micro_step is -1, expected an integer >= 0")
    with('"batches_served":%s*%d+', '"batches_served": 70', "data loader 1: the checkpoint's batches_served (70) is more than its batches per epoch (12)")
    U.write(d .. "/c/fp8lab_state.json", good)
    U.write(d .. "/c/random_states_0.json", '{"fp8": ["zz", "00"]}')
    U.fails_with(d .. "/c/random_states_0.json: the fp8 generator's seed is \"zz\", expected 16 hex digits", acc.load_state, acc, d .. "/c")
    U.write(d .. "/c/random_states_0.json", '{"fp8": ["0000000000000000", 7]}')
    U.fails_with("random_states_0.json: the fp8 generator's counter is 7, expected 16 hex digits", acc.load_state, acc, d .. "/c")
    assert.are.equal(0, loader.batches_served or 0)   -- nothing applied
    os.execute("rm -rf " .. d)
  end)

  it("save_state errors carry no internal source location", function()
    local d = tmpdir()
    local acc, model, opt = setup(nil)
    -- a directory where the optimizer file goes: its rename fails in the core
    local h = acc:register_save_state_pre_hook(function(_, _, out) assert(C.mkdir(out .. "/optimizer.safetensors")) end)
    local err = U.fails_with({ "save_state: ", "optimizer.safetensors" }, acc.save_state, acc, d .. "/c")
    assert.is_nil(err:match("^[^:]*%.lua:%d+:"), err)
    assert.is_nil(err:match("^[^:]*%.c:%d+:"), err)
    h:remove()
    os.execute("rm -rf " .. d)
  end)
end)

describe("a registered custom object's failure", function()
  -- acc:load_state raised just "(error object is a table value)" when the object's load_state_dict raised a table
  -- (2026-12-01): the message now names the call, the object and its method, with what the table holds
  it("is named in load_state and save_state, with the fields of a table it raised", function()
    local d = tmpdir()
    local obj = setmetatable({ v = 1 }, { __name = "Counter" })
    function obj:state_dict() if self.fail_save then error(self.fail_save) end return { v = self.v } end
    function obj:load_state_dict(sd) if self.fail_load then error(self.fail_load) end self.v = sd.v end
    local acc = fp8.Accelerator { config = false, env = {} }
    acc:register_for_checkpointing(obj)
    acc:save_state(d .. "/c")
    obj.v, obj.fail_load = 5, { code = 2, reason = "bad counter" }
    local ok, err = pcall(acc.load_state, acc, d .. "/c")
    assert.is_false(ok)
    assert.are.equal("load_state: custom object 1 (Counter, register_for_checkpointing): its load_state_dict() failed: "
      .. '(error object is a table value: {code = 2, reason = "bad counter"})', err)
    assert.are.equal(5, obj.v)
    obj.fail_load = nil
    obj.fail_save = {}
    U.fails_with("save_state: custom object 1 (Counter, register_for_checkpointing): its state_dict() failed: "
      .. "(error object is a table value)", acc.save_state, acc, d .. "/c")
    obj.fail_save = "no state today"
    U.fails_with({ "save_state: custom object 1 (Counter, register_for_checkpointing): its state_dict() failed: ",
      "no state today" }, acc.save_state, acc, d .. "/c")
    obj.fail_save = nil
    acc:load_state(d .. "/c")
    assert.are.equal(1, obj.v)
    os.execute("rm -rf " .. d)
  end)
end)

describe("save_state and load_state inside one another", function()
  -- a save pre-hook that called acc:save_state(same dir) failed with "cannot create a temporary file in ck1.tmp"
  -- (2026-12-01); now every nesting of the two on one accelerator is refused with a message naming both
  it("are refused, the checkpoint and the state stay as they were", function()
    local d = tmpdir()
    local m = nn.Linear(2, 2)
    local acc = fp8.Accelerator { config = false, env = {} }
    m = acc:prepare(m)
    acc:save_state(d .. "/ck1")
    local before = read(d .. "/ck1/model.safetensors")
    local obj = { v = 1 }
    function obj:state_dict() if self.inner then self.inner() end return { v = self.v } end
    function obj:load_state_dict(sd) if self.inner then self.inner() end self.v = sd.v end
    acc:register_for_checkpointing(obj)
    acc:save_state(d .. "/ck1")
    for _, c in ipairs {
      { "save", "save_state", d .. "/ck1" }, { "save", "load_state", d .. "/ck1" },
      { "load", "save_state", d .. "/ck2" }, { "load", "load_state", d .. "/ck1" } } do
      local outer, inner, dir = c[1] .. "_state", c[2], c[3]
      local h = acc["register_" .. outer .. "_pre_hook"](acc, function() acc[inner](acc, dir) end)
      U.fails_with({ inner .. ": called while " .. outer .. " runs on this accelerator",
                     "Call it after " .. outer .. " returns" }, acc[outer], acc, d .. "/ck1")
      h:remove()
      obj.inner = function() acc[inner](acc, dir) end
      U.fails_with(inner .. ": called while " .. outer .. " runs", acc[outer], acc, d .. "/ck1")
      obj.inner = nil
    end
    assert.same({ "ck1" }, C.listdir(d))
    assert.are.equal(before, read(d .. "/ck1/model.safetensors"))
    -- not left busy: both run again
    acc:save_state(d .. "/ck1")
    acc:load_state(d .. "/ck1")
    -- another accelerator is another matter
    local acc2 = fp8.Accelerator { config = false, env = {} }
    local h = acc:register_save_state_pre_hook(function() acc2:save_state(d .. "/other") end)
    acc:save_state(d .. "/ck1")
    h:remove()
    assert.is_true(C.is_dir(d .. "/other"))
    os.execute("rm -rf " .. d)
  end)

  it("a coroutine may not yield in their pre-hooks or registered objects (the save or load would stay half-done)",
    function()
    local d = tmpdir()
    local acc = fp8.Accelerator { config = false, env = {} }
    acc:prepare(nn.Linear(2, 2))
    local obj = { v = 1 }
    function obj:state_dict() if self.y == "state_dict" then coroutine.yield() end return { v = self.v } end
    function obj:load_state_dict(sd) if self.y == "load_state_dict" then coroutine.yield() end self.v = sd.v end
    acc:register_for_checkpointing(obj)
    acc:save_state(d .. "/ck")
    local function run(f)   -- the way a scheduler of coroutines would: a Lua pcall around it allows a yield
      local co = coroutine.create(function() return pcall(f) end)
      local ok, pok, err = coroutine.resume(co)
      assert.is_true(ok)
      assert.are.equal("dead", coroutine.status(co), "the coroutine was left suspended")
      return pok, err
    end
    for _, what in ipairs { "save_state", "load_state" } do
      local h = acc["register_" .. what .. "_pre_hook"](acc, function() coroutine.yield() end)
      local ok, err = run(function() return acc[what](acc, d .. "/ck") end)
      assert.is_false(ok)
      assert.truthy(err:find(what .. ": a coroutine yielded inside it (not allowed: a " .. what .. " pre-hook yielded; "
        .. what .. " would stay half-done while the coroutine is suspended, and under several processes the others "
        .. "would wait for this one in its collectives); yield outside it", 1, true), err)
      h:remove()
      obj.y = what == "save_state" and "state_dict" or "load_state_dict"
      ok, err = run(function() return acc[what](acc, d .. "/ck") end)
      assert.is_false(ok)
      assert.truthy(err:find(what .. ": a coroutine yielded inside it (not allowed: custom object 1 (table, "
        .. "register_for_checkpointing): its " .. obj.y .. "() yielded;", 1, true), err)
      obj.y = nil
    end
    assert.same({ "ck" }, C.listdir(d))
    acc:save_state(d .. "/ck")   -- nothing left busy
    acc:load_state(d .. "/ck")
    os.execute("rm -rf " .. d)
  end)
end)
