// What the build knows of itself: airlock's version and the git revision it was configured from.
// Defined in build_info.cpp, which CMake writes from build_info.cpp.in at configure time, so a
// new revision recompiles that one file and relinks, nothing else.
#pragma once

namespace airlock::cli {

extern const char kVersion[];   // project(VERSION) in CMakeLists.txt
extern const char kRevision[];  // `git rev-parse HEAD` of the source tree, or "unknown" outside a checkout

}  // namespace airlock::cli
