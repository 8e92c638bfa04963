# Sourced by the bench/gpu scripts (from the repository root): build_inferbench LOG builds the
# inferbench binary with the h200 preset into $BUILD (build/h200) with $JOBS (16) jobs, its
# output in LOG; on failure it prints LOG's tail and "BUILD FAILED" and returns 1.
build_inferbench() {
  if ! { cmake --preset h200 -DINFERBENCH_WERROR=OFF -DINFERBENCH_TESTS=OFF &&
         cmake --build "${BUILD:-build/h200}" -j "${JOBS:-16}" --target inferbench; } >"$1" 2>&1; then
    tail -40 "$1"
    echo "BUILD FAILED"
    return 1
  fi
}
