# Registers a GoogleTest binary's tests with ctest one group per test suite (a suite of more
# than FSDPP_GTEST_GROUP_SIZE tests is split with GoogleTest's sharding), instead of one
# process per test: every process start pays LibTorch's static initialisation, a large
# share of the test run over hundreds of tests on 2 cores (figures:
# docs/notes/2026-11-28-comments-moved.md).
# The groups are listed after each build (write_gtest_groups.cmake), as gtest_discover_tests
# does; a group whose every test skipped is reported as skipped (suites/run_gtest_group.sh).
set(FSDPP_GTEST_GROUP_SIZE 12 CACHE STRING "Most tests in one ctest group of a GoogleTest binary")

# fsdpp_add_gtest_groups(TARGET [EXCLUDE regex-of-suites] [TIMEOUT seconds])
function(fsdpp_add_gtest_groups target)
  cmake_parse_arguments(ARG "" "EXCLUDE;TIMEOUT" "" ${ARGN})
  if(NOT ARG_TIMEOUT)
    set(ARG_TIMEOUT 900)
  endif()
  set(groups_file "${CMAKE_CURRENT_BINARY_DIR}/${target}_groups.cmake")
  set(stub_file "${CMAKE_CURRENT_BINARY_DIR}/${target}_groups_include.cmake")
  add_custom_command(TARGET ${target} POST_BUILD
    COMMAND ${CMAKE_COMMAND} -DEXE=$<TARGET_FILE:${target}> -DOUT=${groups_file}
            -DRUNNER=${PROJECT_SOURCE_DIR}/suites/run_gtest_group.sh -DEXCLUDE=${ARG_EXCLUDE}
            -DGROUP_SIZE=${FSDPP_GTEST_GROUP_SIZE} -DTIMEOUT=${ARG_TIMEOUT}
            -P ${PROJECT_SOURCE_DIR}/suites/cmake/write_gtest_groups.cmake
    BYPRODUCTS ${groups_file} VERBATIM)
  file(WRITE ${stub_file}
       "if(EXISTS \"${groups_file}\")\n  include(\"${groups_file}\")\nelse()\n"
       "  add_test(${target}_NOT_BUILT ${target}_NOT_BUILT)\nendif()\n")
  set_property(DIRECTORY APPEND PROPERTY TEST_INCLUDE_FILES ${stub_file})
endfunction()
