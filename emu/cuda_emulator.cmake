# fedkernels._C_emu: every CUDA source of the project, compiled as host C++ and executed by the
# CUDA emulator in emu/runtime (see docs/emulator.md). The only source change is emu/rewrite.py's
# mechanical rewrite of each `kernel<<<cfg>>>(args)` launch; the stand-in headers in
# emu/runtime/include replace the CUDA runtime's, and the prelude compiles the FK_HOST_DEVICE headers'
# device branches. A separate module from _C: otherwise the device-branch and host-branch copies of
# the inline FK_HOST_DEVICE functions would be merged at link time.
#
# FK_CUDA_EMU_CHECKS: none | asan (AddressSanitizer: out-of-bounds global and __shared__ accesses)
#                     | race (__shared__ races and uninitialised reads, through compiler instrumentation)
set(FK_CUDA_EMU_CHECKS "none" CACHE STRING "Checks compiled into the emulated module: none, asan, race")
set_property(CACHE FK_CUDA_EMU_CHECKS PROPERTY STRINGS none asan race)

# The kernels (.cu) and their ATen launchers (_cuda.cpp, which hold no launch: the rewrite leaves them as they are)
file(GLOB FK_EMU_KERNEL_SOURCES CONFIGURE_DEPENDS csrc/*/*.cu csrc/*/*_cuda.cpp emu/selftest/*.cu)
file(GLOB FK_EMU_KERNEL_HEADERS CONFIGURE_DEPENDS csrc/*/*.cuh)
set(FK_EMU_GEN "${CMAKE_CURRENT_BINARY_DIR}/emu_gen")
set(FK_EMU_REWRITE "${CMAKE_CURRENT_SOURCE_DIR}/emu/rewrite.py")

set(FK_EMU_GENERATED "")
set(FK_EMU_GENERATED_HEADERS "")
foreach(src IN LISTS FK_EMU_KERNEL_HEADERS FK_EMU_KERNEL_SOURCES)
  # gen/ mirrors csrc/ (the .cu files include their .cuh by csrc-relative paths); the self-test under selftest/
  if(src MATCHES "/emu/selftest/")
    file(RELATIVE_PATH rel "${CMAKE_CURRENT_SOURCE_DIR}/emu" "${src}")
  else()
    file(RELATIVE_PATH rel "${CMAKE_CURRENT_SOURCE_DIR}/csrc" "${src}")
  endif()
  if(src MATCHES "\\.cuh$")
    set(out "${FK_EMU_GEN}/${rel}")        # included by the rewritten .cu files (gen/ is searched first)
  else()
    set(out "${FK_EMU_GEN}/${rel}.cpp")
  endif()
  add_custom_command(OUTPUT "${out}"
    COMMAND "${Python_EXECUTABLE}" "${FK_EMU_REWRITE}" "${src}" "${out}"
    DEPENDS "${src}" "${FK_EMU_REWRITE}" VERBATIM)
  if(src MATCHES "\\.cuh$")
    list(APPEND FK_EMU_GENERATED_HEADERS "${out}")
  else()
    list(APPEND FK_EMU_GENERATED "${out}")
  endif()
endforeach()
add_custom_target(fk_emu_headers DEPENDS ${FK_EMU_GENERATED_HEADERS})

set(FK_EMU_RUNTIME emu/runtime/runtime.cpp emu/runtime/control.cpp emu/runtime/shared_memory.cpp emu/runtime/module.cpp)
if(FK_CUDA_EMU_CHECKS STREQUAL "race")
  list(APPEND FK_EMU_RUNTIME emu/runtime/race_hooks.cpp)
endif()

Python_add_library(_C_emu MODULE WITH_SOABI ${FK_EMU_GENERATED} ${FK_EMU_RUNTIME})
add_dependencies(_C_emu fk_emu_headers)
fk_check_cxx_runtime(_C_emu)
# Stand-ins and rewritten headers first, so they win over torch's own ATen/cuda and c10/cuda headers.
target_include_directories(_C_emu BEFORE PRIVATE "${FK_EMU_GEN}" emu/runtime/include)
# csrc for the kernels' own headers; the repo root for the runtime's ("emu/runtime/runtime.h")
target_include_directories(_C_emu PRIVATE csrc "${CMAKE_CURRENT_SOURCE_DIR}" ${TORCH_INCLUDE_DIRS})
target_link_libraries(_C_emu PRIVATE ${TORCH_LIBRARIES})
target_compile_definitions(_C_emu PRIVATE TORCH_ASSERT_ONLY_METHOD_OPERATORS TORCH_EXTENSION_NAME=_C_emu FK_CUDA_EMU=1
                           FK_EMU_CHECKS="${FK_CUDA_EMU_CHECKS}")
# Same rounding rules as the real builds (no contraction into FMA), hidden symbols so nothing of
# this module can interpose on _C's.
target_compile_options(_C_emu PRIVATE ${TORCH_CXX_FLAGS} -ffp-contract=off -fvisibility=hidden
                       -fvisibility-inlines-hidden -Wall -Wno-unused-parameter -Wno-unused-variable
                       -Wno-unknown-pragmas -Wno-sign-compare)
# The prelude is every generated unit's first include, parsed once into a precompiled header (it
# holds the torch headers); the runtime's own sources do not include it.
target_precompile_headers(_C_emu PRIVATE "${CMAKE_CURRENT_SOURCE_DIR}/emu/runtime/prelude.h")
set_source_files_properties(${FK_EMU_RUNTIME} PROPERTIES SKIP_PRECOMPILE_HEADERS ON)

if(FK_CUDA_EMU_CHECKS STREQUAL "asan")
  # -O1, as AddressSanitizer's documentation advises: it halves the instrumented units' compile time
  # against Release's -O3, and the checks are the same.
  target_compile_options(_C_emu PRIVATE -O1 -fsanitize=address -fsanitize-sections=fk_emu_shared -fno-omit-frame-pointer)
  target_link_options(_C_emu PRIVATE -fsanitize=address)
elseif(FK_CUDA_EMU_CHECKS STREQUAL "race")
  # Instrument the generated units only: every load/store calls a __tsan_* hook of race_hooks.cpp (no
  # TSan runtime is linked), which records __shared__ accesses between barriers. Set on the target so
  # the precompiled prelude is built with it too; the runtime's sources turn it off again.
  target_compile_options(_C_emu PRIVATE -fsanitize=thread)
  set_property(SOURCE ${FK_EMU_RUNTIME} APPEND PROPERTY COMPILE_OPTIONS -fno-sanitize=thread)
elseif(NOT FK_CUDA_EMU_CHECKS STREQUAL "none")
  message(FATAL_ERROR "FK_CUDA_EMU_CHECKS must be none, asan or race, got '${FK_CUDA_EMU_CHECKS}'")
endif()
