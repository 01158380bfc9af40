"""ckptio benchmarks (issue #7): ``mpirun -n N python -m benchmarks.run`` -- see ``benchmarks/README.md``."""
