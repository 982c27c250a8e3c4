-- bench_gpt_batch.lua — the GPT benchmarks' fixed batch: token (b·31 + t·17) mod V at row b, position t, the
-- inputs positions 1..T and the targets 2..T+1. scripts/bench_train.lua, bench_step_ab.lua and bench_profcost.lua
-- load it with dofile (scripts/bench_train_torch.py builds the same tokens for PyTorch).
-- return dofile(dir .. "/bench_gpt_batch.lua")(B, T, V) -> x, y (int64 tensors [B, T] on the CPU)
local fp8 = require "fp8"
return function(B, T, V)
  local function cols(a, z)
    local r = {}
    for b = 1, B do
      local row = {}
      for t = a, z do row[#row + 1] = (b * 31 + t * 17) % V end
      r[b] = row
    end
    return fp8.tensor(r)
  end
  return cols(1, T), cols(2, T + 1)
end
