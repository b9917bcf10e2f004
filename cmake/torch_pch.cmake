# Precompiled torch headers: a translation unit that includes torch spends most of its compile
# parsing ATen and torch/library.h, so a target parses them once, into a GCC/Clang precompiled header
# that each such unit loads instead. C++ only (nvcc cannot read a host compiler's PCH). The PCH is
# compiled with the target's own flags (sanitizers, defines), so a unit sees exactly the declarations
# and macros it would get by including these headers first, which every unit that uses it does.
# CMAKE_DISABLE_PRECOMPILE_HEADERS=ON turns it off (each unit then parses its own includes).

# What the PCH holds: the torch headers of the CPU sources (tools/ci/cross_compile_aarch64.py's
# PCH_HEADERS, the same list for its compile-only check).
set(FK_TORCH_PCH_HEADERS "ATen/core/Tensor.h" "ATen/Parallel.h" "torch/library.h")

# out = TRUE when `src` includes an ATen/ or torch/ header, itself or through headers under csrc/
# (cross_compile_aarch64.py's uses_torch). Only those units load the PCH: loading it costs a unit
# that needs no torch header more than its own compile. Decided at configure time: a unit whose
# includes change is re-decided at the next configure (until then it compiles, just not faster).
function(fk_uses_torch src out)
  set(todo "${src}")
  set(seen "")
  while(todo)
    list(POP_FRONT todo file)
    if(file IN_LIST seen)
      continue()
    endif()
    list(APPEND seen "${file}")
    file(STRINGS "${file}" includes REGEX "#[ \t]*include[ \t]*[<\"][^>\"]+[>\"]")
    foreach(line IN LISTS includes)
      string(REGEX MATCH "#[ \t]*include[ \t]*[<\"]([^>\"]+)[>\"]" _ "${line}")
      set(name "${CMAKE_MATCH_1}")
      if(name MATCHES "^(ATen|torch)/")
        set(${out} TRUE PARENT_SCOPE)
        return()
      endif()
      if(EXISTS "${CMAKE_CURRENT_SOURCE_DIR}/csrc/${name}")
        list(APPEND todo "${CMAKE_CURRENT_SOURCE_DIR}/csrc/${name}")
      endif()
    endforeach()
  endwhile()
  set(${out} FALSE PARENT_SCOPE)
endfunction()

# The torch PCH for `target`'s C++ sources (ARGN) that use torch; the others skip it.
function(fk_precompile_torch_headers target)
  foreach(header IN LISTS FK_TORCH_PCH_HEADERS)
    target_precompile_headers(${target} PRIVATE "$<$<COMPILE_LANGUAGE:CXX>:<${header}$<ANGLE-R>>")
  endforeach()
  foreach(src IN LISTS ARGN)
    if(src MATCHES "\\.cpp$")
      fk_uses_torch("${src}" uses)
      if(NOT uses)
        set_source_files_properties("${src}" PROPERTIES SKIP_PRECOMPILE_HEADERS ON)
      endif()
    endif()
  endforeach()
endfunction()
