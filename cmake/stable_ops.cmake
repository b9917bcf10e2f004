# fedkernels_ops: the op families ported to the LibTorch stable ABI (torch/csrc/stable), one shared
# library beside _C that calls torch only through its C shim, so one build loads on every torch from
# the TORCH_TARGET_VERSION floor on (docs/developing.md, "The stable ABI"). Defining TORCH_TARGET_VERSION
# makes every ATen / c10 header an #error in these units, and python_tests/test_stable_abi.py fails if
# the built library imports any symbol of torch but its C shim.
#
# In: FK_CPU_SOURCES, FK_WITH_CUDA. Out: FK_STABLE_SOURCES (removed from FK_CPU_SOURCES), the target.

# 2.10: the first torch that checks an extension's shim version, and has every call these ops make.
set(FK_TORCH_TARGET_VERSION "0x020a000000000000")
# The families on the stable ABI (the rest still build into _C against ATen until they are ported).
set(FK_STABLE_FAMILIES prox topk sketch select sampled common spread)

# The namespace's library definition and the CPU level are the library's whatever families it holds.
set(FK_STABLE_SOURCES "${CMAKE_CURRENT_SOURCE_DIR}/csrc/common/library.cpp"
    "${CMAKE_CURRENT_SOURCE_DIR}/csrc/common/cpu_isa.cpp")
foreach(family IN LISTS FK_STABLE_FAMILIES)
  file(GLOB _fk_family CONFIGURE_DEPENDS "${CMAKE_CURRENT_SOURCE_DIR}/csrc/${family}/*.cpp")
  list(FILTER _fk_family EXCLUDE REGEX "_cuda\\.cpp$")
  list(APPEND FK_STABLE_SOURCES ${_fk_family})
  if(FK_WITH_CUDA)
    file(GLOB _fk_family_cuda CONFIGURE_DEPENDS "${CMAKE_CURRENT_SOURCE_DIR}/csrc/${family}/*.cu"
         "${CMAKE_CURRENT_SOURCE_DIR}/csrc/${family}/*_cuda.cpp")
    list(APPEND FK_STABLE_SOURCES ${_fk_family_cuda})
  endif()
endforeach()
list(REMOVE_DUPLICATES FK_STABLE_SOURCES)
list(REMOVE_ITEM FK_CPU_SOURCES ${FK_STABLE_SOURCES})

add_library(fedkernels_ops SHARED ${FK_STABLE_SOURCES})
set_target_properties(fedkernels_ops PROPERTIES SKIP_BUILD_RPATH ON)
target_include_directories(fedkernels_ops PRIVATE csrc ${TORCH_INCLUDE_DIRS})
# The C shim lives in libtorch_cpu (and libc10 for the header-only pieces' few exported helpers);
# nothing of torch_python: the library is independent of the Python version.
target_link_libraries(fedkernels_ops PRIVATE torch_cpu c10)
target_compile_definitions(fedkernels_ops PRIVATE TORCH_TARGET_VERSION=${FK_TORCH_TARGET_VERSION})
# -fopenmp-simd: the kernels' `#pragma omp simd` loops vectorise (no OpenMP runtime: threads come from
# torch's parallel_for through the shim).
target_compile_options(fedkernels_ops PRIVATE
  $<$<COMPILE_LANGUAGE:CXX>:${TORCH_CXX_FLAGS} -ffp-contract=off -fopenmp-simd -Wall -Wno-unused-parameter>)
if(FK_WITH_CUDA)
  # USE_CUDA: the C shim declares its CUDA functions (stream, guard) only then.
  target_compile_definitions(fedkernels_ops PRIVATE FK_WITH_CUDA=1 USE_CUDA)
  target_link_libraries(fedkernels_ops PRIVATE torch_cuda)
endif()
if(FK_SANITIZE)
  target_compile_options(fedkernels_ops PRIVATE -fsanitize=address,undefined -fno-omit-frame-pointer
                         -fno-sanitize-recover=undefined)
  target_link_options(fedkernels_ops PRIVATE -fsanitize=address,undefined)
endif()
fk_check_cxx_runtime(fedkernels_ops)
