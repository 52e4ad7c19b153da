"""Park a Jupyter kernel's user namespace off the GPU, and restore it into a new kernel.

Runs inside the user's own kernel only (the hub and the culler never read parked files):
`kernelcode` makes the source the orchestration executes in a kernel, `saver.park` and
`restorer.restore` do the work. Stands alone: stdlib, numpy, pandas (with pyarrow) and
cloudpickle; torch only when the kernel already imported it. docs/parking.md.
"""
