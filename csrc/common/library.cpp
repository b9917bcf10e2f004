// The one library definition of the `fedkernels` op namespace: it claims the name, so a second library
// defining it (another copy of fedkernels, say) fails loudly at load. The schemas themselves are
// declared by each family beside its kernels, as fragments: csrc/<family>/<family>_schema.cpp.
#include <torch/csrc/stable/library.h>

STABLE_TORCH_LIBRARY(fedkernels, m) {}
