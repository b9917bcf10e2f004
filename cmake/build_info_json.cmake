# fk_build_info_json(<out>): the text of fedkernels/_build_info.json from the build's variables
# (FK_WITH_CUDA, FK_ARCHS, FK_TORCH_VERSION, the compilers). A function of its own file so a test can
# render it with `cmake -P` for any configuration, a CUDA one included, without building.
function(_fk_json_string out value)
  string(REPLACE "\\" "\\\\" value "${value}")
  string(REPLACE "\"" "\\\"" value "${value}")
  set(${out} "\"${value}\"" PARENT_SCOPE)
endfunction()

function(fk_build_info_json out)
  if(FK_WITH_CUDA)
    set(cuda true)
    set(archs "${FK_ARCHS}")
    set(cuda_compiler "${CMAKE_CUDA_COMPILER_ID} ${CMAKE_CUDA_COMPILER_VERSION}")
  else()
    set(cuda false)
    set(archs "")
    set(cuda_compiler "")
  endif()
  # The levels csrc/common/cpu_isa.h builds: all three on x86-64 with GCC or Clang (FK_X86_LEVELS).
  if(CMAKE_SYSTEM_PROCESSOR MATCHES "^(x86_64|AMD64|amd64)$" AND CMAKE_CXX_COMPILER_ID MATCHES "^(GNU|Clang|AppleClang|IntelLLVM)$")
    set(levels "[\"generic\", \"avx2\", \"avx512\"]")
  else()
    set(levels "[\"generic\"]")
  endif()
  _fk_json_string(version "${PROJECT_VERSION}")
  _fk_json_string(torch "${FK_TORCH_VERSION}")
  _fk_json_string(archs "${archs}")
  _fk_json_string(compiler "${CMAKE_CXX_COMPILER_ID} ${CMAKE_CXX_COMPILER_VERSION}")
  _fk_json_string(cuda_compiler "${cuda_compiler}")
  set(${out} "{
  \"module\": \"$<TARGET_FILE_NAME:_C>\",
  \"version\": ${version},
  \"torch_version\": ${torch},
  \"cuda_kernels\": ${cuda},
  \"cuda_archs\": ${archs},
  \"cpu_levels\": ${levels},
  \"compiler\": ${compiler},
  \"cuda_compiler\": ${cuda_compiler}
}
" PARENT_SCOPE)
endfunction()
