# Cross-compiles for 64-bit Windows with clang (Debian's clang 14) against the mingw-w64 runtime,
# headers and libstdc++ of Debian's g++-mingw-w64-x86-64-posix. clang, not g++: g++ 12
# miscompiles warmslot's C++20 coroutines (see the top-level CMakeLists.txt).
#
# clang 14 does not recognize Debian's "12-posix" gcc directory, so the C++ headers and the
# runtime library directory are named here; -nostdinc keeps the build host's /usr/include out.
#
# WARMSLOT_WIN_PREFIX (cache variable or environment) is the prefix holding the dependencies
# built for Windows (deploy/windows/cross-build.sh fills it): its include/ and lib/ are searched,
# and find_package looks only there.
set(CMAKE_SYSTEM_NAME Windows)
set(CMAKE_SYSTEM_PROCESSOR x86_64)
set(WARMSLOT_WIN_TRIPLE x86_64-w64-mingw32)

if(NOT WARMSLOT_WIN_PREFIX AND DEFINED ENV{WARMSLOT_WIN_PREFIX})
  set(WARMSLOT_WIN_PREFIX "$ENV{WARMSLOT_WIN_PREFIX}")
endif()
if(NOT WARMSLOT_WIN_PREFIX)
  message(FATAL_ERROR "set WARMSLOT_WIN_PREFIX to the prefix of the Windows dependencies")
endif()
set(WARMSLOT_WIN_PREFIX "${WARMSLOT_WIN_PREFIX}" CACHE PATH "Windows dependencies prefix")
# try_compile projects see the toolchain file again, without our cache: hand the prefix over.
list(APPEND CMAKE_TRY_COMPILE_PLATFORM_VARIABLES WARMSLOT_WIN_PREFIX)

find_program(WARMSLOT_WIN_CLANG NAMES clang clang-14 REQUIRED)
find_program(WARMSLOT_WIN_CLANGXX NAMES clang++ clang++-14 REQUIRED)
set(CMAKE_C_COMPILER ${WARMSLOT_WIN_CLANG})
set(CMAKE_CXX_COMPILER ${WARMSLOT_WIN_CLANGXX})
set(CMAKE_C_COMPILER_TARGET ${WARMSLOT_WIN_TRIPLE})
set(CMAKE_CXX_COMPILER_TARGET ${WARMSLOT_WIN_TRIPLE})
find_program(CMAKE_RC_COMPILER NAMES ${WARMSLOT_WIN_TRIPLE}-windres)
find_program(CMAKE_AR NAMES ${WARMSLOT_WIN_TRIPLE}-ar REQUIRED)
find_program(CMAKE_RANLIB NAMES ${WARMSLOT_WIN_TRIPLE}-ranlib REQUIRED)
# Splits the debug information off warmslot.exe (proxy/CMakeLists.txt).
find_program(WARMSLOT_WIN_OBJCOPY NAMES ${WARMSLOT_WIN_TRIPLE}-objcopy REQUIRED)

file(GLOB WARMSLOT_WIN_GCC_DIRS LIST_DIRECTORIES true /usr/lib/gcc/${WARMSLOT_WIN_TRIPLE}/*-posix)
list(SORT WARMSLOT_WIN_GCC_DIRS COMPARE NATURAL ORDER DESCENDING)
list(GET WARMSLOT_WIN_GCC_DIRS 0 WARMSLOT_WIN_GCC_DIR)
if(NOT IS_DIRECTORY "${WARMSLOT_WIN_GCC_DIR}/include/c++")
  message(FATAL_ERROR "no mingw-w64 posix libstdc++ found: apt-get install g++-mingw-w64-x86-64-posix")
endif()
execute_process(COMMAND ${WARMSLOT_WIN_CLANG} -print-resource-dir
  OUTPUT_VARIABLE WARMSLOT_WIN_CLANG_RESOURCES OUTPUT_STRIP_TRAILING_WHITESPACE)

set(_inc_c "-nostdinc -isystem ${WARMSLOT_WIN_CLANG_RESOURCES}/include \
-isystem /usr/${WARMSLOT_WIN_TRIPLE}/include -isystem ${WARMSLOT_WIN_PREFIX}/include")
set(_cxx "${WARMSLOT_WIN_GCC_DIR}/include/c++")
# clang defines __GXX_WEAK__ for mingw where g++ does not; without this the inline
# type_info::operator== of the headers collides with the one in libstdc++.a. g++ for mingw keeps
# thread_local variables in emulated TLS (__emutls_v.*), so libstdc++.a expects that too.
# The include flags reach the link step too, where clang would warn that they are unused.
set(_inc_c "${_inc_c} -Wno-unused-command-line-argument")
set(CMAKE_C_FLAGS_INIT "${_inc_c}")
set(CMAKE_CXX_FLAGS_INIT "-D__GXX_TYPEINFO_EQUALITY_INLINE=0 -femulated-tls -nostdinc -isystem ${_cxx} \
-isystem ${_cxx}/${WARMSLOT_WIN_TRIPLE} -isystem ${_cxx}/backward ${_inc_c}")
# One self-contained exe: libstdc++, libgcc and winpthread linked statically.
set(CMAKE_EXE_LINKER_FLAGS_INIT "-fuse-ld=lld -static -pthread -L${WARMSLOT_WIN_GCC_DIR} \
-L${WARMSLOT_WIN_PREFIX}/lib")

set(CMAKE_FIND_ROOT_PATH ${WARMSLOT_WIN_PREFIX} /usr/${WARMSLOT_WIN_TRIPLE})
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE ONLY)
