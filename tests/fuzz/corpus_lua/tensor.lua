local x = fp8.ones{2, 3}
print(x:sum():item())
