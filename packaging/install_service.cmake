# Writes ddprun-rdzv.service and /etc/default/ddprun-rdzv for the prefix of this install (run by
# `cmake --install` and by CPack; DESTDIR is honoured). The settings file follows the FHS: /etc
# for the /usr prefix (the package), PREFIX/etc otherwise. An existing settings file is the
# admin's and is kept (the package's upgrades keep it through dpkg's conffiles).
if(CMAKE_INSTALL_PREFIX STREQUAL "/usr")
  set(sysconfdir /etc)
else()
  set(sysconfdir ${CMAKE_INSTALL_PREFIX}/etc)
endif()
set(DDPRUN_BINDIR ${CMAKE_INSTALL_PREFIX}/bin)
set(DDPRUN_ENV_FILE ${sysconfdir}/default/ddprun-rdzv)
set(DDPRUN_TOKEN_FILE ${sysconfdir}/ddprun/rdzv-token)
set(unit $ENV{DESTDIR}${CMAKE_INSTALL_PREFIX}/lib/systemd/system/ddprun-rdzv.service)
message(STATUS "Installing: ${unit}")
configure_file(${DDPRUN_PACKAGING_DIR}/ddprun-rdzv.service.in ${unit} @ONLY)
set(env_file $ENV{DESTDIR}${DDPRUN_ENV_FILE})
if(EXISTS ${env_file})
  message(STATUS "Up-to-date (kept, the admin's): ${env_file}")
else()
  # file(INSTALL) puts DESTDIR in front of DESTINATION itself.
  file(INSTALL ${DDPRUN_PACKAGING_DIR}/ddprun-rdzv.default DESTINATION ${sysconfdir}/default
       RENAME ddprun-rdzv)
endif()
