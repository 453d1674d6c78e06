"""CUDA plumbing: nvcc builds cached by content (compiler), the ctypes wrappers the tests call (kernels),
the TODO regions of student files (regions), the shared headers (include/) and the sanitizer driver (sanitize:
it runs the scenario each task's file exports)."""
