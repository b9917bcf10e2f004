# fedkernels/_build_info.json beside _C: what this build was compiled with, for `fedkernels info` to
# read without importing torch (src/fedkernels/_build_facts.py). The module's build_info() reports the
# same facts from the same variables (the two definitions below go to csrc/ops.cpp alone, so a change
# recompiles one file); python_tests/experiments/test_info_without_torch.py checks they agree.
# Included at the end of CMakeLists.txt, once _C exists and FK_ARCHS is set.
include(${CMAKE_CURRENT_LIST_DIR}/build_info_json.cmake)
fk_build_info_json(_fk_build_json)
set(_fk_build_json_file "${CMAKE_CURRENT_BINARY_DIR}/fk_build_info/_build_info.json")
file(GENERATE OUTPUT "${_fk_build_json_file}" CONTENT "${_fk_build_json}")

set(_fk_cuda_compiler "")
if(FK_WITH_CUDA)
  set(_fk_cuda_compiler "${CMAKE_CUDA_COMPILER_ID} ${CMAKE_CUDA_COMPILER_VERSION}")
endif()
set_property(SOURCE "${CMAKE_CURRENT_SOURCE_DIR}/csrc/ops.cpp" APPEND PROPERTY COMPILE_DEFINITIONS
  "FK_COMPILER=\"${CMAKE_CXX_COMPILER_ID} ${CMAKE_CXX_COMPILER_VERSION}\"" "FK_CUDA_COMPILER=\"${_fk_cuda_compiler}\"")

# Copied beside the module after every build (in-place builds too: FK_INPLACE), so it describes the _C
# next to it; the wheel installs that copy.
add_custom_target(fk_build_info ALL
  COMMAND "${CMAKE_COMMAND}" -E copy_if_different "${_fk_build_json_file}" "$<TARGET_FILE_DIR:_C>/_build_info.json"
  VERBATIM)
add_dependencies(fk_build_info _C)
install(FILES "$<TARGET_FILE_DIR:_C>/_build_info.json" DESTINATION .)
