"""CUDA plumbing: nvcc builds cached by content (compiler), the ctypes wrappers the tests call (kernels),
the TODO regions of student files (regions), the shared header (include/) and the sanitizer driver."""
