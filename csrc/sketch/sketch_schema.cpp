// Schemas of the sketch family (FedMLH label hashing and count sketches), a STABLE_TORCH_LIBRARY_FRAGMENT
// of the fedkernels library; the kernels register per device in this folder's *_cpu.cpp / *_cuda.cpp.
#include <torch/csrc/stable/library.h>

#include <cstdint>

// label_hash.out carries Tag::out where torch has it (>= 2.13), so torch.compile can functionalize it.
// The stable ABI has no getter for that tag, and the shim's def-with-tags and tag getters only
// exist from 2.12 on, above this library's 2.10 floor: they are declared weak here, so the library
// still loads on 2.10 / 2.11 (null there, and the schema is defined without the tag, as the ATen
// build did before 2.13). torch_library_set_python_module (2.13) marks a torch that has Tag::out; the
// shim passes a tag through as the value of at::Tag, whose generated enum puts `out` right before
// `out_variant` (alphabetical, as tags.yaml lists them).
extern "C" {
__attribute__((weak)) AOTITorchError torch_library_def_with_tags(TorchLibraryHandle self, const char* schema,
                                                                 const int32_t* tags, int32_t num_tags);
__attribute__((weak)) int32_t torch_tag_out_variant();
__attribute__((weak)) AOTITorchError torch_library_set_python_module(TorchLibraryHandle self, const char* pymodule,
                                                                     const char* context);
}

namespace {

constexpr const char* kLabelHashOut =
    "label_hash.out(Tensor indptr, Tensor indices, Tensor table, int num_buckets, *, Tensor(a!) out) -> Tensor(a!)";

// A fragment of its own for label_hash.out: StableLibrary does not expose its handle, and its tagged
// def() needs a 2.12 floor.
struct LabelHashOutFragment {
  TorchLibraryHandle lib = nullptr;
  LabelHashOutFragment() {
    STABLE_TORCH_ERROR_CODE_CHECK(aoti_torch_library_init_fragment("fedkernels", __FILE__, __LINE__, &lib));
    const bool has_out_tag = torch_library_def_with_tags != nullptr && torch_tag_out_variant != nullptr &&
                             torch_library_set_python_module != nullptr;
    if (has_out_tag) {
      const int32_t out_tag = torch_tag_out_variant() - 1;
      STABLE_TORCH_ERROR_CODE_CHECK(torch_library_def_with_tags(lib, kLabelHashOut, &out_tag, 1));
    } else {
      STABLE_TORCH_ERROR_CODE_CHECK(aoti_torch_library_def(lib, kLabelHashOut));
    }
  }
  ~LabelHashOutFragment() { aoti_torch_delete_library_object(lib); }
  LabelHashOutFragment(const LabelHashOutFragment&) = delete;
  LabelHashOutFragment& operator=(const LabelHashOutFragment&) = delete;
};

const LabelHashOutFragment label_hash_out_fragment;

}  // namespace

STABLE_TORCH_LIBRARY_FRAGMENT(fedkernels, m) {
  m.def("label_hash(Tensor indptr, Tensor indices, Tensor table, int num_buckets) -> Tensor");
  // out= variant (label_hash.out, above): writes every element of out (uint8 [R, N, B]).
  m.def("bucket_merge(Tensor logp, Tensor table, str reduce=\"mean\") -> Tensor");
  m.def("bucket_merge_backward(Tensor grad, Tensor table, int num_buckets) -> Tensor");
  m.def("bucket_merge_topk(Tensor logp, Tensor table, int k, str reduce=\"mean\") -> (Tensor, Tensor)");
  m.def("count_sketch(Tensor x, Tensor table, Tensor signs, int num_buckets) -> Tensor");
  m.def("count_sketch_query(Tensor sketch, Tensor table, Tensor signs, str reduce=\"median\") -> Tensor");
}
