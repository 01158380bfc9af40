"""Tools on the public API: the command line, plan/simulate/scale, convert, xarray entry points, the install
helper (issue 24)."""
