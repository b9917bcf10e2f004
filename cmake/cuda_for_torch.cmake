# What a CUDA build of torch needs from CMake on machines with a minimal CUDA toolkit (each step
# below says which piece such a toolkit lacks or where torch's CMake expects something else).
enable_language(CUDA)
set(CMAKE_CUDA_STANDARD 20)
set(CMAKE_CUDA_STANDARD_REQUIRED ON)
# torch takes architectures from TORCH_CUDA_ARCH_LIST and ignores CMAKE_CUDA_ARCHITECTURES.
set(CMAKE_CUDA_ARCHITECTURES OFF)
if(NOT DEFINED ENV{TORCH_CUDA_ARCH_LIST})
  set(ENV{TORCH_CUDA_ARCH_LIST} "8.0;9.0")
endif()
find_package(CUDAToolkit REQUIRED)
# /usr/local/bin/nvcc may be a wrapper: torch's FindCUDA must get the real toolkit root.
get_filename_component(CUDA_TOOLKIT_ROOT_DIR "${CUDAToolkit_BIN_DIR}" DIRECTORY)
set(ENV{CUDA_PATH} "${CUDA_TOOLKIT_ROOT_DIR}")
# cuBLAS/cuSPARSE/cuSOLVER headers and libnvrtc come from the nvidia wheels next to torch.
execute_process(
  COMMAND "${Python_EXECUTABLE}" -c "import nvidia.cu13, os; print(os.path.dirname(nvidia.cu13.__file__) if nvidia.cu13.__file__ else list(nvidia.cu13.__path__)[0])"
  OUTPUT_VARIABLE FK_NV_WHEEL_ROOT OUTPUT_STRIP_TRAILING_WHITESPACE RESULT_VARIABLE _fk_nv_rc ERROR_QUIET)
if(_fk_nv_rc EQUAL 0 AND EXISTS "${FK_NV_WHEEL_ROOT}/include")
  include_directories(SYSTEM "${FK_NV_WHEEL_ROOT}/include")
  find_library(CUDA_nvrtc_LIBRARY NAMES nvrtc libnvrtc.so.13 HINTS "${FK_NV_WHEEL_ROOT}/lib" "${CUDAToolkit_LIBRARY_DIR}")
endif()
# --fmad=false: nvcc would otherwise contract a * b + c into one FMA, rounding differently from the
# CPU kernels that share the same per-item math (the tests pin CPU == reference bit for bit; the
# GPU must follow the same rounding, not just the same order).
set(CMAKE_CUDA_FLAGS "${CMAKE_CUDA_FLAGS} --expt-relaxed-constexpr --fmad=false -Xcompiler=-fPIC")
