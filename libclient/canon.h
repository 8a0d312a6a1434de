/*
 * canon.h - canonical msgpack and the fingerprint of a call.
 *
 * A retried call must be recognised as the same call even when the agent's
 * msgpack encoder writes it differently the second time: map keys in
 * another order, 5 as a uint16 instead of a fixint, a float32 instead of a
 * float64. So args and meta are fingerprinted in a canonical form that
 * erases every choice msgpack leaves to the encoder:
 *
 *   integers     smallest encoding; non-negative values in the unsigned
 *                family, negative ones in the signed family
 *   floats       float32 widened to float64 (exact, so no two values merge)
 *   str/bin/ext  header of the smallest width (fixext where it fits)
 *   arrays       elements in order, each canonical
 *   maps         entries sorted by the canonical bytes of their keys
 *                (memcmp, then shorter first); two keys with the same
 *                canonical bytes are an error, not a silent overwrite
 *
 * Input is untrusted: it is validated as it is re-encoded, by the same
 * rules wire_scan() applies to a message, without msgpack-c, so no header
 * can make Carmy allocate more than a small multiple of the input's length.
 */
#ifndef CARMY_CANON_H
#define CARMY_CANON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <msgpack.h>

#include "carmy.h"
#include "libclient/wire.h"

/* Containers nested deeper than this are refused; msgpack-c's own parser
 * stack holds exactly this many. */
#define CANON_MAX_DEPTH WIRE_MAX_DEPTH
/* An XXH3-128 digest in canonical (big-endian) byte order. */
#define CANON_FP_LEN 16

/*
 * Append the canonical encoding of the one msgpack object in buf/len to out.
 * buf/len must hold exactly one complete object, with no trailing bytes.
 * Returns 0; CARMY_EINVALID_ARGS if the bytes are malformed, truncated,
 * followed by trailing bytes, nested deeper than CANON_MAX_DEPTH, or hold a
 * map with two keys of equal canonical encoding; -EINVAL if out is NULL;
 * or -ENOMEM. On failure nothing is appended to out.
 * Thread-safe: no shared state.
 */
int canon_msgpack(const void *buf, size_t len, msgpack_sbuffer *out);


/*
 * XXH3-128 of the call's tool, canonical args and canonical meta, stored in
 * out as 16 big-endian bytes (XXH128_canonicalFromHash). Each part is
 * preceded by its length as 8 big-endian bytes, so bytes cannot move from
 * one part to the next. args or meta that are NULL with length 0 are
 * absent, which differs from an empty map. The identity parts of call are
 * not hashed. Returns 0; CARMY_EINVALID_ARGS if args or meta are not one
 * valid msgpack object (see canon_msgpack) or a NULL pointer comes with a
 * non-zero length; -EINVAL if call or out is NULL; or -ENOMEM.
 * Thread-safe: no shared state.
 */
int canon_fingerprint(const struct carmy_call *call,
		      uint8_t out[CANON_FP_LEN]);

/*
 * The raw print: XXH3-128, as for the fingerprint, over the call's tool, args
 * and meta exactly as given (under another domain tag, each part
 * length-delimited, absent parts as length 0). Equal raw prints mean equal
 * bytes, hence equal fingerprints, so a retry that sends the very same bytes
 * is recognised without the canonical re-encoding. Unequal raw prints prove
 * nothing: the fingerprint decides. The bytes are not validated here; a
 * present args or meta of length 0 (never valid msgpack) and a NULL pointer
 * with a non-zero length are refused with CARMY_EINVALID_ARGS. Returns 0,
 * -EINVAL if call or out is NULL, or -ENOMEM. Thread-safe.
 */
int canon_rawprint(const struct carmy_call *call, uint8_t out[CANON_FP_LEN]);

#endif /* CARMY_CANON_H */
