goto done
::done::
local a <const> = 1
local b <close> = nil
