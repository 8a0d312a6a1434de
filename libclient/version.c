/*
 * version.c - carmy_version(): the version this libcarmy was built as.
 */
#include "carmy.h"

#define EXPORT __attribute__((visibility("default")))

EXPORT const char *carmy_version(int *major, int *minor, int *patch)
{
	if (major != NULL)
		*major = CARMY_VERSION_MAJOR;
	if (minor != NULL)
		*minor = CARMY_VERSION_MINOR;
	if (patch != NULL)
		*patch = CARMY_VERSION_PATCH;
	return CARMY_VERSION_STRING;
}
