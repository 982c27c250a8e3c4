-- synthetic_fmnist.lua — a small synthetic Fashion-MNIST for specs: class c lights up rows 2c+4..2c+7
-- (bright) over a noisy background, so a one-epoch MLP must separate it almost perfectly.
-- make(dir, split, n, seed) writes DIR/SPLIT-images-idx3-ubyte and DIR/SPLIT-labels-idx1-ubyte
-- (uncompressed IDX) with n images; seed picks the noise.
return function(dir, split, n, seed)
  local img, lab = {}, {}
  local state = seed
  for i = 0, n - 1 do
    local c = i % 10
    local px = {}
    for r = 0, 27 do
      for _ = 0, 27 do
        state = (state * 1103515245 + 12345) % 2147483648
        local noise = (state >> 16) % 60
        px[#px + 1] = (r >= 2 * c + 4 and r < 2 * c + 8) and 200 + noise // 2 or noise
      end
    end
    img[#img + 1] = string.char(table.unpack(px, 1, 392)) .. string.char(table.unpack(px, 393, 784))
    lab[#lab + 1] = string.char(c)
  end
  local f = assert(io.open(dir .. "/" .. split .. "-images-idx3-ubyte", "wb"))
  f:write(string.pack(">I4I4I4I4", 0x803, n, 28, 28), table.concat(img))
  f:close()
  f = assert(io.open(dir .. "/" .. split .. "-labels-idx1-ubyte", "wb"))
  f:write(string.pack(">I4I4", 0x801, n), table.concat(lab))
  f:close()
end
