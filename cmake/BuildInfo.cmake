# Script mode (cmake -P), run at every build by the kvserve_build_info_source target
# (base/CMakeLists.txt): writes OUTPUT from INPUT with the version and the commit of SOURCE_DIR,
# and leaves OUTPUT untouched when neither changed, so that nothing recompiles then.
#   -DINPUT=.../build_info.cc.in -DOUTPUT=.../build_info.cc -DVERSION=0.1.0
#   -DSOURCE_DIR=<the source tree> -DGIT_EXECUTABLE=<git, may be empty>
set(KVSERVE_VERSION "${VERSION}")
set(KVSERVE_COMMIT "unknown")
if(GIT_EXECUTABLE)
  execute_process(COMMAND "${GIT_EXECUTABLE}" -C "${SOURCE_DIR}" rev-parse --short=7 HEAD
                  OUTPUT_VARIABLE commit RESULT_VARIABLE failed
                  OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
  if(NOT failed AND commit)
    set(KVSERVE_COMMIT "${commit}")
    # Tracked files that differ from HEAD (untracked files do not count).
    execute_process(COMMAND "${GIT_EXECUTABLE}" -C "${SOURCE_DIR}" status --porcelain
                            --untracked-files=no
                    OUTPUT_VARIABLE changes RESULT_VARIABLE failed
                    OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
    if(NOT failed AND changes)
      string(APPEND KVSERVE_COMMIT "-dirty")
    endif()
  endif()
endif()
configure_file("${INPUT}" "${OUTPUT}" @ONLY)
