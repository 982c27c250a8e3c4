-- Found on 2026-12-06 (stop 95): this session's speed and file-handling changes read again (the exp/log plain
-- blocks, opspeed's broadcast operands in place, one-pass clamp, vectorised x^s and index_select, review11's
-- FL_ERR_SYS retry). docs/robustness.md, "This session's speed and file changes read again (stop 95)".

-- x^s for a number s off pow's shortcuts is vectorised double code (core/cpu/cpu_vpow.h); an exact power that is a tie
-- between two floats must round to even, as (float)pow((double)x, s) did and torch does. The expected values are
-- torch 2.15's: torch.tensor([float.fromhex(h) for h in H], dtype=torch.float32).pow(s) (the same bits as pow's).
describe("review12b: x^s at exact ties", function()
  local H = { 0x1.0201p+6, 0x1.0201p+8, 0x1.e08p-31, 0x1.0201p+16 }   -- 257²·4^-5, 257²·4^-4, 31²·2^-40, 257²
  local want = {
    [1.5] = { 0x1.0303p+9, 0x1.0303p+12, 0x1.d17cp-46, 0x1.0303p+24 },
    [2.5] = { 0x1.050a0ap+15, 0x1.050a0ap+20, 0x1.b4d8ap-76, 0x1.050a0ap+40 },
  }
  local function check(got, w, what)
    for i = 1, #w do
      assert.are.equal(("%a"):format(w[i]), ("%a"):format(got[i]), ("%s, element %d"):format(what, i))
    end
  end

  it("rounds each tie to even, out of place and in place, in both ISA copies' loops alike", function()
    for _, s in ipairs { 1.5, 2.5 } do
      check((fp8.tensor(H) ^ s):tolist(), want[s], "x^" .. s)
      check(fp8.tensor(H):pow(s):tolist(), want[s], "x:pow(" .. s .. ")")
      local x = fp8.tensor(H)
      x:pow_(s)   -- the result written over its operand (d == a in the loop)
      check(x:tolist(), want[s], "x:pow_(" .. s .. ")")
      -- a strided operand takes the tile path
      local t = fp8.tensor { H, H }:t()
      check((t ^ s):t():contiguous():tolist()[1], want[s], "x^" .. s .. " transposed")
    end
  end)
end)
