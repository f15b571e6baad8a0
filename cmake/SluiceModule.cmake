# One OBJECT library per source folder; libsluice (shared and static) is
# made of all of them. A module may include only the public headers and the
# internal headers of the modules it names in DEPS, so layering is enforced
# by the include path.
define_property(GLOBAL PROPERTY SLUICE_MODULES BRIEF_DOCS "module targets" FULL_DOCS "module targets")
define_property(GLOBAL PROPERTY SLUICE_LINK_LIBS BRIEF_DOCS "libs" FULL_DOCS "external libraries")

function(sluice_module name)
  cmake_parse_arguments(M "" "" "SOURCES;DEPS;LIBS" ${ARGN})
  set(target sluice_${name})
  add_library(${target} OBJECT ${M_SOURCES})
  target_include_directories(${target} PUBLIC
    $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/include>
    $<BUILD_INTERFACE:${CMAKE_CURRENT_SOURCE_DIR}>)
  target_compile_definitions(${target} PRIVATE SLUICE_BUILDING)
  foreach(dep ${M_DEPS})
    target_link_libraries(${target} PUBLIC sluice_${dep})
  endforeach()
  if(M_LIBS)
    target_link_libraries(${target} PUBLIC ${M_LIBS})
    set_property(GLOBAL APPEND PROPERTY SLUICE_LINK_LIBS ${M_LIBS})
  endif()
  set_property(GLOBAL APPEND PROPERTY SLUICE_MODULES ${target})
endfunction()

function(sluice_link_library)
  get_property(modules GLOBAL PROPERTY SLUICE_MODULES)
  get_property(libs GLOBAL PROPERTY SLUICE_LINK_LIBS)
  list(REMOVE_DUPLICATES libs)
  set(objects "")
  foreach(m ${modules})
    list(APPEND objects $<TARGET_OBJECTS:${m}>)
  endforeach()
  add_library(sluice_shared SHARED ${objects})
  add_library(sluice_static STATIC ${objects})
  foreach(t sluice_shared sluice_static)
    set_target_properties(${t} PROPERTIES OUTPUT_NAME sluice)
    target_include_directories(${t} INTERFACE
      $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/include>
      $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)
  endforeach()
  # Users of the shared library need none of its dependencies on their link
  # line; users of the static one need all of them.
  target_link_libraries(sluice_shared PRIVATE Threads::Threads m ${libs})
  target_link_libraries(sluice_static PUBLIC Threads::Threads m ${libs})
  set_target_properties(sluice_shared PROPERTIES VERSION ${PROJECT_VERSION}
    SOVERSION ${PROJECT_VERSION_MAJOR})
  add_library(sluice::sluice ALIAS sluice_shared)
  add_library(sluice::sluice_static ALIAS sluice_static)
  set(SLUICE_PC_LIBS "" PARENT_SCOPE)
endfunction()

# Tests and benchmarks may use a module's internal headers (they test them)
# and link the static library, where internal symbols are visible.
function(sluice_internal_exe target)
  get_property(modules GLOBAL PROPERTY SLUICE_MODULES)
  target_link_libraries(${target} PRIVATE sluice_static)
  foreach(m ${modules})
    target_include_directories(${target} PRIVATE
      $<TARGET_PROPERTY:${m},INTERFACE_INCLUDE_DIRECTORIES>)
  endforeach()
endfunction()

function(sluice_install)
  include(CMakePackageConfigHelpers)
  install(TARGETS sluice_shared sluice_static sluice EXPORT sluiceTargets
    LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
    ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
    RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
  install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/sluice
    DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
  install(EXPORT sluiceTargets NAMESPACE sluice::
    DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/sluice)
  configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/sluiceConfig.cmake.in
    ${PROJECT_BINARY_DIR}/sluiceConfig.cmake
    INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/sluice)
  write_basic_package_version_file(${PROJECT_BINARY_DIR}/sluiceConfigVersion.cmake
    COMPATIBILITY SameMinorVersion)
  install(FILES ${PROJECT_BINARY_DIR}/sluiceConfig.cmake
    ${PROJECT_BINARY_DIR}/sluiceConfigVersion.cmake
    DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/sluice)
  # What a static link needs, spelled -L DIR -l NAME: a library found by
  # path (/usr/lib/.../libuv.so, glibc's libpthread.a stub) becomes -l NAME,
  # so the linker picks the library kind the program links, and the
  # directory is named only when the linker would not search it.
  get_property(libs GLOBAL PROPERTY SLUICE_LINK_LIBS)
  set(dirs "")
  set(names pthread m)
  foreach(l ${libs})
    if(l MATCHES "::")
      message(FATAL_ERROR "sluice.pc: no pkg-config spelling for ${l}")
    elseif(IS_ABSOLUTE "${l}")
      get_filename_component(dir "${l}" DIRECTORY)
      get_filename_component(name "${l}" NAME_WE)
      string(REGEX REPLACE "^lib" "" name "${name}")
      if(NOT dir IN_LIST CMAKE_C_IMPLICIT_LINK_DIRECTORIES)
        list(APPEND dirs ${dir})
      endif()
      list(APPEND names ${name})
    else()
      list(APPEND names ${l})
    endif()
  endforeach()
  list(REMOVE_DUPLICATES dirs)
  list(REMOVE_DUPLICATES names)
  set(SLUICE_PC_LIBS_PRIVATE "")
  foreach(d ${dirs})
    string(APPEND SLUICE_PC_LIBS_PRIVATE "-L${d} ")
  endforeach()
  foreach(n ${names})
    string(APPEND SLUICE_PC_LIBS_PRIVATE "-l${n} ")
  endforeach()
  string(STRIP "${SLUICE_PC_LIBS_PRIVATE}" SLUICE_PC_LIBS_PRIVATE)
  # sluice.pc: the shared library (`pkg-config --static` adds the private
  # libraries for an install that has only the archive); sluice-static.pc:
  # the archive itself, whatever else is installed.
  foreach(pc sluice sluice-static)
    configure_file(${PROJECT_SOURCE_DIR}/cmake/${pc}.pc.in ${PROJECT_BINARY_DIR}/${pc}.pc @ONLY)
    install(FILES ${PROJECT_BINARY_DIR}/${pc}.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
  endforeach()
endfunction()
