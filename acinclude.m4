# CARMY_SYSTEMD_DIR(VARIABLE, WHAT)
# ---------------------------------
# Where to install WHAT: --with-VARIABLE=DIR, or by default the directory
# pkg-config's systemd names as VARIABLE (systemdsystemunitdir,
# sysusersdir, tmpfilesdir), or nowhere with --with-VARIABLE=no or when
# pkg-config knows no systemd. Substitutes VARIABLE and defines the
# conditional HAVE_VARIABLE (upper case).
AC_DEFUN([CARMY_SYSTEMD_DIR], [
AC_ARG_WITH([$1],
  [AS_HELP_STRING([--with-$1=DIR],
    [install $2 in DIR (default: pkg-config --variable=$1 systemd; no: do not install them)])],
  [], [with_$1=auto])
AS_CASE([$with_$1],
  [auto|yes],
    [carmy_dir=`$PKG_CONFIG --variable=$1 systemd 2>/dev/null`
     AS_IF([test -z "$carmy_dir" && test "x$with_$1" = xyes],
           [AC_MSG_ERROR([--with-$1: pkg-config knows no systemd: name the directory])])
     AS_IF([test -z "$carmy_dir"], [carmy_dir=no])],
  [carmy_dir=$with_$1])
AC_MSG_CHECKING([where to install $2])
AC_MSG_RESULT([$carmy_dir])
AC_SUBST([$1], [$carmy_dir])
AM_CONDITIONAL(m4_toupper([HAVE_$1]), [test "x$carmy_dir" != xno])
])
