-- tests/data/sweep116_torch.lua: written by scripts/gen_sweep116.py with torch 2.15.0+cu132
-- { x, dim (torch's, 0-based), index, shape = , values = , grad = } or { x, dim, index, raises = true }
return {
  { x = 5.0, dim = 0, index = 0, index_0d = true, shape = {  }, values = { 5.0 }, grad = { 3.0 } },
  { x = 5.0, dim = -1, index = 0, index_0d = true, shape = {  }, values = { 5.0 }, grad = { 3.0 } },
  { x = 5.0, dim = 0, index = { 0 }, index_0d = false, shape = {  }, values = { 5.0 }, grad = { 3.0 } },
  { x = 5.0, dim = 0, index = { 0, 0 }, index_0d = false, raises = true },
  { x = 5.0, dim = 0, index = {  }, index_0d = false, raises = true },
  { x = 5.0, dim = 0, index = 1, index_0d = true, raises = true },
  { x = 5.0, dim = 0, index = -1, index_0d = true, raises = true },
  { x = 5.0, dim = 1, index = 0, index_0d = true, raises = true },
  { x = 5.0, dim = -2, index = 0, index_0d = true, raises = true },
  { x = 5.0, dim = 0, index = { { 0 } }, index_0d = false, raises = true },
  { x = { 1.0, 2.0, 3.0 }, dim = 0, index = 2, index_0d = true, shape = { 1 }, values = { 3.0 }, grad = { 0, 0, 3.0 } },
  { x = { 1.0, 2.0, 3.0 }, dim = -1, index = 0, index_0d = true, shape = { 1 }, values = { 1.0 }, grad = { 3.0, 0, 0 } },
  { x = { 1.0, 2.0, 3.0 }, dim = 0, index = 3, index_0d = true, raises = true },
  { x = { 1.0, 2.0, 3.0 }, dim = 0, index = { 2, 0, 2 }, index_0d = false, shape = { 3 }, values = { 3.0, 1.0, 3.0 }, grad = { 3.0, 0, 6.0 } },
  { x = { { 0, 1.0, 2.0 }, { 3.0, 4.0, 5.0 } }, dim = 1, index = 1, index_0d = true, shape = { 2, 1 }, values = { 1.0, 4.0 }, grad = { 0, 3.0, 0, 0, 3.0, 0 } },
  { x = { { 0, 1.0, 2.0 }, { 3.0, 4.0, 5.0 } }, dim = 0, index = 1, index_0d = true, shape = { 1, 3 }, values = { 3.0, 4.0, 5.0 }, grad = { 0, 0, 0, 3.0, 3.0, 3.0 } },
  { x = { { 0, 1.0, 2.0 }, { 3.0, 4.0, 5.0 } }, dim = -1, index = 2, index_0d = true, shape = { 2, 1 }, values = { 2.0, 5.0 }, grad = { 0, 0, 3.0, 0, 0, 3.0 } },
}
