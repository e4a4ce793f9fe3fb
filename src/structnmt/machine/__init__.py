"""The machine: devices and worker counts (:mod:`.device`), the CPU's matrix library (:mod:`.cpu_gemm`, chosen by :mod:`.gemm_choice`), the
memory allocator (:mod:`.allocator`), operation and FLOP counts (:mod:`.op_count`, :mod:`.flops`) and child
processes (:mod:`.subprocesses`)."""
