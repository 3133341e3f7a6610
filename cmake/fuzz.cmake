# The libFuzzer harnesses of tests/fuzz (README "Fuzzing"), one executable each, each a ctest
# entry (label "fuzz") that runs it for LA_FUZZ_SECONDS from its seeds: tests/fuzz/seeds/<name>
# plus the fixtures that are real inputs of its parser. New inputs go to a scratch corpus in
# the build tree, never into the sources. A crash fails the test and leaves crash-* there.
enable_testing()
set(LA_FUZZ_SECONDS 60 CACHE STRING "seconds each harness runs under ctest")
set(S ${CMAKE_SOURCE_DIR})
set(LA_FUZZ_SEEDS_api_request "${S}/tests/fuzz/seeds/api_request")
set(LA_FUZZ_SEEDS_json_strict "${S}/tests/fuzz/seeds/json")
set(LA_FUZZ_SEEDS_tokenizer "${S}/tests/fuzz/seeds/tokenizer")
set(LA_FUZZ_SEEDS_tokenizer_json "${S}/models/rag-tiny/tokenizer.json;${S}/tests/fixtures/tokenizer/dec-bytefallback-metaspace/tokenizer.json")
set(LA_FUZZ_SEEDS_config "${S}/tests/fixtures/configs;${S}/tests/fuzz/seeds/config")
set(LA_FUZZ_SEEDS_safetensors "${S}/tests/fuzz/seeds/safetensors")
set(LA_FUZZ_SEEDS_chat_template "${S}/tests/fixtures/chat_templates/llama3.1.jinja;${S}/tests/fixtures/chat_templates/qwen3.jinja;${S}/tests/fixtures/chat_templates/mistral-v0.3.jinja;${S}/tests/fixtures/chat_templates/tulu3.jinja")
set(LA_FUZZ_SEEDS_kv_record "")
file(GLOB LA_FUZZ_SOURCES CONFIGURE_DEPENDS ${S}/tests/fuzz/fuzz_*.c)
foreach(src ${LA_FUZZ_SOURCES})
  get_filename_component(target ${src} NAME_WE)
  string(REGEX REPLACE "^fuzz_" "" name ${target})
  add_executable(${target} ${src})
  target_link_libraries(${target} PRIVATE lazyattn_core)
  target_include_directories(${target} PRIVATE ${S}/tests/fuzz)
  target_compile_definitions(${target} PRIVATE LA_SOURCE_DIR="${S}")
  target_link_options(${target} PRIVATE -fsanitize=fuzzer)
  # seeds: directories as corpora, single files copied into a seed directory of their own
  set(seed_dir ${CMAKE_BINARY_DIR}/fuzz-seeds/${name})
  file(MAKE_DIRECTORY ${seed_dir})
  set(dirs "")
  set(k 0)
  foreach(seed ${LA_FUZZ_SEEDS_${name}})
    if(IS_DIRECTORY ${seed})
      list(APPEND dirs ${seed})
    else() # a directory of its own each: two seeds may share a file name
      math(EXPR k "${k} + 1")
      file(COPY ${seed} DESTINATION ${seed_dir}/${k})
      list(APPEND dirs ${seed_dir}/${k})
    endif()
  endforeach()
  list(REMOVE_DUPLICATES dirs)
  set(corpus ${CMAKE_BINARY_DIR}/fuzz-corpus/${name})
  add_test(NAME fuzz/${name}
           COMMAND ${CMAKE_COMMAND} -E env ASAN_OPTIONS=detect_leaks=1
                   sh -c "mkdir -p '${corpus}' && exec \"$0\" \"$@\"" $<TARGET_FILE:${target}>
                   -max_total_time=${LA_FUZZ_SECONDS} -max_len=65536 -rss_limit_mb=2048 -timeout=20
                   -print_final_stats=1 ${corpus} ${dirs}
           WORKING_DIRECTORY ${CMAKE_BINARY_DIR})
  set_tests_properties(fuzz/${name} PROPERTIES LABELS "fuzz" TIMEOUT 900)
endforeach()
