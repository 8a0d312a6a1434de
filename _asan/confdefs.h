/* confdefs.h */
#define PACKAGE_NAME "carmy"
#define PACKAGE_TARNAME "carmy"
#define PACKAGE_VERSION "0.1.0"
#define PACKAGE_STRING "carmy 0.1.0"
#define PACKAGE_BUGREPORT ""
#define PACKAGE_URL ""
#define PACKAGE "carmy"
#define VERSION "0.1.0"
#define HAVE_STDIO_H 1
#define HAVE_STDLIB_H 1
#define HAVE_STRING_H 1
#define HAVE_INTTYPES_H 1
#define HAVE_STDINT_H 1
