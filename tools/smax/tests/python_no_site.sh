#!/bin/sh
# A Python interpreter that finds no third-party module (-S: no site
# directories, -I: no PYTHONPATH / user site): `smax bench --peers` with it
# must report every Python peer missing (tests/bench_missing.cmake).
exec python3 -S -I "$@"
