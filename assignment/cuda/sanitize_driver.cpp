// A small host program that loads a task's device module (the student's cubin) into the kit's host library
// for that file and runs the task's sanitizer scenario, so compute-sanitizer can check its launches without
// starting Python and PyTorch under the sanitizer (minutes -> seconds).
//
//   sanitize_driver <host.so> <module.cubin> <symbol> [variant]
//
// <symbol> is the scenario the task's file exports from its host code (its TaskCode's Sanitize names it):
//     KIT_API int <symbol>(void* module, int variant)
// which launches the task's kernels on shapes that reach every path of the kit's host code, with buffers
// allocated to exactly the size a call may touch, and returns how many launches failed
// (assignment/cuda/include/kit_sanitize.cuh). variant: the task's own choice, 0 when not given.
// Exit code: 0 when every launch succeeded, 1 when one failed, 2 when the driver could not run the scenario.
#include <dlfcn.h>

#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <vector>

// The host library's exports (kit.cuh): all CUDA calls happen inside it.
typedef int (*load_fn)(const void* image, void** module);
typedef const char* (*error_string_fn)(int code);
typedef int (*scenario_fn)(void* module, int variant);

int main(int argc, char** argv) {
  if (argc < 4 || argc > 5) {
    std::fprintf(stderr, "usage: %s <host.so> <module.cubin> <symbol> [variant]\n", argv[0]);
    return 2;
  }
  const char *host = argv[1], *cubin = argv[2], *symbol = argv[3];
  int variant = 0;
  if (argc == 5) {
    char* end = nullptr;
    errno = 0;
    const long value = std::strtol(argv[4], &end, 10);
    if (errno != 0 || end == argv[4] || *end != '\0' || value < INT_MIN || value > INT_MAX)
      return std::fprintf(stderr, "variant %s is not an int\n", argv[4]), 2;
    variant = (int)value;
  }
  void* lib = dlopen(host, RTLD_NOW | RTLD_LOCAL);
  if (!lib) return std::fprintf(stderr, "dlopen: %s\n", dlerror()), 2;
  auto load = (load_fn)dlsym(lib, "kit_module_load");
  auto error_string = (error_string_fn)dlsym(lib, "kit_error_string");
  auto scenario = (scenario_fn)dlsym(lib, symbol);
  if (!load || !error_string || !scenario)
    return std::fprintf(stderr, "%s does not export %s\n", host,
                        !load ? "kit_module_load" : !error_string ? "kit_error_string" : symbol),
           2;
  std::ifstream file(cubin, std::ios::binary);
  std::vector<char> image((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  if (image.empty()) return std::fprintf(stderr, "cannot read %s\n", cubin), 2;
  void* module = nullptr;
  const int loaded = load(image.data(), &module);
  if (loaded != 0) return std::fprintf(stderr, "loading %s: %s\n", cubin, error_string(loaded)), 2;
  const int failures = scenario(module, variant);
  std::printf("%s(%d): %d launches failed\n", symbol, variant, failures);
  return failures ? 1 : 0;
}
