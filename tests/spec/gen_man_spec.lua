-- gen_man_spec.lua — scripts/gen_man.lua, the man page made from docs/cli.md and docs/config.md: inline code and
-- bold that cross a line break of the Markdown source stay one bold span (docs/cli.md wraps its lines at 120
-- characters, inside code spans too), in paragraphs and in list items.
local bin = FP8LAB_BIN or "build/fp8lab"
local U = dofile("tests/spec/helpers/util.lua")
local q, sh = U.q, U.sh

local function man_of(md)
  local dir = U.tmpdir()
  U.write(dir .. "/t.md", md)
  local out, ok = sh(("%s scripts/gen_man.lua %s"):format(q(bin), q(dir .. "/t.md")))
  os.execute("rm -rf " .. q(dir))
  assert.is_true(ok, out)
  return out
end

describe("gen_man.lua", function()
  it("keeps a code span that crosses a line break in one bold span", function()
    local man = man_of("# T\nexits 1 (Ctrl-C: `fp8lab\nconfig: interrupted`, as a script's); `fp8lab launch` exits\n")
    assert.truthy(man:find("\\fBfp8lab config: interrupted\\fR", 1, true), man)
    assert.truthy(man:find("\\fBfp8lab launch\\fR exits", 1, true), man)
  end)

  it("does the same in a list item's continuation and for bold", function()
    local man = man_of("# T\n- **One\n  process**: runs `fp8lab --\n  script.lua`\n\nnext\n")
    assert.truthy(man:find(".IP \\(bu 2\n\\fBOne process\\fR: runs \\fBfp8lab \\-\\- script.lua\\fR\n", 1, true),
      man)
    assert.truthy(man:find("\n.PP\nnext\n", 1, true), man)
  end)

  it("makes docs/cli.md's every code span a pair of font changes", function()
    local man = man_of(U.must_read("docs/cli.md"))
    assert.is_nil(man:find("`", 1, true), "a backtick left unpaired in the man page")
  end)
end)
