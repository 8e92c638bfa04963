# Helpers shared by every subsystem: warnings, sanitizers, one-line library and test registration.

add_library(inferbench_warnings INTERFACE)
target_compile_options(inferbench_warnings INTERFACE
  $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wshadow -Wconversion -Wpedantic -Wno-sign-conversion>
  $<$<AND:$<COMPILE_LANGUAGE:CXX>,$<BOOL:${INFERBENCH_WERROR}>>:-Werror>)

add_library(inferbench_sanitize INTERFACE)
if(INFERBENCH_SANITIZE)
  target_compile_options(inferbench_sanitize INTERFACE
    $<$<COMPILE_LANGUAGE:CXX>:-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined>)
  target_link_options(inferbench_sanitize INTERFACE -fsanitize=address,undefined)
endif()

# ib_library(NAME SOURCES a.cpp b.cpp DEPS other_lib ...): one static library per subsystem.
function(ib_library name)
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPS" ${ARGN})
  add_library(ib_${name} STATIC ${ARG_SOURCES})
  target_include_directories(ib_${name} PUBLIC ${PROJECT_SOURCE_DIR}/src)
  target_link_libraries(ib_${name} PUBLIC ${ARG_DEPS} PRIVATE inferbench_warnings)
  target_link_libraries(ib_${name} PUBLIC inferbench_sanitize)
endfunction()

# ib_interface(NAME HEADERS a.h DEPS other_lib ...): a header-only interface other layers link
# without the implementations behind it (tools/check_layering.py reads HEADERS as its files).
function(ib_interface name)
  cmake_parse_arguments(ARG "" "" "HEADERS;DEPS" ${ARGN})
  add_library(ib_${name} INTERFACE)
  target_include_directories(ib_${name} INTERFACE ${PROJECT_SOURCE_DIR}/src)
  target_link_libraries(ib_${name} INTERFACE ${ARG_DEPS})
endfunction()

# ib_test(NAME SOURCES x_test.cpp DEPS lib LABELS unit [TIMEOUT s]): a GoogleTest binary, one ctest entry.
function(ib_test name)
  if(NOT INFERBENCH_TESTS)
    return()
  endif()
  cmake_parse_arguments(ARG "" "TIMEOUT" "SOURCES;DEPS;LABELS" ${ARGN})
  add_executable(${name} ${ARG_SOURCES})
  target_link_libraries(${name} PRIVATE ${ARG_DEPS} GTest::gtest GTest::gtest_main inferbench_warnings)
  add_test(NAME ${name} COMMAND ${name})
  if(NOT ARG_LABELS)
    set(ARG_LABELS unit)
  endif()
  if(NOT ARG_TIMEOUT)
    set(ARG_TIMEOUT 300)
  endif()
  set_tests_properties(${name} PROPERTIES LABELS "${ARG_LABELS}" TIMEOUT ${ARG_TIMEOUT}
    ENVIRONMENT "INFERBENCH_SOURCE_DIR=${PROJECT_SOURCE_DIR};INFERBENCH_BINARY=${PROJECT_BINARY_DIR}/bin/inferbench")
endfunction()
