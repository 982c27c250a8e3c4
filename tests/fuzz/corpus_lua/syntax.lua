for i = 1, 3 do
  local t = {i, "s", [[long]], 0x1p4, 1e-3}
end
return function(...) return select("#", ...) end
